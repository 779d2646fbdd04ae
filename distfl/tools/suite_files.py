"""The files ``distfl suite`` writes into its directory, and which of them it may replace.

Besides the run files (each written by its ``distfl run``, :mod:`distfl.runfile.output`),
the suite writes each run's log (``<scenario>--<algorithm>--s<seed>.log``), the table
(``suite.csv``, ``suite.json``) and, with ``--table``, the paper's comparison
(``comparison.md``). Nothing of the user's is replaced or written through:

- ``--out`` is a new path or a directory (a symbolic link to a directory is the directory
  it names); a file, a FIFO or a link to nothing is refused.
- At a run file's path, a symbolic link, a FIFO, a device or a directory is refused, even
  with ``--force``; a regular file is kept, resumed or refused by the suite
  (:func:`distfl.tools.suite.plan_actions`).
- A log, the table and the comparison are written beside and put in place
  (:func:`~distfl.runfile.output.write_file`): nothing there, or a file the suite can prove
  it wrote, is (re)placed; another regular file only with ``--force``; a link, a FIFO, a
  device or a directory never. A log is the suite's when its first line is the suite's
  (:data:`LOG_HEAD`), or when it lies beside the run file of the same config that the
  suite resumes; the table when ``suite.json`` reads back as exactly what the suite writes
  of its rows and ``suite.csv`` to exactly those rows; the comparison when it is exactly
  what the suite writes of ``suite.json``'s rows for the table its first line names.

Each check is made before the first run starts (one line, exit code 2, nothing run), and
again just before the file is written.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

from distfl.errors import UserError

#: the first line of a run's log, before what ``distfl run`` prints
LOG_HEAD = "distfl suite: the log of "
#: the table's files, and the comparison's
TABLE_FILES = ("suite.json", "suite.csv")
COMPARISON = "comparison.md"
#: the table of a --grid's points (distfl.tools.suite_grid)
GRID = "grid.csv"
#: how a refusal names each of them
LABELS = {"suite.json": "the suite's table", "suite.csv": "the suite's table",
          COMPARISON: "the suite's comparison", GRID: "the suite's grid table"}  # fmt: skip
#: the most bytes read of a file to tell whether it is the suite's own
MAX_OWN_BYTES = 64 << 20
#: what a refusal says may be done instead
OTHER = "remove it, or give another --out"
_FORCE = "pass --force to replace it (--force also runs every run again)"
#: how a file beside is read: never through a link, never waiting on a FIFO
_OPEN_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_own(
    path: Path | str, max_bytes: int = MAX_OWN_BYTES, *, head: bool = False
) -> bytes | None:
    """The bytes of the regular file at ``path`` itself (a symbolic link is not followed,
    a FIFO or a device never read); None where there is none, or more than ``max_bytes``
    (``head``: its first ``max_bytes`` bytes, whatever its size)."""
    try:
        fd = os.open(path, _OPEN_READ)
    except OSError:
        return None
    try:
        mode = os.fstat(fd)
        if not stat.S_ISREG(mode.st_mode) or (mode.st_size > max_bytes and not head):
            return None
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if head:
            return data[:max_bytes]
        return data if len(data) <= max_bytes else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_directory(out: Path | str) -> None:
    """Refuse (UserError) an ``--out`` that is there and is not a directory."""
    out = Path(out)
    there = _lstat(out)
    if there is None or out.is_dir():
        return
    if stat.S_ISLNK(there.st_mode):
        what = "a symbolic link to no directory"
    elif stat.S_ISREG(there.st_mode):
        what = f"a file of {there.st_size:,} bytes"
    else:
        what = "not a directory"
    raise UserError(
        f"--out {out} is {what}; distfl suite writes its run files and its table into a "
        "directory: give a new or an existing directory"
    )


def make_directory(out: Path | str) -> None:
    """Make ``--out`` (and the directories above it); one line where it cannot be made."""
    from distfl.runfile.atomic import why

    check_directory(out)
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: the directory cannot be made: {why(exc)}") from None


def check_run_path(path: Path) -> bool:
    """Whether a regular file is at a run file's ``path``; anything else there (a symbolic
    link, a FIFO, a device, a directory) is refused, whatever ``--force`` says."""
    from distfl.runfile.output import check_file

    return check_file(path, replace=True, label="the run file", other=OTHER) is not None


def _refuse_regular(path: Path, label: str, what: str) -> UserError:
    size = os.lstat(path).st_size
    return UserError(
        f"{label} {path} exists (a file of {size:,} bytes) and is not {what}; distfl suite "
        f"replaces only its own files: {OTHER}, or {_FORCE}"
    )


def log_head(label: str) -> str:
    """The first line of a run's log (``label``: the job's, :attr:`Job.label`)."""
    from distfl.text import printable

    return f"{LOG_HEAD}{printable(label)}\n"


def log_may_be_replaced(path: Path, *, force: bool, resuming: bool) -> bool:
    """Whether the log at ``path`` may be (re)placed: nothing there, a log the suite wrote,
    the log beside a run the suite resumes (``resuming``), or any regular file with
    ``force``. Refuses (UserError) anything else."""
    from distfl.runfile.output import check_file

    if check_file(path, replace=True, label="the run's log", other=OTHER) is None:
        return False  # nothing there: a new file
    if force or resuming:
        return True
    first = read_own(path, len(LOG_HEAD), head=True)
    if first is not None and first == LOG_HEAD.encode():
        return True
    raise _refuse_regular(path, "the run's log", "a log an earlier distfl suite wrote")


def csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """``suite.csv``: a header and one line per row (``distfl gather --csv``'s cells)."""
    from distfl.tools.gather import cell_text

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell_text(c, row[c], table=False) for c in columns])
    return buf.getvalue()


def json_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """``suite.json``: the columns and the rows, numbers as numbers and undefined as null."""
    return json.dumps({"columns": columns, "rows": rows}, indent=1) + "\n"


def earlier_rows(out: Path, column_sets) -> tuple[list[str], list[dict[str, Any]]] | None:
    """The columns and rows of the ``suite.json`` an earlier suite wrote in ``out``: None
    where it is not there or is not exactly what a suite writes."""
    data = read_own(out / "suite.json")
    if data is None:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or list(doc) != ["columns", "rows"]:
        return None
    columns, rows = doc["columns"], doc["rows"]
    if columns not in [list(c) for c in column_sets] or not isinstance(rows, list):
        return None
    if not all(isinstance(r, dict) and list(r) == columns for r in rows):
        return None
    return (columns, rows) if json_text(rows, columns).encode() == data else None


def _csv_is(out: Path, columns: list[str], rows: list[dict[str, Any]]) -> bool:
    data = read_own(out / "suite.csv")
    if data is None:
        return False
    try:
        return data.decode("utf-8") == csv_text(rows, columns)
    except UnicodeDecodeError:
        return False


def results_to_replace(
    out: Path | str, *, force: bool, comparison: bool, column_sets, compare,
    grid_texts=None,
) -> dict[str, bool]:  # fmt: skip
    """For each file of the table (``comparison.md`` with ``comparison``, ``grid.csv`` with
    ``grid_texts``) in ``out``, whether writing it replaces a file (False: nothing there).
    Refuses (UserError, one line naming the file) a link, a FIFO, a device or a directory
    there, and, without ``force``, a regular file the suite cannot prove it wrote.
    ``column_sets``: the table's possible columns; ``compare(table_title, rows)``: the
    comparison the suite writes of ``rows`` for the table of that title (None for no such
    table); ``grid_texts(rows)``: the grid tables the suite may write of ``rows``."""
    from distfl.runfile.output import check_file

    out = Path(out)
    names = [*TABLE_FILES, *([COMPARISON] if comparison else []),
             *([GRID] if grid_texts is not None else [])]  # fmt: skip
    there = {
        name: check_file(out / name, replace=True, label=LABELS[name], other=OTHER) is not None
        for name in names
    }
    if force or not any(there.values()):
        return there
    earlier = earlier_rows(out, column_sets)
    for name in (n for n in names if there[n]):
        ours = earlier is not None
        if ours and name == "suite.csv":
            ours = _csv_is(out, *earlier)
        elif ours and name == COMPARISON:
            text = read_own(out / name) or b""
            title = text.split(b"\n", 1)[0].decode("utf-8", "replace")
            ours = compare(title, earlier[1]) == text.decode("utf-8", "replace")
        elif ours and name == GRID:
            ours = (read_own(out / name) or b"").decode("utf-8", "replace") in grid_texts(
                earlier[1]
            )
        if not ours:
            what = "a comparison" if name == COMPARISON else "a table"
            raise _refuse_regular(out / name, LABELS[name],
                                  f"{what} an earlier distfl suite wrote there")  # fmt: skip
    return there


__all__ = [
    "COMPARISON",
    "GRID",
    "LABELS",
    "LOG_HEAD",
    "OTHER",
    "TABLE_FILES",
    "check_directory",
    "check_run_path",
    "csv_text",
    "earlier_rows",
    "json_text",
    "log_head",
    "log_may_be_replaced",
    "make_directory",
    "read_own",
    "results_to_replace",
]
