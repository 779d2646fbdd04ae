"""``distfl suite --grid`` end to end, with real ``distfl run`` processes: each algorithm runs
at every point of the grid keys it takes (FedGWC at 2 × 2 points, FedAvg at the 2 of
``train.lr``), each run's file holds its point's values, ``grid.csv`` marks the best point
of each algorithm as computed here from ``suite.csv``, and a grid grown by a value keeps the
runs it had and runs the new points alone."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import pytest
from timing import limit

import distfl
from distfl.tools import suite_grid

pytestmark = pytest.mark.integration

TINY_TOML = """\
[data]
num_clients = 6
samples_per_client = 30
groups = [{count = 3, alpha = 1000.0}, {count = 3, alpha = 1000.0, permute_labels = true}]
[train]
local_steps = 2
[server]
clients_per_round = 3
"""
COMMON = ["--set", "run.rounds=2", "--set", "eval.every=1", "--workers", "2", "--out", "out"]
LRS = ("0.05", "0.2")
EPSILONS = ("0.5", "0.7")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def number(text: str) -> float:
    return float(text) if text else math.nan


@pytest.fixture(scope="module")
def grid(tmp_path_factory, helpers):
    root = tmp_path_factory.mktemp("grid")
    (root / "tiny.toml").write_text(TINY_TOML)
    args = ["suite", "tiny.toml", "--algorithms", "fedgwc,none", *COMMON,
            "--grid", f"train.lr={','.join(LRS)}",
            "--grid", f"algorithm.epsilon={','.join(EPSILONS)}"]  # fmt: skip
    proc = helpers.cli(root, *args, timeout=limit(600))
    return root, proc


def test_every_algorithm_runs_at_the_points_of_the_keys_it_takes(grid):
    root, proc = grid
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--grid: points of the keys each algorithm takes: fedgwc 4, none 2" in proc.stdout
    rows = read_csv(root / "out" / "suite.csv")
    assert len(rows) == 6
    for r in rows:
        name, point = suite_grid.split_name(r["algorithm"])
        items = suite_grid.point_items(point)
        run = distfl.open(root / "out" / f"tiny--{name}{suite_grid.suffix(items)}--s0.h5")
        config = run.config
        values = dict(item.split("=") for item in items)
        assert config.train.lr == float(values["train.lr"])
        if name == "fedgwc":
            assert config.algorithm.epsilon == float(values["algorithm.epsilon"])
        else:
            assert name == "fedavg" and "algorithm.epsilon" not in values
        assert run.round == 2


def test_the_grid_table_marks_the_best_mean_accuracy_of_each_algorithm(grid):
    root, proc = grid
    rows = read_csv(root / "out" / "suite.csv")
    lines = read_csv(root / "out" / "grid.csv")
    assert len(lines) == 6 and "the grid's points (the best accuracy" in proc.stdout
    for algorithm in ("fedgwc", "fedavg"):
        mine = [x for x in lines if x["algorithm"] == algorithm]
        means = {}
        for x in mine:
            runs = [r for r in rows if r["algorithm"] == f"{algorithm} [{x['setting']}]"]
            accs = [number(r["accuracy"]) for r in runs]
            means[x["setting"]] = statistics.fmean(accs)
            assert float(x["accuracy"]) == pytest.approx(means[x["setting"]], abs=1e-12)
        leader = max(means, key=means.get)  # (the first of equal ones, as the table's)
        assert [x["setting"] for x in mine if x["best"] == "best"] == [leader]


def test_the_report_names_each_point_as_the_tables_do(grid, helpers):
    """(Before the grid grows: the names come from the suite.json of the first suite.)"""
    root, _ = grid
    proc = helpers.cli(root, "report", "out", "--out", "grid-report", timeout=limit(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (root / "grid-report" / "index.html").read_text()
    for lr in LRS:
        assert f"fedavg [train.lr={lr}]" in page
        for eps in EPSILONS:
            assert f"fedgwc [train.lr={lr}, algorithm.epsilon={eps}]" in page


def test_a_grown_grid_keeps_its_runs_and_runs_the_new_points(grid, helpers):
    root, _ = grid
    out = root / "out"
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    args = ["suite", "tiny.toml", "--algorithms", "none", *COMMON,
            "--grid", f"train.lr=0.1,{','.join(LRS)}"]  # fmt: skip
    proc = helpers.cli(root, *args, timeout=limit(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("kept (finished before)") == 2
    assert proc.stdout.count(": done in") == 1
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    assert len(after) == len(before) + 1
    assert all(after[name] == mtime for name, mtime in before.items())  # not written again
    lines = read_csv(out / "grid.csv")  # the suite's own table: replaced
    assert [x["setting"] for x in lines] == ["train.lr=0.1", "train.lr=0.05", "train.lr=0.2"]
