"""What a clustering algorithm sees: plans and reports as arrays, never a communicator.

The runtime asks the algorithm for each round's plan (which clients train from which
cluster model), runs it on the workers, aggregates the cluster models, and hands the
per-client reports back. The algorithm keeps the cluster hierarchy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


@dataclass
class RoundPlan:
    """One round: ``train[k] = c`` means client k trains from the model of cluster ``c``."""

    round: int
    train: dict[int, str]
    #: clients whose updated model must travel to the server this round
    return_models: frozenset[int] = frozenset()

    def clusters(self) -> list[str]:
        """The cluster ids the plan needs, in a fixed (sorted) order."""
        return sorted(set(self.train.values()))


@dataclass
class ProbeRequest:
    """Something to ask of ``clients`` before a round's plan, answered as one row each.

    - ``kind = "loss"``: each evaluates the models of ``clusters`` (every one of them) on
      its own train data; row = the mean loss under each (IFCA's assignment);
    - ``kind = "emd"``: each trains the model of ``clusters[0]`` for ``steps`` local steps
      and returns its EMD-CFL distance row d_c,· over all K clients (see
      :mod:`distfl.algorithms.emdcfl`)."""

    clients: np.ndarray  # [n] int64, ascending
    clusters: list[str]
    kind: str = "loss"
    steps: int = 0


@dataclass
class ClientReports:
    """What the sampled clients sent back, rows in ascending client id."""

    clients: np.ndarray  # [n] int64
    losses: np.ndarray  # [n, S] the loss of every local step
    num_samples: np.ndarray  # [n] int64
    models: np.ndarray | None = None  # [n, P] float32, only for clients in return_models


@dataclass
class Split:
    """A cluster that became several: the children ids and their members."""

    parent: str
    children: dict[str, np.ndarray]
    info: dict[str, np.ndarray] = field(default_factory=dict)


class ClusteringAlgorithm(ABC):
    """Base class of the clustering algorithms; one instance lives on the server."""

    name: str = ""

    def __init__(self, *, num_clients: int, clients_per_round: int, seed: int):
        self.num_clients = num_clients
        self.clients_per_round = clients_per_round
        self.seed = seed

    @abstractmethod
    def clusters(self) -> dict[str, np.ndarray]:
        """The current leaf clusters: id -> member client ids (ascending)."""

    @abstractmethod
    def plan_round(self, round_index: int) -> RoundPlan: ...

    @abstractmethod
    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> list[Split]:
        """Take the round's reports; return the splits it made (the runtime copies models)."""

    def initial_models(self) -> dict[str, int]:
        """Which initialisation each starting cluster's model takes: 0 is the run's model
        (the same for every cluster, the default); another integer a model initialised
        from its own seed (IFCA's and FeSEM's distinct cluster models)."""
        return dict.fromkeys(self.clusters(), 0)

    def probe(self, round_index: int) -> ProbeRequest | None:
        """A probe to run before :meth:`plan_round`; none by default."""
        return None

    def probe_result(self, round_index: int, request: ProbeRequest, losses: np.ndarray) -> None:
        """The probe's answer: ``losses[i, j]`` is client ``request.clients[i]``'s mean
        train loss under the model of ``request.clusters[j]``."""
        return None

    def adjust_models(
        self, round_index: int, models: dict[str, np.ndarray], reports: ClientReports
    ) -> dict[str, np.ndarray]:
        """Models to replace after the aggregator ran (FeSEM's centres); none by default."""
        return {}

    def cluster_stats(self) -> dict[str, dict[str, float]]:
        """Per-cluster numbers recorded each round (e.g. FedGWC's MSE); none by default."""
        return {}

    def assignment(self) -> tuple[list[str], np.ndarray]:
        """(leaf ids, index of each client's leaf)."""
        leaves = sorted(self.clusters())
        out = np.full(self.num_clients, -1, dtype=np.int64)
        for i, leaf in enumerate(leaves):
            out[self.clusters()[leaf]] = i
        return leaves, out

    @abstractmethod
    def state_dict(self) -> dict: ...

    @abstractmethod
    def load_state_dict(self, state: dict) -> None: ...
