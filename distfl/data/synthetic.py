"""The synthetic binary Gaussian-mixture federation of the FLCL paper (Sinha, Kibilda,
Saad, section V).

Client k's positive examples follow N(μ_k, σ_k² I) and its negative ones N(-μ_k, σ_k² I)
in R^d, with σ_k² ~ U[0.1, 1] and μ_k = r_k (cos ψ_k u + sin ψ_k v): a magnitude
r_k ~ U[1, 10] and a rotation ψ_k ~ U[0, π] in the plane of two orthonormal directions u, v
drawn once per seed (for d = 2 that plane is the whole space). Label 1 is the positive
class, label 0 the negative; a client holds half of each (the odd sample is positive).

Everything of client k is drawn from (seed, k) alone, so the data of a client does not
depend on the size of the federation or on which worker hosts it.
"""

from __future__ import annotations

import functools

import numpy as np

from distfl.data.dataset import Dataset

SIGMA2_RANGE = (0.1, 1.0)
RADIUS_RANGE = (1.0, 10.0)
ANGLE_RANGE = (0.0, np.pi)


@functools.lru_cache(maxsize=8)
def mixture_plane(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two orthonormal directions (u, v) of R^dim, the plane the client means rotate in
    (computed once per (dim, seed); read-only)."""
    rng = np.random.default_rng([seed, 0x6A055, 0])
    q, _ = np.linalg.qr(rng.standard_normal((dim, 2)))
    u, v = q[:, 0].copy(), q[:, 1].copy()
    u.flags.writeable = v.flags.writeable = False
    return u, v


def client_parameters(client: int, dim: int, seed: int) -> tuple[np.ndarray, float]:
    """(μ_k [dim], σ_k²) of client ``client``."""
    rng = np.random.default_rng([seed, 0x6A055, 1, client])
    sigma2 = rng.uniform(*SIGMA2_RANGE)
    radius = rng.uniform(*RADIUS_RANGE)
    angle = rng.uniform(*ANGLE_RANGE)
    u, v = mixture_plane(dim, seed)
    return radius * (np.cos(angle) * u + np.sin(angle) * v), float(sigma2)


def client_samples(client: int, n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n samples (x [n, dim] float32, y [n] int64) of client ``client``, in random order."""
    mu, sigma2 = client_parameters(client, dim, seed)
    rng = np.random.default_rng([seed, 0x6A055, 2, client])
    y = rng.permutation(np.arange(n) < (n + 1) // 2).astype(np.int64)
    sign = (2 * y - 1)[:, None]
    x = sign * mu[None, :] + np.sqrt(sigma2) * rng.standard_normal((n, dim))
    return x.astype(np.float32), y


def gaussian_mixture(sizes: np.ndarray, dim: int, seed: int) -> Dataset:
    """The whole federation: client k's ``sizes[k]`` samples, owner k, one after another
    (written in place: no second copy of the data while it is made)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    x = np.empty((int(ends[-1]) if len(sizes) else 0, dim), dtype=np.float32)
    y = np.empty(len(x), dtype=np.int64)
    for k, (n, end) in enumerate(zip(sizes.tolist(), ends.tolist(), strict=True)):
        x[end - n : end], y[end - n : end] = client_samples(k, n, dim, seed)
    return Dataset(
        name="gaussian",
        x=x,
        y=y,
        num_classes=2,
        owner=np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
    )
