"""IFCA, the Iterative Federated Clustering Algorithm (Ghosh, Chung, Yin, Ramchandran,
"An Efficient Framework for Clustered Federated Learning", NeurIPS 2020).

The server keeps ``num_clusters`` models. How they start is ``init``:

- ``"random"`` (the paper's): each from its own initialisation (cluster ``"j"`` takes
  initialisation offset ``j + 1``; see :meth:`ClusteringAlgorithm.initial_models`). Which
  random model a client's data fits best in round 1 says little about the client, and a
  model that no client picks never trains: on digits one seed put 11 of 12 clients on one
  model in round 1, for good (docs/algorithms.md).
- ``"kmeans++"`` (the default): every model starts from the run's initial model, and round
  1 is a seeding round without a probe (every loss would tie): every client (as many as
  FeSEM's seeding round takes) trains once from that model and sends it (as in FeSEM's
  seeding round); the server runs k-means on them (k-means++ seeds,
  :mod:`distfl.algorithms.common.kmeans`) and sets the cluster models to the k-means centres;
  round 2 probes every client. Seeding
  from one round's sample of 4 of 12 clients instead collapsed one seed in three on the
  0°/180° digits federation. ``fedavg_rounds`` = W > 0 puts W rounds of FedAvg before the
  seeding round, as FeSEM's does: no probe, the round's sampled clients train the one
  shared model (the aggregator's mean of them becomes every cluster model), so that the
  seeding round's models are trained from a warmed-up model whose updates k-means can
  tell apart; the seeding round is W + 1 and round W + 2 probes every client.

Each round it samples ``clients_per_round`` clients uniformly without replacement; before local
training every sampled client evaluates every cluster model on its own *train* data, as in
the paper's Algorithm 1 (the estimate ĵ = argmin_j F_i(θ_j) uses the client's training
loss), and joins the cluster of least loss (ties go to the lowest cluster index). It then
trains from that cluster's model, and each cluster model becomes the weighted mean of its
participants' models (the runtime's aggregator, i.e. the paper's model-averaging option). A
cluster that no sampled client chose keeps its model: :meth:`IFCA.clusters` lists every
cluster id, with possibly no members, so no model is ever dropped.

Round 1 probes every client, not only the sampled ones, so that each client has a cluster
(and a model to evaluate) from the first evaluation on; clients not sampled later keep
their last assignment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common import seeded
from distfl.algorithms.common.kmeans import kmeans


def assign_by_loss(losses: np.ndarray) -> np.ndarray:
    """[n] index of the least loss in each row of ``losses`` [n, M]; ties go to the lowest
    index, and a NaN loss (a diverged model) never wins unless the whole row is NaN."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[1] < 1:
        raise ValueError(f"losses must be [n, M] with M >= 1, got shape {losses.shape}")
    clean = np.where(np.isnan(losses), np.inf, losses)
    return np.argmin(clean, axis=1).astype(np.int64)


@dataclass(frozen=True)
class IFCAParams(seeded.CentresParams):
    num_clusters: int = seeded.fixed_models_setting()
    init: str = seeded.init_setting()
    fedavg_rounds: int = seeded.fedavg_rounds_setting(
        "every cluster model the round's mean model, no probe"
    )


@api.register
class IFCA(seeded.Centres):
    name = "ifca"
    Params = IFCAParams
    client_ops = ("losses",)
    client = "distfl.algorithms.common.losses_client:LossesClient"
    newcomers = ("the cluster of least loss on its train split (the paper's estimate "
                 "of a client's cluster, Algorithm 1)")  # fmt: skip

    @classmethod
    def privacy_refusal(cls, params: IFCAParams) -> str | None:
        """init = "kmeans++" makes the first models k-means centres of the clients' models."""
        if params.init == "kmeans++":
            return ("init = 'kmeans++' makes the models k-means centres of the clients' "
                    "individual models")  # fmt: skip
        return None

    def __init__(
        self, *, num_clients: int, clients_per_round: int, seed: int,
        params: IFCAParams | None = None, **settings,
    ):  # fmt: skip
        params = IFCAParams.made(params, settings)
        num_clusters, init, fedavg_rounds = params.num_clusters, params.init, params.fedavg_rounds
        if num_clusters < 1:
            raise ValueError(f"num_clusters must be at least 1, got {num_clusters}")
        if fedavg_rounds < 0:
            raise ValueError(f"fedavg_rounds must be 0 or more, got {fedavg_rounds}")
        seeded.check_init(init)
        if not 1 <= clients_per_round <= num_clients:
            raise ValueError(
                f"clients_per_round must be in 1..{num_clients}, got {clients_per_round}"
            )
        self.ids = [str(j) for j in range(num_clusters)]
        # every cluster is a leaf from the start, without members until the first probe
        super().__init__(
            num_clients=num_clients,
            clients_per_round=clients_per_round,
            seed=seed,
            roots={cid: () for cid in self.ids},
            params=params,
        )
        self.rng = np.random.default_rng([seed, 0x1FCA])
        #: the clients sampled by :meth:`plan_probe` for round ``_sampled_round``
        self._sampled = np.zeros(0, dtype=np.int64)
        self._sampled_round = 0
        #: 0: seeded (or random); 1: round 1's models are still to be clustered; 2: seeded
        #: in the last round, every client to be probed again
        self.seeding = 1 if init == "kmeans++" else 0
        #: FedAvg rounds before the seeding round (kmeans++ only)
        self.fedavg_rounds = int(fedavg_rounds) if init == "kmeans++" else 0

    @property
    def assign(self) -> np.ndarray:
        """Each client's cluster index, -1 until its first probe (read from the tree)."""
        return self.tree.index_in(self.ids)

    # -- a round ---------------------------------------------------------------------

    def plan_probe(self, round_index: int) -> api.ProbeRequest | None:
        """Sample the round's clients; ask them (every client while some have no cluster
        yet, i.e. in round 1) for their train loss under every cluster model."""
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        self._sampled = np.sort(chosen).astype(np.int64)
        self._sampled_round = round_index
        _, assign = self.tree.assignment()
        if self.seeding == 1:  # identical models: no probe (FedAvg, then the seeding round)
            if (assign < 0).any():
                unassigned = np.flatnonzero(assign < 0).astype(np.int64)
                self.tree.reassign(unassigned, [self.ids[0]] * len(unassigned))
            return None
        if (assign < 0).any() or self.seeding == 2:
            self.seeding = 0 if self.seeding == 2 else self.seeding
            clients = np.arange(self.num_clients, dtype=np.int64)
        else:
            clients = self._sampled.copy()
        return api.ProbeRequest(clients=clients, clusters=list(self.ids), op="losses")

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        """Each probed client joins the cluster of least loss."""
        clients = np.asarray(request.clients, dtype=np.int64)
        losses = np.asarray(rows, dtype=np.float64)
        if losses.shape != (len(clients), self.num_clusters):
            raise ValueError(
                f"round {round_index}: probe losses of shape {losses.shape}, expected "
                f"{(len(clients), self.num_clusters)}"
            )
        if list(request.clusters) != self.ids:
            raise ValueError(f"round {round_index}: probe over clusters {request.clusters}")
        self.tree.reassign(clients, [self.ids[j] for j in assign_by_loss(losses)])

    def newcomer_probe(self, clients: np.ndarray) -> api.ProbeRequest:
        """Each newcomer's train loss under every cluster model."""
        return api.ProbeRequest(clients=np.asarray(clients, dtype=np.int64),
                                clusters=list(self.ids), op="losses")  # fmt: skip

    def place_newcomers(self, clients, groups, rows) -> api.NewcomerModels:
        """Each newcomer joins the cluster of least loss (ties: the lowest index)."""
        return api.NewcomerModels([self.ids[j] for j in assign_by_loss(rows)])

    def plan(self, round_index: int) -> api.RoundPlan:
        if self._sampled_round != round_index:
            raise RuntimeError(
                f"IFCA: round {round_index} planned without its probe "
                f"(last probe for round {self._sampled_round})"
            )
        leaves, assign = self.tree.assignment()
        unassigned = self._sampled[assign[self._sampled] < 0]
        if unassigned.size:
            raise RuntimeError(f"IFCA: round {round_index}: clients {unassigned} have no cluster")
        if self.seeding == 1 and round_index <= self.fedavg_rounds:  # FedAvg on one model
            train = dict.fromkeys(self._sampled.tolist(), self.ids[0])
            return api.RoundPlan(round=round_index, train=train)
        if self.seeding == 1:  # the seeding round: every client trains once from the start
            train = dict.fromkeys(self.seeding_sample().tolist(), self.ids[0])
            return api.RoundPlan(round=round_index, train=train, return_models=frozenset(train))
        train = {int(k): leaves[int(assign[k])] for k in self._sampled}
        return api.RoundPlan(round=round_index, train=train)

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """No split; ``models``: the k-means centres after the seeding round; no ``stats``
        (each cluster's size is the ``size`` column /metrics/clusters has for every run)."""
        models = {}
        if self.seeding == 1 and round_index <= self.fedavg_rounds:
            # the round's mean (the aggregator's, in the first cluster) becomes every model
            mean = np.asarray(reports.cluster_models[self.ids[0]], dtype=np.float32)
            return api.RoundUpdate(models={cid: mean.copy() for cid in self.ids[1:]})
        # fewer models than clusters (lost to participation): the next round seeds again
        if (self.seeding == 1 and reports.models is not None
                and len(reports.models) >= self.num_clusters):  # fmt: skip
            X = np.asarray(reports.models, dtype=np.float64)
            _, centres = kmeans(X, reports.num_samples, self.num_clusters, self.rng)
            models = {cid: centres[j].astype(np.float32) for j, cid in enumerate(self.ids)}
            self.seeding = 2
        return api.RoundUpdate(models=models)

    # -- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "sampled": self._sampled.copy(),
            "sampled_round": self._sampled_round,
            "seeding": self.seeding,
        }

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the assignment also stored it here.)"""
        self.rng.bit_generator.state = state["rng"]
        self._sampled = np.asarray(state["sampled"], dtype=np.int64).reshape(-1).copy()
        self._sampled_round = int(state["sampled_round"])
        self.seeding = int(state.get("seeding", 0))  # absent: written before init existed


__all__ = ["IFCA", "IFCAParams", "assign_by_loss"]
