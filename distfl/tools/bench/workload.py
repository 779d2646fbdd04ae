"""The one workload every row of ``distfl bench`` runs, and what the rows share of it.

digits, K clients, N sampled per round, one model, S local SGD steps of batch B per client,
R rounds of FedAvg, on the CPU with one torch thread per process. :class:`Workload` holds
these numbers and builds distfl's config of them (the ``digits`` preset and ``--set``
items); :func:`sgd_steps` is one client's local training as the plain loop and the Flower
client both write it; :func:`warm_up_torch` pays torch's one-time lazy imports untimed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from distfl.errors import ConfigError

W3 = 3  # world size of the torchrun row (server + 2 workers)


@dataclass(frozen=True)
class Workload:
    """The one workload every row runs."""

    clients: int = 100
    per_round: int = 100
    model: str = "mlp"
    steps: int = 8
    batch: int = 16
    rounds: int = 10
    seed: int = 0

    def check(self) -> None:
        for flag, value in (
            ("--clients", self.clients),
            ("--per-round", self.per_round),
            ("--steps", self.steps),
            ("--batch", self.batch),
            ("--rounds", self.rounds),
        ):
            if value < 1:
                raise ConfigError(f"bench {flag} {value}: must be at least 1")
        if self.per_round > self.clients:
            raise ConfigError(
                f"bench --per-round {self.per_round}: must be at most --clients ({self.clients})"
            )
        if self.clients < W3 - 1:
            raise ConfigError(
                f"bench --clients {self.clients}: the W={W3} row needs at least {W3 - 1} clients"
            )

    @property
    def client_steps(self) -> int:
        """Client-steps the whole run trains: R x N x S."""
        return self.rounds * self.per_round * self.steps

    def overrides(self, *, out: str, trainer: str = "auto", warm_up_rounds: int = 0) -> list[str]:
        """``--set`` items on top of the ``digits`` preset (the key defaults).
        ``warm_up_rounds``: rounds run before the R timed ones (the run has R + that many)."""
        rounds = self.rounds + warm_up_rounds
        return [
            f"run.seed={self.seed}",
            f"run.rounds={rounds}",
            f"run.out={json.dumps(out)}",
            "run.threads=1",
            'run.device="cpu"',
            'run.progress="none"',
            'data.dataset="digits"',
            f"data.num_clients={self.clients}",
            f"model.name={json.dumps(self.model)}",
            f"train.local_steps={self.steps}",
            f"train.batch_size={self.batch}",
            f"train.trainer={json.dumps(trainer)}",
            f"server.clients_per_round={self.per_round}",
            'algorithm.name="none"',
            # evaluation only after the last round (it always runs there)
            f"eval.every={rounds + 1}",
            # the run file written at the end alone, as the plain loop writes nothing (not
            # after the first round as well, a write once a process that a run of 10 rounds
            # would count as 10 % of its loop)
            "checkpoint.seconds=0",
        ]

    def config(self, *, out: str, trainer: str = "auto"):
        from distfl import config

        return config.load(preset="digits", overrides=self.overrides(out=out, trainer=trainer))


def sgd_steps(model, loss_fn, d, w: Workload, *, lr: float, round_index: int, k: int) -> int:
    """Client k's local training as the plain loop and the Flower client both do it: a fresh
    SGD, ``w.steps`` steps on random batches seeded from (seed, round, k). Returns n_k."""
    import torch

    from distfl.train import client_seed

    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n = d.num_train
    b = min(w.batch, n)
    g = torch.Generator().manual_seed(client_seed(w.seed, round_index, k))
    for _ in range(w.steps):
        idx = torch.randint(n, (b,), generator=g)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(d.x_train[idx]), d.y_train[idx])
        loss.backward()
        opt.step()
    return n


def warm_up_torch() -> float:
    """One untimed step through torch.func (vmap of grad) and torch.optim.SGD on a tiny
    model: their lazy imports cost seconds once per process (~2 s on 2 cores), which no row
    should count as per-round cost. Returns the seconds it took."""
    import torch
    from torch import nn
    from torch.func import functional_call, grad_and_value, vmap

    t0 = time.perf_counter()
    model = nn.Linear(2, 2)
    params = {k: v.detach().expand(2, *v.shape).clone() for k, v in model.named_parameters()}

    def loss_of(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x,)), y)

    x, y = torch.zeros(2, 3, 2), torch.zeros(2, 3, dtype=torch.long)
    vmap(grad_and_value(loss_of))(params, x, y)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    nn.functional.cross_entropy(model(x[0]), y[0]).backward()
    opt.step()
    return time.perf_counter() - t0
