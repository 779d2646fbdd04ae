"""Giving a member back: which of a round's probed clients move to another cluster.

FedGWC's split is final in the paper: a client that a split put on the wrong side stays
there. With ``reassign = "loss"`` (docs/algorithms.md, "Giving a member back") each round's
sampled clients first report their train loss under every cluster's model (IFCA's probe,
Ghosh et al. 2020, Algorithm 1), and :func:`moves` decides from those losses alone."""

from __future__ import annotations

import numpy as np


def moves(clients: np.ndarray, own: list[str], leaves: list[str], losses: np.ndarray,
          sizes: dict[str, int], *, ratio: float, outlier: float,
          min_clients: int) -> dict[int, str]:  # fmt: skip
    """The clients to move, each to its new cluster. Client ``clients[i]`` of cluster ``a =
    own[i]``, whose train losses under the models of ``leaves`` are ``losses[i]``, moves to
    the cluster ``b`` of least loss (the first of equal ones) where all three hold:

    - **b fits it far better:** its loss under b's model is below ``ratio`` times its loss
      under a's;
    - **b is another concept for a's members, not a better model for all:** the other
      probed members of a have their loss under b's model at least 1 / ``ratio`` times
      their loss under a's (the median of their ratios): the two models disagree about a's
      members as they disagree about this client, the other way round. (One-class clients
      whose near-IID neighbours' model fits some of them better than their own cluster's
      fail this: that model is better for many of them, not the reverse of theirs);
    - **it is far from a's members:** its loss under a's model is above ``outlier`` times
      the median of the other probed members' of a (the median, so that two clients on
      the wrong side probed in one round do not hide each other).

    A client probed alone in its cluster has no such evidence and stays. Clients are taken
    in ascending id order, while their cluster keeps ``min_clients`` members (``sizes``:
    each cluster's members now). A NaN loss counts as infinite (never the least). Models
    alike, as a split's children are when they start from the parent's, move nobody."""
    clients = np.asarray(clients, dtype=np.int64)
    losses = np.asarray(losses, dtype=np.float64)
    if losses.shape != (len(clients), len(leaves)) or len(own) != len(clients):
        raise ValueError(f"losses of shape {losses.shape} for {len(clients)} clients and "
                         f"{len(leaves)} clusters")  # fmt: skip
    clean = np.where(np.isnan(losses), np.inf, losses)
    best = np.argmin(clean, axis=1)
    column = {cid: j for j, cid in enumerate(leaves)}
    home = np.array([clean[i, column[a]] for i, a in enumerate(own)])
    size = dict(sizes)
    out: dict[int, str] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in np.argsort(clients, kind="stable"):
            a, b = own[i], int(best[i])
            if leaves[b] == a or not clean[i, b] < ratio * home[i]:
                continue
            peers = np.array([j for j in range(len(own)) if own[j] == a and j != i], dtype=int)
            if not len(peers):
                continue
            reverse = np.median(clean[peers, b] / home[peers])  # nan where both are inf
            if not reverse >= 1.0 / ratio or not home[i] > outlier * np.median(home[peers]):
                continue
            if size[a] - 1 < min_clients:
                continue
            size[a] -= 1
            size[leaves[b]] += 1
            out[int(clients[i])] = leaves[b]
    return out


__all__ = ["moves"]
