"""``data.held_out``: newcomers, clients drawn as their group's others and kept out of
training, each given a model at every evaluation by its algorithm's rule for a client that
never trained (:attr:`~distfl.algorithms.api.base.ClusteringAlgorithm.newcomers`). How many
of each group, and what refuses them: a partition whose newcomers would hold the trained
clients' samples (a ``shards`` group deals all of its samples to its clients), and an
algorithm whose paper gives a newcomer no model."""

from __future__ import annotations

import math

from distfl.errors import ConfigError
from distfl.plugins import ALGORITHMS

#: the largest count per group
MAX_HELD_OUT = 1_000_000


def held_out_counts(held_out: float, counts) -> tuple[int, ...]:
    """The newcomers of each group of ``counts`` clients: a share s in (0, 1) gives
    round(s × count) (halves up), a whole number n ≥ 1 gives n, 0 none."""
    if held_out <= 0:
        return tuple(0 for _ in counts)
    if held_out < 1:
        return tuple(int(math.floor(held_out * int(n) + 0.5)) for n in counts)
    return tuple(int(held_out) for _ in counts)


def validate_held_out(c, *, unknown: bool = False) -> None:
    """The value, the groups it draws from and the algorithm's rule. ``unknown``: a stored
    config's algorithm of a plug-in not imported is not asked."""
    value = c.data.held_out
    shown = int(value) if 1 <= value <= MAX_HELD_OUT and value == int(value) else value
    if not (0 <= value <= MAX_HELD_OUT) or (value >= 1 and value != int(value)):
        raise ConfigError(
            f"data.held_out = {shown!r}: allowed are 0 (none), a share of each group in (0, 1) "
            f"or a whole count of each group from 1 to {MAX_HELD_OUT:,}"
        )
    if value == 0:
        return
    for i, g in enumerate(c.groups):
        if g.partition == "shards":
            raise ConfigError(
                f"data.held_out = {shown!r}: data.groups[{i}] deals all of its samples to its "
                "clients as shards (partition = 'shards'), so a newcomer would hold samples a "
                "trained client holds"
            )
    if sum(held_out_counts(value, [g.count for g in c.groups])) == 0:
        raise ConfigError(
            f"data.held_out = {shown!r}: holds out no client (a share of each group rounds to "
            "0 clients); give a larger share or a count"
        )
    if unknown or c.algorithm.name not in ALGORITHMS:
        return
    cls = ALGORITHMS.get(c.algorithm.name)
    if not cls.newcomers:
        able = sorted(n for n in ALGORITHMS.names() if ALGORITHMS.get(n).newcomers)
        raise ConfigError(
            f"data.held_out = {shown!r}: algorithm.name = {c.algorithm.name!r} gives a client "
            f"that never trained no model (its paper has no rule for one); algorithms that do: "
            f"{', '.join(able)}"
        )


__all__ = ["MAX_HELD_OUT", "held_out_counts", "validate_held_out"]
