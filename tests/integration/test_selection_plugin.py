"""A selection strategy added in one file: the worked example of
docs/adding-a-selection.md (its ``fewest.py`` and ``fewest.toml``, as written on the page)
runs through ``run.plugins`` alone, under torchrun with three ranks (gloo) and stopped and
resumed from its file, with the commands the page shows: the same bits alone and under
torchrun, the same models, tree and state resumed, and each client chosen 7 or 8 times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from docpage import fenced, run_commands, without_plugin
from runfile import assert_same, read_run
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-selection.md"
#: the per-round columns an evaluation writes besides the accuracies
EVALUATION = ("test_loss", "federation_bytes")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("selection-plugin")
    (python,) = fenced(PAGE, "python")
    (toml,) = fenced(PAGE, "toml")
    (tmp / "fewest.py").write_text(python)
    (tmp / "fewest.toml").write_text(toml)
    (commands,) = fenced(PAGE, "bash")
    assert [ln.split()[0] for ln in commands.strip().splitlines()] == [
        "distfl", "torchrun", "distfl", "distfl",
    ]  # fmt: skip
    run_commands(commands, tmp, helpers)
    return tmp


def test_alone_and_under_torchrun_the_same_bits(runs):
    alone, launched = runs / "fewest.h5", runs / "fewest-tr.h5"
    assert_same(read_run(alone), read_run(launched))
    with h5py.File(alone, "r") as f:
        assert json.loads(f.attrs["config"])["participation"]["selection"] == "fewest_rounds"
        assert int(f["state"].attrs["round"]) == 30
    with h5py.File(launched, "r") as f:
        assert f.attrs["world_size"] == 3


def test_every_client_gets_its_turn(runs):
    """300 trainings over 40 clients: 7 or 8 each, as the strategy keeps them."""
    with h5py.File(runs / "fewest.h5", "r") as f:
        times = f["state/selection/times"][()]
        assert f["metrics/num_participants"][()].tolist() == [10] * 30
    assert times.sum() == 300 and set(times.tolist()) == {7, 8}


def test_resumed_from_its_file_as_if_never_stopped(runs):
    """The run stopped after 15 rounds and resumed holds the uninterrupted run's models,
    tree, state (the strategy's counts too) and metrics, but for the evaluation the shorter
    run made at its last round."""
    with h5py.File(runs / "fewest.h5", "r") as a, h5py.File(runs / "fewest-half.h5", "r") as b:
        assert int(b["state"].attrs["round"]) == 30
        assert np.array_equal(a["state/models"][()], b["state/models"][()])
        assert np.array_equal(a["state/selection/times"][()], b["state/selection/times"][()])
        # the per-round columns (the groups hold tables of rows: an evaluation's, a cluster's)
        names = [k for k, v in a["metrics"].items() if isinstance(v, h5py.Dataset)]
        assert "accuracy" in names and len(names) > 15
        for key in names:
            x, y = a["metrics"][key][()], b["metrics"][key][()]
            assert x.shape == y.shape, key
            if x.dtype.kind == "f":
                differ = np.flatnonzero(
                    ~((x == y) | (np.isnan(x) & np.isnan(y))).reshape(len(x), -1).all(axis=1)
                )
            else:
                differ = np.flatnonzero(np.any((x != y).reshape(len(x), -1), axis=1))
            # round 15's evaluation and the bytes its clients moved for it
            expected = [14] if key.startswith("accuracy") or key in EVALUATION else []
            assert differ.tolist() == expected, key


def test_a_reader_reads_the_files_without_the_plugin(runs, helpers):
    proc = without_plugin(runs / "fewest.py", ["inspect", "fewest.h5"], helpers)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fedgwc on digits" in proc.stdout


def test_an_unknown_strategy_names_the_registered_ones(runs, helpers):
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--set", "participation.selection='fewest'",
         "--out", "x.h5"], cwd=runs, env=helpers.clean_env(), capture_output=True, text=True,
        timeout=limit(120),
    )  # fmt: skip
    assert assert_one_line_error(proc) == (
        "distfl: error: participation.selection = 'fewest': allowed values are fedcs, fedpns, "
        "uniform (a selection strategy of your own registers when its module is imported: "
        "run.plugins)"
    )
    assert not (runs / "x.h5").exists()
