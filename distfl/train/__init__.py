"""Local training of simulated clients."""

from distfl.train.sequential import SequentialTrainer, client_seed, evaluate, train_losses
from distfl.train.vectorised import VectorisedTrainer, supports, trainer_kind

__all__ = [
    "SequentialTrainer",
    "VectorisedTrainer",
    "client_seed",
    "evaluate",
    "supports",
    "trainer_kind",
    "train_losses",
]
