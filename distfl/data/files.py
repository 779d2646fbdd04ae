"""What the datasets' file loaders share: nothing is downloaded.

* :func:`check_root`: ``data.root`` must be a directory.
* :func:`find_in` and :func:`read_bytes`: a file stored plain or gzipped.
* :func:`read_idx`: the payload of an IDX file (the MNIST format), its header checked.
* :class:`ArrayUnpickler`: a pickle read so that it only builds numpy arrays (the CIFAR
  batches).

Each dataset's own reader (its files, its layout) is its module of :mod:`distfl.datasets`.
Every problem with a file raises :class:`~distfl.errors.DataError` with one line naming the
path and the layout that was expected.
"""

from __future__ import annotations

import gzip
import importlib
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from distfl.errors import DataError

__all__ = [
    "IDX_IMAGES",
    "IDX_LABELS",
    "ArrayUnpickler",
    "ForbiddenGlobal",
    "check_root",
    "find_in",
    "one_line",
    "read_bytes",
    "read_idx",
]


def one_line(exc: BaseException) -> str:
    """An exception's text on one line (its type's name when it has none)."""
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------
# plain or gzipped files; IDX

IDX_IMAGES = 0x803
IDX_LABELS = 0x801


def find_in(directory: Path, base: str) -> Path | None:
    """``directory/base``, else ``directory/base.gz``, else None."""
    for name in (base, base + ".gz"):
        p = directory / name
        if p.is_file():
            return p
    return None


def read_bytes(path: Path, layout: str) -> bytes:
    """The bytes of ``path``, gunzipped when it ends in ``.gz``; DataError naming
    ``layout`` when it cannot be read."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read ({one_line(exc)}): {layout}") from None


def read_idx(path: Path, magic_expected: int, layout: str) -> np.ndarray:
    """An IDX file's uint8 payload: [count, rows, cols] for images (``IDX_IMAGES``),
    [count] for labels (``IDX_LABELS``); DataError naming ``layout`` when the header or the
    size is wrong."""
    data = read_bytes(path, layout)
    kind = "image" if magic_expected == IDX_IMAGES else "label"
    header = 16 if magic_expected == IDX_IMAGES else 8
    if len(data) < header:
        raise DataError(
            f"{path} is not an MNIST IDX {kind} file ({len(data)} bytes, shorter than its "
            f"{header}-byte header): {layout}"
        )
    (magic,) = struct.unpack(">I", data[:4])
    if magic != magic_expected:
        raise DataError(
            f"{path} is not an MNIST IDX {kind} file (magic {magic:#x}, expected "
            f"{magic_expected:#x}): {layout}"
        )
    if magic_expected == IDX_IMAGES:
        count, rows, cols = struct.unpack(">III", data[4:16])
        shape: tuple[int, ...] = (count, rows, cols)
    else:
        (count,) = struct.unpack(">I", data[4:8])
        shape = (count,)
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(data) != expected:
        dims = "x".join(str(s) for s in shape)
        raise DataError(
            f"{path} is truncated or has trailing bytes ({len(data)} bytes, expected {expected} "
            f"for {dims} uint8 values after the header): {layout}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


# --------------------------------------------------------------------------------------------
# pickles of numpy arrays


def _reconstruct_function() -> Any:
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            return importlib.import_module(module)._reconstruct
        except (ImportError, AttributeError):
            continue
    raise ImportError("numpy's multiarray._reconstruct is not available")


_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): "reconstruct",
    ("numpy._core.multiarray", "_reconstruct"): "reconstruct",
    ("numpy", "ndarray"): "ndarray",
    ("numpy", "dtype"): "dtype",
}


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle that names something other than numpy's array reconstruction."""


class ArrayUnpickler(pickle.Unpickler):
    """Builds python containers and numpy arrays only: any other global a pickle names
    (a function to call, a class to instantiate) is refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        what = _ALLOWED_GLOBALS.get((module, name))
        if what == "reconstruct":
            return _reconstruct_function()
        if what == "ndarray":
            return np.ndarray
        if what == "dtype":
            return np.dtype
        raise ForbiddenGlobal(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise ForbiddenGlobal("a persistent id")


# --------------------------------------------------------------------------------------------


def check_root(root: str, name: str) -> None:
    """DataError unless ``root`` (data.root) is a directory, naming the dataset ``name``
    whose files are expected there."""
    path = Path(root).expanduser()
    if not path.exists():
        raise DataError(
            f"data.root {root} does not exist: expected a directory with the {name} files"
        )
    if not path.is_dir():
        raise DataError(
            f"data.root {root} is not a directory: expected a directory with the {name} files"
        )
