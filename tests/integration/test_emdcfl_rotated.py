"""EMD-CFL recovers the rotated-digits groups in one shot, and its distance rows (computed
on the workers, the only thing that travels) are the same bits under torchrun."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from runfile import assert_same_run
from timing import limit

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

# Rotated digits (EMD-CFL's benchmark): 4 rotations x 10 clients. The embedding scale of the
# MLP sets epsilon: same-rotation distances stay below 0.10, others above 0.17 (seed 0:
# 0.0985 and 0.1754).
ARGS = (
    "--preset", "rotated",
    "--set", 'algorithm.name="emdcfl"',
    "--set", "algorithm.emd_epsilon=0.15",
    "--set", "data.samples_per_client=300",
    "--set", "run.rounds=3",
    "--set", "eval.every=3",
    "--set", 'run.progress="none"',
)  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("emdcfl")
    single, multi = tmp / "w1.h5", tmp / "w3.h5"
    torchrun = [
        helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
        "-m", "distfl", "run", *ARGS, "--out", str(multi), "--comm", "torch",
    ]  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:  # the ranks, while this process runs W=1
        ranks = pool.submit(subprocess.run, torchrun, env=helpers.clean_env(),
                            capture_output=True, text=True, timeout=limit(400))  # fmt: skip
        helpers.run_alone(tmp, *ARGS, "--out", str(single))
        p3 = ranks.result()
    assert p3.returncode == 0, p3.stdout + p3.stderr
    return single, multi


def test_rotated_groups_recovered_in_one_shot(runs):
    single, _ = runs
    with h5py.File(single, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        root = f["hierarchy/0"]
        assert int(root.attrs["split_round"]) == 1
        distances = root["distances"][()]
        assert distances.shape == (40, 40)
        assert len(f["final/leaves"][()]) == 4
    assert adjusted_rand_index(groups, assignment) == 1.0
    same = groups[:, None] == groups[None, :]
    sym = np.maximum(distances, distances.T)
    assert sym[same].max() < 0.15 <= sym[~same].min()


def test_torchrun_gives_the_same_bits(runs):
    single, multi = runs
    assert_same_run(single, multi)
