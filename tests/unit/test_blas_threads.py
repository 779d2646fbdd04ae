"""numpy's and scipy's BLAS threads during a run are ``run.threads`` (distfl.runtime.threads):
a threaded BLAS call's last bits depend on its thread count, and a process's default is its
machine's cores (or 1 under torchrun, which sets OMP_NUM_THREADS=1, and the cores again
under mpiexec), so without the limit one process and a world of ranks differ in the bits of
the server's and the workers' numpy math (seen on an AVX-512 CPU: PACFL's principal angles,
FedGWC's affinity)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info
from timing import limit

from distfl.runtime.threads import LOAD_VARIABLES, blas_threads

#: the variables that set a BLAS library's threads when it loads
THREAD_VARIABLES = (*LOAD_VARIABLES, "OMP_NUM_THREADS")

PLUGIN = """\
import json
import os

from threadpoolctl import threadpool_info

from distfl.algorithms import register
from distfl.algorithms.none import NoClustering


@register
class BlasProbe(NoClustering):
    name = "blas_probe"

    def update(self, round_index, plan, reports):
        import scipy.linalg  # noqa: F401  (scipy's own BLAS, loaded now if not before)

        with open(os.environ["PROBE_OUT"], "w") as f:
            json.dump([[i["filepath"], i["num_threads"]] for i in threadpool_info()
                       if i["user_api"] == "blas"], f)
        return super().update(round_index, plan, reports)
"""


def unlimited_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}


def default_blas_threads() -> int:
    """numpy's BLAS threads in a fresh process that no variable limits."""
    code = (
        "import numpy, json; from threadpoolctl import threadpool_info; "
        "print(json.dumps([i['num_threads'] for i in threadpool_info() "
        "if i['user_api'] == 'blas']))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=unlimited_env(),
                         capture_output=True, text=True, check=True,
                         timeout=limit(60)).stdout  # fmt: skip
    return min(json.loads(out))


def blas_of_this_process() -> dict[str, int]:
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_the_limit_holds_inside_and_is_undone_after():
    before, env = blas_of_this_process(), {k: os.environ.get(k) for k in LOAD_VARIABLES}
    assert before, "numpy's BLAS is loaded"
    with blas_threads(1):
        assert set(blas_of_this_process().values()) == {1}
        assert all(os.environ[k] == "1" for k in LOAD_VARIABLES)
    assert blas_of_this_process() == before
    assert {k: os.environ.get(k) for k in LOAD_VARIABLES} == env


def test_every_blas_of_a_run_has_run_threads_even_one_loaded_during_it(tmp_path):
    """A run of one process with no variable limiting its BLAS: inside the run, numpy's BLAS
    and scipy's (first loaded in the algorithm's update) each have one thread, as
    ``run.threads`` = 1 says, where the process's default is more."""
    if default_blas_threads() < 2:
        pytest.skip("one core: a BLAS here has one thread with or without the limit")
    (tmp_path / "probe.py").write_text(PLUGIN)
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--preset", "digits",
         "--set", "data.num_clients=10", "--set", "run.rounds=1", "--set", "run.threads=1",
         "--set", "run.plugins=['probe.py']", "--set", 'algorithm.name="blas_probe"',
         "--set", 'run.progress="none"', "--out", "probe.h5"],
        env={**unlimited_env(), "PROBE_OUT": str(tmp_path / "blas.json")},
        cwd=tmp_path, capture_output=True, text=True, timeout=limit(120),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = dict(json.loads((tmp_path / "blas.json").read_text()))
    # scipy's own library (its wheel's scipy.libs), not only numpy's (numpy.libs)
    assert any(Path(path).parent.name.startswith("scipy") for path in seen), seen
    assert len(seen) >= 2, f"numpy's and scipy's BLAS: {seen}"
    assert set(seen.values()) == {1}, seen
