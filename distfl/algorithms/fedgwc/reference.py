"""The split test's Gaussian references: who takes part in a test, the reference draws as
independent pieces of the server's pool, and the scores they are compared with."""

from __future__ import annotations

import math

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.fedgwc import spectral
from distfl.algorithms.fedgwc.interaction import (
    REFERENCE_ROWS,
    gaussian_coordinates,
)
from distfl.algorithms.fedgwc.perception import (
    _auto_dtype,
    affinity,
)
from distfl.algorithms.fedgwc.spectral import (
    choose_split,
    choose_split_rows,
    row_block,
)


def participants(size: int, rate: float, min_clients: int) -> int:
    """Clients a cluster samples per round: max(ρ|C|, 3) (Theorem A.5), at most |C|."""
    return min(size, max(min_clients, int(round(rate * size))))


def priority_weights(counts: np.ndarray) -> np.ndarray:
    """Each client's weight in a priority sampling (FedGWC section 4.1) among clients that
    were sampled ``counts`` times: 1 / (1 + its count - the smallest count)."""
    counts = np.asarray(counts, dtype=np.float64)
    return 1.0 / (1.0 + counts - counts.min())


def priority_sample(counts: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sample n of len(counts) positions without replacement, uniformly but with priority
    for rarely sampled clients (:func:`priority_weights`), ascending."""
    w = priority_weights(counts)
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


@api.pooled
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


@api.pooled
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
    """The best (lowest) of :func:`~distfl.algorithms.fedgwc.spectral.choose_split`'s
    Davies–Bouldin scores, inf when no split is possible."""
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
    :func:`~distfl.algorithms.fedgwc.spectral.choose_split_rows`)."""
    return choose_split_rows(Y, n_max, seed, min_size=min_size, threshold=threshold)


def coordinates_reference(
    Y: np.ndarray, *, n_max: int, seed: int, min_size: int, draws: int,
    rng: np.random.Generator, pool: api.ServerPool = api.LOCAL_POOL,
) -> tuple[float, float]:  # fmt: skip
    """(the real coordinates' best score, the references' median) compared on the same
    number of rows: at most :data:`~distfl.algorithms.fedgwc.interaction.REFERENCE_ROWS`, the real
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
    rng: np.random.Generator, pool: api.ServerPool = api.LOCAL_POOL,
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
