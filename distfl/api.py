"""The Python API: run files as objects, and runs and suites launched from Python.

::

    import distfl

    run = distfl.open("distfl-run.h5")   # a read-only Run
    run.metrics                          # one row per round
    run.tree                             # the cluster hierarchy; print(run.tree) draws it
    run.summary()                        # the numbers `distfl inspect` prints
    distfl.run(out="more.h5", overrides={"run.rounds": 50})    # a one-process run, here
    distfl.suite(["rotated"], algorithms=["fedgwc", "none"], out="suite")

:func:`open` reads a file once, with :func:`distfl.checkpoint.read_run_file` (all but the
cluster models and /state's arrays), and never imports the plug-ins its config names.
Tables are pandas DataFrames when pandas is importable (``pip install distfl[pandas]``) and
NumPy record arrays otherwise, with the same columns in the same order: the names of the
file's columns (:data:`distfl.record.layout.TABLES`), cluster ids as text.
:func:`run` runs ``distfl run``'s code (:func:`distfl.launch.run_config`,
:func:`distfl.launch.launch`) with one process, W = 1, and gives the same file, bit for bit,
as ``distfl run`` with the same settings; :func:`suite` runs ``distfl suite``
(:func:`distfl.tools.suite.suite`). Both raise the project's errors
(:class:`~distfl.errors.ConfigError`, :class:`~distfl.errors.UserError`, ...) where the
command prints one line and exits.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

import numpy as np

from distfl.checkpoint import RunFile, read_run_file
from distfl.errors import ConfigError, UserError
from distfl.hierarchy import HierarchyNode, node_order
from distfl.metrics import federation_mean
from distfl.record import layout

#: the per-row tables of a run file, by their names in distfl.record.layout.TABLES
TABLES = tuple(t.key for t in layout.TABLES)


# -- tables ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _pandas():
    """The pandas module, or None where it is not importable."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def make_table(columns: Mapping[str, np.ndarray]):
    """Columns of equal length, in order, as a pandas DataFrame when pandas is importable,
    else as a NumPy record array with the same column names (text columns as fixed-width
    ``str``)."""
    pd = _pandas()
    if pd is not None:
        return pd.DataFrame({name: np.asarray(values) for name, values in columns.items()})
    arrays = []
    for values in columns.values():
        values = np.asarray(values)
        if values.dtype == object:
            values = values.astype(str) if len(values) else np.zeros(0, dtype="U1")
        arrays.append(values)
    dtype = [(name, a.dtype) for name, a in zip(columns, arrays, strict=True)]
    return np.rec.fromarrays(arrays, dtype=dtype)


def _column_names(key: str, stored: Mapping[str, np.ndarray]) -> list[str]:
    """The columns of one of the file's per-row tables, in order: the declared ones it has
    (all of them for a table the file lacks), then the further ones by name (an
    algorithm's own statistics)."""
    table = layout.BY_KEY[key]
    names = [c.name for c in table.columns if c.name in stored or not stored]
    return names + sorted(n for n in stored if n not in table.names)


def _run_table(key: str, stored: Mapping[str, np.ndarray]):
    """One of the file's per-row tables (:func:`_column_names`; a table the file lacks has
    its declared columns and no row)."""
    table = layout.BY_KEY[key]
    names = _column_names(key, stored)
    return make_table(
        {n: stored[n] if n in stored else np.zeros(0, table.column(n).dtype) for n in names}
    )


def rows_table(rows: list[dict[str, Any]], columns: Iterable[str]):
    """Rows (dicts) as a table of ``columns`` (:func:`make_table`): a column of whole
    numbers is int64, one of numbers (None among them: NaN) float64, one of text str."""
    out: dict[str, np.ndarray] = {}
    for column in columns:
        values = [row.get(column) for row in rows]
        numbers = all(
            v is None or (isinstance(v, int | float | np.number) and not isinstance(v, bool))
            for v in values
        )
        if values and all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values
        ):
            out[column] = np.asarray(values, dtype=np.int64)
        elif numbers:
            out[column] = np.asarray([math.nan if v is None else v for v in values], np.float64)
        else:
            out[column] = np.asarray(values, dtype=object)
    return make_table(out)


def _readonly(values) -> np.ndarray:
    """A view of ``values`` that cannot be written to (no copy of a large matrix), so that
    the Run's arrays stay as read."""
    a = np.asarray(values).view()
    a.flags.writeable = False
    return a


# -- the cluster tree --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Node:
    """A cluster of the hierarchy, as ``/hierarchy/<id>`` records it."""

    #: "0" is the root (IFCA, FeSEM and the oracle have one root per initial cluster: "0",
    #: "1", ...), "0.1" the second child of "0"
    id: str
    #: the parent's id; "" for a root
    parent: str
    #: the children's ids, in order ("0.2" before "0.10")
    children: tuple[str, ...]
    #: its clients (global ids, ascending): a split node's when it split, a leaf's at the end
    members: np.ndarray
    #: the round it was made in (0: a root)
    created_round: int
    #: the round it split in; -1 for a leaf
    split_round: int
    #: ancestors above it (0 for a root)
    depth: int
    #: what the algorithm stored at its split, by name (FedGWC: db_scores, interaction,
    #: affinity, labels; EMD-CFL: distances, adjacency, labels; CFL: similarity, ...)
    datasets: Mapping[str, np.ndarray]

    @property
    def size(self) -> int:
        """Its number of members."""
        return int(len(self.members))

    @property
    def is_leaf(self) -> bool:
        return self.split_round < 0

    def __repr__(self) -> str:
        what = "leaf" if self.is_leaf else f"split at round {self.split_round}"
        return f"Node({self.id!r}, {self.size} clients, {what})"


class Tree(Mapping[str, Node]):
    """The cluster hierarchy of a run: a mapping of cluster id to :class:`Node`, iterated
    parents before children (:func:`distfl.hierarchy.node_order`). ``print(tree)`` draws it
    as ``distfl inspect`` does (:func:`distfl.tools.inspection.tree_lines`)."""

    def __init__(self, hierarchy: list[HierarchyNode], accuracy: np.ndarray):
        self._hierarchy = hierarchy
        self._accuracy = accuracy
        kids: dict[str, list[str]] = {}
        for n in hierarchy:
            if n.parent:
                kids.setdefault(n.parent, []).append(n.id)
        parents = {n.id: n.parent for n in hierarchy}

        def depth(cid: str) -> int:
            d = 0
            while parents.get(cid) and d <= len(parents):  # a parent loop stops too
                cid, d = parents[cid], d + 1
            return d

        self._nodes: dict[str, Node] = {}
        for n in sorted(hierarchy, key=lambda n: node_order(n.id)):
            self._nodes[n.id] = Node(
                id=n.id,
                parent=n.parent,
                children=tuple(sorted(kids.get(n.id, []), key=node_order)),
                members=_readonly(np.asarray(n.members, dtype=np.int64)),
                created_round=int(n.created_round),
                split_round=int(n.split_round),
                depth=depth(n.id),
                datasets=MappingProxyType({k: _readonly(v) for k, v in n.datasets.items()}),
            )

    def __getitem__(self, cid: str) -> Node:
        return self._nodes[cid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def roots(self) -> list[Node]:
        """The clusters of round 0: one root "0" for the splitting algorithms."""
        return [n for n in self._nodes.values() if not n.parent]

    @property
    def leaves(self) -> list[Node]:
        """The clusters that trained at the end, in tree order."""
        return [n for n in self._nodes.values() if n.is_leaf]

    @property
    def splits(self) -> list[Node]:
        """The clusters that split, in tree order."""
        return [n for n in self._nodes.values() if not n.is_leaf]

    def table(self):
        """One row per cluster (:func:`make_table`): id, parent, depth, size (members),
        children (how many), created_round, split_round (-1: a leaf)."""
        nodes = list(self._nodes.values())
        return make_table(
            {
                "id": np.array([n.id for n in nodes], dtype=object),
                "parent": np.array([n.parent for n in nodes], dtype=object),
                "depth": np.array([n.depth for n in nodes], dtype=np.int64),
                "size": np.array([n.size for n in nodes], dtype=np.int64),
                "children": np.array([len(n.children) for n in nodes], dtype=np.int64),
                "created_round": np.array([n.created_round for n in nodes], dtype=np.int64),
                "split_round": np.array([n.split_round for n in nodes], dtype=np.int64),
            }
        )

    def __str__(self) -> str:
        from distfl.tools.inspection import tree_lines

        return "\n".join(tree_lines(self._hierarchy, self._accuracy))

    def __repr__(self) -> str:
        return (
            f"<distfl Tree: {len(self)} clusters, {len(self.leaves)} leaves, "
            f"{len(self.splits)} splits>"
        )


# -- a run file --------------------------------------------------------------------------


class Run:
    """A run file, read once by :func:`open`; read-only (nothing here writes the file, and
    its attributes cannot be set). Its arrays cannot be written to; tables are made anew
    at each access, the caller's to change.

    Tables are pandas DataFrames when pandas is importable, else NumPy record arrays with
    the same column names (text as fixed-width ``str``)."""

    __slots__ = ("_path", "_file", "_tree")

    def __init__(self, path: str | os.PathLike, file: RunFile):
        object.__setattr__(self, "_path", Path(path))
        object.__setattr__(self, "_file", file)
        object.__setattr__(self, "_tree", None)

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

    # -- tables --------------------------------------------------------------------------

    def table(self, name: str):
        """The per-row table ``name`` (one of :data:`TABLES`: metrics, clusters,
        evaluation, membership, timing, workers) with the file's columns
        (:data:`distfl.record.layout.TABLES` describes each); a DataFrame when pandas is
        importable, else a NumPy record array."""
        if name not in layout.BY_KEY:
            raise KeyError(f"no table {name!r} in a run file; tables: {', '.join(TABLES)}")
        return _run_table(name, self._file.tables.get(name, {}))

    @property
    def metrics(self):
        """One row per round: round, num_clusters, num_participants, num_splits,
        train_loss_first, train_loss_last, accuracy (NaN in rounds without evaluation),
        accuracy_plain, test_loss, federation_bytes (:meth:`table`)."""
        return self.table("metrics")

    @property
    def clusters(self):
        """One row per (round, cluster that trained): round, cluster, size, sampled, then
        the algorithms' statistics (FedGWC's mse, p_within, ...; NaN where none)."""
        return self.table("clusters")

    @property
    def evaluation(self):
        """One row per (evaluation round, cluster): round, cluster, clients, accuracy,
        accuracy_plain, test_loss."""
        return self.table("evaluation")

    @property
    def membership(self):
        """One row per (round, leaf cluster, ground-truth group it holds clients of):
        round, cluster, group, clients."""
        return self.table("membership")

    @property
    def timing(self):
        """One row per round of wall-clock numbers: round, elapsed_s, bytes, rss_mb."""
        return self.table("timing")

    @property
    def workers(self):
        """One row per (round, worker rank): round, rank, clients, train_s, busy_s, loaded,
        cache_mb, rss_mb."""
        return self.table("workers")

    @property
    def statistics(self) -> list[str]:
        """The per-cluster statistics the run recorded (columns of :attr:`clusters` beyond
        round, cluster, size and sampled with a value in some row), for
        :meth:`statistic`."""
        stored = self._file.tables.get("clusters", {})
        fixed = set(layout.CLUSTERS.fixed)
        return [
            name
            for name in _column_names("clusters", stored)
            if name not in fixed and np.isfinite(np.asarray(stored[name], np.float64)).any()
        ]

    def statistic(self, name: str):
        """The per-cluster statistic ``name`` (e.g. FedGWC's ``mse``) round by round: a
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
        return _readonly(np.asarray(ids, dtype=str))

    @property
    def groups(self) -> np.ndarray:
        """Each client's ground-truth group (``[K]`` int64, an index into ``data.groups``)."""
        return _readonly(np.asarray(self._file.clients["group"], dtype=np.int64))

    @property
    def group_names(self) -> tuple[str, ...]:
        """The ground-truth groups' names (``data.groups[i].name``; "" where unnamed)."""
        return tuple(g.name for g in self._file.config.groups)

    @property
    def class_counts(self) -> np.ndarray:
        """``[K, C]`` each client's samples per class (train and test)."""
        return _readonly(self._file.clients["class_counts"])

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

    # -- summary -------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The run in numbers, those of ``distfl inspect`` among them (computed by the same
        code, :func:`distfl.tools.inspection.final_scores`): file, algorithm, dataset,
        clients, groups (distinct ground-truth groups recorded), round, rounds, finished,
        clusters (final leaves, empty ones included), accuracy (the clients' mean balanced
        accuracy at the last evaluation; NaN without one), was, wadb (None where
        undefined), rand, ari (final assignment against the groups), first_split (the
        round of the first split; None without one), wall_s (the rounds' wall clock)."""
        from distfl.tools.inspection import final_scores

        f = self._file
        scores = final_scores(f)
        elapsed = f.timing.get("elapsed_s")
        return {
            "file": str(self._path),
            "algorithm": self.algorithm,
            "dataset": f.config.data.dataset,
            "clients": self.num_clients,
            "groups": scores["groups"],
            "round": self.round,
            "rounds": self.rounds,
            "finished": self.finished,
            "clusters": scores["clusters"],
            "accuracy": scores["accuracy"],
            "was": scores["was"],
            "wadb": scores["wadb"],
            "rand": scores["rand"],
            "ari": scores["ari"],
            "first_split": min(
                (int(n.split_round) for n in f.hierarchy if n.split_round >= 0), default=None
            ),
            "wall_s": float(elapsed[-1]) if elapsed is not None and len(elapsed) else None,
        }

    def __repr__(self) -> str:
        cfg = self._file.config
        acc = federation_mean(self._file.clients["accuracy"])
        accuracy = "n/a" if math.isnan(acc) else f"{acc:.3f}"
        return (
            f"<distfl.Run {str(self._path)!r}: {cfg.algorithm.name} on {cfg.data.dataset}, "
            f"{cfg.data.num_clients} clients, round {self.round} of {self.rounds}, "
            f"{len(self._file.leaves)} clusters, accuracy {accuracy}>"
        )


def open(path: str | os.PathLike) -> Run:
    """Read the run file at ``path`` (one written by ``distfl run`` or :func:`run`, a
    finished run's or a checkpoint of one in progress). Raises
    :class:`~distfl.errors.CheckpointError` with the reason when the file is missing,
    damaged (its integrity record does not match) or not a distfl run file. The plug-ins
    its config names (``run.plugins``) are not imported."""
    return Run(path, read_run_file(path, state=False))


# -- launching ---------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A value as :func:`distfl.config.toml_value` takes it: NumPy scalars and arrays as
    Python numbers and lists, tuples as lists, paths as text."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def set_items(overrides: Mapping[str, Any] | Iterable[str] | None) -> list[str]:
    """Overrides as ``--set`` items: a dict ``{"run.rounds": 50, "algorithm.name":
    "none"}`` (a section may also be a dict of its keys: ``{"run": {"rounds": 50}}``), or
    items as given on the command line (``["run.rounds=50"]``). Values are Python values
    (bool, number, str, list, dict); ConfigError for one that has no TOML form."""
    from distfl.config import toml_value

    if overrides is None:
        return []
    if isinstance(overrides, str):
        raise ConfigError(
            f"overrides {overrides!r}: give a dict such as {{'run.rounds': 50}} or a list of "
            "'section.key=value' items"
        )
    if not isinstance(overrides, Mapping):
        items = list(overrides)
        bad = [i for i in items if not isinstance(i, str)]
        if bad:
            raise ConfigError(f"overrides: {bad[0]!r} is not a 'section.key=value' item")
        return items
    flat: list[tuple[str, Any]] = []
    for key, value in overrides.items():
        if not isinstance(key, str):
            raise ConfigError(f"overrides: key {key!r} is not a 'section.key' string")
        if "." not in key and isinstance(value, Mapping):
            flat += [(f"{key}.{k}", v) for k, v in value.items()]
        else:
            flat.append((key, value))
    items = []
    for key, value in flat:
        try:
            text = toml_value(_plain(value))
        except TypeError:
            raise ConfigError(
                f"overrides[{key!r}]: a {type(value).__name__} has no TOML form; give a bool, "
                "number, string, list or dict"
            ) from None
        items.append(f"{key}={text}")
    return items


def run(
    config=None,
    *,
    preset: str | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    out: str | os.PathLike,
    force: bool = False,
    stream: TextIO | None = None,
) -> Run:
    """Run a federation in this process (one process, W = 1) and return :func:`open` of
    its run file: the code of ``distfl run``, which with the same settings writes the same
    file bit for bit.

    ``config``: None (the ``default`` preset unless ``preset`` is given), the path of a
    TOML config file (as ``--config``, on top of ``preset``), or a
    :class:`~distfl.config.Config` (e.g. ``distfl.open(f).config``: a run of that config;
    the modules its ``run.plugins`` names are imported). ``overrides``: ``--set`` items
    (:func:`set_items`). ``out``: the run file; an existing file is refused unless
    ``force``. ``stream``: where progress and the summary go (default stdout; set
    ``run.progress = "none"`` for no progress lines).

    Raises ConfigError for a bad key or value and UserError for an output it may not
    write, before anything runs. Ctrl-C stops the run after the current round with a
    checkpoint (resume it with ``distfl run --resume``) and raises KeyboardInterrupt.
    torch's thread count and CPU random state are as they were when it returns."""
    from distfl.comm.env import LaunchInfo
    from distfl.config import Config
    from distfl.launch import launch, run_config
    from distfl.record.output import check_output

    path = base = None
    if isinstance(config, Config):
        if preset is not None:
            raise ConfigError(
                "distfl.run: give a Config or a preset, not both (a Config holds every key)"
            )
        base = config
    elif config is not None:
        if not isinstance(config, str | os.PathLike):
            raise ConfigError(
                f"distfl.run: config is a {type(config).__name__}; give a TOML file's path "
                "or a distfl.config.Config"
            )
        path = os.fspath(config)
    loaded = run_config(
        path=path, preset=preset, overrides=set_items(overrides), out=os.fspath(out), base=base
    )
    # refused here before torch is imported; the runtime checks again, with the file's size
    check_output(Path(loaded.run.out), force=force, resuming=None, need_bytes=0)
    import torch

    one = LaunchInfo(launcher="single", rank=0, world_size=1, local_rank=0)
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            summary = launch(loaded, info=one, force=force, stream=stream)
    finally:
        torch.set_num_threads(threads)
    if summary and summary.get("stopped_by") == "SIGINT":
        raise KeyboardInterrupt(
            f"stopped after round {summary.get('rounds')} of {loaded.run.rounds}; the "
            f"checkpoint is {loaded.run.out} (distfl run --resume {loaded.run.out} goes on)"
        )
    return open(loaded.run.out)


def _names(values: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """A name or names: one string or path, or a list of them."""
    if isinstance(values, str | os.PathLike):
        return [os.fspath(values)]
    return [os.fspath(v) for v in values]


def _seeds(seeds: int | str | Iterable[int]) -> list[int]:
    """Seeds: an int, a list of them, or text such as "0,1,2"."""
    if isinstance(seeds, str):
        items: list[Any] = [s.strip() for s in seeds.split(",") if s.strip()]
    elif isinstance(seeds, int | np.integer):
        items = [seeds]
    else:
        items = list(seeds)
    out = []
    for s in items:
        try:
            if isinstance(s, bool) or not isinstance(s, str | int | np.integer):
                raise ValueError
            out.append(int(s))
        except ValueError:
            raise UserError(f"seeds {seeds!r}: expected integers like [0, 1, 2]") from None
    return out


def suite(
    scenarios: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    *,
    algorithms: str | Iterable[str] = ("fedgwc", "none"),
    seeds: int | str | Iterable[int] = (0,),
    out: str | os.PathLike,
    workers: int = 1,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    variants: Iterable[str] = (),
    force: bool = False,
    stream: TextIO | None = None,
):
    """Run ``distfl suite`` (scenarios × algorithms × seeds, each a ``distfl run``
    process, ``workers`` at a time, run files in ``out``) and return its table: one row
    per run, the columns of ``suite.csv`` (:data:`distfl.tools.suite.COLUMNS`) and
    ``file`` (the run's file, for :func:`open`). A DataFrame when pandas is importable,
    else a NumPy record array; a run that failed has NaN scores (its log is named on
    ``stream``, default stdout).

    ``scenarios``: presets or TOML files (None: ``default`` and the papers' scenarios);
    ``algorithms``: names or variants' names (a list, or "fedgwc,none"); ``seeds``: an int,
    a list, or "0,1"; ``overrides``: for every run (:func:`set_items`); ``variants``:
    ``--variant`` texts ("NAME=ALGORITHM:KEY=VALUE,..."). Finished runs in ``out`` are kept
    and unfinished ones resumed, unless ``force``. Raises ConfigError or UserError before
    any run starts."""
    from distfl.tools import suite as tool

    algorithms = (
        [a for a in algorithms.split(",") if a] if isinstance(algorithms, str) else list(algorithms)
    )
    rows, outcomes = tool.suite(
        _names(scenarios) if scenarios is not None else None,
        algorithms=algorithms,
        seeds=_seeds(seeds),
        out=os.fspath(out),
        workers=workers,
        overrides=set_items(overrides),
        variants=list(variants),
        force=force,
        stream=stream or sys.stdout,
    )
    rows = [{**row, "file": str(o.job.out)} for row, o in zip(rows, outcomes, strict=True)]
    return rows_table(rows, (*tool.COLUMNS, "file"))


__all__ = ["TABLES", "Node", "Run", "Tree", "make_table", "open", "run", "set_items", "suite"]
