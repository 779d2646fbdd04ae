"""A population much larger than its cohort: lazy clients, per-round balanced placement,
sampled evaluation and a tiny client cache, under real launchers.

One config (300 clients, 15 per round, IFCA's probes and training, 60 clients evaluated
per evaluation, a 1 MiB cache that holds about 40 clients) gives the same bits at W=1,
under torchrun W=3 and mpiexec W=3 with balanced placement, under torchrun W=3 with static
shards, with a cache large enough for everyone, and when resumed under another launcher.
The W=1 runs (the reference, the large cache, and the first half of the resumed run) are
the code of ``distfl run`` in the test's process; the W=3 runs are real launches.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from runfile import assert_same_run, read_run
from timing import limit

pytestmark = pytest.mark.integration

ROUNDS = 6

CONFIG = f"""
[run]
seed = 3
rounds = {ROUNDS}
progress = "lines"

[data]
num_clients = 300
samples_per_client = 80
cache_mb = 1

[[data.groups]]
count = 200
alpha = 1000.0

[[data.groups]]
count = 100
alpha = 1000.0
permute_labels = true

[train]
local_steps = 4

[server]
clients_per_round = 15

[algorithm]
name = "ifca"
num_clusters = 2
init = "random"  # every round samples 15 (the k-means++ start's round 1 trains all 300)

[eval]
every = 2
clients = 60
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers) -> dict[str, Path]:
    """The launches through the launch scripts, one at a time, while the one-process runs
    (the code of ``distfl run``, W=1) run in this process beside them; then the second half
    of "resumed" under torchrun."""
    tmp = tmp_path_factory.mktemp("population")
    config = tmp / "population.toml"
    config.write_text(CONFIG)
    launches = [
        ("torchrun3", "torchrun.sh", ()),
        ("torchrun3_static", "torchrun.sh", ("--set", 'server.placement="static"')),
        ("mpiexec3", "mpiexec.sh", ()),
    ]
    # the first four rounds (ending on an evaluation round) of "resumed" at W=1, the rest
    # resumed under torchrun W=3 with static shards and another cache
    alone = [
        ("local", ()),
        ("local_big_cache", ("--set", "data.cache_mb=256")),
        ("resumed", ("--set", "run.rounds=4")),
    ]
    with ThreadPoolExecutor(max_workers=1) as pool:  # one launch at a time
        paths = pool.map(
            lambda job: helpers.launch_script(job[1], tmp / f"{job[0]}.h5", config, *job[2]),
            launches,
        )
        out = {}
        for name, sets in alone:
            out[name] = tmp / f"{name}.h5"
            helpers.run_alone(tmp, "--config", str(config), "--out", str(out[name]), *sets)
        out.update(zip([name for name, _, _ in launches], paths, strict=True))
    half = out.pop("resumed")
    env = helpers.clean_env(NPROC="3")
    proc = subprocess.run(
        ["torchrun", "--standalone", "--nproc-per-node", "3", "-m", "distfl", "run",
         "--resume", str(half), "--comm", "torch", "--set", f"run.rounds={ROUNDS}",
         # where tasks run and what a worker keeps may change on resume: never a bit
         "--set", 'server.placement="static"', "--set", "data.cache_mb=2"],
        env=env, capture_output=True, text=True, timeout=limit(300), cwd=tmp,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out["resumed"] = half
    return out


def workers(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {k: f["timing/workers"][k][()] for k in f["timing/workers"]}


@pytest.mark.parametrize(
    "name", ["torchrun3", "mpiexec3", "torchrun3_static", "local_big_cache", "resumed"]
)
def test_same_bits_whatever_the_launcher_placement_cache_or_resume(runs, name):
    assert_same_run(runs["local"], runs[name])


def test_the_run_is_not_trivial(runs):
    data = read_run(runs["local"])
    assert len(data["metrics/round"]) == ROUNDS
    assert (data["metrics/num_participants"] == 15).all()
    # each evaluation round evaluated 60 of the 300 clients, over the clusters
    per_round = np.bincount(
        data["metrics/evaluation/round"], weights=data["metrics/evaluation/clients"]
    )
    assert per_round[2::2].tolist() == [60.0] * (ROUNDS // 2)
    assert np.isfinite(data["metrics/accuracy"][1::2]).all()


def test_balanced_placement_shares_each_round_between_the_workers(runs):
    w = workers(runs["torchrun3"])
    assert sorted(set(w["rank"].tolist())) == [1, 2]
    for t in range(1, ROUNDS + 1):
        mine = w["round"] == t
        counts = w["clients"][mine]
        assert counts.sum() == 15
        assert abs(int(counts[0]) - int(counts[1])) <= 1, (t, counts)


def test_static_placement_runs_each_client_at_home(runs):
    # the same clients per round, split by home shard instead: per-round counts differ
    # from the balanced split somewhere, and still add up to the cohort
    static, balanced = workers(runs["torchrun3_static"]), workers(runs["torchrun3"])
    assert (np.bincount(static["round"], weights=static["clients"])[1:] == 15).all()
    assert not np.array_equal(static["clients"], balanced["clients"])


def test_the_cache_stays_within_its_bound_and_is_used(runs):
    for name in ("local", "torchrun3", "mpiexec3"):
        w = workers(runs[name])
        assert (w["cache_mb"] <= 1.0).all(), name
        assert (w["cache_mb"] > 0.5).all(), name  # it fills up
        assert (w["loaded"] > 0).all(), name
        assert (w["rss_mb"] > 50).all(), name
    tiny, big = workers(runs["local"]), workers(runs["local_big_cache"])
    assert big["cache_mb"][-1] > 1.0
    # with room for everyone, the clients seen before are not materialised again
    assert big["loaded"].sum() < tiny["loaded"].sum()


def test_the_run_file_records_rank_0s_memory(runs):
    with h5py.File(runs["torchrun3"], "r") as f:
        rss = f["timing/rss_mb"][()]
    assert len(rss) == ROUNDS and (rss > 50).all() and (np.diff(rss) >= 0).all()
