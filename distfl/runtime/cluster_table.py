"""/metrics/clusters as the server builds it: one row per (round, cluster that trained),
the columns the runtime fills itself (:data:`~distfl.algorithms.FIXED_CLUSTER_COLUMNS`),
and one float64 column per statistic the algorithm ever returned (RoundUpdate.stats),
NaN in the rows of clusters and rounds without it.

The nine :data:`STAT_COLUMNS` are written for every run, whichever algorithm runs, so that
the files of the algorithms that record them keep their layout; any other name is a column
of its own, after them in sorted order. A column that first appears in a later round (or
after a resume from a file that lacked it) is NaN in the rows before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from distfl.algorithms import FIXED_CLUSTER_COLUMNS
from distfl.errors import CheckpointError

# the statistics the first algorithms recorded: FedGWC's MSE and the block contrast of its
# P and W by ground-truth group, CFL's update norms
STAT_COLUMNS = (
    "mse", "mean_norm", "max_norm",
    "p_within", "p_cross", "p_spread", "w_within", "w_cross", "w_spread",
)  # fmt: skip
CLUSTER_COLUMNS = (*FIXED_CLUSTER_COLUMNS, *STAT_COLUMNS)


class ClusterTable:
    """The rows of /metrics/clusters, column by column (lists, of equal length)."""

    def __init__(self, columns: dict[str, list] | None = None):
        self.columns: dict[str, list] = (
            {k: [] for k in CLUSTER_COLUMNS} if columns is None else columns
        )

    def __len__(self) -> int:
        return len(self.columns["round"])

    def stat_names(self) -> list[str]:
        """Every statistic column, the fixed nine first, then the others sorted."""
        extra = sorted(set(self.columns) - set(CLUSTER_COLUMNS))
        return [*STAT_COLUMNS, *extra]

    def append(
        self,
        round_index: int,
        cluster: str,
        size: int,
        sampled: int,
        stats: Mapping[str, float],
        *,
        source: str = "the algorithm",
    ) -> None:
        """One row: the fixed values and ``stats`` ({name: value}); a name new to the table
        becomes a column, NaN in the rows before; a column ``stats`` lacks is NaN in this
        row. A name of a fixed column, or one that is no plain HDF5 name, is refused
        (``source`` names who returned it)."""
        rows = len(self)
        for name in stats:
            if name not in self.columns:
                _check_name(name, source, round_index, cluster)
                self.columns[name] = [math.nan] * rows
            elif name in FIXED_CLUSTER_COLUMNS:
                _check_name(name, source, round_index, cluster)
        c = self.columns
        c["round"].append(int(round_index))
        c["cluster"].append(str(cluster))
        c["size"].append(int(size))
        c["sampled"].append(int(sampled))
        for name in c:
            if name not in FIXED_CLUSTER_COLUMNS:
                c[name].append(float(stats.get(name, math.nan)))

    @classmethod
    def restore(cls, saved: Mapping[str, np.ndarray]) -> ClusterTable:
        """The table of a run file's /metrics/clusters: its columns carried on (a fixed or
        one of the nine statistics it lacks is NaN in its rows), every column as many rows
        as ``round``."""
        rows = len(saved["round"])
        columns = {k: list(saved.get(k, [math.nan] * rows)) for k in CLUSTER_COLUMNS}
        for name in sorted(set(saved) - set(CLUSTER_COLUMNS)):
            columns[name] = [float(x) for x in np.asarray(saved[name], dtype=np.float64)]
        for name, values in columns.items():
            if len(values) != rows:
                raise CheckpointError(
                    f"/metrics/clusters/{name} has {len(values)} rows, /metrics/clusters/round "
                    f"{rows}: the run file is inconsistent"
                )
        columns["cluster"] = [_str(c) for c in columns["cluster"]]
        return cls(columns)

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as written: the fixed ones (int64, cluster ids as strings), the nine
        statistics, then the others by name; statistics as float64."""
        c = self.columns
        out = {
            k: np.array(c[k], dtype=object if k == "cluster" else np.int64)
            for k in FIXED_CLUSTER_COLUMNS
        }
        out.update({k: np.array(c[k], dtype=np.float64) for k in self.stat_names()})
        return out


def _check_name(name, source: str, round_index: int, cluster: str) -> None:
    where = f"{source} returned the statistic {name!r} for cluster {cluster} in round {round_index}"
    if name in FIXED_CLUSTER_COLUMNS:
        raise RuntimeError(
            f"{where}: {name!r} is a column /metrics/clusters fills itself "
            f"({', '.join(FIXED_CLUSTER_COLUMNS)}); give the statistic another name"
        )
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
        raise RuntimeError(f"{where}: a statistic needs a name without '/' to be a column")


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
