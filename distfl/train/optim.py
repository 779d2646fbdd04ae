"""The local optimisers' update on stacked per-client parameters (``train.optimizer``), for
the trainers that train many clients at once (:mod:`distfl.train.vectorised`,
:mod:`distfl.train.batched`); the sequential reference uses ``torch.optim`` itself.

Each update is written with the operations ``torch.optim``'s single-tensor path applies to
one tensor, in the same order, on tensors whose leading axis is the client: SGD (FedProx's
term, then weight decay, then momentum) and Adam/AdamW (FedProx's term; then Adam's weight
decay added to the gradient, or AdamW's decoupled one applied to the parameters; the two
moments; the bias-corrected step). Every operation is element-wise, so each client's update
is its own.

Every optimiser starts fresh each time a client trains (a round's local training, a
fine-tuning, a probe): no state is kept from one training to the next.
"""

from __future__ import annotations

import torch

from distfl.config import TrainSection

#: the optimisers of ``train.optimizer`` that keep Adam's two moments
ADAM_LIKE = ("adam", "adamw")


def state_copies(train: TrainSection) -> int:
    """float32 copies of the parameters a client holds while it trains: the parameters,
    their gradients and FedProx's anchor, with SGD's momentum buffer or Adam's two
    moments."""
    return 5 if train.optimizer in ADAM_LIKE else 4


def cosine_gradients(
    params: list[torch.Tensor], anchors: list[torch.Tensor], coefficient: float, stacked: bool
) -> list[torch.Tensor]:
    """The gradient of −c·cos(θ, a) for each parameter tensor, θ the model (all its
    tensors as one vector; ``stacked``: each tensor's leading axis is the client, and each
    client has its own θ) and a the start of its training (``anchors``, broadcast over the
    clients): −c (a / (‖a‖ ‖θ‖) − (a·θ) θ / (‖a‖ ‖θ‖³)). A positive c pulls the model toward
    the direction of its start (pFedGraph's local term, the paper's sign)."""

    def per_client(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0], -1).sum(dim=1) if stacked else t.sum()

    dot = sum(per_client(p * a) for p, a in zip(params, anchors, strict=True))
    norm_sq = sum(per_client(p * p) for p in params)
    anchor_norm = torch.sqrt(sum((a * a).sum() for a in anchors))
    norm = torch.sqrt(norm_sq)
    first = 1.0 / (anchor_norm * norm)
    second = dot / (anchor_norm * norm * norm_sq)
    out = []
    for p, a in zip(params, anchors, strict=True):
        shape = (-1,) + (1,) * (p.dim() - 1) if stacked else ()
        f, s = (first.reshape(shape), second.reshape(shape)) if stacked else (first, second)
        out.append((a * f - p * s) * (-coefficient))
    return out


class StackedOptimiser:
    """``train.optimizer``'s update of a list of stacked parameters ``[C, ...]`` in place.
    ``anchors``: the start of each parameter (FedProx's w_start), broadcast over the
    clients. ``cosine``: the coefficient c of a local term −c·cos(θ, w_start) (an
    algorithm's :meth:`~distfl.algorithms.api.base.ClusteringAlgorithm.start_cosine`; 0: none),
    whose gradient is added first. ``pull``: a model per parameter tensor (broadcast over
    the clients) and μ_p, a term (μ_p/2)‖θ − pull‖² whose gradient is added next (a client
    half's :class:`~distfl.algorithms.api.client_side.Prepared` pull; None: none)."""

    def __init__(
        self, train: TrainSection, anchors: list[torch.Tensor], cosine: float = 0.0,
        pull: tuple[list[torch.Tensor], float] | None = None,
    ):  # fmt: skip
        self.cfg = train
        self.cosine = float(cosine)
        self.pull = pull
        self.anchors = anchors
        self.steps = 0
        self.first: list[torch.Tensor | None] = [None] * len(anchors)  # momentum, or Adam's m
        self.second: list[torch.Tensor | None] = [None] * len(anchors)  # Adam's v

    @torch.no_grad()
    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        """One update of every parameter from its gradient (the gradients are not changed)."""
        self.steps += 1
        if self.cosine:
            pulls = cosine_gradients(params, self.anchors, self.cosine, stacked=True)
            grads = [g + d for g, d in zip(grads, pulls, strict=True)]
        if self.pull is not None:
            targets, mu = self.pull
            grads = [g.add(p - a, alpha=mu) for g, p, a in zip(grads, params, targets, strict=True)]
        if self.cfg.optimizer in ADAM_LIKE:
            self._adam(params, grads)
            return
        cfg = self.cfg
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            if cfg.prox_mu:
                g = g.add(p - self.anchors[i], alpha=cfg.prox_mu)
            if cfg.weight_decay:
                g = g.add(p, alpha=cfg.weight_decay)
            if cfg.momentum:
                buf = self.first[i]
                if buf is None:
                    buf = self.first[i] = g.clone()
                else:
                    buf.mul_(cfg.momentum).add_(g)
                g = buf
            p.add_(g, alpha=-cfg.lr)

    def _adam(self, params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        """torch.optim.Adam's (AdamW's) single-tensor step, the step count a Python float as
        there."""
        cfg = self.cfg
        lr, beta1, beta2, wd = cfg.lr, cfg.beta1, cfg.beta2, cfg.weight_decay
        decoupled = cfg.optimizer == "adamw"
        step = float(self.steps)
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            if cfg.prox_mu:
                g = g.add(p - self.anchors[i], alpha=cfg.prox_mu)
            if wd != 0:
                if decoupled:
                    p.mul_(1 - lr * wd)
                else:
                    g = g.add(p, alpha=wd)
            if self.first[i] is None:
                self.first[i] = torch.zeros_like(p)
                self.second[i] = torch.zeros_like(p)
            m, v = self.first[i], self.second[i]
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / bias_correction2_sqrt).add_(cfg.eps)
            p.addcdiv_(m, denom, value=-step_size)
