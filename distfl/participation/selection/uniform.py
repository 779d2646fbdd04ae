"""``uniform``: the algorithm's own draw as it is, else a uniform draw without replacement
among the clients available this round (with every client always available, the
``rng.choice(pool, size, replace=False)`` every algorithm made before participation
existed)."""

from __future__ import annotations

import numpy as np

from distfl.participation.selection.base import SelectionStrategy, own_draw, register


@register
class Uniform(SelectionStrategy):
    name = "uniform"
    chooses = False

    def choose(self, rng: np.random.Generator, pool, size: int, *, own=None, priority=None,
               trainings: int = 1) -> np.ndarray:  # fmt: skip
        if own is not None:
            return own_draw(own(), pool)
        if self.participation.everyone:
            return rng.choice(pool, size=size, replace=False)
        return self.participation.uniform(rng, pool, size)


__all__ = ["Uniform"]
