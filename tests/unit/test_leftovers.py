"""The next writer of a run file removes what a killed writer of it left, and nothing else:
only a regular file of this user's, of one name, named ``RUN.h5.<pid>.<random>.tmp`` after
a process that is gone, whose first bytes are distfl's mark (every temporary file of a run
file starts with it: the room held for a write, a write in progress, and the run file
itself, in its HDF5 user block). A FIFO, a symbolic link (to a file with the mark or not),
a directory, a user's file of a matching name, a second name of a file with the mark, and a
live process's temporary file are left as they are."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import h5py
from timing import limit

import distfl
from distfl.runfile.atomic import MARK, DiskReserve, remove_stale_temporaries

#: a writer of ``run.h5`` killed outright (SIGKILL) after it held the room of its next
#: write and began a write: it leaves both temporary files, and its pid is then no process's
KILLED_WRITER = """
import os, signal
from pathlib import Path
from distfl.runfile.atomic import DiskReserve, MARK, temporary_path, write_all
target = Path("run.h5")
DiskReserve(target).hold(1 << 16)
fd = os.open(temporary_path(target), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
write_all(fd, MARK + bytes(4096))  # the first part of a run file's image
print(os.getpid(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_writer(folder: Path) -> tuple[int, list[str]]:
    """The pid of a writer of ``folder/run.h5`` killed in the middle of its work, and the
    names of the temporary files it left."""
    before = set(os.listdir(folder))
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER], cwd=folder, capture_output=True,
                          text=True, timeout=limit(60))  # fmt: skip
    assert proc.returncode == -9, proc.stderr
    left = sorted(set(os.listdir(folder)) - before)
    assert len(left) == 2 and all(name.startswith("run.h5.") for name in left), left
    return int(proc.stdout.split()[0]), left


def test_only_a_killed_writers_leftovers_are_removed(tmp_path):
    pid, genuine = killed_writer(tmp_path)
    assert all((tmp_path / name).read_bytes().startswith(MARK) for name in genuine)
    name = f"run.h5.{pid}.%08x.tmp"
    user = tmp_path / "mine.h5"
    user.write_bytes(MARK + b"a file of the user's that begins like a run file")
    os.mkfifo(tmp_path / (name % 0xA))
    os.symlink(user, tmp_path / (name % 0xB))  # a link to a file with the mark
    (tmp_path / (name % 0xC)).write_bytes(b"my notes")  # a user's file of a matching name
    (tmp_path / (name % 0xD)).mkdir()
    os.link(user, tmp_path / (name % 0xE))  # a second name of a file with the mark
    alive = tmp_path / f"run.h5.{os.getppid()}.0000000f.tmp"  # a live process's
    alive.write_bytes(MARK)
    (tmp_path / "other.h5.123.0a1b2c3d.tmp").write_bytes(MARK)  # another run file's
    kept = sorted(set(os.listdir(tmp_path)) - set(genuine))
    remove_stale_temporaries(tmp_path / "run.h5")  # a FIFO there must not block it
    assert sorted(os.listdir(tmp_path)) == kept
    assert stat.S_ISFIFO(os.lstat(tmp_path / (name % 0xA)).st_mode)
    assert os.readlink(tmp_path / (name % 0xB)) == str(user)
    assert user.read_bytes().startswith(MARK) and os.stat(user).st_nlink == 2
    assert (tmp_path / (name % 0xC)).read_bytes() == b"my notes"
    assert alive.read_bytes() == MARK


def test_every_temporary_file_of_a_run_file_begins_with_the_mark(tmp_path):
    """The room held for a write, and the run file (its HDF5 user block), which HDF5
    reads as ever."""
    room = DiskReserve(tmp_path / "run.h5")
    room.hold(1 << 20)
    assert room.tmp.read_bytes()[: len(MARK)] == MARK and room.tmp.stat().st_size == 1 << 20
    room.release()
    run = distfl.run(preset="digits", overrides=["run.rounds=1", 'run.progress="none"'],
                     out=tmp_path / "run.h5", stream=io.StringIO())  # fmt: skip
    assert run.round == 1
    assert (tmp_path / "run.h5").read_bytes().startswith(MARK)
    with h5py.File(tmp_path / "run.h5", "r") as f:
        assert f.userblock_size == 512 and int(f["state"].attrs["round"]) == 1
    assert sorted(os.listdir(tmp_path)) == ["run.h5"]
