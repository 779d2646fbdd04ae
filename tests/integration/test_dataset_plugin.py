"""A dataset added in one file: the worked example of docs/adding-a-dataset.md (its
``blobs.py`` and ``blobs.toml``, as written on the page) runs through ``run.plugins`` alone
and under torchrun with three ranks (gloo), with the commands the page shows; the two run
files hold the same bits, record the plug-in's dataset, and are read without importing it."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from runfile import assert_same, read_run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-dataset.md"


def blocks(kind: str) -> list[str]:
    """The page's fenced blocks of ``kind`` (python, toml, bash), in order."""
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(rf"```{kind}\n(.*?)```", text, flags=re.S)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("dataset-plugin")
    (python,) = blocks("python")
    (toml,) = blocks("toml")
    (tmp / "blobs.py").write_text(python)
    (tmp / "blobs.toml").write_text(toml)
    (commands,) = blocks("bash")
    lines = [shlex.split(line) for line in commands.strip().splitlines()]
    assert [line[0] for line in lines] == ["distfl", "torchrun", "distfl"]
    done = []
    for line in lines:
        if line[0] == "distfl":
            argv = [sys.executable, "-m", "distfl", *line[1:]]
        else:
            argv = [helpers.venv_tool("torchrun"), *line[1:]]
        env = helpers.clean_env()
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0, f"{line}:\n{proc.stdout}\n{proc.stderr}"
        done.append(proc)
    return tmp, done


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
    gone = tmp / "elsewhere"
    gone.mkdir(exist_ok=True)
    (tmp / "blobs.py").rename(gone / "blobs.py")
    try:
        proc = subprocess.run([sys.executable, "-m", "distfl", "inspect", "blobs.h5"], cwd=tmp,
                              env=helpers.clean_env(), capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    finally:
        (gone / "blobs.py").rename(tmp / "blobs.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == done[-1].stdout
