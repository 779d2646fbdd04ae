"""``fedpns`` (Wu and Wang 2022) in a run (:mod:`distfl.participation.fedpns` holds its
math): its draws by the selection probabilities among the available clients, and after each
round's training the optimal aggregation of each cluster's reports, the clients it leaves out
labeled and their probabilities lowered. Its state (the probabilities and counts of the
clients ever selected) is the run's /state/selection."""

from __future__ import annotations

import math

import numpy as np

from distfl.errors import ConfigError
from distfl.participation.fedpns import PnsProbabilities, optimal_aggregation
from distfl.participation.selection.base import SelectionStrategy, register


@register
class FedPNS(SelectionStrategy):
    """FedPNS over a run's rounds (``participation.pns_alpha``, ``pns_beta``, ``pns_kept``);
    the algorithm's own draw is not used: FedPNS draws in its place."""

    name = "fedpns"
    reads_models = True
    keeps_state = True

    def __init__(self, participation, config) -> None:
        super().__init__(participation, config)
        p = config.participation
        self.probabilities = PnsProbabilities(len(participation.client_group))
        self.alpha, self.beta, self.kept = float(p.pns_alpha), float(p.pns_beta), float(p.pns_kept)
        #: the scale of a model change into the code's gradient, (θ_start − θ_k) / (S·lr)
        self.scale = 1.0 / (config.train.local_steps * config.train.lr)

    @classmethod
    def check(cls, config) -> None:
        if config.server.aggregator != "fedavg":
            raise ConfigError(
                f"participation.selection = 'fedpns' makes each cluster's model the weighted "
                f"mean of the reports it keeps: it needs server.aggregator = 'fedavg', not "
                f"{config.server.aggregator!r}"
            )

    def choose(self, rng: np.random.Generator, pool, size: int, *, own=None, priority=None,
               trainings: int = 1) -> np.ndarray:  # fmt: skip
        """``size`` clients of ``pool`` by successive sampling from the probabilities among
        the available ones (fewer when fewer are available); the plan that trains them
        counts them selected (:meth:`selected`).
        ``priority``: the algorithm's weight of each client (a callable of the available
        ids of the pool, listed whole), multiplied into the probabilities."""
        always = self.section.availability == "always"
        available = None if always else self.participation.available
        p = self.probabilities
        whole = isinstance(pool, (int, np.integer)) and int(pool) == p.num_clients
        if whole and priority is None:
            try:
                chosen = p.draw(rng, min(int(size), p.num_clients), accept=available)
            except RuntimeError:  # fewer available (or left with probability) than asked
                chosen = self._from(rng, np.arange(p.num_clients, dtype=np.int64), size,
                                    available)  # fmt: skip
        else:
            ids = np.arange(int(pool), dtype=np.int64) if np.ndim(pool) == 0 else np.asarray(pool)
            chosen = self._from(rng, ids.astype(np.int64), size, available, priority)
        return chosen

    def selected(self, plan) -> None:
        """The clients of an admitted round's plan (before availability, dropouts and the
        deadline: those it selected) count once more as selected; a client drawn and left
        out of the plan (IFCA's cohort in its seeding round) does not."""
        self.probabilities.record_selected(np.array(sorted(plan.train), dtype=np.int64))

    def _from(self, rng, ids: np.ndarray, size: int, available, priority=None) -> np.ndarray:
        """Successive sampling among the available ``ids`` (a pool listed whole), by the
        probabilities times ``priority`` where given."""
        if available is not None:
            ids = ids[available(ids)]
        weights = self.probabilities.prob(ids)
        if priority is not None and len(ids):
            own = np.asarray(priority(ids), dtype=np.float64)
            if own.shape != ids.shape or not np.all(np.isfinite(own) & (own >= 0)):
                raise ValueError(f"a draw's priority must be a finite weight of at least 0 "
                                 f"for each of the {len(ids)} clients it is given")  # fmt: skip
            weights = weights * own
        live = weights > 0
        ids, weights = ids[live], weights[live]
        n = min(int(size), len(ids))
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        return rng.choice(ids, size=n, replace=False, p=weights / weights.sum()).astype(np.int64)

    def after_training(self, plan, reports, starts: dict[str, np.ndarray]) -> tuple[dict, int]:
        """The optimal aggregation of each cluster's reports (one model a client: a soft
        plan is left as the aggregator made it), from the round's start models ``starts``:
        the clients it leaves out are labeled and lose probability, and a cluster that lost
        some gets the sample-weighted mean of the kept models (float64 sums, float32 model).
        Returns (the clusters' new models, the reports left out)."""
        if plan.soft() or reports.models is None or not len(reports.clients):
            return {}, 0
        clusters = np.array([str(plan.train[int(k)]) for k in reports.clients])
        models, labeled_all = {}, []
        for cid in sorted(set(clusters.tolist())):
            rows = np.flatnonzero(clusters == cid)
            if len(rows) < 2:
                continue
            thetas = reports.models[rows].astype(np.float64)
            grads = (starts[cid].astype(np.float64)[None, :] - thetas) * self.scale
            kept, labeled = optimal_aggregation(grads, min_kept=math.ceil(self.kept * len(rows)))
            if not labeled:
                continue
            labeled_all.extend(int(reports.clients[rows[i]]) for i in labeled)
            w = reports.num_samples[rows[kept]].astype(np.float64)
            models[cid] = ((w[:, None] * thetas[kept]).sum(axis=0) / w.sum()).astype(np.float32)
        if labeled_all:  # (in the order removed, as the code sums their changes)
            ids = np.array(labeled_all, dtype=np.int64)
            p = self.probabilities
            p.record_labeled(ids)
            selected, times = p.counts(ids)
            p.penalise(ids, times / np.maximum(selected, 1), alpha=self.alpha, beta=self.beta)
        return models, len(labeled_all)

    def state_dict(self) -> dict:
        return self.probabilities.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.probabilities.load_state_dict(state)


__all__ = ["FedPNS"]
