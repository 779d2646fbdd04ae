"""Time and peak memory of FedGWC's server math (affinity + split choice) for K clients.

    python benchmarks/fedgwc_server_math.py 1000 10000
    python benchmarks/fedgwc_server_math.py 30000

The measurement of ``distfl bench --server-math``
(:func:`distfl.tools.bench.server_math.server_math`), printed as a table: each K runs in a
fresh process, so that the peak resident memory
(ru_maxrss, P included) is its own. P is a synthetic converged interaction matrix with
three groups of clients (rows near 0.8, 0.5 and 0.2) plus noise of std 1/sqrt(2K), so
that two clients of one group stay at a squared UPV distance near 1 whatever K (with a
fixed noise level the distance grows with K and exp(-β·distance) vanishes: β has to
shrink as K grows).
"""

from __future__ import annotations

import sys

from distfl.tools.bench.server_math import server_math_rows


def main() -> None:
    sizes = [int(k) for k in sys.argv[1:]] or [1000, 10000]
    print(
        f"{'K':>6} {'affinity s':>11} {'split s':>9} {'total s':>9} {'clusters':>9} "
        f"{'best DB':>8} {'W':>8} {'P GiB':>7} {'peak RSS GiB':>13}",
        flush=True,
    )
    for r in server_math_rows(sizes, quiet=True):
        if r["status"] != "ok":
            print(f"{r['K']:>6} {r['status']}", flush=True)
            continue
        print(
            f"{r['K']:>6} {r['affinity_s']:>11.2f} {r['split_s']:>9.2f} {r['total_s']:>9.2f} "
            f"{r['n_clusters']:>9} {r['best_db']:>8.4f} {r['W_dtype']:>8} {r['P_gib']:>7.2f} "
            f"{r['peak_rss_gib']:>13.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
