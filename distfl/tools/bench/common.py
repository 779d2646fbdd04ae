"""What the rows of ``distfl bench`` share: the row record and its rates, and how the bench
starts its subprocesses (a clean environment, results tagged on stdout).

A row is a dict with the same keys whatever its kind (:func:`row`); :func:`rates` fills in
rounds/s, client-steps/s and the overhead, the share of the rounds loop's wall time not
spent in local training, from ``wall_s``, ``rounds``, ``client_steps`` and ``train_s``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

RESULT_TAG = "distfl-bench-result: "
SUBPROCESS_TIMEOUT_S = 1800
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


def row(key: str, label: str, status: str = "ok", **fields: Any) -> dict:
    """A row of the table; ``status`` is "ok" or why the row has no numbers."""
    out = {
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
        #: bytes each rank hands to the exact sums' reduce per model parameter (distfl rows)
        "sum_bytes_per_param": None,
        "notes": [],
    }
    out.update(fields)
    return out


def rates(r: dict) -> dict:
    """Rounds/s and client-steps/s over the row's loop, and its overhead when ``train_s``
    (time in local training) is known."""
    wall = r["wall_s"]
    r["rounds_per_s"] = r["rounds"] / wall
    r["client_steps_per_s"] = r["client_steps"] / wall
    if r["train_s"] is not None:
        r["overhead"] = max(0.0, (wall - r["train_s"]) / wall)
    return r


def log(quiet: bool, message: str) -> None:
    if not quiet:
        print(f"bench: {message}", file=sys.stderr, flush=True)


def clean_env(**extra: str) -> dict[str, str]:
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


def child_command(*args: str) -> list[str]:
    """``python -m distfl.tools.bench ARGS``: one of the bench's own subprocesses."""
    return [sys.executable, "-m", "distfl.tools.bench", *args]


def print_result(result: dict) -> None:
    """A child's result, as the one tagged line of its stdout the bench reads back."""
    print(RESULT_TAG + json.dumps(result), flush=True)


def tagged_result(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    return None


def tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else "no output"
