"""A rank that dies (or hangs) mid-run makes the others exit with a clear message instead of
hanging forever; under torchrun the server, which lives on, fails the round in flight: it
writes the last completed round, says which rank died, and exits 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from runfile import stored_round
from timing import limit

pytestmark = pytest.mark.integration

FIRST_LINE_TIMEOUT = limit(60)  # start-up plus one round (catches a hang)
EXIT_TIMEOUT = limit(30)  # how long the survivors may take once a peer is gone


def long_run_args(out: str, timeout_s: float | None = None) -> list[str]:
    """A run far too long to finish by itself, printing a progress line every round, with
    the collective timeout ``timeout_s`` (by default ``limit(20)``: none on a busy machine)."""
    timeout_s = round(limit(20)) if timeout_s is None else timeout_s
    return [
        "--set",
        "run.rounds=100000",
        "--set",
        f"comm.timeout_s={timeout_s}",
        "--set",
        'run.progress="lines"',
        "--set",
        "eval.every=1",
        "--set",
        "run.threads=1",
        "--out",
        out,
    ]


def is_progress_line(line: str) -> bool:
    return line.startswith("round ")


def test_torch_rank_killed_others_exit_3(helpers, tmp_path):
    procs: list[subprocess.Popen] = []
    try:
        procs += helpers.start_ranks(
            (), tmp_path, 3, quiet_workers=True,
            args_of=lambda rank: long_run_args(str(tmp_path / f"run-rank{rank}.h5")),
        )  # fmt: skip
        stdout0 = helpers.LineReader(procs[0].stdout)
        stderrs = [helpers.LineReader(p.stderr) for p in procs]

        first = stdout0.wait_for(is_progress_line, FIRST_LINE_TIMEOUT)
        assert first is not None, (
            "rank 0 printed no progress line; exit codes "
            f"{[p.poll() for p in procs]}; stderr of rank 0:\n{stderrs[0].text(0)}"
        )
        assert all(p.poll() is None for p in procs), [p.poll() for p in procs]

        procs[2].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        procs[2].wait(timeout=limit(10))

        for rank in (0, 1):
            try:
                procs[rank].wait(timeout=max(1.0, EXIT_TIMEOUT - (time.monotonic() - killed_at)))
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} still running {EXIT_TIMEOUT:.0f} s after rank 2 died")
        elapsed = time.monotonic() - killed_at

        for rank in (0, 1):
            err = stderrs[rank].text()
            assert procs[rank].returncode == (1 if rank == 0 else 3), f"rank {rank}:\n{err}"
            assert "Traceback" not in err, f"rank {rank}:\n{err}"
            line = err.strip()
            assert "\n" not in line, f"rank {rank} printed more than one line:\n{err}"
            if rank:
                assert line.startswith(f"distfl: error: rank {rank}"), f"rank {rank}: {line!r}"
        assert elapsed < EXIT_TIMEOUT
        printed = [int(s.split()[1].split("/")[0]) for s in stdout0.text().splitlines()
                   if is_progress_line(s)]  # fmt: skip
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    # the server wrote every round it completed and named the rank that died
    line = stderrs[0].text().strip()
    out = tmp_path / "run-rank0.h5"
    assert line.startswith("distfl: error: round "), line
    assert f"rank 2 (pid {procs[2].pid})" in line and "exited" in line, line
    kept = stored_round(out)
    assert kept >= printed[-1], (kept, printed[-1])
    assert f"{out} holds round {kept}: continue with distfl run --resume {out}" in line, line


def test_mpi_rank_killed_job_ends(helpers, tmp_path):
    mpiexec = helpers.venv_tool("mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip(f"no mpiexec next to {sys.executable}")
    pytest.importorskip("mpi4py")
    marker = str(tmp_path / "run.h5")  # unique to this test: finds its ranks in /proc
    cmd = [mpiexec, "-n", "3", *helpers.distfl_cmd(*long_run_args(marker))]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=helpers.clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout = helpers.LineReader(proc.stdout)
        stderr = helpers.LineReader(proc.stderr)
        first = stdout.wait_for(is_progress_line, FIRST_LINE_TIMEOUT)
        assert first is not None, (
            f"no progress line from rank 0; mpiexec exit {proc.poll()}\n"
            f"stdout:\n{stdout.text(0)}\nstderr:\n{stderr.text(0)}"
        )
        ranks = {r: helpers.pids_with(marker, env_item=f"PMI_RANK={r}") for r in range(3)}
        assert all(len(pids) == 1 for pids in ranks.values()), ranks
        # only the distfl ranks match, not the launcher or its proxy
        assert proc.pid not in {pid for pids in ranks.values() for pid in pids}

        os.kill(ranks[2][0], signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mpiexec still running {EXIT_TIMEOUT:.0f} s after rank 2 was killed")
        assert time.monotonic() - killed_at < EXIT_TIMEOUT
        assert proc.returncode != 0, f"stdout:\n{stdout.text()}\nstderr:\n{stderr.text()}"

        # the job is over: no distfl rank is left behind
        deadline = time.monotonic() + limit(10)
        while helpers.pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert helpers.pids_with(marker) == [], "distfl ranks outlived mpiexec"
    finally:
        helpers.kill_tree([proc], marker=marker)


HANG_TIMEOUT = round(limit(4))  # comm.timeout_s of the hang tests (longer on a slower machine)


def start_torch_ranks(helpers, tmp_path, timeout_s):
    args = long_run_args(str(tmp_path / "hang.h5"), timeout_s)
    return helpers.start_ranks(args, tmp_path, 3, quiet_workers=True)


def test_torch_rank_hung_others_time_out(helpers, tmp_path):
    """A peer that stops answering (SIGSTOP, not dead: its sockets stay open) is caught by
    the collective timeout, not by a lost connection."""
    procs = start_torch_ranks(helpers, tmp_path, HANG_TIMEOUT)
    try:
        stdout0 = helpers.LineReader(procs[0].stdout)
        stderrs = [helpers.LineReader(p.stderr) for p in procs]
        assert stdout0.wait_for(is_progress_line, FIRST_LINE_TIMEOUT) is not None, stderrs[0].text(
            0
        )
        procs[2].send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        for rank in (0, 1):
            try:
                procs[rank].wait(timeout=HANG_TIMEOUT + EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} still waiting on a hung peer")
        elapsed = time.monotonic() - stopped_at
        assert procs[2].poll() is None  # the hung rank itself is still there, stopped
        for rank in (0, 1):
            err = stderrs[rank].text().strip()
            assert procs[rank].returncode == (1 if rank == 0 else 3), err
            assert "\n" not in err and "Traceback" not in err, err
            start = "distfl: error: round " if rank == 0 else f"distfl: error: rank {rank}"
            assert err.startswith(start), err
            assert f"{HANG_TIMEOUT} s collective timeout" in err, err
        # not before the timeout: the survivors really waited for the hung peer
        assert elapsed >= HANG_TIMEOUT - 1
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))


def test_mpi_rank_hung_watchdog_aborts(helpers, tmp_path):
    """MPI has no collective timeout: distfl's watchdog aborts the job with exit code 3."""
    mpiexec = helpers.venv_tool("mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip(f"no mpiexec next to {sys.executable}")
    pytest.importorskip("mpi4py")
    marker = str(tmp_path / "hang.h5")
    cmd = [mpiexec, "-n", "3", *helpers.distfl_cmd(*long_run_args(marker, HANG_TIMEOUT))]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=helpers.clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout = helpers.LineReader(proc.stdout)
        stderr = helpers.LineReader(proc.stderr)
        assert stdout.wait_for(is_progress_line, FIRST_LINE_TIMEOUT) is not None, stderr.text(0)
        (pid,) = helpers.pids_with(marker, env_item="PMI_RANK=2")
        os.kill(pid, signal.SIGSTOP)
        try:
            proc.wait(timeout=HANG_TIMEOUT + EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail("mpiexec still running: no watchdog ended the hung job")
        err = stderr.text()
        assert proc.returncode == 3, err
        assert f"{HANG_TIMEOUT} s collective timeout" in err, err
        assert "aborting the MPI job" in err, err
        assert "Traceback" not in err, err
    finally:
        helpers.kill_tree([proc], marker=marker)


def diverging_args(out: str) -> list[str]:
    """A learning rate no training survives: the updates of the first round are Inf/NaN."""
    return ["--set", "train.lr=1e38", "--set", "run.rounds=5", "--set", "comm.timeout_s=3600",
            "--set", 'run.progress="none"', "--set", "run.threads=1", "--out", out]  # fmt: skip


def test_diverged_training_stops_every_rank_with_one_line(helpers, tmp_path):
    """NaN/Inf in one worker's updates reach every rank through the max all-reduce of the
    exact sums' bounds: all ranks stop at once with exit code 4 and one line from rank 0,
    long before the collective timeout (an hour: a rank that waited it out would end the
    test on its limit, and with exit code 3), at W=1 and under torchrun W=3."""
    alone = helpers.cli(tmp_path, "run", *diverging_args(str(tmp_path / "w1.h5")))
    assert alone.returncode == 4, alone.stderr
    assert alone.stderr.strip().splitlines() == [
        "distfl: error: a client update holds NaN or Inf: training diverged (a smaller train.lr?)"
    ]
    procs = helpers.start_ranks(
        (), tmp_path, 3, args_of=lambda rank: diverging_args(str(tmp_path / f"w3-rank{rank}.h5"))
    )
    try:
        outs = [p.communicate(timeout=limit(120)) for p in procs]
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    assert [p.returncode for p in procs] == [4, 4, 4], [o[1][-2000:] for o in outs]
    assert "training diverged" in outs[0][1] and "Traceback" not in outs[0][1]
    for _, err in outs[1:]:  # one line from rank 0 only
        assert "Traceback" not in err and "training diverged" not in err, err
