"""What an algorithm declares beyond its rounds: the per-cluster statistics it records
(:class:`Statistic`), the tables of its own in the run file (:class:`RecordTable`) and the
figures it brings to ``distfl report`` (:class:`ReportFigure`). The registry checks them
when the algorithm registers (:mod:`distfl.algorithms.api.registry`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from distfl.runfile.layout import Column, Table
from distfl.runfile.layout import algorithm_table as _algorithm_table


@dataclass(frozen=True)
class Statistic:
    """A per-cluster statistic an algorithm records (:attr:`RoundUpdate.stats`), as its
    :attr:`ClusteringAlgorithm.statistics` declares it for the docs (``doc``: what it is).

    ``every_run``: written into every run's ``/metrics/clusters`` (NaN where the run's
    algorithm records none), whatever the algorithm: the statistics of the first built-in
    algorithms are, so that the files written since distfl 0.1.0 keep one layout. Only a
    built-in algorithm's declaration counts; a new statistic leaves it False and is a column
    of the runs that record it."""

    name: str
    doc: str
    every_run: bool = False


@dataclass(frozen=True)
class RecordTable:
    """A table of an algorithm's own in the run file (its :attr:`ClusteringAlgorithm.tables`),
    at ``/metrics/tables/<name>``: one row ``per`` cluster, client, pair of clients or
    (client, cluster) a round (``"cluster"``, ``"client"``, ``"pair"``, ``"client_cluster"``:
    a soft membership's weights), whose key columns the runtime declares (round, then
    cluster; client; client and other; client and cluster), then ``columns``: its own, each a
    :class:`Column` of kind ``"int"`` or ``"float"`` (int64, float64). The algorithm gives
    the rows of a round in :attr:`RoundUpdate.rows`; the runtime checks them (every
    column, one length, client ids of the run, clusters of the tree), adds the round and
    writes them with the file, so that they resume and compare like every other table.
    ``doc``: what a row says, for the docs."""

    name: str
    per: str
    columns: tuple[Column, ...]
    doc: str = ""

    def table(self) -> Table:
        """The run file's declaration of this table."""
        return _algorithm_table(self.name, self.per, self.columns, self.doc)

    @property
    def given(self) -> tuple[str, ...]:
        """The columns the algorithm gives each round: all but ``round``."""
        return self.table().names[1:]


@dataclass(frozen=True)
class ReportFigure:
    """A figure of ``distfl report`` that an algorithm brings (its
    :attr:`ClusteringAlgorithm.figures`).

    ``draw(data, palette)`` receives the run file as read for the report
    (:class:`distfl.runfile.view.RunData`) and the report's colours
    (:class:`distfl.plot.Palette`), and returns (a matplotlib Figure, its caption),
    or None when the file holds nothing for it to draw. ``draw`` is the function, or
    ``"module:function"``, imported by the report alone (so that the algorithm's module loads
    no matplotlib). ``file`` is the PNG's name, ``section`` the heading of the page it goes
    under, ``stats`` the per-cluster statistics (RoundUpdate.stats) it draws: once it has
    drawn them, the report does not plot them again on their own. A ``per_split`` figure
    is drawn for each split of the hierarchy as ``draw(data, split, palette)`` (``split``: a
    :class:`distfl.runfile.view.SplitRecord`, with what the algorithm stored there) into
    ``split-<id>-<file>``, under the split's own heading.

    The report tries the figures of every registered algorithm on every run (the run's own
    algorithm's first, then the others by name; the first figure of a file name wins): a
    figure draws what the file holds, so that a statistic of the same name recorded by
    another algorithm is drawn alike, and returns None elsewhere."""

    #: the report's sections
    TRAINING: ClassVar[str] = "Training"
    CLUSTERS: ClassVar[str] = "Clusters"
    WHY: ClassVar[str] = "Why the clusters are what they are"
    #: the report's own files (and prefixes of its files): not for an algorithm's figure
    REPORT_FILES: ClassVar[tuple[str, ...]] = (
        "accuracy.png", "tree.png", "classes.png", "membership.png",
    )  # fmt: skip
    REPORT_PREFIXES: ClassVar[tuple[str, ...]] = ("split-", "stat-")
    #: the report's own figure at each split (``split-<id>-matrices.png``)
    SPLIT_FILES: ClassVar[tuple[str, ...]] = ("matrices.png",)

    section: str
    file: str
    draw: Callable[..., Any] | str
    stats: tuple[str, ...] = ()
    per_split: bool = False

    def function(self) -> Callable[..., Any]:
        """The drawing function (``"module:function"`` imported now)."""
        if not isinstance(self.draw, str):
            return self.draw
        module, _, attr = self.draw.partition(":")
        return getattr(importlib.import_module(module), attr)


def soft_weights_table(weight: str, rows: str) -> RecordTable:
    """The table ``weights`` of a soft membership: a row per (client, cluster), its column
    ``weight`` (``weight``: what the weight is; ``rows``: which rows a round writes), which
    :data:`SOFT_WEIGHTS_FIGURE` draws."""
    return RecordTable("weights", "client_cluster", (Column("weight", "float", weight),), rows)


#: the report's figure of a soft membership's table ``weights`` (clients × clusters, by
#: ground-truth group)
SOFT_WEIGHTS_FIGURE = ReportFigure(
    ReportFigure.CLUSTERS, "soft-weights.png", "distfl.algorithms.common.soft_figures:soft_weights"
)


__all__ = [
    "SOFT_WEIGHTS_FIGURE",
    "RecordTable",
    "ReportFigure",
    "Statistic",
    "soft_weights_table",
]
