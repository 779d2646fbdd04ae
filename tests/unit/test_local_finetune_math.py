"""The Local and FedAvg + fine-tuning baselines' server halves and what the runtime reads of
them: local's one cluster per client and its sampling (FedAvg's), the K models the memory
check counts and refuses, fedavg_ft's fine-tuning steps and their refusals, their cost in
the evaluation's note, and the fine-tuning seed."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import restore_from

from distfl import config as cfg
from distfl.algorithms import algorithm_class
from distfl.algorithms.fedavg_ft import FedAvgFT, FedAvgFTParams
from distfl.algorithms.local import Local
from distfl.algorithms.none import NoClustering
from distfl.errors import ConfigError
from distfl.runtime.capacity import check_sizes, evaluation_note, size_bytes, size_terms
from distfl.train import client_seed, finetune_seed


def test_local_is_one_singleton_cluster_per_client():
    local = Local(num_clients=7, clients_per_round=3, seed=0)
    leaves = local.tree.leaves()
    assert sorted(leaves, key=int) == [str(k) for k in range(7)]
    for cid, members in leaves.items():
        assert members.tolist() == [int(cid)]
    assert local.initial_models() == dict.fromkeys(leaves, 0)  # one initial model for all


def test_local_draws_fedavgs_clients_each_from_its_own_model():
    local = Local(num_clients=50, clients_per_round=4, seed=9)
    fedavg = NoClustering(num_clients=50, clients_per_round=4, seed=9)
    seen = set()
    for t in range(1, 30):
        plan, same = local.plan(t), fedavg.plan(t)
        assert sorted(plan.train) == sorted(same.train)
        assert all(cid == str(k) for k, cid in plan.train.items())
        seen |= set(plan.train)
    assert 4 < len(seen) < 50  # the rounds vary; most clients are drawn, not every one


def test_local_state_resumes_its_sampling():
    a = Local(num_clients=30, clients_per_round=5, seed=1)
    for t in range(1, 4):
        a.plan(t)
    b = Local(num_clients=30, clients_per_round=5, seed=1)
    restore_from(b, a)
    assert [a.plan(t).train for t in range(4, 8)] == [b.plan(t).train for t in range(4, 8)]


def digits(algorithm: str, clients: int, *more: str):
    return cfg.load(preset="digits", overrides=[
        f'algorithm.name="{algorithm}"', f"data.num_clients={clients}",
        f"data.groups=[{{count = {clients}, alpha = 1000.0}}]", *more,
    ])  # fmt: skip


def test_the_memory_check_counts_a_model_per_client():
    assert algorithm_class("local").held_models(Local.Params(), num_clients=2714) == 2714
    for name in ("none", "fedavg_ft", "ifca", "fedgwc"):
        cls = algorithm_class(name)
        assert cls.held_models(cls.Params(), num_clients=2714) == 0, name
    small = size_terms(digits("local", 1000))["held_models"][0]
    large = size_terms(digits("local", 3000))["held_models"][0]
    assert large == 3 * small > 1000 * 4810 * 4  # at least one float32 model of 4,810 each
    assert "held_models" not in size_terms(digits("none", 1000))


def test_a_million_local_models_are_refused_in_one_line_saying_what_fits():
    available = 8 * 2**30
    check_sizes(digits("none", 1_000_000), available)  # FedAvg's one model fits
    with pytest.raises(ConfigError) as info:
        check_sizes(digits("local", 1_000_000), available)
    line = str(info.value)
    assert "\n" not in line and line.startswith("data.num_clients = 1000000: the server's "
                                               "1,000,000 cluster models"), line  # fmt: skip
    fits = int(line.split("at most about ")[1].split(" clients fit")[0].replace(",", ""))
    assert 10_000 < fits < 1_000_000
    # what it says fits does, and a tenth more does not
    assert size_bytes(digits("local", fits)) <= available
    assert size_bytes(digits("local", int(fits * 1.1))) > available


def test_fedavg_ft_fine_tunes_its_steps_or_a_rounds_local_steps():
    assert FedAvgFT.evaluation_finetune(FedAvgFTParams(finetune_steps=3), local_steps=8) == 3
    assert FedAvgFT.evaluation_finetune(FedAvgFTParams(), local_steps=8) == 8
    for cls in (NoClustering, Local):
        assert cls.evaluation_finetune(cls.Params(), local_steps=8) == 0
    c = cfg.load(preset="digits", overrides=['algorithm.name="fedavg_ft"',
                                             "algorithm.finetune_steps=5"])  # fmt: skip
    assert c.algorithm.params.finetune_steps == 5


@pytest.mark.parametrize("value", ["-1", "true", "1.5"])
def test_a_bad_finetune_steps_is_refused_in_one_line(value):
    with pytest.raises(ConfigError) as info:
        cfg.load(preset="digits", overrides=['algorithm.name="fedavg_ft"',
                                             f"algorithm.finetune_steps={value}"])  # fmt: skip
    line = str(info.value)
    assert "\n" not in line and line.startswith("algorithm.finetune_steps = "), line


def gaussian(algorithm: str, *more: str):
    return cfg.load(preset="default", overrides=[
        'data.dataset="gaussian"', "data.num_clients=1000000",
        "data.groups=[{count = 500000, alpha = 1000.0}, {count = 500000, alpha = 1000.0}]",
        "server.clients_per_round=1000", "run.rounds=20", "eval.every=1000",
        'eval.clients="all"', f'algorithm.name="{algorithm}"', *more,
    ])  # fmt: skip


def times(note: str) -> float:
    return float(note.split("cost about ")[1].split(" times")[0].replace(",", ""))


def test_the_evaluations_cost_note_counts_the_fine_tuning():
    plain = times(evaluation_note(gaussian("none")))
    S = gaussian("none").train.local_steps
    # f steps of min(B, n) samples for each of the n = 10^6 evaluated clients, against 20
    # rounds of 1,000 clients training S steps of as many samples: 10^6 f / (20,000 S) more
    for f in (S, 4 * S):
        tuned = times(evaluation_note(gaussian("fedavg_ft", f"algorithm.finetune_steps={f}")))
        assert tuned - plain == pytest.approx(50 * f / S, abs=1.0), f
    assert times(evaluation_note(gaussian("fedavg_ft"))) == pytest.approx(plain + 50, abs=1.0)


def test_the_fine_tuning_seed_is_the_clients_and_rounds_alone():
    assert finetune_seed(3, 7, 11) == finetune_seed(3, 7, 11)
    seeds = {finetune_seed(s, t, k) for s in (0, 1) for t in (1, 2) for k in (0, 5)}
    assert len(seeds) == 8
    assert finetune_seed(3, 7, 11) != client_seed(3, 7, 11)  # not its training's draws
    assert 0 <= finetune_seed(3, 7, 11) < 2**63
    assert np.int64(finetune_seed(0, 0, 0)) >= 0


def test_the_evaluation_places_clients_by_their_test_split_and_fine_tuning():
    import types

    from distfl.runtime.evaluation import Evaluation

    num_test = np.array([10, 20, 5])
    num_train = np.array([100, 30, 3])

    def server(algorithm, *more):
        c = cfg.load(preset="digits", overrides=[
            f'algorithm.name="{algorithm}"', "train.batch_size=32", "train.local_steps=4",
            *more])  # fmt: skip
        cls = algorithm_class(algorithm)
        return types.SimpleNamespace(
            config=c, num_test=num_test, algorithm=cls(num_clients=3, clients_per_round=1,
                                                       seed=0, params=c.algorithm.params),
            newcomers=types.SimpleNamespace(num_train=num_train, num_test=num_test),
        )  # fmt: skip

    assert Evaluation.cost(server("none")).tolist() == [10, 20, 5]
    # 3 passes of min(32, n_k) samples for each of the 4 steps (finetune_steps = 0: S = 4)
    assert Evaluation.cost(server("fedavg_ft")).tolist() == [
        10 + 3 * 4 * 32, 20 + 3 * 4 * 30, 5 + 3 * 4 * 3,
    ]  # fmt: skip
    tuned = server("fedavg_ft", "algorithm.finetune_steps=2")
    assert Evaluation.cost(tuned).tolist() == [10 + 192, 20 + 180, 5 + 18]
