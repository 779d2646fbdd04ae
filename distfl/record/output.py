"""Where a run file goes, and how it gets there without losing anything.

- :func:`check_output` refuses, before the first round, an ``--out`` that would replace a
  file (unless ``--force``, or the file is the one being resumed), that is a directory or
  not a regular file, whose directory cannot be written, or whose disk has not room for it.
- :class:`OutputLock` is held by the one process that writes a run file for the whole run
  (``RUN.h5.lock`` beside it, an exclusive ``flock``): a second writer of the same path
  (a second run, or a resume while the run still writes) is refused with one line, and the
  first is untouched.
- :func:`write_atomically` puts the bytes of a run file in place: a temporary file of a name
  no other process uses, flushed to disk, renamed over the target. A write that fails
  (a full disk, an I/O error) removes its temporary file, leaves the previous file as it
  was, and raises :class:`RunFileWriteError` (one line, exit code 2).
- :class:`DiskReserve` holds the room of the run file's next write on its disk, allocated
  in advance, so that a disk that fills during the run cannot keep a completed round from
  being written.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import socket
from pathlib import Path

from distfl.errors import UserError

#: suffix of the temporary files a writer makes beside the run file
TMP_SUFFIX = ".tmp"
LOCK_SUFFIX = ".lock"
#: room kept free on the disk beyond the run file's estimated size
MARGIN_BYTES = 16 << 20


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
    path's :class:`OutputLock` held: no live writer of it has one open)."""
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
            try:
                (directory / name).unlink()
            except OSError:
                pass


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
            while view:
                view = view[os.write(fd, view) :]
            if held is not None:
                os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _unlink_quietly(tmp)
        kept = "the previous checkpoint is kept" if path.exists() else "nothing was written"
        raise RunFileWriteError(f"cannot write the run file {path}: {why(exc)}; {kept}") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _fsync_dir(path.parent)


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
            os.posix_fallocate(fd, 0, max(int(nbytes), 1))
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
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
            _unlink_quietly(self.tmp)
        self.tmp, self.nbytes = None, 0


def _unlink_quietly(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass


def _fsync_dir(directory: Path) -> None:
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


class OutputLock:
    """An exclusive lock on writing ``path``, held until :meth:`release`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + LOCK_SUFFIX)
        self.fd: int | None = None

    def acquire(self) -> None:
        while True:
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise RunFileWriteError(
                    f"cannot write the run file {self.path}: {why(exc)} "
                    f"(creating {self.lock_path.name} beside it)"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunFileWriteError(
                        f"cannot lock the run file {self.path}: {why(exc)}"
                    ) from None
                raise UserError(
                    f"run file {self.path} is being written by another distfl run"
                    f"{f' ({holder})' if holder else ''}; wait for it to finish, or give "
                    "another --out"
                ) from None
            # the lock file may have been removed (and made anew) by the writer that held
            # it between our open and our lock: then ours is a lock on nothing
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        _unlink_quietly(self.lock_path)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def check_output(path: Path, *, force: bool, resuming: Path | None, need_bytes: int) -> None:
    """Refuse (UserError, exit code 2) an output path that would lose a file or cannot
    take the run file; creates the path's directory when missing."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise UserError(
                f"run.out = {path} exists and is not a regular file (a directory, a device "
                "or a broken link); give the path of a new HDF5 run file"
            )
        same = resuming is not None and _same_file(path, resuming)
        if not same and not force:
            raise UserError(
                f"run.out = {path} exists ({_describe(path)}); distfl does not replace a "
                f"file: give another --out, continue the run with --resume {path}, or pass "
                "--force to replace it"
            )
    directory = path.parent if str(path.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFileWriteError(
            f"cannot write the run file {path}: its directory {directory} cannot be made: "
            f"{why(exc)}"
        ) from None
    probe = temporary_path(path)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError as exc:
        raise RunFileWriteError(f"cannot write the run file {path}: {why(exc)}") from None
    finally:
        _unlink_quietly(probe)
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return
    # the file is written beside the previous checkpoint before it replaces it
    need = need_bytes + MARGIN_BYTES
    if free < need:
        raise RunFileWriteError(
            f"cannot write the run file {path}: {_mib(free)} free on its disk, and the run "
            f"file needs about {_mib(need_bytes)} (with {_mib(MARGIN_BYTES)} to spare); free "
            "some space or give another --out"
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _describe(path: Path) -> str:
    """What ``path`` holds, in a few words (a run file's progress when it is one)."""
    from distfl.paths import regular_file

    try:
        kind = regular_file(path)
        if kind:
            return kind
        import h5py

        with h5py.File(path, "r") as f:
            if "state" not in f or "config" not in f.attrs:
                return "an HDF5 file that is not a distfl run file"
            import json

            done = json.loads(f["state"].attrs.get("round", "0"))
            rounds = json.loads(f.attrs["config"]).get("run", {}).get("rounds", "?")
            return f"a distfl run file at round {done} of {rounds}"
    except Exception:  # anything else: a text file, a damaged file
        return f"a file of {path.stat().st_size:,} bytes"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


__all__ = [
    "DiskReserve",
    "OutputLock",
    "RunFileWriteError",
    "check_output",
    "remove_stale_temporaries",
    "temporary_path",
    "write_atomically",
]
