"""Spectral clustering of a precomputed affinity, with the number of clusters chosen by the
Davies–Bouldin score: shared by FedGWC's split test and ``distfl report``'s embeddings.

:func:`spectral_embedding` is scikit-learn's normalised-Laplacian embedding (Ng, Jordan &
Weiss 2001), computed without copying a large affinity; :func:`davies_bouldin_rows` is
scikit-learn's Davies–Bouldin index of labellings of the affinity's rows, for all candidate
labellings in two passes over it; :func:`choose_split` runs both for n = 2..n_max.
"""

from __future__ import annotations

import math

import numpy as np

#: Up to this many points FedGWC's affinity is float64; above it float32 (half the memory
#: and time), and the spectral embedding's ARPACK reads it in float32.
SMALL_K = 2048

#: Up to this many points the spectral embedding comes from a dense eigensolver (LAPACK's
#: tridiagonal reduction, O(K³) whatever the number of vectors asked for, twice with the
#: gap check); above it ARPACK works on the affinity itself (O(K²) a step, no copy). At
#: K = 2,000 the dense one took 24-32 s (threaded, on a busy 2-core machine) where ARPACK
#: took 1 s; at 512 0.3-1.4 s against 0.1 s. (scikit-learn's spectral clustering, which
#: FedGWC's reference code calls, uses ARPACK by default.)
DENSE_EIGEN_UP_TO = 512

#: Eigenvalue gap below which the n-th and (n+1)-th eigenvalues of the normalised affinity
#: (largest 1) count as one: a split into n clusters is then not offered. Dense float64
#: eigenvalues are exact to ~1e-15; ARPACK's to its tolerance (ARPACK_GAP_TOL, or 10 times
#: the tolerance asked for, whichever is larger).
GAP_TOL = 1e-9
ARPACK_GAP_TOL = 1e-6

#: Row blocks of the elementwise passes hold about this many float64 numbers (32 MiB).
BLOCK_ELEMS = 1 << 22


_controller: tuple[int, object] | None = None


def one_thread(user_api: str):
    """``threadpoolctl.threadpool_limits(1, user_api=user_api)``, the same limit, through a
    ThreadpoolController kept while no module is imported: a fresh limit scans every loaded
    library (a few milliseconds, every round of FedGWC's diagnostics); a module imported
    since may have brought a library, so the controller is then made anew."""
    import sys

    from threadpoolctl import ThreadpoolController

    global _controller
    if _controller is None or _controller[0] != len(sys.modules):
        _controller = (len(sys.modules), ThreadpoolController())
    return _controller[1].limit(limits=1, user_api=user_api)


def row_block(K: int, rows: int | None = None) -> int:
    """Rows per block of an elementwise pass over a K×K matrix (``rows`` if given)."""
    if rows is not None:
        return max(1, int(rows))
    return max(1, BLOCK_ELEMS // max(K, 1))


def square_float(M: np.ndarray, name: str) -> np.ndarray:
    """``M`` as a C-ordered float32 or float64 square matrix (no copy when it is one)."""
    M = np.asarray(M)
    if M.dtype not in (np.float32, np.float64):
        M = M.astype(np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be square, not {M.shape}")
    return np.ascontiguousarray(M)


def spectral_embedding(
    W: np.ndarray, n_components: int, seed: int, *, tol: float | None = None,
    gaps: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The normalised-Laplacian spectral embedding of the symmetric affinity W, as
    ``sklearn.manifold.spectral_embedding(W, n_components, norm_laplacian=True,
    drop_first=False, random_state=seed)`` defines it (Ng, Jordan & Weiss 2001).

    The diagonal of W is ignored (self-loops), d_k = Σ_{j≠k} W[k, j] (1 where 0), and the
    embedding's columns are D^-1/2 u for the eigenvectors u of D^-1/2 W D^-1/2 with the
    ``n_components`` largest eigenvalues (the smallest of the normalised Laplacian), in
    decreasing order, each signed so that its largest-magnitude entry is positive.

    For K <= :data:`DENSE_EIGEN_UP_TO` a dense float64 eigensolver finds them; above, ARPACK
    (eigsh) on an operator that reads W in place (symv on its lower triangle: no K×K copy)
    with relative residual ``tol`` (default 1e-5 for a float32 W, whose entries carry ~1e-7
    rounding anyway, 1e-8 for float64), started from the vector scikit-learn starts from.
    Both give the same eigenvectors up to the solver's accuracy: each column is signed by
    its largest-magnitude entry, and a column whose eigenvalue is not separated from the
    next (where any rotation of the eigenspace would do) is reported undetermined.

    ``gaps``: also return, for n = 1..``n_components``, whether the span of the first n
    columns is determined by W: the n-th largest eigenvalue exceeds the (n+1)-th by more
    than :data:`GAP_TOL` (``ARPACK_GAP_TOL`` on the ARPACK path). Where it does not (a
    constant affinity, identical rows, a repeated eigenvalue), the eigensolver may return
    any basis of the eigenspace, and which one depends on the BLAS: no clustering read
    from those columns means anything."""
    if W.shape[0] <= DENSE_EIGEN_UP_TO:
        U, vals, dd, gap_tol = _dense_eigenpairs(W, n_components, gaps)
    else:
        U, vals, dd, gap_tol = _arpack_eigenpairs(W, n_components, seed, tol, gaps)
    emb = U / dd[:, None]
    peak = np.argmax(np.abs(emb), axis=0)
    emb *= np.sign(emb[peak, np.arange(emb.shape[1])])
    if gaps:
        return emb, np.diff(-vals[: n_components + 1]) > gap_tol
    return emb


def _dense_eigenpairs(W: np.ndarray, n_components: int, gaps: bool):
    """:func:`spectral_embedding`'s eigenpairs by a dense float64 eigensolver: (the
    eigenvectors, largest first; their eigenvalues, and the next one with ``gaps``; the
    degrees' square roots; the gap tolerance)."""
    from scipy.linalg import eigh

    K = W.shape[0]
    A = W.astype(np.float64, copy=True)
    np.fill_diagonal(A, 0.0)
    deg = A.sum(axis=0)
    dd = np.where(deg == 0, 1.0, np.sqrt(deg))
    A /= dd
    A /= dd[:, None]
    vals, vecs = eigh(A, subset_by_index=[K - n_components, K - 1])
    U = vecs[:, ::-1]
    vals = vals[::-1]
    if gaps:  # the next eigenvalue alone (the vectors' bits stay those of n_components)
        nxt = (
            eigh(A, subset_by_index=[K - n_components - 1] * 2, eigvals_only=True)
            if K > n_components
            else np.array([-np.inf])
        )
        vals = np.concatenate([vals, nxt])
    del A
    gap_tol = GAP_TOL
    return U, vals, dd, gap_tol


def _arpack_eigenpairs(W: np.ndarray, n_components: int, seed: int, tol: float | None,
                       gaps: bool):  # fmt: skip
    """:func:`spectral_embedding`'s eigenpairs by ARPACK on an operator that reads W in
    place; what :func:`_dense_eigenpairs` returns."""
    from scipy.linalg import blas
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    K = W.shape[0]
    diag = np.diagonal(W).astype(np.float64)
    deg = W.sum(axis=1, dtype=np.float64) - diag
    dd = np.where(deg == 0, 1.0, np.sqrt(np.maximum(deg, 0.0)))
    symv = blas.ssymv if W.dtype == np.float32 else blas.dsymv
    WT = W.T  # Fortran-ordered view: symv reads its upper triangle, W's lower one

    def product(z: np.ndarray) -> np.ndarray:
        return symv(1.0, WT, z.astype(W.dtype)).astype(np.float64)

    def matvec(x: np.ndarray) -> np.ndarray:
        z = x.reshape(-1) / dd
        y = product(z)
        y -= diag * z
        y /= dd
        return y

    op = LinearOperator((K, K), matvec=matvec, dtype=np.float64)
    v0 = np.random.RandomState(seed).uniform(-1.0, 1.0, K)
    if tol is None:
        tol = 1e-5 if W.dtype == np.float32 else 1e-8
    # symv is memory-bound: a second thread gains little and, on a busy machine, waits
    with one_thread("blas"):
        try:
            vals, vecs = eigsh(op, k=n_components, which="LA", v0=v0, tol=tol)
        except ArpackNoConvergence:
            ncv = min(K, max(4 * n_components + 1, 60))
            vals, vecs = eigsh(
                op,
                k=n_components,
                which="LA",
                v0=v0,
                tol=max(tol, 1e-5),
                ncv=ncv,
                maxiter=50 * K,
            )
    order = np.argsort(vals)[::-1]
    U = vecs[:, order]
    vals = vals[order]
    if gaps:
        vals = np.concatenate([vals, [_next_eigenvalue(matvec, U, vals, K, seed)]])
    gap_tol = max(ARPACK_GAP_TOL, 10.0 * tol)
    return U, vals, dd, gap_tol


def _next_eigenvalue(matvec, U: np.ndarray, vals: np.ndarray, K: int, seed: int) -> float:
    """The largest eigenvalue of the normalised affinity (``matvec``) after the ones in
    ``vals`` (eigenvectors U): the largest of (A + I) with those directions deflated, less 1.
    A's eigenvalues lie in [-1, 1], so A + I is positive semi-definite and the deflated
    directions (eigenvalue 0 there) cannot be taken for the next one."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    n = U.shape[1]
    if K <= n:
        return -math.inf
    shifted = vals + 1.0

    def deflated(x: np.ndarray) -> np.ndarray:
        x = x.reshape(-1)
        return matvec(x) + x - U @ (shifted * (U.T @ x))

    op = LinearOperator((K, K), matvec=deflated, dtype=np.float64)
    v0 = np.random.RandomState(seed + 1).uniform(-1.0, 1.0, K)
    with one_thread("blas"):
        top = eigsh(op, k=1, which="LA", v0=v0, tol=1e-6, maxiter=50 * K)[0]
    return float(top[0]) - 1.0


def davies_bouldin_rows(
    W: np.ndarray, labelings: list[np.ndarray], *, block_rows: int | None = None
) -> list[float]:
    """Davies–Bouldin index of each labelling (labels 0..n-1, every one used) of the rows of
    W, the value ``sklearn.metrics.davies_bouldin_score(W, labels)`` gives, without copying
    any cluster's rows: two passes over W (in float64 row blocks) for all labellings.

    Pass 1 gives the centroids C (Σn × K) and ||w_k||²; pass 2 the products W Cᵀ, so that
    each row's distance to its centroid is sqrt(||w||² - 2 w·c + ||c||²), the expansion
    scikit-learn's euclidean_distances uses too. W may be any K × d array of rows."""
    K = W.shape[0]
    labelings = [np.asarray(lab, dtype=np.int64) for lab in labelings]
    sizes = [np.bincount(lab) for lab in labelings]
    offs = np.cumsum([0] + [len(s) for s in sizes])
    M = np.zeros((K, int(offs[-1])))
    for i, (lab, size) in enumerate(zip(labelings, sizes, strict=True)):
        M[np.arange(K), offs[i] + lab] = 1.0 / size[lab]
    C, sqn, X = _row_products(W, M, block_rows)
    csq = np.einsum("ij,ij->i", C, C)
    return _davies_bouldin(labelings, sizes, offs, C, sqn, X, csq)


def _row_products(W: np.ndarray, M: np.ndarray, block_rows: int | None):
    """Centroids C = Mᵀ W, squared row norms and W Cᵀ of a dense W, in row blocks."""
    K = W.shape[0]
    if W.dtype == np.float64 and block_rows is None:
        rows = K  # no conversion needed: BLAS on W itself
    else:
        rows = row_block(W.shape[1], block_rows)
    C = np.zeros((M.shape[1], W.shape[1]))
    sqn = np.empty(K)
    for lo in range(0, K, rows):
        blk = W[lo : lo + rows].astype(np.float64, copy=False)
        C += M[lo : lo + rows].T @ blk
        sqn[lo : lo + rows] = np.einsum("ij,ij->i", blk, blk)
    X = np.empty((K, M.shape[1]))
    for lo in range(0, K, rows):
        X[lo : lo + rows] = W[lo : lo + rows].astype(np.float64, copy=False) @ C.T
    return C, sqn, X


def _davies_bouldin(labelings, sizes, offs, C, sqn, X, csq) -> list[float]:
    from sklearn.metrics.pairwise import euclidean_distances

    K = len(sqn)
    out = []
    for i, (lab, size) in enumerate(zip(labelings, sizes, strict=True)):
        col = offs[i] + lab
        d2 = -2.0 * X[np.arange(K), col]
        d2 += sqn
        d2 += csq[col]
        np.maximum(d2, 0.0, out=d2)
        intra = np.bincount(lab, weights=np.sqrt(d2), minlength=len(size)) / size
        cdist = euclidean_distances(C[offs[i] : offs[i + 1]])
        if np.allclose(intra, 0) or np.allclose(cdist, 0):
            out.append(0.0)
            continue
        cdist[cdist == 0] = np.inf
        combined = intra[:, None] + intra
        out.append(float(np.mean(np.max(combined / cdist, axis=1))))
    return out


def choose_split(
    W: np.ndarray, n_max: int, seed: int, *, min_size: int = 1, threshold: float = 1.0
) -> tuple[int, np.ndarray, np.ndarray]:
    """Algorithm 1: spectral clustering of the precomputed affinity W for n = 2..n_max, the
    Davies–Bouldin score of each labelling on the rows of W; split into argmin_n DB_n
    clusters if that score is below 1.

    Returns ``(n_clusters, labels, scores)``; ``scores[i]`` is DB for n = i + 2 (inf where
    n is not possible: too few points, or a cluster smaller than ``min_size``). With no
    score below ``threshold`` (the paper: 1), ``n_clusters = 1`` and all labels are 0.

    The spectral embedding (Ng, Jordan & Weiss 2001, as scikit-learn computes it: see
    :func:`spectral_embedding`) is built once with n_max components; each n runs k-means on
    its first n components. W must be symmetric (float32 or float64: it is not copied).

    A degenerate W proposes nothing, whatever the BLAS: an n whose first n eigenvectors are
    not determined by W (no gap after the n-th eigenvalue: a constant affinity, identical
    rows) is not tried. A W holding NaN or inf raises :class:`DegenerateAffinity`."""
    W = square_float(W, "W")
    K = W.shape[0]
    n_hi = min(n_max, K - 1)
    if n_hi >= 2 and not finite(W):
        raise DegenerateAffinity("the affinity holds NaN or infinite entries")
    if n_hi < 2:
        return _decide({}, max(n_max - 1, 0), threshold, K, W)
    maps, determined = spectral_embedding(W, n_hi, seed, gaps=True)
    ns = [n for n in range(2, n_hi + 1) if determined[n - 1]]  # the others: arbitrary columns
    return _decide(_kmeans(maps, ns, seed, min_size), max(n_max - 1, 0), threshold, K, W)


def choose_split_rows(
    Y: np.ndarray, n_max: int, seed: int, *, min_size: int = 1, threshold: float = 1.0
) -> tuple[int, np.ndarray, np.ndarray]:
    """:func:`choose_split` on points instead of an affinity: k-means on the first n
    columns of Y for n = 2..n_max (Y's columns ordered by decreasing variance, as the
    spectral embedding's are by eigenvalue) and the Davies–Bouldin score on Y's rows."""
    Y = np.asarray(Y, dtype=np.float64)
    K = Y.shape[0]
    n_hi = min(n_max, K - 1)
    if n_hi >= 2 and not finite(Y):
        raise DegenerateAffinity("the coordinates hold NaN or infinite entries")
    ns = list(range(2, n_hi + 1))
    return _decide(_kmeans(Y, ns, seed, min_size), max(n_max - 1, 0), threshold, K, Y)


def _kmeans(maps: np.ndarray, ns: list[int], seed: int, min_size: int) -> dict[int, np.ndarray]:
    """k-means labellings (canonical) of the first n columns of ``maps`` for each n in
    ``ns``, those with two clusters or more, none smaller than ``min_size``."""
    from sklearn.cluster import KMeans

    labels_by_n: dict[int, np.ndarray] = {}
    for n in ns:
        km = KMeans(n_clusters=n, n_init=10, random_state=seed)
        # K×n is little work: OpenMP threads only add waiting (seconds on a busy machine)
        # and make the order of k-means' partial sums, hence its last bits, vary
        with one_thread("openmp"):
            labels = km.fit_predict(maps[:, : min(n, maps.shape[1])])
        sizes = np.bincount(labels, minlength=n)
        if len(np.unique(labels)) < 2 or sizes.min() < min_size:
            continue
        labels_by_n[n] = _canonical(labels)
    return labels_by_n


def _decide(
    labels_by_n: dict[int, np.ndarray], width: int, threshold: float, K: int, rows: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray]:
    """The Davies–Bouldin score of each labelling on ``rows`` and the split they give."""
    scores = np.full(width, np.inf)
    if labels_by_n:
        dbs = davies_bouldin_rows(rows, list(labels_by_n.values()))
        for n, db in zip(labels_by_n, dbs, strict=True):
            scores[n - 2] = db
    if not np.isfinite(scores).any() or scores.min() >= threshold:
        return 1, np.zeros(K, dtype=np.int64), scores
    best = int(np.argmin(scores)) + 2
    return best, labels_by_n[best], scores


class DegenerateAffinity(ValueError):
    """The affinity cannot be clustered (NaN or infinite entries)."""


def finite(M: np.ndarray) -> bool:
    """Whether every entry of M is finite, a strip of rows at a time (no K×K temporary)."""
    if M.ndim < 2:
        return bool(np.isfinite(M).all())
    rows = row_block(M.shape[1])
    return all(np.isfinite(M[lo : lo + rows]).all() for lo in range(0, M.shape[0], rows))


def _canonical(labels: np.ndarray) -> np.ndarray:
    """Relabel so that cluster ids appear in order of their first member (0, 1, ...)."""
    labels = np.asarray(labels)
    values, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(values), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(values))
    return rank[inverse.reshape(-1)]


__all__ = [
    "DENSE_EIGEN_UP_TO",
    "SMALL_K",
    "DegenerateAffinity",
    "choose_split",
    "choose_split_rows",
    "finite",
    "davies_bouldin_rows",
    "one_thread",
    "row_block",
    "spectral_embedding",
    "square_float",
]
