"""How the run file's bytes get to disk without losing anything.

- :func:`write_atomically` puts the bytes of a run file in place: a temporary file of a name
  no other process uses, flushed to disk, renamed over the target. A write that fails
  (a full disk, an I/O error) removes its temporary file, leaves the previous file as it
  was, and raises :class:`RunFileWriteError` (one line, exit code 2).
- :class:`DiskReserve` holds the room of the run file's next write on its disk, allocated
  in advance, so that a disk that fills during the run cannot keep a completed round from
  being written.
- :func:`remove_stale_temporaries` removes what killed writers left (with the output lock
  of :mod:`distfl.runfile.output` held): only regular files it can prove a writer made,
  each of a temporary's name and beginning with :data:`MARK` (written first into every
  temporary file of a run file: a run file carries it in its HDF5 user block).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from distfl.errors import UserError

#: suffix of the temporary files a writer makes beside the run file
TMP_SUFFIX = ".tmp"
#: the first bytes of every temporary file of a run file (a run file's image carries them
#: in its HDF5 user block, :data:`USERBLOCK` bytes that HDF5 leaves to the file's writer;
#: the room held for a write has them written first): what proves that a leftover was made
#: by a writer of distfl
MARK = b"distfl run file\n"
#: the user block of a run file, where :data:`MARK` goes (HDF5's smallest)
USERBLOCK = 512


class RunFileWriteError(UserError):
    """The run file could not be written (full disk, I/O error, permissions)."""


def why(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason} ({name})" if name else reason


def temporary_path(path: Path) -> Path:
    """A temporary name beside ``path`` that no other process uses:
    ``RUN.h5.<pid>.<random>.tmp``."""
    return path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files that killed writers of ``path`` left (call with the
    path's :class:`OutputLock` held: no live writer of it has one open). Removed is only
    what a writer provably made (:func:`is_leftover`): a symbolic link, a FIFO, a
    directory, a file of another owner, of a second name or without :data:`MARK` is left
    as it is, whatever its name."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        names = os.listdir(directory)
    except OSError:
        return
    head = path.name + "."
    for name in names:  # matched by its exact prefix, never as a pattern
        if not (name.startswith(head) and name.endswith(TMP_SUFFIX)):
            continue
        pid, _, token = name[len(head) : -len(TMP_SUFFIX)].partition(".")
        if pid.isdigit() and len(token) == 8 and all(c in "0123456789abcdef" for c in token):
            if not _alive(int(pid)):
                _remove_if_leftover(directory / name)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process other than this one (its temporary files are its
    own, not leftovers)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's live process
        return True
    except (OSError, OverflowError):  # no such process
        return False
    return True


def is_leftover(fd: int, there: os.stat_result) -> bool:
    """Whether the file open as ``fd`` (what ``lstat`` found at its name: ``there``) is a
    temporary file a writer of distfl made: a regular file of this user's, of one name,
    whose first bytes are :data:`MARK`."""
    mine = os.fstat(fd)
    if not (
        stat.S_ISREG(there.st_mode)
        and os.path.samestat(mine, there)
        and mine.st_nlink == 1
        and mine.st_uid == os.geteuid()
    ):
        return False
    return os.pread(fd, len(MARK), 0) == MARK


def _remove_if_leftover(p: Path) -> None:
    """Unlink ``p`` where it is a leftover (:func:`is_leftover`); never open or follow
    anything but a regular file (``O_NOFOLLOW``, ``O_NONBLOCK``: a FIFO put there meanwhile
    neither blocks nor is read)."""
    try:
        there = os.lstat(p)
        if not stat.S_ISREG(there.st_mode):
            return
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if is_leftover(fd, there) and os.path.samestat(os.lstat(p), there):
            p.unlink()
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes | memoryview, room: DiskReserve | None = None) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never
    a part; on failure the old file stays and no temporary file is left. With ``room``
    holding at least ``len(data)`` bytes, the data goes into the room already allocated on
    the disk (so a disk that filled since cannot stop the write), which it uses up."""
    view = memoryview(data)
    size = view.nbytes
    held = room.take(size) if room is not None else None
    tmp = held or temporary_path(path)
    try:
        if held is None:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        else:
            fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            write_all(fd, view)
            if held is not None:
                os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        unlink_quietly(tmp)
        kept = "the previous checkpoint is kept" if path.exists() else "nothing was written"
        raise RunFileWriteError(f"cannot write the run file {path}: {why(exc)}; {kept}") from None
    except BaseException:
        unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


class DiskReserve:
    """Room on a run file's disk held for its next write: a temporary file beside it (named
    as :func:`temporary_path` names them, so that a killed writer's is removed by the next
    writer of the path), its blocks allocated in advance. :func:`write_atomically` writes
    the next version of the file into it, so that a disk filled by someone else since keeps
    no completed round from the disk; the writer then holds room for the write after."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.tmp: Path | None = None
        self.nbytes = 0

    def hold(self, nbytes: int) -> None:
        """Hold ``nbytes`` (the room held so far is given up first); OSError (ENOSPC: the
        disk has not that room) leaves none held."""
        self.release()
        tmp = temporary_path(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            write_all(fd, MARK)  # first: a killed writer's room is known for a leftover
            os.posix_fallocate(fd, 0, max(int(nbytes), len(MARK)))
        except BaseException:
            os.close(fd)
            unlink_quietly(tmp)
            raise
        os.close(fd)
        self.tmp, self.nbytes = tmp, int(nbytes)

    def take(self, nbytes: int) -> Path | None:
        """The held temporary file for a write of ``nbytes``, which uses the room up; None
        when the room held is smaller."""
        if self.tmp is None or nbytes > self.nbytes:
            return None
        tmp, self.tmp, self.nbytes = self.tmp, None, 0
        return tmp

    def release(self) -> None:
        if self.tmp is not None:
            unlink_quietly(self.tmp)
        self.tmp, self.nbytes = None, 0


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def unlink_quietly(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = [
    "DiskReserve",
    "MARK",
    "RunFileWriteError",
    "TMP_SUFFIX",
    "USERBLOCK",
    "is_leftover",
    "remove_stale_temporaries",
    "temporary_path",
    "write_atomically",
    "why",
]
