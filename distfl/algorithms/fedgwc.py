"""FedGWC: Federated Gaussian Weighting Clustering (Licciardi, Leo, Fanì, Caputo, Ciccone,
ICML 2025).

Each sampled client reports its loss process (the loss of each of its S local steps). The
server turns the loss processes of a cluster's sampled clients into Gaussian rewards
(eq. 1), tracks them in Gaussian weights (eq. 2) and in an interaction matrix P (eq. 3);
when P has converged (MSE between consecutive updates below ε) it builds the affinity W
from the unbiased perception vectors (eq. 4), runs spectral clustering for n = 2..n_max
and splits the cluster if the best Davies–Bouldin score is below 1 (Algorithm 1). Every
cluster keeps its own model, P sub-block and MSE, and splits again on its own
(Algorithm 2).

The pure math is in module-level functions; :class:`FedGWC` holds the per-cluster state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distfl.algorithms.base import ClientReports, ClusteringAlgorithm, RoundPlan, Split

# -- pure functions --------------------------------------------------------------------


def gaussian_rewards(losses: np.ndarray) -> np.ndarray:
    """Rewards ω_k of the n clients sampled in one cluster and round (eq. 1).

    ``losses`` is [n, S]. For each step s, m_s and σ_s² are the mean and the unbiased
    variance of the n losses; r_k^s = exp(-(l_k^s - m_s)² / (2 σ_s²)), 1 where σ_s² = 0
    (and where n < 2, when no variance is defined); ω_k = mean over s of r_k^s."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2:
        raise ValueError(f"losses must be [n, S], not shape {losses.shape}")
    n = losses.shape[0]
    if n < 2:
        return np.ones(n)
    mean = losses.mean(axis=0)
    var = losses.var(axis=0, ddof=1)
    dev2 = (losses - mean) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(var > 0, np.exp(-dev2 / (2.0 * np.where(var > 0, var, 1.0))), 1.0)
    return r.mean(axis=1)


def update_interaction(
    P: np.ndarray, sampled: np.ndarray, rewards: np.ndarray, alpha: float
) -> np.ndarray:
    """Eq. 3: P[k, j] ← (1-α) P[k, j] + α ω_k for every k, j in ``sampled``; a new array.

    ``sampled`` indexes rows/columns of P (positions within the cluster)."""
    out = np.array(P, dtype=np.float64, copy=True)
    idx = np.asarray(sampled, dtype=np.int64)
    w = np.asarray(rewards, dtype=np.float64)
    block = np.ix_(idx, idx)
    out[block] = (1.0 - alpha) * out[block] + alpha * w[:, None]
    return out


#: Up to this many clients the K×K work is float64 and the spectral embedding comes from a
#: dense eigensolver; above it the affinity is float32 (half the memory and time) and the
#: embedding comes from ARPACK on the affinity matrix itself (O(K²) per step, no copy).
SMALL_K = 2048

#: Row blocks of the elementwise passes hold about this many float64 numbers (32 MiB).
_BLOCK_ELEMS = 1 << 22

#: Dimension of the dominant row subspace that perception_distances takes out of the Gram
#: product (see _perception_into).
_DEFLATE_RANK = 16

#: Rows per strip of the Gram product in perception_distances.
_GRAM_ROWS = 2048


def _auto_dtype(K: int) -> type:
    return np.float64 if K <= SMALL_K else np.float32


def _block_rows(K: int, block_rows: int | None) -> int:
    if block_rows is not None:
        return max(1, int(block_rows))
    return max(1, _BLOCK_ELEMS // max(K, 1))


def _square_float(M: np.ndarray, name: str) -> np.ndarray:
    M = np.asarray(M)
    if M.dtype not in (np.float32, np.float64):
        M = M.astype(np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be square, not {M.shape}")
    return np.ascontiguousarray(M)


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
    from threadpoolctl import threadpool_limits

    K = P.shape[0]
    if K == 0:
        return out
    dt = out.dtype
    rows = _block_rows(K, block_rows)
    mu = P.mean(axis=0, dtype=np.float64)

    def xt_times(Y: np.ndarray) -> np.ndarray:  # (P - 1 μ)ᵀ Y, in P's dtype
        return (P.T @ Y.astype(P.dtype)).astype(np.float64) - mu[:, None] * Y.sum(axis=0)

    def x_times(Z: np.ndarray) -> np.ndarray:  # (P - 1 μ) Z, in P's dtype
        return (P @ Z.astype(P.dtype)).astype(np.float64) - mu @ Z

    r = min(_DEFLATE_RANK, K)
    Z = np.random.default_rng(0).standard_normal((K, r))
    with threadpool_limits(1, user_api="blas"):  # K×16: threads only add waiting
        Q = np.linalg.qr(xt_times(Z))[0]
    Z = xt_times(x_times(Q))  # one power iteration
    with threadpool_limits(1, user_api="blas"):
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
    sq = rsq + ysq
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
    P = _square_float(P, "P")
    out = np.zeros(P.shape, dtype=np.dtype(dtype))
    return _perception_into(P, out, None, block_rows)


def affinity(P: np.ndarray, beta: float, *, dtype: type | None = None) -> np.ndarray:
    """Eq. 4: W[k, j] = exp(-β ||v_k^j - v_j^k||²), symmetric, ones on the diagonal.

    ``dtype`` defaults to float64 for K <= :data:`SMALL_K` and float32 above: the K×K Gram
    product then runs at twice the speed in half the memory, and W's entries stay within
    a few float32 roundings of the float64 ones (relative error at most 3e-7 on the
    benchmark's P for K = 1,000 to 10,000)."""
    P = _square_float(P, "P")
    out = np.zeros(P.shape, dtype=np.dtype(dtype or _auto_dtype(P.shape[0])))
    return _perception_into(P, out, float(beta), None)


def spectral_embedding(
    W: np.ndarray, n_components: int, seed: int, *, tol: float | None = None
) -> np.ndarray:
    """The normalised-Laplacian spectral embedding of the symmetric affinity W, as
    ``sklearn.manifold.spectral_embedding(W, n_components, norm_laplacian=True,
    drop_first=False, random_state=seed)`` defines it (Ng, Jordan & Weiss 2001).

    The diagonal of W is ignored (self-loops), d_k = Σ_{j≠k} W[k, j] (1 where 0), and the
    embedding's columns are D^-1/2 u for the eigenvectors u of D^-1/2 W D^-1/2 with the
    ``n_components`` largest eigenvalues (the smallest of the normalised Laplacian), in
    decreasing order, each signed so that its largest-magnitude entry is positive.

    For K <= :data:`SMALL_K` a dense float64 eigensolver finds them; above, ARPACK (eigsh)
    on an operator that reads W in place (symv on its lower triangle: no K×K copy) with
    relative residual ``tol`` (default 1e-5 for a float32 W, whose entries carry ~1e-7
    rounding anyway, 1e-8 for float64), started from the vector scikit-learn starts from."""
    from scipy.linalg import blas, eigh
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh
    from threadpoolctl import threadpool_limits

    K = W.shape[0]
    diag = np.diagonal(W).astype(np.float64)
    if K <= SMALL_K:
        A = W.astype(np.float64, copy=True)
        np.fill_diagonal(A, 0.0)
        deg = A.sum(axis=0)
        dd = np.where(deg == 0, 1.0, np.sqrt(deg))
        A /= dd
        A /= dd[:, None]
        _, vecs = eigh(A, subset_by_index=[K - n_components, K - 1])
        del A
        U = vecs[:, ::-1]
    else:
        deg = W.sum(axis=1, dtype=np.float64) - diag
        dd = np.where(deg == 0, 1.0, np.sqrt(np.maximum(deg, 0.0)))
        symv = blas.ssymv if W.dtype == np.float32 else blas.dsymv
        WT = W.T  # Fortran-ordered view: symv reads its upper triangle, W's lower one

        def matvec(x: np.ndarray) -> np.ndarray:
            z = x.reshape(-1) / dd
            y = symv(1.0, WT, z.astype(W.dtype)).astype(np.float64)
            y -= diag * z
            y /= dd
            return y

        op = LinearOperator((K, K), matvec=matvec, dtype=np.float64)
        v0 = np.random.RandomState(seed).uniform(-1.0, 1.0, K)
        if tol is None:
            tol = 1e-5 if W.dtype == np.float32 else 1e-8
        # symv is memory-bound: a second thread gains little and, on a busy machine, waits
        with threadpool_limits(1, user_api="blas"):
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
        U = vecs[:, np.argsort(vals)[::-1]]
    emb = U / dd[:, None]
    peak = np.argmax(np.abs(emb), axis=0)
    emb *= np.sign(emb[peak, np.arange(emb.shape[1])])
    return emb


def davies_bouldin_rows(
    W: np.ndarray, labelings: list[np.ndarray], *, block_rows: int | None = None
) -> list[float]:
    """Davies–Bouldin index of each labelling (labels 0..n-1, every one used) of the rows of
    W, the value ``sklearn.metrics.davies_bouldin_score(W, labels)`` gives, without copying
    any cluster's rows: two passes over W (in float64 row blocks) for all labellings.

    Pass 1 gives the centroids C (Σn × K) and ||w_k||²; pass 2 the products W Cᵀ, so that
    each row's distance to its centroid is sqrt(||w||² - 2 w·c + ||c||²), the expansion
    scikit-learn's euclidean_distances uses too."""
    from sklearn.metrics.pairwise import euclidean_distances

    K = W.shape[0]
    labelings = [np.asarray(lab, dtype=np.int64) for lab in labelings]
    sizes = [np.bincount(lab) for lab in labelings]
    offs = np.cumsum([0] + [len(s) for s in sizes])
    M = np.zeros((K, int(offs[-1])))
    for i, (lab, size) in enumerate(zip(labelings, sizes, strict=True)):
        M[np.arange(K), offs[i] + lab] = 1.0 / size[lab]
    if W.dtype == np.float64 and block_rows is None:
        rows = K  # no conversion needed: BLAS on W itself
    else:
        rows = _block_rows(K, block_rows)
    C = np.zeros((int(offs[-1]), K))
    sqn = np.empty(K)
    for lo in range(0, K, rows):
        blk = W[lo : lo + rows].astype(np.float64, copy=False)
        C += M[lo : lo + rows].T @ blk
        sqn[lo : lo + rows] = np.einsum("ij,ij->i", blk, blk)
    X = np.empty((K, int(offs[-1])))
    for lo in range(0, K, rows):
        X[lo : lo + rows] = W[lo : lo + rows].astype(np.float64, copy=False) @ C.T
    csq = np.einsum("ij,ij->i", C, C)
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
    its first n components. W must be symmetric (float32 or float64: it is not copied)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    W = _square_float(W, "W")
    K = W.shape[0]
    n_hi = min(n_max, K - 1)
    scores = np.full(max(n_max - 1, 0), np.inf)
    labels_by_n: dict[int, np.ndarray] = {}
    if n_hi >= 2:
        maps = spectral_embedding(W, n_hi, seed)
        for n in range(2, n_hi + 1):
            km = KMeans(n_clusters=n, n_init=10, random_state=seed)
            # K×n is little work: OpenMP threads only add waiting (seconds on a busy machine)
            # and make the order of k-means' partial sums, hence its last bits, vary
            with threadpool_limits(1, user_api="openmp"):
                labels = km.fit_predict(maps[:, :n])
            sizes = np.bincount(labels, minlength=n)
            if len(np.unique(labels)) < 2 or sizes.min() < min_size:
                continue
            labels_by_n[n] = _canonical(labels)
        if labels_by_n:
            dbs = davies_bouldin_rows(W, list(labels_by_n.values()))
            for n, db in zip(labels_by_n, dbs, strict=True):
                scores[n - 2] = db
    if not np.isfinite(scores).any() or scores.min() >= threshold:
        return 1, np.zeros(K, dtype=np.int64), scores
    best = int(np.argmin(scores)) + 2
    return best, labels_by_n[best], scores


def _canonical(labels: np.ndarray) -> np.ndarray:
    """Relabel so that cluster ids appear in order of their first member (0, 1, ...)."""
    labels = np.asarray(labels)
    values, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(values), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(values))
    return rank[inverse.reshape(-1)]


def participants(size: int, rate: float, min_clients: int) -> int:
    """Clients a cluster samples per round: max(ρ|C|, 3) (Theorem A.5), at most |C|."""
    return min(size, max(min_clients, int(round(rate * size))))


def priority_sample(counts: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sample n of len(counts) positions without replacement, uniformly but with priority
    for rarely sampled clients (FedGWC section 4.1): a client's weight is
    1 / (1 + its count - the smallest count)."""
    counts = np.asarray(counts, dtype=np.float64)
    w = 1.0 / (1.0 + counts - counts.min())
    return np.sort(rng.choice(len(counts), size=n, replace=False, p=w / w.sum()))


# -- the algorithm -----------------------------------------------------------------


@dataclass
class ClusterState:
    members: np.ndarray  # global client ids, ascending
    P: np.ndarray  # [|C|, |C|] interaction sub-block
    mse: float = 1.0
    quiet: int = 0  # consecutive rounds with mse < ε
    last_sampled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class FedGWC(ClusteringAlgorithm):
    name = "fedgwc"

    def __init__(
        self,
        *,
        num_clients: int,
        clients_per_round: int,
        seed: int,
        beta: float = 0.5,
        epsilon: float = 1e-5,
        n_max: int = 5,
        alpha: float = 0.0,
        patience: int = 1,
        min_clients: int = 3,
        sampling: str = "priority",
        db_threshold: float = 1.0,
    ):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.rate = clients_per_round / num_clients
        self.alpha = alpha if alpha > 0 else self.rate
        self.beta = beta
        self.epsilon = epsilon
        self.n_max = n_max
        self.patience = patience
        self.min_clients = min_clients
        self.sampling = sampling
        self.db_threshold = db_threshold
        self.rng = np.random.default_rng([seed, 0xF6C])
        self.gamma = np.zeros(num_clients)  # Gaussian weights, eq. 2
        self.times_sampled = np.zeros(num_clients, dtype=np.int64)
        self.state: dict[str, ClusterState] = {
            "0": ClusterState(
                members=np.arange(num_clients, dtype=np.int64),
                P=np.zeros((num_clients, num_clients)),
            )
        }
        self.split_tests = 0
        self._round_stats: dict[str, dict[str, float]] = {}

    def clusters(self) -> dict[str, np.ndarray]:
        return {cid: st.members for cid, st in sorted(self.state.items())}

    def cluster_stats(self) -> dict[str, dict[str, float]]:
        """MSE of each cluster that trained in the last round (split parents included)."""
        return self._round_stats

    def plan_round(self, round_index: int) -> RoundPlan:
        train: dict[int, str] = {}
        for cid, st in sorted(self.state.items()):
            n = participants(len(st.members), self.rate, self.min_clients)
            if self.sampling == "priority":
                pos = priority_sample(self.times_sampled[st.members], n, self.rng)
            else:
                pos = np.sort(self.rng.choice(len(st.members), size=n, replace=False))
            st.last_sampled = pos
            for k in st.members[pos]:
                train[int(k)] = cid
        return RoundPlan(round=round_index, train=train)

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> list[Split]:
        row_of = {int(k): i for i, k in enumerate(reports.clients)}
        splits: list[Split] = []
        self._round_stats = {}
        for cid in sorted(self.state):
            st = self.state[cid]
            pos = st.last_sampled
            ids = st.members[pos]
            if len(ids) == 0:
                continue
            losses = reports.losses[[row_of[int(k)] for k in ids]]
            omega = gaussian_rewards(losses)
            self.gamma[ids] = (1.0 - self.alpha) * self.gamma[ids] + self.alpha * omega
            self.times_sampled[ids] += 1
            P_new = update_interaction(st.P, pos, omega, self.alpha)
            st.mse = float(np.mean((P_new - st.P) ** 2))
            st.P = P_new
            self._round_stats[cid] = {"mse": st.mse}
            st.quiet = st.quiet + 1 if st.mse < self.epsilon else 0
            if st.quiet >= self.patience and len(st.members) >= 2 * self.min_clients:
                split = self._try_split(cid, st, round_index)
                if split is not None:
                    splits.append(split)
                else:
                    st.quiet = 0  # wait another `patience` quiet rounds before retesting
        for split in splits:
            del self.state[split.parent]
        return splits

    def _try_split(self, cid: str, st: ClusterState, round_index: int) -> Split | None:
        self.split_tests += 1
        W = affinity(st.P, self.beta)
        n, labels, scores = choose_split(
            W,
            self.n_max,
            self.seed + round_index,
            min_size=self.min_clients,
            threshold=self.db_threshold,
        )
        if n == 1:
            return None
        children = {}
        for c in range(n):
            pos = np.flatnonzero(labels == c)
            child_id = f"{cid}.{c}"
            children[child_id] = st.members[pos]
            self.state[child_id] = ClusterState(
                members=st.members[pos], P=st.P[np.ix_(pos, pos)].copy()
            )
        info = {"db_scores": scores, "interaction": st.P, "affinity": W, "labels": labels}
        return Split(parent=cid, children=children, info=info)

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "gamma": self.gamma.copy(),
            "times_sampled": self.times_sampled.copy(),
            "split_tests": self.split_tests,
            "clusters": {
                cid: {"members": st.members, "P": st.P, "mse": st.mse, "quiet": st.quiet}
                for cid, st in self.state.items()
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.gamma = np.asarray(state["gamma"], dtype=np.float64).copy()
        self.times_sampled = np.asarray(state["times_sampled"], dtype=np.int64).copy()
        self.split_tests = int(state["split_tests"])
        self.state = {
            cid: ClusterState(
                members=np.asarray(c["members"], dtype=np.int64),
                P=np.asarray(c["P"], dtype=np.float64),
                mse=float(c["mse"]),
                quiet=int(c["quiet"]),
            )
            for cid, c in state["clusters"].items()
        }


__all__ = [
    "FedGWC",
    "affinity",
    "choose_split",
    "davies_bouldin_rows",
    "gaussian_rewards",
    "participants",
    "perception_distances",
    "priority_sample",
    "spectral_embedding",
    "update_interaction",
]
