"""``distfl bench``: distfl against a plain PyTorch loop and Flower, on one workload, in one run.

Rows, all on the same workload (digits, K clients, N sampled per round, one model, S local
SGD steps of batch B per client, R rounds of FedAvg), all on the CPU with one torch thread
per process:

a. a plain PyTorch loop: one client after another, a fresh ``torch.optim.SGD`` per client
   and round, S steps on random batches, then the sample-weighted average (the baseline);
b. distfl alone (W=1, in this process) with the default trainer (``train.trainer = auto``);
c. distfl alone with ``train.trainer = sequential``;
d. distfl under ``torchrun --standalone --nproc-per-node 3`` (server + 2 workers, gloo);
e. Flower's simulation (``flwr.simulation.start_simulation``, Ray), when flwr is installed.

Each row reports rounds/s and client-steps/s over its rounds loop (setup, process start and
an untimed warm-up of torch's lazy imports, once per process, excluded), its ratio to the
plain loop, the share of the loop's wall time spent beyond local training ("overhead") and
the bytes rank 0 moves per round.

How "time in local training" is measured, per row:

- plain loop: the time from loading the global model into the client's model to the end of
  its S steps, summed over clients;
- distfl: ``Worker.train_seconds`` (the trainer's calls). At W=1 the worker lives in this
  process. At W=3 each worker's training time is recorded per round by a thin wrapper around
  the worker (``python -m distfl.bench _probe DIR run ...`` runs ``distfl run`` itself with
  that wrapper); the critical path is the slowest worker's training time in each round,
  summed over rounds, and overhead = (rank 0's wall time - critical path) / wall time;
- Flower: the union of the clients' ``fit`` intervals (model in, S steps, model out; clients
  run in parallel Ray actors), and overhead = (rounds-loop wall time - union) / wall time.

``--server-math`` also times FedGWC's ``affinity`` + ``choose_split`` for K = 1,000, 10,000
and 30,000, each K in a fresh process (as ``benchmarks/fedgwc_server_math.py`` does).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import math
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from distfl import __version__
from distfl.errors import ConfigError

RESULT_TAG = "distfl-bench-result: "
NOT_INSTALLED = "not installed (pip install 'distfl[bench]')"
SERVER_MATH_SIZES = (1000, 10000, 30000)
W3 = 3  # world size of row d
TARGET_SPEEDUP = 5.0  # (1) distfl W=1 client-steps/s >= 5x the plain loop (mlp and cnn)
TARGET_OVERHEAD_W1 = 0.10  # (2) overhead <= 10% at W=1 ...
TARGET_OVERHEAD_W3 = 0.25  # ... and <= 25% at W=3
TARGET_FLOWER = 30.0  # (3) distfl rounds/s >= 30x Flower's
SPEEDUP_MODELS = ("mlp", "cnn")
LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)
LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "HYDRA_", "MPI_LOCAL")
SUBPROCESS_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Workload:
    """The one workload every row runs."""

    clients: int = 100
    per_round: int = 100
    model: str = "mlp"
    steps: int = 8
    batch: int = 16
    rounds: int = 10
    seed: int = 0

    def check(self) -> None:
        for flag, value in (
            ("--clients", self.clients),
            ("--per-round", self.per_round),
            ("--steps", self.steps),
            ("--batch", self.batch),
            ("--rounds", self.rounds),
        ):
            if value < 1:
                raise ConfigError(f"bench {flag} {value}: must be at least 1")
        if self.per_round > self.clients:
            raise ConfigError(
                f"bench --per-round {self.per_round}: must be at most --clients ({self.clients})"
            )
        if self.clients < W3 - 1:
            raise ConfigError(
                f"bench --clients {self.clients}: the W={W3} row needs at least {W3 - 1} clients"
            )

    @property
    def client_steps(self) -> int:
        """Client-steps the whole run trains: R x N x S."""
        return self.rounds * self.per_round * self.steps

    def overrides(self, *, out: str, trainer: str = "auto") -> list[str]:
        """``--set`` items on top of the ``digits`` preset (the key defaults)."""
        return [
            f"run.seed={self.seed}",
            f"run.rounds={self.rounds}",
            f"run.out={json.dumps(out)}",
            "run.threads=1",
            'run.device="cpu"',
            'run.progress="none"',
            'data.dataset="digits"',
            f"data.num_clients={self.clients}",
            f"model.name={json.dumps(self.model)}",
            f"train.local_steps={self.steps}",
            f"train.batch_size={self.batch}",
            f"train.trainer={json.dumps(trainer)}",
            f"server.clients_per_round={self.per_round}",
            'algorithm.name="none"',
            # evaluation only after the last round (it always runs there)
            f"eval.every={self.rounds + 1}",
        ]

    def config(self, *, out: str, trainer: str = "auto"):
        from distfl import config

        return config.load(preset="digits", overrides=self.overrides(out=out, trainer=trainer))


# -- helpers ----------------------------------------------------------------------------


def _sgd_steps(model, loss_fn, d, w: Workload, *, lr: float, round_index: int, k: int) -> int:
    """Client k's local training as the plain loop and the Flower client both do it: a fresh
    SGD, ``w.steps`` steps on random batches seeded from (seed, round, k). Returns n_k."""
    import torch

    from distfl.train import client_seed

    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n = d.num_train
    b = min(w.batch, n)
    g = torch.Generator().manual_seed(client_seed(w.seed, round_index, k))
    for _ in range(w.steps):
        idx = torch.randint(n, (b,), generator=g)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(d.x_train[idx]), d.y_train[idx])
        loss.backward()
        opt.step()
    return n


def _log(quiet: bool, message: str) -> None:
    if not quiet:
        print(f"bench: {message}", file=sys.stderr, flush=True)


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables (they would change the world)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)
    }
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _tagged_result(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    return None


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else "no output"


def _row(key: str, label: str, status: str = "ok", **fields: Any) -> dict:
    row = {
        "key": key,
        "label": label,
        "status": status,
        "rounds": None,
        "client_steps": None,
        "wall_s": None,
        "rounds_per_s": None,
        "client_steps_per_s": None,
        "ratio_to_plain": None,
        "train_s": None,
        "overhead": None,
        "overhead_note": "",
        "bytes_per_round": None,
        "bytes_note": "",
        "notes": [],
    }
    row.update(fields)
    return row


def _rates(row: dict) -> dict:
    wall = row["wall_s"]
    row["rounds_per_s"] = row["rounds"] / wall
    row["client_steps_per_s"] = row["client_steps"] / wall
    if row["train_s"] is not None:
        row["overhead"] = max(0.0, (wall - row["train_s"]) / wall)
    return row


def _run_file_steps(path: Path, steps: int) -> tuple[int, int]:
    """(client-steps, rounds) the run file records: sum of participants x S, rounds done."""
    import h5py

    with h5py.File(path, "r") as f:
        participants = f["metrics/num_participants"][()]
        return int(participants.sum()) * steps, int(len(participants))


def warm_up_torch() -> float:
    """One untimed step through torch.func (vmap of grad) and torch.optim.SGD on a tiny
    model: their lazy imports cost seconds once per process (~2 s on 2 cores), which no row
    should count as per-round cost. Returns the seconds it took."""
    import torch
    from torch import nn
    from torch.func import functional_call, grad_and_value, vmap

    t0 = time.perf_counter()
    model = nn.Linear(2, 2)
    params = {k: v.detach().expand(2, *v.shape).clone() for k, v in model.named_parameters()}

    def loss_of(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x,)), y)

    x, y = torch.zeros(2, 3, 2), torch.zeros(2, 3, dtype=torch.long)
    vmap(grad_and_value(loss_of))(params, x, y)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    nn.functional.cross_entropy(model(x[0]), y[0]).backward()
    opt.step()
    return time.perf_counter() - t0


# -- a. the plain PyTorch loop ----------------------------------------------------------


def plain_loop(w: Workload) -> dict:
    """FedAvg written the way one writes it without a framework: the same clients (distfl's
    own partition), one after another, a fresh SGD per client per round, S steps on random
    batches, then the sample-weighted average of the client models."""
    import numpy as np
    import torch
    from torch import nn

    from distfl.data import load_clients, load_dataset, make_partition
    from distfl.models import build_model

    cfg = w.config(out="unused.h5")
    dataset = load_dataset(cfg)
    partition = make_partition(cfg, dataset)
    cpu = torch.device("cpu")
    data = load_clients(dataset, partition, range(w.clients), cpu, groups=cfg.groups, seed=w.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(w.seed)
        model = build_model(
            w.model, dataset.input_shape, dataset.num_classes, hidden=cfg.model.hidden
        )
        loss_fn = nn.CrossEntropyLoss()
        lr = cfg.train.lr
        global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

        def local_train(k: int, round_index: int) -> int:
            model.load_state_dict(global_state)
            return _sgd_steps(model, loss_fn, data[k], w, lr=lr, round_index=round_index, k=k)

        local_train(0, 0)  # warm-up, untimed (the global model is left as it was)
        rng = np.random.default_rng(w.seed)
        train_s = 0.0
        steps = 0
        t_start = time.perf_counter()
        for t in range(1, w.rounds + 1):
            chosen = np.sort(rng.choice(w.clients, size=w.per_round, replace=False))
            total = {k: torch.zeros_like(v) for k, v in global_state.items()}
            weight = 0
            for k in chosen:
                t0 = time.perf_counter()
                n = local_train(int(k), t)
                train_s += time.perf_counter() - t0
                steps += w.steps
                with torch.no_grad():
                    for name, v in model.state_dict().items():
                        total[name].add_(v, alpha=n)
                weight += n
            global_state = {k: v / weight for k, v in total.items()}
        wall = time.perf_counter() - t_start
    finally:
        torch.set_num_threads(threads)
    return _rates(
        _row(
            "plain",
            "plain PyTorch loop",
            rounds=w.rounds,
            client_steps=steps,
            wall_s=wall,
            train_s=train_s,
            overhead_note="client sampling and averaging",
            bytes_per_round=0,
            bytes_note="one process",
        )
    )


# -- b, c. distfl in this process --------------------------------------------------------


@contextlib.contextmanager
def recording_workers():
    """Within the block, every distfl worker the runtime builds is recorded (the yielded list)
    with its training seconds per round (``round_train_s``). Nothing else changes."""
    import distfl.runtime as rt
    from distfl.runtime.protocol import TRAIN

    base = rt.Worker
    created: list = []

    class RecordedWorker(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.round_train_s: dict[int, float] = {}
            #: seconds in execute() beyond training on training steps (exact sums, loss
            #: rows), and in evaluation-only steps
            self.other_s = {"worker_besides_training": 0.0, "evaluation": 0.0}
            created.append(self)

        def execute(self, plan, models):
            t0 = time.perf_counter()
            before = self.train_seconds
            out = super().execute(plan, models)
            elapsed = time.perf_counter() - t0
            spent = self.train_seconds - before
            if spent:
                self.round_train_s[plan.round] = self.round_train_s.get(plan.round, 0.0) + spent
            if plan.any(TRAIN):
                self.other_s["worker_besides_training"] += elapsed - spent
            else:
                self.other_s["evaluation"] += elapsed
            return out

    rt.Worker = RecordedWorker
    try:
        yield created
    finally:
        rt.Worker = base


def _trainer_name(worker) -> str:
    return "vectorised" if getattr(worker, "vectorised", False) else "sequential"


def distfl_local(w: Workload, tmp: Path, trainer: str) -> dict:
    """distfl at W=1 through :func:`distfl.runtime.run`, in this process."""
    import torch

    from distfl.comm.env import LaunchInfo
    from distfl.runtime import run

    out = tmp / f"w1-{trainer}.h5"
    cfg = w.config(out=str(out), trainer=trainer)
    threads = torch.get_num_threads()
    try:
        with recording_workers() as workers:
            summary = run(cfg, info=LaunchInfo("single", 0, 1, 0), stream=io.StringIO())
    finally:
        torch.set_num_threads(threads)
    (worker,) = workers
    steps_file, rounds_file = _run_file_steps(out, w.steps)
    wall = summary["wall_s"]
    breakdown = {
        "local_training": worker.train_seconds,
        **worker.other_s,
        "server": wall - worker.train_seconds - sum(worker.other_s.values()),
    }
    key = "distfl_w1" if trainer == "auto" else f"distfl_w1_{trainer}"
    picked = _trainer_name(worker)
    label = f"distfl W=1 ({trainer}" + (f" -> {picked})" if trainer == "auto" else ")")
    row = _row(
        key,
        label,
        trainer=picked,
        world_size=1,
        rounds=summary["rounds_this_run"],
        client_steps=steps_file,
        client_steps_workers=worker.client_steps,
        rounds_run_file=rounds_file,
        wall_s=wall,
        train_s=worker.train_seconds,
        breakdown_s=breakdown,
        overhead_note="rank 0's loop minus Worker.train_seconds",
        bytes_per_round=summary["bytes_per_round"],
        bytes_note="one process",
    )
    parts = ", ".join(
        f"{name.replace('_', ' ')} {100 * sec / wall:.1f}%" for name, sec in breakdown.items()
    )
    row["notes"].append(f"the loop's time: {parts}")
    return _rates(row)


# -- d. distfl under torchrun -------------------------------------------------------------


def _torchrun() -> list[str]:
    script = Path(sys.executable).parent / "torchrun"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "torch.distributed.run"]


def distfl_torchrun(w: Workload, tmp: Path, nproc: int = W3) -> dict:
    """distfl at W=nproc under torchrun, as a subprocess; every rank writes a small JSON."""
    out = tmp / f"w{nproc}.h5"
    probe = tmp / f"w{nproc}-probe"
    probe.mkdir()
    sets = [f"--set={item}" for item in w.overrides(out=str(out))]
    cmd = [
        *_torchrun(),
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "distfl.bench",
        "_probe",
        str(probe),
        "run",
        "--preset",
        "digits",
        *sets,
    ]
    label = f"distfl W={nproc} (torchrun, gloo)"
    key = f"distfl_w{nproc}"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            cwd=tmp,
        )
    except subprocess.TimeoutExpired:
        return _row(key, label, f"failed: timed out after {SUBPROCESS_TIMEOUT_S} s")
    process_wall = time.perf_counter() - t0
    ranks = {}
    for path in probe.glob("rank*.json"):
        rec = json.loads(path.read_text())
        ranks[rec["rank"]] = rec
    if proc.returncode != 0 or 0 not in ranks:
        return _row(
            key, label, f"failed: exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"
        )
    summary = ranks[0]["summary"]
    workers = [ranks[r] for r in sorted(ranks) if r != 0]
    steps_file, rounds_file = _run_file_steps(out, w.steps)
    row = _row(
        key,
        label,
        trainer=workers[0]["trainer"] if workers else None,
        world_size=nproc,
        rounds=summary["rounds_this_run"],
        client_steps=steps_file,
        client_steps_workers=sum(r["client_steps"] for r in workers),
        rounds_run_file=rounds_file,
        wall_s=summary["wall_s"],
        process_wall_s=process_wall,
        bytes_per_round=summary["bytes_per_round"],
        bytes_note="rank 0's traffic",
        command=shlex.join(cmd),
    )
    _rates(row)
    if len(workers) == nproc - 1:
        rounds = sorted({int(t) for r in workers for t in r["round_train_s"]})
        critical = sum(max(r["round_train_s"].get(str(t), 0.0) for r in workers) for t in rounds)
        row["train_s"] = critical
        row["breakdown_s_per_worker"] = [
            {"local_training": r["train_seconds"], **r["other_s"]} for r in workers
        ]
        row["overhead"] = max(0.0, (row["wall_s"] - critical) / row["wall_s"])
        row["overhead_note"] = (
            "rank 0's loop minus the slowest worker's training time, round by round"
        )
    else:
        row["overhead_note"] = f"n/a: {len(workers)} of {nproc - 1} workers reported"
    if "breakdown_s_per_worker" in row:
        parts = "; ".join(
            ", ".join(f"{name.replace('_', ' ')} {sec:.2f} s" for name, sec in b.items())
            for b in row["breakdown_s_per_worker"]
        )
        row["notes"].append(f"workers: {parts}")
    warm = max(r["warm_up_s"] for r in ranks.values())
    row["notes"].append(
        f"process start, torch warm-up (up to {warm:.1f} s per rank), rendezvous and data "
        f"loading excluded ({process_wall:.1f} s in all)"
    )
    return row


def _probe_main(argv: list[str]) -> int:
    """``python -m distfl.bench _probe DIR run ...`` (under torchrun): ``distfl run ...``
    with every rank writing DIR/rank<r>.json: its training seconds per round, its
    client-steps, and on rank 0 the run's summary."""
    import distfl.runtime as rt
    from distfl.cli import main
    from distfl.comm.env import detect

    probe = Path(argv[0])
    warm_up_s = warm_up_torch()
    summaries: list[dict] = []
    run = rt.run

    def recording_run(*args, **kwargs):
        result = run(*args, **kwargs)
        if result is not None:
            summaries.append(result)
        return result

    rt.run = recording_run
    try:
        with recording_workers() as workers:
            code = main(argv[1:])
    finally:
        rt.run = run
    if code == 0:
        rank = detect().rank
        record = {
            "rank": rank,
            "summary": summaries[0] if summaries else None,
            "train_seconds": sum(wk.train_seconds for wk in workers),
            "client_steps": sum(wk.client_steps for wk in workers),
            "round_train_s": {str(t): s for wk in workers for t, s in wk.round_train_s.items()},
            "other_s": {
                name: sum(wk.other_s[name] for wk in workers)
                for name in ("worker_besides_training", "evaluation")
            },
            "trainer": _trainer_name(workers[0]) if workers else None,
            "warm_up_s": warm_up_s,
        }
        tmp = probe / f"rank{rank}.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(probe / f"rank{rank}.json")
    return code


# -- e. Flower ---------------------------------------------------------------------------


def flower_available() -> str | None:
    """None when Flower's simulation can be imported, else why not."""
    if importlib.util.find_spec("flwr") is None:
        return NOT_INSTALLED
    if importlib.util.find_spec("ray") is None:
        return "flwr without its simulation extra (ray): " + NOT_INSTALLED
    return None


def flower(w: Workload, tmp: Path) -> dict:
    """Flower's simulation on the same workload, in a fresh process (Ray starts there)."""
    why = flower_available()
    if why is not None:
        return _row("flower", "Flower simulation", why)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "distfl.bench", "_flower", json.dumps(asdict(w)), str(tmp)],
            env=_clean_env(FLWR_TELEMETRY_ENABLED="0", RAY_USAGE_STATS_ENABLED="0"),
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            cwd=tmp,
        )
    except subprocess.TimeoutExpired:
        return _row(
            "flower", "Flower simulation", f"failed: timed out after {SUBPROCESS_TIMEOUT_S} s"
        )
    process_wall = time.perf_counter() - t0
    result = _tagged_result(proc.stdout)
    if proc.returncode != 0 or result is None:
        return _row(
            "flower",
            "Flower simulation",
            f"failed (cannot run here?): exit {proc.returncode}: "
            f"{_tail(proc.stderr + proc.stdout)}",
        )
    if result.get("error"):
        return _row("flower", "Flower simulation", f"failed: {result['error']}")
    row = _row(
        "flower",
        f"Flower {result['flwr_version']} (Ray {result['ray_version']})",
        rounds=result["rounds"],
        client_steps=result["client_steps"],
        wall_s=result["wall_s"],
        train_s=result["train_s"],
        process_wall_s=process_wall,
        setup_s=result["setup_s"],
        failures=result["failures"],
        actors=result.get("actors"),
        overhead_note="rounds loop minus the union of the clients' fit intervals",
        bytes_note="not measured: Ray's object store",
    )
    _rates(row)
    row["notes"].append(
        f"start_simulation with FedAvg(fraction_fit={w.per_round}/{w.clients}); "
        f"{result['actors']} Ray actors of 1 CPU, 1 torch thread each; Ray start, actor pool "
        f"and one untimed warm-up round excluded ({result['setup_s']:.1f} s); clients cache "
        "their data per actor"
    )
    if result["failures"]:
        row["status"] = f"ok, {result['failures']} failed fit(s)"
    return row


@functools.lru_cache(maxsize=1)
def _flower_process_state(workload_json: str):
    """Per process (a Ray actor): the dataset, the partition, the model, the loss."""
    import torch
    from torch import nn

    from distfl.data import load_dataset, make_partition
    from distfl.models import build_model

    torch.set_num_threads(1)
    warm_up_torch()
    w = Workload(**json.loads(workload_json))
    cfg = w.config(out="unused.h5")
    dataset = load_dataset(cfg)
    partition = make_partition(cfg, dataset)
    model = build_model(w.model, dataset.input_shape, dataset.num_classes, hidden=cfg.model.hidden)
    return w, cfg, dataset, partition, model, nn.CrossEntropyLoss(), {}


def _flower_client_data(workload_json: str, k: int):
    import torch

    from distfl.data import load_clients

    w, cfg, dataset, partition, _, _, cache = _flower_process_state(workload_json)
    if k not in cache:
        cache[k] = load_clients(
            dataset, partition, range(k, k + 1), torch.device("cpu"),
            groups=cfg.groups, seed=w.seed,
        )[k]  # fmt: skip
    return cache[k]


def _flower_fit(workload_json: str, k: int, parameters: list, round_index: int):
    """One client's local training for Flower: the plain loop's S SGD steps."""
    import numpy as np
    import torch

    t0 = time.monotonic()
    w, cfg, _, _, model, loss_fn, _ = _flower_process_state(workload_json)
    d = _flower_client_data(workload_json, k)
    with torch.no_grad():
        for p, a in zip(model.parameters(), parameters, strict=True):
            p.copy_(torch.from_numpy(np.asarray(a)))
    n = _sgd_steps(model, loss_fn, d, w, lr=cfg.train.lr, round_index=round_index, k=k)
    out = [p.detach().numpy().copy() for p in model.parameters()]
    return out, n, {"t0": t0, "t1": time.monotonic(), "steps": w.steps}


def _flower_client_fn(workload_json: str, context):
    from flwr.client import NumPyClient

    k = int(context.node_config["partition-id"])

    class BenchClient(NumPyClient):
        def fit(self, parameters, config):
            return _flower_fit(workload_json, k, parameters, int(config["round"]))

    return BenchClient().to_client()


def _union_seconds(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of the intervals, clipped to [lo, hi]."""
    total = 0.0
    end = lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total


def flower_measure(w: Workload, ray_dir: str | None = None) -> dict:
    """Run Flower's simulation on the workload in this process; return the measurements.
    Ray keeps its session files under ``ray_dir`` (default: Ray's own, /tmp/ray)."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    import flwr
    import ray
    import torch
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import start_simulation

    from distfl.data import load_dataset
    from distfl.models import build_model

    torch.set_num_threads(1)
    workload_json = json.dumps(asdict(w), sort_keys=True)
    cfg = w.config(out="unused.h5")
    dataset = load_dataset(cfg)
    torch.manual_seed(w.seed)
    init = build_model(w.model, dataset.input_shape, dataset.num_classes, hidden=cfg.model.hidden)
    marks: dict[str, float] = {}
    intervals: list[tuple[float, float]] = []
    counts = {"steps": 0, "failures": 0}

    class TimedFedAvg(FedAvg):
        """FedAvg that times rounds 2..R+1; round 1 warms up (actors, imports, data)."""

        def configure_fit(self, server_round, parameters, client_manager):
            if server_round == 2:
                marks["start"] = time.monotonic()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            if server_round >= 2:
                for _, res in results:
                    intervals.append((float(res.metrics["t0"]), float(res.metrics["t1"])))
                    counts["steps"] += int(res.metrics["steps"])
                counts["failures"] += len(failures)
            out = super().aggregate_fit(server_round, results, failures)
            marks["end"] = time.monotonic()
            return out

    strategy = TimedFedAvg(
        fraction_fit=w.per_round / w.clients,
        min_fit_clients=w.per_round,
        min_available_clients=w.clients,
        fraction_evaluate=0.0,
        min_evaluate_clients=0,
        on_fit_config_fn=_flower_round_config,
        initial_parameters=ndarrays_to_parameters(
            [p.detach().numpy().copy() for p in init.parameters()]
        ),
        fit_metrics_aggregation_fn=_flower_no_metrics,
    )
    t0 = time.monotonic()
    start_simulation(
        client_fn=functools.partial(_flower_client_fn, workload_json),
        num_clients=w.clients,
        config=ServerConfig(num_rounds=w.rounds + 1),
        strategy=strategy,
        client_resources={"num_cpus": 1, "num_gpus": 0.0},
        ray_init_args={
            "ignore_reinit_error": True,
            "include_dashboard": False,
            "num_cpus": os.cpu_count() or 1,
            "num_gpus": 0,
            "log_to_driver": False,
            **({"_temp_dir": ray_dir} if ray_dir else {}),
        },
    )
    actors = int(ray.cluster_resources().get("CPU", 0)) if ray.is_initialized() else None
    ray.shutdown()
    if "start" not in marks or "end" not in marks:
        return {"error": "no round finished"}
    wall = marks["end"] - marks["start"]
    return {
        "flwr_version": flwr.__version__,
        "ray_version": ray.__version__,
        "rounds": w.rounds,
        "client_steps": counts["steps"],
        "failures": counts["failures"],
        "wall_s": wall,
        "setup_s": marks["start"] - t0,
        "train_s": _union_seconds(intervals, marks["start"], marks["end"]),
        "actors": actors,
    }


def _flower_round_config(server_round: int) -> dict:
    return {"round": server_round - 1}  # the timed rounds draw the plain loop's batches


def _flower_no_metrics(_metrics) -> dict:
    return {}


# -- FedGWC's server math ------------------------------------------------------------------


def server_math(K: int) -> dict:
    """Time and peak memory of FedGWC's affinity + choose_split on a synthetic converged P
    with three groups (rows near 0.8, 0.5, 0.2) and noise of std 1/sqrt(2K), as
    ``benchmarks/fedgwc_server_math.py`` measures it. Run it in a fresh process per K."""
    import numpy as np

    from distfl.algorithms.fedgwc import affinity, choose_split

    rng = np.random.default_rng(0)
    level = np.repeat([0.8, 0.5, 0.2], [K // 2, K // 4, K - K // 2 - K // 4])
    P = rng.normal(0.0, 1.0 / np.sqrt(2 * K), size=(K, K))
    P += level[:, None]  # in place: generating P holds one K x K array, not two
    t0 = time.perf_counter()
    W = affinity(P, beta=0.5)
    t1 = time.perf_counter()
    n, labels, scores = choose_split(W, 5, seed=0, min_size=3)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "K": K,
        "affinity_s": t1 - t0,
        "split_s": t2 - t1,
        "total_s": t2 - t0,
        "n_clusters": int(n),
        "best_db": float(np.min(scores)),
        "W_dtype": str(W.dtype),
        "P_gib": P.nbytes / 2**30,
        "peak_rss_gib": peak / 2**20,  # includes P itself (float64, as FedGWC keeps it)
    }


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def server_math_rows(sizes=SERVER_MATH_SIZES, quiet: bool = False) -> list[dict]:
    """:func:`server_math` for each K in a fresh process. Each child's address space is
    capped at 90% of the memory available when it starts, so that a K too large for this
    machine fails with MemoryError instead of waking the OOM killer."""
    rows = []
    for K in sizes:
        available = _mem_available()
        need = 8 * K * K
        if available is not None and need > available:
            rows.append(
                {"K": K, "status": f"skipped: P alone needs {need / 2**30:.1f} GiB, "
                 f"{available / 2**30:.1f} GiB available"}
            )  # fmt: skip
            continue
        cap = int(0.9 * available) if available else 0
        _log(quiet, f"server math, K = {K:,}")
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "distfl.bench", "_server-math", str(K), str(cap)],
                env=_clean_env(),
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            rows.append({"K": K, "status": f"failed: timed out after {SUBPROCESS_TIMEOUT_S} s"})
            continue
        result = _tagged_result(proc.stdout)
        if result is None:
            rows.append({"K": K, "status": f"failed: exit {proc.returncode}: {_tail(proc.stderr)}"})
        elif result.get("error"):
            rows.append({"K": K, "status": f"failed: {result['error']}"})
        else:
            rows.append({"status": "ok", **result})
    return rows


def _server_math_child(K: int, cap: int) -> dict:
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        return server_math(K)
    except MemoryError as exc:
        return {"error": f"out of memory (address space capped at {cap / 2**30:.1f} GiB): {exc}"}


# -- the whole benchmark ----------------------------------------------------------------


def _targets(w: Workload, rows: dict[str, dict]) -> list[dict]:
    def ok(key: str) -> dict | None:
        row = rows.get(key)
        return row if row is not None and row["status"].startswith("ok") else None

    plain, w1, seq, w3, fl = (
        ok("plain"),
        ok("distfl_w1"),
        ok("distfl_w1_sequential"),
        ok(f"distfl_w{W3}"),
        ok("flower"),
    )
    out = []
    # (1) speed-up over the plain loop
    scope = "" if w.model in SPEEDUP_MODELS else f" (set for mlp and cnn; this run: {w.model})"
    t1 = {
        "id": 1,
        "text": f"distfl W=1 >= {TARGET_SPEEDUP:g}x the plain loop's client-steps/s{scope}",
        "threshold": TARGET_SPEEDUP,
        "value": None,
        "met": None,
        "detail": "n/a: a row is missing",
    }
    if plain and w1:
        t1["value"] = w1["ratio_to_plain"]
        t1["met"] = t1["value"] >= TARGET_SPEEDUP
        t1["detail"] = f"{t1['value']:.2f}x with {w.model}"
        if seq:
            t1["detail"] += f" (sequential trainer: {seq['ratio_to_plain']:.2f}x)"
    out.append(t1)
    # (2) overhead
    parts, met = [], []
    for row, limit, name in ((w1, TARGET_OVERHEAD_W1, "W=1"), (w3, TARGET_OVERHEAD_W3, f"W={W3}")):
        if row is None or row["overhead"] is None:
            parts.append(f"{name} n/a")
            met.append(None)
        else:
            parts.append(f"{name} {100 * row['overhead']:.1f}%")
            met.append(row["overhead"] <= limit)
    if seq is not None and seq["overhead"] is not None:
        parts.insert(1, f"(W=1 sequential {100 * seq['overhead']:.1f}%)")
    out.append(
        {
            "id": 2,
            "text": f"overhead <= {100 * TARGET_OVERHEAD_W1:.0f}% at W=1 and "
            f"<= {100 * TARGET_OVERHEAD_W3:.0f}% at W={W3}",
            "threshold": [TARGET_OVERHEAD_W1, TARGET_OVERHEAD_W3],
            "value": [w1["overhead"] if w1 else None, w3["overhead"] if w3 else None],
            "met": None if None in met else all(met),
            "detail": ", ".join(parts),
        }
    )
    # (3) against Flower
    t3 = {
        "id": 3,
        "text": f"distfl W=1 >= {TARGET_FLOWER:g}x Flower's rounds/s",
        "threshold": TARGET_FLOWER,
        "value": None,
        "met": None,
        "detail": "n/a: " + (rows["flower"]["status"] if "flower" in rows else "no Flower row"),
    }
    if w1 and fl:
        t3["value"] = w1["rounds_per_s"] / fl["rounds_per_s"]
        t3["met"] = t3["value"] >= TARGET_FLOWER
        t3["detail"] = f"{t3['value']:.1f}x"
        if w3:
            t3["detail"] += f" (W={W3}: {w3['rounds_per_s'] / fl['rounds_per_s']:.1f}x)"
    out.append(t3)
    return out


def run_bench(
    w: Workload, *, skip_flower: bool = False, with_server_math: bool = False, quiet: bool = False
) -> dict:
    """Every row on the workload ``w``; returns the report (what ``--json`` prints)."""
    import torch

    w.check()
    rows: dict[str, dict] = {}
    _log(quiet, "warming up torch (one-time lazy imports, untimed) ...")
    warm_up_s = warm_up_torch()

    def attempt(key: str, label: str, fn, *args) -> None:
        _log(quiet, f"{label} ...")
        try:
            rows[key] = fn(*args)
        except Exception as exc:  # a failed row is reported, the others still run
            rows[key] = _row(key, label, f"failed: {type(exc).__name__}: {exc}")

    with tempfile.TemporaryDirectory(prefix="distfl-bench-") as tmp_name:
        tmp = Path(tmp_name)
        attempt("plain", "plain PyTorch loop", plain_loop, w)
        attempt("distfl_w1", "distfl W=1 (auto)", distfl_local, w, tmp, "auto")
        attempt(
            "distfl_w1_sequential", "distfl W=1 (sequential)", distfl_local, w, tmp, "sequential"
        )
        attempt(f"distfl_w{W3}", f"distfl W={W3} (torchrun, gloo)", distfl_torchrun, w, tmp)
        if skip_flower:
            rows["flower"] = _row("flower", "Flower simulation", "skipped (--skip-flower)")
        else:
            attempt("flower", "Flower simulation", flower, w, tmp)
    plain = rows["plain"]
    for row in rows.values():
        if plain["status"] == "ok" and row["client_steps_per_s"] is not None:
            row["ratio_to_plain"] = row["client_steps_per_s"] / plain["client_steps_per_s"]
    from distfl.data import load_dataset
    from distfl.models import build_model, num_params

    cfg = w.config(out="unused.h5")
    dataset = load_dataset(cfg)
    model = build_model(w.model, dataset.input_shape, dataset.num_classes, hidden=cfg.model.hidden)
    report = {
        "distfl_version": __version__,
        "torch_version": torch.__version__.split("+")[0],
        "workload": {
            **asdict(w),
            "dataset": "digits",
            "algorithm": "fedavg",
            "num_params": num_params(model),
            "client_steps": w.client_steps,
            "device": "cpu",
            "torch_threads_per_process": 1,
        },
        "warm_up_s": warm_up_s,
        "rows": list(rows.values()),
        "targets": _targets(w, rows),
    }
    if with_server_math:
        report["server_math"] = server_math_rows(quiet=quiet)
    return report


# -- printing ----------------------------------------------------------------------------


def _bytes(n: float | None, note: str) -> str:
    if n is None:
        return f"n/a ({note})" if note else "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            text = f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
            return f"{text} ({note})" if note else text
        value /= 1024
    return ""


def print_report(report: dict, stream: TextIO) -> None:
    w = report["workload"]
    out = stream.write
    out(
        f"distfl bench: digits, {w['clients']} clients, {w['per_round']} per round, "
        f"{w['model']} ({w['num_params']:,} parameters), {w['steps']} local steps of batch "
        f"{w['batch']}, {w['rounds']} rounds, FedAvg; CPU, 1 torch thread per process "
        f"(distfl {report['distfl_version']}, torch {report['torch_version']})\n\n"
    )
    head = ("", "rounds/s", "client-steps/s", "vs plain", "overhead", "bytes/round")
    lines = []
    for letter, row in zip("abcdefgh", report["rows"], strict=False):
        name = f"{letter}. {row['label']}"
        if not row["status"].startswith("ok"):
            lines.append((name, row["status"]))
            continue
        lines.append(
            (
                name,
                f"{row['rounds_per_s']:.2f}",
                f"{row['client_steps_per_s']:.0f}",
                "n/a" if row["ratio_to_plain"] is None else f"{row['ratio_to_plain']:.2f}x",
                "n/a" if row["overhead"] is None else f"{100 * row['overhead']:.1f}%",
                _bytes(row["bytes_per_round"], row["bytes_note"]),
            )
        )
    width = max([len(head[0]), *(len(line[0]) for line in lines)])
    cols = [len(h) for h in head[1:5]]
    for line in lines:
        if len(line) > 2:
            cols = [max(c, len(v)) for c, v in zip(cols, line[1:5], strict=True)]
    fmt = "  ".join(f"{{:>{c}}}" for c in cols)
    out(f"{head[0]:<{width}}  {fmt.format(*head[1:5])}  {head[5]}\n")
    for line in lines:
        if len(line) == 2:
            out(f"{line[0]:<{width}}  {line[1]}\n")
        else:
            out(f"{line[0]:<{width}}  {fmt.format(*line[1:5])}  {line[5]}\n")
    out(
        "\nrates over each row's rounds loop; every process warms torch up first, untimed "
        f"(one-time lazy imports: {report['warm_up_s']:.1f} s here)\n"
        "overhead = share of the rounds loop's wall time not spent in local training:\n"
    )
    for letter, row in zip("abcdefgh", report["rows"], strict=False):
        if row["status"].startswith("ok"):
            extra = "; ".join([row["overhead_note"], *row["notes"]])
            out(f"  {letter}. {extra}\n")
    out("\ntargets\n")
    for t in report["targets"]:
        mark = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
        out(f"  [{mark:^7}] ({t['id']}) {t['text']}: {t['detail']}\n")
    if "server_math" in report:
        out(
            "\nFedGWC server math (affinity + choose_split, a fresh process per K; synthetic "
            "converged P, three groups, noise 1/sqrt(2K))\n"
        )
        out(
            f"{'K':>7}  {'affinity s':>10}  {'split s':>8}  {'total s':>8}  {'clusters':>8}  "
            f"{'best DB':>7}  {'W':>7}  {'P GiB':>6}  {'peak RSS GiB':>12}\n"
        )
        for r in report["server_math"]:
            if r["status"] != "ok":
                out(f"{r['K']:>7,}  {r['status']}\n")
                continue
            out(
                f"{r['K']:>7,}  {r['affinity_s']:>10.2f}  {r['split_s']:>8.2f}  "
                f"{r['total_s']:>8.2f}  {r['n_clusters']:>8}  {r['best_db']:>7.4f}  "
                f"{r['W_dtype']:>7}  {r['P_gib']:>6.2f}  "
                f"{r['peak_rss_gib']:>12.2f}\n"
            )
    stream.flush()


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def bench_main(args, stream: TextIO | None = None) -> int:
    """``distfl bench``: exit 0 when every distfl row and the plain loop ran, else 1."""
    stream = stream or sys.stdout
    w = Workload(
        clients=args.clients,
        per_round=args.per_round,
        model=args.model,
        steps=args.steps,
        batch=args.batch,
        rounds=args.rounds,
    )
    report = run_bench(
        w, skip_flower=args.skip_flower, with_server_math=args.server_math, quiet=False
    )
    if args.json:
        stream.write(json.dumps(_json_safe(report), indent=1) + "\n")
        stream.flush()
    else:
        print_report(report, stream)
    required = [r for r in report["rows"] if r["key"] != "flower"]
    return 0 if all(r["status"].startswith("ok") for r in required) else 1


def _child_main(argv: list[str]) -> int:
    """Entry points of the bench's own subprocesses (``python -m distfl.bench ...``)."""
    if argv and argv[0] == "_probe":
        return _probe_main(argv[1:])
    if argv and argv[0] == "_flower":
        from distfl.bench import flower_measure  # by reference, so Ray's actors import it

        try:
            ray_dir = str(Path(argv[2]) / "ray") if len(argv) > 2 else None
            result = flower_measure(Workload(**json.loads(argv[1])), ray_dir)
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        print(RESULT_TAG + json.dumps(result), flush=True)
        return 0
    if argv and argv[0] == "_server-math":
        result = _server_math_child(int(argv[1]), int(argv[2]))
        print(RESULT_TAG + json.dumps(result), flush=True)
        return 0
    print("usage: distfl bench (this module's entry points are internal)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
