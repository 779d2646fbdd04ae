"""What the per-row tables of a run file (/metrics, /timing and the tables below them,
:data:`distfl.runfile.layout.TABLES`, and an algorithm's own) must hold, checked for
:class:`~distfl.runfile.contents.Contents`:

- their shapes (:func:`check_shapes`, before anything is hashed): each column one
  dimension of its declared dtype (a further column of an open table float64), all of one
  length, one row of /metrics and of /timing per round done;
- their values (:func:`check_values`): rounds within the rounds done, cluster ids of the
  tree, client ids of the run, counts not negative, accuracies from 0 to 1, and NaN only
  where a run writes NaN (:func:`check_missing`): the evaluation's figures are NaN in a
  round without an evaluation, or where no evaluated client had test data, and never
  missing in a round that evaluates every client of a leaf (every ``eval.every`` rounds
  and the last); the training losses NaN exactly in the rounds no client reported to;
  wall-clock seconds and MiB finite and not negative (NaN: a column a file was written
  before); each worker rank of /timing/workers once a round and within the largest
  world of the run (``data.num_clients + 1`` ranks: the rounds before a resume may come
  from another world than the file's last launch).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import h5py
import numpy as np

from distfl.runfile import layout

if TYPE_CHECKING:
    from distfl.runfile.opened import OpenedFile

TIMING_ATTRS = {"trainer", "loop_started", "sum_bytes_per_param"}
#: the columns of the tables whose values are a fraction (balanced or plain accuracy)
FRACTIONS = {"accuracy", "accuracy_plain", "accuracy_worst", "accuracy_p10"}
#: the figures of an evaluation: NaN in /metrics in a round without one (and, in either
#: table, where none of the evaluated clients had test data)
EVALUATED = ("accuracy", "accuracy_plain", "test_loss")
#: the wall-clock columns: seconds and MiB, never negative nor infinite
WALL_CLOCK = {"timing": ("elapsed_s", "rss_mb", "update_s"),
              "workers": ("train_s", "busy_s", "cache_mb", "rss_mb", "pooled_s")}  # fmt: skip


def check_shapes(c: OpenedFile) -> None:
    """Every table's kind, columns, dtypes and length, from the metadata; /timing's
    attributes."""
    f = c.f
    for top in ("metrics", "timing"):
        if not isinstance(f[top], h5py.Group):
            raise c.bad(f"/{top} is not a group")
    placed = {t.path for t in layout.TABLES} | {layout.ALGORITHM_TABLES}
    for top in ("metrics", "timing"):
        for name, item in f[top].items():
            if isinstance(item, h5py.Group) and f"{top}/{name}" not in placed:
                raise c.bad(f"/{top}/{name} is no part of a distfl run file")
    timing = f["timing"].attrs
    for key in timing:
        if key not in TIMING_ATTRS:
            raise c.bad(f"/timing@{key} is no part of a distfl run file")
    if "trainer" in timing:
        c.label(timing["trainer"], "/timing@trainer")
    for key in ("loop_started", "sum_bytes_per_param"):
        if key in timing:
            value = timing[key]
            if not isinstance(value, int | float | np.integer | np.floating) or not (
                math.isfinite(float(value)) and float(value) >= 0
            ):
                raise c.bad(f"/timing@{key} is not a non-negative number")
    for table in layout.TABLES:
        g = f.get(table.path)
        if g is None and "format" in f.attrs and not table.optional:  # (0.1.0 wrote some)
            raise c.bad(f"/{table.path} is missing (a file of a format has every table)")
        if g is not None:
            n = _table_shape(c, g, table)
            if table.key in ("metrics", "timing") and n not in (None, c.done):
                raise c.bad(f"/{table.path}'s columns hold {n} rows, not one for each of the "
                            f"{c.done} rounds done (/state@round)")  # fmt: skip
    own = f.get(layout.ALGORITHM_TABLES)
    if own is not None and not isinstance(own, h5py.Group):
        raise c.bad(f"/{layout.ALGORITHM_TABLES} is not a group of tables")
    for name, g in (own or {}).items():
        _table_shape(c, g, _own_table(c, name, g), own_table=True)


def _own_table(c: OpenedFile, name: str, g) -> layout.Table:
    """The declaration of an algorithm's own table as the file holds it (its form checked:
    a group of columns of one dimension and its ``columns`` attribute)."""
    where = f"/{layout.ALGORITHM_TABLES}/{name}"
    columns = list(g.values()) if isinstance(g, h5py.Group) else []
    if not columns or any(not isinstance(x, h5py.Dataset) or x.ndim != 1 for x in columns):
        raise c.bad(f"{where} is not a table (a group of columns)")
    if len({x.shape[0] for x in columns}) != 1:
        raise c.bad(f"{where}'s columns are not of one length")
    if set(g.attrs) - {"columns"}:
        raise c.bad(f"{where}@{sorted(set(g.attrs) - {'columns'})[0]} is no part of a distfl "
                    "run file")  # fmt: skip
    order = g.attrs.get("columns", np.array(sorted(g), dtype=object))
    listed = isinstance(order, np.ndarray) and order.ndim == 1
    if not listed or order.dtype.kind not in "OSU":
        raise c.bad(f"{where}@columns does not name its columns")
    if sorted(c.text(x, f"{where}@columns") for x in order) != sorted(g):
        raise c.bad(f"{where}@columns does not name its columns")
    return layout.found_table(name, {k: np.empty(0, g[k].dtype) for k in g})


def _kind(table: layout.Table, name: str, own_table: bool) -> str:
    if own_table:
        if name in ("round", "client", "other"):
            return "int"
        if name == "cluster":
            return "str"
        return "int" if table.column(name).kind == "int" else "float"
    return table.column(name).kind


def _table_shape(c: OpenedFile, g, table: layout.Table, *, own_table: bool = False) -> int | None:
    """Each column of ``g`` one dimension of its kind, all of one length: that length
    (None: no column)."""
    where = f"/{table.path}"
    if not isinstance(g, h5py.Group):
        raise c.bad(f"{where} is not a group of columns")
    tables = {t.path for t in layout.TABLES} | {layout.ALGORITHM_TABLES}
    lengths = set()
    for name, ds in g.items():
        if isinstance(ds, h5py.Group):
            if own_table or f"{table.path}/{name}" not in tables:
                raise c.bad(f"{where}/{name} is no part of a distfl run file")
            continue  # a table below this one (/metrics/clusters), checked on its own
        if not own_table and not table.open and name not in table.names:
            raise c.bad(f"{where}/{name} is no part of a distfl run file")
        lengths.add(c.dataset(f"{table.path}/{name}", _kind(table, name, own_table)).shape[0])
    if len(lengths) > 1:
        raise c.bad(f"{where}'s columns are not of one length")
    return lengths.pop() if lengths else None


def check_values(c: OpenedFile, done: int, nodes) -> None:
    """Every table's values (shapes checked before)."""
    for table in layout.TABLES:
        g = c.f.get(table.path)
        if g is not None:
            _table_values(c, g, table, done, nodes)
    for name, g in c.f.get(layout.ALGORITHM_TABLES, {}).items():
        table = layout.found_table(name, {k: np.empty(0, g[k].dtype) for k in g})
        _table_values(c, g, table, done, nodes, own_table=True)
    columns = {t.key: _columns(c.f.get(t.path)) for t in layout.TABLES}
    check_missing(c, columns)
    check_counts(c, columns)


def _columns(g) -> dict[str, np.ndarray]:
    if g is None:
        return {}
    return {k: v[()] for k, v in g.items() if isinstance(v, h5py.Dataset) and v.dtype.kind != "O"}


def _table_values(c: OpenedFile, g, table, done: int, nodes, *, own_table=False) -> None:
    """Rounds within the rounds done, text columns text (cluster ids of the tree), client
    ids of the run, declared counts not negative, accuracies from 0 to 1."""
    where = f"/{table.path}"
    for name, ds in g.items():
        if isinstance(ds, h5py.Group):
            continue
        kind = _kind(table, name, own_table)
        values = ds[()]
        if name == "round" and len(values) and (values.min() < 1 or values.max() > done):
            raise c.bad(f"{where}/round holds a round outside 1..{done}")
        if kind == "str":
            for x in values:
                text = c.text(x, f"{where}/{name}")
                if name == "cluster" and text not in nodes:
                    raise c.bad(f"{where}/cluster names {text[:40]!r}, which is not in "
                                "/hierarchy")  # fmt: skip
        elif own_table and name in ("client", "other"):
            if len(values) and (values.min() < 0 or values.max() >= c.K):
                raise c.bad(f"{where}/{name} holds a client id outside 0..{c.K - 1}")
        elif not own_table and kind == "int" and len(values) and values.min() < 0:
            raise c.bad(f"{where}/{name} holds a negative value")
        if name in FRACTIONS and not own_table:
            c.fractions(values, f"{where}/{name}")


def check_missing(c: OpenedFile, t: dict[str, dict[str, np.ndarray]]) -> None:
    """NaN where a run writes NaN, and nowhere else (the module's docstring)."""
    metrics, evaluation = t["metrics"], t["evaluation"]
    every_client_tests = bool(c.K) and int(c.f["clients/num_test"][()].min()) > 0
    for name in EVALUATED:
        if every_client_tests and name in evaluation and np.isnan(evaluation[name]).any():
            raise c.bad(f"/metrics/evaluation/{name} holds NaN, yet every client of the run "
                        "has test data (/clients/num_test)")  # fmt: skip
    rounds = np.arange(1, c.done + 1)
    ev_round = evaluation.get("round", np.zeros(0, np.int64))
    ev_acc = evaluation.get("accuracy", np.full(len(ev_round), np.nan))
    evaluated = np.isin(rounds, ev_round[~np.isnan(ev_acc)])
    for name in EVALUATED + ("accuracy_worst", "accuracy_p10"):
        if name not in metrics:
            continue
        known = ~np.isnan(metrics[name])
        # a figure exactly where an evaluation is (the low tail may be NaN there too: a
        # round written before its column)
        bad = known != evaluated if name in EVALUATED else known & ~evaluated
        if bad.any():
            r = int(rounds[bad][0])
            said = "holds a value" if known[r - 1] else "holds NaN"
            raise c.bad(f"/metrics/{name} {said} in round {r}, where /metrics/evaluation "
                        f"{'has no' if known[r - 1] else 'has an'} evaluation")  # fmt: skip
    _check_evaluation_rounds(c, t["membership"], evaluated, every_client_tests)
    participants = metrics.get("num_participants")
    for name in ("train_loss_first", "train_loss_last"):
        if name in metrics and participants is not None:
            finite = np.isfinite(metrics[name])
            wrong = finite != (participants > 0)
            if wrong.any():
                r = int(rounds[wrong][0])
                shown, n = float(metrics[name][r - 1]), int(participants[r - 1])
                raise c.bad(f"/metrics/{name} holds {shown!r} in round {r}, in which {n} "
                            "clients reported")  # fmt: skip
    for key, names in WALL_CLOCK.items():
        for name in names:
            values = t[key].get(name)
            if values is None:
                continue
            odd = np.isinf(values) | (values < 0) | (np.isnan(values) & (name == "elapsed_s"))
            if odd.any():
                where = layout.BY_KEY[key].path
                shown = float(values[odd][0])
                raise c.bad(f"/{where}/{name} holds {shown!r}, which is no count of seconds "
                            "or MiB")  # fmt: skip


def _check_evaluation_rounds(c: OpenedFile, membership, evaluated, every_client_tests) -> None:
    """A round that evaluates (every ``eval.every`` rounds, and the last of a finished
    run) has an evaluation where every client had test data and was in a leaf at the
    round's end (its rows of /metrics/membership count every client): then any client it
    evaluates has a figure."""
    if not every_client_tests or "round" not in membership or "clients" not in membership:
        return
    every, rounds = c.config.eval.every, c.config.run.rounds
    held = np.bincount(membership["round"], weights=membership["clients"], minlength=c.done + 1)
    for r in range(1, c.done + 1):
        due = r % every == 0 or r == rounds
        if due and held[r] == c.K and not evaluated[r - 1]:
            raise c.bad(f"/metrics/evaluation has no evaluation in round {r}, which evaluates "
                        f"(eval.every = {every}) every client of the run, each in a leaf "
                        "(/metrics/membership)")  # fmt: skip


def check_counts(c: OpenedFile, t: dict[str, dict[str, np.ndarray]]) -> None:
    """Counts of clients within the run's (of clusters within the tree's, of training
    clients within a client per cluster of the tree: an algorithm of soft clusters trains
    a client for several), groups of ``data.groups``, one row per worker rank and round."""
    K, G, N = c.K, len(c.config.groups), len(c.f["hierarchy"])
    for key, name, most, what in (
        ("metrics", "num_clusters", N, "clusters of /hierarchy"),
        ("metrics", "num_splits", N, "clusters of /hierarchy"),
        ("metrics", "num_participants", K * N, "clients times clusters of /hierarchy"),
        ("workers", "clients", K * N, "clients times clusters of /hierarchy"),
    ):
        values = t[key].get(name)
        if values is not None and len(values) and values.max() > most:
            raise c.bad(f"/{layout.BY_KEY[key].path}/{name} holds {int(values.max())}, more "
                        f"than the {most} {what}")  # fmt: skip
    for key, name in (("clusters", "size"), ("clusters", "sampled"), ("evaluation", "clients"),
                      ("membership", "clients")):  # fmt: skip
        values = t[key].get(name)
        if values is not None and len(values) and values.max() > K:
            raise c.bad(f"/{layout.BY_KEY[key].path}/{name} holds {int(values.max())}, more "
                        f"than the run's {K} clients")  # fmt: skip
    for key in ("evaluation", "membership"):
        rows = t[key]
        if "round" in rows and "clients" in rows:
            per_round = np.bincount(rows["round"], weights=rows["clients"])
            if len(per_round) and per_round.max() > K:
                raise c.bad(f"/{layout.BY_KEY[key].path}/clients counts more than the run's "
                            f"{K} clients in one round")  # fmt: skip
    group = t["membership"].get("group")
    if group is not None and len(group) and group.max() >= G:
        raise c.bad(f"/metrics/membership/group holds a group outside 0..{G - 1} (data.groups)")
    workers = t["workers"]
    rank = workers.get("rank")
    if rank is not None and len(rank) and rank.max() > K:
        raise c.bad(f"/timing/workers/rank holds rank {int(rank.max())}, outside every world "
                    f"of this run (0 to data.num_clients = {K})")  # fmt: skip
    if rank is not None and "round" in workers:
        pairs = np.stack([workers["round"], rank], axis=1)
        if len(np.unique(pairs, axis=0)) != len(pairs):
            raise c.bad("/timing/workers holds two rows of one worker rank in one round")


__all__ = ["FRACTIONS", "TIMING_ATTRS", "check_missing", "check_shapes", "check_values"]
