"""Sample-level differential privacy of local training: DP-SGD (Abadi et al. 2016, "Deep
learning with differential privacy") in the vectorised trainer. Each step takes every
sample's own gradient (``torch.func``: ``vmap`` over the samples of ``grad`` of one sample's
loss, inside the ``vmap`` over the clients), clips each to the L2 bound C_s, sums them, adds
Gaussian noise of std σ_s·C_s and divides by the batch size; the optimiser steps on that.

Each client's noise comes from a generator of its own seeded from its training's seed, drawn
on the CPU in float32 and moved to the device, so that a client's steps do not depend on
the clients it trains beside (any world size, any chunk) or on the device's generator.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from distfl.train.sequential import LOSSES_EACH, derived_seed

#: the stream of a client's DP-SGD noise, apart from its batches' draws
NOISE_STREAM = 0xD95


def noise_generator(seed: int) -> torch.Generator:
    """A client's noise generator, from the seed of its training."""
    return torch.Generator().manual_seed(derived_seed(seed, NOISE_STREAM))


class PrivateStep:
    """One DP-SGD step of a chunk of m clients on their batches [m, b, ...]: the noised
    clipped mean gradient of each client, by parameter name, and each client's batch loss
    (Σ_i w_i ℓ_i / b, as the plain step's)."""

    def __init__(self, model: nn.Module, buffers: dict, loss: str, clip: float, noise: float,
                 names: list[str]) -> None:  # fmt: skip
        self.clip = float(clip)
        self.noise = float(noise)
        self.names = names
        each = LOSSES_EACH[loss]

        def one(params, x, y, w):  # one sample's weighted loss
            out = functional_call(model, (params, buffers), (x.unsqueeze(0),))
            return (each(out, y.unsqueeze(0)) * w).sum()

        #: over the clients, then over each client's samples
        self._each = vmap(vmap(grad_and_value(one), in_dims=(None, 0, 0, 0)))

    def __call__(self, params: dict, x, y, w, generators: list[torch.Generator]):
        grads, losses = self._each(params, x, y, w)  # grads[name]: [m, b, *shape]
        m, b = losses.shape
        flat = [grads[n].reshape(m, b, -1) for n in self.names]
        norms = torch.sqrt(sum(g.pow(2).sum(-1) for g in flat))  # [m, b]
        factor = (self.clip / norms.clamp(min=1e-30)).clamp(max=1.0)  # (a zero gradient: 1)
        sizes = [g.shape[-1] for g in flat]
        noise = torch.stack([
            torch.randn(sum(sizes), generator=g, dtype=torch.float32) for g in generators
        ]).to(x.device) * (self.noise * self.clip)  # fmt: skip
        out, offset = {}, 0
        for n, g, size in zip(self.names, flat, sizes, strict=True):
            total = (g * factor.unsqueeze(-1)).sum(1) + noise[:, offset : offset + size]
            out[n] = (total / b).reshape(grads[n].shape[:1] + grads[n].shape[2:])
            offset += size
        return out, losses.sum(1) / b


__all__ = ["NOISE_STREAM", "PrivateStep", "noise_generator"]
