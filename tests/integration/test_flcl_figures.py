"""Seed 004's comparison in one command: ``distfl suite --table flcl-fig2`` runs FLCL,
FedCS, FedPNS and FedAvg on the FLCL paper's Fig. 2 pool (a few rounds here), tabulates the
final test loss and the rounds to the loss target, and ``distfl report`` draws the paper's
figure (the loss against rounds, simulated time, and in- plus out-of-sample loss) and
shows the comparison on its page."""

from __future__ import annotations

import json

import numpy as np
import pytest

from distfl.runfile.reader import read_run_file

pytestmark = pytest.mark.integration


def test_the_fig2_table_and_figure(helpers, tmp_path):
    proc = helpers.cli(tmp_path, "suite", "--table", "flcl-fig2", "--seeds", "0", "--set",
                       "run.rounds=4", "--out", "out")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert table["columns"][-5:] == ["test_loss", "sim_s", "rounds_to_target",
                                     "bytes_to_target", "sim_s_to_target"]  # fmt: skip
    rows = {r["algorithm"]: r for r in table["rows"]}
    assert set(rows) == {"flcl", "fedcs", "fedpns", "fedavg"}
    runs = {a: read_run_file(tmp_path / "out" / f"flcl-fig2--{a}--s0.h5") for a in rows}
    for algorithm, run in runs.items():
        m = run.tables["metrics"]
        assert rows[algorithm]["test_loss"] == pytest.approx(m["test_loss"][-1])
        assert rows[algorithm]["sim_s"] == pytest.approx(m["sim_elapsed_s"][-1])
        # each evaluation (every 2 rounds) with the coverage: FLCL trains every client
        evaluated = np.isfinite(m["test_loss"])
        assert evaluated.tolist() == [False, True, False, True]
        assert np.isfinite(m["loss_in_sample"][evaluated]).all()
    assert np.isnan(runs["flcl"].tables["metrics"]["loss_out_of_sample"]).all()
    assert np.isfinite(runs["fedavg"].tables["metrics"]["loss_out_of_sample"][1])
    # FedCS schedules its clients into its 1.5 s deadline: none late, fewer than 10 a round
    fedcs = runs["fedcs"].tables["metrics"]
    assert (fedcs["late"] == 0).all() and (fedcs["sim_round_s"] <= 1.5).all()
    assert (fedcs["num_participants"] < 10).all()
    assert "FLCL Fig. 2" in (tmp_path / "out" / "comparison.md").read_text()
    report = helpers.cli(tmp_path, "report", "out", "--out", "rep")
    assert report.returncode == 0, report.stdout + report.stderr
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "suite-loss-0.png" in page and (tmp_path / "rep" / "suite-loss-0.png").stat().st_size
    # the comparison of the suite, on the page: the paper's table, each method's final loss
    title = "FLCL Fig. 2, output heterogeneity (rotations in [0, π], 12 of 40 flipped)"
    assert f"<h2>{title}</h2>" in page
    for algorithm, row in rows.items():
        assert f"<td>{algorithm}" in page and f"<td>{row['test_loss']:.3f} (n = 1)</td>" in page
    assert "the seed-004 paper&#x27;s l_g" in page or "the seed-004 paper's l_g" in page
