"""The FLCL paper's binary Gaussian mixture (Sinha, Kibilda, Saad, section V), generated:
one natural owner per client, whose samples are made from (seed, client) when asked.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register
from distfl.errors import ConfigError
from distfl.settings import Params, setting

if TYPE_CHECKING:
    from distfl.data.dataset import Dataset

SIGMA2_RANGE = (0.1, 1.0)
RADIUS_RANGE = (1.0, 10.0)
ANGLE_RANGE = (0.0, np.pi)


@dataclass(frozen=True)
class GaussianParams(Params):
    dim: int = setting(2, "int ≥ 2", "features of each sample (the mixture's dimension d)")
    rotation_span: float = setting(
        1.0,
        "(0, 1]",
        "each client's rotation ψ_k ~ U[0, span·π] (the paper's 1); ½ leaves no two clients' "
        "means at an angle of π/2 or more (⟨μ_i, μ_j⟩ > 0 for every pair: the paper's Fig. 1 "
        "pool)",
    )

    def check(self, config) -> None:
        if not 2 <= self.dim:
            raise ConfigError(f"data.dim = {self.dim!r}: must be at least 2 (features)")
        if not 0.0 < self.rotation_span <= 1.0:
            raise ConfigError(
                f"data.rotation_span = {self.rotation_span!r}: must be in (0, 1] (a share of π)"
            )


@register
class Gaussian(DatasetSpec):
    name = "gaussian"
    source = "generated"
    files = "none"
    num_classes = 2
    sample_shape = ()  # data.dim features
    natural = "always"
    generated = True
    Params = GaussianParams

    @classmethod
    def shape_text(cls):
        return "[d] (`data.dim`)"

    @classmethod
    def input_shape(cls, config):
        return (config.data.dim,)

    @classmethod
    def size_keys(cls):
        return {"dim": (2, "features")}

    @classmethod
    def load(cls, config):
        from distfl.data.partition import sample_counts

        sizes = sample_counts(
            config.groups,
            samples_per_client=config.data.samples_per_client,
            quantity_skew=config.data.quantity_skew,
            seed=config.run.effective_data_seed(),
        )
        return gaussian_dataset(sizes, config.data.dim, config.run.effective_data_seed(),
                                span=config.data.rotation_span)  # fmt: skip


@functools.lru_cache(maxsize=8)
def mixture_plane(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two orthonormal directions (u, v) of R^dim, the plane the client means rotate in
    (computed once per (dim, seed); read-only)."""
    rng = np.random.default_rng([seed, 0x6A055, 0])
    q, _ = np.linalg.qr(rng.standard_normal((dim, 2)))
    u, v = q[:, 0].copy(), q[:, 1].copy()
    u.flags.writeable = v.flags.writeable = False
    return u, v


def client_parameters(
    client: int, dim: int, seed: int, span: float = 1.0
) -> tuple[np.ndarray, float]:
    """(μ_k [dim], σ_k²) of client ``client``; its rotation ψ_k ~ U[0, span·π]."""
    rng = np.random.default_rng([seed, 0x6A055, 1, client])
    sigma2 = rng.uniform(*SIGMA2_RANGE)
    radius = rng.uniform(*RADIUS_RANGE)
    angle = rng.uniform(ANGLE_RANGE[0], span * ANGLE_RANGE[1])
    u, v = mixture_plane(dim, seed)
    return radius * (np.cos(angle) * u + np.sin(angle) * v), float(sigma2)


def client_samples(
    client: int, n: int, dim: int, seed: int, span: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """n samples (x [n, dim] float32, y [n] int64) of client ``client``, in random order."""
    mu, sigma2 = client_parameters(client, dim, seed, span)
    rng = np.random.default_rng([seed, 0x6A055, 2, client])
    y = rng.permutation(np.arange(n) < (n + 1) // 2).astype(np.int64)
    sign = (2 * y - 1)[:, None]
    x = sign * mu[None, :] + np.sqrt(sigma2) * rng.standard_normal((n, dim))
    return x.astype(np.float32), y


def gaussian_mixture(sizes: np.ndarray, dim: int, seed: int, span: float = 1.0) -> Dataset:
    """The whole federation: client k's ``sizes[k]`` samples, owner k, one after another
    (written in place: no second copy of the data while it is made)."""
    from distfl.data.dataset import Dataset

    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    x = np.empty((int(ends[-1]) if len(sizes) else 0, dim), dtype=np.float32)
    y = np.empty(len(x), dtype=np.int64)
    for k, (n, end) in enumerate(zip(sizes.tolist(), ends.tolist(), strict=True)):
        x[end - n : end], y[end - n : end] = client_samples(k, n, dim, seed, span)
    return Dataset(
        name="gaussian",
        x=x,
        y=y,
        num_classes=2,
        owner=np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
    )


class MixtureSamples:
    """The mixture's clients, made when their rows are asked for: client k's samples come
    from (seed, k) alone (:func:`client_samples`), so any row is the row
    :func:`gaussian_mixture` holds at that index. The last client made is kept (a client's
    features and labels are asked for one after the other)."""

    def __init__(self, sizes: np.ndarray, dim: int, seed: int, span: float = 1.0) -> None:
        self.span = float(span)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.ends = np.cumsum(self.sizes)
        self.dim, self.seed = int(dim), int(seed)
        self.num_samples = int(self.ends[-1]) if len(self.sizes) else 0
        self._last: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None

    def client(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self._last is None or self._last[0] != k:
            self._last = (k, client_samples(k, int(self.sizes[k]), self.dim, self.seed, self.span))
        return self._last[1]

    def rows(self, idx: np.ndarray, part: int) -> np.ndarray:
        """Rows ``idx`` of the features (``part`` 0) or the labels (1)."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_samples):
            raise IndexError(f"rows out of range for {self.num_samples} samples")
        shape = (len(idx), self.dim) if part == 0 else (len(idx),)
        out = np.empty(shape, dtype=np.float32 if part == 0 else np.int64)
        owner = np.searchsorted(self.ends, idx, side="right")
        for k in np.unique(owner).tolist():
            sel = owner == k
            out[sel] = self.client(k)[part][idx[sel] - (self.ends[k] - self.sizes[k])]
        return out


class MixtureRows:
    """Features or labels of a :class:`MixtureSamples` as a read-only array-like: indexing
    with an integer array (or a slice) makes those rows."""

    def __init__(self, source: MixtureSamples, part: int) -> None:
        self.source, self.part = source, part
        n = source.num_samples
        self.shape = (n, source.dim) if part == 0 else (n,)
        self.dtype = np.dtype(np.float32 if part == 0 else np.int64)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        if isinstance(idx, slice):
            idx = np.arange(*idx.indices(len(self)))
        return self.source.rows(np.asarray(idx), self.part)


def gaussian_dataset(sizes: np.ndarray, dim: int, seed: int, span: float = 1.0) -> Dataset:
    """The federation of :func:`gaussian_mixture`, holding none of its samples: a client's
    rows are made when it is used, and what the partition needs (each owner's size and
    class counts) is known without them: a client of n samples has (n + 1) // 2 positives."""
    from distfl.data.dataset import Dataset

    sizes = np.asarray(sizes, dtype=np.int64)
    source = MixtureSamples(sizes, dim, seed, span)
    positives = (sizes + 1) // 2
    return Dataset(
        name="gaussian",
        x=MixtureRows(source, 0),
        y=MixtureRows(source, 1),
        num_classes=2,
        owner_sizes=sizes,
        owner_class_counts=np.stack([sizes - positives, positives], axis=1),
    )
