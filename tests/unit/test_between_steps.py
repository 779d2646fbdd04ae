"""Every trainer calls ``between`` before each local step, so a stop signal can leave a
round's training within one step; what ``between`` raises leaves the training, and a
``between`` that does nothing changes no bit."""

from __future__ import annotations

import pytest
import torch

from distfl.config import TrainSection
from distfl.data import ClientData
from distfl.models import build_model
from distfl.train import build_trainer

CPU = torch.device("cpu")


class Left(Exception):
    pass


def _setup(local_steps: int = 7):
    torch.manual_seed(0)
    model = build_model("mlp", (6,), 3, hidden=(5,))
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    g = torch.Generator().manual_seed(1)
    datas = []
    for n in (12, 9, 4):  # 4 samples: a batch of its own size (trained apart)
        x = torch.rand((n + 3, 6), generator=g)
        y = torch.randint(0, 3, (n + 3,), generator=g)
        datas.append(ClientData(x[:n], y[:n], x[n:], y[n:]))
    cfg = TrainSection(local_steps=local_steps, batch_size=8)
    return model, start, datas, cfg


def _train(kind, model, start, datas, cfg, between):
    trainer = build_trainer(kind, model, cfg, CPU, pad_to=8)
    seeds = [5, 6, 7]
    if kind == "sequential":
        runs = [trainer.train(start, d, seed=s, between=between)
                for d, s in zip(datas, seeds, strict=True)]  # fmt: skip
        return torch.stack([r[0] for r in runs]), [r[1] for r in runs]
    return trainer.train_many(start, datas, seeds, between)


@pytest.mark.parametrize("kind", ["sequential", "vectorised", "batched"])
def test_between_comes_before_every_local_step_and_changes_nothing(kind):
    model, start, datas, cfg = _setup()
    calls = []
    new, _ = _train(kind, model, start, datas, cfg, lambda: calls.append(1))
    plain, _ = _train(kind, model, start, datas, cfg, None)
    assert torch.equal(new, plain)
    # the sequential trainer trains each client apart; the vectorised trainer trains
    # clients of one batch size together (the 4-sample client apart), the batched one all
    # clients of a chunk together
    chunks = {"sequential": 3, "vectorised": 2, "batched": 1}[kind]
    assert len(calls) == chunks * cfg.local_steps


@pytest.mark.parametrize("kind", ["sequential", "vectorised", "batched"])
def test_what_between_raises_leaves_the_training_at_that_step(kind):
    model, start, datas, cfg = _setup()
    calls = []

    def between():
        calls.append(1)
        if len(calls) == 3:
            raise Left

    with pytest.raises(Left):
        _train(kind, model, start, datas, cfg, between)
    assert len(calls) == 3  # no step after the one that raised
