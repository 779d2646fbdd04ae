"""``distfl bench --scale --scale-quick``: every tiny row runs a real ``distfl run`` (W=1 and
under torchrun W=3) and reports sane numbers read from its run file. No timing assertions
beyond "positive" (a shared machine)."""

from __future__ import annotations

import io
import math
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

FIELDS = (
    "algorithm",
    "clients",
    "cohort",
    "world_size",
    "placement",
    "startup_s",
    "round_s",
    "rank0_peak_mib",
    "worker_peak_mib",
    "run_file_mib",
    "imbalance",
    "imbalance_max",
    "train_s_per_round",
    "clients_per_worker",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory, helpers):
    cwd = tmp_path_factory.mktemp("bench-scale")
    return helpers.bench_json(cwd, "--scale", "--scale-quick", timeout=180)


def test_header_and_configs(report):
    assert report["quick"] is True
    assert report["command"] == "distfl bench --scale --scale-quick --json"
    assert report["torch_version"] and report["date"]
    keys = [r["key"] for r in report["rows"]]
    assert len(keys) >= 3 and len(set(keys)) == len(keys)
    assert set(report["configs"]) == set(keys)
    for r in report["rows"]:
        cfg = report["configs"][r["key"]]
        assert cfg["data"]["num_clients"] == r["clients"]
        assert cfg["server"]["clients_per_round"] == r["cohort"]
        assert cfg["run"]["rounds"] == r["rounds"] == 3
        assert cfg["eval"]["clients"] == min(1000, r["clients"])
        assert "groups" not in cfg["data"]
        assert cfg["model"] == {"name": r["model"]} and r["key"].count("-") == 4


def test_rows_cover_both_world_sizes_and_algorithms(report):
    rows = report["rows"]
    assert {r["world_size"] for r in rows} == {1, 3}
    assert {r["algorithm"] for r in rows} == {"fedavg", "ifca", "fedgwc"}
    gwc = next(r for r in rows if r["algorithm"] == "fedgwc")
    assert report["configs"][gwc["key"]]["algorithm"] == {
        "name": "fedgwc",
        "epsilon": 1.0,
        "patience": 1,
        "min_observations": 0,
        "stable_tests": 1,
        "reference_draws": 0,
    }
    assert gwc["clusters"] > 1  # ε = 1: the split test ran and split within 3 rounds


def test_rows_have_sane_numbers(report):
    for r in report["rows"]:
        assert r["status"] == "ok", (r["key"], r["status"], r["stderr_tail"])
        for field in FIELDS:
            assert r[field] is not None, (r["key"], field)
        assert r["rounds_run"] == r["rounds"]
        assert 0 < r["startup_s"] < r["process_wall_s"]
        assert 0 < r["round_s"] <= r["round_s_max"]
        assert r["rank0_peak_mib"] > 0 and r["worker_peak_mib"] > 0
        assert r["run_file_mib"] > 0
        assert r["train_s_per_round"] > 0
        if r["world_size"] == 1:  # the one worker is rank 0 itself
            assert r["imbalance"] == r["imbalance_max"] == 1.0
            assert r["worker_peak_mib"] == r["rank0_peak_mib"]
        else:
            assert r["imbalance_max"] >= r["imbalance"] >= 1.0
        workers = max(1, r["world_size"] - 1)
        if r["algorithm"] != "fedgwc":  # FedGWC's clusters each sample their own share
            assert math.isclose(r["clients_per_worker"] * workers, r["cohort"])
        assert r["clients_per_worker"] * workers >= r["cohort"]


def test_table_prints_every_row(report):
    from distfl.tools.bench.scale import print_scale_report

    out = io.StringIO()
    print_scale_report(report, out)
    text = out.getvalue()
    assert report["command"] in text and f"torch {report['torch_version']}" in text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("algorithm"))
    for name in ("start-up s", "s/round", "rank-0 peak MiB", "run file MiB"):
        assert name in header
    rows = [line for line in lines if line.split(" ")[0] in ("fedavg", "ifca", "fedgwc")]
    assert len(rows) == len(report["rows"])


def test_unknown_row_exits_2_with_one_line(tmp_path):
    bad = subprocess.run(
        [sys.executable, "-m", "distfl", "bench", "--scale", "--scale-only", "nope-*"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert bad.returncode == 2
    line = bad.stderr.strip()
    assert "\n" not in line and line.startswith("distfl: error: bench --scale-only nope-*")


def test_the_full_grid_is_the_one_the_readme_reports():
    from distfl.tools.bench.scale import scale_cases

    keys = {c.key for c in scale_cases()}
    for k in (1000, 10000, 100000):
        for algorithm in ("fedavg", "ifca"):
            assert {f"{algorithm}-K{k}-N1000-W{w}-balanced" for w in (1, 3)} <= keys
    for k in (1000, 5000, 10000):
        assert {f"fedgwc-K{k}-N{k // 10}-W{w}-balanced" for w in (1, 3)} <= keys
    for k in (200, 1000):
        assert {f"fedavg-K{k}-N{k // 10}-W3-{p}-cnn" for p in ("balanced", "static")} <= keys
    assert {f"fedavg-K{k}-N100-W1-balanced-gaussian" for k in (2000, 100000)} <= keys
    assert len(keys) == 12 + 6 + 4 + 2
