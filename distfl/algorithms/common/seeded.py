"""M cluster models from the start, each seeded at random or all from client models by
k-means++ after rounds of FedAvg: the round IFCA and FeSEM share (docs/algorithms.md)."""

from __future__ import annotations

from functools import partial

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import (
    PAPERS_GIVE,
    check_cluster_count,
    cluster_count_setting,
    with_group_count,
)
from distfl.settings import Condition, require, setting

#: the seeding round trains every client up to this many, and no more than fit their
#: float32 models in SEED_BYTES (k-means holds a float64 copy besides); a uniform sample of
#: that many in a larger population
SEED_CLIENTS = 2048
SEED_BYTES = 1 << 30


# -- the warm-up settings IFCA and FeSEM share ---------------------------------------------

#: how the cluster models may start
INIT_CHOICES = ("kmeans++", "random")
#: run files written before ``init`` (and ``fedavg_rounds``) existed started their models at
#: random (seeded in round 1)
WARM_UP_STORED_DEFAULTS = {"init": "random", "fedavg_rounds": 0}


def init_setting():
    """The ``init`` key: k-means++ seeding from round 1's client models, or random models."""
    return setting(
        "kmeans++",
        "`kmeans++`, `random`",
        "how the cluster models start: seeded by k-means of round 1's client models, or (the "
        "papers') each from its own random initialisation; see Algorithms",
    )


def fedavg_rounds_setting(each_round: str):
    """The ``fedavg_rounds`` key; ``each_round`` says what a FedAvg round makes of the
    cluster models."""
    return setting(
        0,
        "int ≥ 0",
        f'with `init = "kmeans++"`: rounds of FedAvg ({each_round}) before the seeding round, '
        "so that k-means sees models trained from a warmed-up model",
    )


#: ``fedavg_rounds`` warms up the model that k-means seeds from: without the seeding round
#: (``init = "random"``) it takes no effect
WARM_UP_CONDITIONS = {
    "fedavg_rounds": Condition(
        ("algorithm.init",), "algorithm.init = 'kmeans++'", lambda c: c.algorithm.init == "kmeans++"
    )
}


def check_warm_up(params) -> None:
    """Refuse a negative ``fedavg_rounds``."""
    require(params.fedavg_rounds >= 0, "fedavg_rounds", params.fedavg_rounds, "0 or more rounds")


def check_init(init: str) -> None:
    """ValueError for an ``init`` outside :data:`INIT_CHOICES` (an algorithm built directly)."""
    if init not in INIT_CHOICES:
        raise ValueError(f"init must be 'kmeans++' or 'random', not {init!r}")


def seeding_size(num_params: int, num_clusters: int) -> int:
    """How many clients a seeding round takes at most, for a model of ``num_params``
    parameters (0: unknown, :data:`SEED_CLIENTS`); never fewer than ``num_clusters``."""
    cap = SEED_CLIENTS if num_params <= 0 else min(SEED_CLIENTS, SEED_BYTES // (4 * num_params))
    return max(int(cap), int(num_clusters), 1)


def seeding_round_models(params, *, num_clients: int, clients_per_round: int,
                         num_params: int) -> int:  # fmt: skip
    """Client models a round of IFCA or FeSEM brings at most: with ``init = "kmeans++"``,
    those of the seeding round's clients (:func:`seeding_size`), else the cohort's."""
    if params.init != "kmeans++":
        return clients_per_round
    seeding = min(num_clients, seeding_size(num_params, max(params.num_clusters, 1)))
    return max(clients_per_round, seeding)


def seeding_clients(num_clients: int, rng: np.random.Generator, size: int) -> np.ndarray:
    """The clients of a seeding round, ascending: all of them, or ``size`` drawn uniformly
    without replacement when there are more."""
    if num_clients <= size:
        return np.arange(num_clients, dtype=np.int64)
    return np.sort(rng.choice(num_clients, size=size, replace=False)).astype(np.int64)


def fixed_models_setting():
    """The ``num_clusters`` key of IFCA and FeSEM."""
    return cluster_count_setting(
        2,
        "the fixed number of cluster models",
        PAPERS_GIVE + "; a suite-wide `--set algorithm.num_clusters=0` fits every scenario",
    )


class CentresParams(api.Params):
    """What IFCA's and FeSEM's settings share (their dataclasses subclass this): ``init``'s
    choices, the defaults of files written before the warm-up, ``fedavg_rounds`` taking
    effect only with k-means++, and the checks of ``num_clusters`` and ``fedavg_rounds``."""

    choices = {"init": INIT_CHOICES}
    stored_defaults = WARM_UP_STORED_DEFAULTS
    conditions = WARM_UP_CONDITIONS

    def check(self, config) -> None:
        check_cluster_count(self, config)
        check_warm_up(self)


class Centres(api.ClusteringAlgorithm):
    """The server half IFCA and FeSEM share; the subclass sets ``self.ids`` (the M cluster
    ids) and ``self.rng`` (what the seeding round draws from)."""

    clusters_key = "num_clusters"

    @classmethod
    def from_config(cls, federation, params):
        return super().from_config(federation, with_group_count(params, federation))

    @classmethod
    def round_models(cls, params, **sizes) -> int:
        return seeding_round_models(params, **sizes)

    def initial_models(self) -> dict[str, int]:
        """``random``: cluster model m starts from its own random initialisation (offset
        m + 1); ``kmeans++``: every one from the run's initial model, until the seeding round
        seeds them."""
        if self.init == "kmeans++":
            return dict.fromkeys(self.ids, 0)
        return {cid: m + 1 for m, cid in enumerate(self.ids)}

    def seeding_sample(self) -> np.ndarray:
        """The seeding round's clients, ascending: up to :func:`seeding_size` of them (a
        uniform draw from ``self.rng`` where there are more), as the run's selection lets."""
        size = seeding_size(self.federation.num_params, self.num_clusters)
        own = partial(seeding_clients, self.num_clients, self.rng, size)
        return np.sort(self.sample_clients(self.num_clients, min(size, self.num_clients), own=own))


__all__ = [
    "INIT_CHOICES",
    "SEED_BYTES",
    "SEED_CLIENTS",
    "WARM_UP_CONDITIONS",
    "WARM_UP_STORED_DEFAULTS",
    "CentresParams",
    "Centres",
    "check_init",
    "check_warm_up",
    "fedavg_rounds_setting",
    "fixed_models_setting",
    "init_setting",
    "seeding_clients",
    "seeding_round_models",
    "seeding_size",
]
