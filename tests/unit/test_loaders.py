"""The file loaders of the datasets (distfl/datasets/mnist.py, cifar10.py, femnist.py),
on tiny files of each real format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cliproc import assert_one_line_error
from datafiles import (
    built_in_specs,
    cifar_batch,
    dump,
    idx_images,
    leaf_user,
    load_files,
    mnist_arrays,
    write,
    write_cifar,
    write_leaf,
    write_mnist,
)
from timing import limit

from distfl.datasets.cifar10 import load_cifar
from distfl.datasets.femnist import load_femnist
from distfl.datasets.mnist import load_mnist
from distfl.errors import DataError

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------------------------
# MNIST


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("sub", ["", "MNIST/raw", "mnist"])
def test_mnist_round_trip(tmp_path: Path, gz: bool, sub: str) -> None:
    arrays = mnist_arrays()
    xtr, ytr, xte, yte = arrays
    xtr[2, 1, 3] = 201
    xte[1, 3, 0] = 77
    write_mnist(tmp_path / sub if sub else tmp_path, arrays, gz=gz)
    ds = load_mnist(str(tmp_path))
    assert ds.name == "mnist"
    assert ds.num_classes == 10
    assert ds.x.dtype == np.uint8 and ds.x.shape == (8, 1, 4, 4)
    assert ds.y.dtype == np.int64 and ds.y.tolist() == ytr.tolist() + yte.tolist()
    assert ds.x[2, 0, 1, 3] == 201
    assert ds.x[5 + 1, 0, 3, 0] == 77
    np.testing.assert_array_equal(ds.x[:5, 0], xtr)
    np.testing.assert_array_equal(ds.x[5:, 0], xte)
    assert ds.is_test is not None and ds.is_test.dtype == bool
    assert ds.is_test.tolist() == [False] * 5 + [True] * 3
    assert ds.owner is None
    assert load_files("mnist", str(tmp_path)).x.shape == (8, 1, 4, 4)


def test_mnist_wrong_magic(tmp_path: Path) -> None:
    paths = write_mnist(tmp_path, mnist_arrays())
    xtr = mnist_arrays()[0]
    write(paths["train-images"], idx_images(xtr, magic=0x801))
    with pytest.raises(DataError, match="magic 0x801, expected 0x803") as e:
        load_mnist(str(tmp_path))
    assert str(paths["train-images"]) in str(e.value)
    assert "train-images-idx3-ubyte" in str(e.value) and "\n" not in str(e.value)


def test_mnist_truncated(tmp_path: Path) -> None:
    paths = write_mnist(tmp_path, mnist_arrays())
    data = paths["t10k-images"].read_bytes()
    paths["t10k-images"].write_bytes(data[:-5])
    with pytest.raises(DataError, match="truncated") as e:
        load_mnist(str(tmp_path))
    assert str(paths["t10k-images"]) in str(e.value)


def test_mnist_truncated_gz(tmp_path: Path) -> None:
    paths = write_mnist(tmp_path, mnist_arrays(), gz=True)
    data = paths["train-labels"].read_bytes()
    paths["train-labels"].write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    assert str(paths["train-labels"]) in str(e.value)


def test_mnist_short_header(tmp_path: Path) -> None:
    paths = write_mnist(tmp_path, mnist_arrays())
    paths["train-labels"].write_bytes(b"\x00\x00")
    with pytest.raises(DataError) as e:
        load_mnist(str(tmp_path))
    assert str(paths["train-labels"]) in str(e.value)


def test_mnist_count_mismatch(tmp_path: Path) -> None:
    xtr, ytr, xte, yte = mnist_arrays()
    paths = write_mnist(tmp_path, (xtr, ytr[:4], xte, yte))
    with pytest.raises(DataError, match="4 labels but .* 5 images") as e:
        load_mnist(str(tmp_path))
    assert str(paths["train-labels"]) in str(e.value)


def test_mnist_label_out_of_range(tmp_path: Path) -> None:
    xtr, ytr, xte, yte = mnist_arrays()
    yte[0] = 10
    paths = write_mnist(tmp_path, (xtr, ytr, xte, yte))
    with pytest.raises(DataError, match="label 10") as e:
        load_mnist(str(tmp_path))
    assert str(paths["t10k-labels"]) in str(e.value)


def test_mnist_missing_file(tmp_path: Path) -> None:
    paths = write_mnist(tmp_path, mnist_arrays())
    paths["t10k-labels"].unlink()
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte") as e:
        load_mnist(str(tmp_path))
    assert str(tmp_path) in str(e.value)


def test_mnist_no_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="train-images-idx3-ubyte") as e:
        load_mnist(str(tmp_path))
    assert str(tmp_path) in str(e.value)


# --------------------------------------------------------------------------------------------
# CIFAR


@pytest.mark.parametrize("parent", [True, False])
@pytest.mark.parametrize("num_classes", [10, 100])
def test_cifar_round_trip(tmp_path: Path, num_classes: int, parent: bool) -> None:
    sub = "cifar-10-batches-py" if num_classes == 10 else "cifar-100-python"
    data, labels = write_cifar(tmp_path / sub, num_classes)
    test_file = tmp_path / sub / ("test_batch" if num_classes == 10 else "test")
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in test_file.read_bytes()
    n = len(labels)
    n_test = 3
    ds = load_cifar(str(tmp_path if parent else tmp_path / sub), num_classes)
    assert ds.name == f"cifar{num_classes}"
    assert ds.num_classes == num_classes
    assert ds.x.dtype == np.uint8 and ds.x.shape == (n, 3, 32, 32)
    assert ds.y.dtype == np.int64 and ds.y.tolist() == labels.tolist()
    # a row is the red plane (1024 bytes), then green, then blue, each row-major 32x32
    row = 1
    assert ds.x[row, 0, 0, 0] == data[row, 0]
    assert ds.x[row, 0, 2, 5] == data[row, 2 * 32 + 5]
    assert ds.x[row, 1, 0, 0] == data[row, 1024]
    assert ds.x[row, 2, 31, 31] == data[row, 3071]
    np.testing.assert_array_equal(ds.x[:, 0].reshape(n, 1024), data[:, :1024])
    np.testing.assert_array_equal(ds.x.reshape(n, 3072), data)
    assert ds.is_test is not None
    assert ds.is_test.tolist() == [False] * (n - n_test) + [True] * n_test
    assert ds.owner is None
    name = f"cifar{num_classes}"
    assert load_files(name, str(tmp_path)).x.shape == (n, 3, 32, 32)


def test_cifar_python3_pickles(tmp_path: Path) -> None:
    d = tmp_path / "cifar-100-python"
    batch, data, labels = cifar_batch(4, 100, seed=5)
    dump(d / "train", batch, py2=False)
    dump(d / "test", batch, py2=False)
    ds = load_cifar(str(d), 100)
    np.testing.assert_array_equal(ds.x.reshape(8, 3072), np.concatenate([data, data]))
    assert ds.y.tolist() == labels.tolist() * 2


def test_cifar_channel_order(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    write_cifar(d, 10)
    data = np.zeros((2, 3072), dtype=np.uint8)
    data[0, :1024] = 200  # red plane
    data[0, 1024:2048] = 100  # green plane
    data[0, 2048:] = 50  # blue plane
    dump(d / "test_batch", {b"labels": [1, 2], b"data": data})
    ds = load_cifar(str(tmp_path), 10)
    first = ds.x[ds.is_test][0]
    assert (first[0] == 200).all() and (first[1] == 100).all() and (first[2] == 50).all()


def test_cifar_missing_data_key(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    write_cifar(d, 10)
    bad = dump(d / "data_batch_3", {b"labels": [1, 2]})
    with pytest.raises(DataError, match="b'data'") as e:
        load_cifar(str(tmp_path), 10)
    assert str(bad) in str(e.value)


def test_cifar_wrong_shape_and_labels(tmp_path: Path) -> None:
    d = tmp_path / "cifar-100-python"
    write_cifar(d, 100)
    bad = dump(d / "test", {b"fine_labels": [1], b"data": np.zeros((1, 100), np.uint8)})
    with pytest.raises(DataError, match=r"\[n, 3072\]") as e:
        load_cifar(str(tmp_path), 100)
    assert str(bad) in str(e.value)
    dump(d / "test", {b"fine_labels": [1, 2], b"data": np.zeros((1, 3072), np.uint8)})
    with pytest.raises(DataError, match="fine_labels") as e:
        load_cifar(str(tmp_path), 100)
    assert str(bad) in str(e.value)
    dump(d / "test", {b"fine_labels": [100], b"data": np.zeros((1, 3072), np.uint8)})
    with pytest.raises(DataError, match="label 100") as e:
        load_cifar(str(tmp_path), 100)
    assert str(bad) in str(e.value)
    # CIFAR-10's key is not CIFAR-100's
    dump(d / "test", {b"labels": [1], b"data": np.zeros((1, 3072), np.uint8)})
    with pytest.raises(DataError, match="fine_labels"):
        load_cifar(str(tmp_path), 100)


def test_cifar_not_a_dict_or_not_a_pickle(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    write_cifar(d, 10)
    bad = dump(d / "data_batch_1", [1, 2, 3])
    with pytest.raises(DataError, match="not a dict") as e:
        load_cifar(str(tmp_path), 10)
    assert str(bad) in str(e.value)
    bad.write_bytes(b"this is not a pickle")
    with pytest.raises(DataError) as e:
        load_cifar(str(tmp_path), 10)
    assert str(bad) in str(e.value)


class _RunsCode:
    """Unpickling this calls os.system, which must never happen."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cifar_forbidden_global_is_not_run(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    write_cifar(d, 10)
    marker = tmp_path / "pwned"
    bad = dump(d / "data_batch_2", {b"data": _RunsCode(marker), b"labels": []}, py2=False)
    assert b"system" in bad.read_bytes()
    with pytest.raises(DataError, match="system") as e:
        load_cifar(str(tmp_path), 10)
    assert str(bad) in str(e.value)
    assert not marker.exists()


def test_cifar_forbidden_builtin(tmp_path: Path) -> None:
    d = tmp_path / "cifar-100-python"
    write_cifar(d, 100)
    # GLOBAL builtins.eval, then call it: a classic pickle payload
    payload = b"cbuiltins\neval\n(V__import__('os').getpid()\ntR."
    bad = d / "train"
    bad.write_bytes(payload)
    with pytest.raises(DataError, match="builtins.eval") as e:
        load_cifar(str(tmp_path), 100)
    assert str(bad) in str(e.value)


def test_cifar_missing_batch_and_missing_dir(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    write_cifar(d, 10)
    (d / "data_batch_4").unlink()
    with pytest.raises(DataError, match="data_batch_4") as e:
        load_cifar(str(tmp_path), 10)
    assert str(d) in str(e.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="cifar-100-python") as e:
        load_cifar(str(empty), 100)
    assert str(empty) in str(e.value)


# --------------------------------------------------------------------------------------------
# FEMNIST


@pytest.mark.parametrize("leaf_tree", [False, True])
def test_femnist_round_trip(tmp_path: Path, leaf_tree: bool) -> None:
    base = tmp_path / "data" if leaf_tree else tmp_path
    u_b_train, u_a, u_c, u_b_test = (
        leaf_user(3, 0),
        leaf_user(2, 1),
        leaf_user(4, 2),
        leaf_user(1, 3),
    )
    u_a[0][0][28 + 5] = 0.25  # first sample of f_a, image row 1, column 5
    u_a[1][0] = 61
    write_leaf(base / "train" / "part_0.json", {"f_b": u_b_train, "f_a": u_a})
    write_leaf(base / "train" / "part_1.json", {"f_c": u_c})
    write_leaf(base / "test" / "part_0.json", {"f_b": u_b_test})
    ds = load_femnist(str(tmp_path))
    assert ds.name == "femnist" and ds.num_classes == 62
    assert ds.x.dtype == np.float32 and ds.x.shape == (10, 1, 28, 28)
    assert ds.y.dtype == np.int64
    assert ds.owner_names == ("f_a", "f_b", "f_c")
    # samples in file order: f_b (train), f_a, f_c, then f_b (test)
    assert ds.owner is not None and ds.owner.tolist() == [1, 1, 1, 0, 0, 2, 2, 2, 2, 1]
    assert ds.is_test is not None and ds.is_test.tolist() == [False] * 9 + [True]
    assert ds.num_owners == 3
    assert ds.y.tolist() == u_b_train[1] + u_a[1] + u_c[1] + u_b_test[1]
    assert ds.y[3] == 61
    assert ds.x[3, 0, 1, 5] == np.float32(0.25)
    np.testing.assert_array_equal(ds.x[3].reshape(784), np.asarray(u_a[0][0], np.float32))
    np.testing.assert_array_equal(ds.x[9].reshape(784), np.asarray(u_b_test[0][0], np.float32))
    assert load_files("femnist", str(tmp_path)).x.shape == (10, 1, 28, 28)


def test_femnist_train_only(tmp_path: Path) -> None:
    write_leaf(tmp_path / "train" / "all.json", {"w2": leaf_user(2, 0), "w1": leaf_user(1, 1)})
    ds = load_femnist(str(tmp_path))
    assert ds.is_test is not None and not ds.is_test.any()
    assert ds.owner_names == ("w1", "w2")
    assert ds.owner is not None and ds.owner.tolist() == [1, 1, 0]


def test_femnist_missing_user_data(tmp_path: Path) -> None:
    bad = tmp_path / "train" / "a.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"users": ["u"], "num_samples": [1]}))
    with pytest.raises(DataError, match='"user_data"') as e:
        load_femnist(str(tmp_path))
    assert str(bad) in str(e.value) and "\n" not in str(e.value)


def test_femnist_bad_row_length(tmp_path: Path) -> None:
    x, y = leaf_user(3, 0)
    x[2] = x[2][:783]
    write_leaf(tmp_path / "train" / "a.json", {"ok": leaf_user(1, 1)})
    bad = write_leaf(tmp_path / "test" / "b.json", {"u": (x, y)})
    with pytest.raises(DataError, match="row 2 is not a list of 784") as e:
        load_femnist(str(tmp_path))
    assert str(bad) in str(e.value)


def test_femnist_other_malformed(tmp_path: Path) -> None:
    path = tmp_path / "train" / "a.json"
    x, y = leaf_user(2, 0)
    write_leaf(path, {"u": (x, y[:1])})
    with pytest.raises(DataError, match="equal length") as e:
        load_femnist(str(tmp_path))
    assert str(path) in str(e.value)
    write_leaf(path, {"u": (x, y)}, num_samples=[5])
    with pytest.raises(DataError, match="num_samples") as e:
        load_femnist(str(tmp_path))
    assert str(path) in str(e.value)
    write_leaf(path, {"u": (x, [0, 62])})
    with pytest.raises(DataError, match="label 62") as e:
        load_femnist(str(tmp_path))
    assert str(path) in str(e.value)
    x[1][3] = "a"
    write_leaf(path, {"u": (x, y)})
    with pytest.raises(DataError, match="row 1") as e:
        load_femnist(str(tmp_path))
    assert str(path) in str(e.value)
    path.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON") as e:
        load_femnist(str(tmp_path))
    assert str(path) in str(e.value)


def test_femnist_no_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="train") as e:
        load_femnist(str(tmp_path))
    assert str(tmp_path) in str(e.value)
    (tmp_path / "train").mkdir()
    with pytest.raises(DataError, match=r"\*\.json") as e:
        load_femnist(str(tmp_path))
    assert str(tmp_path / "train") in str(e.value)


# --------------------------------------------------------------------------------------------
# dispatch and the CLI


@pytest.mark.parametrize("name", [s.name for s in built_in_specs() if s.needs_root])
def test_missing_root(tmp_path: Path, name: str) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="does not exist") as e:
        load_files(name, str(missing))
    assert str(missing) in str(e.value)


def test_root_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DataError, match="not a directory") as e:
        load_files("mnist", str(f))
    assert str(f) in str(e.value)


def _corrupt_mnist(root: Path) -> Path:
    paths = write_mnist(root, mnist_arrays())
    write(paths["train-images"], idx_images(mnist_arrays()[0], magic=0xDEAD))
    return paths["train-images"]


def _corrupt_cifar10(root: Path) -> Path:
    d = root / "cifar-10-batches-py"
    write_cifar(d, 10)
    dump(d / "data_batch_3", {b"labels": [1, 2]})  # no b"data"
    return d / "data_batch_3"


def _corrupt_cifar100(root: Path) -> Path:
    d = root / "cifar-100-python"
    write_cifar(d, 100)
    (d / "test").write_bytes(b"not a pickle at all")
    return d / "test"


def _corrupt_femnist(root: Path) -> Path:
    write_leaf(root / "train" / "a.json", {"w1": leaf_user(3, 0)})
    bad = root / "train" / "b.json"
    bad.write_text(json.dumps({"users": ["w2"], "num_samples": [1]}))  # no "user_data"
    return bad


@pytest.mark.parametrize(
    "dataset, corrupt",
    [
        ("mnist", _corrupt_mnist),
        ("cifar10", _corrupt_cifar10),
        ("cifar100", _corrupt_cifar100),
        ("femnist", _corrupt_femnist),
    ],
)
def test_cli_malformed_file_exits_2_with_one_line(tmp_path: Path, dataset, corrupt) -> None:
    root = tmp_path / "files"
    bad = corrupt(root)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "distfl",
            "run",
            "--preset",
            "digits",
            "--set",
            f"data.dataset={dataset}",
            "--set",
            f"data.root={root}",
            "--set",
            f"run.out={tmp_path}/r.h5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit(300),
    )
    assert_one_line_error(proc, str(bad))
    assert not (tmp_path / "r.h5").exists()
