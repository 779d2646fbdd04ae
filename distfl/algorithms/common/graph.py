"""The collaboration graph of pFedGraph (and FedSaC): each row is the minimiser over the
probability simplex of a quadratic whose solution is a Euclidean projection."""

from __future__ import annotations

import numpy as np

from distfl.algorithms import api


def project_to_simplex(v: np.ndarray) -> np.ndarray:
    """The Euclidean projection of ``v`` [n] onto {x ≥ 0, Σx = 1} (the sort-based algorithm:
    Wang and Carreira-Perpiñán 2013): exact, with no solver's tolerance."""
    v = np.asarray(v, dtype=np.float64)
    n = len(v)
    if n == 0:
        return v.copy()
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    j = np.arange(1, n + 1)
    rho = int(np.nonzero(u - (css - 1.0) / j > 0)[0][-1]) + 1
    tau = (css[rho - 1] - 1.0) / rho
    return np.maximum(v - tau, 0.0)


def update_directions(models: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """[n, P] each client's model minus the reference (float64)."""
    return np.asarray(models, dtype=np.float64) - np.asarray(reference, dtype=np.float64)


def negative_cosines(updates: np.ndarray, clip: float = 0.9) -> np.ndarray:
    """d [n, n]: −cos(Δ_i, Δ_j) of the rows of ``updates``, with every cosine above ``clip``
    counted as 1 (the code's d < −0.9 → −1); a zero update has cosine 0 with every other."""
    U = np.asarray(updates, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", U, U))
    safe = np.where(norms > 0, norms, 1.0)
    unit = U / safe[:, None]
    cos = np.clip(unit @ unit.T, -1.0, 1.0)
    cos[norms == 0, :] = 0.0
    cos[:, norms == 0] = 0.0
    d = -cos
    d[d < -clip] = -1.0
    return d


def graph_rows(sizes: np.ndarray, d: np.ndarray, alpha: float) -> np.ndarray:
    """A [n, n]: row i minimises α ‖a − p‖² + Σ_j a_j d_ij over the simplex (pFedGraph's
    graph step, p the clients' shares of the samples), i.e. the projection of
    p − d_i / (2α)."""
    p = np.asarray(sizes, dtype=np.float64)
    p = p / p.sum()
    d = np.asarray(d, dtype=np.float64)
    return np.stack([project_to_simplex(p - d[i] / (2.0 * alpha)) for i in range(len(p))])


def cosine_row(updates: np.ndarray, i: int, clip: float = 0.9) -> np.ndarray:
    """Row i of :func:`negative_cosines`, computed alone (numpy's own loops, no BLAS: the
    same bits whichever process computes it)."""
    U = np.asarray(updates, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", U, U))
    dots = np.einsum("ij,j->i", U, U[i])
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.clip(dots / (norms * norms[i]), -1.0, 1.0)
    cos[(norms == 0) | (norms[i] == 0)] = 0.0
    d = -cos
    d[d < -clip] = -1.0
    return d


@api.pooled
def graph_piece(payload: dict[str, np.ndarray], i: int) -> np.ndarray:
    """Client i's row of the graph from the round's updates [n, P], sample counts [n] and
    α ([1]): a piece of the server's work that any rank computes."""
    d = cosine_row(payload["updates"], i)
    p = np.asarray(payload["sizes"], dtype=np.float64)
    p = p / p.sum()
    return project_to_simplex(p - d / (2.0 * float(payload["alpha"][0])))


@api.pooled
def aggregate_piece(payload: dict[str, np.ndarray], i: int) -> np.ndarray:
    """Client i's aggregate Σ_j A_ij θ_j from the graph [n, n] and the models [n, P]."""
    return aggregate_rows(payload["graph"][i : i + 1], payload["models"])[0]


def aggregate_rows(weights: np.ndarray, models: np.ndarray) -> np.ndarray:
    """[n, P] float64: Σ_j A_ij θ_j for every row i, the models summed in their order (the
    same bits at any world size)."""
    A = np.asarray(weights, dtype=np.float64)
    W = np.asarray(models, dtype=np.float64)
    out = np.zeros((A.shape[0], W.shape[1]))
    for j in range(W.shape[0]):
        out += A[:, j : j + 1] * W[j][None, :]
    return out


__all__ = [
    "aggregate_piece",
    "aggregate_rows",
    "cosine_row",
    "graph_piece",
    "graph_rows",
    "negative_cosines",
    "project_to_simplex",
    "update_directions",
]
