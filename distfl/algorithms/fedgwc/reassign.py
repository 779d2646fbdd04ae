"""Giving a member back: which of a round's probed clients move to another cluster.

FedGWC's split is final in the paper: a client that a split put on the wrong side stays
there. With ``reassign = "loss"`` (docs/algorithms.md, "Giving a member back") each round's
sampled clients first report their train loss under every cluster's model (IFCA's probe,
Ghosh et al. 2020, Algorithm 1), and :func:`moves` decides from those losses alone."""

from __future__ import annotations

import numpy as np


def moves(clients: np.ndarray, own: list[str], leaves: list[str], losses: np.ndarray,
          sizes: dict[str, int], *, ratio: float, min_clients: int) -> dict[int, str]:  # fmt: skip
    """The clients to move, each to its new cluster: client ``clients[i]`` of cluster
    ``own[i]``, whose train losses under the models of ``leaves`` are ``losses[i]``, moves
    to the cluster of least loss (the first of equal ones; NaN never wins) where that loss
    is below ``ratio`` times its own cluster's (a NaN own loss counts as infinite), in
    ascending client order, while its cluster keeps ``min_clients`` members (``sizes``:
    each cluster's members now). Models alike, as a split's children are when they start
    from the parent's, move nobody."""
    clients = np.asarray(clients, dtype=np.int64)
    losses = np.asarray(losses, dtype=np.float64)
    if losses.shape != (len(clients), len(leaves)) or len(own) != len(clients):
        raise ValueError(f"losses of shape {losses.shape} for {len(clients)} clients and "
                         f"{len(leaves)} clusters")  # fmt: skip
    clean = np.where(np.isnan(losses), np.inf, losses)
    best = np.argmin(clean, axis=1)
    column = {cid: j for j, cid in enumerate(leaves)}
    size = dict(sizes)
    out: dict[int, str] = {}
    for i in np.argsort(clients, kind="stable"):
        a, b = own[i], leaves[int(best[i])]
        if b == a or not clean[i, best[i]] < ratio * clean[i, column[a]]:
            continue
        if size[a] - 1 < min_clients:
            continue
        size[a] -= 1
        size[b] += 1
        out[int(clients[i])] = b
    return out


__all__ = ["moves"]
