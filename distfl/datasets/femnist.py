"""FEMNIST from LEAF's JSON files under ``data.root``: one natural owner per writer.

The files are under ``train/`` and ``test/`` (or LEAF's ``data/train`` and ``data/test``);
the writers become the samples' owners. Every problem with a file raises
:class:`~distfl.errors.DataError` with one line naming the path and the layout that was
expected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register
from distfl.errors import DataError

if TYPE_CHECKING:
    from distfl.data.dataset import Dataset


@register
class Femnist(DatasetSpec):
    name = "femnist"
    source = "LEAF JSON"
    files = "`train/*.json` and `test/*.json` (or LEAF's own `data/train`, `data/test`)"
    num_classes = 62
    sample_shape = (1, 28, 28)
    #: float32 pixels, an int64 label, an int64 owner, the test flag
    sample_bytes = 784 * 4 + 8 + 8 + 1
    num_samples = 805_263  # LEAF's full set; a sampled one holds fewer
    needs_root = True
    natural = "optional"

    @classmethod
    def load(cls, config):
        from distfl.data.files import check_root

        check_root(config.data.root, cls.name)
        return load_femnist(config.data.root)


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
    from distfl.data.files import one_line

    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({one_line(exc)}): {_FEMNIST_LAYOUT}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DataError(f"{path} is not valid JSON ({one_line(exc)}): {_FEMNIST_LAYOUT}") from None
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
    from distfl.data.dataset import Dataset

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
