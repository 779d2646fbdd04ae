"""Client-level differential privacy of the cluster models ([privacy], docs/privacy.md), as
DP-FedAvg does it (McMahan et al. 2018, "Learning differentially private recurrent language
models"): each client's update θ_k − θ is clipped to the L2 bound C where it trains
(:func:`clip_updates`, on the worker), and the server adds Gaussian noise of std z·C·w_max
to each cluster's sum of weighted updates before the aggregator divides it
(:class:`AggregateNoise`); ε at δ after t rounds comes from opacus's accountant of the
subsampled Gaussian mechanism with sampling rate q and noise multiplier z (:func:`epsilon`).

The noise is drawn from (seed, round, cluster) alone, on the server, so that any world size
gives the same bits, and a resumed run the same noise. With z = 0 nothing is drawn: a run
with ``privacy.clip`` above every update's length gives the bits of a run without privacy.
"""

from __future__ import annotations

import functools
import math
import warnings
import zlib

import numpy as np
import torch

from distfl.algorithms import algorithm_class
from distfl.config.privacy import PrivacySection
from distfl.errors import ConfigError
from distfl.plugins import AGGREGATORS
from distfl.train.sequential import derived_seed

#: the stream of :class:`AggregateNoise`'s draws, apart from every other draw of the seed
NOISE_STREAM = 0xD9F1


def clip_updates(new: torch.Tensor, start: torch.Tensor, clip: float) -> torch.Tensor:
    """``new`` [n, P] with every row whose update ``new[j] − start`` is longer than ``clip``
    (L2, computed in float64 row by row, so that a row's result does not depend on the
    others) replaced by ``start`` plus the update scaled to length ``clip``; the other
    rows are left as they are, bit for bit."""
    if clip <= 0 or not len(new):
        return new
    base = start.to(new.device, new.dtype).to(torch.float64)
    out = new
    for j in range(new.shape[0]):
        update = new[j].to(torch.float64) - base
        norm = float(torch.linalg.vector_norm(update))
        if norm > clip:  # (a NaN norm is left to the sums' own refusal of NaN)
            if out is new:
                out = new.clone()
            out[j] = _within(base, update, clip / norm, clip, new.dtype)
    return out


def _within(base: torch.Tensor, update: torch.Tensor, scale: float, clip: float, dtype):
    """``base + update·scale`` in ``dtype`` whose update, as rounded, is at most ``clip``
    long: the rounding to float32 can lengthen it by a few ulps of the parameters, so the
    scale is lowered a little at a time until it holds (to no update at all, past 24 tries)."""
    for k in range(24):
        row = (base + update * (scale * (1.0 - 2.0 ** (k - 24)))).to(dtype)
        if float(torch.linalg.vector_norm(row.to(torch.float64) - base)) <= clip:
            return row
    return base.to(dtype)


def sensitivity_spread(weights: list[list[float]]) -> float:
    """The largest √(Σ_j γ_kj²) over the clients, whose update goes to the clusters j with
    the weights γ_kj (one list a client): the factor by which one client's clipped updates
    can move the clusters' sums together, in L2, beyond one update of weight 1 (1 where
    each client trains one cluster's model)."""
    spread = [math.sqrt(sum(g * g for g in gs)) for gs in weights if gs]
    return max([1.0, *spread])


class AggregateNoise:
    """Gaussian noise on each cluster's sum of weighted clipped updates: std z·C·w_max·s
    (``w_max``: the largest weight a client's update carries, its train split or 1; s: the
    round's :func:`sensitivity_spread`), drawn in float64 from (seed, round, cluster)."""

    def __init__(self, privacy: PrivacySection, *, seed: int, max_weight: float,
                 multiplier: float | None = None) -> None:  # fmt: skip
        #: z: ``privacy.noise``, or the one found for ``privacy.epsilon``
        self.multiplier = float(privacy.noise if multiplier is None else multiplier)
        self.clip = float(privacy.clip)
        self.seed = int(seed)
        self.max_weight = float(max_weight)

    def std(self, spread: float = 1.0) -> float:
        return self.multiplier * self.clip * self.max_weight * spread

    def add(self, total: torch.Tensor, round_index: int, cluster: str,
            spread: float = 1.0) -> torch.Tensor:  # fmt: skip
        """``total`` (the float64 sum of a cluster's weighted updates) plus its noise."""
        std = self.std(spread)
        if std == 0:
            return total
        key = zlib.crc32(cluster.encode("utf-8"))
        g = torch.Generator().manual_seed(derived_seed(self.seed, NOISE_STREAM, round_index, key))
        noise = torch.randn(total.shape, generator=g, dtype=torch.float64)
        return total + noise.to(total.device) * std


def aggregate_noise(config, num_train: np.ndarray) -> AggregateNoise | None:
    """The run's noise on the aggregates (None without noise): w_max is 1 where the
    aggregator weighs every client alike (FairAvg), else the largest train split."""
    if not config.privacy.noised:
        return None
    uniform = AGGREGATORS.get(config.server.aggregator).uniform
    max_weight = 1.0 if uniform else float(np.max(num_train, initial=1))
    return AggregateNoise(config.privacy, seed=config.run.effective_sampling_seed(),
                          max_weight=max_weight, multiplier=noise_multiplier(config))  # fmt: skip


def sampling_rate(clients_per_round: int, num_clients: int, every_member: bool) -> float:
    """q, the probability that a client's update is in a round's aggregates: the share of
    the federation a round draws (1 where every member of a cluster trains each round)."""
    return 1.0 if every_member else min(1.0, clients_per_round / num_clients)


def run_sampling_rate(config) -> float:
    """The run's q: :func:`sampling_rate` of its config and algorithm."""
    every = algorithm_class(config.algorithm.name).every_member_trains
    return sampling_rate(config.server.clients_per_round, config.data.num_clients, every)


def noise_multiplier(config) -> float:
    """z of the run: ``privacy.noise``, or the one opacus finds for ``privacy.epsilon``
    after ``run.rounds`` rounds at the run's q (0 without noise)."""
    p = config.privacy
    if not p.noised or p.noise > 0:
        return float(p.noise) if p.noised else 0.0
    return _multiplier_for(float(p.epsilon), float(p.delta), run_sampling_rate(config),
                           int(config.run.rounds), p.accountant)  # fmt: skip


@functools.lru_cache(maxsize=16)
def _multiplier_for(target: float, delta: float, q: float, rounds: int, name: str) -> float:
    _accountant(name)  # (opacus is there)
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        z = get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q,
                                 steps=rounds, accountant=name)  # fmt: skip
    return float(z)


def epsilon(privacy: PrivacySection, sampling: float, rounds: int,
            multiplier: float | None = None) -> float:  # fmt: skip
    """ε at ``privacy.delta`` after ``rounds`` rounds of the subsampled Gaussian mechanism
    with noise multiplier ``multiplier`` (``privacy.noise`` where not given) and sampling
    rate ``sampling``, from opacus's accountant (``privacy.accountant``); NaN without noise.
    The accountant assumes Poisson sampling at rate q; distfl draws a fixed number of
    clients a round (docs/privacy.md)."""
    z = float(privacy.noise if multiplier is None else multiplier)
    if not privacy.noised or rounds < 1 or z <= 0:
        return math.nan
    return _spent(z, float(sampling), int(rounds), float(privacy.delta), privacy.accountant)


def _spent(z: float, q: float, steps: int, delta: float, name: str) -> float:
    """ε after ``steps`` steps of the subsampled Gaussian (z, q) at ``delta``. ``rdp``: what
    opacus's RDPAccountant.get_epsilon computes, to the bit (its Rényi divergences of
    ``steps`` steps are ``steps`` times one step's, which is computed once per (z, q));
    ``prv``: its PRVAccountant's."""
    accountant = _accountant(name)
    with warnings.catch_warnings():  # (the RDP bound at its largest order: still a bound)
        warnings.simplefilter("ignore", UserWarning)
        if name == "rdp":
            from opacus.accountants.analysis.rdp import get_privacy_spent

            orders = accountant.DEFAULT_ALPHAS
            eps, _ = get_privacy_spent(orders=orders, rdp=_one_step(z, q) * steps, delta=delta)
            return float(eps)
        accountant.history = [(z, q, steps)]
        return float(accountant.get_epsilon(delta=delta))


@functools.lru_cache(maxsize=64)
def _one_step(z: float, q: float) -> np.ndarray:
    """The Rényi divergences of one step at opacus's RDPAccountant's default orders."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp

    return compute_rdp(q=q, noise_multiplier=z, steps=1, orders=RDPAccountant.DEFAULT_ALPHAS)


def sample_rate(batch_size: int, num_train: np.ndarray) -> float:
    """DP-SGD's sampling rate of the client with the smallest train split n_min: a batch of
    min(b, n_min) of its n_min samples (1 where the batch takes them all)."""
    smallest = int(np.min(num_train, initial=batch_size)) if len(num_train) else batch_size
    return min(batch_size, smallest) / max(smallest, 1)


def sample_epsilon(privacy: PrivacySection, sampling: float, steps: int) -> float:
    """A bound on every client's sample-level ε at ``privacy.delta`` after ``steps`` DP-SGD
    steps at rate ``sampling`` with ``privacy.sample_noise`` (NaN without it)."""
    if not privacy.sample_noised or steps < 1:
        return math.nan
    return _spent(float(privacy.sample_noise), float(sampling), int(steps),
                  float(privacy.delta), privacy.accountant)  # fmt: skip


def summary_lines(config, metrics) -> list[str]:
    """The run summary's lines of what privacy spent (none without noise)."""
    p, lines = config.privacy, []
    if p.noised and len(metrics["dp_epsilon"]):  # (the last round always has its ε)
        lines.append(f"  privacy                  ε = {metrics['dp_epsilon'][-1]:.3g} at δ = "
                     f"{p.delta:g} (C = {p.clip:g}, z = {noise_multiplier(config):.4g}, "
                     f"{p.accountant})")  # fmt: skip
    if p.sample_noised and len(metrics["dp_sample_epsilon"]):
        lines.append(f"  DP-SGD                   ε ≤ {metrics['dp_sample_epsilon'][-1]:.3g} at "
                     f"δ = {p.delta:g} for any client's samples (C_s = {p.sample_clip:g}, "
                     f"σ_s = {p.sample_noise:g})")  # fmt: skip
    return lines


def _accountant(name: str):
    try:
        from opacus.accountants import PRVAccountant, RDPAccountant
    except ImportError as e:
        raise ConfigError(
            f"privacy.noise > 0 needs opacus for its accountant (pip install 'distfl[dp]'): {e}"
        ) from None
    return {"rdp": RDPAccountant, "prv": PRVAccountant}[name]()


__all__ = [
    "AggregateNoise",
    "aggregate_noise",
    "clip_updates",
    "epsilon",
    "noise_multiplier",
    "run_sampling_rate",
    "sample_epsilon",
    "sample_rate",
    "sampling_rate",
    "sensitivity_spread",
    "summary_lines",
]
