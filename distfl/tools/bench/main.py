"""``distfl bench``: every row on one workload (:func:`run_bench`) and the command itself
(:func:`bench_main`), which prints the table or, with ``--json``, one JSON object.

The rows run one after another in this process's temporary directory, which is removed
afterwards; a row that fails says why and the others still run. Torch warms up once in this
process first, untimed (rows a, b and c run here). With ``--repeat N`` the whole sequence
of rows runs N times and each row reports its fastest pass (a shared machine's noise only
ever slows a pass down), with every pass's rate in its notes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from distfl import __version__
from distfl.errors import ConfigError
from distfl.tools.bench.common import log, row
from distfl.tools.bench.distfl_rows import distfl_local, distfl_torchrun
from distfl.tools.bench.flower import flower
from distfl.tools.bench.plain import plain_loop
from distfl.tools.bench.report import json_safe, print_report, targets
from distfl.tools.bench.server_math import server_math_rows
from distfl.tools.bench.workload import W3, Workload, warm_up_torch


def run_bench(
    w: Workload,
    *,
    skip_flower: bool = False,
    with_server_math: bool = False,
    quiet: bool = False,
    repeat: int = 1,
) -> dict:
    """Every row on the workload ``w``; returns the report (what ``--json`` prints)."""
    import torch

    w.check()
    if repeat < 1:
        raise ConfigError(f"bench --repeat {repeat}: must be at least 1")
    passes: dict[str, list[dict]] = {}
    log(quiet, "warming up torch (one-time lazy imports, untimed) ...")
    warm_up_s = warm_up_torch()

    def attempt(n: int, key: str, label: str, fn, *args) -> None:
        log(quiet, f"{label} ..." if repeat == 1 else f"{label} (pass {n + 1}/{repeat}) ...")
        try:
            got = fn(*args)
        except Exception as exc:  # a failed row is reported, the others still run
            got = row(key, label, f"failed: {type(exc).__name__}: {exc}")
        passes.setdefault(key, []).append(got)

    with tempfile.TemporaryDirectory(prefix="distfl-bench-") as tmp_name:
        tmp = Path(tmp_name)
        for n in range(repeat):
            attempt(n, "plain", "plain PyTorch loop", plain_loop, w)
            attempt(n, "distfl_w1", "distfl W=1 (auto)", distfl_local, w, tmp, "auto")
            attempt(
                n, "distfl_w1_sequential", "distfl W=1 (sequential)", distfl_local, w, tmp,
                "sequential",
            )  # fmt: skip
            attempt(n, f"distfl_w{W3}", f"distfl W={W3} (torchrun, gloo)", distfl_torchrun, w, tmp)
            if skip_flower:
                passes["flower"] = [row("flower", "Flower simulation", "skipped (--skip-flower)")]
            else:
                attempt(n, "flower", "Flower simulation", flower, w, tmp)
    rows = {key: fastest(runs) for key, runs in passes.items()}
    plain = rows["plain"]
    for r in rows.values():
        if plain["status"] == "ok" and r["client_steps_per_s"] is not None:
            r["ratio_to_plain"] = r["client_steps_per_s"] / plain["client_steps_per_s"]
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
        "targets": targets(w, rows),
    }
    if with_server_math:
        report["server_math"] = server_math_rows(quiet=quiet)
    return report


def fastest(runs: list[dict]) -> dict:
    """A row's fastest pass (the first failure when none ran), noting every pass's rate."""
    ok = [r for r in runs if r["status"].startswith("ok")]
    if not ok:
        return runs[0]
    best = max(ok, key=lambda r: r["client_steps_per_s"])
    if len(runs) > 1:
        rates = ", ".join(f"{r['client_steps_per_s']:.0f}" if r in ok else "failed" for r in runs)
        best["notes"].append(f"fastest of {len(runs)} passes (client-steps/s: {rates})")
    return best


def bench_main(args, stream: TextIO | None = None) -> int:
    """``distfl bench``: exit 0 when every distfl row and the plain loop ran, else 1.
    With ``--scale`` (or ``--scale-quick``) the population-scale bench runs instead
    (:mod:`~distfl.tools.bench.scale`)."""
    stream = stream or sys.stdout
    if getattr(args, "scale", False) or getattr(args, "scale_quick", False):
        from distfl.tools.bench.scale import scale_main

        return scale_main(args, stream)
    w = Workload(
        clients=args.clients,
        per_round=args.per_round,
        model=args.model,
        steps=args.steps,
        batch=args.batch,
        rounds=args.rounds,
    )
    report = run_bench(
        w,
        skip_flower=args.skip_flower,
        with_server_math=args.server_math,
        quiet=False,
        repeat=getattr(args, "repeat", 1),
    )
    if args.json:
        stream.write(json.dumps(json_safe(report), indent=1) + "\n")
        stream.flush()
    else:
        print_report(report, stream)
    required = [r for r in report["rows"] if r["key"] != "flower"]
    return 0 if all(r["status"].startswith("ok") for r in required) else 1
