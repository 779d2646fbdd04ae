"""Launch N consecutive clean ``torchrun ... -m distfl run`` runs and count how each ended.

Every run is a short, clean federation (3 rounds, 8 clients, FedAvg) under a fresh
torchrun agent; nothing is expected but exit code 0. A run counts as

* ``ok``      torchrun exited 0, the run file exists, and no output names an abort or a
              traceback;
* ``abort``   some process died of SIGABRT: "terminate called ...", "Aborted", torchrun's
              "exitcode: -6" / "Signal 6 (SIGABRT)" for a worker, or torchrun itself ended
              by signal 6 (exit code -6 or 134);
* ``fail``    anything else: another exit code, a traceback, no run file;
* ``timeout`` the run did not end within ``--timeout`` seconds (its process tree is killed).

The output of each run that is not ``ok`` is kept under ``--logs`` (one file per run).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/teardown_loop.py --runs 100
    .venv/bin/python scripts/teardown_loop.py --runs 100 --rdzv c10d     # as multi-node jobs
    .venv/bin/python scripts/teardown_loop.py --runs 10 --json           # one JSON summary

Exit code 0 when every run is ``ok``, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

CONFIG = """\
[run]
rounds = 3
threads = 1
progress = "none"
[data]
num_clients = 8
[server]
clients_per_round = 8
[algorithm]
name = "none"
"""

# Variables by which distfl recognises a launcher: inherited ones would change the world.
LAUNCHER_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_STEP_ID", "SLURM_PROCID",
    "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
)  # fmt: skip

ABORT_PATTERNS = (
    re.compile(r"terminate called"),
    re.compile(r"\bAborted\b"),
    re.compile(r"SIGABRT"),
    re.compile(r"exitcode\s*:\s*-6\b"),
)
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_path() -> str:
    return os.path.join(os.path.dirname(sys.executable), "torchrun")


def launch_cmd(config: str, out: str, *, nproc: int, rdzv: str) -> list[str]:
    cmd = [torchrun_path()]
    if rdzv == "standalone":
        cmd += ["--standalone"]
    else:  # what a multi-node launch uses, here with one node
        cmd += [
            "--nnodes", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", uuid.uuid4().hex[:12],
        ]  # fmt: skip
    return [*cmd, "--nproc-per-node", str(nproc), "-m", "distfl", "run",
            "--config", config, "--out", out]  # fmt: skip


def launch_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def classify(returncode: int | None, output: str, run_file_exists: bool) -> str:
    if returncode is None:
        return "timeout"
    if returncode in (-signal.SIGABRT, 128 + signal.SIGABRT) or any(
        p.search(output) for p in ABORT_PATTERNS
    ):
        return "abort"
    if returncode != 0 or TRACEBACK.search(output) or not run_file_exists:
        return "fail"
    return "ok"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def one_run(
    workdir: str, index: int, *, nproc: int, rdzv: str, env: dict[str, str], timeout: float
) -> dict:
    """One launch in ``workdir``: its outcome, exit code, seconds and combined output."""
    config = os.path.join(workdir, "teardown.toml")
    if not os.path.exists(config):
        with open(config, "w") as f:
            f.write(CONFIG)
    out = os.path.join(workdir, f"run{index}.h5")
    cmd = launch_cmd(config, out, nproc=nproc, rdzv=rdzv)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        errors="replace", start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout)
        returncode: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        output, _ = proc.communicate()
        returncode = None
    seconds = time.monotonic() - t0
    exists = os.path.exists(out)
    if exists:
        os.remove(out)
    return {
        "run": index,
        "outcome": classify(returncode, output, exists),
        "returncode": returncode,
        "seconds": round(seconds, 2),
        "command": " ".join(cmd),
        "output": output,
    }


def loop(
    runs: int,
    *,
    nproc: int = 3,
    rdzv: str = "standalone",
    extra_env: dict[str, str] | None = None,
    timeout: float = 180.0,
    logs: str | None = None,
    report=None,
) -> dict:
    """``runs`` consecutive launches; a summary with the counts and every run that was not
    ``ok`` (with its output). ``report(result)`` is called after each run."""
    env = launch_env(extra_env or {})
    counts = {"ok": 0, "abort": 0, "fail": 0, "timeout": 0}
    bad = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="distfl-teardown-") as workdir:
        for i in range(runs):
            result = one_run(workdir, i, nproc=nproc, rdzv=rdzv, env=env, timeout=timeout)
            counts[result["outcome"]] += 1
            if result["outcome"] != "ok":
                bad.append(result)
                if logs:
                    os.makedirs(logs, exist_ok=True)
                    path = os.path.join(logs, f"run{i:04d}-{result['outcome']}.log")
                    with open(path, "w") as f:
                        f.write(f"$ {result['command']}\nexit code {result['returncode']}\n\n")
                        f.write(result["output"])
            if report is not None:
                report(result)
    return {
        "runs": runs,
        "nproc": nproc,
        "rdzv": rdzv,
        "counts": counts,
        "exit0": sum(1 for r in bad if r["returncode"] == 0) + counts["ok"],
        "seconds": round(time.monotonic() - t0, 1),
        "not_ok": bad,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100, help="launches (100)")
    p.add_argument("--nproc", type=int, default=3, help="ranks per launch (3)")
    p.add_argument(
        "--rdzv",
        choices=("standalone", "c10d"),
        default="standalone",
        help="torchrun --standalone, or --nnodes 1 --rdzv-backend c10d at a fresh port",
    )
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per launch (180)")
    p.add_argument("--logs", metavar="DIR", help="keep the output of every run not ok here")
    p.add_argument(
        "--env", metavar="KEY=VALUE", action="append", default=[], help="set in the launches"
    )
    p.add_argument("--json", action="store_true", help="print one JSON summary at the end")
    args = p.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)

    def report(r: dict) -> None:
        if not args.json:
            print(
                f"run {r['run'] + 1:4d}/{args.runs}: {r['outcome']:7s} "
                f"exit {r['returncode']}  {r['seconds']:.1f} s",
                flush=True,
            )

    summary = loop(
        args.runs, nproc=args.nproc, rdzv=args.rdzv, extra_env=extra,
        timeout=args.timeout, logs=args.logs, report=report,
    )  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        c = summary["counts"]
        print(
            f"{summary['runs']} runs ({summary['rdzv']}, {summary['nproc']} ranks) in "
            f"{summary['seconds']:.0f} s: exit 0 {summary['exit0']}, ok {c['ok']}, "
            f"abort {c['abort']}, fail {c['fail']}, timeout {c['timeout']}"
        )
    return 0 if summary["counts"]["ok"] == summary["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
