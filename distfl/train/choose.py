"""Which local trainer runs: ``train.trainer``, and what ``auto`` picks.

``auto`` picks, per model and device type, the trainer that ``distfl bench`` measured
fastest (docs/benchmarks.md) for the built-in models, which the batched trainer's kernels
cover; any other model (one of your own) gets the vectorised trainer where ``torch.func``
can train it, else the sequential one, with a note that says why
(:func:`vectorised_refusal`: a model with buffers, such as batch norm's running statistics,
or one whose training step ``vmap`` cannot take). The choice never depends on a
measurement taken while running, so every rank of every launch picks the same trainer.
Asking for a trainer the model cannot take is a ConfigError of one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from distfl.config import TrainSection
from distfl.errors import ConfigError
from distfl.text import exception_line
from distfl.train.batched import BatchedTrainer, supports_batched
from distfl.train.sequential import SequentialTrainer
from distfl.train.vectorised import VectorisedTrainer

#: ``auto``'s pick by (model class, device type), from ``distfl bench`` on each model
#: (CPU: 2026-11-24, docs/benchmarks.md; CUDA: the GPU check on an H200, 2026-11-27, measured
#: the MLP's batched rounds faster than its vectorised ones, 2.41x against 3.27x of a bare
#: vmap round, so CUDA keeps the batched default)
AUTO: dict[tuple[str, str], str] = {
    ("MLP", "cpu"): "batched",
    ("SmallCNN", "cpu"): "batched",
    ("LeNet5", "cpu"): "batched",
}


@dataclass(frozen=True)
class TrainerChoice:
    """The trainer that runs (``kind``: "batched", "vectorised" or "sequential") and, where
    ``auto`` could not take the vectorised trainer for a model the batched one does not
    cover, ``note``: one line saying why (empty otherwise)."""

    kind: str
    note: str = ""


def vectorised_refusal(model: nn.Module, input_shape: tuple[int, ...] | None = None) -> str:
    """Why the vectorised trainer cannot train ``model`` ("" where it can): buffers (which
    ``functional_call`` would not update per client: batch norm's running statistics), or,
    with ``input_shape``, a training step that ``vmap`` of ``grad`` fails on (tried on two
    clients of two zero samples; dropout, for one, draws randomness ``vmap`` refuses)."""
    buffers = [name for name, _ in model.named_buffers()]
    if buffers:
        shown = ", ".join(buffers[:3]) + (", ..." if len(buffers) > 3 else "")
        return (
            f"it has buffers ({shown}), which the vectorised trainer's torch.func step does "
            "not update per client (batch norm's running statistics are buffers)"
        )
    if input_shape is None:
        return ""
    try:
        _vmap_step(model, input_shape)
    except Exception as exc:  # whatever torch.func raises on a model it cannot take
        return f"torch.func cannot vectorise its training step ({exception_line(exc)})"
    return ""


def _vmap_step(model: nn.Module, input_shape: tuple[int, ...]) -> None:
    """One ``vmap(grad)`` step of two clients on two zero samples each, as the vectorised
    trainer takes it; torch's generators are left as they were."""
    from torch.func import functional_call, grad, vmap

    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    params = {n: p.detach().unsqueeze(0).expand(2, *p.shape).clone()
              for n, p in model.named_parameters()}  # fmt: skip
    x = torch.zeros((2, 2, *input_shape), device=device)

    def loss(p, xs):
        return functional_call(model, p, (xs,)).float().sum()

    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        vmap(grad(loss))(params, x)


def trainer_choice(
    requested: str,
    model: nn.Module,
    device: torch.device | str = "cpu",
    *,
    input_shape: tuple[int, ...] | None = None,
    name: str = "",
) -> TrainerChoice:
    """The trainer ``train.trainer = requested`` means for ``model`` (``model.name =
    name``) on ``device``. ``input_shape`` (one sample's): a model the batched trainer does
    not cover is tried under ``vmap`` (:func:`vectorised_refusal`), else only its buffers
    are looked at. ConfigError where ``requested`` names a trainer the model cannot take."""
    what = f"model.name = {name!r}" if name else type(model).__name__
    batched = supports_batched(model)
    if requested == "batched" and not batched:
        raise ConfigError(
            f"train.trainer = 'batched': the batched trainer's kernels cover the built-in "
            f"models only, not {what}; use auto, vectorised or sequential"
        )
    if requested in ("batched", "sequential"):
        return TrainerChoice(requested)
    if requested == "auto" and batched:
        return TrainerChoice(AUTO.get((type(model).__name__, torch.device(device).type), "batched"))
    why = vectorised_refusal(model, None if batched else input_shape)
    if requested == "vectorised":
        if why:
            raise ConfigError(
                f"train.trainer = 'vectorised': {what} cannot train vectorised: {why}; use "
                "auto (the sequential trainer for it) or sequential"
            )
        return TrainerChoice(requested)
    if why:
        note = (f"note: {what} trains with the sequential trainer, one client after another "
                f"(train.trainer = 'auto'): {why}")  # fmt: skip
        return TrainerChoice("sequential", note)
    return TrainerChoice("vectorised")


def trainer_kind(
    requested: str,
    model: nn.Module,
    device: torch.device | str = "cpu",
    *,
    input_shape: tuple[int, ...] | None = None,
    name: str = "",
) -> str:
    """The trainer ``train.trainer = requested`` means for ``model`` on ``device``:
    "batched", "vectorised" or "sequential" (:func:`trainer_choice`)."""
    return trainer_choice(requested, model, device, input_shape=input_shape, name=name).kind


def build_trainer(
    kind: str, model: nn.Module, train: TrainSection, device: torch.device, *, pad_to: int,
    cosine: float = 0.0, sample_dp: tuple[float, float] | None = None,
):  # fmt: skip
    """The trainer of ``kind`` (a :func:`trainer_kind` answer). ``pad_to``: the batch width
    the batched trainer pads every client's batch to (the population's largest batch);
    ``cosine``: c of a local term −c·cos(θ, w_start) (0: none); ``sample_dp``: DP-SGD's
    (C_s, σ_s), the vectorised trainer's only (the config refuses it with another)."""
    if sample_dp is not None and kind != "vectorised":
        raise ValueError(f"sample-level DP needs the vectorised trainer, not {kind!r}")
    if kind == "batched":
        return BatchedTrainer(model, train, device, pad_to=pad_to, cosine=cosine)
    if kind == "vectorised":
        return VectorisedTrainer(model, train, device, cosine=cosine, sample_dp=sample_dp)
    return SequentialTrainer(model, train, device, cosine=cosine)
