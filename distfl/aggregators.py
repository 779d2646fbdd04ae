"""Server aggregators: turn the reduced sums of a cluster into its new model.

Every aggregator receives, per cluster, Σ_k w_k (θ_k − θ) (exact, as float64) and Σ_k w_k
over the cluster's participants, and works with any clustering algorithm (one instance
serves every cluster; per-cluster state is keyed by cluster id and inherited at a split).

- ``fedavg`` — FedAvg (McMahan et al., AISTATS 2017): w_k = n_k, the sample count; the new
  model is θ + Σ w_k Δθ_k / Σ w_k, the sample-weighted mean of the clients' models.
- ``fedavgm`` — FedAvgM (Hsu, Qi, Brown, 2019, "Measuring the effects of non-identical
  data distribution for federated visual classification"): server momentum on the
  sample-weighted mean update Δ: v ← β v + Δ, θ ← θ + η v (β = ``server.momentum``,
  η = ``server.lr``); β = 0, η = 1 is FedAvg.
- ``fedprox`` — FedProx (Li et al., MLSys 2020): FedAvg's aggregation of clients that
  minimise their loss plus (μ/2)‖w − w_start‖² (``train.prox_mu``, required > 0).
- ``fairavg`` — FairAvg (Michieli & Ozay, "Are all users treated fairly in federated
  learning systems?", CVPR Workshops 2021): uniform aggregation, w_k = 1, so a client
  with few samples counts as much as one with many.

An aggregator of one's own subclasses :class:`Aggregator` in a file that ``run.plugins``
names and registers with :func:`register` (every rank imports it: the workers read its
``uniform``); ``server.aggregator`` then names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from distfl.errors import ConfigError
from distfl.plugins import AGGREGATORS

if TYPE_CHECKING:  # (no torch at import: a config names an aggregator without it)
    import torch

#: the keys of [server] an aggregator may read (its ``keys``)
SERVER_KEYS = frozenset({"lr", "momentum"})


def register(cls: type[Aggregator]) -> type[Aggregator]:
    """Class decorator: make ``cls`` available as ``server.aggregator = cls.name``."""
    AGGREGATORS.check_class(cls, Aggregator)
    if not isinstance(cls.keys, tuple) or not set(cls.keys) <= SERVER_KEYS:
        raise ValueError(
            f"{cls.__name__}.keys = {cls.keys!r}: a tuple of the [server] keys an aggregator "
            f"reads ({', '.join(sorted(SERVER_KEYS))})"
        )
    return AGGREGATORS.add(cls)


class Aggregator:
    """FedAvg; the base of the others."""

    name = "fedavg"
    #: client weights w_k: the sample count (False) or 1 (True); the workers read this
    uniform = False
    #: the keys of [server] it reads (FedAvgM's ``lr`` and ``momentum``): the only ones
    #: :func:`build_aggregator` gives it, and the config's check refuses the others set
    #: for an aggregator that does not read them (distfl.config.effects)
    keys: tuple[str, ...] = ()

    def __init__(self, *, lr: float = 1.0, momentum: float = 0.0):
        self.lr = lr
        self.momentum = momentum

    @classmethod
    def check(cls, config) -> None:
        """Refuse (ConfigError, one line) a config the aggregator cannot act on."""

    def __call__(
        self, cid: str, model: torch.Tensor, delta_sum: torch.Tensor, weight_sum: float
    ) -> torch.Tensor:
        """The new model of cluster ``cid``; with no participant it is unchanged."""
        if weight_sum <= 0:
            return model.clone()
        return (model.double() + delta_sum / float(weight_sum)).float()

    def split(self, parent: str, children: list[str]) -> None:
        """Children inherit the parent's state."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@register
class FedAvgM(Aggregator):
    name = "fedavgm"
    keys = ("lr", "momentum")

    def __init__(self, *, lr: float = 1.0, momentum: float = 0.9):
        super().__init__(lr=lr, momentum=momentum)
        self.velocity: dict[str, torch.Tensor] = {}

    def __call__(self, cid, model, delta_sum, weight_sum):
        if weight_sum <= 0:
            return model.clone()
        mean = delta_sum.double() / float(weight_sum)
        v = self.velocity.get(cid)
        v = mean if v is None else self.momentum * v + mean
        self.velocity[cid] = v
        return (model.double() + self.lr * v).float()

    def split(self, parent, children):
        v = self.velocity.pop(parent, None)
        if v is not None:
            for child in children:
                self.velocity[child] = v.clone()

    def state_dict(self) -> dict:
        ids = sorted(self.velocity)
        return {
            "ids": ids,
            "velocity": (
                np.stack([self.velocity[c].numpy() for c in ids])
                if ids
                else np.zeros((0, 0), dtype=np.float64)
            ),
        }

    def load_state_dict(self, state: dict) -> None:
        ids = [str(i) for i in state.get("ids", [])]
        vel = np.asarray(state.get("velocity", np.zeros((0, 0))))
        import torch

        self.velocity = {c: torch.from_numpy(np.array(vel[i])) for i, c in enumerate(ids)}


@register
class FedProx(Aggregator):
    name = "fedprox"

    @classmethod
    def check(cls, config) -> None:
        if not config.train.prox_mu > 0:
            raise ConfigError(
                "server.aggregator = 'fedprox' needs train.prox_mu > 0 (the proximal term μ, "
                "e.g. --set train.prox_mu=0.01)"
            )


@register
class FairAvg(Aggregator):
    name = "fairavg"
    uniform = True


register(Aggregator)  # FedAvg (the base is defined before register can check it)


def build_aggregator(server) -> Aggregator:
    """The aggregator of ``server.aggregator`` with the keys of ``server`` it reads (its
    ``keys``: FedAvgM's ``server.lr`` and ``server.momentum``)."""
    cls = AGGREGATORS.get(server.aggregator)
    return cls(**{key: getattr(server, key) for key in cls.keys})
