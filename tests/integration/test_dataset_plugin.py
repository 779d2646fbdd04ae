"""A dataset added in one file: the worked example of docs/adding-a-dataset.md (its
``blobs.py`` and ``blobs.toml``, as written on the page) runs through ``run.plugins`` alone
and under torchrun with three ranks (gloo), with the commands the page shows; the two run
files hold the same bits, record the plug-in's dataset, and are read without importing it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import h5py
import pytest
from docpage import fenced, run_commands, without_plugin
from runfile import assert_same, read_run
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-dataset.md"


def blocks(kind: str) -> list[str]:
    """The page's fenced blocks of ``kind`` (python, toml, bash), in order."""
    return fenced(PAGE, kind)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("dataset-plugin")
    (python,) = blocks("python")
    (toml,) = blocks("toml")
    (tmp / "blobs.py").write_text(python)
    (tmp / "blobs.toml").write_text(toml)
    (commands,) = blocks("bash")
    assert [ln.split()[0] for ln in commands.strip().splitlines()] == [
        "distfl", "torchrun", "distfl",
    ]  # fmt: skip
    return tmp, run_commands(commands, tmp, helpers)


def test_the_plugin_dataset_runs_alone_and_under_torchrun_to_the_same_bits(runs):
    tmp, _ = runs
    alone, launched = tmp / "blobs.h5", tmp / "blobs-tr.h5"
    assert_same(read_run(alone), read_run(launched))
    with h5py.File(alone, "r") as f:
        assert f.attrs["world_size"] == 1
        assert json.loads(f.attrs["config"])["data"]["dataset"] == "blobs"
        assert int(f["state"].attrs["round"]) == 30
    with h5py.File(launched, "r") as f:
        assert f.attrs["world_size"] == 3


def test_a_reader_reads_the_file_without_the_plugin(runs, helpers):
    """``inspect`` ran last on the page; with blobs.py gone it still reads the file (it
    never imports what the file names) and names the dataset from the stored config."""
    tmp, done = runs
    assert "blobs" in done[-1].stdout
    proc = without_plugin(tmp / "blobs.py", ["inspect", "blobs.h5"], helpers)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == done[-1].stdout


BROKEN = """
import numpy as np

from distfl.datasets import DatasetSpec, register


@register
class Broken(DatasetSpec):
    name = "broken"
    source = "a loader that fails"
    num_classes = 3
    sample_shape = (2,)
    sample_bytes = 16
    num_samples = 600

    @classmethod
    def load(cls, config):
        raise RuntimeError("the disk went away")
"""
BROKEN_ARGS = ("--preset", "digits", "--set", 'run.plugins=["broken.py"]',
               "--set", 'data.dataset="broken"', "--set", "data.num_clients=4",
               "--set", "server.clients_per_round=2",
               "--set", "run.rounds=1", "--out", "run.h5")  # fmt: skip
#: the line of a loader that raised: it names the dataset, its file and the error
BROKEN_LINE = (
    "distfl: error: the loader of data.dataset = 'broken' ({}) raised RuntimeError: the "
    "disk went away; nothing was run; the traceback is in run.h5.traceback.txt"
)


def test_a_loader_that_raises_is_one_line_and_a_traceback_file(tmp_path):
    """Alone (in this process): exit code 1, one line, the traceback beside the run file,
    no run file. The plug-in's registration ends with the test (the registry is the
    process's, and the process runs other tests)."""
    import contextlib
    import io
    import os

    from distfl.cli import main
    from distfl.plugins import DATASETS

    (tmp_path / "broken.py").write_text(BROKEN)
    err = io.StringIO()
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", *BROKEN_ARGS])
    finally:
        os.chdir(here)
        DATASETS.remove("broken")
    assert code == 1
    assert err.getvalue() == BROKEN_LINE.format(tmp_path / "broken.py") + "\n"
    trace = (tmp_path / "run.h5.traceback.txt").read_text()
    assert "Traceback" in trace and "RuntimeError: the disk went away" in trace
    assert "broken.py" in trace
    assert not (tmp_path / "run.h5").exists()


def test_a_loader_that_raises_is_one_line_under_torchrun(tmp_path, helpers):
    """Under a real torchrun with two ranks, each of which meets the error: one line from
    rank 0 and no traceback of distfl's (torchrun adds its own summary of the failure)."""
    (tmp_path / "broken.py").write_text(BROKEN)
    cmd = [helpers.venv_tool("torchrun"), "--nproc-per-node", "2", "--master-addr",
           "127.0.0.1", "--master-port", str(helpers.free_port()), "-m", "distfl", "run",
           "--set", "comm.timeout_s=20", *BROKEN_ARGS]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=helpers.clean_env(), capture_output=True,
                          text=True, timeout=limit(120))  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert output.count("distfl: error:") == 1, output
    assert BROKEN_LINE.format(tmp_path / "broken.py") in output, output
    distfl_dir = str(Path(__file__).resolve().parents[2] / "distfl")
    assert f'File "{distfl_dir}' not in output and 'broken.py", line' not in output, output
    assert "RuntimeError: the disk went away" in (tmp_path / "run.h5.traceback.txt").read_text()
