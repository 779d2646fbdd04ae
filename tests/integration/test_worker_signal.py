"""A stop signal that reaches one worker rank only (a node's scheduler, a user's kill) stops
the whole run after the round in flight: the worker reports it with its step's timing row,
the server checkpoints and stops every rank, all exit 0, and the file resumes."""

from __future__ import annotations

import signal
import time

import h5py
import pytest
from runfile import fedgwc_toml
from timing import limit

pytestmark = pytest.mark.integration


def test_sigterm_at_one_worker_stops_the_run_everywhere(helpers, tmp_path):
    config = tmp_path / "long.toml"
    config.write_text(fedgwc_toml(100_000, progress="lines"))
    args = ["--config", str(config), "--out", "cut.h5", "--set", "eval.every=1"]
    procs = helpers.start_ranks([*args, "--comm", "torch"], tmp_path, 3)
    try:
        out = helpers.LineReader(procs[0].stdout)
        errs = [helpers.LineReader(p.stderr) for p in procs]
        assert out.wait_for(lambda line: line.startswith("round "), limit(120)), errs[0].text()
        procs[1].send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        for p, err in zip(procs, errs, strict=True):
            assert p.wait(timeout=limit(120)) == 0, err.text()
        assert time.monotonic() - signalled < limit(60)  # a round or two, not the 100,000
        assert any(line.startswith("distfl: stopped by a stop signal at a worker after round")
                   for line in out.text().splitlines()), out.text()  # fmt: skip
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    with h5py.File(tmp_path / "cut.h5", "r") as f:
        assert 1 <= int(f["state"].attrs["round"]) < 100_000
