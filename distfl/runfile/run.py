"""A run file as one read-only object: what every reader of a run shows comes from here.

:class:`Run` is the one model of a run's results. ``distfl inspect``, ``status``,
``gather``, ``report`` and the Python API (:func:`distfl.open`) all read a file through
:func:`read`, and each quantity they show of it (the clusters found, the final accuracy,
the first split, the scores of the final assignment) is defined once, as an attribute of
:class:`Run`, so that they cannot disagree.

A file is read once, with :func:`distfl.runfile.reader.read_run_file` (all but the cluster
models and /state's arrays), and the plug-ins its config names are not imported unless
asked for (``distfl report --trust-plugins``). Tables are pandas DataFrames when pandas is
importable (``pip install distfl[pandas]``) and NumPy record arrays otherwise, with the
same columns in the same order: the names of the file's columns
(:data:`distfl.runfile.layout.TABLES`), cluster ids as text.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from distfl.errors import UnverifiedRunFile
from distfl.hierarchy import clusters_found, first_split, node_order
from distfl.metrics import at_last_evaluation, last_finite
from distfl.metrics.complexity import to_target
from distfl.plugins import ALGORITHMS
from distfl.runfile import layout
from distfl.runfile.frames import (
    make_table,
    readonly,
    recorded_statistics,
    rows_table,
    run_table,
)
from distfl.runfile.reader import UNVERIFIED, RunFile, read_run_file
from distfl.runfile.tree import Node, Tree, score_text, tree_lines
from distfl.text import printable

#: the per-row tables of a run file, by their names in distfl.runfile.layout.TABLES
TABLES = tuple(t.key for t in layout.TABLES)


# -- a run file --------------------------------------------------------------------------


class Run:
    """A run file, read once by :func:`open`; read-only (nothing here writes the file, and
    its attributes cannot be set). Its arrays cannot be written to; tables are made anew
    at each access, the caller's to change.

    Tables are pandas DataFrames when pandas is importable, else NumPy record arrays with
    the same column names (text as fixed-width ``str``). Each built-in table of the layout
    (:data:`distfl.runfile.layout.TABLES`) is an attribute of its name: ``run.metrics``,
    ``run.clusters``, ``run.evaluation``, ``run.membership``, ``run.timing``,
    ``run.workers``."""

    __slots__ = ("_path", "_file", "_tree", "_scores")

    def __init__(self, path: str | os.PathLike, file: RunFile):
        object.__setattr__(self, "_path", Path(path))
        object.__setattr__(self, "_file", file)
        object.__setattr__(self, "_tree", None)
        object.__setattr__(self, "_scores", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a distfl Run is read-only: {name!r} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a distfl Run is read-only: {name!r} cannot be deleted")

    # -- what the run was ----------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def config(self):
        """The config stored in the file (a frozen :class:`distfl.config.Config`)."""
        return self._file.config

    @property
    def algorithm(self) -> str:
        return self._file.config.algorithm.name

    @property
    def num_clients(self) -> int:
        return self._file.config.data.num_clients

    @property
    def round(self) -> int:
        """Rounds done (the round of the file's last checkpoint)."""
        return int(self._file.state["round"])

    @property
    def rounds(self) -> int:
        """Rounds the run was to do (``run.rounds``)."""
        return self._file.config.run.rounds

    @property
    def finished(self) -> bool:
        """Whether the run reached ``run.rounds`` (else ``distfl run --resume`` goes on)."""
        return self.round >= self.rounds

    @property
    def world_size(self) -> int:
        """Processes of the launch that wrote the file."""
        return self._file.world_size

    @property
    def world(self) -> dict[str, Any] | None:
        """Where the ranks of that launch ran (``/world``; None: not recorded)."""
        return None if self._file.world is None else dict(self._file.world)

    @property
    def version(self) -> str:
        """The distfl that wrote the file."""
        return self._file.version

    @property
    def created(self) -> str:
        """When the run's first file was written (ISO 8601, UTC)."""
        return self._file.created

    @property
    def written(self) -> str:
        """When this file was written (ISO 8601, UTC)."""
        return self._file.written

    @property
    def verified(self) -> bool:
        """Whether the file's integrity record covered everything it holds; False for a
        file without one (distfl 0.1.0's), of which only /state was checked."""
        return self._file.verified

    @property
    def stored(self) -> RunFile:
        """The file as :func:`distfl.runfile.reader.read_run_file` read it: the arrays behind
        every attribute here, for code that draws or tabulates them (the report)."""
        return self._file

    # -- tables --------------------------------------------------------------------------

    def table(self, name: str):
        """The per-row table ``name`` (one of :data:`TABLES`: metrics, clusters,
        evaluation, membership, timing, workers, or one of the algorithm's own tables
        that the file holds, :attr:`own_tables`) with the file's columns
        (:data:`distfl.runfile.layout.TABLES` describes each); a DataFrame when pandas is
        importable, else a NumPy record array."""
        if name in layout.BY_KEY:
            return run_table(name, self._file.tables.get(name, {}))
        own = self._file.tables.get(layout.ALGORITHM_PREFIX + name)
        if own is None:
            raise KeyError(
                f"no table {name!r} in {self.path}; tables: "
                f"{', '.join([*TABLES, *self.own_tables])}"
            )
        return run_table(layout.ALGORITHM_PREFIX + name, own)

    @property
    def own_tables(self) -> list[str]:
        """The names of the tables of the run's algorithm's own that the file holds
        (/metrics/tables/<name>), sorted."""
        prefix = layout.ALGORITHM_PREFIX
        return sorted(k[len(prefix) :] for k in self._file.tables if k.startswith(prefix))

    @property
    def statistics(self) -> list[str]:
        """The per-cluster statistics the run recorded (:func:`recorded_statistics`), for
        :meth:`statistic`."""
        return recorded_statistics(self._file.tables.get("clusters", {}))

    def statistic(self, name: str):
        """The per-cluster statistic ``name`` (one an algorithm declares) round by round: a
        column ``round`` (the rounds in which a cluster has a value), then one column per
        cluster id (tree order) with its value in that round, NaN in the rounds it has none."""
        stored = self._file.tables.get("clusters", {})
        if name not in self.statistics:
            known = ", ".join(self.statistics) or "none"
            raise KeyError(f"no statistic {name!r} in {self._path}; recorded: {known}")
        values = np.asarray(stored[name], dtype=np.float64)
        ok = np.isfinite(values)
        rounds = np.asarray(stored["round"], dtype=np.int64)[ok]
        cluster = np.asarray([str(c) for c in stored["cluster"]], dtype=object)[ok]
        values = values[ok]
        steps = np.unique(rounds)
        columns: dict[str, np.ndarray] = {"round": steps}
        for cid in sorted(set(cluster), key=node_order):
            column = np.full(len(steps), np.nan)
            mine = cluster == cid
            column[np.searchsorted(steps, rounds[mine])] = values[mine]
            columns[cid] = column
        return make_table(columns)

    # -- clients and clusters ------------------------------------------------------------

    @property
    def tree(self) -> Tree:
        """The cluster hierarchy (``/hierarchy``)."""
        if self._tree is None:
            tree = Tree(self._file.hierarchy, self._file.clients["accuracy"])
            object.__setattr__(self, "_tree", tree)
        return self._tree

    @property
    def leaves(self) -> list[str]:
        """The final clusters' ids (``/final/leaves``; :attr:`assignment` indexes them)."""
        return list(self._file.leaves)

    @property
    def assignment(self) -> np.ndarray:
        """Each client's final cluster id (``[K]`` str; "" for a client in no cluster)."""
        leaves = self._file.leaves
        ids = [leaves[i] if i >= 0 else "" for i in self._file.assignment.tolist()]
        return readonly(np.asarray(ids, dtype=str))

    @property
    def groups(self) -> np.ndarray:
        """Each client's ground-truth group (``[K]`` int64, an index into ``data.groups``)."""
        return readonly(np.asarray(self._file.clients["group"], dtype=np.int64))

    @property
    def group_names(self) -> tuple[str, ...]:
        """The ground-truth groups' names (``data.groups[i].name``; "" where unnamed)."""
        return tuple(g.name for g in self._file.config.groups)

    @property
    def class_counts(self) -> np.ndarray:
        """``[K, C]`` each client's samples per class (train and test)."""
        return readonly(self._file.clients["class_counts"])

    @property
    def clients(self):
        """One row per client: client (its id), group (ground truth), cluster (its final
        cluster's id), accuracy (balanced, at the last evaluation), num_train, num_test
        (and owner, for natural partitions)."""
        c = self._file.clients
        columns = {
            "client": np.arange(len(c["group"]), dtype=np.int64),
            "group": np.asarray(c["group"], dtype=np.int64),
            "cluster": np.asarray(self.assignment, dtype=object),
            "accuracy": np.asarray(c["accuracy"], dtype=np.float64),
            "num_train": np.asarray(c["num_train"], dtype=np.int64),
            "num_test": np.asarray(c["num_test"], dtype=np.int64),
        }
        if "owner" in c:
            columns["owner"] = np.asarray(c["owner"], dtype=np.int64)
        return make_table(columns)

    # -- what the run found: each quantity defined here once, for inspect, gather, report,
    # -- status and the Python API alike ----------------------------------------------------

    @property
    def num_clusters(self) -> int:
        """The clusters the run found (:func:`distfl.hierarchy.clusters_found`): the final
        leaves that hold at least one client; :attr:`leaves` counts the empty ones too."""
        return clusters_found(self._file.assignment)

    @property
    def accuracy(self) -> float | None:
        """The federation's balanced accuracy at the last evaluation, as the run recorded
        and printed it: the last value of :attr:`metrics`' ``accuracy`` (a mean over the
        evaluated clients, weighted by test samples where ``eval.weighted``); None when the
        run has not evaluated."""
        acc = last_finite(self._file.tables.get("metrics", {}).get("accuracy", ()))
        return None if math.isnan(acc) else acc

    def _at_last_evaluation(self, column: str) -> float | None:
        metrics = self._file.tables.get("metrics", {})
        if column not in metrics:
            return None  # a file written before the column
        value = at_last_evaluation(metrics.get("accuracy", ()), metrics[column])
        return None if math.isnan(value) else value

    @property
    def accuracy_worst(self) -> float | None:
        """The lowest balanced accuracy of a client at the last evaluation (the evaluation
        of :attr:`accuracy`: ``/metrics/accuracy_worst`` in its row), unweighted, over the
        evaluated clients; None when the run has not evaluated or the file was written
        before the column."""
        return self._at_last_evaluation("accuracy_worst")

    @property
    def accuracy_p10(self) -> float | None:
        """The 10th percentile of the clients' balanced accuracies at the last evaluation
        (:func:`distfl.metrics.low_tail`: numpy's default linear interpolation,
        unweighted, over the evaluated clients), as :attr:`accuracy_worst`."""
        return self._at_last_evaluation("accuracy_p10")

    @property
    def newcomers(self) -> int:
        """The newcomers (``data.held_out``) the run evaluated at each evaluation: clients
        that never trained, each given a model by the algorithm's rule (0: none)."""
        held = self._file.tables.get("held_out", {}).get("round", ())
        return int(np.sum(np.asarray(held) == np.max(held))) if len(held) else 0

    @property
    def held_out_scores(self) -> dict[str, float | None]:
        """The newcomers' figures at the last evaluation (``data.held_out``): their mean,
        worst and 10th-percentile balanced accuracy (held_out_accuracy, _worst, _p10) and the
        ARI of the clusters they joined against their groups (held_out_ari); each None
        without newcomers (the ARI also for an algorithm without clusters to score)."""
        newcomers = self.newcomers
        return {c: self._at_last_evaluation(c) if newcomers else None
                for c in layout.HELD_OUT_COLUMNS}  # fmt: skip

    @property
    def first_split(self) -> int | None:
        """The round of the hierarchy's first split (:func:`distfl.hierarchy.first_split`);
        None when no cluster split."""
        return first_split(self._file.hierarchy)

    @property
    def wall_s(self) -> float | None:
        """The rounds' wall clock (``/timing``'s last ``elapsed_s``); None without a round."""
        elapsed = self._file.tables.get("timing", {}).get("elapsed_s")
        return float(elapsed[-1]) if elapsed is not None and len(elapsed) else None

    @property
    def membership_kind(self) -> str:
        """What the run's clusters say of a client (the algorithm's ``membership``, read
        from distfl's registry without importing a plug-in: "hard" for one it does not
        know): "hard", "largest weight" (soft membership, scored on each client's largest
        weight) or "none" (no clusters: no Rand index nor ARI)."""
        name = self._file.config.algorithm.name
        if name not in ALGORITHMS:
            return "hard"
        return str(getattr(ALGORITHMS.get(name), "membership", "hard"))

    def scores(self) -> dict[str, Any]:
        """The final assignment scored: ``was`` and ``wadb`` (of the clusters' class
        distributions; None where undefined: one cluster, or every cluster a singleton),
        ``groups`` (the distinct ground-truth groups recorded), ``rand`` and ``ari`` (the
        assignment against them; None for an algorithm without clusters, ``membership``
        "none"), and ``membership``."""
        if self._scores is None:
            from distfl.metrics import adjusted_rand_index, rand_index, wadb, was

            groups = self._file.clients["group"]
            counts = self._file.clients["class_counts"]
            assignment = self._file.assignment
            kind = self.membership_kind
            scored = kind != "none"
            scores = {
                "was": was(counts, assignment) if scored else None,
                "wadb": wadb(counts, assignment) if scored else None,
                "groups": int(len(np.unique(groups))),
                "rand": float(rand_index(groups, assignment)) if scored else None,
                "ari": float(adjusted_rand_index(groups, assignment)) if scored else None,
                "membership": kind,
            }
            object.__setattr__(self, "_scores", scores)
        return dict(self._scores)

    def summary(self) -> dict[str, Any]:
        """The run in numbers, as ``distfl inspect``, ``distfl gather`` and ``distfl report``
        show them: file, algorithm, dataset, clients, groups, round, rounds, finished,
        clusters (:attr:`num_clusters`), leaves (final leaves, empty ones included),
        accuracy (:attr:`accuracy`), accuracy_worst (:attr:`accuracy_worst`), accuracy_p10
        (:attr:`accuracy_p10`), was, wadb, rand, ari, membership (:meth:`scores`), first_split
        (:attr:`first_split`), wall_s (:attr:`wall_s`), test_loss (the mean test loss of
        the last evaluation), sim_s (the virtual clock's time:
        [participation]), rounds_to_target, bytes_to_target, sim_s_to_target (until the mean
        test loss first reached ``eval.loss_target``: :func:`~distfl.metrics.complexity.to_target`),
        newcomers (:attr:`newcomers`) and their figures (:attr:`held_out_scores`). An undefined
        value is None."""
        scores = self.scores()
        metrics = self._file.tables.get("metrics", {})
        target = to_target(metrics, self._file.config.eval.loss_target)
        sim = [float(x) for x in metrics.get("sim_elapsed_s", ()) if x == x]
        return {
            "file": str(self._path),
            "algorithm": self.algorithm,
            "dataset": self._file.config.data.dataset,
            "clients": self.num_clients,
            "groups": scores["groups"],
            "round": self.round,
            "rounds": self.rounds,
            "finished": self.finished,
            "clusters": self.num_clusters,
            "leaves": len(self._file.leaves),
            "accuracy": self.accuracy,
            "accuracy_worst": self.accuracy_worst,
            "accuracy_p10": self.accuracy_p10,
            "was": scores["was"],
            "wadb": scores["wadb"],
            "rand": scores["rand"],
            "ari": scores["ari"],
            "membership": scores["membership"],
            "first_split": self.first_split,
            "wall_s": self.wall_s,
            "test_loss": self._at_last_evaluation("test_loss"),
            "sim_s": sim[-1] if sim else None,
            **{f"{k}_to_target": v for k, v in target.items()},
            "newcomers": self.newcomers,
            **self.held_out_scores,
        }

    def __repr__(self) -> str:
        cfg = self._file.config
        acc = self.accuracy
        accuracy = "n/a" if acc is None else f"{acc:.3f}"
        note = "" if self.verified else ", unverified"
        return (
            f"<distfl.Run {str(self._path)!r}: {printable(cfg.algorithm.name)} on "
            f"{printable(cfg.data.dataset)}, {cfg.data.num_clients} clients, round "
            f"{self.round} of {self.rounds}, {self.num_clusters} clusters, accuracy "
            f"{accuracy}{note}>"
        )


def participation_line(metrics) -> str | None:
    """What participation did over a run's rounds, in words, from its /metrics columns
    (``unavailable``, ``dropped``, ``late``, ``sim_elapsed_s``); None when it did nothing
    and there is no clock (a run without [participation])."""
    counts = {k: int(np.sum(np.asarray(metrics.get(k, ()), dtype=np.int64)))
              for k in ("unavailable", "dropped", "late")}  # fmt: skip
    clock = [float(x) for x in metrics.get("sim_elapsed_s", ()) if x == x]
    if not any(counts.values()) and not clock:
        return None
    from distfl.progress import duration

    lost = (f"{counts['dropped']:,} dropped out, {counts['late']:,} late, "
            f"{counts['unavailable']:,} planned but unavailable")  # fmt: skip
    if not any(counts.values()):
        lost = "none lost"
    return lost + (f"; simulated time {duration(clock[-1])}" if clock else "")


def _table_accessor(table: layout.Table) -> property:
    """``Run.<key>`` of a built-in table: :meth:`Run.table` of it, documented by its layout
    (a file written before a column existed lacks it)."""
    more = ", then the statistics the algorithms declare" if table.open else ""
    doc = f"The {table.key} table, {table.rows}: {', '.join(table.names)}{more} (:meth:`table`)."
    return property(lambda run: run.table(table.key), doc=doc)


# Run.metrics, Run.clusters, ...: one per table of the layout
for _table in layout.TABLES:
    setattr(Run, _table.key, _table_accessor(_table))


def read(path: str | os.PathLike, *, plugins: bool = False) -> Run:
    """:func:`open`, for the project's own readers (``inspect``, ``status``, ``gather``,
    ``report``): ``plugins`` imports the file's ``run.plugins`` (code the file names; only
    ``distfl report --trust-plugins`` asks for it)."""
    return Run(path, read_run_file(path, state=False, plugins=plugins))


def unverified_warning(path: str | os.PathLike) -> str:
    """The line every reader writes on stderr for a file without an integrity record."""
    return f"distfl: warning: run file {printable(path)} {UNVERIFIED}\n"


def open(path: str | os.PathLike) -> Run:
    """Read the run file at ``path`` (one written by ``distfl run`` or :func:`run`, a
    finished run's or a checkpoint of one in progress). Raises
    :class:`~distfl.errors.CheckpointError` with the reason when the file is missing,
    damaged (its integrity record does not match), inconsistent with its own config or
    not a distfl run file. A file without an integrity record (distfl 0.1.0's) is read
    with :attr:`Run.verified` False and an :class:`~distfl.errors.UnverifiedRunFile`
    warning. The plug-ins its config names (``run.plugins``) are not imported."""
    run = read(path)
    if not run.verified:
        warnings.warn(UnverifiedRunFile(f"run file {path} {UNVERIFIED}"), stacklevel=2)
    return run


__all__ = [
    "TABLES",
    "Node",
    "Run",
    "Tree",
    "make_table",
    "open",
    "participation_line",
    "read",
    "recorded_statistics",
    "rows_table",
    "score_text",
    "tree_lines",
    "unverified_warning",
]
