"""``run.data_seed``, ``run.init_seed`` and ``run.sampling_seed``: unset (-1) each is
``run.seed``; set, each seeds its part of the run alone, exactly as ``run.seed`` of that
value would: the partition, a generated dataset and the clients' transformed data; the
initial models of every offset, also as FedClust's workers rebuild them; the algorithm's
seed. A value below -1 is refused in one line (exit code 2), and the keys at -1 stay out
of the state's config digest."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from runfile import format3_digest

from distfl.algorithms import build_algorithm
from distfl.algorithms.fedclust.client import FedClustClient
from distfl.cli import main
from distfl.config import load
from distfl.data import load_dataset, make_partition
from distfl.models import flat_params
from distfl.runfile.digest import config_digest
from distfl.runtime.seeding import ModelSeeding
from distfl.runtime.worker import Worker

SEEDS = ("data_seed", "init_seed", "sampling_seed")
CPU = torch.device("cpu")
#: digits clients whose data every transform drawn from the seed changes
GROUPS = (
    "data.groups=[{count = 4, alpha = 0.5, noise = 0.3, patch = 2}, "
    "{count = 4, alpha = 1000.0, permute_labels = true}]"
)


def config(*sets: str, dataset: str = "digits"):
    base = [f'data.dataset="{dataset}"', "data.num_clients=8", "data.samples_per_client=40"]
    return load(overrides=[*base, "server.clients_per_round=3", GROUPS, *sets])


def test_an_unset_seed_is_run_seeds():
    run = config("run.seed=11").run
    assert (run.data_seed, run.init_seed, run.sampling_seed) == (-1, -1, -1)
    assert run.effective_data_seed() == run.effective_init_seed() == 11
    assert run.effective_sampling_seed() == 11
    run = config("run.seed=11", "run.data_seed=0", "run.init_seed=5", "run.sampling_seed=7").run
    assert (run.effective_data_seed(), run.effective_init_seed()) == (0, 5)
    assert (run.effective_sampling_seed(), run.seed) == (7, 11)


def worker_data(cfg) -> list:
    """Every client's data as a worker materialises it (transforms applied)."""
    dataset = load_dataset(cfg)
    partition = make_partition(cfg, dataset)
    worker = Worker(cfg, dataset, partition, 0, device=CPU, comm_device=CPU)
    return [worker.data(k) for k in range(cfg.data.num_clients)]


def same_data(a: list, b: list) -> bool:
    return all(
        torch.equal(getattr(x, f), getattr(y, f))
        for x, y in zip(a, b, strict=True)
        for f in ("x_train", "y_train", "x_test", "y_test")
    )


def test_the_data_seed_draws_the_clients_data_as_run_seed_would():
    """The partition and the transforms drawn per client (noise) and per group (patch
    colours, label permutation), as the worker materialises them."""
    own = worker_data(config("run.seed=0", "run.data_seed=5"))
    assert same_data(own, worker_data(config("run.seed=5")))
    assert same_data(own, worker_data(config("run.seed=9", "run.data_seed=5")))
    assert not same_data(own, worker_data(config("run.seed=0")))


def test_the_data_seed_draws_a_generated_dataset_as_run_seed_would():
    sets = ("data.quantity_skew=0.5", "model.hidden=[]", 'train.loss="hinge"')
    own = config("run.seed=0", "run.data_seed=3", *sets, dataset="gaussian")
    same = config("run.seed=3", *sets, dataset="gaussian")
    other = config("run.seed=0", *sets, dataset="gaussian")
    a, b, c = (load_dataset(x) for x in (own, same, other))
    assert np.array_equal(a.owner_sizes, b.owner_sizes)
    assert np.array_equal(a.x[np.arange(len(a.y))], b.x[np.arange(len(b.y))])
    assert not np.array_equal(a.x[np.arange(len(a.y))], c.x[np.arange(len(c.y))])


def test_the_init_seed_draws_every_offsets_model_as_run_seed_would():
    own = ModelSeeding(config("run.seed=0", "run.init_seed=4"), (1, 8, 8), 10)
    same = ModelSeeding(config("run.seed=4"), (1, 8, 8), 10)
    other = ModelSeeding(config("run.seed=0"), (1, 8, 8), 10)
    for offset in (0, 1, 3):
        a, b = flat_params(own.build(offset)), flat_params(same.build(offset))
        assert torch.equal(a, b)
        assert not torch.equal(a, flat_params(other.build(offset)))


def test_fedclusts_workers_rebuild_the_init_seeds_model():
    """FedClust's client half rebuilds the server's initial model (offset 0) on its worker:
    from the initialisation seed, not run.seed."""
    cfg = config('algorithm.name="fedclust"', "run.seed=0", "run.init_seed=9")
    context = types.SimpleNamespace(
        config=cfg, dataset=types.SimpleNamespace(input_shape=(1, 8, 8), num_classes=10)
    )
    half = FedClustClient(cfg.algorithm.params, context)
    server = flat_params(ModelSeeding(cfg, (1, 8, 8), 10).build(0))
    assert torch.equal(half.initial_model(), server)
    plain = flat_params(ModelSeeding(config("run.seed=0"), (1, 8, 8), 10).build(0))
    assert not torch.equal(server, plain)


def test_the_sampling_seed_is_the_algorithms_seed():
    alg = build_algorithm(config('algorithm.name="fedgwc"', "run.seed=2", "run.sampling_seed=8"))
    same = build_algorithm(config('algorithm.name="fedgwc"', "run.seed=8"))
    assert alg.seed == 8 and alg.federation.seed == 8
    assert sorted(alg.plan(1).train) == sorted(same.plan(1).train)
    assert build_algorithm(config('algorithm.name="fedgwc"', "run.seed=2")).seed == 2


@pytest.mark.parametrize("key", SEEDS)
@pytest.mark.parametrize("value", ["-2", "-9223372036854775808"])
def test_a_seed_below_minus_one_is_one_line(capsys, tmp_path, monkeypatch, key, value):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--preset", "digits", "--set", f"run.{key}={value}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith("distfl: error: "), err
    assert f"run.{key} = {value}" in err, err
    assert "-1 (unset: run.seed) or a non-negative integer" in err, err
    assert not list(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("key", SEEDS)
def test_minus_one_zero_and_the_largest_seed_are_taken(key):
    for value in (-1, 0, 2**63 - 1):
        assert getattr(load(overrides=[f"run.{key}={value}"]).run, key) == value


def test_the_seeds_unset_keep_the_digest_of_a_file_from_before_them():
    """A run file written before the keys holds a digest computed without them: unset, the
    digest is that one (the file still matches its stored config); set, even to run.seed's
    value, each enters it."""
    cfg = load(preset="digits")
    assert config_digest(cfg) == format3_digest(cfg)
    digests = {config_digest(cfg)}
    for key in SEEDS:
        digests.add(config_digest(load(preset="digits", overrides=[f"run.{key}=0"])))
    assert len(digests) == 4
