"""Writers of tiny files in the real dataset formats: MNIST IDX (optionally gzipped),
CIFAR-10/100 pickle batches as Python 2's cPickle wrote them, and FEMNIST LEAF JSON; and
the built-in datasets, as the registry lists them. Shared by the loader unit tests and the
end-to-end dataset runs."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
from pathlib import Path

import numpy as np

# --------------------------------------------------------------------------------------------
# MNIST


def idx_images(images: np.ndarray, magic: int = 0x803) -> bytes:
    n, rows, cols = images.shape
    return struct.pack(">IIII", magic, n, rows, cols) + images.astype(np.uint8).tobytes()


def idx_labels(labels: np.ndarray, magic: int = 0x801) -> bytes:
    return struct.pack(">II", magic, len(labels)) + labels.astype(np.uint8).tobytes()


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def mnist_arrays(seed: int = 0, n_train: int = 5, n_test: int = 3, size: int = 4):
    rng = np.random.default_rng(seed)
    xtr = rng.integers(0, 256, (n_train, size, size), dtype=np.uint8)
    ytr = rng.integers(0, 10, n_train).astype(np.uint8)
    xte = rng.integers(0, 256, (n_test, size, size), dtype=np.uint8)
    yte = rng.integers(0, 10, n_test).astype(np.uint8)
    return xtr, ytr, xte, yte


def write_mnist(d: Path, arrays, gz: bool = False) -> dict[str, Path]:
    xtr, ytr, xte, yte = arrays
    return {
        "train-images": write(d / "train-images-idx3-ubyte", idx_images(xtr), gz),
        "train-labels": write(d / "train-labels-idx1-ubyte", idx_labels(ytr), gz),
        "t10k-images": write(d / "t10k-images-idx3-ubyte", idx_images(xte), gz),
        "t10k-labels": write(d / "t10k-labels-idx1-ubyte", idx_labels(yte), gz),
    }


# --------------------------------------------------------------------------------------------
# CIFAR


def cifar_batch(n: int, num_classes: int, seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = rng.integers(0, num_classes, n)
    key = b"labels" if num_classes == 10 else b"fine_labels"
    d = {b"batch_label": b"batch", key: [int(v) for v in labels], b"data": data}
    if num_classes == 100:
        d[b"coarse_labels"] = [int(v) % 20 for v in labels]
    return d, data, labels


class Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    """Writes pickles as Python 2's cPickle wrote the CIFAR batches: protocol 2, strings as
    BINSTRING, numpy's reconstruction as ``numpy.core.multiarray._reconstruct``."""

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def save_bytes(self, obj: bytes) -> None:
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    def save_str(self, obj: str) -> None:
        self.save_bytes(obj.encode("latin-1"))

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


def dump(path: Path, obj, py2: bool = True) -> Path:
    """A pickle like the real CIFAR files (``py2``), or as Python 3 writes it by default."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if py2:
        buf = io.BytesIO()
        Py2Pickler(buf, protocol=2).dump(obj)
        data = buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    else:
        data = pickle.dumps(obj)
    path.write_bytes(data)
    return path


def write_cifar(d: Path, num_classes: int, sizes=(3, 2, 2, 1, 2), n_test: int = 3):
    names = [f"data_batch_{i}" for i in range(1, 6)] if num_classes == 10 else ["train"]
    test_name = "test_batch" if num_classes == 10 else "test"
    datas, labels = [], []
    for i, name in enumerate(names):
        batch, data, lab = cifar_batch(sizes[i], num_classes, seed=i)
        dump(d / name, batch)
        datas.append(data)
        labels.append(lab)
    batch, data, lab = cifar_batch(n_test, num_classes, seed=99)
    dump(d / test_name, batch)
    datas.append(data)
    labels.append(lab)
    return np.concatenate(datas), np.concatenate(labels)


# --------------------------------------------------------------------------------------------
# FEMNIST


def leaf_user(n: int, seed: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, 784)).astype(np.float32)
    y = rng.integers(0, 62, n)
    return [[float(v) for v in row] for row in x], [int(v) for v in y]


def write_leaf(path: Path, users: dict[str, tuple[list, list]], **extra) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    obj.update(extra)
    path.write_text(json.dumps(obj))
    return path


# --------------------------------------------------------------------------------------------
# loading through the registered spec


def load_files(name: str, root: str):
    """The dataset ``name`` read from ``root`` by its registered spec's loader (which reads
    data.root alone)."""
    from types import SimpleNamespace

    from distfl.datasets import dataset_spec

    return dataset_spec(name).load(SimpleNamespace(data=SimpleNamespace(root=root)))


def built_in_specs() -> list:
    """The specs of distfl's own datasets, by name: those registered from a module of
    distfl/datasets/ (a plug-in's, registered from elsewhere, is not one of them)."""
    import sys

    import distfl.datasets
    from distfl.datasets import dataset_names, dataset_spec

    here = Path(distfl.datasets.__file__).resolve().parent
    specs = [dataset_spec(name) for name in dataset_names()]
    return [s for s in specs if Path(sys.modules[s.__module__].__file__).resolve().parent == here]
