"""The columns of /metrics/clusters (distfl.runfile.tables.Rows of the layout's CLUSTERS, as
the server's Record fills it): every statistic an algorithm returns is a float64 column,
NaN in the rows of clusters and rounds without it; the nine statistics the first built-in
algorithms declare ``every_run`` are always written; all of them follow the fixed columns
in sorted order; a name of a fixed column is refused; a run file's columns are carried on
across a restore and a column that appears after it is NaN in the earlier rows."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest

from distfl.algorithms import FIXED_CLUSTER_COLUMNS, algorithm_class, every_run_statistics
from distfl.errors import CheckpointError
from distfl.runfile.layout import CLUSTERS
from distfl.runfile.tables import Record, Rows

STAT_COLUMNS = every_run_statistics()


class ClusterTable(Rows):
    """The table as the server fills it: (round, cluster, size, sampled, statistics)."""

    def __init__(self, columns=None):
        super().__init__(CLUSTERS, columns)
        for name in STAT_COLUMNS:  # as Record(always=...) adds them
            self.columns.setdefault(name, [math.nan] * len(self))

    def append(self, round_index, cluster, size, sampled, stats, *, source="the algorithm"):
        values = {"round": round_index, "cluster": cluster, "size": size, "sampled": sampled}
        super().append(values, stats, source=source)

    @classmethod
    def restore(cls, saved):
        return cls(Rows.restore(CLUSTERS, saved).columns)


NINE = (
    "mse", "mean_norm", "max_norm",
    "p_within", "p_cross", "p_spread", "w_within", "w_cross", "w_spread",
)  # fmt: skip


def columns(*more: str) -> list[str]:
    """The table's columns as written: the fixed ones, then the nine and ``more`` by name."""
    return [*FIXED_CLUSTER_COLUMNS, *sorted({*NINE, *more})]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def nan_equal(values: np.ndarray, expected: list[float]) -> None:
    np.testing.assert_array_equal(values, np.array(expected, dtype=np.float64))


def test_the_fixed_and_the_nine_columns_keep_their_names():
    assert FIXED_CLUSTER_COLUMNS == ("round", "cluster", "size", "sampled") == CLUSTERS.names
    assert sorted(STAT_COLUMNS) == sorted(NINE) and list(STAT_COLUMNS) == sorted(NINE)
    declared = {
        s.name
        for name in ("fedgwc", "cfl")
        for s in algorithm_class(name).statistics
        if s.every_run
    }
    assert declared == set(NINE)  # declared beside the algorithms that record them
    table = ClusterTable().arrays()
    assert list(table) == columns()  # an empty table: every column, no row
    assert all(len(v) == 0 for v in table.values())
    record = Record(always={"clusters": STAT_COLUMNS}).clusters.arrays()
    assert list(record) == columns()


def test_extra_and_missing_names_give_columns_with_nan_fill():
    table = ClusterTable()
    table.append(1, "0", 6, 3, {"mse": 0.5})
    table.append(2, "0", 6, 4, {"regret": 1.25, "bound": 2.0})  # new names: NaN above
    table.append(2, "1", 2, 0, {})  # a cluster with no statistic: NaN everywhere
    table.append(3, "0", 6, 2, {"zeta": -1.0, "mse": 0.25, "bound": 1.5})
    out = table.arrays()
    assert list(out) == columns("bound", "regret", "zeta")  # sorted with the nine
    assert out["round"].dtype == out["size"].dtype == out["sampled"].dtype == np.int64
    assert out["round"].tolist() == [1, 2, 2, 3]
    assert out["cluster"].tolist() == ["0", "0", "1", "0"]
    assert out["size"].tolist() == [6, 6, 2, 6] and out["sampled"].tolist() == [3, 4, 0, 2]
    assert all(out[k].dtype == np.float64 for k in [*NINE, "bound", "regret", "zeta"])
    nan = math.nan
    nan_equal(out["mse"], [0.5, nan, nan, 0.25])
    nan_equal(out["regret"], [nan, 1.25, nan, nan])
    nan_equal(out["bound"], [nan, 2.0, nan, 1.5])
    nan_equal(out["zeta"], [nan, nan, nan, -1.0])
    for name in NINE[1:]:  # the nine are written even where no algorithm records them
        assert np.isnan(out[name]).all() and len(out[name]) == 4


def test_the_order_of_the_extra_columns_does_not_depend_on_when_they_appeared():
    a, b = ClusterTable(), ClusterTable()
    a.append(1, "0", 1, 1, {"b": 1.0})
    a.append(2, "0", 1, 1, {"a": 2.0})
    b.append(1, "0", 1, 1, {"a": math.nan, "b": 1.0})
    b.append(2, "0", 1, 1, {"a": 2.0})
    assert list(a.arrays()) == list(b.arrays()) == columns("a", "b")
    for name, values in a.arrays().items():
        other = b.arrays()[name]
        if values.dtype == object:
            assert values.tolist() == other.tolist()
        else:
            assert same_bits(values, other), name


@pytest.mark.parametrize("name", FIXED_CLUSTER_COLUMNS)
def test_a_statistic_may_not_take_a_fixed_columns_name(name):
    table = ClusterTable()
    with pytest.raises(RuntimeError, match=f"statistic '{name}' for round 3, cluster 0.1"):
        table.append(3, "0.1", 4, 2, {"mse": 1.0, name: 4.0}, source="algorithm 'toy'")
    assert len(table) == 0 and list(table.arrays()) == columns()  # no half row


@pytest.mark.parametrize("name", ["", "a/b", ".", 7])
def test_a_statistic_needs_a_plain_column_name(name):
    with pytest.raises(RuntimeError, match="algorithm 'toy' returned the statistic"):
        ClusterTable().append(1, "0", 1, 1, {name: 1.0}, source="algorithm 'toy'")


def write_table(path, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``columns`` as a run file's /metrics/clusters holds them, read back as
    read_run_file reads them."""
    with h5py.File(path, "w") as f:
        g = f.create_group("metrics/clusters")
        for name, values in columns.items():
            dtype = h5py.string_dtype() if values.dtype == object else values.dtype
            g.create_dataset(name, data=values, dtype=dtype, maxshape=(None,))
    with h5py.File(path, "r") as f:
        return {k: v[()] for k, v in f["metrics/clusters"].items()}


def test_a_restore_carries_the_columns_on_and_a_later_one_is_nan_before(tmp_path):
    first = ClusterTable()
    first.append(1, "0", 4, 4, {"mse": 0.5, "regret": 0.125})
    first.append(2, "0", 4, 4, {"regret": 0.25})
    saved = write_table(tmp_path / "run.h5", first.arrays())
    resumed = ClusterTable.restore(saved)
    assert resumed.columns["cluster"] == ["0", "0"]  # str again, not bytes
    resumed.append(3, "0.0", 2, 2, {"regret": 0.5, "bound": 1.0})
    resumed.append(3, "0.1", 2, 2, {"mse": 0.75})
    out = resumed.arrays()
    assert list(out) == columns("bound", "regret")
    assert all(len(v) == 4 for v in out.values())  # every column as many rows as round
    nan = math.nan
    nan_equal(out["regret"], [0.125, 0.25, 0.5, nan])
    nan_equal(out["bound"], [nan, nan, 1.0, nan])  # appeared after the restore
    nan_equal(out["mse"], [0.5, nan, nan, 0.75])
    assert out["cluster"].tolist() == ["0", "0", "0.0", "0.1"]
    # the same rows recorded without a restore: the same bits
    straight = ClusterTable()
    straight.append(1, "0", 4, 4, {"mse": 0.5, "regret": 0.125})
    straight.append(2, "0", 4, 4, {"regret": 0.25})
    straight.append(3, "0.0", 2, 2, {"regret": 0.5, "bound": 1.0})
    straight.append(3, "0.1", 2, 2, {"mse": 0.75})
    expected = straight.arrays()
    assert list(expected) == list(out)
    for name in out:
        if out[name].dtype == object:
            assert out[name].tolist() == expected[name].tolist()
        else:
            assert same_bits(out[name], expected[name]), name


def test_a_file_of_an_older_layout_gets_the_nine_columns_as_nan(tmp_path):
    """A run file written before the block-contrast statistics: mse and the norms only."""
    old = {
        "round": np.array([1, 2], dtype=np.int64),
        "cluster": np.array(["0", "0"], dtype=object),
        "size": np.array([5, 5], dtype=np.int64),
        "sampled": np.array([3, 2], dtype=np.int64),
        "mse": np.array([0.5, 0.25]),
        "mean_norm": np.array([np.nan, np.nan]),
        "max_norm": np.array([np.nan, np.nan]),
    }
    table = ClusterTable.restore(write_table(tmp_path / "old.h5", old))
    table.append(3, "0", 5, 4, {"mse": 0.125, "gap": 2.0})
    out = table.arrays()
    assert list(out) == columns("gap")
    assert all(len(v) == 3 for v in out.values())
    assert same_bits(out["mse"][:2], old["mse"])  # the stored values, bit for bit
    nan_equal(out["p_within"], [math.nan] * 3)
    nan_equal(out["gap"], [math.nan, math.nan, 2.0])


def test_a_column_of_another_length_is_refused_on_restore():
    saved = {
        "round": np.array([1, 2], dtype=np.int64),
        "cluster": np.array([b"0", b"0"], dtype=object),
        "size": np.array([1, 1], dtype=np.int64),
        "sampled": np.array([1, 1], dtype=np.int64),
        "regret": np.array([1.0]),
    }
    with pytest.raises(CheckpointError, match="/metrics/clusters/regret has 1 rows"):
        ClusterTable.restore(saved)
