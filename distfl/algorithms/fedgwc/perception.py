"""The perception vectors' distances (eq. 4) and the affinity W of FedGWC's spectral
clustering, from P, dense or in strips, and W's block contrast."""

from __future__ import annotations

import math

import numpy as np

from distfl.algorithms.fedgwc import spectral
from distfl.algorithms.fedgwc.spectral import (
    row_block,
    square_float,
)

#: Up to this many clients the K×K work is float64 and the spectral embedding comes from a
#: dense eigensolver; above it the affinity is float32 (half the memory and time) and the
#: product (see _perception_into).
_DEFLATE_RANK = 16

#: Rows per strip of the Gram product in perception_distances.
_GRAM_ROWS = 2048


def _auto_dtype(K: int) -> type:
    return np.float64 if K <= spectral.SMALL_K else np.float32


def _mirror_lower(A: np.ndarray, tile: int = 512) -> None:
    """Copy the lower triangle of the square C-ordered A onto its upper triangle, in place,
    tile by tile (cache-friendly transposes, no K×K temporary)."""
    K = A.shape[0]
    for lo in range(0, K, tile):
        hi = min(lo + tile, K)
        blk = A[lo:hi, lo:hi]
        iu = np.triu_indices(hi - lo, 1)
        blk[iu] = blk.T[iu]
        for lo2 in range(hi, K, tile):
            hi2 = min(lo2 + tile, K)
            A[lo:hi, lo2:hi2] = A[lo2:hi2, lo:hi].T


def _distances_from_gram(
    P: np.ndarray, out: np.ndarray, Y: np.ndarray, sq: np.ndarray, rows: int,
    beta: float | None,
) -> None:  # fmt: skip
    """Turn the lower triangle of ``out`` (the residuals' Gram matrix) into the perception
    distances (or exp(-β D)), row block by row block in float64: the y terms and the
    squared norms ``sq`` make ||x_k - x_j||², and P's own entries the two corrections."""
    K = P.shape[0]
    d = np.diagonal(P).astype(np.float64)
    for lo in range(0, K, rows):
        hi = min(lo + rows, K)
        blk = out[lo:hi, :hi].astype(np.float64)  # lower-triangle strip (and diagonal block)
        blk += Y[lo:hi] @ Y[:hi].T
        blk *= -2.0
        blk += sq[lo:hi, None]
        blk += sq[None, :hi]
        t = d[lo:hi, None] - P[:hi, lo:hi].T  # P_kk - P_jk
        t *= t
        blk -= t
        t = P[lo:hi, :hi] - d[None, :hi]  # P_kj - P_jj
        t *= t
        blk -= t
        np.maximum(blk, 0.0, out=blk)  # rounding can leave tiny negatives
        if beta is not None:
            blk *= -beta
            np.exp(blk, out=blk)
        out[lo:hi, :hi] = blk


def _perception_into(
    P: np.ndarray, out: np.ndarray, beta: float | None, block_rows: int | None
) -> np.ndarray:
    """D (``beta`` None) or exp(-β D) of the perception distances of P, written into ``out``
    (K×K, C-ordered, zeros, float32 or float64).

    ||v_k^j - v_j^k||² = ||P_k - P_j||² - (P_kk - P_jk)² - (P_kj - P_jj)². The first term
    is translation invariant, and splits exactly over an orthonormal basis Q (K×r) of a
    subspace of the rows and its complement: with the column-centred rows x_k = P_k - μ,
    y_k = x_k Q and r_k = x_k - y_k Qᵀ, ||x_k - x_j||² = ||y_k - y_j||² + ||r_k - r_j||².
    Q spans the dominant row subspace (a randomised range finder, fixed seed), so the y
    terms (float64, r-dimensional) carry the cluster structure and the residuals r_k are
    small; their Gram matrix, the O(K³) part, is computed in ``out``'s dtype, lower triangle
    only (half a matrix product), straight into ``out``, where float32 then loses little to
    cancellation. The corrections come from P itself in float64, row block by row block;
    the lower triangle is then mirrored."""
    K = P.shape[0]
    if K == 0:
        return out
    dt = out.dtype
    rows = row_block(K, block_rows)
    mu = P.mean(axis=0, dtype=np.float64)

    def xt_times(Y: np.ndarray) -> np.ndarray:  # (P - 1 μ)ᵀ Y, in P's dtype
        return (P.T @ Y.astype(P.dtype)).astype(np.float64) - mu[:, None] * Y.sum(axis=0)

    def x_times(Z: np.ndarray) -> np.ndarray:  # (P - 1 μ) Z, in P's dtype
        return (P @ Z.astype(P.dtype)).astype(np.float64) - mu @ Z

    r = min(_DEFLATE_RANK, K)
    Z = np.random.default_rng(0).standard_normal((K, r))
    with spectral.one_thread("blas"):  # K×16: threads only add waiting
        Q = np.linalg.qr(xt_times(Z))[0]
    Z = xt_times(x_times(Q))  # one power iteration
    with spectral.one_thread("blas"):
        Q = np.linalg.qr(Z)[0]
    exact = P.dtype == np.float64
    Y = x_times(Q) if exact else np.empty((K, r))  # y_k = x_k Q, float64
    QT = np.ascontiguousarray(Q.T)
    R = np.empty((K, K), dtype=dt)  # r_k = x_k - y_k Qᵀ
    for lo in range(0, K, rows):
        x = P[lo : lo + rows] - mu
        if not exact:
            Y[lo : lo + rows] = x @ Q
        x -= Y[lo : lo + rows] @ QT
        R[lo : lo + rows] = x
    x = None
    ysq = np.einsum("ij,ij->i", Y, Y)
    # the lower triangle of the Gram matrix R Rᵀ, a strip of rows at a time: a product
    # with the rows above (gemm) and the strip's own symmetric block (syrk). One syrk of
    # all K rows would do the same, but OpenBLAS's threaded syrk crashes (SIGSEGV) for
    # K of roughly 25,000 and more.
    for lo in range(0, K, _GRAM_ROWS):
        hi = min(lo + _GRAM_ROWS, K)
        np.matmul(R[lo:hi], R[:lo].T, out=out[lo:hi, :lo])
        out[lo:hi, lo:hi] = R[lo:hi] @ R[lo:hi].T
    del R
    rsq = np.diagonal(out).astype(np.float64)  # ||r_k||², rounded as the Gram has it
    _distances_from_gram(P, out, Y, rsq + ysq, rows, beta)
    _mirror_lower(out)
    np.fill_diagonal(out, 0.0 if beta is None else 1.0)
    return out


def perception_distances(
    P: np.ndarray, *, block_rows: int | None = None, dtype: type = np.float64
) -> np.ndarray:
    """D[k, j] = ||v_k^j - v_j^k||², v_k^j = row k of P without entries k and j.

    Uses ||v_k^j - v_j^k||² = ||P_k - P_j||² - (P_kk - P_jk)² - (P_kj - P_jj)², so D comes
    from one (symmetric) Gram matrix; the elementwise work runs in blocks of ``block_rows``
    rows to bound temporaries (O(K²) memory: P, a residual copy and D, see
    :func:`_perception_into`). D is exactly symmetric, 0 on the diagonal, and in ``dtype``
    (float64 or float32)."""
    P = square_float(P, "P")
    out = np.zeros(P.shape, dtype=np.dtype(dtype))
    return _perception_into(P, out, None, block_rows)


def affinity(P: np.ndarray, beta: float, *, dtype: type | None = None) -> np.ndarray:
    """Eq. 4: W[k, j] = exp(-β ||v_k^j - v_j^k||²), symmetric, ones on the diagonal.

    ``dtype`` defaults to float64 for K <= :data:`SMALL_K` and float32 above: the K×K Gram
    product then runs at twice the speed in half the memory, and W's entries stay within
    a few float32 roundings of the float64 ones (relative error at most 3e-7 on the
    benchmark's P for K = 1,000 to 10,000)."""
    P = square_float(P, "P")
    out = np.zeros(P.shape, dtype=np.dtype(dtype or _auto_dtype(P.shape[0])))
    return _perception_into(P, out, float(beta), None)


def block_contrast(
    M: np.ndarray, groups: np.ndarray, *, rows_per_block: int = 1024
) -> tuple[float, float, float]:
    """How a K×K matrix (P or W) reads by ground-truth group, off its diagonal:

    - ``within``: the mean of M[k, j] over pairs k ≠ j of the same group,
    - ``cross``: the mean over pairs of different groups,
    - ``spread``: the mean over rows k of the standard deviation of M[k, j] over the other
      members j of k's group (rows with at least two such j).

    A split along the groups needs ``within - cross`` to stand out against ``spread``. NaN
    where a quantity has no pair (one group: no cross pair). Computed from per-row sums
    over each group (a product with the K×G indicator, ``rows_per_block`` rows at a time in
    float64), so no K×K temporary is made beside M."""
    M = np.asarray(M)
    K = M.shape[0]
    _, gi = np.unique(np.asarray(groups), return_inverse=True)
    G = np.zeros((K, int(gi.max()) + 1 if K else 0))
    G[np.arange(K), gi] = 1.0
    own_sum, own_sq, all_sum = np.zeros(K), np.zeros(K), 0.0
    for start in range(0, K, rows_per_block):
        block = np.asarray(M[start : start + rows_per_block], dtype=np.float64)
        rows = np.arange(start, start + len(block))
        sums = block @ G
        all_sum += float(sums.sum())
        own_sum[rows] = sums[rows - start, gi[rows]]
        own_sq[rows] = (np.square(block) @ G)[rows - start, gi[rows]]
    diag = np.diagonal(M).astype(np.float64)
    own_sum -= diag
    own_sq -= np.square(diag)
    sizes = G.sum(axis=0)
    same_pairs = float(np.square(sizes).sum()) - K
    cross_pairs = float(K) * K - float(np.square(sizes).sum())
    within = float(own_sum.sum()) / same_pairs if same_pairs > 0 else math.nan
    cross_sum = all_sum - float(diag.sum()) - float(own_sum.sum())
    cross = cross_sum / cross_pairs if cross_pairs > 0 else math.nan
    peers = sizes[gi] - 1
    ok = peers >= 2
    if not ok.any():
        return within, cross, math.nan
    mean = own_sum[ok] / peers[ok]
    var = np.maximum(own_sq[ok] / peers[ok] - np.square(mean), 0.0)
    return within, cross, float(np.sqrt(var).mean())


#: clusters up to this size get W's block contrast every round (above, only at split tests:
#: W costs a K×K×K product)
DIAGNOSE_W_UP_TO = 512
