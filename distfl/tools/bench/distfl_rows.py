"""Rows b, c and d of ``distfl bench``: distfl itself, measured from its run file.

b. distfl alone (W=1, in this process) with the default trainer (``train.trainer = auto``);
c. distfl alone with ``train.trainer = sequential``;
d. distfl under ``torchrun --standalone --nproc-per-node 3`` (server + 2 workers, gloo), a
   plain ``distfl run`` subprocess.

Every number comes from the run file each run writes, as any run writes it:

- the rounds loop's wall time from ``/timing/elapsed_s`` (seconds since the loop started,
  recorded by rank 0 at the end of each round), and the bytes rank 0 moves per round from
  ``/timing/bytes``;
- time in local training from ``/timing/workers``: each worker's ``train_s`` per round (its
  trainer's calls) and ``busy_s`` (all of its step work that round: training, exact sums,
  probes, evaluation); ``clients`` per round gives the client-steps the workers trained, and
  ``/metrics/num_participants`` the client-steps rank 0 counted;
- the local trainer the workers used from the attribute ``trainer`` of ``/timing``.

At W=1 the one worker lives in rank 0's process: time in local training is its ``train_s``
summed over rounds, and overhead = (wall time - that) / wall time. At W=3 the workers train
side by side: the critical path is the slowest worker's ``train_s`` in each round, summed
over rounds, and overhead = (the loop's wall time - critical path) / wall time. Rows b and
c split the loop's time into local training, the worker's other step work (its ``busy_s``
less its ``train_s``) and the rest (the server: sampling, aggregation, the algorithm,
messages); row d gives each worker's seconds of training and of other step work.

Row d runs one untimed round before its R timed ones: each of its processes pays torch's
one-time lazy imports there (this process pays them before rows b and c, untimed), so its
loop is timed from the end of round 1 to the end of round R + 1.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
import time
from pathlib import Path

from distfl.tools.bench.common import SUBPROCESS_TIMEOUT_S, clean_env, rates, row, tail
from distfl.tools.bench.workload import W3, Workload

#: untimed rounds before the timed ones, under torchrun
TORCHRUN_WARM_UP_ROUNDS = 1


def run_file_timing(path: Path, steps: int, warm_up_rounds: int = 0) -> dict:
    """What the bench reads of a run file, over the rounds after the first
    ``warm_up_rounds``: the loop's wall time, the rounds and client-steps rank 0 recorded,
    the client-steps the workers recorded, the mean bytes per round, the trainer, and per
    worker rank its training seconds per round (``{rank: {round: train_s}}``) and busy
    seconds in all."""
    import numpy as np

    from distfl.runfile.run import read

    run = read(path).stored
    rounds = np.asarray(run.timing["round"], dtype=np.int64)
    elapsed = np.asarray(run.timing["elapsed_s"], dtype=np.float64)
    timed = rounds > warm_up_rounds
    start = float(elapsed[~timed][-1]) if (~timed).any() else 0.0
    metric_rounds = np.asarray(run.metrics["round"], dtype=np.int64)
    participants = np.asarray(run.metrics["num_participants"], dtype=np.int64)
    counted = metric_rounds > warm_up_rounds
    train: dict[int, dict[int, float]] = {}
    busy: dict[int, float] = {}
    clients = 0
    w = {k: np.asarray(v) for k, v in run.worker_timing.items()}
    if w:
        keep = w["round"] > warm_up_rounds
        columns = (w[c][keep] for c in ("round", "rank", "clients", "train_s", "busy_s"))
        for t, rank, n, train_s, busy_s in zip(*columns, strict=True):
            train.setdefault(int(rank), {})[int(t)] = float(train_s)
            busy[int(rank)] = busy.get(int(rank), 0.0) + float(busy_s)
            clients += int(n)
    return {
        "rounds": int(timed.sum()),
        "wall_s": float(elapsed[timed][-1]) - start if timed.any() else 0.0,
        "rounds_run_file": int(counted.sum()),
        "client_steps": int(participants[counted].sum()) * steps,
        "client_steps_workers": clients * steps,
        "bytes_per_round": float(np.mean(run.timing["bytes"][timed])) if timed.any() else 0.0,
        "trainer": run.trainer or None,
        "sum_bytes_per_param": run.sum_bytes_per_param or None,
        "train_s": train,
        "busy_s": busy,
    }


def _breakdown(train: dict[int, float], busy: float) -> dict[str, float]:
    spent = sum(train.values())
    return {"local_training": spent, "worker_besides_training": busy - spent}


def distfl_local(w: Workload, tmp: Path, trainer: str) -> dict:
    """distfl at W=1 through :func:`distfl.runtime.run`, in this process."""
    import torch

    from distfl.comm.env import LaunchInfo
    from distfl.runtime import run

    out = tmp / f"w1-{trainer}.h5"
    cfg = w.config(out=str(out), trainer=trainer)
    threads = torch.get_num_threads()
    try:
        # each pass of --repeat writes the same scratch file again
        run(cfg, info=LaunchInfo("single", 0, 1, 0), stream=io.StringIO(), force=True)
    finally:
        torch.set_num_threads(threads)
    got = run_file_timing(out, w.steps)
    (rank,) = got["train_s"]  # the in-process worker, rank 0
    wall = got["wall_s"]
    breakdown = _breakdown(got["train_s"][rank], got["busy_s"][rank])
    breakdown["server"] = wall - sum(breakdown.values())
    key = "distfl_w1" if trainer == "auto" else f"distfl_w1_{trainer}"
    picked = got["trainer"]
    label = f"distfl W=1 ({trainer}" + (f" -> {picked})" if trainer == "auto" else ")")
    r = row(
        key,
        label,
        trainer=picked,
        world_size=1,
        rounds=got["rounds"],
        client_steps=got["client_steps"],
        client_steps_workers=got["client_steps_workers"],
        rounds_run_file=got["rounds_run_file"],
        wall_s=wall,
        train_s=breakdown["local_training"],
        breakdown_s=breakdown,
        overhead_note="rank 0's loop minus the worker's training time",
        bytes_per_round=got["bytes_per_round"],
        bytes_note="one process",
        sum_bytes_per_param=got["sum_bytes_per_param"],
    )
    parts = ", ".join(
        f"{name.replace('_', ' ')} {100 * sec / wall:.1f}%" for name, sec in breakdown.items()
    )
    r["notes"].append(f"the loop's time: {parts}")
    return rates(r)


def _torchrun() -> list[str]:
    script = Path(sys.executable).parent / "torchrun"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "torch.distributed.run"]


def distfl_torchrun(w: Workload, tmp: Path, nproc: int = W3) -> dict:
    """distfl at W=nproc under torchrun: ``torchrun ... -m distfl run`` as a subprocess,
    then its run file read."""
    out = tmp / f"w{nproc}.h5"
    warm_up = TORCHRUN_WARM_UP_ROUNDS
    cmd = _torchrun_command(w, out, nproc, warm_up)
    label = f"distfl W={nproc} (torchrun, gloo)"
    key = f"distfl_w{nproc}"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            cwd=tmp,
        )
    except subprocess.TimeoutExpired:
        return row(key, label, f"failed: timed out after {SUBPROCESS_TIMEOUT_S} s")
    process_wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        return row(
            key, label, f"failed: exit {proc.returncode}: {tail(proc.stderr or proc.stdout)}"
        )
    got = run_file_timing(out, w.steps, warm_up_rounds=warm_up)
    r = row(
        key,
        label,
        trainer=got["trainer"],
        world_size=nproc,
        rounds=got["rounds"],
        client_steps=got["client_steps"],
        client_steps_workers=got["client_steps_workers"],
        rounds_run_file=got["rounds_run_file"],
        warm_up_rounds=warm_up,
        wall_s=got["wall_s"],
        process_wall_s=process_wall,
        bytes_per_round=got["bytes_per_round"],
        bytes_note="rank 0's traffic",
        sum_bytes_per_param=got["sum_bytes_per_param"],
        command=shlex.join(cmd),
    )
    rates(r)
    _add_workers(r, got, nproc)
    round_s = "round" if warm_up == 1 else "rounds"
    r["notes"].append(
        f"process start, rendezvous, data loading and {warm_up} untimed warm-up {round_s} "
        f"(torch's lazy imports on every rank) excluded (torchrun took {process_wall:.1f} s "
        "in all)"
    )
    return r


def _torchrun_command(w: Workload, out: Path, nproc: int, warm_up: int) -> list[str]:
    """``torchrun --standalone --nproc-per-node nproc -m distfl run`` of the workload's
    config, writing ``out`` (replaced if there) after ``warm_up`` untimed rounds."""
    sets = [f"--set={item}" for item in w.overrides(out=str(out), warm_up_rounds=warm_up)]
    return [
        *_torchrun(),
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "distfl",
        "run",
        "--preset",
        "digits",
        *sets,
        "--force",  # each pass of --repeat writes the same scratch file again
    ]


def _add_workers(r: dict, got: dict, nproc: int) -> None:
    """The row's training time and overhead from its workers' records: the critical path
    (the slowest worker's training, round by round) and each worker's breakdown; n/a
    unless every one of the ``nproc - 1`` workers recorded."""
    workers = got["train_s"]
    if len(workers) == nproc - 1:
        rounds = sorted({t for per_round in workers.values() for t in per_round})
        critical = sum(max(per.get(t, 0.0) for per in workers.values()) for t in rounds)
        r["train_s"] = critical
        r["breakdown_s_per_worker"] = [
            _breakdown(workers[rank], got["busy_s"][rank]) for rank in sorted(workers)
        ]
        r["overhead"] = max(0.0, (r["wall_s"] - critical) / r["wall_s"])
        r["overhead_note"] = (
            "rank 0's loop minus the slowest worker's training time, round by round"
        )
        parts = "; ".join(
            ", ".join(f"{name.replace('_', ' ')} {sec:.2f} s" for name, sec in b.items())
            for b in r["breakdown_s_per_worker"]
        )
        r["notes"].append(f"workers: {parts}")
    else:
        r["overhead_note"] = f"n/a: {len(workers)} of {nproc - 1} workers recorded"
