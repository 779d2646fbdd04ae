"""Each cluster's share of a round's clients, as the oracle draws them and EMD-CFL after
its one-shot clustering."""

from __future__ import annotations

import numpy as np


def sample_sizes(sizes: np.ndarray, clients_per_round: int, num_clients: int) -> np.ndarray:
    """[G] clients each cluster samples: ``min(|C|, max(1, round(ρ|C|)))`` with halves up,
    ρ = clients_per_round / num_clients; 0 for an empty cluster."""
    sizes = np.asarray(sizes, dtype=np.int64)
    want = np.floor(sizes * clients_per_round / num_clients + 0.5).astype(np.int64)
    return np.minimum(sizes, np.maximum(want, 1))


__all__ = ["sample_sizes"]
