"""Paths a user may give that cannot name a run file, or name one oddly: each is refused
before any work with exit code 2 and one line, or written exactly as given.

- ``--out .``, ``/``, ``./`` (a directory) and ``--out ''`` (nothing) are refused; ``''``
  used to write ``distfl-run.h5`` in silence.
- A file name too long for the temporary file beside it is refused by ``run``; a path
  too long for the file system is one line from every reader, not a traceback.
- A name with a newline is written as that name (it used to gain quotes), and a name
  that is not UTF-8 gets its report.
- A name with a glob character (``r*.h5``) removes only its own writers' leftovers, never
  another run's temporary file.
- A symbolic link to a run file: a run through the link writes the target (the link
  stays a link), and is refused while another process writes the target.

Each command runs in the test's process (``helpers.cli``, the code of ``distfl``); the
writer that holds the lock is a process of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import pytest
from cliproc import assert_one_line_error
from timing import limit

from distfl.runfile.atomic import MARK

pytestmark = pytest.mark.integration

QUICK = ["--set", "run.rounds=2", "--set", 'run.progress="none"']


@pytest.mark.parametrize("out", [".", "/", "./"])
def test_a_directory_as_out_is_refused(helpers, tmp_path, out):
    proc = helpers.cli(tmp_path, "run", "--out", out, *QUICK)
    assert_one_line_error(proc, "names a directory", "run.h5")
    assert not list(tmp_path.iterdir())


def test_an_empty_out_is_refused_not_replaced_by_the_default(helpers, tmp_path):
    proc = helpers.cli(tmp_path, "run", "--out", "", *QUICK)
    assert_one_line_error(proc, "run.out is empty")
    assert not list(tmp_path.iterdir())


def test_a_name_too_long_is_refused_by_run_and_every_reader(helpers, tmp_path):
    name = "a" * 300 + ".h5"
    proc = helpers.cli(tmp_path, "run", "--out", name, *QUICK)
    assert_one_line_error(proc, "file name is 303 bytes; at most 234")
    for command in (("status",), ("inspect",), ("gather",), ("report",), ("run", "--resume")):
        proc = helpers.cli(tmp_path, *command, name)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (command, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (command, proc.stderr)
    assert not list(tmp_path.iterdir())


def test_a_newline_in_a_name_is_written_as_given(helpers, tmp_path):
    name = "new\nline.h5"
    proc = helpers.cli(tmp_path, "run", "--out", name, *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == [name]


def test_a_name_that_is_not_utf8_gets_its_report(helpers, tmp_path):
    proc = helpers.cli(tmp_path, "run", "--out", "run.h5", *QUICK)
    assert proc.returncode == 0, proc.stderr
    odd = os.fsdecode(b"run\xff.h5")
    os.rename(tmp_path / "run.h5", tmp_path / odd)
    for _ in range(2):  # and again, over the report it wrote
        proc = helpers.cli(tmp_path, "report", odd)
        assert proc.returncode == 0, proc.stderr
    index = tmp_path / os.fsdecode(b"run\xff-report") / "index.html"
    assert b"run\xff.h5" in index.read_bytes()  # the name's own bytes


def test_a_glob_character_in_a_name_leaves_other_runs_temporaries(helpers, tmp_path):
    other = tmp_path / "run1.h5.4242.0123abcd.tmp"  # as a writer of run1.h5 leaves it
    other.write_bytes(b"another run's file")
    # a killed writer of r*.h5 left it (its pid no process has; its first bytes distfl's)
    own = tmp_path / "r*.h5.99999999.89abcdef.tmp"
    own.write_bytes(MARK)
    proc = helpers.cli(tmp_path, "run", "--out", "r*.h5", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert other.exists() and not own.exists()
    assert (tmp_path / "r*.h5").is_file()


def test_a_run_through_a_link_writes_the_target_and_keeps_the_link(helpers, tmp_path):
    assert helpers.cli(tmp_path, "run", "--out", "target.h5", *QUICK).returncode == 0
    os.symlink("target.h5", tmp_path / "link.h5")
    proc = helpers.cli(tmp_path, "run", "--resume", "link.h5", "--set", "run.rounds=3")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "link.h5").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["link.h5", "target.h5"]
    with h5py.File(tmp_path / "target.h5", "r") as f:
        assert f["state"].attrs["round"] == "3"


def test_a_link_does_not_bypass_the_lock(tmp_path, helpers):
    """A resume of the target runs (a live writer); a resume through a link to it is
    refused, and the writer goes on untouched."""
    assert helpers.cli(tmp_path, "run", "--out", "target.h5", *QUICK).returncode == 0
    os.symlink("target.h5", tmp_path / "link.h5")
    writer = subprocess.Popen(
        [sys.executable, "-m", "distfl", "run", "--resume", "target.h5", "--set",
         "run.rounds=100000"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        errors = helpers.LineReader(writer.stderr)
        deadline = time.monotonic() + limit(120)
        while not (tmp_path / "target.h5.lock").exists():  # the writer holds the lock
            assert writer.poll() is None and time.monotonic() < deadline, errors.text()
            time.sleep(0.1)
        proc = helpers.cli(tmp_path, "run", "--resume", "link.h5", "--set", "run.rounds=100000")
        assert_one_line_error(proc, "is being written by another distfl run")
        assert writer.poll() is None  # untouched: still running
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(timeout=limit(120)) == 0
    finally:
        helpers.kill_tree([writer], marker=str(tmp_path))
    assert (tmp_path / "link.h5").is_symlink()
