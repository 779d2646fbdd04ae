"""The tables a reader gets of a run file: pandas DataFrames when pandas is importable
(``pip install distfl[pandas]``), NumPy record arrays otherwise, with the same columns in
the same order; and the read-only arrays a :class:`~distfl.runfile.run.Run` hands out."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from distfl.runfile import layout


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


def run_table(key: str, stored: Mapping[str, np.ndarray]):
    """One of the file's per-row tables (:func:`_column_names`; a table the file lacks has
    its declared columns and no row)."""
    if key not in layout.BY_KEY:  # an algorithm's own table: its columns as the file has them
        return make_table(dict(stored))
    table = layout.BY_KEY[key]
    names = _column_names(key, stored)
    return make_table(
        {n: stored[n] if n in stored else np.zeros(0, table.column(n).dtype) for n in names}
    )


def recorded_statistics(table: Mapping[str, np.ndarray]) -> list[str]:
    """The per-cluster statistics in a ``/metrics/clusters`` table, sorted by name: its
    numeric columns beyond the ones the runtime fills itself (round, cluster, size,
    sampled) that hold a finite value in some row (a column of NaN is a statistic another
    algorithm records)."""
    return sorted(
        name
        for name, values in table.items()
        if name not in layout.CLUSTERS.fixed
        and np.asarray(values).dtype.kind in "biuf"
        and np.isfinite(np.asarray(values, dtype=np.float64)).any()
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


def readonly(values) -> np.ndarray:
    """A view of ``values`` that cannot be written to (no copy of a large matrix), so that
    the Run's arrays stay as read."""
    a = np.asarray(values).view()
    a.flags.writeable = False
    return a
