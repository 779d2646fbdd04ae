"""Live export of a run while it goes (``run.export``), by rank 0 beside the run file, so that
a run can be followed with the tools one already uses:

- ``jsonl``: every row of the run file's tables, one JSON object per line in
  ``<out>.jsonl`` (``distfl-run.h5`` → ``distfl-run.jsonl``): ``{"table": "metrics",
  "round": 3, ...}`` with the table's columns (NaN as ``null``; an algorithm's own table
  under its name). It needs nothing beyond the standard library: ``tail -f``, ``jq`` or
  ``pandas.read_json(path, lines=True)`` read it.
- ``tensorboard``, ``mlflow``, ``wandb``: the per-round metrics, each cluster's accuracy and
  the wall clock as scalars of an experiment tracker, by round, offline
  (:mod:`distfl.runtime.trackers`: TensorBoard events in ``<out>-tb/``, an MLflow run in the
  file store ``mlruns/`` beside the run file, a W&B offline run in ``<out>-wandb/``; each
  needs its package, ``pip install distfl[tensorboard]`` and so on).

Each is flushed at each evaluation and at the end. The run file stays the record: an
export is made from its rows, and a resumed run makes it again from the rows the file
holds (the JSON lines, the MLflow run and the W&B run are written anew; TensorBoard drops
the events of the rounds after the file's last, ``purge_step``), so that an export never
holds a round the run file lost.

An export never changes anything outside the run: before the first round,
:func:`check_exports` refuses (one line, exit code 2) an export path that holds a symbolic
link, a FIFO, a device or anything but a regular file (a directory for TensorBoard, MLflow
and W&B), and one that holds a file (a directory) unless ``--force`` is given or it is the
export of the run being resumed, which is made anew (the MLflow store is shared by the runs
beside it: a directory there is added to). The JSON lines are put in place from a temporary file
(:func:`distfl.runfile.output.place_file`), so their path is never opened: a FIFO there
cannot block the run."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from distfl.runfile.layout import ALGORITHM_PREFIX
from distfl.runfile.output import check_directory, check_file, place_file
from distfl.runtime.trackers import MLflow, TensorBoard, WandB

#: (device, inode) of each export path that :func:`check_exports` found and may be made
#: anew, by path: the export replaces that file (directory) and nothing put there later
_CLEARED: dict[str, tuple[int, int]] = {}
#: by run file: whether its run replaces an earlier one of its path (--force, a resume)
_REPLACING: dict[str, bool] = {}


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
    ``<out>.jsonl`` and anything but a directory at ``<out>-tb``, ``<out>-wandb`` and the
    MLflow store (a symbolic link, a FIFO, a device); an existing one (but the MLflow store)
    unless ``force``, or ``config.run.out`` is the file ``resuming`` continues (its exports
    are made anew from the file)."""
    kinds = config.run.export
    if not kinds:
        return
    out = Path(config.run.out)
    paths = export_paths(out)
    replace = force or (resuming is not None and _same_file(out, Path(resuming)))
    for kind in kinds:
        if kind == "jsonl":
            there = check_file(paths[kind], replace=replace, **_target(kind))
        else:
            existing = replace or kind == "mlflow"  # the store of every run beside
            there = check_directory(paths[kind], existing=existing, **_target(kind))
        _clear(paths[kind], there)
    _REPLACING[str(out)] = replace


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


def export_paths(out: str | Path) -> dict[str, Path]:
    """Where each export of the run file ``out`` goes, by kind: ``<out>.jsonl``,
    ``<out>-tb``, ``mlruns`` beside it (the MLflow store), ``<out>-wandb``."""
    out = Path(out)
    stem = out.with_suffix("") if out.suffix == ".h5" else out
    return {
        "jsonl": stem.with_name(stem.name + ".jsonl"),
        "tensorboard": stem.with_name(stem.name + "-tb"),
        "mlflow": out.with_name("mlruns"),
        "wandb": stem.with_name(stem.name + "-wandb"),
    }


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


class LiveExport:
    """A component of the server (:class:`distfl.runtime.components.Component`'s hooks;
    ``server`` is its :class:`~distfl.runtime.components.ServerView`): writes the rows the
    record gained since the last round to each export of ``run.export``; flushes them at
    each evaluation and at the end."""

    label = "the live export"

    def __init__(self) -> None:
        self.sinks: list[Any] = []
        self.written: dict[str, int] = {}

    def at_start(self, server: Any) -> None:
        config = server.config
        out = Path(config.run.out)
        paths = export_paths(out)
        replacing = _REPLACING.pop(str(out), False)
        for kind in config.run.export:
            path = paths[kind]
            if kind == "jsonl":
                self.sinks.append(JsonLines(path))
            elif kind == "tensorboard":
                first = server.state.rounds_done + 1
                existing = _may_replace(path)
                self.sinks.append(TensorBoard(path, first, existing=existing, target=_target(kind)))
            elif kind == "mlflow":
                _may_replace(path)  # forgotten only: the store is every run's, added to
                self.sinks.append(MLflow(path, out, config, replace=replacing))
            else:
                existing = _may_replace(path)
                self.sinks.append(WandB(path, out, config, existing=existing, target=_target(kind)))
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
