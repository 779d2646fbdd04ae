"""Which local trainer runs: ``train.trainer``, and what ``auto`` picks.

``auto`` picks, per model and device type, the trainer that ``distfl bench`` measured
fastest (docs/benchmarks.md); a model no batched kernel covers gets the vectorised trainer
where it has no buffers, else the sequential one. The choice never depends on a
measurement taken while running, so every rank of every launch picks the same trainer.
"""

from __future__ import annotations

import torch
from torch import nn

from distfl.config import TrainSection
from distfl.train.batched import BatchedTrainer, supports_batched
from distfl.train.sequential import SequentialTrainer
from distfl.train.vectorised import VectorisedTrainer, supports

#: ``auto``'s pick by (model class, device type), from ``distfl bench`` on each model
#: (CPU: 2026-11-24, docs/benchmarks.md; CUDA: the GPU check on an H200, 2026-11-27, measured
#: the MLP's batched rounds faster than its vectorised ones, 2.41x against 3.27x of a bare
#: vmap round, so CUDA keeps the batched default)
AUTO: dict[tuple[str, str], str] = {
    ("MLP", "cpu"): "batched",
    ("SmallCNN", "cpu"): "batched",
    ("LeNet5", "cpu"): "batched",
}


def trainer_kind(requested: str, model: nn.Module, device: torch.device | str = "cpu") -> str:
    """The trainer ``train.trainer = requested`` means for ``model`` on ``device``:
    "batched", "vectorised" or "sequential"."""
    if requested != "auto":
        return requested
    device_type = torch.device(device).type
    if supports_batched(model):
        return AUTO.get((type(model).__name__, device_type), "batched")
    return "vectorised" if supports(model) else "sequential"


def build_trainer(
    kind: str, model: nn.Module, train: TrainSection, device: torch.device, *, pad_to: int
):
    """The trainer of ``kind`` (a :func:`trainer_kind` answer). ``pad_to``: the batch width
    the batched trainer pads every client's batch to (the population's largest batch)."""
    if kind == "batched":
        return BatchedTrainer(model, train, device, pad_to=pad_to)
    if kind == "vectorised":
        return VectorisedTrainer(model, train, device)
    return SequentialTrainer(model, train, device)
