"""``fedcs`` (Nishio and Yonetani 2019): of a draw (the algorithm's own, or the uniform one
among the available clients), the clients FedCS's greedy schedule fits into the round's
``participation.deadline``, in the order it added them (:mod:`distfl.participation.fedcs`
holds the paper's Algorithm 2)."""

from __future__ import annotations

import numpy as np

from distfl.errors import ConfigError
from distfl.participation.fedcs import fedcs_select
from distfl.participation.model import PARAM_BYTES
from distfl.participation.selection.base import SelectionStrategy, own_draw, register


@register
class FedCS(SelectionStrategy):
    name = "fedcs"

    @classmethod
    def check(cls, config) -> None:
        if not config.participation.deadline:
            raise ConfigError(
                "participation.selection = 'fedcs' schedules the clients into the round's "
                "deadline: set participation.deadline (seconds) and participation.resources"
            )

    def choose(self, rng: np.random.Generator, pool, size: int, *, own=None, priority=None,
               trainings: int = 1) -> np.ndarray:  # fmt: skip
        p = self.participation
        if own is not None:
            chosen = own_draw(own(), pool)
            return self._schedule(chosen[p.available(chosen)], trainings)
        return self._schedule(p.uniform(rng, pool, size), trainings)

    def _schedule(self, candidates: np.ndarray, trainings: int = 1) -> np.ndarray:
        """FedCS's greedy schedule of ``candidates`` (the clients it asked for their
        resources), each training ``trainings`` models, under the deadline: those it
        selects, in the order it added them."""
        p = self.participation
        speed, bandwidth = p.resources(candidates)
        _, compute, up = p.client_times(candidates, speed, bandwidth, trainings)
        chosen = fedcs_select(
            compute, up, bandwidth * 1e6 / 8,
            model_bytes=trainings * PARAM_BYTES * p.num_params,
            round_s=self.section.deadline,
        )  # fmt: skip
        return candidates[chosen]


__all__ = ["FedCS"]
