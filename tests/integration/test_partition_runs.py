"""Real runs on digits whose groups split by ``classes_per_client`` and by ``shards``: the run
completes, its ``/clients`` records exactly k classes per client and the shards' class counts
of the samples the clients really hold, and the same seed gives the same bits at W=1, under
torchrun W=3, and when resumed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from runfile import assert_same_run

from distfl.config import from_json
from distfl.data import load_dataset, make_partition

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 4
K_CLASSES = 2
SHARDS = 2

CONFIG = f"""
[run]
seed = 2
rounds = {ROUNDS}
progress = "lines"

[data]
dataset = "digits"
num_clients = 40
samples_per_client = 40

[[data.groups]]
count = 20
name = "two-classes"
partition = "classes_per_client"
classes_per_client = {K_CLASSES}
class_choice = "first_deterministic"

[[data.groups]]
count = 20
name = "shards"
partition = "shards"
shards_per_client = {SHARDS}

[train]
local_steps = 2

[server]
clients_per_round = 8

[eval]
every = 2
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("schemes")
    config = tmp / "schemes.toml"
    config.write_text(CONFIG)
    jobs = [
        ("local", "local.sh", ()),
        ("torchrun3", "torchrun.sh", ()),
        ("half", "local.sh", ("--set", "run.rounds=2")),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        paths = pool.map(
            lambda j: helpers.launch_script(j[1], tmp / f"{j[0]}.h5", config, *j[2]), jobs
        )
        out = dict(zip([name for name, _, _ in jobs], paths, strict=True))
    proc = helpers.cli(tmp, "run", "--resume", str(out["half"]), "--comm", "local",
                       "--set", f"run.rounds={ROUNDS}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def clients(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {k: f["clients"][k][()] for k in ("group", "class_counts", "num_train", "num_test")}


def test_the_run_completes_and_records_k_classes_per_client(runs):
    with h5py.File(runs["local"], "r") as f:
        assert f["metrics/round"][()].tolist() == list(range(1, ROUNDS + 1))
        assert np.isfinite(f["metrics/accuracy"][()][1::2]).all()
    c = clients(runs["local"])
    counts = c["class_counts"]
    assert counts.shape == (40, 10) and c["group"].tolist() == [0] * 20 + [1] * 20
    assert (c["num_train"] == 30).all() and (c["num_test"] == 10).all()
    two = counts[:20]
    assert (np.count_nonzero(two, axis=1) == K_CLASSES).all()
    assert (np.sort(two, axis=1)[:, -K_CLASSES:] == 20).all()  # 40 samples, 20 of each
    # first_deterministic: client i's first class is i mod 10
    assert all(two[i, i % 10] == 20 for i in range(20))
    # shards of 20 sorted samples, classes of about 180: 2 shards touch at most 4 classes
    assert (counts[20:].sum(axis=1) == 40).all()
    assert (np.count_nonzero(counts[20:], axis=1) <= 2 * SHARDS).all()


def test_the_recorded_counts_are_those_of_the_samples_the_clients_hold(runs):
    with h5py.File(runs["local"], "r") as f:
        config = from_json(f.attrs["config"])
    dataset = load_dataset(config)
    partition = make_partition(config, dataset)
    recorded = clients(runs["local"])["class_counts"]
    for k in range(40):
        train, test = partition.indices(k)
        held = np.bincount(dataset.y[np.concatenate([train, test])], minlength=10)
        assert (held == recorded[k]).all(), k


@pytest.mark.parametrize("name", ["torchrun3", "half"])
def test_same_bits_under_torchrun_and_when_resumed(runs, name):
    assert_same_run(runs["local"], runs[name])


def test_the_docs_figures_are_what_the_code_draws(tmp_path):
    """docs/datasets.md's two figures are redrawn from the partitions they show and equal the
    docs' copies pixel for pixel; what they draw has k classes and 80 samples per client."""
    from PIL import Image

    from distfl.report.partitions import FIGURES, client_counts, write

    counts = client_counts(FIGURES["partition-classes-per-client.png"][0])
    assert (np.count_nonzero(counts, axis=1) == 2).all() and (counts.sum(axis=1) == 80).all()
    shards = client_counts(FIGURES["partition-shards.png"][0])
    assert (shards.sum(axis=1) == 80).all() and (np.count_nonzero(shards, axis=1) <= 4).all()
    page = (ROOT / "docs" / "datasets.md").read_text(encoding="utf-8")
    for path in write(tmp_path):
        assert f"]({path.name})" in page, path.name
        with Image.open(path) as new, Image.open(ROOT / "docs" / path.name) as shown:
            assert new.size == shown.size, path.name
            a = np.asarray(new.convert("RGB"))
            b = np.asarray(shown.convert("RGB"))
        assert np.array_equal(a, b), f"{path.name}: run python -m distfl.report.partitions docs"


BIG = """
[run]
seed = 1
rounds = 3
progress = "none"

[data]
dataset = "digits"
num_clients = 2714
samples_per_client = 40
quantity_skew = 0.5

[[data.groups]]
count = 1357
partition = "classes_per_client"
classes_per_client = 2
class_choice = "random"

[[data.groups]]
count = 1357
partition = "shards"
shards_per_client = 2

[train]
local_steps = 2

[server]
clients_per_round = 10

[eval]
every = 3
clients = 50
"""


def test_a_population_far_larger_than_the_cohort(helpers, tmp_path):
    """2,714 clients of skewed sizes, 10 a round: the lazy population draws both
    partitions (digits' 1,797 images are reused about 60 times), the run completes, and
    every client of the first group holds exactly 2 classes."""
    config = tmp_path / "big.toml"
    config.write_text(BIG)
    out = helpers.launch_script("local.sh", tmp_path / "big.h5", config)
    c = clients(out)
    sizes = c["num_train"] + c["num_test"]
    assert c["class_counts"].shape == (2714, 10) and len(set(sizes.tolist())) > 10
    assert (c["class_counts"].sum(axis=1) == sizes).all()
    assert (np.count_nonzero(c["class_counts"][:1357], axis=1) == 2).all()
    assert (np.count_nonzero(c["class_counts"][1357:], axis=1) >= 1).all()
    with h5py.File(out, "r") as f:
        assert f["metrics/round"][()].tolist() == [1, 2, 3]
        assert np.isfinite(f["metrics/accuracy"][()][-1])
