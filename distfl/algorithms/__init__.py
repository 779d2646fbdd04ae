"""Clustering algorithms: the interface (:mod:`~distfl.algorithms.api.base`), the registry
(:mod:`~distfl.algorithms.api.registry`) and one module per algorithm, each registering itself.

Nothing here imports an algorithm module: the registry finds them when a name is first
looked up (:func:`algorithm_class`).
"""

from __future__ import annotations

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.api import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.api.registry import (
    algorithm_class,
    algorithm_names,
    client_half,
    every_run_statistics,
    key_owners,
    load_plugins,
    report_figures,
    split_matrix_titles,
)
from distfl.hierarchy import ClusterTree
from distfl.runfile.layout import Column


def build_algorithm(
    config,
    federation: api.Federation | None = None,
    *,
    groups=None,
    pool: api.ServerPool | None = None,
    participation=None,
):
    """The algorithm of ``config.algorithm`` for ``federation`` (by default one made of the
    config's client counts and seed, with ``groups`` as the clients' ground truth), with
    the run's ``pool`` of server work (:attr:`ClusteringAlgorithm.pool`; default this
    process) and ``participation`` (:attr:`ClusteringAlgorithm.participation`; default
    every client, always), both given before its first round."""
    if federation is None:
        federation = api.Federation(
            num_clients=config.data.num_clients,
            clients_per_round=config.server.clients_per_round,
            seed=config.run.effective_sampling_seed(),
            local_steps=config.train.local_steps,
            groups=None if groups is None else np.asarray(groups, dtype=np.int64),
        )
    cls = algorithm_class(config.algorithm.name)
    algorithm = cls.from_config(federation, config.algorithm.params)
    if pool is not None:
        algorithm.pool = pool
    if participation is not None:
        algorithm.participation = participation
    return algorithm


__all__ = [
    *api.__all__,
    "ClusterTree",
    "Column",
    "algorithm_class",
    "algorithm_names",
    "build_algorithm",
    "client_half",
    "every_run_statistics",
    "key_owners",
    "load_plugins",
    "report_figures",
    "split_matrix_titles",
]
