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

import math

import numpy as np

from distfl.algorithms.fedgwc import spectral

#: Above this many clients the split test works on low-rank coordinates of the imputed rows
#: (up to it, on the dense imputed P, exactly). The dense test costs O(n³) a Gaussian
#: reference (a draw, its affinity, its spectral clustering), the coordinates' about the same
#: at any size (their references are at most REFERENCE_ROWS rows of rank n_max − 1): at 128
#: clients the dense test with 15 references took under twice the coordinates' seconds, at
#: 2,000 ten times, so the test changes representation where the two cost about the same.
COORDINATES_ABOVE = 128
#: Above this many clients an observed P is kept as the rounds that wrote it
#: (:class:`BlockStore`); up to it, as its entries (:class:`PairStore`).
BLOCKS_ABOVE = spectral.SMALL_K
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

    def off_diagonal(self) -> int:
        """How many entries lie off the diagonal (pairs of two clients)."""
        return int(np.count_nonzero(self.rows() != self.cols()))

    def finite(self) -> bool:
        return bool(np.isfinite(self.values).all())

    def scale(self) -> float:
        """The largest magnitude of an entry (0 for none)."""
        return float(np.abs(self.values).max(initial=0.0))

    def centred(self, mu: np.ndarray):
        """(E·Z, Eᵀ·Z) as functions of Z and E's column sums, E the observed entries off the
        diagonal less their row's mean ``mu`` (0 elsewhere): a CSR matrix of the entries."""
        import scipy.sparse as sp

        n = self.n
        rows = self.rows()
        off = rows != self.cols()
        rows = rows[off]
        # CSR straight from the sorted keys (row-major already): no COO copy beside it
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
        indices = (self.keys[off] % n).astype(np.int32 if n < 2**31 else np.int64)
        data = self.values[off] - mu[rows]
        del rows, off
        E = sp.csr_matrix((data, indices, indptr), shape=(n, n))
        ET = E.T  # a CSC view of the same arrays
        return (lambda Z: E @ Z), (lambda Z: ET @ Z), np.asarray(E.sum(axis=0)).reshape(-1)

    def state(self) -> dict[str, np.ndarray | int]:
        return {"P_size": self.n, "P_keys": self.keys, "P_values": self.values}


class _Growing:
    """An array appended to at amortised O(1) a value (capacity doubles)."""

    def __init__(self, data: np.ndarray):
        self._buf = np.asarray(data).copy()
        self.size = len(self._buf)

    def append(self, values: np.ndarray) -> None:
        need = self.size + len(values)
        if need > len(self._buf):
            grown = np.empty(max(need, 2 * len(self._buf), 16), dtype=self._buf.dtype)
            grown[: self.size] = self._buf[: self.size]
            self._buf = grown
        self._buf[self.size : need] = values
        self.size = need

    @property
    def view(self) -> np.ndarray:
        return self._buf[: self.size]


class BlockStore:
    """One cluster's P as the rounds that made it, not as its entries. Eq. 3 writes
    α·ω_k into every entry (k, j) of a round's sampled block whose pair was never sampled
    together before, so such an entry is known from the round's positions and rewards
    alone: the store keeps each round's sampled positions and α·ω (``pos``, ``first``, one
    slice of ``ptr`` a round), and, apart, the pairs sampled together more than once
    (``multi_*``: the key k·n + j, the entry's value, the sum of the α·ω_k its rounds
    wrote, how many rounds). Memory follows rounds × cohort plus the repeated pairs, not
    the entries (at 1,000 of 100,000 clients a round, 300 rounds hold 3·10⁸ entries in
    3·10⁵ positions and a few million repeated pairs).

    The same P as :class:`PairStore` to the bit (the same entries, and the same change in
    eq. 3's MSE: the round's block in the same order); the split test's products with P's
    rows are computed from the rounds (:meth:`centred`), without its entries."""

    def __init__(self, n: int, pos=None, first=None, ptr=None, multi_keys=None,
                 multi_values=None, multi_sums=None, multi_counts=None):  # fmt: skip
        self.n = int(n)
        self._pos = _Growing(np.zeros(0, np.int64) if pos is None else np.asarray(pos, np.int64))
        self._first = _Growing(np.zeros(0) if first is None else np.asarray(first, np.float64))
        self._ptr = _Growing(np.zeros(1, np.int64) if ptr is None else np.asarray(ptr, np.int64))
        empty = np.zeros(0, np.int64)
        self.multi_keys = empty if multi_keys is None else np.asarray(multi_keys, np.int64)
        self.multi_values = np.zeros(0) if multi_values is None else np.asarray(
            multi_values, np.float64)  # fmt: skip
        self.multi_sums = np.zeros(0) if multi_sums is None else np.asarray(
            multi_sums, np.float64)  # fmt: skip
        self.multi_counts = empty if multi_counts is None else np.asarray(multi_counts, np.int64)
        lengths = {len(self.multi_keys), len(self.multi_values), len(self.multi_sums),
                   len(self.multi_counts)}  # fmt: skip
        if len(lengths) != 1 or self._pos.size != self._first.size or (
                self.ptr[-1] != self._pos.size or np.any(np.diff(self.ptr) <= 0)):  # fmt: skip
            raise ValueError("the store's arrays do not describe one history of rounds")
        sizes = np.diff(self.ptr)
        self.entries = int(np.dot(sizes, sizes) - (self.multi_counts - 1).sum())
        self.diagonal = int(np.count_nonzero(np.bincount(self.pos, minlength=self.n)))

    @property
    def pos(self) -> np.ndarray:
        return self._pos.view

    @property
    def first(self) -> np.ndarray:
        return self._first.view

    @property
    def ptr(self) -> np.ndarray:
        return self._ptr.view

    def __len__(self) -> int:
        return self.entries

    def _round_of(self) -> np.ndarray:
        """The round (0..R-1) of each stored position."""
        return np.repeat(np.arange(len(self.ptr) - 1), np.diff(self.ptr))

    def update(self, pos: np.ndarray, omega: np.ndarray, alpha: float) -> float:
        """Eq. 3 on the block ``pos`` (sorted positions), as :meth:`PairStore.update`; returns
        the sum of the squared changes."""
        pos = np.asarray(pos, np.int64)
        c = len(pos)
        if c == 0:
            return 0.0
        a = alpha * np.asarray(omega, np.float64)
        change = np.repeat(a, c)  # a new entry: (1-α)·0 + α·ω_k, less 0
        nonfresh = diagonal_seen = 0
        flag = np.zeros(self.n, dtype=bool)
        flag[pos] = True
        hit = np.flatnonzero(flag[self.pos])
        if hit.size:
            keys, once_value = self._met_before(hit)
            order = np.argsort(keys, kind="stable")
            unique, index, counts = np.unique(keys[order], return_index=True, return_counts=True)
            once = counts == 1
            old = np.empty(len(unique))
            old[once] = once_value[order][index[once]]
            repeated = unique[~once]
            at = np.searchsorted(self.multi_keys, repeated)
            old[~once] = self.multi_values[at]
            ai = np.searchsorted(pos, unique // self.n)
            bi = np.searchsorted(pos, unique % self.n)
            new = (1.0 - alpha) * old + a[ai]
            change[ai * c + bi] = new - old
            self.multi_values[at] = new[~once]
            self.multi_sums[at] += a[ai[~once]]
            self.multi_counts[at] += 1
            fresh_keys = unique[once]
            into = np.searchsorted(self.multi_keys, fresh_keys)
            self.multi_keys = np.insert(self.multi_keys, into, fresh_keys)
            self.multi_values = np.insert(self.multi_values, into, new[once])
            self.multi_sums = np.insert(self.multi_sums, into, old[once] + a[ai[once]])
            self.multi_counts = np.insert(self.multi_counts, into, 2)
            nonfresh = len(unique)
            diagonal_seen = int(np.count_nonzero(ai == bi))
        self.entries += c * c - nonfresh
        self.diagonal += c - diagonal_seen
        self._pos.append(pos)
        self._first.append(a)
        self._ptr.append(np.array([self._pos.size]))
        return float(np.dot(change, change))

    def _met_before(self, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every pair (k, j) of this round's clients for every earlier round that sampled
        both (``hit``: the stored indices of this round's clients, ascending): their keys,
        and α·ω_k of that earlier round."""
        rounds = np.searchsorted(self.ptr, hit, side="right") - 1
        starts = np.flatnonzero(np.r_[True, rounds[1:] != rounds[:-1]])
        sizes = np.diff(np.r_[starts, len(hit)])
        group = np.repeat(np.arange(len(starts)), sizes)
        per = sizes[group]  # each hit pairs with every hit of its round
        ki = np.repeat(np.arange(len(hit)), per)
        within = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
        kj = np.repeat(starts[group], per) + within
        k = self.pos[hit]
        return k[ki] * self.n + k[kj], self.first[hit][ki]

    def _multi_off(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, column, index) of the repeated pairs off the diagonal."""
        rows, cols = self.multi_keys // self.n, self.multi_keys % self.n
        off = np.flatnonzero(rows != cols)
        return rows[off], cols[off], off

    def row_means(self) -> np.ndarray:
        """As :meth:`PairStore.row_means`: each round adds α·ω_k to row k once for each other
        client of the round; a repeated pair counts once, at its value."""
        sizes = np.diff(self.ptr)[self._round_of()] - 1.0
        sums = np.bincount(self.pos, weights=self.first * sizes, minlength=self.n)
        counts = np.bincount(self.pos, weights=sizes, minlength=self.n)
        rows, _, off = self._multi_off()
        sums += np.bincount(rows, weights=self.multi_values[off] - self.multi_sums[off],
                            minlength=self.n)  # fmt: skip
        counts -= np.bincount(rows, weights=self.multi_counts[off] - 1.0, minlength=self.n)
        return np.where(counts > 0.5, sums / np.maximum(counts, 1.0), 0.0)

    def off_diagonal(self) -> int:
        return self.entries - self.diagonal

    def finite(self) -> bool:
        return bool(np.isfinite(self.first).all() and np.isfinite(self.multi_values).all())

    def scale(self) -> float:
        return float(max(np.abs(self.first).max(initial=0.0),
                         np.abs(self.multi_values).max(initial=0.0)))  # fmt: skip

    def centred(self, mu: np.ndarray):
        """(E·Z, Eᵀ·Z) as functions of Z and E's column sums, E the observed entries off the
        diagonal less their row's mean ``mu``, from the rounds: with b_h = α·ω - μ_k for
        client k's place h in round r, s_r = Σ_{j in r} Z_j and u_r = Σ_{j in r} b_j Z_j,

            (E Z)_k  = Σ_h b_h (s_r - Z_k)  + Σ_{repeated (k, j)} e_kj Z_j
            (Eᵀ Z)_j = Σ_h (u_r - b_h Z_j)  + Σ_{repeated (k, j)} e_kj Z_k

        (h over client k's, or j's, places), where e_kj = (P_kj - the sum of its rounds' α·ω_k)
        + μ_k (its rounds - 1) corrects what the rounds' sums counted more than once."""
        import scipy.sparse as sp

        n, H = self.n, len(self.pos)
        pos, starts = self.pos, self.ptr[:-1]
        r = self._round_of()
        b = self.first - mu[pos]
        place = sp.csr_matrix((np.ones(H), (pos, np.arange(H))), shape=(n, H))
        rows, cols, off = self._multi_off()
        e = (self.multi_values[off] - self.multi_sums[off]
             + mu[rows] * (self.multi_counts[off] - 1))  # fmt: skip
        R = sp.csr_matrix((e, (rows, cols)), shape=(n, n))
        RT = R.T.tocsr()

        def times(Z: np.ndarray) -> np.ndarray:
            ZP = Z[pos]
            s = np.add.reduceat(ZP, starts, axis=0) if H else np.zeros((0, Z.shape[1]))
            return place @ (b[:, None] * (s[r] - ZP)) + R @ Z

        def times_t(Z: np.ndarray) -> np.ndarray:
            BZ = b[:, None] * Z[pos]
            u = np.add.reduceat(BZ, starts, axis=0) if H else np.zeros((0, Z.shape[1]))
            return place @ (u[r] - BZ) + RT @ Z

        return times, times_t, times_t(np.ones((n, 1)))[:, 0]

    def pair_store(self) -> PairStore:
        """The same P as its entries (n² bytes of work: for a small cluster)."""
        n = self.n
        value = np.zeros((n, n))
        seen = np.zeros((n, n), dtype=bool)
        for r in range(len(self.ptr) - 1):
            sl = slice(self.ptr[r], self.ptr[r + 1])
            block = np.ix_(self.pos[sl], self.pos[sl])
            value[block] = self.first[sl][:, None]
            seen[block] = True
        value.flat[self.multi_keys] = self.multi_values
        keys = np.flatnonzero(seen)
        return PairStore(n, keys, value.reshape(-1)[keys])

    def dense(self, *, impute: bool = True) -> np.ndarray:
        return self.pair_store().dense(impute=impute)

    def subset(self, pos: np.ndarray) -> BlockStore | PairStore:
        """The P of the clients ``pos`` (sorted positions), renumbered 0..len(pos)-1: the
        rounds and repeated pairs among them, or, up to :data:`BLOCKS_ABOVE` clients, their
        entries (a :class:`PairStore`)."""
        pos = np.asarray(pos, np.int64)
        m = len(pos)
        index = np.full(self.n, -1, dtype=np.int64)
        index[pos] = np.arange(m)
        new = index[self.pos]
        keep = new >= 0
        sizes = np.bincount(self._round_of()[keep], minlength=len(self.ptr) - 1)
        sizes = sizes[sizes > 0]
        r, c = index[self.multi_keys // self.n], index[self.multi_keys % self.n]
        inside = (r >= 0) & (c >= 0)
        out = BlockStore(m, new[keep], self.first[keep], np.r_[0, np.cumsum(sizes)],
                         r[inside] * m + c[inside], self.multi_values[inside],
                         self.multi_sums[inside], self.multi_counts[inside])  # fmt: skip
        return out if m > BLOCKS_ABOVE else out.pair_store()

    #: the arrays that are the store, in the constructor's order
    ARRAYS = ("pos", "first", "ptr", "multi_keys", "multi_values", "multi_sums", "multi_counts")

    def state(self) -> dict[str, np.ndarray | int]:
        return {"P_size": self.n, **{f"P_{k}": getattr(self, k) for k in self.ARRAYS}}

    def nbytes(self) -> int:
        return sum(getattr(self, k).nbytes for k in self.ARRAYS)

    @classmethod
    def from_state(cls, c) -> BlockStore:
        return cls(int(c["P_size"]), *(np.array(c[f"P_{k}"]) for k in cls.ARRAYS))


def store_from_state(c) -> PairStore | BlockStore:
    """A cluster's observed P from its saved arrays (``P_keys``: entries; ``P_pos``: rounds)."""
    if "P_pos" in c:
        return BlockStore.from_state(c)
    return PairStore(int(c["P_size"]), np.array(c["P_keys"]), np.array(c["P_values"]))


def imputed_coordinates(store: PairStore | BlockStore, rank: int, seed: int) -> np.ndarray:
    """Coordinates Y (n × ``rank``) of the imputed rows x_k of P (missing entries and the
    diagonal the row's mean), centred, in their dominant subspace: ||y_k - y_j||²
    approximates ||x_k - x_j||², the distance of eq. 4 (up to the two entries k and j it
    leaves out, 2 of n). A randomised range finder (Halko, Martinsson & Tropp 2011; fixed
    seed) on products with the sparse entries: X = μ 1ᵀ + E, E the observed entries less
    their row's mean (:meth:`PairStore.centred`, :meth:`BlockStore.centred`)."""
    n = store.n
    mu = store.row_means()
    E, ET, colsum = store.centred(mu)
    colmean = mu.mean() + colsum / max(n, 1)

    def times(Z: np.ndarray) -> np.ndarray:  # (X - 1 colmeanᵀ) Z
        return mu[:, None] * Z.sum(axis=0) + E(Z) - colmean @ Z

    def times_t(Z: np.ndarray) -> np.ndarray:  # (X - 1 colmeanᵀ)ᵀ Z
        return np.ones(n)[:, None] * (mu @ Z) + ET(Z) - colmean[:, None] * Z.sum(axis=0)

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


#: Bytes a round's sampled client costs in a :class:`BlockStore` (position and α·ω), and a
#: pair sampled together more than once (key, value, sum, count, and their copies while a
#: round's are inserted)
PLACE_BYTES = 16
REPEATED_BYTES = 64
#: Bytes a sampled client costs while a split test multiplies with the rounds (the rows it
#: gathers, one column of the range finder each, and their products)
TEST_PLACE_BYTES = 8 * 4 * (16 + _OVERSAMPLE)


def stored_bytes(num_clients: int, clients_per_round: int, rounds: int, min_clients: int,
                 n_max: int) -> int:  # fmt: skip
    """What the clusters' observed P can hold after ``rounds`` rounds, and a split test's
    work on it. Up to :data:`BLOCKS_ABOVE` clients: :func:`stored_pairs` entries
    (:class:`PairStore`). Above (:class:`BlockStore`): every round's sampled clients, the
    pairs sampled together more than once (expected K²·Pr[Poisson(λ) ≥ 2], λ = rounds ×
    (sampled / K)², the chance a pair met in each round), the products of a split test,
    and the entries of the clusters of up to BLOCKS_ABOVE clients a split leaves (as many
    as their share of the pairs: K·BLOCKS_ABOVE of K²)."""
    K = num_clients
    if K <= BLOCKS_ABOVE:
        return stored_pairs(K, clients_per_round, rounds, min_clients, n_max) * ENTRY_BYTES
    per_round = clients_per_round + min_clients * n_max
    places = rounds * per_round
    lam = rounds * (per_round / K) ** 2
    repeated = K * K * -(math.expm1(-lam) + lam * math.exp(-lam))  # Pr[N ≥ 2]
    entries = stored_pairs(K, clients_per_round, rounds, min_clients, n_max)
    small = entries * min(BLOCKS_ABOVE / K, 1.0)
    return int(places * (PLACE_BYTES + TEST_PLACE_BYTES) + repeated * REPEATED_BYTES
               + small * ENTRY_BYTES)  # fmt: skip


__all__ = [
    "BLOCKS_ABOVE",
    "BlockStore",
    "ENTRY_BYTES",
    "COORDINATES_ABOVE",
    "REFERENCE_ROWS",
    "PairStore",
    "gaussian_coordinates",
    "imputed_coordinates",
    "store_from_state",
    "stored_bytes",
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
