"""FedGWC's interaction matrix P as observations: only the pairs of clients sampled together
hold an entry (FedGWC appendix D: "updated incrementally and involves sparse matrix
operations"), and the split test reads a missing entry as missing, not as zero.

A cluster of n clients whose rounds sample c of them adds at most c² entries a round, so
memory follows what was observed (16 bytes an entry), not n². The split test sees the rows
of P with each missing entry replaced by the mean of the row's observed entries (the
client's average reward, as far as it was observed). Up to :data:`COORDINATES_ABOVE` clients
that imputed P is built dense and Algorithm 1 runs on it exactly; above, each row is
reduced to its coordinates in the dominant subspace of the imputed rows (a randomised
range finder on the sparse entries, never an n×n array), whose distances are those of
eq. 4, and the candidates are k-means partitions of those coordinates (the last step of
spectral clustering, on points instead of an embedding).

Where most of P is missing, the rows say little more than each client's average reward,
and a cut of that one-dimensional cloud scores a Davies–Bouldin value close to a Gaussian
reference's whether or not it holds groups. There the split is decided by whether the
proposed clusters are separated by a valley (:func:`valley_test`).
"""

from __future__ import annotations

import numpy as np

from distfl import spectral

#: Above this many clients the split test works on low-rank coordinates of the imputed rows
#: (below, on the dense imputed P, exactly).
COORDINATES_ABOVE = spectral.SMALL_K
#: Oversampling and power iterations of the randomised range finder.
_OVERSAMPLE = 10
_POWER_ITERATIONS = 2
#: Above this many clients the Gaussian references, and the real rows they are compared
#: with, are a subsample of this many rows (the same size on both sides of the comparison).
REFERENCE_ROWS = 4096
#: Bytes a stored entry costs while a round's entries are merged in (key and value, and
#: their copies during the merge).
ENTRY_BYTES = 32


class PairStore:
    """The observed entries of one cluster's P: ``keys`` k·n + j (positions within the
    cluster, sorted) and their ``values``. Eq. 3 on the sampled block: existing entries
    are updated, new ones start from 0 (P⁰ = 0), as in the dense matrix."""

    def __init__(self, n: int, keys: np.ndarray | None = None, values: np.ndarray | None = None):
        self.n = int(n)
        self.keys = np.zeros(0, np.int64) if keys is None else np.asarray(keys, np.int64)
        self.values = np.zeros(0) if values is None else np.asarray(values, np.float64)
        if self.keys.shape != self.values.shape:
            raise ValueError("keys and values differ in length")

    def __len__(self) -> int:
        return len(self.keys)

    def update(self, pos: np.ndarray, omega: np.ndarray, alpha: float) -> float:
        """P[k, j] ← (1-α) P[k, j] + α ω_k for k, j in ``pos`` (sorted positions); returns
        the sum of the squared changes."""
        pos = np.asarray(pos, np.int64)
        new_keys = (pos[:, None] * self.n + pos[None, :]).reshape(-1)  # sorted: pos is
        at = np.searchsorted(self.keys, new_keys)
        found = np.zeros(len(new_keys), dtype=bool)
        inside = at < len(self.keys)
        found[inside] = self.keys[at[inside]] == new_keys[inside]
        old = np.zeros(len(new_keys))
        old[found] = self.values[at[found]]
        omega = np.asarray(omega, np.float64)
        new = (1.0 - alpha) * old + alpha * np.repeat(omega, len(pos))
        self.values[at[found]] = new[found]
        fresh = ~found
        if fresh.any():
            self.keys = np.insert(self.keys, at[fresh], new_keys[fresh])
            self.values = np.insert(self.values, at[fresh], new[fresh])
        change = new - old
        return float(np.dot(change, change))

    def rows(self) -> np.ndarray:
        return self.keys // self.n

    def cols(self) -> np.ndarray:
        return self.keys % self.n

    def row_means(self) -> np.ndarray:
        """The mean of each row's observed entries off the diagonal (0 for a row with none).
        The diagonal P[k, k] is updated every time k is sampled, so it grows with that
        count; eq. 4 leaves it out of the perception vectors, and so does this mean."""
        rows, cols = self.rows(), self.cols()
        off = rows != cols
        counts = np.bincount(rows[off], minlength=self.n)
        sums = np.bincount(rows[off], weights=self.values[off], minlength=self.n)
        return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)

    def dense(self, *, impute: bool = True) -> np.ndarray:
        """The n×n P, each missing entry the row's mean of observed ones (``impute``) or 0."""
        fill = self.row_means() if impute else np.zeros(self.n)
        out = np.repeat(fill[:, None], self.n, axis=1)
        out[self.rows(), self.cols()] = self.values
        return out

    def subset(self, pos: np.ndarray) -> PairStore:
        """The entries among ``pos`` (sorted positions), renumbered 0..len(pos)-1."""
        pos = np.asarray(pos, np.int64)
        index = np.full(self.n, -1, dtype=np.int64)
        index[pos] = np.arange(len(pos))
        r, c = index[self.rows()], index[self.cols()]
        keep = (r >= 0) & (c >= 0)
        return PairStore(len(pos), r[keep] * len(pos) + c[keep], self.values[keep].copy())


def imputed_coordinates(store: PairStore, rank: int, seed: int) -> np.ndarray:
    """Coordinates Y (n × ``rank``) of the imputed rows x_k of P (missing entries and the
    diagonal the row's mean), centred, in their dominant subspace: ||y_k - y_j||²
    approximates ||x_k - x_j||², the distance of eq. 4 (up to the two entries k and j it
    leaves out, 2 of n). A randomised range finder (Halko, Martinsson & Tropp 2011; fixed
    seed) on products with the sparse entries: X = μ 1ᵀ + E, E the observed entries less
    their row's mean."""
    import scipy.sparse as sp

    n = store.n
    mu = store.row_means()
    rows = store.rows()
    off = rows != store.cols()  # the diagonal reads as the row's mean, as eq. 4 leaves it out
    rows = rows[off]
    # CSR straight from the sorted keys (row-major already): no COO copy beside it
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    indices = (store.keys[off] % n).astype(np.int32 if n < 2**31 else np.int64)
    data = store.values[off] - mu[rows]
    del rows, off
    E = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    ET = E.T  # a CSC view of the same arrays
    colmean = mu.mean() + np.asarray(E.sum(axis=0)).reshape(-1) / max(n, 1)

    def times(Z: np.ndarray) -> np.ndarray:  # (X - 1 colmeanᵀ) Z
        return mu[:, None] * Z.sum(axis=0) + E @ Z - colmean @ Z

    def times_t(Z: np.ndarray) -> np.ndarray:  # (X - 1 colmeanᵀ)ᵀ Z
        return np.ones(n)[:, None] * (mu @ Z) + ET @ Z - colmean[:, None] * Z.sum(axis=0)

    width = min(n, rank + _OVERSAMPLE)
    G = np.random.default_rng([seed, 0x59]).standard_normal((n, width))
    with spectral.one_thread("blas"):
        V = np.linalg.qr(times_t(G))[0]
        for _ in range(_POWER_ITERATIONS):
            V = np.linalg.qr(times_t(np.linalg.qr(times(V))[0]))[0]
        B = times(V)
        U, s, _ = np.linalg.svd(B, full_matrices=False)
    r = min(rank, len(s))
    Y = U[:, :r] * s[:r]
    peak = np.argmax(np.abs(Y), axis=0)  # a sign convention, as the spectral embedding's
    Y *= np.sign(Y[peak, np.arange(r)])
    return Y


def gaussian_coordinates(Y: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` draws from the Gaussian with the mean and sample covariance of the rows of Y:
    the Gaussian reference (SigClust's null) of the low-rank coordinates."""
    mu = Y.mean(axis=0)
    X = Y - mu
    cov = X.T @ X / max(len(Y) - 1, 1)
    vals, vecs = np.linalg.eigh(cov)
    root = vecs * np.sqrt(np.maximum(vals, 0.0))
    return mu + rng.standard_normal((rows, Y.shape[1])) @ root.T


def stored_pairs(num_clients: int, clients_per_round: int, rounds: int, min_clients: int,
                 n_max: int) -> int:  # fmt: skip
    """The most entries the clusters' stores can hold after ``rounds`` rounds: every round's
    sampled clients (the cohort, plus up to ``min_clients`` more in each of the clusters a
    run can make, each at most ``n_max`` children deep enough to matter) squared, at most
    K² in all."""
    per_round = clients_per_round + min_clients * n_max
    return int(min(num_clients**2, rounds * per_round**2))


__all__ = [
    "ENTRY_BYTES",
    "COORDINATES_ABOVE",
    "REFERENCE_ROWS",
    "PairStore",
    "gaussian_coordinates",
    "imputed_coordinates",
    "stored_pairs",
]


def _hull_gaps(x: np.ndarray, F: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each index m in ``at`` (ascending), sup over i <= m of F_i minus the greatest
    convex minorant of the points (x_0, F_0) .. (x_m, F_m): one pass of Andrew's monotone
    chain, whose stack after point m is that minorant's vertices."""
    out = np.empty(len(at))
    hull: list[int] = []
    want = 0
    for i in range(len(x)):
        while len(hull) >= 2:
            o, a = hull[-2], hull[-1]
            if (x[a] - x[o]) * (F[i] - F[o]) - (F[a] - F[o]) * (x[i] - x[o]) > 0:
                break
            hull.pop()
        hull.append(i)
        while want < len(at) and at[want] == i:
            h = np.asarray(hull)
            out[want] = float(np.max(F[: i + 1] - np.interp(x[: i + 1], x[h], F[h])))
            want += 1
    return out


def unimodality_gap(values: np.ndarray, *, modes: int = 64) -> float:
    """How far the empirical distribution of ``values`` is from any unimodal one, in the
    manner of Hartigan's dip (Hartigan & Hartigan 1985): a unimodal distribution function
    is convex left of its mode and concave right of it, and the sup-distance of a function
    to the convex ones is half the largest gap above its greatest convex minorant (to the
    concave ones, below its least concave majorant). The statistic is the least, over
    ``modes`` candidate modes at the sample's quantiles, of the larger of the two half-gaps
    (the dip also joins the two sides; this does not). 0.25 for two equal point masses,
    near 0 for a large sample of any unimodal law; its law under the uniform, the least
    favourable unimodal one, is what :func:`valley_test` calibrates it against."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n < 4:
        return 0.0
    F = (np.arange(n) + 0.5) / n
    at = np.unique(np.linspace(0, n - 1, min(modes, n)).round().astype(np.int64))
    left = _hull_gaps(x, F, at)  # F below its convex minorant's gap, prefix up to m
    # right of m: concave majorant of the suffix = convex minorant of the reflected points
    right = _hull_gaps(-x[::-1], 1.0 - F[::-1], (n - 1 - at)[::-1])[::-1]
    return float(np.min(np.maximum(left, right)) / 2.0)


def valley_test(
    Y: np.ndarray, labels: np.ndarray, *, draws: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Whether every pair of the proposed clusters is separated by a valley: the clients of
    each pair projected on the line through the pair's centroids, and the
    :func:`unimodality_gap` of that projection. Returns (the smallest gap over the pairs,
    the largest gap of ``draws`` uniform samples of that pair's size): the pairs are
    separated when the first exceeds the second (a Monte Carlo test of unimodality at level
    1 / (draws + 1) against the uniform law, as Hartigan calibrates the dip)."""
    labels = np.asarray(labels)
    n_clusters = int(labels.max()) + 1
    worst, worst_size = np.inf, 0
    for a in range(n_clusters):
        for b in range(a + 1, n_clusters):
            pair = (labels == a) | (labels == b)
            axis = Y[labels == b].mean(axis=0) - Y[labels == a].mean(axis=0)
            norm = float(np.linalg.norm(axis))
            gap = unimodality_gap(Y[pair] @ (axis / norm)) if norm > 0 else 0.0
            if gap < worst:
                worst, worst_size = gap, int(pair.sum())
    reference = max(
        (unimodality_gap(rng.uniform(size=worst_size)) for _ in range(draws)), default=0.0
    )
    return float(worst), float(reference)


def same_partition(a: np.ndarray, b: np.ndarray, *, tolerance: int) -> bool:
    """Whether two labellings of the same clients have as many clusters and differ by at
    most ``tolerance`` clients (each cluster of ``a`` matched with the cluster of ``b``
    that shares most of its clients)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.max() != b.max():
        return False
    if tolerance == 0:
        return bool(np.array_equal(a, b))
    table = np.zeros((int(a.max()) + 1,) * 2, dtype=np.int64)
    np.add.at(table, (a, b), 1)
    matched = table.argmax(axis=1)
    if len(np.unique(matched)) != len(matched):
        return False
    return int(len(a) - table.max(axis=1).sum()) <= tolerance
