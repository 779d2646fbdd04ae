"""An open run file as the checks read it (:class:`OpenedFile`): its values, texts and
datasets each of the kind the writer writes, or one line saying why not. The checks of
:mod:`distfl.runfile.contents`, :mod:`distfl.runfile.table_checks` and
:mod:`distfl.runfile.state_checks` read through it."""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

from distfl.config import Config
from distfl.config.parse import nesting
from distfl.errors import CheckpointError

#: the deepest nesting of a JSON value in a run file (the stored config, /state's values)
MAX_JSON_DEPTH = 32
#: the longest label of a run file (a version, a date, a trainer, a launcher, a host name
#: or an address: a host name has 255 bytes at most)
MAX_LABEL = 1024
#: the dtype of each kind of dataset, as the writer writes it (a model's parameters are
#: float32, every other number int64 or float64); "number": an algorithm's own array at a
#: split, of any numbers
DTYPES = {"int": np.dtype(np.int64), "float": np.dtype(np.float64),
          "model": np.dtype(np.float32)}  # fmt: skip
_KINDS = {"int": "int64 (integers)", "float": "float64 (floating-point numbers)",
          "model": "float32 (a model's parameters)", "str": "text",
          "number": "numbers"}  # fmt: skip


class OpenedFile:
    """One open run file and its stored config, with the reads every check makes of it:
    each refusal a CheckpointError naming ``path``."""

    def __init__(self, f: h5py.File, config: Config, path: Any):
        self.f, self.config, self.path = f, config, path
        self.K = config.data.num_clients
        #: the rounds done, as the checks of the shapes found them
        self.done = 0

    def bad(self, what: str) -> CheckpointError:
        return CheckpointError(f"run file {self.path} is inconsistent: {what}")

    # -- values read from attributes ------------------------------------------------------

    def json_value(self, value: Any, where: str) -> Any:
        """An attribute that holds JSON (as the writer's ``_write_tree`` stores a value),
        parsed with its nesting bounded."""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str):
            raise self.bad(f"{where} is not JSON text")
        try:
            parsed = json.loads(value)
        except RecursionError:
            raise self.bad(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError:
            raise self.bad(f"{where} is not JSON") from None
        if nesting(parsed) > MAX_JSON_DEPTH:
            raise self.bad(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels")
        return parsed

    def integer(self, value: Any, where: str, lo: int, hi: int, what: str) -> int:
        """A whole number from ``lo`` to ``hi`` (an attribute's value as h5py gives it)."""
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]
        if isinstance(value, np.integer):
            value = int(value)
        if type(value) is not int or not lo <= value <= hi:
            shown = value if type(value) is int else repr(value)[:40]
            raise self.bad(f"{where} = {shown} is not {what}")
        return value

    def fractions(self, values: np.ndarray, where: str) -> None:
        """Accuracies: from 0 to 1, or NaN (not evaluated)."""
        v = np.asarray(values, dtype=np.float64)
        known = v[~np.isnan(v)]
        if len(known) and (known.min() < 0.0 or known.max() > 1.0):
            raise self.bad(f"{where} holds an accuracy outside 0..1")

    def text(self, value: Any, where: str, most: int | None = None) -> str:
        """``value`` as text (``most``: of at most that many characters)."""
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                raise self.bad(f"{where} is not UTF-8 text") from None
        if not isinstance(value, str):
            raise self.bad(f"{where} is not text")
        if most is not None and len(value) > most:
            raise self.bad(f"{where} holds {len(value):,} characters of text; distfl writes "
                           f"at most {most:,} there")  # fmt: skip
        return value

    def label(self, value: Any, where: str) -> str:
        """A short text (at most :data:`MAX_LABEL` characters)."""
        return self.text(value, where, MAX_LABEL)

    # -- datasets --------------------------------------------------------------------------

    def dataset(self, where: str, kind: str, ndim: int = 1) -> h5py.Dataset:
        """The dataset at ``where`` (no leading slash), of ``kind`` ("int", "float",
        "model", "str", or "number": any numbers) and ``ndim`` dimensions; nothing read."""
        ds = self.f.get(where)
        if not isinstance(ds, h5py.Dataset):
            raise self.bad(f"/{where} is not a dataset")
        if ds.ndim != ndim:
            raise self.bad(f"/{where} has {ds.ndim} dimensions; a run file's has {ndim}")
        if not of_kind(ds.dtype, kind):
            raise self.bad(f"/{where} holds {ds.dtype} values; a run file's are {_KINDS[kind]}")
        return ds

    def sized(self, where: str, kind: str, n: int, what: str, ndim: int = 1) -> h5py.Dataset:
        """:meth:`dataset`, of ``n`` rows (one for each of ``n`` ``what``)."""
        ds = self.dataset(where, kind, ndim)
        if ds.shape[0] != n:
            raise self.bad(f"/{where} holds {ds.shape[0]} rows, not one for each of the {n} {what}")
        return ds


def of_kind(dtype: np.dtype, kind: str) -> bool:
    """Whether ``dtype`` is the writer's for ``kind`` (:data:`DTYPES`, in either byte
    order: a file written on a big-endian machine holds its numbers so; "str": text,
    "number": any numbers)."""
    if kind in DTYPES:
        return dtype.newbyteorder("=") == DTYPES[kind] or dtype == DTYPES[kind]
    if kind == "number":
        return dtype.kind in "biuf"
    return h5py.check_string_dtype(dtype) is not None
