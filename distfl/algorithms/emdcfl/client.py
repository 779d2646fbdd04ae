"""EMD-CFL's client half: each client's row of distances d_c,· (the probe "distances").

The worker hosting client c trains the run's initial model for ``steps`` local SGD steps
into ω_c, embeds its own samples and those of every other client c' with ω_c (the input of
the model's last linear layer), projects each pair with the pair's private Gaussian matrix
and returns d_cc' = W1(Z_c|c R, Z_c'|c R) − τ_c for every c' (see
:mod:`distfl.algorithms.emdcfl`). Every rank holds the dataset, so the worker materialises
the other clients' samples itself; only the row travels. The embedding samples of every
client are kept while they take at most ``data.cache_mb`` MiB; past that, a client's are
taken from the worker's client cache when a row needs them.

With ``algorithm.anchors = L`` the row is [d_c,a for each anchor a, d_a,c for each anchor
a] (2L values): the worker trains each anchor's ω_a itself, once (from the same start and
seed as the anchor's own worker, so the same bits), and keeps the anchors' models, τ_a and
embedded samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from distfl.algorithms import api
from distfl.algorithms.emdcfl import draw_anchors, embed_size, projection, wasserstein1
from distfl.models import last_linear_inputs, load_flat
from distfl.train import SequentialTrainer, client_seed


def embed_sets(num_train: int, samples: int, *, seed: int, client: int) -> tuple[np.ndarray, ...]:
    """Disjoint (embedding, validation) index sets into a client's train split, each of
    min(samples, ⌊n/2⌋) samples (at least 1), drawn from (seed, client)."""
    m = int(embed_size(num_train, samples))
    perm = np.random.default_rng([seed, 0xE3D5, client]).permutation(num_train)
    return np.sort(perm[:m]), np.sort(perm[m : 2 * m] if num_train > 1 else perm[:m])


def emd_row(
    model: nn.Module,
    own: int,
    features: Mapping[int, torch.Tensor],
    validation: torch.Tensor,
    *,
    ratio: float,
    seed: int,
    solver: str,
    reg: float,
) -> np.ndarray:
    """The row d_own,c for the clients c of ``features`` in ascending order (every client:
    [K]), with ``model`` = ω_own loaded: ``features[c]`` are client c's embedding samples
    (inputs), ``validation`` own's validation samples."""
    model.eval()
    z_own = last_linear_inputs(model, features[own]).double().cpu().numpy()
    z_val = last_linear_inputs(model, validation).double().cpu().numpy()
    tau = wasserstein1(z_own, z_val, solver=solver, reg=reg)
    out = np.empty(len(features), dtype=np.float64)
    for i, c in enumerate(sorted(features)):
        if c == own:
            out[i] = 0.0 - tau
            continue
        r = projection(z_own.shape[1], ratio, seed=seed, a=own, b=c)
        z_c = last_linear_inputs(model, features[c]).double().cpu().numpy()
        out[i] = wasserstein1(z_own @ r, z_c @ r, solver=solver, reg=reg) - tau
    return out


class _Embeddings(Mapping):
    """Every client's embedding samples, fetched when read (``get(c)``)."""

    def __init__(self, num_clients: int, get):
        self._n, self._get = num_clients, get

    def __getitem__(self, client: int) -> torch.Tensor:
        if not 0 <= client < self._n:
            raise KeyError(client)
        return self._get(client)

    def __iter__(self):
        return iter(range(self._n))

    def __len__(self) -> int:
        return self._n


class EMDCFLClient(api.ClientHalf):
    """Answers ``"distances"``: ``args = (steps,)``, ``models[0]`` the model to start from."""

    def __init__(self, params, context):
        super().__init__(params, context)
        #: client -> its (embedding, validation) samples (inputs), while they fit in
        #: data.cache_mb: a row reads every client's, and materialising one takes time
        self._samples: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
        #: anchor -> (ω_a, τ_a, Z_a|a): the anchors' models, reference distances and own
        #: embeddings, once trained
        self._anchors: dict[int, tuple[torch.Tensor, float, np.ndarray]] = {}

    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        if op != "distances":
            return super().run(op, client, models, args)
        (steps,) = args
        ctx, p = self.context, self.params
        cfg = ctx.config
        start = models[0].to(ctx.device)
        omega = self._train(start, client, steps)
        load_flat(ctx.model, omega)
        if p.anchors:
            return self._anchor_row(client, start, steps)
        self._samples_of_all()
        features = _Embeddings(cfg.data.num_clients, self._embedding)
        return emd_row(
            ctx.model, client, features, self._validation(client),
            ratio=p.projection, seed=cfg.run.seed, solver=p.solver, reg=p.reg,
        )  # fmt: skip

    def _train(self, start: torch.Tensor, client: int, steps: int) -> torch.Tensor:
        """ω_client: ``steps`` local steps from ``start`` with the client's round-0 seed."""
        ctx = self.context
        cfg = ctx.config
        local = SequentialTrainer(
            ctx.model, dataclasses.replace(cfg.train, local_steps=int(steps)), ctx.device
        )
        omega, _ = local.train(start, ctx.data(client), seed=client_seed(cfg.run.seed, 0, client),
                               between=self._stop_check)  # fmt: skip
        return omega

    def _stop_check(self) -> None:
        """Between two local steps: give the row up at a stop signal (a row of a CNN trained
        for thousands of steps takes minutes)."""
        stopping = getattr(self.context, "stopping", None)
        if stopping is not None and stopping():
            raise api.ProbeAbandoned

    def _sets(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The client's (embedding, validation) samples (inputs), kept or from the client
        cache."""
        if self._samples is not None and client in self._samples:
            return self._samples[client]
        data = self.context.data(client)
        emb, val = embed_sets(data.num_train, self.params.samples,
                              seed=self.context.config.run.seed, client=client)  # fmt: skip
        return data.x_train[emb], data.x_train[val]

    def _embedding(self, client: int) -> torch.Tensor:
        return self._sets(client)[0]

    def _validation(self, client: int) -> torch.Tensor:
        return self._sets(client)[1]

    def _samples_of_all(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """The (embedding, validation) samples of every client, from its train split, kept
        up to ``data.cache_mb`` MiB (the clients past it are left to :meth:`_sets`)."""
        if self._samples is None:
            budget = self.context.config.data.cache_mb * 2**20
            out, held = {}, 0
            for k in range(self.context.config.data.num_clients):
                sets = self._sets(k)
                held += sum(x.numel() * x.element_size() for x in sets)
                if held > budget:
                    break
                out[k] = sets
            self._samples = out
        return self._samples

    def _anchor(self, anchor: int, start: torch.Tensor, steps: int):
        """(ω_a, τ_a, Z_a|a) of an anchor, trained and embedded once on this worker."""
        if anchor not in self._anchors:
            ctx, p = self.context, self.params
            omega = self._train(start, anchor, steps)
            load_flat(ctx.model, omega)
            ctx.model.eval()
            z_own = last_linear_inputs(ctx.model, self._embedding(anchor)).double().cpu().numpy()
            z_val = last_linear_inputs(ctx.model, self._validation(anchor)).double().cpu().numpy()
            tau = wasserstein1(z_own, z_val, solver=p.solver, reg=p.reg)
            self._anchors[anchor] = (omega.detach().clone(), tau, z_own)
        return self._anchors[anchor]

    def _anchor_row(self, client: int, start: torch.Tensor, steps: int) -> np.ndarray:
        """[d_client,a for each anchor a, d_a,client for each anchor a]; ``ctx.model`` holds
        ω_client on entry."""
        ctx, p = self.context, self.params
        cfg = ctx.config
        anchors = draw_anchors(cfg.data.num_clients, p.anchors, cfg.run.effective_sampling_seed())
        if self._samples is None:  # the anchors' embedding samples, kept
            self._samples = {int(a): self._sets(int(a)) for a in anchors}
        features = {int(a): self._embedding(int(a)) for a in anchors}
        features[client] = self._embedding(client)
        row = emd_row(
            ctx.model, client, features, self._validation(client),
            ratio=p.projection, seed=cfg.run.seed, solver=p.solver, reg=p.reg,
        )  # fmt: skip
        own = row[np.searchsorted(np.array(sorted(features)), anchors)]
        theirs = np.empty(len(anchors), dtype=np.float64)
        for i, a in enumerate(anchors.tolist()):
            omega, tau, z_a = self._anchor(a, start, steps)
            if a == client:
                theirs[i] = 0.0 - tau
                continue
            load_flat(ctx.model, omega)
            ctx.model.eval()
            r = projection(z_a.shape[1], p.projection, seed=cfg.run.seed, a=a, b=client)
            z_c = last_linear_inputs(ctx.model, features[client]).double().cpu().numpy()
            theirs[i] = wasserstein1(z_a @ r, z_c @ r, solver=p.solver, reg=p.reg) - tau
        return np.concatenate([own, theirs])


__all__ = ["EMDCFLClient", "embed_sets", "emd_row"]
