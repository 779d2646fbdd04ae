"""The files distfl writes beside a run (``gather --csv``, the live exports, the lock, the
traceback of a failed round) change nothing outside the run: a symbolic link, a FIFO or a
device at their path is refused in one line (exit code 2) and left as it was, an existing
file is replaced only with ``--force`` (or where it is the resumed run's own), a file of
the user's at the old fixed temporary name (``X.csv.tmp``) is never touched, and an export
path that is a FIFO is refused without blocking.

The commands run in this process through ``distfl.cli.main`` (a refusal comes before any
round); the FIFO at an export path runs as a process of its own with a timeout, since a
run that blocked on it would hang the test."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cliproc import assert_main_one_line_error
from timing import limit

from distfl.cli import main

pytestmark = pytest.mark.integration

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
TINY = ["--preset", "digits", "--set", "run.rounds=1", "--set", "data.num_clients=6",
        "--set", "server.clients_per_round=3", "--set", 'run.progress="none"']  # fmt: skip
JSONL = ["--set", 'run.export=["jsonl"]']


@pytest.fixture(scope="module")
def run_file(tmp_path_factory, helpers) -> Path:
    tmp = tmp_path_factory.mktemp("beside")
    helpers.run_alone(tmp, *TINY, "--out", "a.h5")
    return tmp / "a.h5"


def in_dir(directory: Path, argv: list[str]) -> int:
    here = Path.cwd()
    os.chdir(directory)
    try:
        return main(argv)
    finally:
        os.chdir(here)


# -- gather --csv ------------------------------------------------------------------------


def a_full_device(tmp_path: Path) -> Path:
    """/dev/full, or where this process may replace it (root: the code before these rules
    did), a node of the same device made in ``tmp_path``."""
    if not os.access("/dev", os.W_OK):
        return Path("/dev/full")
    node = tmp_path / "full"
    device = os.stat("/dev/full").st_rdev
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, device)
    except OSError as exc:
        pytest.skip(f"cannot make a device node here ({exc.strerror}), and /dev is writable")
    return node


def test_gather_refuses_a_device_and_leaves_it_a_device(run_file, tmp_path, capsys):
    full = a_full_device(tmp_path)
    assert stat.S_ISCHR(os.stat(full).st_mode)
    code = main(["gather", str(run_file), "--csv", str(full)])
    assert_main_one_line_error(capsys, code, str(full), "character device", "give another --csv")
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    code = main(["gather", str(run_file), "--csv", str(full), "--force"])  # not even so
    assert_main_one_line_error(capsys, code, str(full), "character device")
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    assert capsys.readouterr().out == ""  # refused before any file is read: no table


def test_gather_refuses_a_fifo_and_a_link_and_leaves_them(run_file, tmp_path, capsys):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    target = tmp_path / "thesis.tex"
    target.write_text("keep me")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    for force in ([], ["--force"]):  # never replaced, with --force either
        code = main(["gather", str(run_file), "--csv", str(fifo), *force])
        assert_main_one_line_error(capsys, code, str(fifo), "FIFO")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        code = main(["gather", str(run_file), "--csv", str(link), *force])
        assert_main_one_line_error(capsys, code, str(link), "symbolic link")
        assert os.readlink(link) == str(target) and target.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["link.csv", "pipe.csv", "thesis.tex"]


def test_gather_replaces_a_csv_only_with_force(run_file, tmp_path, capsys):
    out = tmp_path / "t.csv"
    out.write_text("mine")
    code = main(["gather", str(run_file), "--csv", str(out)])
    assert_main_one_line_error(capsys, code, str(out), "exists (a file of 4 bytes)", "--force")
    assert out.read_text() == "mine"
    assert main(["gather", str(run_file), "--csv", str(out), "--force"]) == 0
    assert out.read_text().startswith("file,algorithm,")
    assert sorted(os.listdir(tmp_path)) == ["t.csv"]


def test_gather_leaves_a_file_and_a_link_at_the_old_temporary_name(run_file, tmp_path):
    mine = tmp_path / "x.csv.tmp"
    mine.write_text("my notes")
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    (tmp_path / "y.csv.tmp").symlink_to(target)
    for name in ("x.csv", "y.csv"):
        assert main(["gather", str(run_file), "--csv", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text().startswith("file,algorithm,")
    assert mine.read_text() == "my notes"
    assert os.readlink(tmp_path / "y.csv.tmp") == str(target)
    assert target.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["target.txt", "x.csv", "x.csv.tmp", "y.csv",
                                             "y.csv.tmp"]  # fmt: skip


def test_a_report_writes_through_no_link_in_its_directory(run_file, tmp_path, capsys):
    """Again over an earlier report: a link planted at a temporary name of the code before
    (``accuracy.png.tmp``) is never followed, and a link at one of the report's own names
    (``index.html``) is refused in one line, never replaced."""
    out = tmp_path / "rep"
    assert main(["report", str(run_file), "--out", str(out)]) == 0
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (out / "accuracy.png.tmp").symlink_to(target)
    assert main(["report", str(run_file), "--out", str(out)]) == 0
    assert target.read_text() == "keep me" and (out / "accuracy.png.tmp").is_symlink()
    capsys.readouterr()
    page = tmp_path / "page.html"
    page.write_text((out / "index.html").read_text())  # an earlier report's page
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(page)
    code = main(["report", str(run_file), "--out", str(out)])
    assert_main_one_line_error(capsys, code, "index.html is a symbolic link", "remove it")
    assert (out / "index.html").is_symlink() and os.readlink(out / "index.html") == str(page)
    assert not [n for n in os.listdir(out) if n.endswith(".tmp") and n != "accuracy.png.tmp"]


# -- the lock ------------------------------------------------------------------------------


def test_a_link_at_the_lock_is_refused_and_its_target_kept(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "x.h5.lock").symlink_to(target)
    code = in_dir(tmp_path, ["run", *TINY, "--out", "x.h5"])
    assert_main_one_line_error(capsys, code, "x.h5.lock", "symbolic link", "remove it")
    assert target.read_text() == "keep me"
    assert os.readlink(tmp_path / "x.h5.lock") == str(target)
    assert sorted(os.listdir(tmp_path)) == ["precious.txt", "x.h5.lock"]


# -- run.export ------------------------------------------------------------------------


def test_an_export_path_that_is_a_fifo_is_refused_without_blocking(tmp_path, helpers):
    os.mkfifo(tmp_path / "x.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", *TINY, *JSONL, "--out", "x.h5", "--force"],
        cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=limit(120),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert "x.jsonl is a FIFO" in line and "leave jsonl out of run.export" in line, line
    assert stat.S_ISFIFO(os.lstat(tmp_path / "x.jsonl").st_mode)
    assert sorted(os.listdir(tmp_path)) == ["x.jsonl"]


@pytest.mark.parametrize("kind", ["directory", "link", "broken link"])
def test_an_export_path_that_is_not_a_file_is_refused(tmp_path, capsys, kind):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    jsonl = tmp_path / "x.jsonl"
    if kind == "directory":
        jsonl.mkdir()
    else:
        jsonl.symlink_to(target if kind == "link" else tmp_path / "nothing")
    code = in_dir(tmp_path, ["run", *TINY, *JSONL, "--out", "x.h5", "--force"])
    what = "a directory" if kind == "directory" else "a symbolic link"
    assert_main_one_line_error(capsys, code, f"x.jsonl is {what}", "leave jsonl out of run.export")
    assert target.read_text() == "keep me"
    assert jsonl.is_dir() if kind == "directory" else jsonl.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["precious.txt", "x.jsonl"]


def test_an_existing_export_is_replaced_only_with_force(tmp_path, capsys):
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text("my own lines\n")
    code = in_dir(tmp_path, ["run", *TINY, *JSONL, "--out", "x.h5"])
    assert_main_one_line_error(capsys, code, "x.jsonl exists (a file of 13 bytes)", "--force")
    assert jsonl.read_text() == "my own lines\n"
    assert sorted(os.listdir(tmp_path)) == ["x.jsonl"]  # no run file, no lock
    assert in_dir(tmp_path, ["run", *TINY, *JSONL, "--out", "x.h5", "--force"]) == 0
    assert jsonl.read_text().startswith('{"table": ')
    assert sorted(os.listdir(tmp_path)) == ["x.h5", "x.jsonl"]


@pytest.mark.skipif(
    not HAS_TENSORBOARD, reason="tensorboard is not installed (distfl[tensorboard])"
)
def test_a_link_at_the_tensorboard_export_is_refused(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "x-tb").symlink_to(elsewhere)
    argv = ["run", *TINY, "--set", 'run.export=["tensorboard"]', "--out", "x.h5", "--force"]
    code = in_dir(tmp_path, argv)
    assert_main_one_line_error(capsys, code, "x-tb is a symbolic link", "not a directory")
    assert os.listdir(elsewhere) == [] and (tmp_path / "x-tb").is_symlink()


# -- the traceback of a failed round -------------------------------------------------------


def test_the_traceback_is_never_written_through_a_link(tmp_path, capsys, monkeypatch):
    from distfl.algorithms.none import NoClustering

    def fail(self, round_index, plan, reports):
        raise RuntimeError(f"injected failure in round {round_index}")

    monkeypatch.setattr(NoClustering, "update", fail, raising=False)
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    trace = tmp_path / "x.h5.traceback.txt"
    trace.symlink_to(target)
    code = in_dir(tmp_path, ["run", *TINY, "--out", "x.h5"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "injected failure" in err and f"could not be written to {trace.name}" in err, err
    assert "symbolic link" in err, err
    assert trace.is_symlink() and os.readlink(trace) == str(target)
    assert target.read_text() == "keep me"
    trace.unlink()  # and where nothing is in the way, the traceback is written
    assert in_dir(tmp_path, ["run", *TINY, "--out", "y.h5"]) == 1
    assert "the traceback is in y.h5.traceback.txt" in capsys.readouterr().err
    written = (tmp_path / "y.h5.traceback.txt").read_text()
    assert written.startswith("distfl ") and "injected failure in round 1" in written
