"""``distfl compare``: the launching page's three launchers run as the page writes them and
compared by it as the page shows (the same bits; its output is the page's, line for line);
then copies of the one-process file changed in one place each: one ulp of one metric, one
attribute of the tree, a truncated file, and the parts ``--ignore`` leaves out.

The changed copies are sealed again with distfl's own integrity record (a checksum), so
that they read as run files and only the change tells them apart; they are compared
through the command line's ``main`` in this process (the command's whole code, without
starting a Python for each)."""

from __future__ import annotations

import io
import shlex
import shutil
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import h5py
import numpy as np
import pytest

from distfl.runfile import integrity

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "launching.md"
SECTION = "## The same bits on any world size"


def page_blocks() -> tuple[list[str], str]:
    """The section's commands (its first bash block) and the output it shows (the block
    after)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    start = section.index("```bash\n") + len("```bash\n")
    commands = section[start : section.index("```", start)].strip().splitlines()
    after = section.index("```\n", section.index("```", start) + 3) + len("```\n")
    return commands, section[after : section.index("```", after)]


def argv(line: str, helpers) -> list[str]:
    """A command of the page as this environment runs it: distfl, python, torchrun and
    mpiexec from the tests' virtual environment."""
    words = shlex.split(line)
    tools = {
        "distfl": [sys.executable, "-m", "distfl"],
        "python": [sys.executable],
        "torchrun": [helpers.venv_tool("torchrun")],
        "mpiexec": [helpers.venv_tool("mpiexec")],
    }
    return [*tools[words[0]], *words[1:]]


@pytest.fixture(scope="module")
def page(tmp_path_factory, helpers):
    """The page's runs, started together, then its comparisons: {command: its output}."""
    tmp = tmp_path_factory.mktemp("compare")
    commands, _ = page_blocks()
    runs = [c for c in commands if " run " in f" {c} "]
    compares = [c for c in commands if c.startswith("distfl compare")]
    assert len(runs) == 3 and len(compares) == 2, commands
    helpers.launch_together({c: argv(c, helpers) for c in runs}, tmp)
    outputs = {}
    for command in compares:  # the command's code, in this process
        proc = helpers.cli(tmp, *shlex.split(command)[1:])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs[command] = proc.stdout
    return tmp, outputs


def test_the_three_launchers_of_the_page_hold_the_same_bits_as_it_shows(page):
    tmp, outputs = page
    _, shown = page_blocks()
    first, second = outputs.values()
    assert first == shown
    assert second == shown.replace("tr.h5", "mpi.h5")


def compare(*args: str) -> tuple[int, str, str]:
    """``distfl compare ARGS`` through the command line's main: (exit code, stdout,
    stderr)."""
    from distfl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["compare", *args])
    return code, out.getvalue(), err.getvalue()


def changed(page, tmp_path: Path, change) -> Path:
    """A copy of the page's one-process file with ``change(f)`` made, sealed again."""
    path = tmp_path / "changed.h5"
    shutil.copy(page[0] / "alone.h5", path)
    with h5py.File(path, "r+") as f:
        change(f)
        del f[integrity.GROUP]
        integrity.seal(f)
    return path


def lines(output: str) -> dict[str, str]:
    """The part lines of an output, by part."""
    return {line.split()[0]: line for line in output.splitlines()[2:-1]}


def test_one_ulp_in_one_metric_is_found_with_its_index_and_both_values(page, tmp_path):
    alone = page[0] / "alone.h5"
    with h5py.File(alone, "r") as f:
        accuracy = f["metrics/accuracy"][()]
    i = int(np.flatnonzero(np.isfinite(accuracy))[-1])
    bumped = np.nextafter(accuracy[i], 2.0)

    def bump(f):
        f["metrics/accuracy"][i] = bumped

    code, out, err = compare(str(alone), str(changed(page, tmp_path, bump)))
    assert (code, err) == (1, "")
    by_part = lines(out)
    assert by_part["metrics"] == (
        f"metrics  differs at 1 place; first: /metrics/accuracy[{i}]: {float(accuracy[i])!r} "
        f"in A, {float(bumped)!r} in B"
    )
    assert float(accuracy[i]) != float(bumped) and repr(float(accuracy[i])) != repr(float(bumped))
    for part in ("config", "clients", "tree", "state"):
        assert by_part[part].split()[1] == "same", by_part[part]
    assert out.splitlines()[-1] == "distfl compare: the runs differ (metrics)"


def test_a_differing_tree_names_the_place_and_both_values(page, tmp_path):
    # (members swapped out of order would be a file no run writes, refused by every reader:
    # one float32 step in a cluster's final model is a tree no run of this page wrote)
    def model_moved(f):
        models = f["final/models"]
        value = models[0, 0]
        models[0, 0] = np.nextafter(value, np.float32(np.inf), dtype=np.float32)

    path = changed(page, tmp_path, model_moved)
    code, out, _ = compare(str(page[0] / "alone.h5"), str(path))
    with h5py.File(page[0] / "alone.h5", "r") as f, h5py.File(path, "r") as g:
        first, second = f["final/models"][0, 0], g["final/models"][0, 0]
    assert first != second
    assert code == 1
    assert lines(out)["tree"] == (
        f"tree     differs at 1 place; first: /final/models[0, 0]: {float(first)!r} in A, "
        f"{float(second)!r} in B"
    )
    assert lines(out)["metrics"].split()[1] == "same"


def test_ignore_leaves_parts_out_and_the_empty_list_compares_timing_too(page):
    tmp = page[0]
    code, out, _ = compare(str(tmp / "alone.h5"), str(tmp / "mpi.h5"), "--ignore", "")
    assert code == 1
    assert lines(out)["timing"].startswith("timing   differs at ")
    assert "/@world_size: 1 in A, 3 in B" in lines(out)["timing"]
    code, out, _ = compare(str(tmp / "alone.h5"), str(tmp / "mpi.h5"), "--ignore", "state,timing")
    assert code == 0
    assert lines(out)["state"] == "state    not compared (--ignore state)"


@pytest.mark.parametrize("which", ["truncated", "missing", "unknown part"])
def test_a_bad_file_or_argument_is_one_line_and_exit_2(page, tmp_path, which):
    alone = page[0] / "alone.h5"
    other, more = str(alone), []
    if which == "truncated":
        data = alone.read_bytes()
        (tmp_path / "cut.h5").write_bytes(data[: len(data) // 2])
        other, needle = str(tmp_path / "cut.h5"), "cut.h5"
    elif which == "missing":
        other, needle = str(tmp_path / "nope.h5"), "nope.h5 does not exist"
    else:
        more, needle = ["--ignore", "metrics,nope"], "--ignore 'nope': allowed parts are config"
    code, out, err = compare(str(alone), other, *more)
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and line.startswith("distfl: error: ") and needle in line, err
