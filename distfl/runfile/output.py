"""Where a run file goes, and how it gets there without losing anything.

- :func:`check_output` refuses, before the first round, an ``--out`` that would replace a
  file (unless ``--force``, or the file is the one being resumed), that is a directory or
  not a regular file, whose directory cannot be written, or whose disk has not room for it.
- :class:`OutputLock` is held by the one process that writes a run file for the whole run
  (``RUN.h5.lock`` beside it, an exclusive ``flock``): a second writer of the same path
  (a second run, or a resume while the run still writes) is refused with one line, and the
  first is untouched.
- The run file's own bytes are put in place by :mod:`distfl.runfile.atomic`.
- The files distfl writes beside a run (``gather --csv``, a report's pages and figures, the
  live exports, the traceback of a failed round) go through :func:`write_file` or
  :func:`place_file`: the bytes go to a temporary file of a name no other process uses,
  created in the target's directory (``O_EXCL``: never through a link), and are put in
  place with ``link`` (which fails where anything is already there) or, where the caller
  may replace, with a rename over a regular file only. A symbolic link, a FIFO, a device, a
  socket or a directory at the target is never opened, followed or replaced; a regular
  file is replaced only where the caller says so (``--force``, or a file that is the run's
  own). :func:`check_file` says the same before any work is done.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import socket
import stat
from pathlib import Path

from distfl.errors import UserError
from distfl.runfile.atomic import (
    MARK,
    RunFileWriteError,
    fsync_dir,
    temporary_path,
    unlink_quietly,
    why,
    write_all,
)

LOCK_SUFFIX = ".lock"
#: room kept free on the disk beyond the run file's estimated size
MARGIN_BYTES = 16 << 20
#: how a file beside the run is opened: never through a link, never waiting on a FIFO
_OPEN_BESIDE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: what a lock file holds (what :meth:`OutputLock.acquire` writes), or nothing yet
_LOCK_TEXT = re.compile(rb"(pid [0-9]+ on [^\n]*\n)?")
#: the first line of a traceback file distfl wrote (:func:`keep_traceback`): a failed
#: round's or a failed dataset loader's
_TRACEBACK_HEAD = re.compile(rb"distfl [^\n:]*: (round [0-9]+ failed in |the loader of )")
#: the errors of ``link`` on a file system without hard links
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK}


class OutputLock:
    """An exclusive lock on writing ``path``, held until :meth:`release`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + LOCK_SUFFIX)
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or refuse in one line (UserError): another run holds it, or the
        lock's path holds something that is not a lock distfl made (a symbolic link, a FIFO,
        a device, a directory, a file of other contents), which is left as it is."""
        while True:
            there = _lstat(self.lock_path)
            if there is not None and not stat.S_ISREG(there.st_mode):
                raise self._not_a_lock(_odd(there.st_mode))
            try:  # O_NOFOLLOW: a link planted after the look above is not followed either
                fd = os.open(self.lock_path, _OPEN_BESIDE | os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._not_a_lock("a symbolic link") from None
                raise RunFileWriteError(
                    f"cannot write the run file {self.path}: {why(exc)} "
                    f"(creating {self.lock_path.name} beside it)"
                ) from None
            odd = _odd(os.fstat(fd).st_mode)
            if odd is not None:
                os.close(fd)
                raise self._not_a_lock(odd)
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
                same = os.path.samestat(os.fstat(fd), os.lstat(self.lock_path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        # a lock file left by a killed run holds "pid N on HOST" (or nothing yet); anything
        # else there, or a second name of another file, is not ours to truncate
        mine = os.fstat(fd)
        text = os.pread(fd, 1025, 0)
        if mine.st_nlink != 1 or len(text) > 1024 or not _LOCK_TEXT.fullmatch(text):
            os.close(fd)
            raise self._not_a_lock(
                f"a file of {mine.st_size:,} bytes that no distfl run wrote"
                if mine.st_nlink == 1
                else f"a file with {mine.st_nlink} names"
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self.fd = fd

    def _not_a_lock(self, what: str | None) -> UserError:
        return UserError(
            f"cannot lock the run file {self.path}: its lock file {self.lock_path} is "
            f"{what or 'not a regular file'}, not a lock of distfl; distfl never writes "
            "through or replaces it: remove it, or give another --out"
        )

    def release(self) -> None:
        if self.fd is None:
            return
        try:  # only the file this lock made: never a file put at its name meanwhile
            if os.path.samestat(os.fstat(self.fd), os.lstat(self.lock_path)):
                self.lock_path.unlink()
        except OSError:
            pass
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


# -- files beside the run -----------------------------------------------------------


def _lstat(path: Path | str) -> os.stat_result | None:
    """What is at ``path`` itself (a link is not followed); None where nothing is."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _odd(mode: int) -> str | None:
    """None for a regular file; else what it is, in a few words."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refusal(
    path: Path, there: os.stat_result | None, *, label: str, other: str, force: str | None
) -> UserError:
    odd = "gone" if there is None else _odd(there.st_mode)
    if odd is not None:
        return UserError(
            f"{label} {path} is {odd}; distfl writes a regular file there and never writes "
            f"through or replaces a symbolic link, a FIFO, a device or a directory: {other}"
        )
    return UserError(
        f"{label} {path} exists (a file of {there.st_size:,} bytes); distfl does not "
        f"replace a file: {other}{f', or {force}' if force else ''}"
    )


def check_file(
    path: Path | str, *, replace: bool, label: str, other: str, force: str | None = None
) -> os.stat_result | None:
    """Refuse (UserError, one line naming ``path`` and what is allowed) a target that
    :func:`write_file` would refuse: anything there but a regular file, and a regular file
    unless ``replace``. Returns what is there (``lstat``), None where nothing is.
    ``label`` names the path (``--csv``), ``other`` says what to do instead (``give another
    --csv``) and ``force`` how to replace a file (``pass --force to replace it``)."""
    path = Path(path)
    there = _lstat(path)
    if there is not None and (not replace or not stat.S_ISREG(there.st_mode)):
        raise _refusal(path, there, label=label, other=other, force=force)
    return there


def check_directory(
    path: Path | str, *, existing: bool, label: str, other: str, force: str | None = None
) -> os.stat_result | None:
    """As :func:`check_file` for a directory distfl fills (a TensorBoard log): anything
    there but a directory (a symbolic link to one included) is refused, and a directory
    unless ``existing``."""
    path = Path(path)
    there = _lstat(path)
    if there is None:
        return None
    if not stat.S_ISDIR(there.st_mode):
        odd = _odd(there.st_mode) or f"a file of {there.st_size:,} bytes"
        raise UserError(
            f"{label} {path} is {odd}, not a directory; distfl never writes through or "
            f"replaces it: {other}"
        )
    if not existing:
        raise UserError(
            f"{label} {path} exists (a directory); distfl does not add to it: "
            f"{other}{f', or {force}' if force else ''}"
        )
    return there


def write_file(
    path: Path | str,
    data: bytes | str,
    *,
    replace: bool,
    label: str,
    other: str,
    force: str | None = None,
) -> None:
    """Write ``data`` (text as UTF-8, a file name's undecodable bytes as themselves) to
    ``path`` so that a reader sees the old file or the new one, never a part: a temporary
    file of a name no other process uses, flushed, then put in place (:func:`place_file`).
    Refuses (UserError, one line) what :func:`check_file` refuses, also where it appears
    while the file is written; nothing is left beside on failure."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    fd = place_file(
        path, data=data, replace=replace, label=label, other=other, force=force, sync=True
    )
    os.close(fd)


def place_file(
    path: Path | str,
    *,
    data: bytes | memoryview = b"",
    replace: bool,
    label: str,
    other: str,
    force: str | None = None,
    sync: bool = False,
) -> int:
    """Make ``path`` a new regular file that holds ``data``, and return a descriptor of it
    open for writing at its end (the caller closes it). The target is never opened: the
    bytes go to a temporary file beside it (``O_EXCL``), which is linked in where nothing
    is there (a link fails on anything planted meanwhile) or, with ``replace``, renamed
    over a regular file only. ``sync``: flushed to disk before it is put in place."""
    path = Path(path)
    check_file(path, replace=replace, label=label, other=other, force=force)
    tmp = temporary_path(path)
    try:
        fd = os.open(tmp, _OPEN_BESIDE | os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise UserError(f"cannot write {label} {path}: {why(exc)}") from None
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
        _put_in_place(tmp, path, replace=replace, label=label, other=other, force=force)
    except OSError as exc:
        os.close(fd)
        unlink_quietly(tmp)
        raise UserError(f"cannot write {label} {path}: {why(exc)}") from None
    except BaseException:
        os.close(fd)
        unlink_quietly(tmp)
        raise
    if sync:
        fsync_dir(path.parent if str(path.parent) else Path("."))
    return fd


def _put_in_place(
    tmp: Path, path: Path, *, replace: bool, label: str, other: str, force: str | None
) -> None:
    for _ in range(3):  # a file removed between the link and the look is looked at again
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            there = _lstat(path)  # no hard links here: the look, then the rename
            if there is not None and (not replace or not stat.S_ISREG(there.st_mode)):
                raise _refusal(path, there, label=label, other=other, force=force) from None
            os.replace(tmp, path)
            return
        else:
            unlink_quietly(tmp)
            return
        there = _lstat(path)
        if there is None:
            continue
        if not replace or not stat.S_ISREG(there.st_mode):
            raise _refusal(path, there, label=label, other=other, force=force)
        os.replace(tmp, path)
        return
    raise _refusal(path, _lstat(path), label=label, other=other, force=force)


def write_traceback(path: Path | str, text: str) -> None:
    """The traceback of a failed round to ``RUN.h5.traceback.txt`` (:func:`write_file`):
    a file there is replaced only where it is an earlier traceback of distfl (its first
    line ``distfl VERSION: round N failed in ...``); any other file, a link, a FIFO or a
    device is left as it is (UserError)."""
    path = Path(path)
    there = _lstat(path)
    earlier = False
    if there is not None and stat.S_ISREG(there.st_mode):
        try:
            fd = os.open(path, _OPEN_BESIDE | os.O_RDONLY)
        except OSError:
            fd = None
        if fd is not None:
            try:
                earlier = stat.S_ISREG(os.fstat(fd).st_mode) and bool(
                    _TRACEBACK_HEAD.match(os.pread(fd, 256, 0))
                )
            finally:
                os.close(fd)
    write_file(path, text, replace=earlier, label="the traceback file",
               other="remove it, and the next failure writes its traceback there")  # fmt: skip


def keep_traceback(out: Path | str, headline: str, exc: BaseException) -> str:
    """``exc``'s traceback under ``headline`` (``distfl VERSION: round 12 failed in ...``)
    in ``RUN.h5.traceback.txt`` beside the run file ``out`` (:func:`write_traceback`);
    returns what a one-line message says of it (where it is, or why it could not be
    written: a full disk, a link or another file there)."""
    import traceback

    from distfl import __version__

    out = Path(out)
    trace = out.with_name(out.name + ".traceback.txt")
    text = f"distfl {__version__}: {headline}\n" + "".join(traceback.format_exception(exc))
    try:
        write_traceback(trace, text)
    except Exception as why:  # the line still comes
        return f"the traceback could not be written to {trace} ({why})"
    return f"the traceback is in {trace}"


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
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:  # a leftover of a writer killed here is known by its mark
            write_all(fd, MARK)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RunFileWriteError(f"cannot write the run file {path}: {why(exc)}") from None
    finally:
        unlink_quietly(probe)
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
    "OutputLock",
    "check_directory",
    "check_file",
    "check_output",
    "keep_traceback",
    "place_file",
    "write_file",
    "write_traceback",
]
