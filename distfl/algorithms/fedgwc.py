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

The calibrated split test (``stable_tests``, ``reference_draws``; off by default, on in the
presets) adds two conditions to Algorithm 1's: the same partition proposed by consecutive
tests, and a score well below that of Gaussian references of P's rows (one cloud with P's
mean and covariance, SigClust's null): clients that differ along a continuum, such as
how hard their data are, give a Davies–Bouldin score near 0.5 whatever the dataset, and
only groups score far below their reference.

``interaction = "observed"`` keeps P as the entries of the pairs sampled together and reads
a missing entry as the row's mean (:mod:`distfl.algorithms.interaction`); where most of a
cluster's pairs never met, a split also needs its clusters separated by a valley.

Numerics: above 512 members the spectral embedding's eigenvectors come from ARPACK (as in
scikit-learn's spectral clustering, which the reference code calls), below from a dense
eigensolver (:data:`~distfl.spectral.DENSE_EIGEN_UP_TO`); above 512 rows a Gaussian
reference's affinity is float32 (:data:`REFERENCE_FLOAT32_ABOVE`), the real test's W is
float64 up to 2,048 members (:data:`~distfl.spectral.SMALL_K`).

The pure math is in module-level functions; :class:`FedGWC` holds the per-cluster state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distfl import spectral
from distfl.algorithms.base import (
    LOCAL_POOL,
    ClientReports,
    ClusteringAlgorithm,
    Params,
    ReportFigure,
    RoundPlan,
    RoundUpdate,
    ServerPool,
    Statistic,
    pooled,
    require,
    setting,
)
from distfl.algorithms.interaction import (
    BLOCKS_ABOVE,
    COORDINATES_ABOVE,
    ENTRY_BYTES,
    REFERENCE_ROWS,
    BlockStore,
    PairStore,
    gaussian_coordinates,
    imputed_coordinates,
    same_partition,
    store_from_state,
    stored_bytes,
    valley_test,
)
from distfl.algorithms.registry import register
from distfl.hierarchy import Split
from distfl.spectral import (
    DegenerateAffinity,
    choose_split,
    choose_split_rows,
    finite,
    row_block,
    square_float,
)

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


def round_rewards(losses: np.ndarray) -> np.ndarray:
    """Rewards of eq. 1 on each client's loss averaged over the round's S steps: one
    Gaussian reward per client and round (``reward = "round"``). The mean over steps takes
    the minibatch noise out of each step's loss before the reward, where eq. 1 per step
    lets it dominate a client seen only a few times."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2:
        raise ValueError(f"losses must be [n, S], not shape {losses.shape}")
    return gaussian_rewards(losses.mean(axis=1, keepdims=True))


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


#: Up to this many entries of P the MSE of eq. 3's change is the mean over a K×K array of
#: the change (the bits every run of this size has had); above, the block's squared change
#: over |C|², with no K×K temporaries each round (the same value up to rounding).
FULL_MSE_MAX = 2048 * 2048


def interaction_mse(change: np.ndarray, block, shape: tuple[int, int]) -> float:
    """Mean over all of P of the squared change of eq. 3, where only ``block`` (np.ix_
    positions) changed, by ``change``."""
    size = shape[0] * shape[1]
    if size <= FULL_MSE_MAX:
        diff = np.zeros(shape, dtype=np.float64)
        diff[block] = change
        return float(np.mean(np.square(diff, out=diff)))
    return float(np.sum(np.square(change)) / size)


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


def _reference_normals(K: int, rng: np.random.Generator):
    """The standard normal draws of one :func:`gaussian_reference` of K rows, a strip of rows
    at a time (one K×K beside X and the result): (first row, strip)."""
    rows = row_block(K)
    for lo in range(0, K, rows):
        yield lo, rng.standard_normal((min(rows, K - lo), K))


def gaussian_reference(P: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A draw of K rows from the Gaussian with the mean and the sample covariance of the K
    rows of P: μ + G X / sqrt(K - 1), X the centred rows, G a K×K standard normal matrix.
    One cloud with P's spread in every direction and no groups (the null of SigClust, Liu,
    Hayes, Nobel & Marron 2008): what the split test sees when clients differ along a
    continuum, such as how hard their data are, rather than fall into groups."""
    P = np.asarray(P, dtype=np.float64)
    K = P.shape[0]
    mu = P.mean(axis=0)
    X = P - mu
    out = np.empty((K, K))
    for lo, G in _reference_normals(K, rng):
        out[lo : lo + len(G)] = G @ X
    out /= math.sqrt(max(K - 1, 1))
    out += mu
    return out


# -- the references' draws as independent pieces (ServerPool) ------------------------------


def rng_state(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's whole state as six uint64 (what :func:`rng_at` restores)."""
    st = rng.bit_generator.state
    if st["bit_generator"] != "PCG64":
        raise TypeError(f"a reference's generator is PCG64, not {st['bit_generator']}")
    mask = (1 << 64) - 1
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s >> 64, s & mask, inc >> 64, inc & mask, st["has_uint32"],
                     st["uinteger"]], dtype=np.uint64)  # fmt: skip


def rng_at(state: np.ndarray) -> np.random.Generator:
    """The generator in the state :func:`rng_state` wrote."""
    v = [int(x) for x in state]
    bits = np.random.PCG64()
    bits.state = {
        "bit_generator": "PCG64",
        "state": {"state": (v[0] << 64) | v[1], "inc": (v[2] << 64) | v[3]},
        "has_uint32": v[4],
        "uinteger": v[5],
    }
    return np.random.Generator(bits)


def reference_states(rng: np.random.Generator, draws: int, skip) -> np.ndarray:
    """``[draws, 6]``: the state of ``rng`` at the start of each of ``draws`` references,
    ``skip(rng)`` drawing what one reference draws. The pieces are then independent: each
    starts where the sequential loop would have, so the references keep their bits
    whichever rank draws them."""
    out = np.empty((draws, 6), dtype=np.uint64)
    for i in range(draws):
        out[i] = rng_state(rng)
        skip(rng)
    return out


#: Above this many rows a Gaussian reference's affinity is float32 (as every affinity is
#: above spectral.SMALL_K), and its spectral embedding reads it in float32: a reference is
#: a random draw whose best score only enters the references' median, and float32 entries
#: are within a few roundings of the float64 ones (see :func:`affinity`). Up to it, and for
#: the real test's W up to SMALL_K, float64 as before. A float64 K×K Gram product of each
#: reference made a test of 2,000 members cost more than one of 2,100 (float32).
REFERENCE_FLOAT32_ABOVE = spectral.DENSE_EIGEN_UP_TO


@pooled
def reference_piece(payload: dict[str, np.ndarray], i: int) -> np.ndarray:
    """Reference i of :func:`reference_score`: the best split score of a Gaussian reference
    of P (payload ``P``, ``states``, ``beta`` [1], ``ints`` [n_max, seed, min_size]); its
    affinity is float32 above :data:`REFERENCE_FLOAT32_ABOVE` rows."""
    n_max, seed, min_size = (int(v) for v in payload["ints"])
    ref = gaussian_reference(payload["P"], rng_at(payload["states"][i]))
    K = ref.shape[0]
    dtype = np.float32 if K > REFERENCE_FLOAT32_ABOVE else _auto_dtype(K)
    W = affinity(ref, float(payload["beta"][0]), dtype=dtype)
    return np.array([best_split_score(W, n_max, seed, min_size)])


@pooled
def coordinates_piece(payload: dict[str, np.ndarray], i: int) -> np.ndarray:
    """Piece i of :func:`coordinates_reference`: reference i's best score (a Gaussian draw of
    ``rows`` rows from the coordinates ``Y``), or, for the last piece, the score of the real
    rows ``real`` (payload ``ints`` [n_max, seed, min_size, rows])."""
    n_max, seed, min_size, rows = (int(v) for v in payload["ints"])
    states = payload["states"]
    Y = payload["real"] if i == len(states) else gaussian_coordinates(
        payload["Y"], rows, rng_at(states[i]))  # fmt: skip
    return np.array([lowest_score(coordinates_split(Y, n_max=n_max, seed=seed,
                                                    min_size=min_size)[2])])  # fmt: skip


def lowest_score(scores: np.ndarray) -> float:
    """The best (lowest) of :func:`~distfl.spectral.choose_split`'s Davies–Bouldin scores,
    inf when no split is possible."""
    return float(scores.min()) if len(scores) else math.inf


def best_split_score(W: np.ndarray, n_max: int, seed: int, min_size: int) -> float:
    """The lowest Davies–Bouldin score of Algorithm 1's candidate splits of W (inf when
    none is possible)."""
    return lowest_score(choose_split(W, n_max, seed, min_size=min_size, threshold=math.inf)[2])


def coordinates_split(
    Y: np.ndarray, *, n_max: int, seed: int, min_size: int, threshold: float = math.inf
) -> tuple[int, np.ndarray, np.ndarray]:
    """Algorithm 1's candidates on low-rank coordinates of P's rows (:func:`~distfl.
    algorithms.interaction.imputed_coordinates`), whose distances are those of eq. 4:
    k-means on the coordinates for n = 2..n_max, the Davies–Bouldin score on them (see
    :func:`~distfl.spectral.choose_split_rows`)."""
    return choose_split_rows(Y, n_max, seed, min_size=min_size, threshold=threshold)


def coordinates_reference(
    Y: np.ndarray, *, n_max: int, seed: int, min_size: int, draws: int,
    rng: np.random.Generator, pool: ServerPool = LOCAL_POOL,
) -> tuple[float, float]:  # fmt: skip
    """(the real coordinates' best score, the references' median) compared on the same
    number of rows: at most :data:`~distfl.algorithms.interaction.REFERENCE_ROWS`, the real
    ones a random subsample of them where there are more. Each reference is that many draws
    from the Gaussian with the coordinates' mean and covariance. The references and the
    real score are independent pieces, spread over ``pool``'s ranks."""
    rows = min(len(Y), REFERENCE_ROWS)
    real = Y if rows == len(Y) else Y[np.sort(rng.choice(len(Y), rows, replace=False))]
    d = Y.shape[1]
    states = reference_states(rng, draws, lambda g: g.standard_normal((rows, d)))
    payload = {"Y": np.asarray(Y, dtype=np.float64), "real": np.asarray(real, np.float64),
               "states": states,
               "ints": np.array([n_max, seed, min_size, rows], dtype=np.int64)}  # fmt: skip
    scores = pool.map(coordinates_piece, payload, draws + 1, 1)[:, 0]
    return float(scores[draws]), float(np.median(scores[:draws]))


def reference_score(
    P: np.ndarray, *, beta: float, n_max: int, seed: int, min_size: int, draws: int,
    rng: np.random.Generator, pool: ServerPool = LOCAL_POOL,
) -> float:  # fmt: skip
    """The median, over ``draws`` Gaussian references of P's rows (:func:`gaussian_reference`),
    of the best split score that Algorithm 1 finds in them (their affinity by eq. 4, the
    same spectral clustering and Davies–Bouldin score as the real test). Each reference is
    an independent piece, spread over ``pool``'s ranks."""
    P = np.asarray(P)
    K = P.shape[0]

    def skip(g: np.random.Generator) -> None:
        for _ in _reference_normals(K, g):
            pass

    payload = {"P": P, "states": reference_states(rng, draws, skip),
               "beta": np.array([beta], dtype=np.float64),
               "ints": np.array([n_max, seed, min_size], dtype=np.int64)}  # fmt: skip
    return float(np.median(pool.map(reference_piece, payload, draws, 1)[:, 0]))


# -- the algorithm -----------------------------------------------------------------


@dataclass(frozen=True)
class FedGWCParams(Params):
    """FedGWC's keys; the defaults follow the paper."""

    beta: float = setting(0.5, "> 0", "β of the RBF affinity (paper grid {0.1, 0.5, 1, 2, 4})")
    epsilon: float = setting(
        1e-4,
        "> 0",
        "a cluster is tested for a split when the MSE between consecutive interaction matrices is "
        "below ε for `patience` rounds (paper: 1e-5 CIFAR, 1e-4 Landmarks, 1e-2 iNaturalist)",
    )
    n_max: int = setting(5, "int ≥ 2", "spectral clustering is tried for n = 2..n_max clusters")
    alpha: float = setting(
        0.0,
        "[0, 1)",
        "α of the Gaussian weights and interaction matrix; 0 means the participation rate "
        "`clients_per_round / num_clients`, at least `min_alpha` (the paper's choices)",
    )
    min_alpha: float = setting(
        0.1,
        "[0, 1)",
        "the smallest α that `alpha = 0` gives: the paper uses the participation rate in its "
        "100-client runs and 0.1 in its large ones (10 of 823 and of 2,714 clients a round)",
    )
    interaction: str = setting(
        "auto",
        "`auto`, `dense`, `observed`",
        "`dense`: the paper's K×K P, MSE over all K² entries, missing entries 0; `observed`: P "
        "holds only the pairs sampled together (memory that follows the rounds, not K²), its "
        "MSE is over those entries, and the split test reads a missing entry as the row's mean "
        "of observed ones (see [Population scale](scale.md#fedgwc-on-observed-entries)); "
        "`auto`: `observed` where the population is far larger than the cohort "
        "(`clients_per_round` at most 5% of `num_clients`), else `dense`",
    )
    reward: str = setting(
        "auto",
        "`auto`, `steps`, `round`",
        "`steps`: eq. 1 at every local step, averaged over the S steps (the paper's); `round`: "
        "eq. 1 on each client's loss averaged over the round's S steps, one reward per client "
        "and round; `auto`: `round` where the population is far larger than the cohort (as "
        "`interaction`), else `steps` (see [FedGWC where the population is far larger than "
        "the cohort](algorithms.md#fedgwc-where-the-population-is-far-larger-than-the-cohort))",
    )
    min_observations: int = setting(
        3,
        "int ≥ 0",
        "a cluster is tested only when each of its members has been sampled at least this many "
        "times (0: no such condition, the paper's)",
    )
    patience: int = setting(
        10,
        "int ≥ 1",
        "consecutive rounds below ε before a test; after a test that does not split, the count "
        "starts again",
    )
    min_clients: int = setting(
        3,
        "int ≥ 1",
        "clients sampled per cluster and round at least (the paper's privacy floor, ρ_n = max(ρ, "
        "3/|C_n|)); also the smallest cluster a split may create",
    )
    sampling: str = setting(
        "priority",
        "`priority`, `uniform`",
        "per-cluster sampling; `priority` favours rarely sampled clients (weight 1 / (1 + times "
        "sampled − fewest))",
    )
    db_threshold: float = setting(
        1.0, "> 0", "split only when the best Davies–Bouldin score is below this (the paper: 1)"
    )
    stable_tests: int = setting(
        2,
        "int ≥ 1",
        "split only when this many consecutive split tests of the cluster propose the same "
        "partition (1: the paper's, each test decides alone); see [the calibrated split "
        "test](algorithms.md#the-calibrated-split-test)",
    )
    reference_draws: int = setting(
        15,
        "int ≥ 0",
        "Gaussian references drawn for a split test (0: none, the paper's test); with B ≥ 1 "
        "a split also needs the best Davies–Bouldin score below `reference_ratio` times the "
        "median of the B references' (the same test on a Gaussian cloud with the rows' mean "
        "and covariance of P: one group, no clusters)",
    )
    reference_ratio: float = setting(
        0.5,
        "(0, 1]",
        "how far below the Gaussian references' median Davies–Bouldin score a split's must be",
    )

    choices = {
        "sampling": ("priority", "uniform"),
        "interaction": ("auto", "dense", "observed"),
        "reward": ("auto", "steps", "round"),
    }
    #: what a run file written before these keys (or before their defaults changed) did
    stored_defaults = {
        "stable_tests": 1,
        "reference_draws": 0,
        "interaction": "dense",
        "reward": "steps",
        "min_observations": 0,
        "min_alpha": 0.0,
    }

    def check(self, config) -> None:
        require(self.beta > 0, "beta", self.beta, "positive")
        require(self.epsilon > 0, "epsilon", self.epsilon, "positive")
        require(self.n_max >= 2, "n_max", self.n_max, "at least 2")
        require(0.0 <= self.alpha <= 0.999999, "alpha", self.alpha,
                "in [0, 1) (0: the participation rate)")  # fmt: skip
        require(self.patience >= 1, "patience", self.patience, "at least 1")
        require(0.0 <= self.min_alpha <= 0.999999, "min_alpha", self.min_alpha, "in [0, 1)")
        require(self.min_observations >= 0, "min_observations", self.min_observations,
                "at least 0")  # fmt: skip
        require(self.db_threshold > 0, "db_threshold", self.db_threshold, "positive (paper: 1)")
        require(self.min_clients >= 1, "min_clients", self.min_clients, "at least 1")
        require(self.stable_tests >= 1, "stable_tests", self.stable_tests, "at least 1")
        require(0 <= self.reference_draws <= MAX_REFERENCE_DRAWS, "reference_draws",
                self.reference_draws, f"between 0 and {MAX_REFERENCE_DRAWS}")  # fmt: skip
        require(0.0 < self.reference_ratio <= 1.0, "reference_ratio", self.reference_ratio,
                "in (0, 1]")  # fmt: skip


#: the population is far larger than the cohort where at most this share of it is sampled
#: a round: each client then comes back a few times in a run, not dozens (``auto`` keys)
SPARSE_RATE = 0.05


def sparse_federation(num_clients: int, clients_per_round: int) -> bool:
    """Whether ``clients_per_round`` is at most :data:`SPARSE_RATE` of ``num_clients``."""
    return clients_per_round <= SPARSE_RATE * num_clients


#: what each ``auto`` key becomes: (where the population is far larger than the cohort,
#: elsewhere)
AUTO = {"interaction": ("observed", "dense"), "reward": ("round", "steps")}


def resolved(key: str, value: str, num_clients: int, clients_per_round: int) -> str:
    """Key ``key``'s value for this federation: an ``auto`` one as :data:`AUTO` says, any
    other value as it is."""
    if value != "auto":
        return value
    sparse, dense = AUTO[key]
    return sparse if sparse_federation(num_clients, clients_per_round) else dense


#: consecutive proposals count as the same partition when at most one client in this many
#: changed side (none below this many clients): a partition of thousands of clients,
#: whose rows gain observations between tests, never repeats to the client
STABLE_SHARE = 200
#: with observed entries, the test where at least this share of the cluster's pairs were
#: sampled together is the Gaussian reference's; below, the valley test's
DENSE_SHARE = 0.5

#: what a split test that cannot be computed raises (recorded as ``test_failed``, no proposal)
NUMERICAL_FAILURES = (np.linalg.LinAlgError, ArithmeticError, ValueError, RuntimeError)

#: the most Gaussian references a split test may draw (each costs a spectral clustering)
MAX_REFERENCE_DRAWS = 999


@dataclass
class ClusterState:
    """FedGWC's own state of one cluster (its members are the tree's)."""

    #: [|C|, |C|] interaction sub-block, rows in the order of the members (``dense``), or its
    #: observed entries (``observed``)
    P: np.ndarray | PairStore | BlockStore
    mse: float = 1.0
    quiet: int = 0  # consecutive rounds with mse < ε
    last_sampled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: the partition the last split tests proposed (labels, None: no proposal) and how many
    #: consecutive tests proposed it
    proposal: np.ndarray | None = None
    repeats: int = 0


@register
class FedGWC(ClusteringAlgorithm):
    name = "fedgwc"
    Params = FedGWCParams
    #: P (float64), the affinity and the Gram product (float32) of a split test
    pair_bytes = 16

    @classmethod
    def working_pair_bytes(cls, params: Params) -> int:
        """With Gaussian references, a split test also holds, beside its own P and W, a
        reference's rows (float64) and either the centred rows they are drawn from (float64)
        or their affinity and its Gram product (float32 above SMALL_K). With observed
        entries, each costs :data:`~distfl.algorithms.interaction.ENTRY_BYTES`."""
        if getattr(params, "interaction", "dense") == "observed":
            return ENTRY_BYTES
        return cls.pair_bytes + (16 if getattr(params, "reference_draws", 0) else 0)

    @classmethod
    def pair_memory(cls, params: Params, *, num_clients: int, clients_per_round: int,
                    rounds: int) -> int:  # fmt: skip
        """``dense``: K² pairs. ``observed`` (``auto`` resolved for this federation): what the
        rounds can add (:func:`~distfl.algorithms.interaction.stored_bytes`: entries up to
        BLOCKS_ABOVE clients, above, the rounds and the pairs sampled together more than
        once) and the largest dense matrices: the imputed P and W of a cluster of up to
        DIAGNOSE_W_UP_TO clients (its diagnostics), their Gram product, and a reference's
        twice that in a split test of up to COORDINATES_ABOVE clients; above, the test works
        on low-rank coordinates of the rows (a few hundred bytes a client)."""
        interaction = resolved("interaction", getattr(params, "interaction", "dense"),
                               num_clients, clients_per_round)  # fmt: skip
        if interaction != "observed":
            return super().pair_memory(
                params, num_clients=num_clients, clients_per_round=clients_per_round, rounds=rounds
            )
        stored = stored_bytes(num_clients, clients_per_round, rounds,
                              params.min_clients, params.n_max)  # fmt: skip
        dense = min(num_clients, max(DIAGNOSE_W_UP_TO, COORDINATES_ABOVE)) ** 2 * 32
        return stored + dense + num_clients * 512

    #: each cluster's MSE of P against ε, the block contrast of its P and W by group, and
    #: the scores of its split tests
    figures = (
        ReportFigure(
            ReportFigure.TRAINING, "mse.png", "distfl.algorithms.fedgwc_figures:mse", stats=("mse",)
        ),
        ReportFigure(
            ReportFigure.WHY,
            "contrast.png",
            "distfl.algorithms.fedgwc_figures:contrast",
            stats=("p_within", "p_cross", "p_spread", "w_within", "w_cross", "w_spread"),
        ),
        ReportFigure(
            ReportFigure.WHY,
            "db-tests.png",
            "distfl.algorithms.fedgwc_figures:db_tests",
            stats=("db", "db_reference"),
        ),
        # at each split: the members in the spectral embedding of W, the DB score of each n
        ReportFigure(
            ReportFigure.WHY,
            "embedding.png",
            "distfl.algorithms.fedgwc_figures:split_embedding",
            per_split=True,
        ),
        ReportFigure(
            ReportFigure.WHY, "db.png", "distfl.algorithms.fedgwc_figures:split_db", per_split=True
        ),
    )
    split_matrices = (("interaction", "interaction matrix P"), ("affinity", "affinity W"))
    split_datasets = (
        ("db_scores", "[n_max - 1]", "Davies-Bouldin score for n = 2..n_max (inf: not possible)"),
        ("interaction", "[n, n]", "P (float32 above 2,048 members)"),
        ("affinity", "[n, n]", "W (float32 above 2,048 members)"),
        ("labels", "[n]", "the child of each member"),
        (
            "coordinates",
            "[n, n_max - 1]",
            "with observed entries above 2,048 members: the "
            "spectral coordinates, in place of P and W",
        ),  # fmt: skip
    )
    statistics = (
        Statistic("mse", "MSE of the cluster's interaction matrix P between rounds", True),
        Statistic("p_within", "mean of P over same-group pairs", True),
        Statistic("p_cross", "mean of P over cross-group pairs", True),
        Statistic("p_spread", "mean spread of a row's same-group entries of P", True),
        Statistic(
            "w_within", "the same of W (every round up to 512 members, else at split tests)", True
        ),  # fmt: skip
        Statistic("w_cross", "the same of W", True),
        Statistic("w_spread", "the same of W", True),
        Statistic("db", "the best Davies-Bouldin score of a split test"),
        Statistic(
            "db_reference", "the Gaussian references' median score (the calibrated split test)"
        ),
        Statistic("test_failed", "1 where a split test could not be computed (no proposal)"),
        Statistic(
            "valley",
            "with observed entries: the valley between the proposed clusters in P's coordinates",
        ),
        Statistic("valley_reference", "the same of uniform references"),
    )

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        K, cohort = self.num_clients, self.clients_per_round
        self.rate = cohort / K
        # α = 0 means the participation rate, at least min_alpha; the auto keys resolved
        self.alpha = self.alpha if self.alpha > 0 else max(self.rate, self.min_alpha)
        self.interaction = resolved("interaction", self.interaction, K, cohort)
        self.observed = self.interaction == "observed"
        self.reward = resolved("reward", self.reward, K, cohort)
        self._rewards = round_rewards if self.reward == "round" else gaussian_rewards
        self.rng = np.random.default_rng([self.seed, 0xF6C])
        self.gamma = np.zeros(K)  # Gaussian weights, eq. 2
        self.times_sampled = np.zeros(K, dtype=np.int64)
        self.state: dict[str, ClusterState] = {"0": ClusterState(P=self._empty_p(K))}
        self.split_tests = 0

    def _empty_p(self, n: int) -> np.ndarray | PairStore | BlockStore:
        """P⁰ = 0: dense, or observed entries (above BLOCKS_ABOVE clients, where neither the
        split test nor the diagnostics need them one by one, kept as the rounds that wrote
        them)."""
        if not self.observed:
            return np.zeros((n, n))
        return BlockStore(n) if n > BLOCKS_ABOVE else PairStore(n)

    def _dense_p(self, st: ClusterState, up_to: int | None = None) -> np.ndarray | None:
        """The cluster's P as an array (observed: missing entries the row's mean), None where
        the test works on coordinates instead (observed, more than COORDINATES_ABOVE members,
        or ``up_to``)."""
        if not self.observed:
            return st.P
        return st.P.dense() if st.P.n <= (COORDINATES_ABOVE if up_to is None else up_to) else None

    def plan(self, round_index: int) -> RoundPlan:
        train: dict[int, str] = {}
        for cid, st in sorted(self.state.items()):
            members = self.tree.members(cid)
            n = participants(len(members), self.rate, self.min_clients)
            if self.sampling == "priority":
                pos = priority_sample(self.times_sampled[members], n, self.rng)
            else:
                pos = np.sort(self.rng.choice(len(members), size=n, replace=False))
            st.last_sampled = pos
            for k in members[pos]:
                train[int(k)] = cid
        return RoundPlan(round=round_index, train=train)

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> RoundUpdate:
        """Eq. 1-3 on each cluster's sampled clients; the split test where P has converged.
        ``stats``: the MSE of each cluster that trained (split parents included), and the
        block contrast of its P and W by ground-truth group (:meth:`_diagnose`)."""
        row_of = {int(k): i for i, k in enumerate(reports.clients)}
        out = RoundUpdate()
        for cid in sorted(self.state):
            st = self.state[cid]
            pos = st.last_sampled
            members = self.tree.members(cid)
            ids = members[pos]
            if len(ids) == 0:
                continue
            losses = reports.losses[[row_of[int(k)] for k in ids]]
            omega = self._rewards(losses)
            self.gamma[ids] = (1.0 - self.alpha) * self.gamma[ids] + self.alpha * omega
            self.times_sampled[ids] += 1
            # eq. 3 in place: only the sampled block changes
            if self.observed:  # the MSE over the entries observed so far
                st.mse = st.P.update(pos, omega, self.alpha) / len(st.P)
            else:
                block = np.ix_(pos, pos)
                old = st.P[block]
                new = (1.0 - self.alpha) * old + self.alpha * omega[:, None]
                st.mse = interaction_mse(new - old, block, st.P.shape)
                st.P[block] = new
            out.stats[cid] = {"mse": st.mse}
            st.quiet = st.quiet + 1 if st.mse < self.epsilon else 0
            testing = (
                st.quiet >= self.patience
                and len(members) >= 2 * self.min_clients
                and int(self.times_sampled[members].min()) >= self.min_observations
            )
            # observed entries are made dense for the diagnostics up to DIAGNOSE_W_UP_TO
            # members (and for a test up to COORDINATES_ABOVE, no more than that)
            P = self._dense_p(st, DIAGNOSE_W_UP_TO)
            dense_test = testing and (not self.observed or len(members) <= COORDINATES_ABOVE)
            W = self._diagnose(out.stats[cid], P, members, dense_test)
            if testing:
                split = self._try_split(cid, st, round_index, W, out.stats[cid])
                if split is not None:
                    out.splits.append(split)
                else:
                    st.quiet = 0  # wait another `patience` quiet rounds before retesting
        for split in out.splits:
            del self.state[split.parent]
        return out

    def _diagnose(
        self, stats: dict[str, float], P: np.ndarray, members: np.ndarray, testing: bool
    ) -> np.ndarray | None:
        """The block contrast of P and W by ground-truth group (:func:`block_contrast`) into
        ``stats`` (p_within, p_cross, p_spread, w_within, w_cross, w_spread), when the
        federation's groups are known; returns W where it was computed (every round up to
        :data:`DIAGNOSE_W_UP_TO` members, and for a split test)."""
        groups = self.federation.groups
        W = None
        if P is None:
            return None
        if testing or (groups is not None and len(members) <= DIAGNOSE_W_UP_TO):
            if not finite(P):
                return None  # the split test records it
            W = affinity(P, self.beta)
        if groups is None:
            return W
        g = groups[members]
        for name, M in (("p", P), ("w", W)):
            if M is None:
                continue
            within, cross, spread = block_contrast(M, g)
            stats.update({f"{name}_within": within, f"{name}_cross": cross,
                          f"{name}_spread": spread})  # fmt: skip
        return W

    def _try_split(
        self,
        cid: str,
        st: ClusterState,
        round_index: int,
        W: np.ndarray | None = None,
        stats: dict[str, float] | None = None,
    ) -> Split | None:
        """Algorithm 1 on the cluster's W: a partition is proposed when the best
        Davies–Bouldin score is below ``db_threshold``, and made when ``stable_tests``
        consecutive tests proposed it and (with ``reference_draws``) the score is below
        ``reference_ratio`` times the Gaussian references' (:meth:`_beats_reference`).
        ``stats`` gets ``db``, the best score, and ``db_reference``, the references'."""
        self.split_tests += 1
        try:
            P, W, Y, (n, labels, scores) = self._split_candidates(st, round_index, W)
        except NUMERICAL_FAILURES:
            # a test that cannot be computed is recorded as its outcome and proposes nothing
            if stats is not None:
                stats["test_failed"] = 1.0
            st.proposal, st.repeats = None, 0
            return None
        best = lowest_score(scores)
        if stats is not None and math.isfinite(best):
            stats["db"] = best
        if n == 1:
            st.proposal, st.repeats = None, 0
            return None
        same = st.proposal is not None and same_partition(
            st.proposal, labels, tolerance=len(labels) // STABLE_SHARE
        )
        st.proposal, st.repeats = labels, (st.repeats + 1 if same else 1)
        if st.repeats < self.stable_tests:
            return None
        try:
            if self.observed and self._sparse(st):
                beats = self._separated(st, round_index, labels, stats, Y)
            else:
                beats = self._beats_reference(st, round_index, best, stats, P, Y)
        except NUMERICAL_FAILURES:
            if stats is not None:
                stats["test_failed"] = 1.0
            return None
        if not beats:
            return None
        members = self.tree.members(cid)
        children = {}
        for c in range(n):
            pos = np.flatnonzero(labels == c)
            children[f"{cid}.{c}"] = members[pos]
            sub = st.P.subset(pos) if self.observed else st.P[np.ix_(pos, pos)].copy()
            self.state[f"{cid}.{c}"] = ClusterState(P=sub)
        info: dict[str, np.ndarray] = {"db_scores": scores, "labels": labels}
        if P is not None:
            # above SMALL_K clients the run file keeps the matrices in float32 (W already is)
            info["interaction"] = P if len(members) <= spectral.SMALL_K else P.astype(np.float32)
            info["affinity"] = W
        else:  # the coordinates the test clustered (there is no W)
            info["coordinates"] = Y
        return self.tree.split(cid, children, round_index, info)

    @staticmethod
    def _sparse(st: ClusterState) -> bool:
        """Whether fewer than :data:`DENSE_SHARE` of the cluster's pairs of clients were
        ever sampled together (observed entries): most of each row is then imputed."""
        n = st.P.n
        if n < 2:
            return False
        return st.P.off_diagonal() < DENSE_SHARE * n * (n - 1)

    def _separated(
        self,
        st: ClusterState,
        round_index: int,
        labels: np.ndarray,
        stats: dict[str, float] | None,
        Y: np.ndarray | None,
    ) -> bool:
        """Where most of P is imputed, whether the proposed clusters are separated by a
        valley in the coordinates of P's rows (:func:`~distfl.algorithms.interaction.
        valley_test` against ``reference_draws`` uniform samples); True without references.
        ``stats`` gets ``valley`` and ``valley_reference``."""
        if not self.reference_draws:
            return True
        if Y is None:
            Y = imputed_coordinates(st.P, max(self.n_max - 1, 1), self.seed + round_index)
        rng = np.random.default_rng([self.seed, 0x5D, round_index, self.split_tests])
        gap, reference = valley_test(Y, labels, draws=self.reference_draws, rng=rng)
        if stats is not None:
            stats["valley"], stats["valley_reference"] = gap, reference
        return gap > reference

    def _split_candidates(self, st: ClusterState, round_index: int, W: np.ndarray | None):
        """(P, W, Y, choose_split's triple) of a split test: P the dense (imputed) matrix and
        W its affinity, or, above COORDINATES_ABOVE observed members, Y the coordinates of P's
        rows (P and W None). Raises DegenerateAffinity for a P or W that holds NaN or inf."""
        seed = self.seed + round_index
        P = self._dense_p(st)
        if P is None:
            if not st.P.finite():
                raise DegenerateAffinity("P holds NaN or infinite entries")
            Y = imputed_coordinates(st.P, max(self.n_max - 1, 1), seed)
            scale = st.P.scale()
            if math.sqrt(float(Y.var(axis=0).sum())) <= 1e-9 * max(scale, 1e-300):
                # every row alike: rounding noise, whose neighbour graph is arbitrary
                return None, None, Y, (1, np.zeros(st.P.n, dtype=np.int64), np.full(
                    max(self.n_max - 1, 0), np.inf))  # fmt: skip
            split = coordinates_split(
                Y, n_max=self.n_max, seed=seed, min_size=self.min_clients,
                threshold=self.db_threshold,
            )  # fmt: skip
            return None, None, Y, split
        if W is None:
            if not finite(P):
                raise DegenerateAffinity("P holds NaN or infinite entries")
            W = affinity(P, self.beta)
        split = choose_split(W, self.n_max, seed, min_size=self.min_clients,
                             threshold=self.db_threshold)  # fmt: skip
        return P, W, None, split

    def _beats_reference(
        self,
        st: ClusterState,
        round_index: int,
        best: float,
        stats: dict[str, float] | None,
        P: np.ndarray | None = None,
        Y: np.ndarray | None = None,
    ) -> bool:
        """Whether ``best`` is below ``reference_ratio`` times the median best score of
        ``reference_draws`` Gaussian references of the cluster's P (:func:`reference_score`)
        or, on the coordinates path, of its rows' coordinates (:func:`coordinates_reference`,
        which compares a subsample of at most REFERENCE_ROWS rows with references of as many);
        True without references (the paper's test)."""
        if not self.reference_draws:
            return True
        kw = dict(
            beta=self.beta,
            n_max=self.n_max,
            seed=self.seed + round_index,
            min_size=self.min_clients,
            draws=self.reference_draws,
            rng=np.random.default_rng([self.seed, 0x5C, round_index, self.split_tests]),
            pool=self.pool,
        )
        if Y is not None:
            del kw["beta"]  # the coordinates are clustered without an affinity
            best, reference = coordinates_reference(Y, **kw)
        else:
            reference = reference_score(st.P if P is None else P, **kw)
        if stats is not None:
            stats["db_reference"] = reference
        return best < self.reference_ratio * reference

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "gamma": self.gamma.copy(),
            "times_sampled": self.times_sampled.copy(),
            "split_tests": self.split_tests,
            "clusters": {cid: self._cluster_state(st) for cid, st in self.state.items()},
        }

    @staticmethod
    def _cluster_state(st: ClusterState) -> dict:
        P = {"P": st.P} if isinstance(st.P, np.ndarray) else st.P.state()
        out = {**P, "mse": st.mse, "quiet": st.quiet}
        if st.proposal is not None:  # (a file without it has no proposal pending)
            out["proposal"] = st.proposal
            out["repeats"] = st.repeats
        return out

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the members also stored them here.)"""
        self.rng.bit_generator.state = state["rng"]
        self.gamma = np.asarray(state["gamma"], dtype=np.float64).copy()
        self.times_sampled = np.asarray(state["times_sampled"], dtype=np.int64).copy()
        self.split_tests = int(state["split_tests"])
        self.state = {
            cid: ClusterState(
                P=(store_from_state(c) if "P_size" in c else np.asarray(c["P"], dtype=np.float64)),
                mse=float(c["mse"]),
                quiet=int(c["quiet"]),
                proposal=np.asarray(c["proposal"], dtype=np.int64) if "proposal" in c else None,
                repeats=int(c.get("repeats", 0)),
            )
            for cid, c in state["clusters"].items()
        }


__all__ = [
    "FedGWC",
    "FedGWCParams",
    "affinity",
    "best_split_score",
    "block_contrast",
    "gaussian_reference",
    "gaussian_rewards",
    "interaction_mse",
    "participants",
    "perception_distances",
    "priority_sample",
    "reference_score",
    "round_rewards",
    "update_interaction",
]
