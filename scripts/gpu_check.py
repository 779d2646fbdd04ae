"""distfl on one GPU, every check in one go, one summary file.

    scripts/gpu_check.sh OUT_DIR                      # on a machine with one CUDA device
    scripts/gpu_check.sh OUT_DIR --device cpu         # every part on the CPU, at a tiny size
    python scripts/gpu_check.py --out OUT_DIR [--device cuda|cpu] [--size full|tiny]
                                [--only a,b,...] [--budget-s 440]

The parts, in this order, each with its own time limit inside one budget (default 440 s,
so that the whole check ends within 8 minutes); a part that fails, raises or runs
out of time is recorded as such and the next one runs:

env  torch, CUDA, cuDNN, NCCL and the GPU; the modules distfl needs.
a    the default job (``distfl run``: FedGWC on the embedded digits) with
     ``run.device = "cuda"``: wall time, rounds/s, accuracy, the trainer ``auto`` chose.
b    the same job again, and ``distfl compare`` of the two run files: the same bits
     (distfl sets torch's determinism settings on CUDA: distfl/runtime/device.py).
c    two ranks sharing the one GPU under ``torchrun --nproc-per-node 2`` with
     ``--comm gloo`` (NCCL refuses two ranks on one device), compared with a's file:
     the server and one worker, the worker training on the GPU, hold the same bits as
     one process.
d    a round of 1,000 clients: a bare ``torch.func`` (``vmap`` of ``grad``) FedAvg round
     against distfl's vectorised trainer and its batched one (``auto``'s choice) on the
     same clients, each on ``stream`` and on ``counter`` batches (``train.batches``), and
     against whole ``distfl run`` rounds with each; the ratios, and
     whether the vectorised trainer computes what the bare round does from the same
     batches.
e    the GPU's peak memory (``torch.cuda.max_memory_allocated``) of a's run and of a
     heavier one (the CNN, 500 clients a round) against distfl's memory estimate
     (distfl/runtime/capacity.py ``size_terms``), which is checked against the host's
     memory only.
n    NCCL with two ranks on the one GPU (``--comm torch``): whether distfl ends with one
     line (or, should NCCL accept it, with the same bits), not a hang.

Every run is a child process with a time limit (its whole process group is ended when it
passes); the check's own process never uses CUDA. What it writes under OUT_DIR:
``gpu-check.json`` (every part: status, numbers, seconds, errors; the versions) and
``gpu-check.txt`` (one line a part), both rewritten after each part; ``logs/`` (each child's
output); ``runs/`` (the run files of a, b, c and n, to compare elsewhere). Exit code 0 when
every part passed, 1 otherwise.

``--device cpu`` runs every part on the CPU, at a tiny size unless ``--size full`` (the
test suite runs it so); n needs CUDA and is skipped there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import io
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULT_TAG = "gpu-check-result: "
SUMMARY_JSON = "gpu-check.json"
SUMMARY_TEXT = "gpu-check.txt"
#: total seconds of the parts on CUDA: with start-up and the summary, within 8 minutes
DEFAULT_BUDGET_S = 440.0
#: seconds kept for each part still to come when a part's limit is set
RESERVE_S = 20.0
#: a part gets at least this long, or is skipped
MIN_PART_S = 10.0
#: modules a run needs, by their import name, and the distribution that provides each
NEEDED = {
    "numpy": "numpy",
    "scipy": "scipy",
    "sklearn": "scikit-learn",
    "joblib": "joblib",
    "threadpoolctl": "threadpoolctl",
    "h5py": "h5py",
    "torch": "torch",
}
NONDETERMINISTIC = "does not have a deterministic implementation"


def missing_modules() -> list[str]:
    """The distributions of :data:`NEEDED` whose module cannot be imported here (without
    importing any of them)."""
    import importlib.util

    needed = dict(NEEDED)
    if sys.version_info < (3, 11):
        needed["tomli"] = "tomli"
    return [dist for name, dist in needed.items() if importlib.util.find_spec(name) is None]


# -- running the parts ---------------------------------------------------------------------


class PartFailed(Exception):
    """A part's check did not hold: the message says what, ``numbers`` what was measured."""

    def __init__(self, message: str, numbers: dict | None = None):
        super().__init__(message)
        self.numbers = numbers or {}


class PartTimedOut(Exception):
    """A child of the part ran past the part's time limit."""


@dataclass
class Child:
    """A finished child process: its exit code, output, seconds and tagged result."""

    returncode: int
    output: str
    seconds: float
    result: dict | None
    log: str


@dataclass
class Context:
    """What every part sees: the device, the size, where to write, and its own deadline."""

    device: str
    size: str
    out: Path
    work: Path
    deadline: float = 0.0
    #: results parts hand to later ones (a's run file, a's peak memory)
    shared: dict = field(default_factory=dict)

    @property
    def tiny(self) -> bool:
        return self.size == "tiny"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def env(self) -> dict[str, str]:
        """This environment without a launcher's variables, one thread, distfl importable."""
        from distfl.tools.bench.common import clean_env

        env = clean_env()
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
        return env

    def child(self, name: str, cmd: list[str], *, cwd: Path | None = None) -> Child:
        """Run ``cmd`` in its own process group until it ends or the part's deadline
        passes (then the group is ended and PartTimedOut raised); its output goes to
        ``logs/<name>.log``."""
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{name}.log"
        limit = self.remaining()
        if limit <= 1:
            raise PartTimedOut(f"no time left to start {name}")
        t0 = time.monotonic()
        with open(log, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(f"$ {shlex.join(cmd)}\n")
            fh.flush()
            proc = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env(),
                cwd=str(cwd or self.work), start_new_session=True,
            )  # fmt: skip
            try:
                proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _end_group(proc)
                raise PartTimedOut(
                    f"{name} still running after {limit:.0f} s (ended; log {log.name})"
                ) from None
        seconds = time.monotonic() - t0
        output = log.read_text(encoding="utf-8", errors="replace")
        return Child(proc.returncode, output, seconds, tagged(output), str(log))


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the child's process group, SIGKILL 5 s later if it is still there."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tagged(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    return None


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    #: seconds this part may take at most (within what the budget leaves)
    limit_s: float
    run: Callable[[Context], dict]
    #: the devices it runs on
    devices: tuple[str, ...] = ("cuda", "cpu")


def run_parts(
    parts: list[Part], ctx: Context, *, budget_s: float, on_part: Callable[[dict], None]
) -> list[dict]:
    """Every part in order, each within its own limit and what the budget leaves (a
    :data:`RESERVE_S` kept for each part after it); a part's failure, exception or time-out
    is its record, and the next part runs. ``on_part`` gets each record as it is made."""
    end = time.monotonic() + budget_s
    records = []
    for i, part in enumerate(parts):
        record = {"key": part.key, "title": part.title, "status": "", "seconds": 0.0,
                  "numbers": {}, "error": ""}  # fmt: skip
        later = len(parts) - i - 1
        limit = min(part.limit_s, end - time.monotonic() - RESERVE_S * later)
        if ctx.device not in part.devices:
            record["status"] = "skipped"
            record["error"] = f"needs {' or '.join(part.devices)}"
        elif limit < MIN_PART_S:
            record["status"] = "skipped"
            record["error"] = f"no time left in the {budget_s:.0f} s budget"
        else:
            record["limit_s"] = round(limit, 1)
            ctx.deadline = time.monotonic() + limit
            t0 = time.monotonic()
            try:
                record["numbers"] = part.run(ctx)
                record["status"] = "passed"
            except PartFailed as exc:
                record["status"] = "failed"
                record["error"] = str(exc)
                record["numbers"] = exc.numbers
            except PartTimedOut as exc:
                record["status"] = "timed out"
                record["error"] = str(exc)
            except Exception as exc:  # one part's defect must not cost the others' answers
                record["status"] = "failed"
                record["error"] = f"{type(exc).__name__}: {exc}"
                record["traceback"] = traceback.format_exc()[-4000:]
            record["seconds"] = round(time.monotonic() - t0, 2)
        records.append(record)
        on_part(record)
    return records


# -- the children: each runs in its own process and prints one tagged JSON line ------------


def child_main(name: str, args: dict) -> int:
    """``python scripts/gpu_check.py _child NAME JSON``."""
    if name == "env":
        result = env_child(args)
    elif name == "run":
        result = run_child(args)
    elif name == "vmap":
        result = vmap_child(args)
    else:
        raise SystemExit(f"gpu_check: no child {name!r}")
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


def env_child(args: dict) -> dict:
    """Versions, the device, and the modules distfl needs."""
    out: dict = {"python": platform.python_version(), "platform": platform.platform(),
                 "missing": missing_modules(), "cpu_count": os.cpu_count()}  # fmt: skip
    import torch
    import torch.distributed as dist

    out.update(
        torch=torch.__version__,
        cuda_build=torch.version.cuda,
        cuda_available=torch.cuda.is_available(),
        device_count=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        gloo=dist.is_available() and dist.is_gloo_available(),
        nccl=dist.is_available() and dist.is_nccl_available(),
    )
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(
            gpu=torch.cuda.get_device_name(0),
            gpu_memory_bytes=int(p.total_memory),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            multiprocessors=int(p.multi_processor_count),
            cudnn=torch.backends.cudnn.version(),
        )
        with contextlib.suppress(Exception):
            v = torch.cuda.nccl.version()
            out["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    from importlib import metadata

    for name in ("numpy", "scipy", "h5py", "scikit-learn", "mpi4py"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[f"{name}_version"] = metadata.version(name)
    import distfl

    out["distfl"] = distfl.__version__
    return out


def run_child(args: dict) -> dict:
    """``distfl run ARGV`` through distfl's own command line, in this process, so that the
    device's peak memory can be read when it ends."""
    import torch

    from distfl.cli import main
    from distfl.runtime.device import deterministic_settings

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    code = main(["run", *args["argv"]])
    wall = time.perf_counter() - t0
    out = {
        "returncode": code,
        "wall_s": wall,
        "estimate": estimate(args["argv"]),
        "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_before_bytes": before * 1024,
        "settings": deterministic_settings(),
    }
    if torch.cuda.is_available():
        out["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(0))
        out["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(0))
    return out


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median(values: list[float]) -> float:
    import numpy as np

    return float(np.median(values)) if values else float("nan")


def vmap_child(args: dict) -> dict:
    """Part d's measurements, in one process on ``args["device"]``."""
    import numpy as np
    import torch
    from torch import nn
    from torch.func import functional_call, grad_and_value, vmap

    import distfl
    from distfl.comm.env import LaunchInfo
    from distfl.data import load_clients, load_dataset, make_partition
    from distfl.models import build_model, flat_params
    from distfl.runtime import run
    from distfl.runtime.device import deterministic_settings, prepare_device
    from distfl.tools.bench.distfl_rows import run_file_timing
    from distfl.tools.bench.workload import Workload
    from distfl.train import BatchedTrainer, VectorisedTrainer, client_seed, trainer_kind
    from distfl.train.sequential import BatchStream

    torch.set_num_threads(1)
    device = torch.device("cuda:0" if args["device"] == "cuda" else "cpu")
    prepare_device(device)  # as a run on this device sets it
    K, S, B, R = args["clients"], args["steps"], args["batch"], args["rounds"]
    w = Workload(clients=K, per_round=K, steps=S, batch=B, rounds=R)
    tmp = Path(args["work"])

    def config(trainer: str, rounds: int = R):
        from distfl import config as configs

        items = Workload(clients=K, per_round=K, steps=S, batch=B, rounds=rounds).overrides(
            out=str(tmp / f"d-{trainer}.h5"), trainer=trainer
        )
        return configs.load(preset="digits", overrides=[*items, f'run.device="{device.type}"'])

    cfg = config("vectorised")
    dataset = load_dataset(cfg)
    partition = make_partition(cfg, dataset)
    data = load_clients(dataset, partition, range(K), device, groups=cfg.groups, seed=w.seed)
    datas = [data[k] for k in range(K)]
    torch.manual_seed(w.seed)
    model = build_model("mlp", dataset.input_shape, dataset.num_classes, hidden=cfg.model.hidden)
    model = model.to(device)
    names = [n for n, _ in model.named_parameters()]
    lr = cfg.train.lr
    counts = torch.tensor([d.num_train for d in datas], dtype=torch.float64, device=device)
    weights = (counts / counts.sum()).to(torch.float32)

    def loss_of(params, x, y):
        return nn.functional.cross_entropy(functional_call(model, params, (x,)), y)

    step = vmap(grad_and_value(loss_of))
    sizes = sorted({d.num_train for d in datas})
    groups = {n: [i for i, d in enumerate(datas) if d.num_train == n] for n in sizes}
    stacked = {
        n: tuple(torch.stack([getattr(datas[i], f) for i in ix]) for f in ("x_train", "y_train"))
        for n, ix in groups.items()
    }
    generator = torch.Generator(device=device).manual_seed(w.seed)

    def to_params(flat: torch.Tensor) -> dict:
        out, offset = {}, 0
        for name, p in model.named_parameters():
            out[name] = flat[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
        return out

    def bare_round(flat: torch.Tensor) -> torch.Tensor:
        """FedAvg as one writes it with torch.func: every client's parameters stacked, S
        steps of vmap(grad) on random batches, then the weighted mean."""
        start = to_params(flat)
        total = torch.zeros_like(flat)
        for n, ix in groups.items():
            X, Y = stacked[n]
            m, b = len(ix), min(B, n)
            params = {k: v.unsqueeze(0).expand(m, *v.shape).clone() for k, v in start.items()}
            rows = torch.arange(m, device=device)[:, None]
            for _ in range(S):
                idx = torch.randint(n, (m, b), device=device, generator=generator)
                grads, _loss = step(params, X[rows, idx], Y[rows, idx])
                with torch.no_grad():
                    for k in names:
                        params[k].sub_(grads[k], alpha=lr)
            new = torch.cat([params[k].reshape(m, -1) for k in names], dim=1)
            total += (weights[ix][:, None] * new).sum(dim=0)
        return total

    def trainer_round(trainer, flat: torch.Tensor, round_index: int) -> torch.Tensor:
        seeds = [client_seed(w.seed, round_index, k) for k in range(K)]
        new, _losses = trainer.train_many(flat, datas, seeds)
        return (weights[:, None] * new).sum(dim=0)

    def timed(fn, flat) -> tuple[float, list[float]]:
        """Seconds per round: one untimed round, then R timed ones (median, all)."""
        flat = fn(flat, 0)
        _sync(device)
        seconds = []
        for t in range(1, R + 1):
            t0 = time.perf_counter()
            flat = fn(flat, t)
            _sync(device)
            seconds.append(time.perf_counter() - t0)
        return _median(seconds), seconds

    start = flat_params(model).to(device)
    out: dict = {"clients": K, "steps": S, "batch": B, "rounds_timed": R,
                 "num_params": int(start.numel()), "device": str(device),
                 "settings": deterministic_settings(), "errors": {}}  # fmt: skip

    def attempt(key: str, fn: Callable[[], None]) -> None:
        """One measurement; its failure is recorded and the next one still runs."""
        try:
            fn()
        except Exception as exc:
            out["errors"][key] = f"{type(exc).__name__}: {exc} | " + _tail(
                traceback.format_exc(), 6
            )

    def time_bare() -> None:
        out["bare_s"], out["bare_all_s"] = timed(lambda f, _t: bare_round(f), start)

    def time_trainer(kind: str, batches: str = "stream") -> None:
        """A round of the trainer ``kind`` on ``train.batches = batches``."""
        train = dataclasses.replace(cfg.train, batches=batches)
        trainer = (
            VectorisedTrainer(model, train, device) if kind == "vectorised"
            else BatchedTrainer(model, train, device, pad_to=min(B, max(sizes)))
        )  # fmt: skip
        key = kind if batches == "stream" else f"{kind}_{batches}"
        out[f"{key}_trainer_s"], out[f"{key}_trainer_all_s"] = timed(
            lambda f, t: trainer_round(trainer, f, t), start
        )

    def time_bare_defaults() -> None:
        """The bare round under torch's own defaults: what the determinism settings cost."""
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        try:
            out["bare_torch_defaults_s"], _ = timed(lambda f, _t: bare_round(f), start)
        finally:
            prepare_device(device)

    def agreement() -> None:
        """The bare steps from distfl's own batches give the vectorised trainer's models."""
        few = list(range(min(8, K)))
        seeds = [client_seed(w.seed, 1, k) for k in few]
        mine, _ = VectorisedTrainer(model, cfg.train, device).train_many(
            start, [datas[k] for k in few], seeds
        )
        params = {k: v.unsqueeze(0).expand(len(few), *v.shape).clone()
                  for k, v in to_params(start).items()}  # fmt: skip
        streams = [BatchStream(datas[k].num_train, B, torch.Generator().manual_seed(s))
                   for k, s in zip(few, seeds, strict=True)]  # fmt: skip
        for _ in range(S):
            picks = [st.next().to(device) for st in streams]
            x = torch.stack([datas[k].x_train[i] for k, i in zip(few, picks, strict=True)])
            y = torch.stack([datas[k].y_train[i] for k, i in zip(few, picks, strict=True)])
            grads, _loss = step(params, x, y)
            with torch.no_grad():
                for k in names:
                    params[k].sub_(grads[k], alpha=lr)
        bare = torch.cat([params[k].reshape(len(few), -1) for k in names], dim=1)
        out["agreement_max_abs"] = float((bare - mine).abs().max())
        out["agreement_clients"] = len(few)

    def distfl_rounds(trainer: str) -> None:
        """Whole distfl rounds (W = 1, this process): the run file's seconds per round."""
        cfg_t = config(trainer, R + 1)
        run(cfg_t, info=LaunchInfo("single", 0, 1, 0), stream=io.StringIO(), force=True)
        got = run_file_timing(Path(cfg_t.run.out), S)
        per_round = np.diff(distfl.open(cfg_t.run.out).timing["elapsed_s"]).tolist()
        train = [s for per in got["train_s"].values() for s in per.values()]
        out[f"distfl_{trainer}_round_s"] = _median(per_round)
        out[f"distfl_{trainer}_train_s"] = _median(train[1:])
        out[f"distfl_{trainer}_trainer_recorded"] = got["trainer"]

    attempt("bare", time_bare)
    attempt("vectorised_trainer", lambda: time_trainer("vectorised"))
    attempt("batched_trainer", lambda: time_trainer("batched"))
    attempt("vectorised_counter_trainer", lambda: time_trainer("vectorised", "counter"))
    attempt("batched_counter_trainer", lambda: time_trainer("batched", "counter"))
    attempt("bare_torch_defaults", time_bare_defaults)
    attempt("auto_picks", lambda: out.update(auto_picks=trainer_kind("auto", model, device)))
    attempt("agreement", agreement)
    attempt("distfl_vectorised_round", lambda: distfl_rounds("vectorised"))
    attempt("distfl_batched_round", lambda: distfl_rounds("batched"))
    return out


# -- the parts -----------------------------------------------------------------------------


def _python() -> list[str]:
    return [sys.executable, str(Path(__file__).resolve())]


def _child(ctx: Context, label: str, name: str, args: dict) -> Child:
    child = ctx.child(label, [*_python(), "_child", name, json.dumps(args)])
    if child.returncode != 0 or child.result is None:
        raise PartFailed(f"{label}: exit {child.returncode}: {_tail(child.output)}")
    return child


def _tail(text: str, lines: int = 4) -> str:
    """The last ``lines`` lines of ``text`` that say something (a traceback's ^^^ marks do
    not), joined by " | "."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip(" ^~\t")]
    return " | ".join(kept[-lines:]) if kept else "no output"


def _nondeterministic(text: str) -> list[str]:
    return sorted({line.strip()[:300] for line in text.splitlines() if NONDETERMINISTIC in line})


#: what the default job runs with when it fails with its own trainer (see part a)
FALLBACK = ["--set", 'train.trainer="sequential"']


def default_job_args(ctx: Context, out: Path) -> list[str]:
    """``distfl run`` arguments of the default job on the check's device (a tiny one: 3
    rounds), with the reference trainer where part a fell back to it."""
    args = ["--set", f'run.device="{ctx.device}"', "--out", str(out), "--force"]
    if ctx.tiny:
        args += ["--set", "run.rounds=3"]
    return args + ctx.shared.get("job_extra", [])


def _runs(ctx: Context) -> Path:
    path = ctx.out / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def part_env(ctx: Context) -> dict:
    child = _child(ctx, "env", "env", {})
    got = dict(child.result)
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(Exception):
            got["nvidia_smi"] = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total,memory.used",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
            ).stdout.strip()  # fmt: skip
    ctx.shared["env"] = got
    problems = []
    if got["missing"]:
        problems.append(f"missing modules: {', '.join(got['missing'])}")
    if ctx.device == "cuda":
        if not got["cuda_available"]:
            problems.append(f"torch {got['torch']} sees no CUDA device")
        if not got["nccl"]:
            problems.append("torch.distributed has no NCCL")
    if not got["gloo"]:
        problems.append("torch.distributed has no gloo")
    if problems:
        raise PartFailed("; ".join(problems), got)
    return got


def _run_default(ctx: Context, label: str, out: Path) -> tuple[Child, dict]:
    """The default job in a child; its numbers from the child and the run file."""
    import distfl

    child = _child(ctx, label, "run", {"argv": default_job_args(ctx, out)})
    if child.result["returncode"] != 0:
        raise PartFailed(f"{label}: distfl run exited {child.result['returncode']}: "
                         f"{_tail(child.output)}")  # fmt: skip
    run = distfl.open(out)
    wall = run.wall_s or float("nan")
    numbers = {
        "run_file": str(out),
        "rounds": run.round,
        "loop_s": wall,
        "rounds_per_s": run.round / wall if wall else None,
        "process_wall_s": child.result["wall_s"],
        "child_s": child.seconds,
        "accuracy": run.accuracy,
        "clusters": run.num_clusters,
        "trainer": run.stored.trainer,
        "settings": child.result["settings"],
        "peak_allocated_bytes": child.result.get("peak_allocated_bytes"),
        "peak_reserved_bytes": child.result.get("peak_reserved_bytes"),
        "rss_peak_bytes": child.result["rss_peak_bytes"],
        "estimate": child.result["estimate"],
        "nondeterministic_ops": _nondeterministic(child.output),
    }
    return child, numbers


def part_default_job(ctx: Context) -> dict:
    """The default job; should it fail, the same job with the reference trainer, so that
    the parts after it (which compare with a's file) still give their answers."""
    out = _runs(ctx) / "a.h5"
    try:
        _, numbers = _run_default(ctx, "a-default-job", out)
    except PartFailed as exc:
        ctx.shared["job_extra"] = FALLBACK
        try:
            _, numbers = _run_default(ctx, "a-default-job-sequential", out)
        except PartFailed as again:
            del ctx.shared["job_extra"]
            raise PartFailed(f"{exc}; with train.trainer = sequential too: {again}") from None
        ctx.shared["a"] = numbers
        raise PartFailed(
            f"{exc}; with train.trainer = sequential it ran, and b, c, e and n run so", numbers
        ) from None
    ctx.shared["a"] = numbers
    if ctx.device == "cuda":
        settings = numbers["settings"]
        if not (settings["deterministic_algorithms"] and settings["cudnn_deterministic"]):
            raise PartFailed("the run did not set torch's determinism settings", numbers)
        if not numbers["peak_allocated_bytes"]:
            raise PartFailed("the run allocated nothing on the GPU", numbers)
    return numbers


def compare(a: Path, b: Path) -> tuple[int, str]:
    """``distfl compare A B``: its exit code and output."""
    from distfl.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["compare", str(a), str(b)])
    return code, buf.getvalue()


def _need_a(ctx: Context) -> dict:
    a = ctx.shared.get("a")
    if not a or not Path(a["run_file"]).is_file():
        raise PartFailed("part a wrote no run file to compare with")
    return a


def part_same_bits(ctx: Context) -> dict:
    a = _need_a(ctx)
    out = _runs(ctx) / "b.h5"
    _, numbers = _run_default(ctx, "b-same-job-again", out)
    code, text = compare(Path(a["run_file"]), out)
    numbers.update(compare_exit=code, compare=text.strip().splitlines())
    if code != 0:
        raise PartFailed(f"the same job twice on {ctx.device} differs: "
                         f"{_tail(text, 2)}", numbers)  # fmt: skip
    return numbers


def _torchrun_default(ctx: Context, label: str, out: Path, comm: str, extra=()) -> Child:
    from distfl.tools.bench.distfl_rows import _torchrun

    cmd = [*_torchrun(), "--standalone", "--nproc-per-node", "2", "-m", "distfl", "run",
           "--comm", comm, *default_job_args(ctx, out), *extra]  # fmt: skip
    return ctx.child(label, cmd)


def part_two_ranks(ctx: Context) -> dict:
    import distfl

    a = _need_a(ctx)
    out = _runs(ctx) / "c.h5"
    child = _torchrun_default(ctx, "c-two-ranks-gloo", out, "gloo")
    numbers = {"exit": child.returncode, "child_s": child.seconds,
               "nondeterministic_ops": _nondeterministic(child.output)}  # fmt: skip
    if child.returncode != 0 or not out.is_file():
        raise PartFailed(f"torchrun exited {child.returncode}: {_tail(child.output)}", numbers)
    run = distfl.open(out)
    world = run.world or {}
    wall = run.wall_s or float("nan")
    numbers.update(run_file=str(out), world_size=run.world_size, backend=world.get("backend"),
                   loop_s=wall, rounds_per_s=run.round / wall if wall else None,
                   accuracy=run.accuracy)  # fmt: skip
    code, text = compare(Path(a["run_file"]), out)
    numbers.update(compare_exit=code, compare=text.strip().splitlines())
    if world.get("backend") != "gloo":
        raise PartFailed(f"the run's backend is {world.get('backend')!r}, not gloo", numbers)
    if code != 0:
        raise PartFailed(f"two ranks differ from one process: {_tail(text, 2)}", numbers)
    return numbers


def part_vmap(ctx: Context) -> dict:
    args = {"device": ctx.device, "work": str(ctx.work),
            **({"clients": 16, "steps": 2, "batch": 8, "rounds": 1} if ctx.tiny
               else {"clients": 1000, "steps": 8, "batch": 16, "rounds": 5})}  # fmt: skip
    got = dict(_child(ctx, "d-vmap-round", "vmap", args).result)
    bare = got.get("bare_s")
    for key in (
        "vectorised_trainer",
        "batched_trainer",
        "vectorised_counter_trainer",
        "batched_counter_trainer",
        "distfl_vectorised_round",
        "distfl_batched_round",
        "bare_torch_defaults",
    ):
        mine = got.get(f"{key}_s")
        got[f"{key}_vs_bare"] = mine / bare if bare and mine is not None else None
    got["client_steps_per_s_bare"] = got["clients"] * got["steps"] / bare if bare else None
    rounds = {t: got.get(f"distfl_{t}_round_s") for t in ("vectorised", "batched")}
    if None not in rounds.values():
        got["faster_in_distfl"] = min(rounds, key=rounds.__getitem__)
    if got["errors"]:
        raise PartFailed(
            "; ".join(f"{k}: {v[:300]}" for k, v in got["errors"].items()), got
        )  # fmt: skip
    if got["agreement_max_abs"] > 1e-4:
        raise PartFailed(
            f"the vectorised trainer and the bare vmap steps from the same batches differ by "
            f"{got['agreement_max_abs']:.3g}", got,
        )  # fmt: skip
    return got


#: the heavier run of part e: the paper's CNN, 500 clients a round
HEAVY = ["--preset", "digits", "--set", "data.num_clients=500",
         "--set", "server.clients_per_round=500", "--set", 'model.name="cnn"',
         "--set", "train.local_steps=2", "--set", "run.rounds=2",
         "--set", 'algorithm.name="none"', "--set", "eval.every=3",
         "--set", "eval.clients=50"]  # fmt: skip


def estimate(argv: list[str]) -> dict:
    """distfl's memory estimate (capacity.size_terms) of the config ``distfl run argv``
    runs, term by term (the run child computes it: it imports torch, which the check's
    own process need not)."""
    from distfl.cli import _config_from_args, _parser
    from distfl.runtime.capacity import size_terms

    config = _config_from_args(_parser().parse_args(["run", *argv]))
    terms = size_terms(config)
    return {"total_bytes": sum(b for b, _ in terms.values()),
            "terms_bytes": {name: b for name, (b, _) in terms.items()}}  # fmt: skip


def part_memory(ctx: Context) -> dict:
    rows = []
    a = ctx.shared.get("a")
    if a:
        rows.append({"job": "default", "peak_allocated_bytes": a["peak_allocated_bytes"],
                     "peak_reserved_bytes": a["peak_reserved_bytes"],
                     "rss_peak_bytes": a["rss_peak_bytes"], **a["estimate"]})  # fmt: skip
    if not ctx.tiny:  # at the tiny size a's row is the whole check: one more run adds nothing
        out = ctx.work / "e-heavy.h5"
        heavy = [*HEAVY, "--set", f'run.device="{ctx.device}"', "--out", str(out), "--force"]
        child = _child(ctx, "e-memory-heavy", "run", {"argv": heavy})
        if child.result["returncode"] != 0:
            raise PartFailed(f"distfl run exited {child.result['returncode']}: "
                             f"{_tail(child.output)}", {"rows": rows})  # fmt: skip
        rows.append({"job": "cnn-500", "argv": heavy,
                     "peak_allocated_bytes": child.result.get("peak_allocated_bytes"),
                     "peak_reserved_bytes": child.result.get("peak_reserved_bytes"),
                     "rss_peak_bytes": child.result["rss_peak_bytes"],
                     "process_wall_s": child.result["wall_s"],
                     **child.result["estimate"]})  # fmt: skip
    if not rows:
        raise PartFailed("nothing measured: part a did not run")
    for row in rows:
        peak = row["peak_allocated_bytes"]
        row["peak_over_estimate"] = peak / row["total_bytes"] if peak else None
    numbers = {
        "rows": rows,
        "device_memory_checked": False,
        "note": "distfl's memory checks (runtime/capacity.py) compare the estimate with the "
        "host's available memory only; the device's memory is not checked",
    }
    if ctx.device == "cuda":
        over = [r["job"] for r in rows if not r["peak_allocated_bytes"]
                or r["peak_allocated_bytes"] > r["total_bytes"]]  # fmt: skip
        if over:
            raise PartFailed(f"device peak above the estimate (or not measured): "
                             f"{', '.join(over)}", numbers)  # fmt: skip
    return numbers


def part_nccl(ctx: Context) -> dict:
    import distfl

    a = _need_a(ctx)
    out = _runs(ctx) / "n.h5"
    child = _torchrun_default(ctx, "n-two-ranks-nccl", out, "torch",
                              ("--set", "comm.timeout_s=20"))  # fmt: skip
    lines = child.output.splitlines()
    errors = sorted({line.strip()[:300] for line in lines if "distfl: error" in line})
    numbers = {
        "exit": child.returncode,
        "child_s": child.seconds,
        "distfl_errors": errors,
        "tracebacks": sum("Traceback (most recent call last)" in x for x in lines),
        "nccl_warnings": sorted({x.strip()[:300] for x in lines if "NCCL WARN" in x})[:5],
    }
    if child.returncode == 0:
        run = distfl.open(out)
        numbers["backend"] = (run.world or {}).get("backend")
        code, text = compare(Path(a["run_file"]), out)
        numbers.update(compare_exit=code, compare=text.strip().splitlines())
        if code != 0:
            raise PartFailed("NCCL with two ranks on one GPU ran but differs from one "
                             f"process: {_tail(text, 2)}", numbers)  # fmt: skip
        return numbers
    if not errors:
        raise PartFailed(f"exit {child.returncode} without a distfl error line: "
                         f"{_tail(child.output)}", numbers)  # fmt: skip
    return numbers


PARTS = [
    Part("env", "versions, the device and the modules distfl needs", 60, part_env),
    Part("a", "the default job on the device", 100, part_default_job),
    Part("b", "the same job again: the same bits (distfl compare)", 100, part_same_bits),
    Part("c", "two ranks on one device under torchrun, --comm gloo: one process's bits", 130,
         part_two_ranks),
    Part("d", "a round of 1,000 clients: bare torch.func vmap against distfl's trainers", 110,
         part_vmap),
    Part("e", "peak device memory against distfl's memory estimate", 70, part_memory),
    Part("n", "NCCL with two ranks on one GPU: one line or the same bits, not a hang", 50,
         part_nccl, devices=("cuda",)),
]  # fmt: skip


# -- the summary ---------------------------------------------------------------------------


def _mib(n) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f} MiB"


def _num(x, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x, fmt)


def part_line(record: dict) -> str:
    """One line of the text summary for a part."""
    n = record["numbers"]
    head = f"{record['key']:<4} {record['status']:<10} {record['seconds']:>6.1f} s  "
    text = record["title"]
    try:
        if record["key"] == "env" and n:
            text = (
                f"torch {n.get('torch')}, CUDA {n.get('cuda_build')}, cuDNN {n.get('cudnn')}, "
                f"NCCL {n.get('nccl_version')}, GPU {n.get('gpu')} "
                f"({_mib(n.get('gpu_memory_bytes'))}), python {n.get('python')}"
            )
        elif record["key"] in ("a", "b") and "rounds" in n:
            text = (
                f"{n['rounds']} rounds in {n['loop_s']:.2f} s ({_num(n['rounds_per_s'])} "
                f"rounds/s), accuracy {_num(n['accuracy'], '.4f')}, {n['clusters']} "
                f"clusters, trainer {n['trainer']}, GPU peak "
                f"{_mib(n['peak_allocated_bytes'])}"
            )
            if record["key"] == "b" and "compare_exit" in n:
                text += f"; compare with a: exit {n['compare_exit']}"
        elif record["key"] == "c" and "compare_exit" in n:
            text = (
                f"W=2 ({n['backend']}), {_num(n['rounds_per_s'])} rounds/s; compare with a: "
                f"exit {n['compare_exit']}"
            )
        elif record["key"] == "d" and "clients" in n:
            bare = n.get("bare_s")
            text = (
                f"{n['clients']} clients x {n['steps']} steps: bare vmap "
                f"{_num(bare and bare * 1e3, '.1f')} ms/round; vectorised trainer "
                f"{_num(n.get('vectorised_trainer_vs_bare'))}x, batched trainer "
                f"{_num(n.get('batched_trainer_vs_bare'))}x (on counter batches "
                f"{_num(n.get('vectorised_counter_trainer_vs_bare'))}x and "
                f"{_num(n.get('batched_counter_trainer_vs_bare'))}x), distfl round vectorised "
                f"{_num(n.get('distfl_vectorised_round_vs_bare'))}x, batched "
                f"{_num(n.get('distfl_batched_round_vs_bare'))}x of the bare time; auto picks "
                f"{n.get('auto_picks')}; agreement {_num(n.get('agreement_max_abs'), '.2g')}"
            )
        elif record["key"] == "e" and n.get("rows"):
            text = "; ".join(
                f"{r['job']}: peak {_mib(r['peak_allocated_bytes'])} vs estimate "
                f"{_mib(r['total_bytes'])}"
                for r in n["rows"]
            )
        elif record["key"] == "n" and n:
            text = f"exit {n['exit']}; " + (
                n["distfl_errors"][0]
                if n.get("distfl_errors")
                else f"compare exit {n.get('compare_exit')}"
            )
    except Exception as exc:  # the line is a convenience; the JSON holds everything
        text = f"{record['title']} (line not formatted: {type(exc).__name__})"
    if record["error"]:
        text += f"  [{record['error'][:400]}]"
    return head + text


def write_summary(out: Path, summary: dict) -> None:
    """gpu-check.json and gpu-check.txt under ``out``, each written whole and renamed."""
    out.mkdir(parents=True, exist_ok=True)
    records = summary["parts"]
    passed = sum(r["status"] == "passed" for r in records)
    lines = [
        f"distfl GPU check, {summary['started']}, device {summary['device']} "
        f"(size {summary['size']}), distfl {summary['distfl']}",
        *(part_line(r) for r in records),
        f"{passed} of {len(records)} parts passed" + ("" if summary["finished"] else
                                                      " so far (still running)"),
    ]  # fmt: skip
    for name, text in ((SUMMARY_JSON, json.dumps(summary, indent=1, default=str) + "\n"),
                       (SUMMARY_TEXT, "\n".join(lines) + "\n")):  # fmt: skip
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)


def check(*, out: Path, device: str, size: str, only: set[str] | None, budget_s: float) -> dict:
    """Run the parts (those named in ``only``, or all) and write the summary; returns it."""
    import distfl

    out.mkdir(parents=True, exist_ok=True)
    parts = [p for p in PARTS if only is None or p.key in only]
    summary = {
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device,
        "size": size,
        "budget_s": budget_s,
        "distfl": distfl.__version__,
        "command": shlex.join([sys.executable, *sys.argv]),
        "finished": False,
        "passed": False,
        "parts": [],
    }
    with contextlib.suppress(Exception):
        summary["commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
            timeout=10,
        ).stdout.strip()  # fmt: skip
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="distfl-gpu-check-") as work:
        ctx = Context(device=device, size=size, out=out, work=Path(work))

        def on_part(record: dict) -> None:
            summary["parts"].append(record)
            print(part_line(record), flush=True)
            write_summary(out, summary)

        run_parts(parts, ctx, budget_s=budget_s, on_part=on_part)
    summary["total_s"] = round(time.monotonic() - t0, 1)
    summary["finished"] = True
    summary["passed"] = all(r["status"] in ("passed", "skipped") for r in summary["parts"]) and any(
        r["status"] == "passed" for r in summary["parts"]
    )
    write_summary(out, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_child":
        return child_main(argv[1], json.loads(argv[2]))
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("DISTFL_GPU_CHECK_OUT", "gpu-check"),
                        help="folder of the summary, logs and run files (default "
                        "$DISTFL_GPU_CHECK_OUT, else ./gpu-check)")  # fmt: skip
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--size",
        choices=("full", "tiny"),
        help="full (the default on cuda) or tiny (the default on cpu)",
    )
    parser.add_argument("--only", help="the parts to run, comma-separated (env,a,b,c,d,e,n)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for all the parts (default {DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument(
        "--missing",
        action="store_true",
        help="print the distributions distfl needs that are not importable",
    )
    args = parser.parse_args(argv)
    if args.missing:
        print(" ".join(missing_modules()))
        return 0
    size = args.size or ("full" if args.device == "cuda" else "tiny")
    only = None
    if args.only:
        only = {k.strip() for k in args.only.split(",") if k.strip()}
        unknown = only - {p.key for p in PARTS}
        if unknown:
            parser.error(f"--only: no part {', '.join(sorted(unknown))}; parts: "
                         f"{', '.join(p.key for p in PARTS)}")  # fmt: skip
    summary = check(out=Path(args.out), device=args.device, size=size, only=only,
                    budget_s=args.budget_s)  # fmt: skip
    print(f"summary: {Path(args.out) / SUMMARY_JSON} and {Path(args.out) / SUMMARY_TEXT}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
