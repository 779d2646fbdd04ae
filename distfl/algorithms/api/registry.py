"""Algorithms by name: each registers itself with :func:`register`, which checks what an
algorithm declares and adds it to :data:`distfl.plugins.ALGORITHMS`.

The modules of ``distfl/algorithms/`` are found and imported the first time a name is looked
up (modules ending in ``_client`` are left to the workers, which import them through
:meth:`ClusteringAlgorithm.client`); an algorithm defined elsewhere registers when its
module is imported, e.g. through ``run.plugins`` (:func:`load_plugins`), which every rank
reads from the config before the algorithm is built.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

from distfl.algorithms.api.base import (
    ClientHalf,
    ClusteringAlgorithm,
    Params,
    RecordTable,
    ReportFigure,
)
from distfl.config.parse import key_owners
from distfl.plugins import ALGORITHMS, load_plugins
from distfl.runfile import layout
from distfl.runfile.view import split_matrix_titles

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_FIGURE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.png$")
#: the names a setting may not take: ClusteringAlgorithm's attributes (each setting is
#: also an attribute of the algorithm of its name)
_RESERVED = {n for n in dir(ClusteringAlgorithm) if not n.startswith("__")} | {
    "num_clients", "clients_per_round", "seed", "federation", "tree", "params",
}  # fmt: skip


def register(cls: type[ClusteringAlgorithm]) -> type[ClusteringAlgorithm]:
    """Class decorator: make ``cls`` available as ``algorithm.name = cls.name``."""
    ALGORITHMS.check_class(cls, ClusteringAlgorithm)
    if not (isinstance(cls.Params, type) and issubclass(cls.Params, Params)):
        raise TypeError(f"{cls.__name__}.Params must subclass distfl.algorithms.Params")
    if cls.client_ops and cls.client is None:
        raise TypeError(f"{cls.__name__} has client_ops but no client half (its client)")
    fields = cls.Params.keys()
    shadowed = sorted(set(fields) & _RESERVED)
    if shadowed:
        raise ValueError(
            f"{cls.__name__}.Params.{shadowed[0]}: each setting is also an attribute of the "
            "algorithm, and this name is one of ClusteringAlgorithm's; give the setting "
            "another name"
        )
    for old, new in cls.Params.aliases.items():
        if new not in fields or old in fields:
            raise ValueError(f"{cls.__name__}.Params.aliases: {old!r} -> {new!r}")
    cls.Params.check_declarations(cls.__name__)
    _check_ignored_keys(cls)
    key = cls.clusters_key
    if key is not None and (key not in fields or not _int_field(cls.Params, key)):
        raise ValueError(
            f"{cls.__name__}.clusters_key = {key!r}: must name an int setting of its Params "
            f"({', '.join(fields) or 'none'})"
        )
    _check_figures(cls)
    _check_tables(cls)
    return ALGORITHMS.add(cls)


def _check_ignored_keys(cls: type[ClusteringAlgorithm]) -> None:
    """``cls.ignored_keys``: keys of the config's sections (``section.key``, not of
    ``[algorithm]``), each with why in words."""
    from distfl.config import Config

    known = {
        f"{s.name}.{f.name}"
        for s in dataclasses.fields(Config)
        if s.name != "algorithm"
        for f in dataclasses.fields(s.default_factory())
        if f.name != "params"
    }
    for key, why in cls.ignored_keys.items():
        if key not in known or not (isinstance(why, str) and why):
            raise ValueError(
                f"{cls.__name__}.ignored_keys[{key!r}]: each entry is a key of the config's "
                "sections (section.key, not of [algorithm]) with why, in a few words"
            )


def _int_field(params: type[Params], key: str) -> bool:
    """Whether setting ``key`` of ``params`` holds an int (its default does)."""
    default = next(f.default for f in dataclasses.fields(params) if f.name == key)
    return isinstance(default, int) and not isinstance(default, bool)


def _entries(cls: type[ClusteringAlgorithm], attr: str, kind: type) -> tuple | list:
    """``cls.<attr>``, checked to be a tuple (or list) of ``kind`` (TypeError otherwise)."""
    entries = getattr(cls, attr)
    if not isinstance(entries, (tuple, list)):
        raise TypeError(f"{cls.__name__}.{attr} must be a tuple of {kind.__name__}")
    for entry in entries:
        if not isinstance(entry, kind):
            raise TypeError(f"{cls.__name__}.{attr}: {entry!r} is not a {kind.__name__}")
    return entries


def _check_figures(cls: type[ClusteringAlgorithm]) -> None:
    """``cls.figures``: ReportFigure entries, each a PNG of a plain name of its own that is
    none of the report's own files, drawn by a function or a "module:function"."""
    files = set()
    for figure in _entries(cls, "figures", ReportFigure):
        name = figure.file
        own = ReportFigure.SPLIT_FILES if figure.per_split else ReportFigure.REPORT_FILES
        if (
            not isinstance(name, str)
            or not _FIGURE_FILE.match(name)
            or name in own
            or name.startswith(ReportFigure.REPORT_PREFIXES)
        ):
            raise ValueError(
                f"{cls.__name__}.figures: file {name!r}: a figure needs a PNG name of its own "
                "(letters, digits, _ . -), none of the report's "
                f"({', '.join(ReportFigure.REPORT_FILES)}, "
                f"{', '.join(p + '*' for p in ReportFigure.REPORT_PREFIXES)})"
            )
        if (name, figure.per_split) in files:
            raise ValueError(f"{cls.__name__}.figures: two figures write {name!r}")
        files.add((name, figure.per_split))
        draw = figure.draw
        if not (callable(draw) or (isinstance(draw, str) and ":" in draw)):
            raise TypeError(
                f"{cls.__name__}.figures: {name!r} is drawn by {draw!r}; expected a function "
                'or "module:function"'
            )
        if not isinstance(figure.stats, tuple) or not all(isinstance(x, str) for x in figure.stats):
            raise TypeError(f"{cls.__name__}.figures: {name!r}: stats must be a tuple of names")


def _check_tables(cls: type[ClusteringAlgorithm]) -> None:
    """``cls.tables``: RecordTable entries of plain names of their own (none of the run
    file's tables), rows per cluster, client, pair or (client, cluster), columns of kind
    int or float whose names are plain, distinct and none of the key columns."""
    where = f"{cls.__name__}.tables"
    names = set()
    for table in _entries(cls, "tables", RecordTable):
        name = table.name
        if not isinstance(name, str) or not _NAME.match(name) or name in layout.BY_KEY:
            raise ValueError(
                f"{where}: table {name!r}: a table needs a lower-case name of its own (letters, "
                f"digits, _), none of the run file's ({', '.join(layout.BY_KEY)})"
            )
        if name in names:
            raise ValueError(f"{where}: two tables are named {name!r}")
        names.add(name)
        if table.per not in layout.PER:
            raise ValueError(
                f"{where}: table {name!r}: per = {table.per!r}; allowed: {', '.join(layout.PER)}"
            )
        key = {c.name for c in layout.PER[table.per][1]}
        seen: set[str] = set()
        for column in table.columns:
            if not isinstance(column, layout.Column):
                raise TypeError(f"{where}: table {name!r}: {column!r} is not a Column")
            bad = (
                not isinstance(column.name, str) or not _NAME.match(column.name)
                or column.name in key or column.name in seen
            )  # fmt: skip
            if bad:
                raise ValueError(
                    f"{where}: table {name!r}: column {column.name!r}: a column needs a "
                    f"lower-case name of its own, none of {', '.join(sorted(key))}"
                )
            if column.kind not in layout.ALGORITHM_KINDS:
                raise ValueError(
                    f"{where}: table {name!r}: column {column.name!r} is of kind "
                    f"{column.kind!r}; allowed: {', '.join(layout.ALGORITHM_KINDS)}"
                )
            seen.add(column.name)


def algorithm_names() -> list[str]:
    """Every registered name, sorted."""
    return ALGORITHMS.names()


def algorithm_class(name: str) -> type[ClusteringAlgorithm]:
    """The class registered as ``name``; ConfigError naming the allowed ones otherwise."""
    return ALGORITHMS.get(name)


def client_half(cls: type[ClusteringAlgorithm]) -> type[ClientHalf]:
    """The client half of ``cls`` (its ``client``: the class, or "module:Class" imported
    now); on the workers only."""
    half = cls.client
    if isinstance(half, str):
        module, _, attr = half.partition(":")
        half = getattr(importlib.import_module(module), attr)
    if not (isinstance(half, type) and issubclass(half, ClientHalf)):
        raise TypeError(f"{cls.__name__}.client is not a ClientHalf subclass: {cls.client!r}")
    return half


def report_figures(first: str | None = None) -> list[tuple[str, ReportFigure]]:
    """(algorithm name, figure) for every figure the registered algorithms bring to
    ``distfl report``: those of ``first`` (the run's algorithm, when registered) first, then
    the others' by algorithm name, each in its declared order; of two figures of one file
    name the first is kept. Plug-ins count once imported (run.plugins), never before."""
    out: list[tuple[str, ReportFigure]] = []
    taken: set[tuple[str, bool]] = set()
    for name in ALGORITHMS.first_then_by_name(first):
        for figure in algorithm_class(name).figures:
            if (figure.file, figure.per_split) not in taken:
                taken.add((figure.file, figure.per_split))
                out.append((name, figure))
    return out


def every_run_statistics() -> tuple[str, ...]:
    """The per-cluster statistics every run file holds a column of (NaN where the run's
    algorithm records none): the built-in algorithms' :class:`Statistic` declared
    ``every_run``, sorted by name (a plug-in's declaration does not count, so that what a
    file holds never depends on the plug-ins imported)."""
    return tuple(
        sorted(
            {
                stat.name
                for cls in ALGORITHMS.classes()
                if cls.__module__.startswith("distfl.algorithms.")
                for stat in cls.statistics
                if stat.every_run
            }
        )
    )


__all__ = [
    "algorithm_class",
    "algorithm_names",
    "client_half",
    "key_owners",
    "load_plugins",
    "register",
    "every_run_statistics",
    "report_figures",
    "split_matrix_titles",
]
