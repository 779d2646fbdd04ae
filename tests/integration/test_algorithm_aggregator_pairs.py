"""Every aggregator works with every clustering algorithm: a few rounds of each pair, in
one process (the local communicator), then stop-and-resume equal to an uninterrupted run
for the aggregator with state (FedAvgM's per-cluster velocity)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from runfile import assert_same_run

from distfl import config as cfg
from distfl.algorithms import algorithm_names, key_owners
from distfl.plugins import AGGREGATORS as PLUGGED
from distfl.runtime import run

pytestmark = pytest.mark.integration

ALGORITHMS = algorithm_names()
AGGREGATORS = PLUGGED.first_then_by_name("fedavg")  # the built-in ones


def build(algorithm: str, aggregator: str, out: Path, rounds: int = 4, **more):
    items = [
        f'algorithm.name="{algorithm}"',
        f'server.aggregator="{aggregator}"',
        f"run.rounds={rounds}",
        "eval.every=2",
        'run.progress="none"',
        f'run.out="{out}"',
        "data.num_clients=12",
        "data.samples_per_client=40",
        "server.clients_per_round=6",
        "data.groups=[{count = 6, alpha = 1000.0}, {count = 6, alpha = 1000.0, rotation = 180.0}]",
        "data.quantity_skew=0.5",  # unequal sizes: FairAvg's weights differ from FedAvg's
    ]
    # each algorithm's own keys, given to the algorithm that takes them
    for item in ("algorithm.warmup=1", "algorithm.emd_steps=4", "algorithm.emd_samples=8",
                 "algorithm.min_clients=2"):  # fmt: skip
        if algorithm in key_owners(item.split("=")[0].split(".")[1]):
            items.append(item)
    if aggregator == "fedprox":
        items.append("train.prox_mu=0.01")
    items += [f"{k}={v}" for k, v in more.items()]
    return cfg.load(preset="digits", overrides=items)


@pytest.mark.parametrize("aggregator", AGGREGATORS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_pair_runs(tmp_path, algorithm, aggregator):
    out = tmp_path / "run.h5"
    summary = run(build(algorithm, aggregator, out), stream=io.StringIO())
    assert summary["rounds"] == 4
    with h5py.File(out, "r") as f:
        models = f["final/models"][()]
        assert np.isfinite(models).all()
        assert len(f["final/leaves"][()]) == models.shape[0] >= 1
        assert (f["metrics/federation_bytes"][()] > 0).all()
        acc = f["metrics/accuracy"][()]
        assert np.isfinite(acc[1::2]).all()  # evaluated every 2 rounds


def test_aggregators_change_the_result(tmp_path):
    finals = {}
    for aggregator in AGGREGATORS:
        out = tmp_path / f"{aggregator}.h5"
        run(build("none", aggregator, out), stream=io.StringIO())
        with h5py.File(out, "r") as f:
            finals[aggregator] = f["final/models"][()]
    for a in AGGREGATORS:
        for b in AGGREGATORS:
            if a < b:
                assert not np.array_equal(finals[a], finals[b]), (a, b)


@pytest.mark.parametrize("algorithm", ["fedgwc", "ifca"])
def test_fedavgm_state_survives_resume(tmp_path, algorithm):
    straight = tmp_path / "straight.h5"
    run(build(algorithm, "fedavgm", straight, rounds=6), stream=io.StringIO())
    part = tmp_path / "part.h5"
    run(build(algorithm, "fedavgm", part, rounds=4), stream=io.StringIO())
    resumed = tmp_path / "resumed.h5"
    config = build(algorithm, "fedavgm", resumed, rounds=6)
    run(config, resume=str(part), stream=io.StringIO())
    with h5py.File(part, "r") as f:  # one velocity per cluster model, kept in /state
        ids = json.loads(f["state/aggregator"].attrs["ids"])
        assert sorted(ids) == sorted(json.loads(f["state"].attrs.get("model_ids", "[]")) or ids)
        assert f["state/aggregator/velocity"].shape == (len(ids), f["final/models"].shape[1])
    assert_same_run(straight, resumed, tops=("metrics", "hierarchy", "final", "clients"))
