"""Paths distfl reads or starts: what a path is before it is opened, and how a child
process starts distfl."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def regular_file(path: Path, max_bytes: int | None = None) -> str | None:
    """None where ``path`` (its link's target) is a regular file of at most ``max_bytes``;
    else what it is, in a few words ("a FIFO", "a directory", "over 1 MiB"). Raises
    FileNotFoundError where nothing is there, OSError where it cannot be looked at. A file
    that is not regular is never opened: a FIFO blocks its reader, a device never ends."""
    mode = os.stat(path)
    if stat.S_ISREG(mode.st_mode):
        if max_bytes is not None and mode.st_size > max_bytes:
            return f"over {max_bytes / 2**20:g} MiB ({mode.st_size:,} bytes)"
        return None
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO (named pipe)",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
             stat.S_ISSOCK: "a socket"}  # fmt: skip
    return next((name for test, name in kinds.items() if test(mode.st_mode)), "not a regular file")


#: what a child process runs to start distfl (see :func:`self_command`)
_CHILD = (
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "from distfl.cli import entry\n"
    "raise SystemExit(entry())"
)


def self_command(*args: str) -> list[str]:
    """The command that starts ``distfl ARGS`` in a child process: this interpreter, with
    the current directory taken off ``sys.path`` (``python -m distfl`` puts it first, so a
    folder named ``distfl`` there, a clone say, would shadow the installed package)."""
    return [sys.executable, "-c", _CHILD, *args]
