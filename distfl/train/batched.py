"""Batched local training: the clients that start from the same cluster model train
together, their parameters stacked along a leading client axis and their layers written as
batched kernels (``baddbmm`` for dense layers, one oneDNN convolution per client, pooling
over clients × samples). A model with convolutions steps through one autograd graph whose
loss is the sum of the clients' losses, so each client's gradient is its own loss's (no
term of one client depends on another's parameters); a chain of dense layers (the MLP)
steps without autograd, its backward written out and plain SGD's update fused into each
weight gradient's batched product.

Every client takes exactly S local steps on the batches :class:`SequentialTrainer` draws
for it (the same generator, the same indices) with ``train.optimizer``'s update written
out (:class:`~distfl.train.optim.StackedOptimiser`: SGD with weight decay and momentum,
Adam, AdamW; FedProx's proximal term), so both trainers compute the same thing to float32
rounding; the equivalence tests hold them together. Padding stays zero under every update
(its gradient, anchor and moments are zero).

A client's bits do not depend on which clients share its call, which keeps results
independent of the world size: every client's batch is padded to the same width
``pad_to`` (extra rows repeat a sample with weight 0, so they add exact zeros), every
kernel works on each client's slice alone, and every per-client block of a batched
product is a multiple of 16 floats (feature widths are padded with zeros that stay zero),
because MKL's batched GEMM gives other last bits for a block that starts off a 64-byte
boundary, and the block of client c starts c blocks in. There is no torch.func here: the
per-call overhead of ``vmap`` and the grouped convolutions it makes are what this trainer
avoids.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distfl.config import TrainSection
from distfl.data import ClientData
from distfl.models import MLP, ConvNet
from distfl.pooling import max_pool
from distfl.train.chunked import ChunkedTrainer
from distfl.train.optim import StackedOptimiser, state_copies
from distfl.train.sequential import batch_rows, clients_per_chunk


def _leaves(model: nn.Module) -> list[nn.Module]:
    """The built-in models' layers in forward order (each is a chain of Sequentials)."""
    out = []
    for module in model.modules():
        if not isinstance(module, nn.Sequential) and not list(module.children()):
            out.append(module)
    return out


def supports_batched(model: nn.Module) -> bool:
    """The batched trainer runs the built-in models (a chain of Flatten, Linear, ReLU, 2-D
    convolutions of stride 1 and 2-D max-pooling, without buffers)."""
    if not isinstance(model, (MLP, ConvNet)) or any(True for _ in model.buffers()):
        return False
    for layer in _leaves(model):
        if isinstance(layer, nn.Conv2d):
            if layer.stride != (1, 1) or layer.dilation != (1, 1) or layer.groups != 1:
                return False
            if not isinstance(layer.padding, tuple) or layer.padding_mode != "zeros":
                return False
        elif not isinstance(layer, (nn.Flatten, nn.Linear, nn.ReLU, nn.MaxPool2d)):
            return False
    return True


ALIGN = 16  # floats: 64 bytes


def _up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class BatchedTrainer(ChunkedTrainer):
    def __init__(
        self,
        model: nn.Module,
        train: TrainSection,
        device: torch.device,
        *,
        pad_to: int | None = None,
        cosine: float = 0.0,
    ):
        if not supports_batched(model):
            raise ValueError(f"the batched trainer does not run {type(model).__name__}")
        self.model = model.to(device)
        self.cfg = train
        self.device = device
        #: every client's batch is this wide (its own batch size, padded with weight 0)
        self.pad_to = max(1, min(train.batch_size, pad_to or train.batch_size))
        self.layers = _leaves(self.model)
        params = dict(self.model.named_parameters())
        self.shapes = [tuple(p.shape) for p in params.values()]
        self.sizes = [p.numel() for p in params.values()]
        self.num_params = sum(self.sizes)
        ids = {id(p): i for i, p in enumerate(params.values())}
        #: per parameter, its shape as the batched kernels hold it (zero-padded)
        self.padded: list[tuple[int, ...]] = list(self.shapes)
        #: per layer index: its kind and its weight's parameter index (the bias follows)
        self.kind: dict[int, tuple[str, int]] = {}
        for j, layer in enumerate(self.layers):
            if isinstance(layer, nn.Linear):
                i = ids[id(layer.weight)]
                out_p = _up(layer.out_features)
                self.padded[i] = (out_p, _up(layer.in_features))
                self.padded[i + 1] = (out_p,)
                self.kind[j] = ("linear", i)
            elif isinstance(layer, nn.Conv2d):
                i = ids[id(layer.weight)]
                # one oneDNN convolution per client (measured faster than one batched
                # im2col product for LeNet-5's and no slower for the CNN's layers)
                cout = layer.weight.shape[0]
                numel = layer.weight.numel()
                if _up(numel) != numel or _up(cout) != cout:
                    self.padded[i] = (_up(numel),)
                    self.padded[i + 1] = (_up(cout),)
                self.kind[j] = ("conv", i)
        self.hinge = train.loss == "hinge"
        self.num_classes = self.layers[-1].out_features
        #: a chain of dense layers (the MLP): its backward is written out, and plain SGD's
        #: update is fused into the weight gradient's product (no autograd graph)
        self.dense = all(isinstance(x, (nn.Linear, nn.ReLU, nn.Flatten)) for x in self.layers)
        self.cosine = float(cosine)
        self.plain_sgd = train.optimizer == "sgd" and not (
            train.prox_mu or train.weight_decay or train.momentum or self.cosine
        )

    def chunk_size(self, example: ClientData) -> int:
        """How many clients fit in ``train.chunk_mb`` (:func:`clients_per_chunk`)."""
        sample = example.x_train[0].numel()
        return clients_per_chunk(
            self.num_params, self.pad_to, sample, self.cfg.chunk_mb, copies=state_copies(self.cfg)
        )

    # -- one chunk -----------------------------------------------------------------------

    def _batches(self, datas: list[ClientData], seeds: list[int]):
        """Every step's padded sample indices into the chunk's concatenated data [S, C, B]
        and the per-sample loss weights [C, B] (1/b on a client's b real rows, else 0), on
        the device (:func:`batch_rows`); a padding row is the client's first sample."""
        nums = [d.num_train for d in datas]
        rows, b = batch_rows(self.cfg, nums, seeds, self.device)
        width = rows.shape[2]
        if width < self.pad_to:
            rows = torch.nn.functional.pad(rows, (0, self.pad_to - width))
        offsets = torch.tensor(np.cumsum([0] + nums[:-1]), dtype=torch.int64, device=self.device)
        sizes = torch.tensor(b, dtype=torch.float64, device=self.device)[:, None]
        columns = torch.arange(self.pad_to, device=self.device)[None, :]
        weight = torch.where(columns < sizes, 1.0 / sizes, 0.0).to(torch.float32)
        return rows + offsets[None, :, None], weight

    def _train_chunk(self, start, datas, seeds, between=None, weights=None, pull=None):
        cfg = self.cfg
        plain = self.plain_sgd and pull is None  # a pull's term needs the optimiser's step
        C = len(datas)
        anchor = self._pad(start.to(self.device, torch.float32))
        params = [a.unsqueeze(0).expand(C, *a.shape).clone() for a in anchor]
        if not self.dense:
            params = [p.requires_grad_() for p in params]
        pulled = None
        if pull is not None:
            pulled = (self._pad(pull[0].to(self.device, torch.float32)), float(pull[1]))
        opt = StackedOptimiser(cfg, anchor, self.cosine, pulled)
        x_all = torch.cat([d.x_train for d in datas]).to(self.device)
        y_all = torch.cat([d.y_train for d in datas]).to(self.device)
        index, weight = self._batches(datas, seeds)
        step_weight = None
        if weights is not None:  # each step's [C, B]: the sample's weight / b, padding 0
            w_all = torch.cat([w.to(self.device, torch.float32) for w in weights])
            step_weight = w_all[index] * weight
        losses = torch.empty((cfg.local_steps, C), dtype=torch.float32, device=self.device)
        xs, ys = x_all[index], y_all[index]  # every step's batches, [S, C, B, ...]
        for s in range(cfg.local_steps):
            if between is not None:
                between()
            w = weight if step_weight is None else step_weight[s]
            if self.dense:
                per_client, grads = self._dense_step(params, xs[s], ys[s], w, plain)
            else:
                per_client = self._loss(params, xs[s], ys[s], w)
                grads = torch.autograd.grad(per_client.sum(), params)
            losses[s] = per_client.detach()
            if grads is None:  # the update is made
                continue
            if plain:
                with torch.no_grad():
                    torch._foreach_add_(params, grads, alpha=-cfg.lr)
            else:
                opt.step(params, grads)
        new = torch.cat([self._unpad(i, p.detach()) for i, p in enumerate(params)], dim=1)
        return new, losses.t().double().cpu().numpy()

    @torch.no_grad()
    def _dense_step(self, params, x, y, weight, plain):
        """One step of a chain of dense layers by hand: [C] losses and the gradients, or
        (losses, None) with ``plain`` SGD, whose update W -= lr·(δᵀa) is then one batched
        product per layer, made in place after the layer's δ has gone through W."""
        C, B = x.shape[:2]
        h = x.reshape(C, B, -1)
        inputs = []  # each dense layer's input [C, B, in'] (a ReLU's output, or the data)
        linear = [i for j, (kind, i) in sorted(self.kind.items()) if kind == "linear"]
        for n, i in enumerate(linear):
            w, b = params[i], params[i + 1]
            if h.shape[-1] < w.shape[-1]:  # zero columns up to the padded width
                h = F.pad(h, (0, w.shape[-1] - h.shape[-1]))
            inputs.append(h)
            h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if n < len(linear) - 1:
                h = h.relu_()
        logits = h[..., : self.num_classes]
        delta = torch.zeros_like(h)  # d loss / d output, 0 on the padded outputs
        if self.hinge:
            sign = (2 * y - 1).to(h.dtype)
            gap = 1.0 - sign * (logits[..., 1] - logits[..., 0])
            per_sample = torch.clamp(gap, min=0.0)
            g = -sign * (gap > 0).to(h.dtype) * weight
            delta[..., 1] = g
            delta[..., 0] = -g
        else:  # cross-entropy: softmax minus the one-hot label
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            per_sample = (lse - logits.gather(-1, y.unsqueeze(-1))).squeeze(-1)
            delta[..., : self.num_classes] = torch.exp(logits - lse)
            delta.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(per_sample, -1.0)[..., None])
            delta.mul_(weight.unsqueeze(-1))
        per_client = (per_sample * weight).sum(dim=1)
        grads: list[torch.Tensor | None] = [None] * len(params)
        for n in range(len(linear) - 1, -1, -1):
            i, a = linear[n], inputs[n]
            w, b = params[i], params[i + 1]
            below = None
            if n > 0:  # through W (before its update) and the ReLU below
                below = torch.bmm(delta, w).mul_(a > 0)
            if plain:
                w.baddbmm_(delta.transpose(1, 2), a, alpha=-self.cfg.lr)
                b.sub_(delta.sum(dim=1), alpha=self.cfg.lr)
            else:
                grads[i] = torch.bmm(delta.transpose(1, 2), a)
                grads[i + 1] = delta.sum(dim=1)
            delta = below
        return per_client, (None if plain else grads)

    def _pad(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The flat model [P] as the padded parameters (zeros outside each real block)."""
        out = []
        for part, shape, padded in zip(
            flat.split(self.sizes), self.shapes, self.padded, strict=True
        ):
            p = part.new_zeros(padded)
            if padded == shape:
                p = part.view(shape).clone()
            elif len(padded) == 2:  # [rows, cols]: the real block is the top-left corner
                rows = shape[0]
                p[:rows, : part.numel() // rows] = part.view(rows, -1)
            else:
                p[: part.numel()] = part
            out.append(p)
        return out

    def _unpad(self, i: int, p: torch.Tensor) -> torch.Tensor:
        """Parameter ``i`` of every client, [C, *padded] -> its real values [C, size]."""
        C, shape = p.shape[0], self.shapes[i]
        if self.padded[i] == shape:
            return p.reshape(C, -1)
        if len(self.padded[i]) == 2:
            rows = shape[0]
            return p[:, :rows, : self.sizes[i] // rows].reshape(C, -1)
        return p[:, : self.sizes[i]]

    def _loss(self, params, x, y, weight) -> torch.Tensor:
        """[C] each client's weighted mean loss of its batch x [C, B, ...], y [C, B]."""
        logits = self._forward(params, x)
        if self.hinge:
            sign = (2 * y - 1).to(logits.dtype)
            per_sample = torch.clamp(1.0 - sign * (logits[..., 1] - logits[..., 0]), min=0.0)
        else:  # cross-entropy, written out: log-sum-exp minus the label's logit
            picked = logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            per_sample = torch.logsumexp(logits, dim=-1) - picked
        return (per_sample * weight).sum(dim=1)

    def _forward(self, params, h: torch.Tensor) -> torch.Tensor:
        C, B = h.shape[:2]
        for j, layer in enumerate(self.layers):
            kind, i = self.kind.get(j, ("", -1))
            if kind == "linear":
                w, b = params[i], params[i + 1]
                if h.shape[-1] < w.shape[-1]:  # zero columns up to the padded width
                    h = F.pad(h, (0, w.shape[-1] - h.shape[-1]))
                h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            elif kind == "conv":
                w, b = params[i], params[i + 1]
                if w.dim() == 2:  # held padded to whole 64-byte blocks
                    w = w[:, : self.sizes[i]].view(C, *self.shapes[i])
                    b = b[:, : self.shapes[i][0]]
                h = _conv_each(h, w, b, layer.padding)
            elif isinstance(layer, nn.ReLU):
                h = torch.relu(h)
            elif isinstance(layer, nn.MaxPool2d):
                pooled = max_pool(layer, h.reshape(C * B, *h.shape[2:]))
                h = pooled.reshape(C, B, *pooled.shape[1:])
            else:  # nn.Flatten (supports_batched admits nothing else)
                h = h.reshape(C, B, -1)
        return h[..., : self.layers[-1].out_features]


def _conv_each(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, padding) -> torch.Tensor:
    """One stride-1 convolution per client: h [C, B, cin, H, W], w [C, cout, cin, kh, kw],
    b [C, cout]."""
    outs = [
        F.conv2d(hc, wc, bc, padding=padding)
        for hc, wc, bc in zip(h.unbind(0), w.unbind(0), b.unbind(0), strict=True)
    ]
    return torch.stack(outs)
