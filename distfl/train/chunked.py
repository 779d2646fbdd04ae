"""What the batched and the vectorised trainers share: ``train_many`` over chunks of clients
that fit ``train.chunk_mb`` (:meth:`ChunkedTrainer.chunk_size`), each chunk trained at once
by the trainer's ``_train_chunk``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from distfl.data import ClientData


class ChunkedTrainer:
    """The base of a trainer that trains a chunk of clients at once; the subclass gives
    ``num_params``, ``cfg`` (the train section), ``device``, :meth:`chunk_size` and
    ``_train_chunk(start, datas, seeds, between, weights, pull) -> (models, losses)``."""

    def chunk_size(self, example: ClientData) -> int:
        """How many clients one chunk takes."""
        raise NotImplementedError

    def batch_groups(self, datas: list[ClientData]) -> list[list[int]]:
        """The clients that may share a chunk, by their index in ``datas`` (default: all)."""
        return [list(range(len(datas)))]

    def train_many(
        self, start: torch.Tensor, datas: list[ClientData], seeds: list[int],
        between: Callable[[], None] | None = None,
        weights: list[torch.Tensor] | None = None,
        pull: tuple[torch.Tensor, float] | None = None,
    ) -> tuple[torch.Tensor, np.ndarray]:  # fmt: skip
        """S local steps for each client from the flat model ``start``: returns the new flat
        models [n, P] (float32) and the losses [n, S]. ``weights``, if given, holds each
        client's weight per train sample [n_k] (a batch's loss is then Σ_i w_i ℓ_i / b);
        ``pull`` (a flat model a and μ), if given, adds (μ/2)‖θ − a‖² to every client's loss.
        ``between`` is called before each step of each chunk (it may raise to give the
        training up)."""
        n = len(datas)
        out = torch.empty((n, self.num_params), dtype=torch.float32, device=self.device)
        losses = np.empty((n, self.cfg.local_steps), dtype=np.float64)
        if n == 0:
            return out, losses
        chunk = self.chunk_size(datas[0])
        for members in self.batch_groups(datas):
            for lo in range(0, len(members), chunk):
                idx = members[lo : lo + chunk]
                # A chunk of one takes other kernels (MKL's batched GEMM with a batch of one,
                # vmap's conv with one group is a plain conv) and would give other bits than
                # the same client in a larger chunk; pairing it with a copy of itself keeps
                # every client's bits independent of its chunk, hence of the world size.
                run = idx if len(idx) > 1 else idx * 2
                new, loss = self._train_chunk(
                    start,
                    [datas[i] for i in run],
                    [seeds[i] for i in run],
                    between,
                    None if weights is None else [weights[i] for i in run],
                    pull,
                )
                # (consecutive clients, the batched trainer's: a slice, not a gather)
                at = slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] == len(idx) - 1 else idx
                out[at] = new[: len(idx)]
                losses[at] = loss[: len(idx)]
        return out, losses
