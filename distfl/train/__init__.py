"""Local training of simulated clients."""

from distfl.train.sequential import SequentialTrainer, client_seed, evaluate

__all__ = ["SequentialTrainer", "client_seed", "evaluate"]
