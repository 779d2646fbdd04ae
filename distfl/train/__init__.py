"""Local training of simulated clients."""

from distfl.train.batched import BatchedTrainer, supports_batched
from distfl.train.choose import (
    TrainerChoice,
    build_trainer,
    trainer_choice,
    trainer_kind,
    vectorised_refusal,
)
from distfl.train.sequential import (
    SequentialTrainer,
    client_seed,
    evaluate,
    finetune_seed,
    sample_logits,
    sample_losses,
    task_seed,
    train_losses,
)
from distfl.train.vectorised import VectorisedTrainer, supports

__all__ = [
    "BatchedTrainer",
    "SequentialTrainer",
    "TrainerChoice",
    "VectorisedTrainer",
    "build_trainer",
    "client_seed",
    "evaluate",
    "finetune_seed",
    "sample_logits",
    "sample_losses",
    "supports",
    "supports_batched",
    "task_seed",
    "trainer_choice",
    "trainer_kind",
    "train_losses",
    "vectorised_refusal",
]
