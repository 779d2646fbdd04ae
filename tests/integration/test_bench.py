"""``distfl bench`` on a tiny workload: every row runs, trains exactly R x N x S client-steps,
and its ratio is its rate over the plain loop's. No timing assertions (a shared machine)."""

from __future__ import annotations

import io
import math

import pytest
from timing import limit

pytestmark = pytest.mark.integration

K, N, R, S = 12, 6, 2, 2
ROWS = ("plain", "distfl_w1", "distfl_w1_sequential", "distfl_w3")


@pytest.fixture(scope="module")
def report(tmp_path_factory, helpers):
    cwd = tmp_path_factory.mktemp("bench")
    args = ["--clients", str(K), "--per-round", str(N), "--rounds", str(R), "--steps", str(S),
            "--repeat", "2"]  # fmt: skip
    return helpers.bench_json(cwd, *args, "--skip-flower", timeout=limit(600))


def test_workload_is_the_one_asked_for(report):
    w = report["workload"]
    assert (w["clients"], w["per_round"], w["rounds"], w["steps"]) == (K, N, R, S)
    assert (w["model"], w["batch"], w["algorithm"]) == ("mlp", 16, "fedavg")
    assert w["client_steps"] == R * N * S


def test_rows_ran_with_positive_rates(report):
    rows = {r["key"]: r for r in report["rows"]}
    for key in ROWS:
        row = rows[key]
        assert row["status"] == "ok", (key, row["status"])
        assert row["rounds"] == R
        assert row["wall_s"] > 0
        assert row["client_steps_per_s"] > 0 and row["rounds_per_s"] > 0
        assert row["overhead"] is not None and 0.0 <= row["overhead"] <= 1.0
    assert rows["flower"]["status"] == "skipped (--skip-flower)"
    assert rows["flower"]["client_steps_per_s"] is None


def test_each_row_reports_its_fastest_pass(report):
    for r in report["rows"]:
        if r["key"] == "flower":
            continue
        (note,) = [n for n in r["notes"] if n.startswith("fastest of 2 passes")]
        rates = [float(v) for v in note.split(": ")[1].rstrip(")").split(", ")]
        assert len(rates) == 2 and round(r["client_steps_per_s"]) == round(max(rates)), r["key"]


def test_each_row_trained_exactly_r_n_s_client_steps(report):
    rows = {r["key"]: r for r in report["rows"]}
    assert rows["plain"]["client_steps"] == R * N * S
    for key in ROWS[1:]:
        row = rows[key]
        assert row["client_steps"] == R * N * S, key  # from the run file's /metrics
        assert row["client_steps_workers"] == R * N * S, key  # the workers' own counts
        assert row["rounds_run_file"] == R, key
    assert rows["distfl_w1_sequential"]["trainer"] == "sequential"
    assert rows["distfl_w1"]["world_size"] == 1 and rows["distfl_w3"]["world_size"] == 3
    assert rows["distfl_w3"]["bytes_per_round"] > 0  # rank 0 really moved models
    assert rows["distfl_w1"]["bytes_per_round"] == 0


def test_rates_and_ratios_are_consistent(report):
    rows = [r for r in report["rows"] if r["status"] == "ok"]
    plain = next(r for r in rows if r["key"] == "plain")
    for row in rows:
        assert math.isclose(row["client_steps_per_s"], row["client_steps"] / row["wall_s"])
        assert math.isclose(row["rounds_per_s"], row["rounds"] / row["wall_s"])
        expected = row["client_steps_per_s"] / plain["client_steps_per_s"]
        assert math.isclose(row["ratio_to_plain"], expected, rel_tol=1e-9)
    assert plain["ratio_to_plain"] == 1.0


def test_targets_are_reported(report):
    targets = {t["id"]: t for t in report["targets"]}
    assert set(targets) == {1, 2, 3, 4}
    rows = {r["key"]: r for r in report["rows"]}
    assert math.isclose(targets[1]["value"], rows["distfl_w1"]["ratio_to_plain"])
    assert targets[1]["met"] == (targets[1]["value"] >= 6.0)
    w1, w3 = rows["distfl_w1"]["overhead"], rows["distfl_w3"]["overhead"]
    assert targets[2]["value"] == [w1, w3]
    assert targets[2]["met"] == (w1 <= 0.10 and w3 <= 0.20)
    assert targets[3]["met"] is None and "skipped" in targets[3]["detail"]
    # one int64 per parameter in the exact sums' reduce, at W=1 and W=3 alike
    for key in ("distfl_w1", "distfl_w3", "distfl_w1_sequential"):
        assert rows[key]["sum_bytes_per_param"] == 8.0, key
    assert targets[4]["value"] == 8.0 and targets[4]["met"] is True


def test_table_prints_every_row_and_target(report):
    from distfl.tools.bench.report import print_report

    out = io.StringIO()
    print_report(report, out)
    text = out.getvalue()
    lines = text.splitlines()
    header = next(line for line in lines if "client-steps/s" in line)
    end = header.index("client-steps/s") + len("client-steps/s")
    for label in ("plain PyTorch loop", "distfl W=1 (auto", "distfl W=1 (sequential)", "W=3"):
        line = next(line for line in lines if label in line)
        assert line[end - 1].isdigit() and line[end] == " ", line  # right-aligned under it
    assert "skipped (--skip-flower)" in text
    for i in (1, 2, 3, 4):
        assert f"({i}) " in text
    assert "sum B/param" in header


def test_bad_flags_exit_2_with_one_line(helpers, tmp_path):
    bad = helpers.cli(tmp_path, "bench", "--clients", "4", "--per-round", "5")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "distfl: error: bench --per-round 5: must be at most --clients (4)"
    zero = helpers.cli(tmp_path, "bench", "--repeat", "0")
    assert zero.returncode == 2
    assert zero.stderr.strip() == "distfl: error: bench --repeat 0: must be at least 1"
