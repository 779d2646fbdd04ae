"""Row e of ``distfl bench``: Flower's simulation (``flwr.simulation.start_simulation``,
Ray) on the same workload, when flwr is installed (``pip install 'distfl[bench]'``).

It runs in a fresh process (``python -m distfl.tools.bench _flower ...``: Ray starts there),
whose Ray actors import this module for the client functions. Each client trains as the
plain loop does (:func:`~distfl.tools.bench.workload.sgd_steps`) and caches its data per
actor. FedAvg runs R + 1 rounds; the first warms up (Ray's actor pool, imports, data) and
is not timed. Time in local training is the union of the clients' ``fit`` intervals (model
in, S steps, model out; the clients run in parallel Ray actors), and overhead = (rounds-loop
wall time - union) / wall time. Bytes are not measured (Ray's object store).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from distfl.tools.bench.common import (
    SUBPROCESS_TIMEOUT_S,
    child_command,
    clean_env,
    rates,
    row,
    tagged_result,
    tail,
)
from distfl.tools.bench.workload import Workload, sgd_steps, warm_up_torch

NOT_INSTALLED = "not installed (pip install 'distfl[bench]')"


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
        return row("flower", "Flower simulation", why)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            child_command("_flower", json.dumps(asdict(w)), str(tmp)),
            env=clean_env(FLWR_TELEMETRY_ENABLED="0", RAY_USAGE_STATS_ENABLED="0"),
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            cwd=tmp,
        )
    except subprocess.TimeoutExpired:
        return row(
            "flower", "Flower simulation", f"failed: timed out after {SUBPROCESS_TIMEOUT_S} s"
        )
    process_wall = time.perf_counter() - t0
    result = tagged_result(proc.stdout)
    if proc.returncode != 0 or result is None:
        return row(
            "flower",
            "Flower simulation",
            f"failed (cannot run here?): exit {proc.returncode}: {tail(proc.stderr + proc.stdout)}",
        )
    if result.get("error"):
        return row("flower", "Flower simulation", f"failed: {result['error']}")
    r = row(
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
    rates(r)
    r["notes"].append(
        f"start_simulation with FedAvg(fraction_fit={w.per_round}/{w.clients}); "
        f"{result['actors']} Ray actors of 1 CPU, 1 torch thread each; Ray start, actor pool "
        f"and one untimed warm-up round excluded ({result['setup_s']:.1f} s); clients cache "
        "their data per actor"
    )
    if result["failures"]:
        r["status"] = f"ok, {result['failures']} failed fit(s)"
    return r


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
    n = sgd_steps(model, loss_fn, d, w, lr=cfg.train.lr, round_index=round_index, k=k)
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

    TimedFedAvg = _timed_fedavg(FedAvg, marks, intervals, counts)
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


def _timed_fedavg(
    FedAvg: type, marks: dict[str, float], intervals: list[tuple[float, float]], counts: dict
) -> type:
    """A subclass of Flower's ``FedAvg`` that times rounds 2..R+1 into ``marks`` (start,
    end), ``intervals`` (each client's fit) and ``counts`` (steps, failures)."""

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

    return TimedFedAvg


def _flower_round_config(server_round: int) -> dict:
    return {"round": server_round - 1}  # the timed rounds draw the plain loop's batches


def _flower_no_metrics(_metrics) -> dict:
    return {}


def flower_child(workload_json: str, tmp: str | None = None) -> dict:
    """The ``_flower`` subprocess's work: :func:`flower_measure` of the workload (as JSON),
    with Ray's session files under ``tmp/ray``; an exception is the result's ``error``."""
    try:
        ray_dir = str(Path(tmp) / "ray") if tmp else None
        return flower_measure(Workload(**json.loads(workload_json)), ray_dir)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
