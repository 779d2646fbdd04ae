"""The rows of the run file's per-row tables as the server fills them, by the declaration in
:mod:`distfl.runfile.layout`: every declared column always, of its declared dtype; in an
open table (/metrics/clusters) one float64 column per further name an algorithm returns,
after the declared ones in sorted order, NaN in the rows without it. A column that appears
in a later round (or after a resume from a file that lacked it) holds its ``missing`` value
(NaN, 0, "") in the rows before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from distfl.errors import CheckpointError
from distfl.runfile.layout import ALGORITHM_PREFIX, TABLES, Table, found_table


class Rows:
    """One table's rows, column by column (lists of equal length)."""

    def __init__(self, table: Table, columns: dict[str, list] | None = None):
        self.table = table
        self.columns: dict[str, list] = {k: [] for k in table.names} if columns is None else columns

    def __len__(self) -> int:
        return len(self.columns[self.table.names[0]])

    def __getitem__(self, name: str) -> list:
        return self.columns[name]

    def extra_names(self) -> list[str]:
        """The columns beyond the declared ones (an open table's statistics), sorted."""
        return sorted(set(self.columns) - set(self.table.names))

    def append(
        self, values: Mapping[str, Any], extra: Mapping[str, float] | None = None, *,
        source: str = "the algorithm",
    ) -> None:  # fmt: skip
        """One row: ``values`` by declared column (a declared float column it lacks is
        NaN), ``extra`` further float columns of an open table (a name new to the table
        becomes a column, missing in the rows before; a declared name, or one that is no
        plain HDF5 name, is refused: ``source`` says who gave it)."""
        extra = extra or {}
        rows = len(self)
        t = self.table
        row = ", ".join(f"{k} {values.get(k)}" for k in t.fixed) or "a row"
        for name in extra:
            where = f"{source} returned the statistic {name!r} for {row}"
            if not t.open or name in t.fixed:
                raise RuntimeError(
                    f"{where}: /{t.path} fills {', '.join(t.fixed or t.names)} itself; give "
                    "the statistic another name"
                )
            if name not in self.columns and (
                not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            ):
                raise RuntimeError(f"{where}: a statistic needs a name without '/' to be a column")
        for c in t.columns:
            if c.name not in values and c.kind != "float":
                raise KeyError(f"/{t.path}: a row without {c.name}")
        for name in extra:
            if name not in self.columns:
                self.columns[name] = [math.nan] * rows
        for c in t.columns:
            value = values.get(c.name, extra.get(c.name, math.nan))
            self.columns[c.name].append(_typed(value, c.kind))
        for name in self.extra_names():
            self.columns[name].append(float(extra.get(name, math.nan)))

    def extend(self, values: Mapping[str, Any], *, source: str = "the algorithm") -> None:
        """Many rows at once: ``values`` by column, every column of the table, all of one
        length (lists or 1-D arrays); a missing, unknown or odd column is refused, naming
        ``source``."""
        t = self.table
        where = f"{source} gave rows of /{t.path}"
        unknown = sorted(set(values) - set(t.names))
        missing = [n for n in t.names if n not in values]
        if unknown or missing:
            raise RuntimeError(
                f"{where} with the columns {', '.join(map(str, values)) or 'none'}; it has "
                f"{', '.join(t.names)}"
                + (f" (no {', '.join(missing)})" if missing else "")
                + (f" ({', '.join(map(str, unknown))} is none of them)" if unknown else "")
            )
        arrays = {n: np.asarray(values[n]) for n in t.names}
        lengths = {n: a.shape for n, a in arrays.items()}
        first = arrays[t.names[0]]
        if any(a.ndim != 1 or len(a) != len(first) for a in arrays.values()):
            shapes = ", ".join(f"{n} {shape}" for n, shape in lengths.items())
            raise RuntimeError(f"{where} whose columns are not of one length: {shapes}")
        for c in t.columns:  # every column checked before any grows
            a = arrays[c.name]
            if c.kind == "int" and len(a) and a.dtype.kind not in "iub":
                if a.dtype.kind != "f" or not np.array_equal(a, np.round(a)):
                    raise RuntimeError(f"{where}: column {c.name} holds other than integers")
        for c in t.columns:
            a = arrays[c.name] if c.kind == "str" else arrays[c.name].astype(c.dtype)
            self.columns[c.name].extend(_typed(x, c.kind) for x in a.tolist())

    @classmethod
    def restore(cls, table: Table, saved: Mapping[str, np.ndarray]) -> Rows:
        """The rows of a run file's table: every declared column (one the file lacks holds
        its ``missing`` value), an open table's further columns carried on; all as many
        rows as the first column. A file whose columns differ in length is refused."""
        first = table.names[0]
        rows = len(saved.get(first, ()))
        columns: dict[str, list] = {}
        for c in table.columns:
            values = saved.get(c.name)
            columns[c.name] = (
                [c.missing] * rows if values is None else [_typed(v, c.kind) for v in values]
            )
        if table.open:
            for name in sorted(set(saved) - set(table.names)):
                columns[name] = [float(x) for x in np.asarray(saved[name], dtype=np.float64)]
        for name, values in columns.items():
            if len(values) != rows:
                raise CheckpointError(
                    f"/{table.path}/{name} has {len(values)} rows, /{table.path}/{first} "
                    f"{rows}: the run file is inconsistent"
                )
        return cls(table, columns)

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as written: the declared ones of their dtype, then the others
        (float64) by name."""
        out = {c.name: np.array(self.columns[c.name], dtype=c.dtype) for c in self.table.columns}
        out.update({k: np.array(self.columns[k], dtype=np.float64) for k in self.extra_names()})
        return out


class Record:
    """Every per-row table of a run, as the server fills it (``record.metrics``,
    ``record.clusters``, ...: :data:`distfl.runfile.layout.TABLES` by key). ``always``:
    further float64 columns of open tables that every run holds, by table key (the built-in
    algorithms' statistics declared for every run), missing (NaN) where nothing fills them.
    ``own``: the tables of the run's algorithm's own (``RecordTable.table()``), by their keys
    (``tables/<name>``)."""

    def __init__(
        self,
        saved: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        always: Mapping[str, Iterable[str]] | None = None,
        own: Iterable[Table] = (),
    ):
        declared = {t.key: t for t in (*TABLES, *own)}
        # a table of the algorithm's own that the file holds and no declaration names (a
        # plug-in changed since) is carried on as the file holds it: nothing is lost
        for key, columns in (saved or {}).items():
            if key not in declared and key.startswith(ALGORITHM_PREFIX):
                declared[key] = found_table(key[len(ALGORITHM_PREFIX) :], dict(columns))
        self.tables = {
            key: Rows(t) if saved is None else Rows.restore(t, saved.get(key, {}))
            for key, t in declared.items()
        }
        for key, names in (always or {}).items():
            rows = self.tables[key]
            for name in names:
                rows.columns.setdefault(name, [math.nan] * len(rows))

    def __getattr__(self, key: str) -> Rows:
        try:
            return self.__dict__["tables"][key]
        except KeyError:
            raise AttributeError(key) from None

    def arrays(self) -> dict[str, dict[str, np.ndarray]]:
        return {key: rows.arrays() for key, rows in self.tables.items()}

    def mark(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """Where each table stands now (its rows and its columns), for :meth:`rollback`."""
        return {key: (len(rows), tuple(rows.columns)) for key, rows in self.tables.items()}

    def rollback(self, mark: dict[str, tuple[int, tuple[str, ...]]]) -> None:
        """Each table as it stood at ``mark``: the rows and columns added since removed."""
        for key, (n, names) in mark.items():
            rows = self.tables[key]
            rows.columns = {name: rows.columns[name][:n] for name in names}


def _typed(value: Any, kind: str):
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["Record", "Rows"]
