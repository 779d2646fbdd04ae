"""FedGWC's interaction matrix P as observations: only the pairs of clients sampled together
hold an entry (FedGWC appendix D: "updated incrementally and involves sparse matrix
operations"), and the split test reads a missing entry as missing, not as zero.

A cluster of n clients whose rounds sample c of them adds at most c² entries a round, so
memory follows what was observed (16 bytes an entry), not n². The split test sees the rows
of P with each missing entry replaced by the mean of the row's observed entries (the
client's average reward, as far as it was observed). Up to :data:`KNN_ABOVE` clients
that imputed P is built dense and Algorithm 1 runs on it exactly; above, each row is
reduced to its coordinates in the dominant subspace of the imputed rows (a randomised
range finder on the sparse entries, never an n×n array), the affinity of eq. 4 becomes a
k-nearest-neighbour graph of those coordinates, and the spectral embedding comes from a
sparse eigensolver.
"""

from __future__ import annotations

import numpy as np

from distfl import spectral

#: Above this many clients the split test works on low-rank coordinates of the imputed rows
#: and a k-nearest-neighbour affinity (below, on the dense imputed P, exactly).
KNN_ABOVE = spectral.SMALL_K
#: Neighbours of each client in the k-nearest-neighbour affinity (scikit-learn's
#: SpectralClustering uses 10 too).
KNN = 10
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
        """The mean of each row's observed entries (0 for a row with none)."""
        rows = self.rows()
        counts = np.bincount(rows, minlength=self.n)
        sums = np.bincount(rows, weights=self.values, minlength=self.n)
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
    """Coordinates Y (n × ``rank``) of the imputed rows x_k of P (missing entries the row's
    mean), centred, in their dominant subspace: ||y_k - y_j||² approximates ||x_k - x_j||²,
    the distance of eq. 4 (up to the two entries k and j it leaves out, 2 of n). A
    randomised range finder (Halko, Martinsson & Tropp 2011; fixed seed) on products with
    the sparse entries: X = μ 1ᵀ + E, E the observed entries less their row's mean."""
    import scipy.sparse as sp

    n = store.n
    mu = store.row_means()
    rows, cols = store.rows(), store.cols()
    E = sp.csr_matrix((store.values - mu[rows], (rows, cols)), shape=(n, n))
    ET = E.T.tocsr()
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


def knn_affinity(Y: np.ndarray, beta: float, knn: int = KNN):
    """Eq. 4 on the k-nearest-neighbour graph of the rows of Y: W[k, j] = exp(-β ||y_k -
    y_j||²) where j is among k's ``knn`` nearest or k among j's, ones on the diagonal; a
    symmetric scipy.sparse CSR matrix (float64)."""
    import scipy.sparse as sp
    from sklearn.neighbors import NearestNeighbors

    n = len(Y)
    k = min(knn, n - 1)
    if k < 1:
        return sp.identity(n, format="csr")
    with spectral.one_thread("blas"):
        dist, idx = NearestNeighbors(n_neighbors=k + 1).fit(Y).kneighbors(Y)
    rows = np.repeat(np.arange(n), k + 1)
    vals = np.exp(-beta * np.square(dist.reshape(-1)))
    A = sp.csr_matrix((vals, (rows, idx.reshape(-1))), shape=(n, n))
    W = A.maximum(A.T).tocsr()
    W.setdiag(1.0)
    W.sort_indices()
    return W


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
    "KNN",
    "KNN_ABOVE",
    "REFERENCE_ROWS",
    "PairStore",
    "gaussian_coordinates",
    "imputed_coordinates",
    "knn_affinity",
    "stored_pairs",
]
