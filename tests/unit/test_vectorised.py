"""The vectorised trainer (torch.func) computes what the sequential reference computes: the
same batches, the same SGD (momentum, weight decay, FedProx), the same losses and models to
float32 rounding; and a client's result does not depend on which clients share its chunk,
which is what keeps results independent of the world size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distfl import config as C
from distfl.data import (
    ClientData,
    load_clients,
    load_dataset,
    make_partition,
)
from distfl.datasets.digits import load_digits_dataset
from distfl.models import build_model, flat_params
from distfl.train import (
    SequentialTrainer,
    VectorisedTrainer,
    client_seed,
    evaluate,
    supports,
    train_losses,
)
from distfl.train.sequential import BatchStream, hinge_loss, stream_rows

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


def setup_gaussian(*sets: str, hidden: str = "[]", num_clients: int = 6):
    """The binary Gaussian federation with the hinge loss; ``hidden = []`` is a linear model."""
    cfg = C.load(
        overrides=['data.dataset="gaussian"', f"data.num_clients={num_clients}",
                   "data.dim=5", "data.samples_per_client=40", "server.clients_per_round=2",
                   "train.local_steps=5", "train.batch_size=8", 'train.loss="hinge"',
                   f"model.hidden={hidden}", *sets],
    )  # fmt: skip
    ds = load_dataset(cfg)
    part = make_partition(cfg, ds)
    data = load_clients(ds, part, range(num_clients), CPU, groups=cfg.groups, seed=0)
    hid = cfg.model.hidden
    torch.manual_seed(2)
    start = flat_params(build_model("mlp", ds.input_shape, 2, hidden=hid))
    seeds = [client_seed(0, 4, k) for k in range(num_clients)]
    seq = SequentialTrainer(build_model("mlp", ds.input_shape, 2, hidden=hid), cfg.train, CPU)
    vec = VectorisedTrainer(build_model("mlp", ds.input_shape, 2, hidden=hid), cfg.train, CPU)
    return [data[k] for k in range(num_clients)], start, seeds, seq, vec


@pytest.mark.parametrize("hidden", ["[]", "[16]"])
@pytest.mark.parametrize("sets", [(), ("train.momentum=0.9", "train.weight_decay=0.01")])
def test_hinge_vectorised_is_bit_identical_to_sequential(hidden, sets):
    """The hinge loss trains the same model bits in both trainers, for the linear model and an
    MLP; the recorded losses (a mean over the batch, reduced by other kernels under vmap)
    agree to float32 rounding, as they do for the cross-entropy."""
    torch.set_num_threads(1)
    datas, start, seeds, seq, vec = setup_gaussian(*sets, hidden=hidden)
    models, losses = vec.train_many(start, datas, seeds)
    for i, (d, s) in enumerate(zip(datas, seeds, strict=True)):
        m, l = seq.train(start, d, seed=s)
        assert torch.equal(models[i], m), (hidden, sets, i)
        assert np.allclose(losses[i], l, rtol=1e-6, atol=1e-6), (hidden, sets, i)
        assert not torch.equal(models[i], start)


def test_hinge_loss_values_and_linear_step():
    """The hinge loss by hand, and one SGD step of the linear model against its subgradient."""
    logits = torch.tensor([[0.0, 2.0], [1.0, 0.5], [0.0, 0.0], [3.0, -1.0]])
    y = torch.tensor([1, 1, 0, 0])
    # margins (2y-1)(z1-z0): 2, -0.5, 0, 4 -> losses 0, 1.5, 1, 0
    assert float(hinge_loss(logits, y)) == pytest.approx(2.5 / 4)
    with pytest.raises(ValueError, match="binary"):
        hinge_loss(torch.zeros(2, 3), torch.tensor([0, 1]))
    # linear model: z1 - z0 = (w1 - w0)·x + (b1 - b0); one step of lr 0.5 on one batch
    cfg = C.load(
        overrides=['data.dataset="gaussian"', "model.hidden=[]", 'train.loss="hinge"',
                   "train.local_steps=1", "train.batch_size=4", "train.lr=0.5"],
    )  # fmt: skip
    model = build_model("mlp", (2,), 2, hidden=())
    assert sum(p.numel() for p in model.parameters()) == 6  # W [2, 2] and b [2]
    start = torch.tensor([0.1, -0.2, 0.3, 0.4, 0.0, 0.05])  # W row-major, then b
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5], [0.2, -0.3], [2.0, 2.0]])
    yy = torch.tensor([1, 0, 1, 0])
    data = ClientData(x, yy, x, yy)
    new, losses = SequentialTrainer(model, cfg.train, CPU).train(start, data, seed=0)
    W, b = start[:4].view(2, 2).double(), start[4:].double()
    score = x.double() @ (W[1] - W[0]) + (b[1] - b[0])
    sign = 2 * yy.double() - 1
    active = (1 - sign * score) > 0
    assert losses[0] == pytest.approx(float(torch.clamp(1 - sign * score, min=0).mean()))
    g = -(sign * active)[:, None] / 4  # d loss / d score, per sample
    gw = (g * x.double()).sum(0)
    expected_w = torch.stack([W[0] + 0.5 * gw, W[1] - 0.5 * gw])
    expected_b = torch.stack([b[0] + 0.5 * g.sum(), b[1] - 0.5 * g.sum()])
    assert torch.allclose(new.double(), torch.cat([expected_w.reshape(-1), expected_b]), atol=1e-6)


def test_hinge_needs_the_gaussian_dataset():
    with pytest.raises(C.ConfigError, match="gaussian"):
        C.load(overrides=['train.loss="hinge"'])
    with pytest.raises(C.ConfigError, match="train.loss"):
        C.load(overrides=['data.dataset="gaussian"', 'train.loss="squared"'])
    assert C.load(overrides=[]).train.loss == "cross_entropy"


def test_evaluate_and_train_losses_use_the_chosen_loss():
    model = build_model("mlp", (2,), 2, hidden=())
    flat = torch.tensor([0.0, 0.0, 1.0, -1.0, 0.0, 0.5])  # score = x0 - x1 + 0.5
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    y = torch.tensor([1, 1, 0])
    data = ClientData(x, y, x, y)
    # scores 1.5, -0.5, 0.5; margins 1.5, -0.5, -0.5 -> hinge 0, 1.5, 1.5
    _, acc, loss = evaluate(model, flat, data, loss="hinge")
    assert loss == pytest.approx(1.0) and acc == pytest.approx(1 / 3)
    ce = evaluate(model, flat, data)[2]
    logits = torch.tensor([[0.0, 1.5], [0.0, -0.5], [0.0, 0.5]])
    assert ce == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)))
    both = train_losses(model, torch.stack([flat, torch.zeros(6)]), data, loss="hinge")
    assert both.tolist() == pytest.approx([1.0, 1.0])  # the zero model: margin 0 everywhere


@pytest.mark.parametrize(
    "n,b,steps", [(10, 4, 7), (10, 10, 3), (3, 16, 5), (80, 16, 1), (17, 5, 12)]
)
def test_stream_rows_are_the_batch_streams_draws(n, b, steps):
    """The trainers draw a chunk's batches at once (stream_rows); they are the batches a
    BatchStream hands out one at a time: new permutations after n // b batches, the
    remainder skipped, a batch size above n taken as n."""
    stream = BatchStream(n, b, torch.Generator().manual_seed(7))
    expected = np.stack([stream.next().numpy() for _ in range(steps)])
    got = stream_rows(n, b, steps, 7)
    assert got.shape == (steps, min(b, n))
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, stream_rows(n, b, steps, 8)) or n == 1
