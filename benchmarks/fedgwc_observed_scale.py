"""FedGWC on observed entries at scale: time and peak memory of the server's clustering.

    python benchmarks/fedgwc_observed_scale.py 2714 10 2000
    python benchmarks/fedgwc_observed_scale.py 20000 200 100
    python benchmarks/fedgwc_observed_scale.py 100000 1000 30
    python benchmarks/fedgwc_observed_scale.py 100000 1000 300

For K clients, ``cohort`` of them a round: ``rounds`` rounds of eq. 3 on the cluster's
observed entries (rewards of two groups, 3/4 near 0.8 and 1/4 near 0.5, noise 0.1), then
one split test with 15 references, called directly (a run would wait for
``min_observations``). Prints the entries of P, the bytes its store holds (above
BLOCKS_ABOVE clients the rounds and the pairs sampled together more than once, below
the entries), eq. 3's seconds in the first and last
round, the split test's seconds, the peak resident memory of the process, and the test's
statistics. No training: the clients' side is what ``distfl bench --scale`` measures.
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np

from distfl.algorithms.fedgwc import FedGWC


def main() -> None:
    K, cohort, rounds = (int(a) for a in sys.argv[1:4])
    alg = FedGWC(num_clients=K, clients_per_round=cohort, seed=0, interaction="observed",
                 stable_tests=1, reference_draws=15, min_alpha=0.1)  # fmt: skip
    rng = np.random.default_rng(0)
    level = np.where(np.arange(K) < 3 * K // 4, 0.8, 0.5)
    st = alg.state["0"]
    times = []
    for _ in range(rounds):
        pos = np.sort(rng.choice(K, cohort, replace=False))
        t = time.perf_counter()
        st.P.update(pos, level[pos] + rng.normal(0, 0.1, cohort), alg.alpha)
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    stats: dict[str, float] = {}
    split = alg._try_split("0", st, rounds, stats=stats)
    test = time.perf_counter() - t
    held = st.P.nbytes() if hasattr(st.P, "nbytes") else st.P.keys.nbytes + st.P.values.nbytes
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    shown = {k: round(v, 4) for k, v in stats.items()}
    print(
        f"K={K:,} cohort={cohort:,} rounds={rounds} entries={len(st.P):,} "
        f"store={held / 2**20:.1f} MiB eq. 3 s/round "
        f"first/last={times[0]:.3f}/{times[-1]:.3f} split test={test:.1f} s peak RSS="
        f"{rss:.2f} GiB split={split is not None} {shown}"
    )


if __name__ == "__main__":
    main()
