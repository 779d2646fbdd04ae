"""Start-up of a short run: ``distfl run --set run.rounds=1``, launched REPEAT times as a
fresh process, and for each the wall clock from launch to the rounds loop (the file's
``/timing@loop_started``) and to exit, and the process's CPU seconds. Prints the medians.

    python scripts/startup.py [--repeat 7] [--tree DIR]

``--tree``: the distfl source tree to run (its directory goes first on PYTHONPATH), so
that two commits can be measured on one machine in one sitting."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py


def once(tree: str | None, out: Path) -> tuple[float, float, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--set", "run.rounds=1", "--set",
         'run.progress="none"', "--out", str(out), "--force"],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with h5py.File(out, "r") as f:
        loop = float(f["timing"].attrs["loop_started"])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return loop - started, ended - started, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--tree", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [once(args.tree, Path(tmp) / "s.h5") for _ in range(args.repeat)]
    to_loop, wall, cpu = (statistics.median(c) for c in zip(*rows, strict=True))
    print(
        f"start-up (launch to the rounds loop) {to_loop:.2f} s, whole run {wall:.2f} s, "
        f"CPU {cpu:.2f} s (medians of {args.repeat})"
    )


if __name__ == "__main__":
    main()
