"""Time and peak memory of FedGWC's server math (affinity + split choice) for K clients.

    python benchmarks/fedgwc_server_math.py 1000 10000

Each K runs in a fresh process, so that the peak resident memory (ru_maxrss) is its own.
P is a synthetic converged interaction matrix with three groups of clients (rows near
0.8, 0.5 and 0.2) plus noise of std 1/sqrt(2K), so that two clients of one group stay at
a squared UPV distance near 1 whatever K (with a fixed noise level the distance grows with
K and exp(-β·distance) vanishes: β has to shrink as K grows). The peak RSS includes P
itself (float64, as FedGWC keeps it).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def measure(K: int) -> dict:
    import numpy as np

    from distfl.algorithms.fedgwc import affinity, choose_split

    rng = np.random.default_rng(0)
    level = np.repeat([0.8, 0.5, 0.2], [K // 2, K // 4, K - K // 2 - K // 4])
    P = rng.normal(0.0, 1.0 / np.sqrt(2 * K), size=(K, K))
    P += level[:, None]  # in place: generating P holds one K×K array, not two
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
        "peak_rss_gib": peak / 2**20,
        "W_dtype": str(W.dtype),
        "P_gib": P.nbytes / 2**30,
        "before_gib": base / 2**20,
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(int(sys.argv[2]))))
        return
    sizes = [int(k) for k in sys.argv[1:]] or [1000, 10000]
    print(
        f"{'K':>6} {'affinity s':>11} {'split s':>9} {'total s':>9} {'clusters':>9} "
        f"{'best DB':>8} {'W':>8} {'P GiB':>7} {'peak RSS GiB':>13}",
        flush=True,
    )
    for K in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(K)], capture_output=True, text=True, check=True
        ).stdout
        r = json.loads(out)
        print(
            f"{r['K']:>6} {r['affinity_s']:>11.2f} {r['split_s']:>9.2f} {r['total_s']:>9.2f} "
            f"{r['n_clusters']:>9} {r['best_db']:>8.4f} {r['W_dtype']:>8} {r['P_gib']:>7.2f} "
            f"{r['peak_rss_gib']:>13.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
