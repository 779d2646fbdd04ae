"""The batched trainer computes what the sequential reference computes (the same batches,
the same SGD with momentum, weight decay and FedProx, both losses) to float32 rounding, and
a client's bits do not depend on which clients share its call or where it sits in it: the
property that keeps results independent of the world size. ``auto`` picks it for the
built-in models."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from test_vectorised import setup, setup_gaussian

from distfl.data import ClientData
from distfl.datasets.digits import load_digits_dataset
from distfl.models import build_model
from distfl.train import BatchedTrainer, supports_batched, trainer_kind
from distfl.train.batched import ALIGN

CPU = torch.device("cpu")
OPTIONS = [
    (),
    ("train.momentum=0.9",),
    ("train.weight_decay=0.01",),
    ("train.prox_mu=0.5", "train.lr=0.05"),
    ("train.momentum=0.5", "train.weight_decay=4e-4", "train.prox_mu=0.1"),
]


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def batched(digits, name, cfg, **kw):
    return BatchedTrainer(build_model(name, digits.input_shape, 10), cfg.train, CPU, **kw)


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet5"])
@pytest.mark.parametrize("sets", OPTIONS)
def test_same_models_and_losses_as_sequential(digits, name, sets):
    torch.set_num_threads(1)
    cfg, datas, start, seeds, seq, _ = setup(digits, name, *sets)
    models, losses = batched(digits, name, cfg).train_many(start, datas, seeds)
    assert models.shape == (len(datas), start.numel()) and losses.shape == (len(datas), 5)
    for i, (d, s) in enumerate(zip(datas, seeds, strict=True)):
        m, l = seq.train(start, d, seed=s)
        assert torch.allclose(models[i], m, rtol=1e-5, atol=1e-6), (name, sets, i)
        assert np.allclose(losses[i], l, rtol=1e-5, atol=1e-6), (name, sets, i)
        assert not torch.equal(models[i], start)  # it trained


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet5"])
@pytest.mark.parametrize("sgd", ["train.momentum=0.9", "train.momentum=0.0"])
def test_a_clients_bits_do_not_depend_on_its_company(digits, name, sgd):
    """Every split of the clients into calls, every position in a call, a client alone:
    the same bits (LeNet-5's 6-channel weights are the case that needs the 64-byte blocks)."""
    torch.set_num_threads(1)
    cfg, datas, start, seeds, _, _ = setup(digits, name, sgd)
    trainer = batched(digits, name, cfg)
    together, lt = trainer.train_many(start, datas, seeds)
    for group in ([0, 1], [3, 4], [2, 3, 4, 5], [5, 0, 3], [3], [3, 3]):
        got, gl = trainer.train_many(start, [datas[i] for i in group], [seeds[i] for i in group])
        for j, i in enumerate(group):
            assert torch.equal(got[j], together[i]), (name, group, i)
            assert np.array_equal(gl[j], lt[i]), (name, group, i)
    # the smallest memory budget (two or three clients per call) too
    small = dataclasses.replace(cfg.train, chunk_mb=1)
    tiny = BatchedTrainer(build_model(name, digits.input_shape, 10), small, CPU)
    assert tiny.chunk_size(datas[0]) <= 3
    pairs, lp = tiny.train_many(start, datas, seeds)
    assert torch.equal(pairs, together) and np.array_equal(lp, lt)


def test_padded_widths_are_whole_64_byte_blocks_and_round_trip(digits):
    cfg, _, start, _, _, _ = setup(digits, "lenet5")
    trainer = batched(digits, "lenet5", cfg)
    for shape, padded in zip(trainer.shapes, trainer.padded, strict=True):
        assert int(np.prod(padded)) % ALIGN == 0 and int(np.prod(padded)) >= int(np.prod(shape))
    params = trainer._pad(start)
    back = torch.cat([trainer._unpad(i, p.unsqueeze(0)) for i, p in enumerate(params)], dim=1)
    assert torch.equal(back[0], start)
    # the padding is zero
    assert sum(float(p.abs().sum()) for p in params) == pytest.approx(float(start.abs().sum()))


def test_clients_smaller_than_a_batch(digits):
    """A client with fewer samples than batch_size uses all of them per step, as the
    sequential trainer does, padded to the others' width with weight-0 rows."""
    cfg, datas, start, seeds, seq, _ = setup(digits, "mlp", "train.batch_size=32")
    small = ClientData(datas[0].x_train[:5], datas[0].y_train[:5], datas[0].x_test, datas[0].y_test)
    mixed = [datas[1], small, datas[2]]
    trainer = batched(digits, "mlp", cfg)
    got, losses = trainer.train_many(start, mixed, seeds[:3])
    for i, d in enumerate(mixed):
        m, l = seq.train(start, d, seed=seeds[i])
        assert torch.allclose(got[i], m, rtol=1e-5, atol=1e-6)
        assert np.allclose(losses[i], l, rtol=1e-5, atol=1e-6)
    alone, la = trainer.train_many(start, [small], [seeds[1]])
    assert torch.equal(alone[0], got[1]) and np.array_equal(la[0], losses[1])


@pytest.mark.parametrize("hidden", ["[]", "[16]"])
@pytest.mark.parametrize("sets", [(), ("train.momentum=0.9",)])
def test_hinge_loss_matches_sequential(hidden, sets):
    """Plain SGD (its update fused into the weight gradient's product) and momentum."""
    torch.set_num_threads(1)
    datas, start, seeds, seq, _ = setup_gaussian(*sets, hidden=hidden)
    cfg_train = seq.cfg
    model = build_model("mlp", datas[0].x_train.shape[1:], 2, hidden=tuple(json.loads(hidden)))
    models, losses = BatchedTrainer(model, cfg_train, CPU).train_many(start, datas, seeds)
    for i, (d, s) in enumerate(zip(datas, seeds, strict=True)):
        m, l = seq.train(start, d, seed=s)
        assert torch.allclose(models[i], m, rtol=1e-5, atol=1e-6), (hidden, i)
        assert np.allclose(losses[i], l, rtol=1e-5, atol=1e-6), (hidden, i)
        assert not torch.equal(models[i], start)


def test_auto_picks_batched_for_the_built_in_models(digits):
    for name in ("mlp", "cnn", "lenet5"):
        model = build_model(name, digits.input_shape, 10)
        assert supports_batched(model)
        assert trainer_kind("auto", model, CPU) == "batched"
        assert trainer_kind("sequential", model, CPU) == "sequential"
    other = torch.nn.Sequential(torch.nn.Linear(4, 2))
    assert not supports_batched(other)
    assert trainer_kind("auto", other, CPU) == "vectorised"
    with pytest.raises(ValueError, match="does not run"):
        BatchedTrainer(other, setup(digits, "mlp")[0].train, CPU)
