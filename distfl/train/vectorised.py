"""Vectorised local training: the clients that start from the same cluster model train
together, their parameters stacked along a leading client axis, with ``torch.func``
(``functional_call`` + ``vmap`` + ``grad``). Each client still takes exactly S local steps
on its own batches, drawn from its own generator exactly as :class:`SequentialTrainer`
draws them, and the update is ``train.optimizer``'s written out on the stacked tensors
(:class:`~distfl.train.optim.StackedOptimiser`: SGD with weight decay and momentum, Adam,
AdamW; FedProx's proximal term), so both trainers compute the same thing; the equivalence
tests hold them together.

Clients are processed in chunks bounded by ``train.chunk_mb`` of parameters, optimiser
state and activations (at least two clients per chunk: see :meth:`train_many`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from distfl.config import TrainSection
from distfl.data import ClientData
from distfl.train.chunked import ChunkedTrainer
from distfl.train.optim import StackedOptimiser, state_copies
from distfl.train.private import PrivateStep, noise_generator
from distfl.train.sequential import (
    batch_rows,
    clients_per_chunk,
    loss_function,
    weighted_loss_function,
)


class VectorisedTrainer(ChunkedTrainer):
    def __init__(
        self, model: nn.Module, train: TrainSection, device: torch.device, *, cosine: float = 0.0,
        sample_dp: tuple[float, float] | None = None,
    ):  # fmt: skip
        """``sample_dp``: (C_s, σ_s) of DP-SGD ([privacy] `sample_clip`, `sample_noise`;
        :mod:`distfl.train.private`), None for plain steps."""
        self.model = model.to(device)
        self.cfg = train
        self.cosine = float(cosine)
        self.device = device
        self.names = [n for n, _ in self.model.named_parameters()]
        self.shapes = [p.shape for _, p in self.model.named_parameters()]
        self.sizes = [p.numel() for _, p in self.model.named_parameters()]
        self.num_params = sum(self.sizes)
        # no buffers in the built-in models; functional_call needs them passed if any
        self.buffers = {n: b for n, b in self.model.named_buffers()}

        loss_fn = loss_function(train.loss)

        def loss_of(params, x, y):
            out = functional_call(self.model, (params, self.buffers), (x,))
            return loss_fn(out, y)

        self._step = vmap(grad_and_value(loss_of))
        weighted_fn = weighted_loss_function(train.loss)

        def weighted_loss_of(params, x, y, w):
            out = functional_call(self.model, (params, self.buffers), (x,))
            return weighted_fn(out, y, w)

        #: the step with a weight per sample (a client half's preparation, FedEM's E-step)
        self._weighted_step = vmap(grad_and_value(weighted_loss_of))
        #: DP-SGD's step in place of both, where sample-level privacy is on
        self._private = None
        if sample_dp is not None:
            self._private = PrivateStep(self.model, self.buffers, train.loss, *sample_dp,
                                        names=self.names)  # fmt: skip

    def chunk_size(self, example: ClientData) -> int:
        """How many clients fit in ``train.chunk_mb`` (:func:`clients_per_chunk`)."""
        b = min(self.cfg.batch_size, example.num_train)
        sample = example.x_train[0].numel()
        copies = state_copies(self.cfg) + (b if self._private is not None else 0)
        return clients_per_chunk(self.num_params, b, sample, self.cfg.chunk_mb, copies=copies)

    def batch_groups(self, datas: list[ClientData]) -> list[list[int]]:
        """Clients whose batch size differs (fewer samples than batch_size) train apart."""
        by_batch: dict[int, list[int]] = {}
        for i, d in enumerate(datas):
            by_batch.setdefault(min(self.cfg.batch_size, d.num_train), []).append(i)
        return list(by_batch.values())

    def _split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The flat model [P] as views per parameter name."""
        flat = flat.to(self.device, torch.float32)
        out, offset = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            out[name] = flat[offset : offset + size].view(shape)
            offset += size
        return out

    def _train_chunk(self, start, datas, seeds, between=None, weights=None, pull=None):
        cfg = self.cfg
        m = len(datas)
        anchor = self._split(start)
        params = {k: v.unsqueeze(0).expand(m, *v.shape).clone() for k, v in anchor.items()}
        stacked = [params[name] for name in self.names]
        pulled = None
        if pull is not None:
            target = self._split(pull[0])
            pulled = ([target[name] for name in self.names], float(pull[1]))
        opt = StackedOptimiser(cfg, [anchor[name] for name in self.names], self.cosine, pulled)
        index = self._batches(datas, seeds)
        x_all = torch.cat([d.x_train for d in datas]).to(self.device)
        y_all = torch.cat([d.y_train for d in datas]).to(self.device)
        losses = torch.empty((cfg.local_steps, m), dtype=torch.float32, device=self.device)
        w_all = None
        if weights is not None:
            w_all = torch.cat([w.to(self.device, torch.float32) for w in weights])
        gens = [noise_generator(seed) for seed in seeds] if self._private is not None else None
        for s in range(cfg.local_steps):
            if between is not None:
                between()
            if gens is not None:  # DP-SGD: each sample's gradient clipped, then noise
                w = (
                    w_all[index[s]]
                    if w_all is not None
                    else torch.ones(index[s].shape, device=self.device)
                )
                grads, loss = self._private(params, x_all[index[s]], y_all[index[s]], w, gens)
            elif w_all is None:
                grads, loss = self._step(params, x_all[index[s]], y_all[index[s]])
            else:
                grads, loss = self._weighted_step(
                    params, x_all[index[s]], y_all[index[s]], w_all[index[s]]
                )
            opt.step(stacked, [grads[name] for name in self.names])
            losses[s] = loss.detach()
        new = torch.cat([params[name].reshape(m, -1) for name in self.names], dim=1)
        return new, losses.t().double().cpu().numpy()

    def _batches(self, datas: list[ClientData], seeds: list[int]) -> torch.Tensor:
        """Every step's sample indices into the chunk's concatenated data [S, m, b] on the
        device (:func:`batch_rows`: the clients' draws, taken before the steps so that a
        step gathers its batches with one index, not one transfer and one gather per
        client and step). The chunk's clients share b (:meth:`batch_groups`)."""
        nums = [d.num_train for d in datas]
        rows, b = batch_rows(self.cfg, nums, seeds, self.device)
        offsets = torch.tensor(np.cumsum([0] + nums[:-1]), dtype=torch.int64, device=self.device)
        return rows[:, :, : b[0]] + offsets[None, :, None]


def supports(model: nn.Module) -> bool:
    """The vectorised trainer handles models without buffers (no batch norm statistics)."""
    return not any(True for _ in model.buffers())
