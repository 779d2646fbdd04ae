"""What a run's model costs whatever its clients, for the memory estimate of
:mod:`distfl.runtime.capacity`: its parameters and a sample's activations, counted from the
model's name, the input shape, the classes and ``model.hidden`` without building it
(:func:`parameter_count`, :func:`activations_per_sample`), and cuBLAS's fixed workspace
where it trains on CUDA (:func:`cuda_workspace_bytes`)."""

from __future__ import annotations

import math
import os

from distfl.config import Config

#: the image models of :mod:`distfl.models`: (channels of the two convolutions, kernel
#: size, dense widths before the classes); every other model is the MLP of model.hidden
CONV_MODELS: dict[str, tuple[tuple[int, int], int, tuple[int, ...]]] = {
    "cnn": ((64, 64), 5, (384, 192)),
    "lenet5": ((6, 16), 5, (120, 84)),
    "mnist_cnn": ((64, 128), 3, (128,)),
}


def _image(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """[C, H, W] of an image shape; other shapes as one channel and one row."""
    if len(shape) == 3:
        return shape[0], shape[1], shape[2]
    return 1, 1, math.prod(shape)


def parameter_count(
    model: str, shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (64,)
) -> int:
    """The parameters of :func:`distfl.models.build_model` ``(model, shape, num_classes,
    hidden=hidden)``, counted without building it: the MLP's dense layers over the flattened
    input, or the image models' two "same" convolutions, each followed by a 2x2 max-pool,
    then their dense layers."""
    if model in CONV_MODELS:
        (c1, c2), k, dense = CONV_MODELS[model]
        c, h, w = _image(shape)
        count = c * c1 * k * k + c1 + c1 * c2 * k * k + c2
        width = c2 * (h // 2 // 2) * (w // 2 // 2)
    else:
        count, width, dense = 0, math.prod(shape), hidden
    for d in (*dense, num_classes):
        count += width * d + d
        width = d
    return count


def activations_per_sample(
    model: str, shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (64,)
) -> int:
    """float32 values one sample's forward pass produces, every layer's output (ReLU and
    pooling included) counted: a generous bound of what evaluating a client holds."""
    if model in CONV_MODELS:
        (c1, c2), _, dense = CONV_MODELS[model]
        c, h, w = _image(shape)
        h1, w1 = h // 2, w // 2
        count = 2 * c1 * h * w + c1 * h1 * w1 + 2 * c2 * h1 * w1 + c2 * (h1 // 2) * (w1 // 2)
    else:
        count, dense = 0, hidden
    return count + 2 * sum(dense) + num_classes


def workspace_config() -> str:
    """The ``CUBLAS_WORKSPACE_CONFIG`` a CUDA run trains with: the environment's when it is
    one of the deterministic ones, else the one :func:`~distfl.runtime.device.prepare_device`
    sets."""
    from distfl.runtime.device import DETERMINISTIC_WORKSPACES

    got = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    return got if got in DETERMINISTIC_WORKSPACES else DETERMINISTIC_WORKSPACES[0]


def cuda_workspace_bytes(config: Config) -> int:
    """The bytes of cuBLAS's workspace where the run trains on CUDA (``run.device`` cuda,
    or auto with a CUDA device), else 0. ``:SIZE:COUNT`` pairs: COUNT buffers of SIZE KiB
    each, allocated by torch's caching allocator on the device's first matrix product."""
    device = config.run.device
    if device == "cpu":
        return 0
    if device == "auto":
        import torch

        if not torch.cuda.is_available():
            return 0
    fields = workspace_config().split(":")[1:]
    return sum(
        int(size) * 1024 * int(count) for size, count in zip(fields[::2], fields[1::2], strict=True)
    )
