"""``distfl bench``: every row on one workload (:func:`run_bench`) and the command itself
(:func:`bench_main`), which prints the table or, with ``--json``, one JSON object.

The rows run one after another in this process's temporary directory, which is removed
afterwards; a row that fails says why and the others still run. Torch warms up once in this
process first, untimed (rows a, b and c run here).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from distfl import __version__
from distfl.tools.bench.common import log, row
from distfl.tools.bench.distfl_rows import distfl_local, distfl_torchrun
from distfl.tools.bench.flower import flower
from distfl.tools.bench.plain import plain_loop
from distfl.tools.bench.report import json_safe, print_report, targets
from distfl.tools.bench.server_math import server_math_rows
from distfl.tools.bench.workload import W3, Workload, warm_up_torch


def run_bench(
    w: Workload, *, skip_flower: bool = False, with_server_math: bool = False, quiet: bool = False
) -> dict:
    """Every row on the workload ``w``; returns the report (what ``--json`` prints)."""
    import torch

    w.check()
    rows: dict[str, dict] = {}
    log(quiet, "warming up torch (one-time lazy imports, untimed) ...")
    warm_up_s = warm_up_torch()

    def attempt(key: str, label: str, fn, *args) -> None:
        log(quiet, f"{label} ...")
        try:
            rows[key] = fn(*args)
        except Exception as exc:  # a failed row is reported, the others still run
            rows[key] = row(key, label, f"failed: {type(exc).__name__}: {exc}")

    with tempfile.TemporaryDirectory(prefix="distfl-bench-") as tmp_name:
        tmp = Path(tmp_name)
        attempt("plain", "plain PyTorch loop", plain_loop, w)
        attempt("distfl_w1", "distfl W=1 (auto)", distfl_local, w, tmp, "auto")
        attempt(
            "distfl_w1_sequential", "distfl W=1 (sequential)", distfl_local, w, tmp, "sequential"
        )
        attempt(f"distfl_w{W3}", f"distfl W={W3} (torchrun, gloo)", distfl_torchrun, w, tmp)
        if skip_flower:
            rows["flower"] = row("flower", "Flower simulation", "skipped (--skip-flower)")
        else:
            attempt("flower", "Flower simulation", flower, w, tmp)
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
        w, skip_flower=args.skip_flower, with_server_math=args.server_math, quiet=False
    )
    if args.json:
        stream.write(json.dumps(json_safe(report), indent=1) + "\n")
        stream.flush()
    else:
        print_report(report, stream)
    required = [r for r in report["rows"] if r["key"] != "flower"]
    return 0 if all(r["status"].startswith("ok") for r in required) else 1
