"""The clusters' new models from a training step: the reduced exact sums of each cluster's
updates (:mod:`distfl.exact`, one row per cluster, its Σ n_k last) are decoded into the
float64 sum of its clients' weighted updates and handed to the aggregator
(``server.aggregator``), which makes the cluster's new model; a split gives the children
the parent's model and the aggregator's state of it."""

from __future__ import annotations

import torch

from distfl.aggregators import Aggregator, build_aggregator
from distfl.algorithms import Split
from distfl.exact import SumLayout
from distfl.runtime.privacy import AggregateNoise, aggregate_noise


class ClusterAggregation:
    """Decodes the step's sums with ``layout`` (models of ``num_params`` parameters) and
    aggregates them with ``aggregator``, whose state (momentum, ...) it holds."""

    def __init__(self, aggregator: Aggregator, layout: SumLayout, num_params: int,
                 noise: AggregateNoise | None = None) -> None:  # fmt: skip
        self.aggregator = aggregator
        self.layout = layout
        self.num_params = num_params
        #: client-level DP's noise on each cluster's sum ([privacy]; None: none)
        self.noise = noise

    @classmethod
    def of_run(cls, config, layout: SumLayout, num_params: int, num_train) -> ClusterAggregation:
        """The run's: its ``server.aggregator`` and client-level DP's noise ([privacy])."""
        noise = aggregate_noise(config, num_train)
        return cls(build_aggregator(config.server), layout, num_params, noise)

    def bytes_per_param(self, sums: torch.Tensor) -> float:
        """Bytes per model parameter each rank handed to the reduce of ``sums``
        ([clusters, width]; the Σ n_k column, 8 bytes a model, apart)."""
        clusters = len(sums)
        values = sums.numel() - clusters
        return values * sums.element_size() / (clusters * self.num_params)

    def apply(
        self,
        models: dict[str, torch.Tensor],
        clusters: list[str],
        sums: torch.Tensor,
        exponents: torch.Tensor | None,
        weight_bits: int = 0,
        *,
        round_index: int = 0,
        spread: float = 1.0,
    ) -> None:
        """Replace each of ``clusters``' model in ``models`` by the aggregator's new model
        from its row of ``sums`` (and its grids' ``exponents``, with scaled sums); its
        weight column counts units of 2^-``weight_bits`` (the step's
        :meth:`~distfl.runtime.protocol.Plan.weight_bits`). With :attr:`noise`, each sum
        gets its noise of round ``round_index`` first (``spread``: the round's
        :func:`~distfl.runtime.privacy.sensitivity_spread`)."""
        for i, cid in enumerate(clusters):
            weight = int(sums[i, -1])
            if weight_bits:  # soft weights: Σ q_k 2^-G, the integer scaled exactly
                weight = weight * 2.0**-weight_bits
            row_exponents = exponents[i] if exponents is not None else None
            delta = self.layout.decode(sums[i, :-1], row_exponents)
            if self.noise is not None:
                delta = self.noise.add(delta, round_index, cid, spread)
            models[cid] = self.aggregator(cid, models[cid], delta, weight)

    def split(self, models: dict[str, torch.Tensor], splits: list[Split]) -> None:
        """Children start from the parent's (just aggregated) model; the algorithm has put
        them in the tree already."""
        for split in splits:
            for child_id in split.children:
                models[child_id] = models[split.parent].clone()
            del models[split.parent]
            self.aggregator.split(split.parent, list(split.children))

    def state_dict(self) -> dict:
        return self.aggregator.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.aggregator.load_state_dict(state)


__all__ = ["ClusterAggregation"]
