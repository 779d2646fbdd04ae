"""The clusters' initial models, drawn from the run's initialisation seed (``run.init_seed``,
or ``run.seed`` where it is unset).

The model of offset 0 is built after ``torch.manual_seed(seed)``; every other offset an
algorithm asks for (:meth:`~distfl.algorithms.ClusteringAlgorithm.initial_models`: clusters
that start from models of their own) from a seed of its own derived from (seed, offset).
Each cluster of the tree starts from a copy of its offset's model, the same at any world
size.
"""

from __future__ import annotations

import torch

from distfl.config import Config
from distfl.models import build_model, flat_params
from distfl.train.sequential import derived_seed


class ModelSeeding:
    """Builds the run's model from the seed of an offset; each build sets torch's global
    generator first, so a model's initial parameters depend on (seed, offset) alone."""

    def __init__(self, config: Config, input_shape: tuple[int, ...], num_classes: int) -> None:
        self.seed = config.run.effective_init_seed()
        self.model_name = config.model.name
        self.params = config.model.params
        self.input_shape = input_shape
        self.num_classes = num_classes

    def build(self, offset: int) -> torch.nn.Module:
        """A freshly initialised model of the run's architecture, drawn from the seed of
        ``offset`` (0: the initialisation seed itself)."""
        if offset == 0:
            torch.manual_seed(self.seed)
        else:
            torch.manual_seed(derived_seed(self.seed, 0x1A17, offset))
        return build_model(self.model_name, self.input_shape, self.num_classes, params=self.params)

    def cluster_models(
        self, first: torch.nn.Module, offsets: dict[str, int], cluster_ids: list[str]
    ) -> dict[str, torch.Tensor]:
        """Each cluster's flat float32 model: a copy of the model of its offset
        (``offsets[cluster]``); ``first`` is offset 0's, already built. The other offsets'
        models are built in ascending order."""
        built = {0: first, **{o: self.build(o) for o in sorted(set(offsets.values()) - {0})}}
        inits = {o: flat_params(m) for o, m in built.items()}
        return {cid: inits[offsets[cid]].clone() for cid in cluster_ids}


__all__ = ["ModelSeeding"]
