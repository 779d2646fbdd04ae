"""Sample-level DP (DP-SGD, distfl.train.private) in the vectorised trainer: a step is each
sample's gradient, computed here again one sample at a time with torch.autograd, clipped to
C_s, summed, noised from the client's own generator and divided by the batch; with no noise
and a bound no gradient reaches, the plain step's gradient; a client's training does not
depend on the clients beside it in its chunk."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distfl import config as C
from distfl.data import load_clients, make_partition
from distfl.datasets.digits import load_digits_dataset
from distfl.models import build_model, flat_params
from distfl.train import VectorisedTrainer, client_seed
from distfl.train.private import PrivateStep, noise_generator

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def federation():
    digits = load_digits_dataset()
    cfg = C.load(preset="digits", overrides=["data.num_clients=4", "train.local_steps=3",
                                             "server.clients_per_round=2"])  # fmt: skip
    part = make_partition(cfg, digits)
    data = load_clients(digits, part, range(4), CPU, groups=cfg.groups, seed=0)
    return cfg, digits, [data[k] for k in range(4)]


def _model(digits):
    torch.manual_seed(1)
    return build_model("mlp", digits.input_shape, 10)


def _by_hand(model, x, y, clip, noise, generator):
    """One client's DP-SGD gradient, one sample at a time."""
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for i in range(len(y)):
        loss = torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        factor = min(1.0, clip / float(norm))
        total = [t + g * factor for t, g in zip(total, grads, strict=True)]
    flat = torch.cat([t.reshape(-1) for t in total])
    flat = flat + torch.randn(flat.numel(), generator=generator) * (noise * clip)
    return flat / len(y)


@pytest.mark.parametrize("clip, noise", [(0.5, 0.0), (0.5, 1.3), (1e9, 0.0)])
def test_a_step_is_the_clipped_noised_mean_of_per_sample_gradients(federation, clip, noise):
    _, digits, datas = federation
    model = _model(digits)
    names = [n for n, _ in model.named_parameters()]
    step = PrivateStep(model, {}, "cross_entropy", clip, noise, names)
    params = {n: p.detach().unsqueeze(0).expand(2, *p.shape).clone()
              for n, p in model.named_parameters()}  # fmt: skip
    x = torch.stack([d.x_train[:6] for d in datas[:2]])
    y = torch.stack([d.y_train[:6] for d in datas[:2]])
    grads, loss = step(params, x, y, torch.ones(2, 6), [noise_generator(7), noise_generator(8)])
    for c, seed in enumerate((7, 8)):
        mine = torch.cat([grads[n][c].reshape(-1) for n in names])
        expected = _by_hand(model, x[c], y[c], clip, noise, noise_generator(seed))
        assert torch.allclose(mine, expected, atol=1e-6, rtol=1e-5)
        plain = torch.nn.functional.cross_entropy(model(x[c]), y[c])
        assert float(loss[c]) == pytest.approx(float(plain.detach()), rel=1e-5)
    if clip > 1e6:  # nothing clipped, no noise: the batch's own gradient
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[0]), y[0]).backward()
        batch = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        assert torch.allclose(torch.cat([grads[n][0].reshape(-1) for n in names]), batch,
                              atol=1e-6)  # fmt: skip


def test_a_clients_training_does_not_depend_on_its_company(federation):
    cfg, digits, datas = federation
    train = dataclasses.replace(cfg.train, trainer="vectorised")
    start = flat_params(_model(digits))
    seeds = [client_seed(0, 2, k) for k in range(4)]
    trainer = VectorisedTrainer(_model(digits), train, CPU, sample_dp=(0.3, 1.1))
    together, losses = trainer.train_many(start, datas, seeds)
    alone, alone_losses = trainer.train_many(start, datas[2:3], seeds[2:3])
    assert torch.equal(together[2], alone[0])
    assert (losses[2] == alone_losses[0]).all()
    plain = VectorisedTrainer(_model(digits), train, CPU)
    assert not torch.equal(plain.train_many(start, datas[2:3], seeds[2:3])[0][0], alone[0])
