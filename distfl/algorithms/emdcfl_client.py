"""EMD-CFL's client half: each client's row of distances d_c,· (the probe "distances").

The worker hosting client c trains the run's initial model for ``steps`` local SGD steps
into ω_c, embeds its own samples and those of every other client c' with ω_c (the input of
the model's last linear layer), projects each pair with the pair's private Gaussian matrix
and returns d_cc' = W1(Z_c|c R, Z_c'|c R) − τ_c for every c' (see
:mod:`distfl.algorithms.emdcfl`). Every rank holds the dataset, so the worker materialises
the other clients' samples itself; only the row travels.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from distfl.algorithms.base import ClientHalf
from distfl.algorithms.emdcfl import embed_size, projection, wasserstein1
from distfl.models import last_linear, load_flat
from distfl.train import SequentialTrainer, client_seed


def last_linear_inputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The penultimate-layer embedding: the input of the model's last nn.Linear."""
    last = last_linear(model)
    seen: list[torch.Tensor] = []
    handle = last.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0]))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0].reshape(len(x), -1)


def embed_sets(num_train: int, samples: int, *, seed: int, client: int) -> tuple[np.ndarray, ...]:
    """Disjoint (embedding, validation) index sets into a client's train split, each of
    min(samples, ⌊n/2⌋) samples (at least 1), drawn from (seed, client)."""
    m = int(embed_size(num_train, samples))
    perm = np.random.default_rng([seed, 0xE3D5, client]).permutation(num_train)
    return np.sort(perm[:m]), np.sort(perm[m : 2 * m] if num_train > 1 else perm[:m])


def emd_row(
    model: nn.Module,
    own: int,
    features: dict[int, torch.Tensor],
    validation: torch.Tensor,
    *,
    ratio: float,
    seed: int,
    solver: str,
    reg: float,
) -> np.ndarray:
    """[K] the row d_own,· with ``model`` = ω_own loaded: ``features[c]`` are client c's
    embedding samples (inputs), ``validation`` own's validation samples."""
    model.eval()
    z_own = last_linear_inputs(model, features[own]).double().cpu().numpy()
    z_val = last_linear_inputs(model, validation).double().cpu().numpy()
    tau = wasserstein1(z_own, z_val, solver=solver, reg=reg)
    out = np.empty(len(features), dtype=np.float64)
    for c in sorted(features):
        if c == own:
            out[c] = 0.0 - tau
            continue
        r = projection(z_own.shape[1], ratio, seed=seed, a=own, b=c)
        z_c = last_linear_inputs(model, features[c]).double().cpu().numpy()
        out[c] = wasserstein1(z_own @ r, z_c @ r, solver=solver, reg=reg) - tau
    return out


class EMDCFLClient(ClientHalf):
    """Answers ``"distances"``: ``args = (steps,)``, ``models[0]`` the model to start from."""

    def __init__(self, params, context):
        super().__init__(params, context)
        self._samples: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None

    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        if op != "distances":
            return super().run(op, client, models, args)
        (steps,) = args
        ctx, p = self.context, self.params
        cfg = ctx.config
        local = SequentialTrainer(
            ctx.model, dataclasses.replace(cfg.train, local_steps=int(steps)), ctx.device
        )
        start = models[0].to(ctx.device)
        omega, _ = local.train(start, ctx.data(client), seed=client_seed(cfg.run.seed, 0, client))
        load_flat(ctx.model, omega)
        samples = self._samples_of_all()
        return emd_row(
            ctx.model, client, {c: s[0] for c, s in samples.items()}, samples[client][1],
            ratio=p.projection, seed=cfg.run.seed, solver=p.solver, reg=p.reg,
        )  # fmt: skip

    def _samples_of_all(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """(embedding, validation) samples of every client, from its train split."""
        if self._samples is None:
            ctx = self.context
            seed = ctx.config.run.seed
            out = {}
            for k in range(ctx.config.data.num_clients):
                data = ctx.data(k)
                emb, val = embed_sets(data.num_train, self.params.samples, seed=seed, client=k)
                out[k] = (data.x_train[emb], data.x_train[val])
            self._samples = out
        return self._samples


__all__ = ["EMDCFLClient", "embed_sets", "emd_row", "last_linear_inputs"]
