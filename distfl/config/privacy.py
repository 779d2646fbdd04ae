"""The [privacy] section: client-level differential privacy of the cluster models (each
client's update clipped to an L2 bound, Gaussian noise added to each cluster's aggregate)
and sample-level DP-SGD of local training, with the privacy spent, ε at δ, from an
accountant. Every key at its default leaves the run as it was before the section existed."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

from distfl.errors import ConfigError
from distfl.plugins import ALGORITHMS
from distfl.settings import setting

#: the accountants ``privacy.accountant`` names (opacus's)
ACCOUNTANTS = ("rdp", "prv")
#: the largest clipping bound and noise multiplier: the noise's std, their product times a
#: client's largest weight, stays far below float64's largest
MAX_CLIP = 1e12
MAX_NOISE_MULTIPLIER = 1e6
#: the largest target ε (far beyond any guarantee; opacus's search stays finite below it)
MAX_EPSILON = 1e4


@dataclass(frozen=True)
class PrivacySection:
    """Client-level and sample-level differential privacy ([Differential privacy](privacy.md))."""

    clip: float = setting(
        0.0,
        "≥ 0",
        "C, the L2 bound of each client's model update θ_k − θ: an update longer than C is "
        "scaled down to length C before it is sent (0: no clipping, no privacy)",
    )
    noise: float = setting(
        0.0,
        "≥ 0; needs `clip` > 0",
        "z, the noise multiplier: each cluster's sum of weighted clipped updates gets Gaussian "
        "noise of std z·C·w_max (w_max: the largest weight one client's update can carry, 1 "
        "with `server.aggregator = 'fairavg'`, else the largest train split) on the server, "
        "drawn from (seed, round, cluster); 0: clipping alone, no ε",
    )
    epsilon: float = setting(
        0.0,
        "≥ 0; needs `clip` > 0, `noise` = 0",
        "a target ε at `delta` after `run.rounds` rounds, in place of `noise`: z is the noise "
        "multiplier opacus's `get_noise_multiplier` finds for it with the run's sampling rate "
        "and accountant (0: `noise` gives z); `run.rounds` cannot change on resume then",
    )
    sample_clip: float = setting(
        0.0,
        "≥ 0; needs `train.trainer = 'vectorised'`",
        "C_s, sample-level DP (DP-SGD): the L2 bound of each sample's gradient in every local "
        "step, taken per sample with `torch.func` (0: off)",
    )
    sample_noise: float = setting(
        0.0,
        "≥ 0; needs `sample_clip` > 0",
        "σ_s, DP-SGD's noise multiplier: each local step's sum of clipped per-sample gradients "
        "gets Gaussian noise of std σ_s·C_s before it is divided by the batch size, drawn "
        "from the client's training seed (0: clipping alone, no ε)",
    )
    delta: float = setting(
        1e-5, "(0, 1)", "δ of the (ε, δ) guarantee that /metrics `dp_epsilon` reports"
    )
    accountant: str = setting(
        "rdp",
        "`rdp`, `prv`",
        "how ε is computed, by opacus: `rdp` (Rényi DP of the subsampled Gaussian, Mironov et "
        "al. 2019) or `prv` (privacy random variables, Gopi et al. 2021; tighter)",
    )

    @property
    def sample_dp(self) -> tuple[float, float] | None:
        """DP-SGD's (C_s, σ_s), None where sample-level privacy is off."""
        return (self.sample_clip, self.sample_noise) if self.sample_clip > 0 else None

    @property
    def sample_noised(self) -> bool:
        return self.sample_clip > 0 and self.sample_noise > 0

    @property
    def noised(self) -> bool:
        """Whether the aggregates are noised (``noise`` or ``epsilon`` with a bound)."""
        return self.clip > 0 and (self.noise > 0 or self.epsilon > 0)


def validate_privacy(c, *, unknown: bool = False) -> None:
    """The section's values and the relations between them (noise needs a bound, DP-SGD
    the vectorised trainer), and, with client-level noise, what its accountant assumes:
    clients drawn uniformly from all (``participation.availability = 'always'``,
    ``participation.selection = 'uniform'``) and cluster models the algorithm makes from the
    noised aggregates alone (its
    :meth:`~distfl.algorithms.api.base.ClusteringAlgorithm.privacy_refusal`). ``unknown``:
    a stored config's algorithm of a plug-in not imported is not asked."""
    p = c.privacy
    _values(p)
    if p.sample_clip > 0 and c.train.trainer != "vectorised":
        raise ConfigError(
            f"privacy.sample_clip = {p.sample_clip!r} needs train.trainer = 'vectorised', not "
            f"{c.train.trainer!r}: DP-SGD takes each sample's gradient with torch.func"
        )
    if (p.noised or p.sample_noised) and importlib.util.find_spec("opacus") is None:
        raise ConfigError("privacy's noise needs opacus, whose accountant gives ε: "
                          "pip install 'distfl[dp]'")  # fmt: skip
    if not p.noised:
        return
    for key, value, allowed in (("availability", c.participation.availability, "always"),
                                ("selection", c.participation.selection, "uniform")):  # fmt: skip
        if value != allowed:
            raise ConfigError(
                f"privacy.noise > 0 needs participation.{key} = {allowed!r}, not {value!r}: "
                f"the accountant's ε assumes each client is drawn with probability "
                f"clients_per_round / num_clients"
            )
    if unknown or c.algorithm.name not in ALGORITHMS:
        return
    why = ALGORITHMS.get(c.algorithm.name).privacy_refusal(c.algorithm.params)
    if why:
        raise ConfigError(
            f"privacy.noise > 0 with algorithm.name = {c.algorithm.name!r}: {why}; the noise is "
            "added to the aggregates alone"
        )


def _values(p: PrivacySection) -> None:
    """Each value in its range; a noise needs its bound; z or a target ε, not both."""
    tops = {"clip": MAX_CLIP, "noise": MAX_NOISE_MULTIPLIER, "epsilon": MAX_EPSILON,
            "sample_clip": MAX_CLIP, "sample_noise": MAX_NOISE_MULTIPLIER}  # fmt: skip
    for key, top in tops.items():
        value = getattr(p, key)
        if not (math.isfinite(value) and 0.0 <= value <= top):
            raise ConfigError(f"privacy.{key} = {value!r}: must be in [0, {top:g}]")
    if not (0.0 < p.delta < 1.0):
        raise ConfigError(f"privacy.delta = {p.delta!r}: must be in (0, 1)")
    for key, bound in (("noise", "clip"), ("epsilon", "clip"), ("sample_noise", "sample_clip")):
        if getattr(p, key) > 0 and getattr(p, bound) <= 0:
            raise ConfigError(
                f"privacy.{key} = {getattr(p, key)!r} needs privacy.{bound} > 0: the noise's "
                "std is a multiple of the bound, and an unclipped value has none"
            )
    if p.noise > 0 and p.epsilon > 0:
        raise ConfigError(
            f"privacy.epsilon = {p.epsilon!r} and privacy.noise = {p.noise!r}: give one, the "
            "target ε (z found for it) or z itself"
        )


__all__ = ["ACCOUNTANTS", "PrivacySection", "validate_privacy"]
