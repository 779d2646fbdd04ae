"""Live export of a run while it goes (``run.export``), by rank 0 beside the run file, so that
a run can be followed with the tools one already uses:

- ``jsonl``: every row of the run file's tables, one JSON object per line in
  ``<out>.jsonl`` (``distfl-run.h5`` → ``distfl-run.jsonl``): ``{"table": "metrics",
  "round": 3, ...}`` with the table's columns (NaN as ``null``; an algorithm's own table
  under its name). It needs nothing beyond the standard library: ``tail -f``, ``jq`` or
  ``pandas.read_json(path, lines=True)`` read it.
- ``tensorboard``: the per-round metrics (``metrics/<column>``: the federation's
  ``metrics/accuracy_worst`` and ``metrics/accuracy_p10`` among them), each cluster's
  evaluated accuracy (``accuracy/<cluster>``), its worst client's
  (``accuracy_worst/<cluster>``) and its 10th percentile (``accuracy_p10/<cluster>``) and
  the wall clock (``timing/elapsed_s``) as TensorBoard scalars in ``<out>-tb/``, by round,
  through ``torch.utils.tensorboard`` (``pip install distfl[tensorboard]``).

Both are flushed at each evaluation and at the end. The run file stays the record: an
export is made from its rows, and a resumed run makes it again from the rows the file
holds (the JSON lines are written anew; TensorBoard drops the events of the rounds after
the file's last, ``purge_step``), so that an export never holds a round the run file
lost.

An export never changes anything outside the run: before the first round,
:func:`check_exports` refuses (one line, exit code 2) an export path that holds a symbolic
link, a FIFO, a device or anything but a regular file (a directory for TensorBoard), and one
that holds a file (a directory) unless ``--force`` is given or it is the export of the run
being resumed, which is made anew. The JSON lines are put in place from a temporary file
(:func:`distfl.runfile.output.place_file`), so their path is never opened: a FIFO there
cannot block the run."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from distfl.errors import ConfigError, UserError
from distfl.runfile.layout import ALGORITHM_PREFIX
from distfl.runfile.output import check_directory, check_file, place_file

#: (device, inode) of each export path that :func:`check_exports` found and may be made
#: anew, by path: the export replaces that file (directory) and nothing put there later
_CLEARED: dict[str, tuple[int, int]] = {}


def _target(kind: str) -> dict[str, str]:
    """How a refusal names the ``kind`` export, and what the user may do instead."""
    return {
        "label": f"the {kind} export",
        "other": f"give another --out or leave {kind} out of run.export",
        "force": "pass --force to replace it",
    }


def _inode(st: os.stat_result | None) -> tuple[int, int] | None:
    return None if st is None else (st.st_dev, st.st_ino)


def check_exports(config: Any, *, force: bool, resuming: str | Path | None) -> None:
    """Refuse (UserError, one line) before the first round the export paths of
    ``config.run.export`` that the run may not write: anything but a regular file at
    ``<out>.jsonl`` and anything but a directory at ``<out>-tb`` (a symbolic link, a FIFO,
    a device); an existing one unless ``force``, or ``config.run.out`` is the file
    ``resuming`` continues (its exports are made anew from the file)."""
    kinds = config.run.export
    if not kinds:
        return
    out = Path(config.run.out)
    jsonl, tb = export_paths(out)
    replace = force or (resuming is not None and _same_file(out, Path(resuming)))
    if "jsonl" in kinds:
        there = check_file(jsonl, replace=replace, **_target("jsonl"))
        _clear(jsonl, there)
    if "tensorboard" in kinds:
        there = check_directory(tb, existing=replace, **_target("tensorboard"))
        _clear(tb, there)


def _clear(path: Path, there: os.stat_result | None) -> None:
    if there is None:
        _CLEARED.pop(str(path), None)
    else:
        _CLEARED[str(path)] = _inode(there)


def _may_replace(path: Path) -> bool:
    """Whether what is at ``path`` is what :func:`check_exports` found there and cleared."""
    cleared = _CLEARED.pop(str(path), None)
    try:
        return cleared is not None and _inode(os.lstat(path)) == cleared
    except OSError:
        return False


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def export_paths(out: str | Path) -> tuple[Path, Path]:
    """(the JSON-lines file, the TensorBoard directory) of the run file ``out``."""
    out = Path(out)
    stem = out.with_suffix("") if out.suffix == ".h5" else out
    return stem.with_name(stem.name + ".jsonl"), stem.with_name(stem.name + "-tb")


def table_name(key: str) -> str:
    """A table's name in the export: its name in ``distfl.open(...).table(name)``."""
    return key[len(ALGORITHM_PREFIX) :] if key.startswith(ALGORITHM_PREFIX) else key


def _plain(value: Any) -> Any:
    """A cell as JSON holds it: NaN and infinities as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonLines:
    def __init__(self, path: Path) -> None:
        self.path = path
        fd = place_file(path, replace=_may_replace(path), **_target("jsonl"))
        self.file = os.fdopen(fd, "w", encoding="utf-8")

    def rows(self, key: str, rows: list[dict[str, Any]]) -> None:
        name = table_name(key)
        write = self.file.write
        for row in rows:
            line = {"table": name, **{k: _plain(v) for k, v in row.items()}}
            write(json.dumps(line, allow_nan=False) + "\n")

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoard:
    def __init__(self, directory: Path, first_round: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch's module needs the tensorboard package
            raise ConfigError(
                f"run.export names tensorboard, which needs the tensorboard package ({exc}); "
                "pip install distfl[tensorboard], or leave it out of run.export"
            ) from None
        there = check_directory(
            directory, existing=_may_replace(directory), **_target("tensorboard")
        )
        if there is None:
            try:
                os.mkdir(directory)
            except OSError as exc:
                raise UserError(
                    f"cannot write the tensorboard export {directory}: {exc.strerror or exc}"
                ) from None
        # the events of rounds from first_round on, left by an earlier writer, are dropped
        self.writer = SummaryWriter(log_dir=str(directory), purge_step=first_round)
        self.first_round = first_round

    def rows(self, key: str, rows: list[dict[str, Any]]) -> None:
        add = self.writer.add_scalar
        for row in rows:
            t = int(row.get("round", 0))
            if t < self.first_round:
                continue  # already in the directory (a resumed run)
            if key == "metrics":
                for name, value in row.items():
                    if name != "round" and _finite(value):
                        add(f"metrics/{name}", float(value), t)
            elif key == "evaluation":
                for name in ("accuracy", "accuracy_worst", "accuracy_p10"):
                    if _finite(row.get(name)):
                        add(f"{name}/{row['cluster']}", float(row[name]), t)
            elif key == "timing" and _finite(row.get("elapsed_s")):
                add("timing/elapsed_s", float(row["elapsed_s"]), t)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


class LiveExport:
    """A component of the server (:class:`distfl.runtime.components.Component`'s hooks;
    ``server`` is its :class:`~distfl.runtime.components.ServerView`): writes the rows the
    record gained since the last round to each export of ``run.export``; flushes them at
    each evaluation and at the end."""

    label = "the live export"

    def __init__(self) -> None:
        self.sinks: list[JsonLines | TensorBoard] = []
        self.written: dict[str, int] = {}

    def at_start(self, server: Any) -> None:
        kinds = server.config.run.export
        jsonl, tb = export_paths(server.config.run.out)
        if "jsonl" in kinds:
            self.sinks.append(JsonLines(jsonl))
        if "tensorboard" in kinds:
            self.sinks.append(TensorBoard(tb, first_round=server.state.rounds_done + 1))
        self.written = {}
        self._emit(server)  # the rows a resumed run's file holds

    def after_round(self, server: Any, result: Any) -> None:
        self._emit(server)
        if result.evaluated:
            for sink in self.sinks:
                sink.flush()

    def at_end(self, server: Any, summary: dict[str, Any]) -> None:
        self._emit(server)
        for sink in self.sinks:
            sink.close()
        self.sinks = []

    def _emit(self, server: Any) -> None:
        if not self.sinks:
            return
        for key, table in server.state.record.tables.items():
            start, end = self.written.get(key, 0), len(table)
            if end <= start:
                continue
            names = list(table.columns)
            rows = [{n: table.columns[n][i] for n in names} for i in range(start, end)]
            for sink in self.sinks:
                sink.rows(key, rows)
            self.written[key] = end


__all__ = ["LiveExport", "check_exports", "export_paths"]
