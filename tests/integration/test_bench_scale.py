"""``distfl bench --scale --scale-quick``: every tiny row runs a real ``distfl run`` (W=1 and
under torchrun W=3) and reports sane numbers read from its run file, a FedGWC row on observed
entries its split tests' seconds too. No timing assertions beyond "positive" (a shared
machine)."""

from __future__ import annotations

import io
import math

import pytest
from timing import limit

pytestmark = pytest.mark.integration

#: (K, clients per round) of the full grid's FedGWC rows on observed entries
OBSERVED = ((2714, 10), (20000, 200), (100000, 1000))

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
    return helpers.bench_json(cwd, "--scale", "--scale-quick", timeout=limit(600))


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
        assert cfg["model"] == {"name": r["model"]}
        size = f"K{r['clients']}-N{r['cohort']}-W{r['world_size']}"
        assert r["key"] == f"{r['algorithm']}-{size}-balanced"  # the mlp on digits


def test_rows_cover_both_world_sizes_and_algorithms(report):
    rows = report["rows"]
    assert {r["world_size"] for r in rows} == {1, 3}
    assert {r["algorithm"] for r in rows} == {"fedavg", "ifca", "fedgwc", "fedgwc-observed"}
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


def test_a_clustering_row_times_its_split_tests(report):
    """FedGWC on observed entries with the default references: a split test in every round,
    timed by /timing/update_s (no bound on the seconds: a shared machine)."""
    row = next(r for r in report["rows"] if r["algorithm"] == "fedgwc-observed")
    algorithm = report["configs"][row["key"]]["algorithm"]
    assert algorithm["interaction"] == "observed" and algorithm["stable_tests"] == 1
    assert "reference_draws" not in algorithm  # the default (15): the calibrated test
    assert row["status"] == "ok" and row["admitted"] is True
    assert row["split_test_rounds"] == row["rounds"] and row["split_tests"] >= row["rounds"]
    assert all(n >= 1 for n in row["split_tests_by_round"])  # a test in every round
    assert 0 <= row["referenced_tests"] <= row["split_tests"]
    for field in ("split_test_s", "split_round_s", "split_round_s_max"):
        assert math.isfinite(row[field]) and row[field] > 0, field
    assert row["split_test_s"] <= row["split_round_s"] <= row["split_round_s_max"]
    assert len(row["update_s_by_round"]) == row["rounds"]
    assert row["split_round_s_max"] == max(row["update_s_by_round"][1:])
    assert 0 < row["memory_estimate_mib"] < row["memory_available_mib"]
    for r in report["rows"]:
        if r["algorithm"] in ("fedavg", "ifca"):  # no split test: nothing to time
            assert r["split_tests"] == 0 and r["split_test_s"] is None


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
    for name in ("start-up s", "s/round", "rank-0 peak MiB", "run file MiB", "split test s"):
        assert name in header
    names = ("fedavg", "ifca", "fedgwc", "fedgwc-observed")
    rows = [line for line in lines if line.split(" ")[0] in names]
    assert len(rows) == len(report["rows"])


def test_unknown_row_exits_2_with_one_line(helpers, tmp_path):
    bad = helpers.cli(tmp_path, "bench", "--scale", "--scale-only", "nope-*")
    assert bad.returncode == 2
    line = bad.stderr.strip()
    assert "\n" not in line and line.startswith("distfl: error: bench --scale-only nope-*")


def test_the_full_grid_is_the_one_the_readme_reports():
    from distfl.tools.bench.scale_grid import scale_cases

    keys = {c.key for c in scale_cases()}
    for k in (1000, 10000, 100000):
        for algorithm in ("fedavg", "ifca"):
            assert {f"{algorithm}-K{k}-N1000-W{w}-balanced" for w in (1, 3)} <= keys
    for k in (1000, 5000, 10000):
        assert {f"fedgwc-K{k}-N{k // 10}-W{w}-balanced" for w in (1, 3)} <= keys
    for k in (200, 1000):
        assert {f"fedavg-K{k}-N{k // 10}-W3-{p}-cnn" for p in ("balanced", "static")} <= keys
    assert {f"fedavg-K{k}-N100-W1-balanced-gaussian" for k in (2000, 100000)} <= keys
    # 10,000,000 clients without and with participation
    big = "fedavg-K10000000-N1000-W1-balanced-gaussian"
    assert {big, f"{big}-participation"} <= keys
    observed = {f"fedgwc-observed-K{k}-N{n}-W1-balanced" for k, n in OBSERVED}
    assert observed <= keys
    # one calibrated split test on each side of SMALL_K (2,048)
    assert {f"fedgwc-test-K{k}-N{k // 10}-W1-balanced" for k in (2000, 2100)} <= keys
    # and on observed entries: each side of the dense test's end (128) and of SMALL_K
    assert {f"fedgwc-observed-test-K{k}-N{n}-W1-balanced"
            for k, n in ((128, 128), (129, 129), (2000, 200), (2100, 210))} <= keys  # fmt: skip
    one_shot = {f"{a}-K2714-N10-W1-balanced" for a in ("pacfl", "fedclust")}
    one_shot |= {f"{a}-sample-K20000-N200-W1-balanced" for a in ("pacfl", "fedclust")}
    assert one_shot <= keys
    personal = {f"{a}-K{k}-N{n}-W1-balanced" for a in ("local", "fedavg_ft")
                for k, n in ((2714, 10), (20000, 200))}  # fmt: skip
    assert personal <= keys
    assert {"flexcfl-K2714-N10-W1-balanced", "flexcfl-K20000-N200-W1-balanced"} <= keys
    assert {"cflgp-K2714-N10-W1-balanced", "cflgp-K20000-N200-W1-balanced"} <= keys
    assert len(keys) == 12 + 6 + 4 + 2 + 2 + 3 + 2 + 4 + 4 + 4 + 2 + 2


def test_a_refusal_is_the_rows_status():
    from distfl.tools.bench.scale import REFUSED, refused, scale_row
    from distfl.tools.bench.scale_grid import Case

    line = (  # what `distfl run` writes (distfl.runtime.capacity)
        "distfl: error: data.num_clients = 1000000: algorithm fedgwc keeps K×K matrices (32 "
        "bytes per pair of clients), 29802.8 GiB for 1,000,000 clients, more than the 22.2 GiB "
        "this machine has available; at most about 27,256 clients fit"
    )
    assert refused(2, line + "\n")
    assert not refused(1, line) and not refused(2, "distfl: error: run.rounds = 0: ...")
    row = scale_row(Case("fedgwc-observed", 9, 1, 1), REFUSED, admitted=False)
    assert row["status"] == REFUSED and row["split_test_s"] is None
