"""The Local and FedAvg + fine-tuning baselines in real runs on digits.

Local: a client's final model is its own local training alone, recomputed here from the
initial model, its own data and the rounds it was drawn in (nobody else's data enters it);
a client never drawn holds the initial model. FedAvg + fine-tuning: the global model is
FedAvg's to the bit, the recorded evaluation is not, and each client's recorded accuracy is
that of the global model fine-tuned on its own train split as recomputed here. Both resume
to the same bits and give the same bits under torchrun (3 ranks) as in one process.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from cliproc import assert_one_line_error
from runfile import assert_same_run
from timing import limit

from distfl import config as cfg
from distfl.data import load_clients, load_dataset, make_partition
from distfl.models import build_model, flat_params
from distfl.runtime import run
from distfl.train import SequentialTrainer, client_seed, evaluate, finetune_seed

pytestmark = pytest.mark.integration

CPU = torch.device("cpu")
FEDERATION = [
    "data.num_clients=12",
    "server.clients_per_round=3",
    "run.rounds=4",
    "eval.every=2",
    'run.progress="none"',
    "run.seed=5",
    "data.groups=[{count = 6, alpha = 1000.0}, {count = 6, alpha = 1000.0, rotation = 180.0}]",
]


def build(algorithm: str, out: Path, *more: str):
    items = [f'algorithm.name="{algorithm}"', *FEDERATION, f'run.out="{out}"', *more]
    return cfg.load(preset="digits", overrides=items)


def go(algorithm: str, out: Path, *more: str) -> Path:
    run(build(algorithm, out, *more), stream=io.StringIO())
    return out


def clients_of(config):
    dataset = load_dataset(config)
    part = make_partition(config, dataset)
    data = load_clients(dataset, part, range(config.data.num_clients), CPU,
                        groups=config.groups, seed=config.run.seed)  # fmt: skip
    torch.manual_seed(config.run.seed)  # the server's initial model (offset 0)
    model = build_model(config.model.name, dataset.input_shape, dataset.num_classes,
                        hidden=config.model.hidden)  # fmt: skip
    return data, model, flat_params(model)


def test_local_models_are_each_clients_own_training(tmp_path):
    out = go("local", tmp_path / "local.h5", 'train.trainer="sequential"')
    config = build("local", out, 'train.trainer="sequential"')
    with h5py.File(out, "r") as f:
        leaves = [x.decode() for x in f["final/leaves"][()]]
        models = f["final/models"][()]
        assignment = f["final/assignment"][()]
        rounds = f["metrics/clusters/round"][()]
        cluster = [x.decode() for x in f["metrics/clusters/cluster"][()]]
        sampled = f["metrics/clusters/sampled"][()]
        groups_written = len(f["hierarchy"])
    K = config.data.num_clients
    assert sorted(leaves, key=int) == [str(k) for k in range(K)] and groups_written == K
    assert [leaves[assignment[k]] for k in range(K)] == [str(k) for k in range(K)]
    # one row per cluster trained in a round, none for the idle ones
    assert (sampled == 1).all() and len(rounds) == 4 * 3
    data, model, start = clients_of(config)
    trainer = SequentialTrainer(model, config.train, CPU)
    drawn = set()
    for k in range(K):
        theta = start.clone()
        mine = sorted(int(t) for t, c in zip(rounds, cluster, strict=True) if c == str(k))
        for t in mine:
            theta, _ = trainer.train(theta, data[k], seed=client_seed(config.run.seed, t, k))
        got = torch.from_numpy(models[assignment[k]])
        if mine:
            drawn.add(k)
            assert not torch.equal(got, start), k
            # a one-member cluster's aggregate is its member's model (exact sums: to the
            # grid's last bit at most)
            torch.testing.assert_close(got, theta, rtol=0, atol=1e-6)
        else:
            assert torch.equal(got, start), f"client {k} was never drawn"
    assert 0 < len(drawn) < K  # both kinds are in this run
    finals = {models[assignment[k]].tobytes() for k in drawn}
    assert len(finals) == len(drawn)  # every trained client's model is its own


def test_fedavg_ft_trains_fedavgs_model_and_evaluates_it_fine_tuned(tmp_path):
    plain = go("none", tmp_path / "none.h5", 'train.trainer="sequential"')
    tuned = go("fedavg_ft", tmp_path / "ft.h5", 'train.trainer="sequential"',
               "algorithm.finetune_steps=6")  # fmt: skip
    training = ("final", "state", "metrics/train_loss_first", "metrics/train_loss_last")
    with h5py.File(plain, "r") as a, h5py.File(tuned, "r") as b:
        assert np.array_equal(a["final/models"][()], b["final/models"][()])
        assert np.array_equal(a["state/models"][()], b["state/models"][()])
        for key in training[2:]:
            assert np.array_equal(a[key][()], b[key][()]), key
        assert not np.array_equal(a["clients/accuracy"][()], b["clients/accuracy"][()])
        acc_plain = a["metrics/accuracy"][()]
        acc_tuned = b["metrics/accuracy"][()]
        recorded = b["clients/accuracy"][()]
        global_model = torch.from_numpy(b["final/models"][0])
    assert not np.array_equal(acc_plain[1::2], acc_tuned[1::2])
    config = build("fedavg_ft", tuned, 'train.trainer="sequential"', "algorithm.finetune_steps=6")
    data, model, _ = clients_of(config)
    tune = SequentialTrainer(model, dataclasses.replace(config.train, local_steps=6), CPU)
    R = config.run.rounds
    for k in range(config.data.num_clients):
        theta, _ = tune.train(global_model, data[k], seed=finetune_seed(config.run.seed, R, k))
        assert not torch.equal(theta, global_model)
        balanced, _, _ = evaluate(model, theta, data[k])
        assert recorded[k] == pytest.approx(balanced, abs=1e-12), k


@pytest.mark.parametrize("algorithm", ["local", "fedavg_ft"])
def test_resume_gives_the_uninterrupted_bits(tmp_path, algorithm):
    straight = go(algorithm, tmp_path / "straight.h5")
    part = go(algorithm, tmp_path / "part.h5", "run.rounds=2")
    resumed = tmp_path / "resumed.h5"
    run(build(algorithm, resumed), resume=str(part), stream=io.StringIO())
    assert_same_run(straight, resumed, tops=("metrics", "hierarchy", "final", "clients", "state"))


@pytest.mark.parametrize("algorithm", ["local", "fedavg_ft"])
def test_torchrun_world_of_three_gives_the_same_bits(helpers, tmp_path, algorithm):
    alone = go(algorithm, tmp_path / "alone.h5")
    out = tmp_path / "world3.h5"
    sets = [a for s in [f'algorithm.name="{algorithm}"', *FEDERATION] for a in ("--set", s)]
    cmd = [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
           "-m", "distfl", "run", "--preset", "digits", *sets, "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=helpers.clean_env(), capture_output=True,
                          text=True, timeout=limit(300))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with h5py.File(out, "r") as f:
        assert int(f.attrs["world_size"]) == 3
    assert_same_run(alone, out, tops=("metrics", "hierarchy", "final", "clients", "state"))


#: a population 20 times the 30 clients that 3 rounds of 10 train: the server's rows, models
#: and memory follow the cohort, not the population, as at iNaturalist's 2,714 of the
#: FedGWC paper (docs/algorithms.md), whose run file (a model and a /hierarchy group a
#: client) takes minutes to write and read back on 2 cores
K = 600
#: two planted groups, the second with permuted labels
GROUPS = (
    "data.groups=[{count = 450, alpha = 1000.0}, "
    "{count = 150, alpha = 1000.0, permute_labels = true}]"
)


def cli(helpers, tmp_path, algorithm: str, *sets: str, rounds: int = 3):
    """A run of its own process: the peak memory it records is the run's."""
    out = tmp_path / f"{algorithm}.h5"
    items = [f'algorithm.name="{algorithm}"', f"data.num_clients={K}", GROUPS,
             "server.clients_per_round=10", f"run.rounds={rounds}", f"eval.every={rounds}",
             "eval.clients=200", 'run.progress="none"', *sets]  # fmt: skip
    args = ["--preset", "digits", *[a for s in items for a in ("--set", s)], "--out", str(out)]
    proc = subprocess.run(helpers.distfl_cmd(*args), cwd=tmp_path, env=helpers.clean_env(),
                          capture_output=True, text=True, timeout=limit(300))  # fmt: skip
    return proc, out


def test_local_where_the_population_is_far_larger_than_the_cohort(helpers, tmp_path):
    proc, out = cli(helpers, tmp_path, "local")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with h5py.File(out, "r") as f:
        models = f["final/models"][()]
        assignment = f["final/assignment"][()]
        sampled = f["metrics/clusters/sampled"][()]
        trained = {int(c) for c in f["metrics/clusters/cluster"][()]}
        rss = f["timing/rss_mb"][()]
        evaluated = np.isfinite(f["clients/accuracy"][()]).sum()
        hierarchy = len(f["hierarchy"])
    assert models.shape[0] == K == hierarchy and len(assignment) == K
    # rows for the 30 clusters trained in 3 rounds of 10, not 3 × K
    assert len(sampled) == 30 and (sampled == 1).all() and len(trained) <= 30
    idle = [k for k in range(K) if k not in trained]
    start = models[assignment[idle[0]]]
    assert all(np.array_equal(models[assignment[k]], start) for k in idle)
    assert all(not np.array_equal(models[assignment[k]], start) for k in trained)
    assert evaluated == 200
    assert rss.max() < 1536, f"peak resident memory {rss.max():.0f} MiB"
    # the clustering metrics of K singletons: ARI 0, the Wasserstein scores missing
    shown = helpers.cli(tmp_path, "inspect", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "ARI 0.000" in shown.stdout and "WAS        n/a" in shown.stdout, shown.stdout[-2000:]


def test_a_model_per_client_that_cannot_fit_is_refused_before_any_work(helpers, tmp_path):
    out = tmp_path / "huge.h5"
    args = ["--preset", "digits", "--set", 'algorithm.name="local"', "--set",
            "data.num_clients=1000000", "--set", 'model.name="cnn"', "--out", str(out)]  # fmt: skip
    proc = helpers.cli(tmp_path, "run", *args)
    assert_one_line_error(proc, "data.num_clients = 1000000: the server's 1,000,000 cluster "
                          "models", "clients fit")  # fmt: skip
    assert not out.exists()


def test_fedavg_ft_where_the_population_is_far_larger_than_the_cohort(helpers, tmp_path):
    proc, out = cli(helpers, tmp_path, "fedavg_ft")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with h5py.File(out, "r") as f:
        assert f["final/models"].shape[0] == 1
        assert np.isfinite(f["clients/accuracy"][()]).sum() == 200
        assert f["timing/rss_mb"][()].max() < 1536
