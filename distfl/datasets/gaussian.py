"""The FLCL paper's binary Gaussian mixture (Sinha, Kibilda, Saad, section V), generated:
one natural owner per client, whose samples are made from (seed, client) when asked."""

from __future__ import annotations

from dataclasses import dataclass

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register
from distfl.errors import ConfigError
from distfl.settings import Params, setting


@dataclass(frozen=True)
class GaussianParams(Params):
    dim: int = setting(2, "int ≥ 2", "features of each sample (the mixture's dimension d)")

    def check(self, config) -> None:
        if not 2 <= self.dim:
            raise ConfigError(f"data.dim = {self.dim!r}: must be at least 2 (features)")


@register
class Gaussian(DatasetSpec):
    name = "gaussian"
    source = "generated"
    files = "none"
    num_classes = 2
    sample_shape = ()  # data.dim features
    natural = "always"
    generated = True
    Params = GaussianParams

    @classmethod
    def shape_text(cls):
        return "[d] (`data.dim`)"

    @classmethod
    def input_shape(cls, config):
        return (config.data.dim,)

    @classmethod
    def size_keys(cls):
        return {"dim": (2, "features")}

    @classmethod
    def load(cls, config):
        from distfl.data.partition import sample_counts
        from distfl.data.synthetic import gaussian_dataset

        sizes = sample_counts(
            config.groups,
            samples_per_client=config.data.samples_per_client,
            quantity_skew=config.data.quantity_skew,
            seed=config.run.seed,
        )
        return gaussian_dataset(sizes, config.data.dim, config.run.seed)
