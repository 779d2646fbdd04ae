"""Loaders for datasets the user already has on disk: nothing is downloaded.

* MNIST: the four IDX files (plain or gzipped) in ``data.root``, ``data.root/MNIST/raw``
  (torchvision's layout) or ``data.root/mnist``.
* CIFAR-10 / CIFAR-100: the python pickle batches (``cifar-10-batches-py``,
  ``cifar-100-python``), read with an unpickler that only builds numpy arrays.
* FEMNIST: LEAF's JSON files under ``train/`` and ``test/`` (or LEAF's ``data/train`` and
  ``data/test``); the writers become the samples' owners.

Every problem with a file raises :class:`~distfl.errors.DataError` with one line naming the
path and the layout that was expected.
"""

from __future__ import annotations

import gzip
import importlib
import json
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from distfl.data.dataset import Dataset
from distfl.errors import DataError

__all__ = ["check_root", "load_cifar", "load_femnist", "load_mnist"]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------
# MNIST (IDX files)

_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_MNIST_LAYOUT = (
    "expected train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
    "t10k-labels-idx1-ubyte (plain or .gz) in data.root, data.root/MNIST/raw or data.root/mnist"
)
_IDX_IMAGES = 0x803
_IDX_LABELS = 0x801


def _mnist_dirs(root: Path) -> list[Path]:
    return [root, root / "MNIST" / "raw", root / "mnist"]


def _find_in(directory: Path, base: str) -> Path | None:
    for name in (base, base + ".gz"):
        p = directory / name
        if p.is_file():
            return p
    return None


def _mnist_paths(root: Path) -> list[Path]:
    """The four IDX files, all from the first candidate directory holding any of them."""
    for d in _mnist_dirs(root):
        found = [_find_in(d, base) for base in _MNIST_FILES]
        if any(p is not None for p in found):
            missing = [base for base, p in zip(_MNIST_FILES, found, strict=True) if p is None]
            if missing:
                raise DataError(f"{d / missing[0]} (or .gz) does not exist: {_MNIST_LAYOUT}")
            return [p for p in found if p is not None]
    raise DataError(f"{root} holds no MNIST IDX files: {_MNIST_LAYOUT}")


def _read_bytes(path: Path, layout: str) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read ({_one_line(exc)}): {layout}") from None


def _read_idx(path: Path, magic_expected: int) -> np.ndarray:
    """An IDX file's uint8 payload: [count, rows, cols] for images, [count] for labels."""
    data = _read_bytes(path, _MNIST_LAYOUT)
    kind = "image" if magic_expected == _IDX_IMAGES else "label"
    header = 16 if magic_expected == _IDX_IMAGES else 8
    if len(data) < header:
        raise DataError(
            f"{path} is not an MNIST IDX {kind} file ({len(data)} bytes, shorter than its "
            f"{header}-byte header): {_MNIST_LAYOUT}"
        )
    (magic,) = struct.unpack(">I", data[:4])
    if magic != magic_expected:
        raise DataError(
            f"{path} is not an MNIST IDX {kind} file (magic {magic:#x}, expected "
            f"{magic_expected:#x}): {_MNIST_LAYOUT}"
        )
    if magic_expected == _IDX_IMAGES:
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
            f"for {dims} uint8 values after the header): {_MNIST_LAYOUT}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def _mnist_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images = _read_idx(images_path, _IDX_IMAGES)
    labels = _read_idx(labels_path, _IDX_LABELS)
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{labels_path} has {labels.shape[0]} labels but {images_path} has "
            f"{images.shape[0]} images: expected one label per image"
        )
    if labels.size and int(labels.max()) >= 10:
        raise DataError(f"{labels_path} has label {int(labels.max())}: expected MNIST labels 0..9")
    return images, labels


def load_mnist(root: str) -> Dataset:
    """MNIST from its four IDX files: x uint8 [N, 1, rows, cols], the 60,000 train samples
    first, then the t10k test samples (``is_test`` True)."""
    paths = _mnist_paths(Path(root).expanduser())
    x_train, y_train = _mnist_split(paths[0], paths[1])
    x_test, y_test = _mnist_split(paths[2], paths[3])
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(
            f"{paths[2]} has {x_test.shape[1]}x{x_test.shape[2]} images but {paths[0]} has "
            f"{x_train.shape[1]}x{x_train.shape[2]}: expected train and t10k images of one size"
        )
    x = np.concatenate([x_train, x_test])[:, None, :, :]
    y = np.concatenate([y_train, y_test]).astype(np.int64)
    is_test = np.zeros(len(y), dtype=bool)
    is_test[len(y_train) :] = True
    return Dataset(name="mnist", x=x, y=y, num_classes=10, owner=None, is_test=is_test)


# --------------------------------------------------------------------------------------------
# CIFAR-10 / CIFAR-100 (python pickle batches)


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


class _ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle that names something other than numpy's array reconstruction."""


class _ArrayUnpickler(pickle.Unpickler):
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
        raise _ForbiddenGlobal(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _ForbiddenGlobal("a persistent id")


def _cifar_layout(num_classes: int) -> str:
    if num_classes == 10:
        return (
            "expected the python version of CIFAR-10: cifar-10-batches-py/ with data_batch_1 .. "
            "data_batch_5 and test_batch, as data.root itself or inside data.root"
        )
    return (
        "expected the python version of CIFAR-100: cifar-100-python/ with train and test, "
        "as data.root itself or inside data.root"
    )


def _get(d: dict, key: str) -> Any:
    if key.encode() in d:
        return d[key.encode()]
    return d.get(key)


def _read_cifar_batch(path: Path, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    layout = _cifar_layout(num_classes)
    label_key = "labels" if num_classes == 10 else "fine_labels"
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except _ForbiddenGlobal as exc:
        raise DataError(
            f"{path} is not a CIFAR batch: the pickle refers to {exc}, which is not loaded "
            f"(only numpy arrays are allowed); {layout}"
        ) from None
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({_one_line(exc)}): {layout}") from None
    except Exception as exc:  # a corrupt pickle raises almost anything
        raise DataError(
            f"{path} is not a readable CIFAR pickle ({type(exc).__name__}: {_one_line(exc)}): "
            f"{layout}"
        ) from None
    if not isinstance(obj, dict):
        raise DataError(
            f"{path} holds a {type(obj).__name__}, not a dict: expected a CIFAR batch dict with "
            f"b'data' and b'{label_key}'; {layout}"
        )
    data = _get(obj, "data")
    labels = _get(obj, label_key)
    for key, value in (("data", data), (label_key, labels)):
        if value is None:
            raise DataError(
                f"{path} has no b'{key}' entry: expected a CIFAR batch dict with b'data' and "
                f"b'{label_key}'; {layout}"
            )
    if not (
        isinstance(data, np.ndarray)
        and data.dtype == np.uint8
        and data.ndim == 2
        and data.shape[1] == 3072
    ):
        desc = (
            f"{data.dtype} array of shape {data.shape}"
            if isinstance(data, np.ndarray)
            else type(data).__name__
        )
        raise DataError(
            f"{path} b'data' is a {desc}: expected a uint8 array of shape [n, 3072] "
            f"(3 planes of 32x32 per row); {layout}"
        )
    n = data.shape[0]
    try:
        y = np.asarray(labels)
    except Exception:
        y = np.asarray([])
    if y.ndim != 1 or len(y) != n or (n and y.dtype.kind not in "iu"):
        raise DataError(
            f"{path} b'{label_key}' is not a list of {n} integer labels: expected one label "
            f"per row of b'data'; {layout}"
        )
    y = y.astype(np.int64)
    if n and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise DataError(
            f"{path} has label {bad} in b'{label_key}': expected labels 0..{num_classes - 1}; "
            f"{layout}"
        )
    return data.reshape(n, 3, 32, 32), y


def _cifar_dir(root: Path, num_classes: int) -> tuple[Path, list[str], list[str]]:
    if num_classes == 10:
        sub, train, test = (
            "cifar-10-batches-py",
            [f"data_batch_{i}" for i in range(1, 6)],
            ["test_batch"],
        )
    else:
        sub, train, test = "cifar-100-python", ["train"], ["test"]
    layout = _cifar_layout(num_classes)
    if (root / sub).is_dir():
        d = root / sub
    elif any((root / name).is_file() for name in train + test):
        d = root
    else:
        raise DataError(f"{root} has neither {sub}/ nor its batch files: {layout}")
    for name in train + test:
        if not (d / name).is_file():
            raise DataError(f"{d / name} does not exist: {layout}")
    return d, train, test


def load_cifar(root: str, num_classes: int) -> Dataset:
    """CIFAR-10 or CIFAR-100 from the python pickle batches: x uint8 [N, 3, 32, 32]
    (channels R, G, B), train batches first, then the test batch (``is_test`` True)."""
    if num_classes not in (10, 100):
        raise DataError(f"CIFAR has 10 or 100 classes, not {num_classes} (data.root {root})")
    d, train, test = _cifar_dir(Path(root).expanduser(), num_classes)
    xs, ys, test_flags = [], [], []
    for names, flag in ((train, False), (test, True)):
        for name in names:
            x, y = _read_cifar_batch(d / name, num_classes)
            xs.append(x)
            ys.append(y)
            test_flags.append(np.full(len(y), flag))
    return Dataset(
        name=f"cifar{num_classes}",
        x=np.concatenate(xs),
        y=np.concatenate(ys),
        num_classes=num_classes,
        owner=None,
        is_test=np.concatenate(test_flags),
    )


# --------------------------------------------------------------------------------------------
# FEMNIST (LEAF JSON)

_FEMNIST_LAYOUT = (
    "expected LEAF's FEMNIST JSON files in data.root/train/*.json and data.root/test/*.json "
    '(or data.root/data/train and data.root/data/test), each {"users": [...], '
    '"num_samples": [...], "user_data": {id: {"x": [[784 floats], ...], "y": [labels]}}}'
)
_FEMNIST_CLASSES = 62


def _femnist_dirs(root: Path) -> tuple[Path, Path | None]:
    for base in (root, root / "data"):
        if (base / "train").is_dir():
            test = base / "test"
            return base / "train", (test if test.is_dir() else None)
    raise DataError(f"{root} has no train/ or data/train/ directory: {_FEMNIST_LAYOUT}")


def _numbers(row: list) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in row)


def _read_leaf_file(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(writer id, x [n, 784] float32, y [n] int64) for each user of one LEAF JSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({_one_line(exc)}): {_FEMNIST_LAYOUT}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DataError(f"{path} is not valid JSON ({_one_line(exc)}): {_FEMNIST_LAYOUT}") from None
    if not isinstance(obj, dict):
        raise DataError(
            f"{path} holds a JSON {type(obj).__name__}, not an object: {_FEMNIST_LAYOUT}"
        )
    for key in ("users", "user_data"):
        if key not in obj:
            raise DataError(f'{path} has no "{key}" key: {_FEMNIST_LAYOUT}')
    users, user_data = obj["users"], obj["user_data"]
    num_samples = obj.get("num_samples")
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise DataError(f'{path} "users" is not a list of writer ids: {_FEMNIST_LAYOUT}')
    if not isinstance(user_data, dict):
        raise DataError(f'{path} "user_data" is not an object: {_FEMNIST_LAYOUT}')
    if num_samples is not None and (
        not isinstance(num_samples, list) or len(num_samples) != len(users)
    ):
        raise DataError(
            f'{path} "num_samples" is not a list of {len(users)} counts, one per user: '
            f"{_FEMNIST_LAYOUT}"
        )
    out = []
    for i, user in enumerate(users):
        entry = user_data.get(user)
        if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
            raise DataError(
                f'{path} "user_data" has no {{"x": ..., "y": ...}} entry for user {user!r}: '
                f"{_FEMNIST_LAYOUT}"
            )
        xs, ys = entry["x"], entry["y"]
        if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys):
            raise DataError(
                f'{path} user {user!r}: "x" and "y" are not lists of equal length: '
                f"{_FEMNIST_LAYOUT}"
            )
        if num_samples is not None and num_samples[i] != len(ys):
            raise DataError(
                f'{path} user {user!r}: "num_samples" says {num_samples[i]} but there are '
                f"{len(ys)} samples: {_FEMNIST_LAYOUT}"
            )
        bad = next(
            (j for j, row in enumerate(xs) if not isinstance(row, list) or len(row) != 784), None
        )
        if bad is None:
            try:
                x = np.asarray(xs, dtype=np.float32).reshape(len(xs), 784)
            except (ValueError, TypeError):
                bad = next((j for j, row in enumerate(xs) if not _numbers(row)), 0)
        if bad is not None:
            raise DataError(
                f'{path} user {user!r}: "x" row {bad} is not a list of 784 numbers: '
                f"{_FEMNIST_LAYOUT}"
            )
        y = np.asarray(ys)
        if len(ys) and (y.ndim != 1 or y.dtype.kind not in "iu"):
            raise DataError(
                f'{path} user {user!r}: "y" is not a list of integer labels: {_FEMNIST_LAYOUT}'
            )
        y = y.astype(np.int64).reshape(-1)
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= _FEMNIST_CLASSES):
            bad_label = int(y.min()) if int(y.min()) < 0 else int(y.max())
            raise DataError(
                f"{path} user {user!r} has label {bad_label}: expected FEMNIST labels "
                f"0..{_FEMNIST_CLASSES - 1}"
            )
        out.append((user, x, y))
    return out


def load_femnist(root: str) -> Dataset:
    """FEMNIST from LEAF's JSON files: x float32 [N, 1, 28, 28] (values as stored), train
    files first, then test files; ``owner`` indexes the writers sorted by id (a writer in
    both splits has one owner index), ``owner_names`` lists those ids."""
    base = Path(root).expanduser()
    train_dir, test_dir = _femnist_dirs(base)
    splits = [(train_dir, False)] + ([(test_dir, True)] if test_dir is not None else [])
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    writers: list[str] = []
    counts: list[int] = []
    flags: list[bool] = []
    for directory, flag in splits:
        files = sorted(directory.glob("*.json"))
        if not files:
            raise DataError(f"{directory} has no *.json files: {_FEMNIST_LAYOUT}")
        for path in files:
            for user, x, y in _read_leaf_file(path):
                xs.append(x)
                ys.append(y)
                writers.append(user)
                counts.append(len(y))
                flags.append(flag)
    total = sum(counts)
    if total == 0:
        raise DataError(f"{base} FEMNIST files hold no samples: {_FEMNIST_LAYOUT}")
    names = sorted(set(writers))
    index = {w: i for i, w in enumerate(names)}
    owner = np.repeat(np.array([index[w] for w in writers], dtype=np.int64), counts)
    is_test = np.repeat(np.array(flags, dtype=bool), counts)
    return Dataset(
        name="femnist",
        x=np.concatenate(xs).reshape(total, 1, 28, 28),
        y=np.concatenate(ys),
        num_classes=_FEMNIST_CLASSES,
        owner=owner,
        is_test=is_test,
        owner_names=tuple(names),
    )


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
