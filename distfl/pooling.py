"""2x2 max-pooling of stride 2 (the built-in CNNs' pooling) without a gradient, computed
on CPU as the maximum of the window's four strided quarters: torch's values, faster.

torch's CPU ``max_pool2d`` kernel is slow on the built-in models' shapes. One thread,
torch 2.13: a forward of [375, 6, 28, 28] (LeNet-5's first pooling over a client's 375
training samples) takes 5.8 ms, the four quarters' maximum 1.0 ms; a LeNet-5 run of IFCA
spent half its time in that kernel, in the loss probes and evaluations, which need no
gradient.

The values are torch's: a maximum selects one of its inputs and does not round (a NaN in a
window gives NaN in both). Only the sign of a zero can differ: torch's kernel keeps the
window's first of tied maxima, and ``torch.maximum``'s vector and scalar paths order a
tie of -0.0 and 0.0 differently. No later layer of the built-in models turns a zero's
sign into another value (a sum takes a signed zero term exactly, and ReLU, pooling and the
loss compare it equal), so their outputs and losses are torch's bits
(tests/unit/test_pooling.py holds both). Where a gradient is wanted torch's ``max_pool2d`` runs:
the quarters' way of routing the gradient to each window's first maximum (torch's choice)
measured slower than torch's kernel here (strided writes), and training keeps torch's
bits by construction. So does everything else this module does not cover: another kernel,
stride, padding, dilation or ``ceil_mode``, a tensor off the CPU (CUDA's kernel is fast),
and any call under a ``torch.func`` transform (the vectorised trainer).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

#: the four quarters of a 2x2 window in torch's order (row-major)
_OFFSETS = ((0, 0), (0, 1), (1, 0), (1, 1))


def _quarters(x: torch.Tensor) -> list[torch.Tensor]:
    """The window's four corners as strided views, cropped to even sizes (floor mode)."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return [x[..., i:h:2, j:w:2] for i, j in _OFFSETS]


def _maximum(q: list[torch.Tensor]) -> torch.Tensor:
    return torch.maximum(torch.maximum(q[0], q[1]), torch.maximum(q[2], q[3]))


def max_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(x, 2)``: the same values, faster on CPU where no gradient is wanted."""
    if (
        x.device.type != "cpu"
        or x.dim() < 3
        or min(x.shape[-2:]) < 2  # torch's error
        or (torch.is_grad_enabled() and x.requires_grad)
        or torch._C._functorch.peek_interpreter_stack() is not None
    ):
        return F.max_pool2d(x, 2)
    return _maximum(_quarters(x))


def plain_2x2(layer: nn.MaxPool2d) -> bool:
    """Whether ``layer`` pools 2x2 windows at stride 2, unpadded, in floor mode."""

    def pair(v):
        return tuple(v) if isinstance(v, (tuple, list)) else (v, v)

    return (
        pair(layer.kernel_size) == (2, 2)
        and pair(layer.stride) == (2, 2)
        and pair(layer.padding) == (0, 0)
        and pair(layer.dilation) == (1, 1)
        and not layer.ceil_mode
        and not layer.return_indices
    )


def max_pool(layer: nn.MaxPool2d, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for a plain ``nn.MaxPool2d``, through :func:`max_pool_2x2` where it
    pools 2x2 windows at stride 2."""
    if plain_2x2(layer):
        return max_pool_2x2(x)
    return F.max_pool2d(
        x, layer.kernel_size, layer.stride, layer.padding, layer.dilation,
        ceil_mode=layer.ceil_mode,
    )  # fmt: skip


class MaxPool2x2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)`` through :func:`max_pool_2x2` (the built-in CNNs' pooling; an
    ``nn.MaxPool2d``, so every check of the layer's kind holds for it)."""

    def __init__(self):
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return max_pool_2x2(x)
