"""An aggregator added in one file, loaded through ``run.plugins``: a half step towards the
participants' mean (θ + ½ Σ w_k Δθ_k / Σ w_k), which is FedAvgM with momentum 0 and server
learning rate ½ computed the same way, so the two runs must hold the same models and
metrics bit for bit; alone and under torchrun with three ranks (gloo) alike. The plug-in
reads no [server] key (its ``keys`` are empty): ``server.lr`` set beside it is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same, read_run
from timing import limit

pytestmark = pytest.mark.integration

PLUGIN = '''
import torch

from distfl.aggregators import Aggregator, register


@register
class HalfStep(Aggregator):
    """Half of FedAvg's step."""

    name = "half_step"

    def __call__(self, cid, model, delta_sum, weight_sum):
        if weight_sum <= 0:
            return model.clone()
        mean = delta_sum.to(torch.float64) / float(weight_sum)
        return (model.to(torch.float64) + 0.5 * mean).to(torch.float32)
'''

COMMON = ["--set", "run.rounds=12", "--set", "eval.every=4"]


def _run(helpers, cwd: Path, *args: str, torchrun: bool = False) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "distfl", "run", *COMMON, *args]
    if torchrun:
        argv = [helpers.venv_tool("torchrun"), "--standalone", "--nproc_per_node", "3",
                *argv[1:], "--comm", "torch"]  # fmt: skip
    return subprocess.run(argv, cwd=cwd, env=helpers.clean_env(), capture_output=True,
                          text=True, timeout=limit(600))  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("aggregator-plugin")
    (tmp / "half_step.py").write_text(PLUGIN)
    mine = ["--set", 'run.plugins=["half_step.py"]', "--set", 'server.aggregator="half_step"']
    for args, torchrun in (
        ([*mine, "--out", "half.h5"], False),
        ([*mine, "--out", "half-tr.h5"], True),
        (["--set", 'server.aggregator="fedavgm"', "--set", "server.momentum=0.0",
          "--set", "server.lr=0.5", "--out", "fedavgm.h5"], False),
        (["--out", "fedavg.h5"], False),
    ):  # fmt: skip
        proc = _run(helpers, tmp, *args, torchrun=torchrun)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp


def test_the_plugin_aggregates_as_fedavgm_at_half_rate(runs):
    with h5py.File(runs / "half.h5", "r") as a, h5py.File(runs / "fedavgm.h5", "r") as b:
        assert np.array_equal(a["state/models"][()], b["state/models"][()])
        assert np.array_equal(a["metrics/accuracy"][()], b["metrics/accuracy"][()], equal_nan=True)
        assert int(a["state"].attrs["round"]) == 12 and np.isfinite(a["state/models"][()]).all()
    with h5py.File(runs / "half.h5", "r") as a, h5py.File(runs / "fedavg.h5", "r") as b:
        assert not np.array_equal(a["state/models"][()], b["state/models"][()])  # not FedAvg


def test_alone_and_under_torchrun_the_same_bits(runs):
    assert_same(read_run(runs / "half.h5"), read_run(runs / "half-tr.h5"))


def test_a_server_key_it_does_not_read_is_refused(runs, helpers):
    mine = ["--set", 'run.plugins=["half_step.py"]', "--set", 'server.aggregator="half_step"']
    proc = _run(helpers, runs, *mine, "--set", "server.lr=0.5", "--out", "x.h5")
    assert assert_one_line_error(proc) == (
        "distfl: error: server.lr = 0.5 has no effect with server.aggregator = 'half_step': it "
        "takes effect only with server.aggregator = 'fedavgm' (or an aggregator of one's own "
        "that reads it)"
    )
    assert not (runs / "x.h5").exists()
