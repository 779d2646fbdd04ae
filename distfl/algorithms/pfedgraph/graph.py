"""The collaboration graph of pFedGraph (and FedSaC): each row is the minimiser over the
probability simplex of a quadratic whose solution is a Euclidean projection."""

from __future__ import annotations

import numpy as np


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
    "aggregate_rows",
    "graph_rows",
    "negative_cosines",
    "project_to_simplex",
    "update_directions",
]
