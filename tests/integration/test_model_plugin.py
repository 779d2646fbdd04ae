"""A model added in one file: the worked example of docs/adding-a-model.md (its ``resnet.py``,
``stripes.py`` and ``resnet.toml``, as written on the page) runs with the commands the page
shows, alone, under torchrun with three ranks (gloo) and under mpiexec with three ranks;
the three run files hold the same bits, each trained by the vectorised trainer, and are
read (``inspect``, ``report``, ``distfl.open``) with both plug-ins made to fail on import."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from runfile import assert_same_run
from timing import limit

from distfl.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-model.md"
#: the page's Python blocks, in order, each the file its first line names
FILES = ("resnet.py", "stripes.py")


def blocks(kind: str) -> list[str]:
    """The page's fenced blocks of ``kind`` (python, toml, bash), in order."""
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(rf"```{kind}\n(.*?)```", text, flags=re.S)


def argv(line: list[str], helpers) -> list[str]:
    """A command of the page as this machine runs it: its distfl, torchrun or mpiexec, and
    the python it names, those of the tests' Python."""
    first = {"distfl": [sys.executable, "-m", "distfl"],
             "torchrun": [helpers.venv_tool("torchrun")],
             "mpiexec": [helpers.venv_tool("mpiexec")]}  # fmt: skip
    rest = [sys.executable if w == "python" else w for w in line[1:]]
    return [*first.get(line[0], line[:1]), *rest]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    """The page's files written as shown, its three runs launched together, then its
    ``inspect``: (the folder, the run files by launcher, what inspect printed)."""
    tmp = tmp_path_factory.mktemp("model-plugin")
    python = blocks("python")
    assert [code.splitlines()[0].split(":")[0] for code in python] == [f"# {f}" for f in FILES]
    for name, code in zip(FILES, python, strict=True):
        (tmp / name).write_text(code)
    (toml,) = blocks("toml")
    (tmp / "resnet.toml").write_text(toml)
    (commands,) = blocks("bash")
    lines = [shlex.split(line) for line in commands.strip().splitlines()]
    assert [line[0] for line in lines] == ["distfl", "torchrun", "mpiexec", "distfl"]
    if not Path(helpers.venv_tool("mpiexec")).exists():
        pytest.skip(f"no mpiexec next to {sys.executable}")
    helpers.launch_together({line[0]: argv(line, helpers) for line in lines[:3]}, tmp)
    shown = io.StringIO()  # inspect imports no torch: in this process, from the same folder
    here = os.getcwd()
    os.chdir(tmp)
    try:
        with contextlib.redirect_stdout(shown):
            assert main(lines[3][1:]) == 0
    finally:
        os.chdir(here)
    files = {"distfl": "resnet.h5", "torchrun": "resnet-tr.h5", "mpiexec": "resnet-mpi.h5"}
    return tmp, {k: tmp / v for k, v in files.items()}, shown.getvalue()


@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
def test_the_example_model_trains_to_the_same_bits_on_every_world(runs, launcher):
    _, files, _ = runs
    assert_same_run(files["distfl"], files[launcher])
    with h5py.File(files[launcher], "r") as f:
        assert f.attrs["world_size"] == 3


def test_each_run_trained_the_example_vectorised(runs):
    _, files, _ = runs
    for path in files.values():
        with h5py.File(path, "r") as f:
            assert f["timing"].attrs["trainer"] == "vectorised", path
            model = json.loads(f.attrs["config"])["model"]
            assert model == {"name": "resnet", "width": 4, "blocks": 1, "groups": 2}
            assert int(f["state"].attrs["round"]) == 3


READ = """
import sys
from pathlib import Path

import distfl
from distfl.cli import main

run = distfl.open("resnet.h5")
assert run.config.model.name == "resnet" and run.config.model.width == 4, run.config.model
assert main(["inspect", "resnet.h5"]) == 0
assert main(["report", "resnet.h5", "--out", "report"]) == 0
assert Path("report/index.html").is_file()
loaded = [m for m in sys.modules if "resnet" in m or "stripes" in m]
assert not loaded, loaded
"""


def test_a_reader_reads_the_files_without_importing_the_plugins(runs, helpers):
    """With resnet.py and stripes.py raising on import, ``distfl.open``, ``inspect`` and
    ``report`` read the file, and ``inspect`` prints what it printed with them there."""
    tmp, _, shown = runs
    kept = {name: (tmp / name).read_text() for name in FILES}
    try:
        for name in FILES:
            (tmp / name).write_text(f"raise RuntimeError('{name} was imported')\n")
        proc = subprocess.run([sys.executable, "-c", READ], cwd=tmp, env=helpers.clean_env(),
                              capture_output=True, text=True, timeout=limit(300))  # fmt: skip
    finally:
        for name, text in kept.items():
            (tmp / name).write_text(text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(shown), proc.stdout
    assert "resnet" in shown
