"""The seeds a run draws from (:class:`RunSeeds`, the methods of ``config.run``):
``run.data_seed``, ``run.init_seed`` and ``run.sampling_seed`` each seed one part of a
run where set, and ``run.seed`` where unset (-1), as it seeded the whole run before the
three existed."""

from __future__ import annotations


class RunSeeds:
    """The effective seed of each part of a run (``seed``, ``data_seed``, ``init_seed`` and
    ``sampling_seed`` are :class:`~distfl.config.RunSection`'s keys)."""

    seed: int
    data_seed: int
    init_seed: int
    sampling_seed: int

    def effective_data_seed(self) -> int:
        """The seed of the data (the partition, a generated dataset, the transforms drawn
        per group or client): ``data_seed``, or ``seed`` where it is unset."""
        return self.seed if self.data_seed < 0 else self.data_seed

    def effective_init_seed(self) -> int:
        """The seed of the model's initialisation (every offset of
        :class:`~distfl.runtime.seeding.ModelSeeding`): ``init_seed``, or ``seed``."""
        return self.seed if self.init_seed < 0 else self.init_seed

    def effective_sampling_seed(self) -> int:
        """The algorithm's seed (its cohort draws and its other server-side draws):
        ``sampling_seed``, or ``seed``."""
        return self.seed if self.sampling_seed < 0 else self.sampling_seed


__all__ = ["RunSeeds"]
