"""The rules distfl.runfile.output keeps for every file written beside a run: a unique
temporary file put in place by a link (or a rename over a regular file the caller may
replace), never through or over a symbolic link, a FIFO or a device; the lock takes only a
file that is a lock; the traceback replaces only an earlier traceback."""

from __future__ import annotations

import os
import stat

import pytest

from distfl.errors import UserError
from distfl.runfile import output
from distfl.runfile.output import OutputLock, check_file, place_file, write_file, write_traceback

TARGET = {"label": "--csv", "other": "give another --csv", "force": "pass --force to replace it"}


def test_a_new_file_is_written_and_nothing_left_beside(tmp_path):
    path = tmp_path / "t.csv"
    write_file(path, "a,b\n", replace=False, **TARGET)
    assert path.read_text() == "a,b\n" and os.listdir(tmp_path) == ["t.csv"]
    assert stat.S_IMODE(path.stat().st_mode) & 0o600 == 0o600


def test_a_regular_file_is_replaced_only_where_the_caller_may(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("mine")
    with pytest.raises(UserError, match=r"t.csv exists \(a file of 4 bytes\).*--force"):
        write_file(path, "new", replace=False, **TARGET)
    assert path.read_text() == "mine"
    write_file(path, "new", replace=True, **TARGET)
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["t.csv"]


@pytest.mark.parametrize("kind", ["link", "broken link", "fifo", "directory"])
def test_nothing_but_a_regular_file_is_written_through_or_replaced(tmp_path, kind):
    target = tmp_path / "precious"
    target.write_text("keep me")
    path = tmp_path / "t.csv"
    if kind == "link":
        path.symlink_to(target)
    elif kind == "broken link":
        path.symlink_to(tmp_path / "nothing")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    before = os.lstat(path)
    with pytest.raises(UserError, match="never writes through or replaces"):
        write_file(path, "new", replace=True, **TARGET)
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert target.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["precious", "t.csv"]


def test_what_appears_while_the_file_is_written_is_not_replaced(tmp_path, monkeypatch):
    """A link planted after the check and before the file is put in place: the link
    (which fails on anything there) refuses it, even where a regular file may be replaced,
    and the temporary file is removed."""
    target = tmp_path / "precious"
    target.write_text("keep me")
    path = tmp_path / "t.csv"
    checked = output.check_file

    def check_then_plant(*args, **kw):
        there = checked(*args, **kw)
        path.symlink_to(target)
        return there

    monkeypatch.setattr(output, "check_file", check_then_plant)
    with pytest.raises(UserError, match="symbolic link"):
        write_file(path, "new", replace=True, **TARGET)
    assert path.is_symlink() and target.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["precious", "t.csv"]


def test_placing_a_file_never_opens_its_path(tmp_path):
    """A FIFO with no reader at the path: opening it to write would block; it is refused
    at once, and a new path gets a file open at its end."""
    fifo = tmp_path / "x.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="FIFO"):
        place_file(fifo, replace=True, **TARGET)
    fd = place_file(tmp_path / "y.jsonl", data=b"one\n", replace=False, **TARGET)
    os.write(fd, b"two\n")
    os.close(fd)
    assert (tmp_path / "y.jsonl").read_bytes() == b"one\ntwo\n"


def test_check_file_refuses_what_write_file_refuses(tmp_path):
    assert check_file(tmp_path / "new.csv", replace=False, **TARGET) is None
    for device in ("/dev/null", "/dev/full"):  # looked at, never opened
        with pytest.raises(UserError, match=f"{device} is a character device"):
            check_file(device, replace=True, **TARGET)
        with pytest.raises(UserError, match=f"{device} is a character device"):
            write_file(device, "x", replace=True, **TARGET)
        assert stat.S_ISCHR(os.lstat(device).st_mode)


# -- the lock ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["link", "fifo", "text", "hard link"])
def test_the_lock_takes_only_a_lock(tmp_path, kind):
    run = tmp_path / "run.h5"
    lock = tmp_path / "run.h5.lock"
    target = tmp_path / "precious"
    target.write_text("keep me")
    if kind == "link":
        lock.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "text":
        lock.write_text("my notes")
    else:
        os.link(target, lock)
    before = os.lstat(lock)
    with pytest.raises(UserError, match="not a lock of distfl.*remove it, or give another"):
        OutputLock(run).acquire()
    after = os.lstat(lock)
    assert (after.st_ino, after.st_mode, after.st_size) == (
        before.st_ino, before.st_mode, before.st_size,
    )  # fmt: skip
    assert target.read_text() == "keep me"


def test_a_lock_left_by_a_killed_run_is_taken(tmp_path):
    lock = tmp_path / "run.h5.lock"
    lock.write_text("pid 4242 on somewhere\n")
    with OutputLock(tmp_path / "run.h5"):
        assert lock.read_text().startswith(f"pid {os.getpid()} on ")
    assert not lock.exists()


def test_the_lock_removes_only_its_own_file(tmp_path):
    lock = tmp_path / "run.h5.lock"
    held = OutputLock(tmp_path / "run.h5")
    held.acquire()
    lock.unlink()
    lock.write_text("another's")  # put there while the run went on
    held.release()
    assert lock.read_text() == "another's"


# -- the traceback -------------------------------------------------------------------------


def test_the_traceback_replaces_an_earlier_traceback_only(tmp_path):
    trace = tmp_path / "run.h5.traceback.txt"
    trace.write_text("distfl 0.3.0: round 4 failed in the update\nTraceback ...\n")
    write_traceback(trace, "distfl 0.3.0: round 7 failed in the update\n")
    assert trace.read_text().startswith("distfl 0.3.0: round 7")
    trace.write_text("my notes")
    with pytest.raises(UserError, match="traceback file .* exists"):
        write_traceback(trace, "distfl 0.3.0: round 9 failed in the update\n")
    assert trace.read_text() == "my notes"
    assert os.listdir(tmp_path) == ["run.h5.traceback.txt"]


def test_a_loaders_traceback_keeps_to_the_same_rules(tmp_path):
    """A dataset loader's traceback (keep_traceback, as a failed round's) replaces an
    earlier traceback of distfl's, of either kind, and nothing else: a link there is left
    as it is, and the line says why the traceback is not there."""
    from distfl.runfile.output import keep_traceback

    def failure() -> BaseException:
        try:
            raise RuntimeError("the disk went away")
        except RuntimeError as exc:
            return exc

    trace = tmp_path / "run.h5.traceback.txt"
    trace.write_text("distfl 0.3.0: round 4 failed in the update\nTraceback ...\n")
    told = keep_traceback(tmp_path / "run.h5", "the loader of data.dataset = 'x' failed", failure())
    assert told == f"the traceback is in {trace}"
    text = trace.read_text()
    assert text.startswith("distfl ") and ": the loader of data.dataset = 'x' failed\n" in text
    assert "RuntimeError: the disk went away" in text
    told = keep_traceback(tmp_path / "run.h5", "round 2 failed in training", failure())
    assert told == f"the traceback is in {trace}"  # a loader's traceback is distfl's own
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    trace.unlink()
    trace.symlink_to(target)
    told = keep_traceback(tmp_path / "run.h5", "the loader of data.dataset = 'x' failed", failure())
    assert told.startswith(f"the traceback could not be written to {trace} (")
    assert trace.is_symlink() and target.read_text() == "mine"
