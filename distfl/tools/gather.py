"""``distfl status RUN.h5`` and ``distfl gather RUN.h5|DIR ... [--csv OUT.csv] [--key K]``.

``status`` says whether a run file's run reached its last round (exit 0) or stopped early
and can be resumed (exit 1), so that a batch script can test it. ``gather`` tabulates many
run files (a sweep): one row per file with its config, final accuracy (the mean, the worst
client's and the 10th percentile) and clustering scores,
as an aligned table and, on request, as CSV; a value the run has not (``beta`` or a
``--key algorithm.X`` of a run whose algorithm takes no such key) is ``-`` in the table and
an empty cell in the CSV. A file that cannot be read is left out of the table and the CSV
and named on stderr with the reason (``distfl gather: skipped PATH: reason``), then a count.
``gather`` exits with 0 when every file was read, 1 when some were skipped and at least one
was gathered, and 2 (one line, nothing written) when none could be read or an argument is
wrong (an unknown ``--key``, a path that does not exist, nothing found, a ``--csv`` that
exists without ``--force`` or is not a regular file).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from distfl.errors import CheckpointError, UserError
from distfl.runfile.layout import HELD_OUT_COLUMNS
from distfl.runfile.output import check_file, write_file
from distfl.text import printable

#: the fixed columns of ``distfl gather``, in order; ``--key`` columns follow
COLUMNS = (
    "file",
    "algorithm",
    "seed",
    "beta",
    "rounds_done",
    "rounds",
    "clusters",
    "accuracy",
    "accuracy_worst",
    "accuracy_p10",
    "rand",
    "ari",
    "was",
    "wadb",
    "first_split",
    "wall_s",
    "test_loss",
    "sim_s",
    "rounds_to_target",
    "bytes_to_target",
    "sim_s_to_target",
)


#: the columns ``distfl gather`` adds after the others where a run has newcomers
#: (``data.held_out``): their number, and their figures at the last evaluation
NEWCOMER_COLUMNS = ("newcomers", *HELD_OUT_COLUMNS)


def with_newcomers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with :data:`NEWCOMER_COLUMNS` (None where a run has none) in every row when
    one of them has newcomers, unchanged otherwise."""
    if not any("newcomers" in r for r in rows):
        return rows
    return [{**r, **{c: r.get(c) for c in NEWCOMER_COLUMNS}} for r in rows]


def run_status(path: str | Path, stream: TextIO, *, errors: TextIO | None = None) -> int:
    """Write one line on whether the run finished; 0 when it did, 1 when it stopped early.
    A file without an integrity record is said so on ``errors``."""
    from distfl.runfile.run import read, unverified_warning

    run = read(path)
    done, rounds = run.round, run.rounds
    if not run.verified and errors is not None:
        errors.write(unverified_warning(path))
    shown = printable(path)
    if done >= rounds:
        stream.write(f"{shown}: finished (round {done} of {rounds})\n")
        return 0
    stream.write(f"{shown}: stopped at round {done} of {rounds} (resume with --resume)\n")
    return 1


def find_run_files(args: Iterable[str | Path]) -> list[str]:
    """Files as given; for a directory, every ``*.h5`` file directly inside, sorted by name
    (``RUN.h5.tmp``, a run file being written, is not one). A path that does not exist, or
    nothing found, is a UserError naming it."""
    found: list[str] = []
    args = list(args)
    for arg in args:
        if not os.path.exists(arg):
            raise UserError(
                f"{arg} does not exist; expected distfl HDF5 run files or directories of them"
            )
        if os.path.isdir(arg):
            names = sorted(
                n
                for n in os.listdir(arg)
                if n.endswith(".h5") and os.path.isfile(os.path.join(arg, n))
            )
            found.extend(os.path.join(arg, n) for n in names)
        else:
            found.append(str(arg))
    if not found:
        where = ", ".join(str(a) for a in args) or "(nothing given)"
        raise UserError(f"no run files found in {where}: give *.h5 run files or directories")
    return found


def check_keys(keys: Iterable[str]) -> list[str]:
    """The ``--key`` names without repeats; an unknown one is a UserError naming it. A key
    of ``[algorithm]`` is known when some algorithm takes it (a run of another algorithm
    has no value for it: None)."""
    from distfl.algorithms import key_owners
    from distfl.config import describe_keys

    known = {key for key, _, _ in describe_keys()}
    out: list[str] = []
    for key in keys:
        section, _, name = key.partition(".")
        if key not in known and not (section == "algorithm" and name and key_owners(name)):
            raise UserError(f"unknown config key {key!r} for --key (see distfl keys)")
        if key not in out:
            out.append(key)
    return out


def config_value(config, key: str) -> Any:
    """The value of ``section.key`` in ``config``; None for a key of ``[algorithm]`` that the
    run's algorithm does not take (a key of another algorithm). A former name of a key
    (``algorithm.emd_epsilon``) reads the key it became; a stored algorithm that is not
    registered (its plug-in not imported) has its stored keys alone."""
    section, name = key.split(".", 1)
    table = config.to_dict()[section]
    if section == "algorithm" and name not in table:
        from distfl.algorithms import algorithm_class
        from distfl.config import StoredParams

        if not isinstance(config.algorithm.params, StoredParams):
            name = algorithm_class(config.algorithm.name).Params.aliases.get(name, name)
    return table.get(name)


def gather_rows(
    paths: Iterable[str | Path], keys: Sequence[str] = (), *, runs: Sequence[Any] | None = None
) -> list[dict[str, Any]]:
    """One dict per run file, with the :data:`COLUMNS` (then one per config key in ``keys``,
    e.g. ``"algorithm.epsilon"``) in order. Scores that are undefined (WAS/WADB of a single
    cluster, no finite accuracy, no split) are None, and so is a key of ``[algorithm]`` that
    the run's algorithm does not take (``beta`` of a FedAvg run). Raises CheckpointError on
    a file that cannot be read and UserError on an unknown key. ``runs``: the files'
    :class:`~distfl.runfile.run.Run` objects when the caller has read them already."""
    keys = check_keys(keys)
    paths = list(paths)
    runs = [None] * len(paths) if runs is None else runs
    return with_newcomers([_row(path, keys, run) for path, run in zip(paths, runs, strict=True)])


@dataclass(frozen=True)
class Skipped:
    """A run file that ``gather`` left out: its path as found and why it cannot be read."""

    path: str
    reason: str
    #: the reader's own message, which names the file
    message: str = ""


def gather_files(
    paths: Iterable[str | Path], keys: Sequence[str] = (), *, errors: TextIO | None = None
) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """The rows of :func:`gather_rows` for the files that can be read, in order, and a
    :class:`Skipped` for each that cannot (a CheckpointError). An unknown key is a
    UserError, raised before any file is read. A file read without an integrity record
    (distfl 0.1.0's) is gathered and said so on ``errors``."""
    from distfl.runfile.run import read, unverified_warning

    keys = check_keys(keys)
    rows: list[dict[str, Any]] = []
    skipped: list[Skipped] = []
    for path in paths:
        try:
            run = read(path)
            if not run.verified and errors is not None:
                errors.write(unverified_warning(path))
            rows.append(_row(path, keys, run))
        except CheckpointError as exc:
            text = printable(exc)  # it may name parts of the file
            skipped.append(Skipped(str(path), _reason(printable(path), text), text))
    return with_newcomers(rows), skipped


def _reason(path: str | Path, message: str) -> str:
    """``message`` without its leading ``checkpoint PATH`` or ``run file PATH`` (the line
    that shows it names the file already)."""
    for name in dict.fromkeys((str(path), str(Path(path)))):
        for subject in (f"checkpoint {name}", f"run file {name}"):
            rest = message.removeprefix(subject)
            if rest != message and rest[:1] in (" ", ":"):
                return rest.lstrip(": ") or message
    return message


def _row(path: str | Path, keys: Sequence[str], run: Any) -> dict[str, Any]:
    """The row of one run file (``run``: its :class:`~distfl.runfile.run.Run`, or None to
    read it); ``keys`` checked. Every number is the Run's own
    (:meth:`~distfl.runfile.run.Run.summary`); the algorithm is named as ``suite`` and
    ``report`` name it (:func:`~distfl.tools.suite_plan.algorithm_label`: ``none``, one
    global model, by its aggregator, ``fedavg``)."""
    import numpy as np

    from distfl.runfile.run import read
    from distfl.tools.suite_plan import algorithm_label

    if run is None:
        run = read(path)
    try:
        s = run.summary()
        row: dict[str, Any] = {
            "file": str(path),
            "algorithm": printable(algorithm_label(run.config)),
            "seed": run.config.run.seed,
            "beta": _float_or_none(config_value(run.config, "algorithm.beta")),
            "rounds_done": s["round"],
            "rounds": s["rounds"],
            **{c: s[c] for c in COLUMNS[COLUMNS.index("clusters") :]},
        }
    except (OSError, KeyError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"run file {path} cannot be read: {first}") from None
    for key in keys:
        value = config_value(run.config, key)
        row[key] = printable(value) if isinstance(value, str) else value
    if s["newcomers"]:
        row.update({c: s[c] for c in NEWCOMER_COLUMNS})
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}


def _float_or_none(value) -> float | None:
    return None if value is None else float(value)


def _config_text(value: Any) -> str:
    """A config value as one would write it in ``--set`` (floats exact, lists as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


def cell_text(column: str, value: Any, table: bool) -> str:
    if value is None:
        return "-" if table else ""
    if column not in COLUMNS:  # a --key column: the config value as set
        return _config_text(value)
    if isinstance(value, float):
        return f"{value:.4f}" if table else repr(value)
    return str(value)


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table (numbers right-aligned); a header line first."""
    columns = list(rows[0]) if rows else list(COLUMNS)
    cells = [[cell_text(c, row[c], table=True) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    right = [all(_is_number(row[c]) for row in rows) for c in columns]

    def line(texts: list[str]) -> str:
        parts = [
            t.rjust(w) if r else t.ljust(w) for t, w, r in zip(texts, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip() + "\n"

    return line(columns) + "".join(line(r) for r in cells)


#: how --csv is named in a refusal, and what the user may do instead
CSV_TARGET = {
    "label": "--csv",
    "other": "give another --csv",
    "force": "pass --force to replace it",
}


def write_csv(
    rows: list[dict[str, Any]],
    path: str | Path,
    *,
    replace: bool,
    target: dict[str, str] | None = None,
) -> None:
    """Header plus one line per row, written beside and put in place (never half a file;
    :func:`~distfl.runfile.output.write_file`): an existing regular file at ``path`` is
    replaced only with ``replace``, anything else there never. ``target``: how a refusal
    names the path (default ``--csv``'s, :data:`CSV_TARGET`)."""
    columns = list(rows[0]) if rows else list(COLUMNS)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell_text(c, row[c], table=False) for c in columns])
    write_file(path, buf.getvalue(), replace=replace, **(target or CSV_TARGET))


def gather(
    args: Iterable[str | Path],
    stream: TextIO,
    csv_path: str | Path | None = None,
    keys: Sequence[str] = (),
    *,
    errors: TextIO | None = None,
    force: bool = False,
) -> int:
    """``distfl gather``: every run file is read before anything is written; the table of
    the readable ones goes to ``stream`` (and the CSV to ``csv_path``), then one line per
    file that cannot be read and a count to ``errors``. Returns the exit code: 0 when every
    file was read, 1 when some were skipped. A UserError (exit code 2, nothing written) for
    an unknown key, a path that does not exist, no run file found or none readable, and,
    before any file is read, a ``csv_path`` that is not a new file (a regular file is
    replaced with ``force``; a link, a FIFO, a device or a directory never)."""
    keys = check_keys(keys)
    if csv_path is not None:
        check_file(csv_path, replace=force, **CSV_TARGET)
    paths = find_run_files(args)
    rows, skipped = gather_files(paths, keys, errors=errors)
    if not rows:
        if len(skipped) == 1:  # the one file's own line, as status and inspect print it
            raise CheckpointError(skipped[0].message or f"{skipped[0].path}: {skipped[0].reason}")
        why = "; ".join(f"{s.path}: {s.reason}" for s in skipped)
        raise UserError(f"none of the {len(skipped)} run files could be read: {why}")
    if csv_path is not None:
        write_csv(rows, csv_path, replace=force)
    stream.write(format_table(rows))
    if not skipped:
        return 0
    stream.flush()
    if errors is not None:
        for s in skipped:
            errors.write(f"distfl gather: skipped {s.path}: {s.reason}\n")
        errors.write(
            f"distfl gather: {len(skipped)} of {len(paths)} run files skipped, "
            f"{len(rows)} gathered\n"
        )
    return 1
