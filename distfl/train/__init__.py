"""Local training of simulated clients."""

from distfl.train.batched import BatchedTrainer, supports_batched
from distfl.train.choose import build_trainer, trainer_kind
from distfl.train.sequential import (
    SequentialTrainer,
    client_seed,
    evaluate,
    finetune_seed,
    train_losses,
)
from distfl.train.vectorised import VectorisedTrainer, supports

__all__ = [
    "BatchedTrainer",
    "SequentialTrainer",
    "VectorisedTrainer",
    "build_trainer",
    "client_seed",
    "evaluate",
    "finetune_seed",
    "supports",
    "supports_batched",
    "trainer_kind",
    "train_losses",
]
