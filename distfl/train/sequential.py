"""The reference trainer: one client after another, exactly S local steps each of
``train.optimizer`` (torch's SGD, Adam or AdamW, fresh for each client's training).

Client k's randomness in round t (its batch order) comes from (seed, t, k) only, never
from the worker that hosts it, so any world size trains it the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from distfl.config import TrainSection
from distfl.data import ClientData
from distfl.metrics import balanced_accuracy
from distfl.models import flat_params, load_flat
from distfl.train.counter import counter_rows
from distfl.train.optim import cosine_gradients


def unflatten_like(model: nn.Module, flat: torch.Tensor) -> list[torch.Tensor]:
    """The flat model ``flat`` [P] cut into views shaped as ``model``'s parameters, in order."""
    out, offset = [], 0
    for p in model.parameters():
        out.append(flat[offset : offset + p.numel()].view(p.shape))
        offset += p.numel()
    return out


def hinge_each(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[B] the hinge loss of each sample (:func:`hinge_loss` before its mean)."""
    if logits.shape[-1] != 2:
        raise ValueError(
            f"train.loss = 'hinge' needs a binary problem (2 logits), not {logits.shape[-1]}"
        )
    sign = (2 * y - 1).to(logits.dtype)
    return torch.clamp(1.0 - sign * (logits[..., 1] - logits[..., 0]), min=0.0)


def cross_entropy_each(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[B] the cross-entropy of each sample."""
    return nn.functional.cross_entropy(logits, y, reduction="none")


def hinge_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean hinge loss of a binary problem: with the logits (z0, z1) and the label y ∈ {0, 1},
    the margin is m = (2y − 1)(z1 − z0) and the loss mean(max(0, 1 − m)) (the FLCL paper's
    l(z) = max(0, 1 − z) with labels ±1 and the score z1 − z0; a linear model, ``model.hidden
    = []``, makes z1 − z0 = θᵀx + b)."""
    if logits.shape[-1] != 2:
        raise ValueError(
            f"train.loss = 'hinge' needs a binary problem (2 logits), not {logits.shape[-1]}"
        )
    sign = (2 * y - 1).to(logits.dtype)
    margin = sign * (logits[..., 1] - logits[..., 0])
    return torch.clamp(1.0 - margin, min=0.0).mean()


#: ``train.loss`` -> the loss of a batch of logits [B, C] and labels [B].
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": nn.functional.cross_entropy,
    "hinge": hinge_loss,
}


#: ``train.loss`` -> the loss of each sample of a batch, [B]
LOSSES_EACH: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": cross_entropy_each,
    "hinge": hinge_each,
}


def loss_function(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss of ``train.loss = name``."""
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"train.loss = {name!r}: allowed values are {', '.join(LOSSES)}") from None


def weighted_loss_function(name: str):
    """``(logits [B, C], y [B], w [B]) -> Σ_i w_i ℓ_i / B``: the loss of ``train.loss =
    name`` with a weight per sample (FedEM's, Marfoq et al. 2021: its batch loss is
    ``loss_vec @ weights / len(loss_vec)``); with every weight 1 it is the batch mean."""
    loss_function(name)  # the same error for an unknown name
    each = LOSSES_EACH[name]

    def weighted(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (each(logits, y) * w).sum() / y.shape[0]

    return weighted


def derived_seed(*entropy: int) -> int:
    """A 63-bit seed drawn from ``entropy`` alone (the first 64-bit word of its
    SeedSequence's state, shifted right once): a stream of its own for each tuple, such as
    (seed, a stream's constant, round, ...)."""
    state = np.random.SeedSequence([int(e) for e in entropy]).generate_state(1, dtype=np.uint64)
    return int(state[0] >> 1)


def client_seed(seed: int, round_index: int, client: int) -> int:
    """A 63-bit seed for client ``client``'s randomness in round ``round_index``."""
    state = np.random.SeedSequence([seed, round_index, client]).generate_state(2, dtype=np.uint64)
    return int(state[0]) & (2**63 - 1)


def task_seed(seed: int, round_index: int, client: int, slot: int) -> int:
    """A 63-bit seed for the training at position ``slot`` among client ``client``'s
    trainings in round ``round_index`` (a client that trains several models, soft
    membership): slot 0 is :func:`client_seed`, so a client that trains one model draws as
    it always did."""
    if slot == 0:
        return client_seed(seed, round_index, client)
    entropy = [seed, 0x5107, round_index, client, slot]
    state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint64)
    return int(state[0]) & (2**63 - 1)


def finetune_seed(seed: int, round_index: int, client: int) -> int:
    """A 63-bit seed for client ``client``'s fine-tuning before round ``round_index``'s
    evaluation (:meth:`ClusteringAlgorithm.evaluation_finetune`): from (seed, round, client)
    alone, apart from its training's :func:`client_seed`."""
    entropy = [seed, 0xF1E7E, round_index, client]
    state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint64)
    return int(state[0]) & (2**63 - 1)


def clients_per_chunk(
    num_params: int, batch: int, sample_numel: int, chunk_mb: int, *, copies: int = 4
) -> int:
    """How many clients a batched trainer takes per call within ``train.chunk_mb``: the
    parameters' ``copies`` float32 copies (:func:`~distfl.train.optim.state_copies`: the
    parameters, gradients, proximal anchor and the optimiser's state) and a generous
    allowance for a batch's activations; at least two."""
    per_client = copies * num_params * 4 + batch * sample_numel * 4 * 64
    return max(2, int(chunk_mb * 2**20 // per_client))


def local_optimiser(train: TrainSection, params) -> torch.optim.Optimizer:
    """``train.optimizer``'s torch optimiser of ``params``, fresh: SGD, or Adam / AdamW on
    their single-tensor path (``foreach=False``, whose operations the trainers of many
    clients repeat on stacked tensors, :mod:`distfl.train.optim`)."""
    if train.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=train.lr, momentum=train.momentum, weight_decay=train.weight_decay
        )
    adam = torch.optim.AdamW if train.optimizer == "adamw" else torch.optim.Adam
    return adam(
        params, lr=train.lr, betas=(train.beta1, train.beta2), eps=train.eps,
        weight_decay=train.weight_decay, foreach=False,
    )  # fmt: skip


class BatchStream:
    """Minibatches of a fixed size, drawn by shuffling once per pass over the data."""

    def __init__(self, num_samples: int, batch_size: int, generator: torch.Generator):
        self.n = num_samples
        self.b = min(batch_size, num_samples)
        self.g = generator
        self.perm = torch.randperm(self.n, generator=self.g)
        self.pos = 0

    def next(self) -> torch.Tensor:
        if self.pos + self.b > self.n:
            self.perm = torch.randperm(self.n, generator=self.g)
            self.pos = 0
        idx = self.perm[self.pos : self.pos + self.b]
        self.pos += self.b
        return idx


def stream_rows(num_samples: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """The sample indices of a client's first ``steps`` batches [steps, b], all at once:
    what :class:`BatchStream` on ``torch.Generator().manual_seed(seed)`` draws (one
    permutation per pass over the data, each cut into n // b batches, the remainder
    skipped), without a tensor per batch."""
    n = num_samples
    b = min(batch_size, n)
    per_pass = n // b
    g = torch.Generator().manual_seed(seed)
    passes = [torch.randperm(n, generator=g).numpy() for _ in range(-(-steps // per_pass))]
    return np.concatenate([p[: per_pass * b] for p in passes]).reshape(-1, b)[:steps]


def batch_rows(
    train: TrainSection, nums: list[int], seeds: list[int], device: torch.device
) -> tuple[torch.Tensor, list[int]]:
    """The sample indices of each client's ``train.local_steps`` batches, each into its own
    samples, on ``device`` [S, C, b_max], and each client's batch size b = min(batch size,
    n) (entries past a client's b are 0), for clients of ``nums`` train samples and
    ``seeds``, drawn as ``train.batches`` says: ``stream`` by :func:`stream_rows`, a client
    at a time on the host; ``counter`` by :func:`~distfl.train.counter.counter_rows`, all
    at once on ``device``."""
    S, B = train.local_steps, train.batch_size
    if train.batches == "counter":
        rows, b = counter_rows(
            torch.tensor(nums, dtype=torch.int64, device=device),
            torch.tensor(seeds, dtype=torch.int64, device=device), B, S,
        )  # fmt: skip
        return rows, b.tolist()
    b = [min(B, n) for n in nums]
    rows = np.zeros((S, len(nums), max(b)), dtype=np.int64)
    for c, (n, seed) in enumerate(zip(nums, seeds, strict=True)):
        rows[:, c, : b[c]] = stream_rows(n, B, S, seed)
    return torch.from_numpy(rows).to(device), b


class SequentialTrainer:
    """Trains one client at a time on a private copy of the model."""

    def __init__(
        self, model: nn.Module, train: TrainSection, device: torch.device, *, cosine: float = 0.0
    ):
        self.model = model.to(device)
        self.cfg = train
        self.device = device
        self.loss_fn = loss_function(train.loss)
        self.weighted_fn = weighted_loss_function(train.loss)
        #: c of a local term −c·cos(θ, w_start) (0: none; StackedOptimiser's ``cosine``)
        self.cosine = float(cosine)

    def train(
        self, start: torch.Tensor, data: ClientData, *, seed: int,
        between: Callable[[], None] | None = None, weights: torch.Tensor | None = None,
        pull: tuple[torch.Tensor, float] | None = None,
    ) -> tuple[torch.Tensor, np.ndarray]:  # fmt: skip
        """S local steps from the flat model ``start`` with a fresh optimiser; returns (new
        flat model, losses [S]). ``weights`` [n_train], if given, weighs each train sample's
        loss (:func:`weighted_loss_function`); ``pull`` (a flat model a and μ), if given,
        adds (μ/2)‖θ − a‖² to the loss.
        ``between`` is called before each step (it may raise to give the training up)."""
        load_flat(self.model, start.to(self.device))
        self.model.train()
        opt = local_optimiser(self.cfg, self.model.parameters())
        if self.cfg.batches == "counter":
            rows, [b] = batch_rows(self.cfg, [data.num_train], [seed], self.device)
            batches = iter(rows[:, 0, :b])
        else:
            g = torch.Generator().manual_seed(seed)
            stream = BatchStream(data.num_train, self.cfg.batch_size, g)
            batches = (stream.next().to(self.device) for _ in range(self.cfg.local_steps))
        keep = self.cfg.prox_mu or self.cosine
        anchor = [p.detach().clone() for p in self.model.parameters()] if keep else []
        targets = unflatten_like(self.model, pull[0].to(self.device)) if pull is not None else []
        losses = np.empty(self.cfg.local_steps, dtype=np.float64)
        for s in range(self.cfg.local_steps):
            if between is not None:
                between()
            idx = next(batches)
            opt.zero_grad(set_to_none=True)
            if weights is None:
                loss = self.loss_fn(self.model(data.x_train[idx]), data.y_train[idx])
            else:
                logits = self.model(data.x_train[idx])
                loss = self.weighted_fn(logits, data.y_train[idx], weights[idx])
            loss.backward()
            if self.cosine:  # the gradient of −c·cos(w, w_start)
                with torch.no_grad():
                    params = [p.detach() for p in self.model.parameters()]
                    pulls = cosine_gradients(params, anchor, self.cosine, stacked=False)
                    for p, d in zip(self.model.parameters(), pulls, strict=True):
                        p.grad.add_(d)
            if pull is not None:  # the gradient of mu/2 ||w - a||^2
                with torch.no_grad():
                    for p, a in zip(self.model.parameters(), targets, strict=True):
                        p.grad.add_(p - a, alpha=pull[1])
            if self.cfg.prox_mu:  # FedProx: the gradient of mu/2 ||w - w_start||^2
                with torch.no_grad():
                    for p, p0 in zip(self.model.parameters(), anchor, strict=True):
                        p.grad.add_(p - p0, alpha=self.cfg.prox_mu)
            opt.step()
            losses[s] = float(loss.detach())
        return flat_params(self.model), losses


@torch.no_grad()
def evaluate(
    model: nn.Module, flat: torch.Tensor, data: ClientData, *, loss: str = "cross_entropy"
) -> tuple[float, float, float]:
    """(balanced accuracy, accuracy, mean loss) of the flat model on the client's test split;
    the loss is ``train.loss``'s (``loss``)."""
    load_flat(model, flat)
    return evaluate_loaded(model, data, loss=loss)


@torch.no_grad()
def evaluate_loaded(
    model: nn.Module, data: ClientData, *, loss: str = "cross_entropy"
) -> tuple[float, float, float]:
    """:func:`evaluate` of the model as it is loaded (many clients of one model load it
    once)."""
    model.eval()
    logits = model(data.x_test)
    loss_value = float(loss_function(loss)(logits, data.y_test))
    pred = logits.argmax(dim=1).cpu().numpy()
    y = data.y_test.cpu().numpy()
    return balanced_accuracy(y, pred), float(np.mean(pred == y)), loss_value


@torch.no_grad()
def sample_losses(
    model: nn.Module,
    flats: torch.Tensor,
    data: ClientData,
    *,
    loss: str = "cross_entropy",
    split: str = "train",
) -> torch.Tensor:
    """[M, n] float64: the loss (``train.loss``'s) of each of the client's samples of
    ``split`` ("train" or "test") under each flat model of ``flats`` [M, P] (FedEM's E-step
    reads them on the train split)."""
    model.eval()
    each = LOSSES_EACH[loss] if loss in LOSSES_EACH else loss_function(loss)
    x, y = (data.x_train, data.y_train) if split == "train" else (data.x_test, data.y_test)
    out = torch.empty((flats.shape[0], y.shape[0]), dtype=torch.float64)
    for m in range(flats.shape[0]):
        load_flat(model, flats[m])
        out[m] = each(model(x), y).to(torch.float64).cpu()
    return out


@torch.no_grad()
def sample_logits(model: nn.Module, flats: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """[M, n, C] float64: the logits of the samples ``x`` under each flat model of
    ``flats`` [M, P]."""
    model.eval()
    outs = []
    for m in range(flats.shape[0]):
        load_flat(model, flats[m])
        outs.append(model(x).to(torch.float64).cpu())
    return torch.stack(outs)


@torch.no_grad()
def train_losses(
    model: nn.Module, flats: torch.Tensor, data: ClientData, *, loss: str = "cross_entropy"
) -> np.ndarray:
    """[M] mean loss (``train.loss``'s, ``loss``) of each flat model in ``flats`` [M, P] on
    the client's train split (IFCA's cluster identity estimate)."""
    model.eval()
    fn = loss_function(loss)
    out = np.empty(flats.shape[0], dtype=np.float64)
    for m in range(flats.shape[0]):
        load_flat(model, flats[m])
        out[m] = float(fn(model(data.x_train), data.y_train))
    return out
