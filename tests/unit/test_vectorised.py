"""The vectorised trainer (torch.func) computes what the sequential reference computes: the
same batches, the same SGD (momentum, weight decay, FedProx), the same losses and models to
float32 rounding; and a client's result does not depend on which clients share its chunk,
which is what keeps results independent of the world size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distfl import config as C
from distfl.data import ClientData, load_clients, load_digits_dataset, make_partition
from distfl.models import build_model, flat_params
from distfl.train import SequentialTrainer, VectorisedTrainer, client_seed, supports

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def setup(digits, name: str, *sets: str, num_clients: int = 6):
    cfg = C.load(
        preset="digits",
        overrides=[f'model.name="{name}"', f"data.num_clients={num_clients}",
                   "server.clients_per_round=2", "train.local_steps=5", *sets],
    )  # fmt: skip
    part = make_partition(cfg, digits)
    data = load_clients(digits, part, range(num_clients), CPU, groups=cfg.groups, seed=0)
    torch.manual_seed(1)
    start = flat_params(build_model(name, digits.input_shape, 10))
    seeds = [client_seed(0, 3, k) for k in range(num_clients)]
    seq = SequentialTrainer(build_model(name, digits.input_shape, 10), cfg.train, CPU)
    vec = VectorisedTrainer(build_model(name, digits.input_shape, 10), cfg.train, CPU)
    return cfg, [data[k] for k in range(num_clients)], start, seeds, seq, vec


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet5"])
@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("train.momentum=0.9",),
        ("train.weight_decay=0.01",),
        ("train.prox_mu=0.5", "train.lr=0.05"),
        ("train.momentum=0.5", "train.weight_decay=4e-4", "train.prox_mu=0.1"),
    ],
)
def test_same_models_and_losses_as_sequential(digits, name, sets):
    torch.set_num_threads(1)
    cfg, datas, start, seeds, seq, vec = setup(digits, name, *sets)
    expected = [seq.train(start, d, seed=s) for d, s in zip(datas, seeds, strict=True)]
    models, losses = vec.train_many(start, datas, seeds)
    assert models.shape == (len(datas), start.numel()) and losses.shape == (len(datas), 5)
    for i, (m, l) in enumerate(expected):
        assert torch.allclose(models[i], m, rtol=1e-5, atol=1e-6), (name, sets, i)
        assert np.allclose(losses[i], l, rtol=1e-5, atol=1e-6), (name, sets, i)
        assert not torch.equal(models[i], start)  # it trained


def test_each_option_changes_the_result(digits):
    """Momentum, weight decay and the proximal term each reach the update."""
    base = setup(digits, "mlp")
    ref, _ = base[5].train_many(base[2], base[1], base[3])
    for sets in (("train.momentum=0.9",), ("train.weight_decay=0.1",), ("train.prox_mu=5.0",)):
        _, datas, start, seeds, _, vec = setup(digits, "mlp", *sets)
        got, _ = vec.train_many(start, datas, seeds)
        assert not torch.allclose(got, ref), sets


def test_prox_pulls_towards_the_start(digits):
    _, datas, start, seeds, _, vec = setup(digits, "mlp")
    free, _ = vec.train_many(start, datas, seeds)
    _, datas, start, seeds, _, vec = setup(digits, "mlp", "train.prox_mu=10.0")
    held, _ = vec.train_many(start, datas, seeds)
    assert (held - start).norm(dim=1).max() < (free - start).norm(dim=1).min()


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_result_does_not_depend_on_the_chunk(digits, name):
    _, datas, start, seeds, _, vec = setup(digits, name, "train.momentum=0.9")
    together, lt = vec.train_many(start, datas, seeds)
    a, la = vec.train_many(start, datas[:2], seeds[:2])
    b, lb = vec.train_many(start, datas[2:], seeds[2:])
    assert torch.equal(torch.cat([a, b]), together)
    assert np.array_equal(np.concatenate([la, lb]), lt)
    # the smallest budget (chunks of two) gives the same bits too
    _, _, _, _, _, tiny = setup(digits, name, "train.momentum=0.9", "train.chunk_mb=1")
    if name == "cnn":
        assert tiny.chunk_size(datas[0]) == 2
    pairs, lp = tiny.train_many(start, datas, seeds)
    assert torch.equal(pairs, together) and np.array_equal(lp, lt)
    # and so does a client trained alone (a worker hosting one participant of a cluster)
    for i in (0, 3, 5):
        alone, la1 = vec.train_many(start, [datas[i]], [seeds[i]])
        assert torch.equal(alone[0], together[i]) and np.array_equal(la1[0], lt[i])


def test_clients_smaller_than_a_batch_train_apart(digits):
    """A client with fewer samples than batch_size uses all of them per step, as the
    sequential trainer does; it is grouped with clients of its own batch size."""
    cfg, datas, start, seeds, seq, vec = setup(digits, "mlp", "train.batch_size=32")
    small = ClientData(datas[0].x_train[:5], datas[0].y_train[:5], datas[0].x_test, datas[0].y_test)
    mixed = [datas[1], small, datas[2]]
    got, losses = vec.train_many(start, mixed, seeds[:3])
    for i, d in enumerate(mixed):
        m, l = seq.train(start, d, seed=seeds[i])
        assert torch.allclose(got[i], m, rtol=1e-5, atol=1e-6)
        assert np.allclose(losses[i], l, rtol=1e-5, atol=1e-6)


def test_auto_picks_vectorised_for_the_built_in_models(digits):
    for name in ("mlp", "cnn", "lenet5"):
        assert supports(build_model(name, digits.input_shape, 10))
    assert not supports(torch.nn.BatchNorm1d(4))
