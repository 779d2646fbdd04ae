"""``distfl bench --server-math``: time and peak memory of FedGWC's server math, its
``affinity`` + ``choose_split``, for K = 1,000, 10,000 and 30,000 clients.

Each K runs in a fresh process (``python -m distfl.tools.bench _server-math K CAP``), so that
its peak resident memory (ru_maxrss, P included) is its own, with its address space capped
below the memory available so that a K too large for the machine fails with MemoryError.
P is a synthetic converged interaction matrix with three groups of clients (rows near 0.8,
0.5 and 0.2) plus noise of std 1/sqrt(2K). ``benchmarks/fedgwc_server_math.py`` prints the
same measurement as a table of its own.
"""

from __future__ import annotations

import resource
import subprocess
import time

from distfl.tools.bench.common import (
    SUBPROCESS_TIMEOUT_S,
    child_command,
    clean_env,
    log,
    tagged_result,
    tail,
)

SERVER_MATH_SIZES = (1000, 10000, 30000)


def server_math(K: int) -> dict:
    """Time and peak memory of FedGWC's affinity + choose_split on a synthetic converged P
    with three groups (rows near 0.8, 0.5, 0.2) and noise of std 1/sqrt(2K), as
    ``benchmarks/fedgwc_server_math.py`` measures it. Run it in a fresh process per K."""
    import numpy as np

    from distfl.algorithms.fedgwc import affinity
    from distfl.algorithms.fedgwc.spectral import choose_split

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
        log(quiet, f"server math, K = {K:,}")
        try:
            proc = subprocess.run(
                child_command("_server-math", str(K), str(cap)),
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            rows.append({"K": K, "status": f"failed: timed out after {SUBPROCESS_TIMEOUT_S} s"})
            continue
        result = tagged_result(proc.stdout)
        if result is None:
            rows.append({"K": K, "status": f"failed: exit {proc.returncode}: {tail(proc.stderr)}"})
        elif result.get("error"):
            rows.append({"K": K, "status": f"failed: {result['error']}"})
        else:
            rows.append({"status": "ok", **result})
    return rows


def server_math_child(K: int, cap: int) -> dict:
    """The ``_server-math`` subprocess's work: :func:`server_math` with this process's
    address space capped at ``cap`` bytes (none when 0)."""
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        return server_math(K)
    except MemoryError as exc:
        return {"error": f"out of memory (address space capped at {cap / 2**30:.1f} GiB): {exc}"}
