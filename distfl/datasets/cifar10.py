"""CIFAR-10 from its python pickle batches under ``data.root`` (never downloaded):
``cifar-10-batches-py`` (CIFAR-100's ``cifar-100-python``: :mod:`distfl.datasets.cifar100`
is this reader with 100 classes), as ``data.root`` itself or inside it, read with an
unpickler that only builds numpy arrays.

Every problem with a file raises :class:`~distfl.errors.DataError` with one line naming the
path and the layout that was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register
from distfl.errors import DataError

if TYPE_CHECKING:
    from distfl.data.dataset import Dataset


@register
class Cifar10(DatasetSpec):
    name = "cifar10"
    source = "python pickle batches"
    files = (
        "`cifar-10-batches-py/` with `data_batch_1`..`5` and `test_batch` (`data.root` may "
        "be that directory or its parent)"
    )
    num_classes = 10
    sample_shape = (3, 32, 32)
    sample_bytes = 3 * 32 * 32 + 8 + 1  # uint8 pixels, an int64 label, the test flag
    num_samples = 60_000
    needs_root = True

    @classmethod
    def load(cls, config):
        from distfl.data.files import check_root

        check_root(config.data.root, cls.name)
        return load_cifar(config.data.root, cls.num_classes)


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
    from distfl.data.files import ArrayUnpickler, ForbiddenGlobal, one_line

    layout = _cifar_layout(num_classes)
    label_key = "labels" if num_classes == 10 else "fine_labels"
    try:
        with open(path, "rb") as f:
            obj = ArrayUnpickler(f, encoding="bytes").load()
    except ForbiddenGlobal as exc:
        raise DataError(
            f"{path} is not a CIFAR batch: the pickle refers to {exc}, which is not loaded "
            f"(only numpy arrays are allowed); {layout}"
        ) from None
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({one_line(exc)}): {layout}") from None
    except Exception as exc:  # a corrupt pickle raises almost anything
        raise DataError(
            f"{path} is not a readable CIFAR pickle ({type(exc).__name__}: {one_line(exc)}): "
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
    from distfl.data.dataset import Dataset

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
