"""FedSaC's graph: the complementarity of two clients' feature subspaces and the rows of the
collaboration graph (the public code's ``cal_complementary``,
``compute_principal_angles`` and ``update_graph_matrix_neighbor``)."""

from __future__ import annotations

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.graph import cosine_row, project_to_simplex

#: how the angles between two subspaces are found: ``code`` matches basis vectors greedily
#: on their signed cosines (the public code's); ``svd`` takes the principal angles
ANGLES = ("code", "svd")


def principal_basis(features: np.ndarray, components: int) -> np.ndarray:
    """[k, D] the top ``components`` principal axes of the rows of ``features`` [n, D]
    (centred; scikit-learn's PCA with the full SVD, each axis signed so that its largest
    entry in absolute value is positive). Axes beyond the data's rank, or beyond n, are
    zero rows."""
    X = np.asarray(features, dtype=np.float64)
    n, D = X.shape
    out = np.zeros((components, D))
    if n < 2:
        return out
    X = X - X.mean(axis=0)
    _, sing, Vt = np.linalg.svd(X, full_matrices=False)
    keep = min(components, len(sing))
    axes = Vt[:keep].copy()
    axes[sing[:keep] <= sing[0] * 1e-12] = 0.0  # no variance along it (all, for constant rows)
    top = np.argmax(np.abs(axes), axis=1)
    signs = np.sign(axes[np.arange(keep), top])
    signs[signs == 0] = 1.0
    out[:keep] = axes * signs[:, None]
    return out


def subspace_overlap(a: np.ndarray, b: np.ndarray, angles: str = "code") -> float:
    """c = cos(mean of the angles between the subspaces of the rows of ``a`` and ``b`` [k,
    D]): 1 for one subspace, 0 for orthogonal ones. ``code``: k times, the largest signed
    cosine between a remaining axis of each (the public code's greedy matching, whose
    cosines keep their sign: a flipped axis of one subspace counts as far); ``svd``: the
    principal angles, from the singular values of a bᵀ. A zero axis has cosine 0 with
    every other."""
    A = np.asarray(a, dtype=np.float64)
    B = np.asarray(b, dtype=np.float64)
    na = np.sqrt(np.einsum("ij,ij->i", A, A))
    nb = np.sqrt(np.einsum("ij,ij->i", B, B))
    dots = np.einsum("id,jd->ij", A, B)
    with np.errstate(invalid="ignore", divide="ignore"):
        M = dots / (na[:, None] * nb[None, :])
    M[(na[:, None] == 0) | (nb[None, :] == 0)] = 0.0
    if angles == "svd":
        cosines = np.clip(np.linalg.svd(M, compute_uv=False), 0.0, 1.0)
    else:
        k = min(M.shape)
        M = M.copy()
        cosines = np.empty(k)
        for m in range(k):
            r, s = np.unravel_index(int(np.argmax(M)), M.shape)
            cosines[m] = M[r, s]
            M[r, :] = -np.inf
            M[:, s] = -np.inf
    phi = np.arccos(np.clip(cosines, -1.0, 1.0))
    return float(np.cos(phi.mean()))


def complementarity_row(bases: np.ndarray, i: int, angles: str = "code") -> np.ndarray:
    """Row i of c [n]: :func:`subspace_overlap` of client i's basis with each client's
    (``bases`` [n, k, D])."""
    return np.array([subspace_overlap(bases[i], bases[j], angles) for j in range(len(bases))])


def sac_row(p: np.ndarray, c: np.ndarray, s: np.ndarray, lambda1: float, lambda2: float):
    """Client i's graph row: the minimiser of ‖a − p‖² + λ1 Σ_j a_j c_ij + λ2 Σ_j a_j s_ij
    over the simplex, i.e. the projection of p − (λ1 c_i + λ2 s_i) / 2."""
    pull = lambda1 * np.asarray(c, dtype=np.float64) + lambda2 * np.asarray(s, dtype=np.float64)
    return project_to_simplex(np.asarray(p, dtype=np.float64) - pull / 2.0)


@api.pooled
def sac_piece(payload: dict[str, np.ndarray], i: int) -> np.ndarray:
    """Client i's row of FedSaC's graph and its row of the complementarity, side by side
    [2n], from the round's updates [n, P], feature bases [n, k, D], sample counts [n] and
    (λ1, λ2, angle mode index) ([3]): a piece of the server's work that any rank computes."""
    lambda1, lambda2, mode = (float(v) for v in payload["settings"])
    s = cosine_row(payload["updates"], i)
    c = complementarity_row(payload["bases"], i, ANGLES[int(mode)])
    p = np.asarray(payload["sizes"], dtype=np.float64)
    return np.concatenate([sac_row(p / p.sum(), c, s, lambda1, lambda2), c])


__all__ = [
    "ANGLES",
    "complementarity_row",
    "principal_basis",
    "sac_piece",
    "sac_row",
    "subspace_overlap",
]
