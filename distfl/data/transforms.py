"""Per-group transforms of a client's data, deterministic per (seed, group, client).

- ``noise``: Gaussian noise of standard deviation σ added to every feature (the FedGWC
  paper's "Noise" visual domain, Table 4), drawn per client from (seed, client);
- ``permute_labels``: the group's labels pass through one fixed permutation drawn from
  (seed, group) — a concept shift, the classic clustered-FL scenario (CFL, IFCA).
"""

from __future__ import annotations

import numpy as np

from distfl.config import GroupSpec


def label_permutation(num_classes: int, *, seed: int, group: int) -> np.ndarray:
    """A permutation of the classes that moves every class (a derangement)."""
    rng = np.random.default_rng([seed, 0x1ABE1, group])
    while True:
        perm = rng.permutation(num_classes)
        if num_classes < 2 or not np.any(perm == np.arange(num_classes)):
            return perm


def apply_group(
    x: np.ndarray,
    y: np.ndarray,
    spec: GroupSpec,
    *,
    num_classes: int,
    seed: int,
    group: int,
    client: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The client's features and labels after its group's transforms (new arrays)."""
    if spec.noise > 0:
        rng = np.random.default_rng([seed, 0x9015E, client])
        x = (x + rng.normal(0.0, spec.noise, size=x.shape)).astype(x.dtype)
    if spec.permute_labels:
        y = label_permutation(num_classes, seed=seed, group=group)[y]
    return x, y
