"""The separate seeds (``run.data_seed``, ``run.init_seed``, ``run.sampling_seed``) on real
runs: unset (-1), or each set to ``run.seed``'s value, a run writes the same run file bit
for bit (models, metrics, hierarchy, state; only the state's config digest, which an
explicit key enters, differs); changing one seed keeps the parts of the others (the
partition, the initial model, the cohorts); EMD-CFL's workers draw the anchors the server
draws from the sampling seed."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from runfile import assert_same, fedgwc_toml, read_run

import distfl.runtime.server as server_module
from distfl.algorithms.emdcfl.algorithm import draw_anchors

pytestmark = pytest.mark.integration

SEEDS = ("data_seed", "init_seed", "sampling_seed")
#: the server's build_algorithm, which :func:`observed` wraps
BUILD_ALGORITHM = server_module.build_algorithm

#: FedClust with a probe sample of the clients (drawn by the algorithm), the initial model
#: rebuilt on the worker, and groups whose transforms are drawn per client and per group
FEDCLUST = [
    'algorithm.name="fedclust"', "algorithm.probe_clients=6", "data.num_clients=12",
    "server.clients_per_round=4", "run.rounds=4", "eval.every=2", "run.seed=1",
    "data.groups=[{count = 6, alpha = 1000.0, noise = 0.5}, "
    "{count = 6, alpha = 1000.0, rotation = 180.0, permute_labels = true, patch = 2}]",
]  # fmt: skip


def everything(path) -> dict:
    """What :func:`read_run` reads, with the root's @seed and the state's own attributes."""
    out = read_run(path)
    with h5py.File(path, "r") as f:
        out.update({f"state@{k}": v for k, v in f["state"].attrs.items()})
        out["@seed"] = f.attrs["seed"]
    return out


def run(helpers, tmp_path, name: str, *sets: str, config=None):
    """``distfl run`` in this process; the run file's path."""
    out = tmp_path / f"{name}.h5"
    args = ["--out", str(out), "--set", 'run.progress="none"']
    if config is not None:
        args += ["--config", str(config)]
    for item in sets:
        args += ["--set", item]
    proc = helpers.cli(tmp_path, "run", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.parametrize("scenario", ["fedgwc", "fedclust"])
def test_seeds_unset_or_set_to_run_seed_write_the_same_run(helpers, tmp_path, scenario):
    """FedGWC on digits, splitting at round 19 (seed 3), and FedClust with transforms: with
    the seeds unset, with each set to run.seed and with all three set, the same bits."""
    if scenario == "fedgwc":
        config = tmp_path / "fedgwc.toml"
        config.write_text(fedgwc_toml(24, "none"))
        sets, seed = [], 3
    else:
        config, sets, seed = None, FEDCLUST, 1
    unset = everything(run(helpers, tmp_path, "unset", *sets, config=config))
    if scenario == "fedgwc":
        assert any(k.endswith("@split_round") and v == 19 for k, v in unset.items())
    variants = {key: [f"run.{key}={seed}"] for key in SEEDS}
    variants["all"] = [f"run.{key}={seed}" for key in SEEDS]
    expected = {k: v for k, v in unset.items() if k != "state@config_sha256"}
    for name, extra in variants.items():
        got = everything(run(helpers, tmp_path, name, *sets, *extra, config=config))
        # an explicit key enters the config's digest; nothing it computes changes
        assert got.pop("state@config_sha256") != unset["state@config_sha256"], name
        assert got["@seed"] == seed
        assert_same(expected, got)


def observed(helpers, tmp_path, monkeypatch, name: str, *sets: str) -> dict:
    """A FedGWC run of 3 rounds on 9 digits clients, 3 a round: its partition (from the run
    file), the initial model and the cohort of each round (as the server's algorithm is
    given and plans them)."""
    seen: dict = {"cohorts": []}

    def recording(config, federation=None, **kw):
        algorithm = BUILD_ALGORITHM(config, federation, **kw)
        seen["initial"] = np.array(federation.initial_model, copy=True)
        plan = algorithm.plan

        def planned(round_index):
            p = plan(round_index)
            seen["cohorts"].append(sorted(p.train))
            return p

        algorithm.plan = planned
        return algorithm

    monkeypatch.setattr(server_module, "build_algorithm", recording)
    tiny = [
        'algorithm.name="fedgwc"', "data.num_clients=9", "data.samples_per_client=30",
        "data.groups=[{count = 3, alpha = 1000.0}, {count = 3, alpha = 0.5}, "
        "{count = 3, alpha = 1000.0, permute_labels = true}]",
        "train.local_steps=2", "server.clients_per_round=3", "run.rounds=3", "run.seed=1",
    ]  # fmt: skip
    out = run(helpers, tmp_path, name, *tiny, *sets)
    with h5py.File(out, "r") as f:
        seen["partition"] = {k: f[f"clients/{k}"][()] for k in
                             ("class_counts", "num_train", "num_test", "group")}  # fmt: skip
    assert len(seen["cohorts"]) == 3
    return seen


def same_partition(a: dict, b: dict) -> bool:
    return all(np.array_equal(a["partition"][k], b["partition"][k]) for k in a["partition"])


def test_changing_one_seed_keeps_the_parts_of_the_others(helpers, tmp_path, monkeypatch):
    base = observed(helpers, tmp_path, monkeypatch, "base")
    sampling = observed(helpers, tmp_path, monkeypatch, "sampling", "run.sampling_seed=7")
    init = observed(helpers, tmp_path, monkeypatch, "init", "run.init_seed=7")
    data = observed(helpers, tmp_path, monkeypatch, "data", "run.data_seed=7")
    # the sampling seed: the same partition and initial model, other cohorts
    assert same_partition(sampling, base)
    assert np.array_equal(sampling["initial"], base["initial"])
    assert sampling["cohorts"] != base["cohorts"]
    # the initialisation seed: the same partition and cohort, another initial model
    assert same_partition(init, base)
    assert init["cohorts"][0] == base["cohorts"][0]
    assert not np.array_equal(init["initial"], base["initial"])
    # the data seed: another partition, the same initial model and first cohort
    assert not same_partition(data, base)
    assert np.array_equal(data["initial"], base["initial"])
    assert data["cohorts"][0] == base["cohorts"][0]


def test_emdcfl_workers_draw_the_servers_anchors_from_the_sampling_seed(helpers, tmp_path):
    """With run.sampling_seed set, the anchors' rows the workers compute are the all-pairs
    round's distances at the anchors the server drew (the workers draw the same ones)."""
    sets = ('algorithm.name="emdcfl"', "algorithm.steps=10", "data.num_clients=12",
            "data.groups=[{count = 12, alpha = 1000.0}]", "server.clients_per_round=4",
            "run.rounds=1", "run.sampling_seed=5")  # fmt: skip
    assert not np.array_equal(draw_anchors(12, 4, 5), draw_anchors(12, 4, 0))
    exact = run(helpers, tmp_path, "exact", *sets)
    anchored = run(helpers, tmp_path, "anchored", *sets, "algorithm.anchors=4")
    with h5py.File(exact, "r") as e, h5py.File(anchored, "r") as a:
        d = e["hierarchy/0/distances"][()]
        anchors = a["hierarchy/0/anchors"][()]
        rows = a["hierarchy/0/anchor_distances"][()]
    assert np.array_equal(anchors, draw_anchors(12, 4, 5))
    assert np.array_equal(rows[:, :4], d[:, anchors])
    assert np.array_equal(rows[:, 4:], d[anchors, :].T)
