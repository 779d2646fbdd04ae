"""The local optimisers (``train.optimizer``): the trainers of many clients update the stacked
parameters as torch.optim's Adam and AdamW do, to the bit, and train what the sequential
reference trains (the MLP to SGD's standard, the vectorised trainer to its bits; the
convolutional models' losses to float32 rounding and their models to 0.5%, since Adam
turns rounding in a near-zero gradient into a step); a client's bits never depend on the
clients beside it; every training starts with a fresh optimiser; the config takes Adam's
keys with Adam only and SGD's momentum with SGD only (one line naming the key); the memory
estimate counts Adam's two moments; CFL-GP's gradient probe stays an SGD step; and a run
file written before the keys existed still matches its stored config."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import torch
from runfile import format3_digest
from test_vectorised import setup
from torch.nn import functional as F

from distfl import config as C
from distfl.cli import main
from distfl.datasets.digits import load_digits_dataset
from distfl.models import build_model, flat_params, load_flat
from distfl.runfile.digest import config_digest
from distfl.runtime.capacity import size_terms
from distfl.train import BatchedTrainer
from distfl.train.optim import StackedOptimiser, state_copies
from distfl.train.sequential import clients_per_chunk, stream_rows

CPU = torch.device("cpu")
ADAM_OPTIONS = [
    ('train.optimizer="adam"', "train.lr=0.01"),
    ('train.optimizer="adam"', "train.lr=0.01", "train.weight_decay=0.05", "train.prox_mu=0.5"),
    ('train.optimizer="adamw"', "train.lr=0.01", "train.weight_decay=0.05"),
    ('train.optimizer="adamw"', "train.lr=0.01", "train.beta1=0.5", "train.beta2=0.9",
     "train.eps=1e-6", "train.weight_decay=0.1", "train.prox_mu=0.1"),
]  # fmt: skip


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
@pytest.mark.parametrize("weight_decay,prox_mu", [(0.0, 0.0), (0.05, 0.0), (0.05, 0.3)])
def test_stacked_update_is_torch_optims_to_the_bit(optimizer, weight_decay, prox_mu):
    """Five steps of two clients' stacked parameters against torch.optim.Adam / AdamW (the
    default, single-tensor path on CPU) on each client's own copy of a small model, fed the
    same gradients (FedProx's term added to them as the sequential trainer adds it)."""
    train = C.TrainSection(
        optimizer=optimizer, lr=0.01, weight_decay=weight_decay, prox_mu=prox_mu,
        beta1=0.8, beta2=0.99, eps=1e-7,
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model("mlp", (12,), 3, hidden=(7,))
    start = [p.detach().clone() for p in model.parameters()]
    copies = [build_model("mlp", (12,), 3, hidden=(7,)) for _ in range(2)]
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    refs = []
    for copy in copies:
        for p, s in zip(copy.parameters(), start, strict=True):
            p.data.copy_(s)
        refs.append(cls(copy.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-7,
                        weight_decay=weight_decay))  # fmt: skip
    stacked = [s.unsqueeze(0).expand(2, *s.shape).clone() for s in start]
    opt = StackedOptimiser(train, start)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        grads = [torch.randn((2, *s.shape), generator=g) * 0.1 for s in start]
        grads[0][:, 0] = 0.0  # a parameter without gradient moves by its decay alone
        for c, (copy, ref) in enumerate(zip(copies, refs, strict=True)):
            for p, s, gr in zip(copy.parameters(), start, grads, strict=True):
                p.grad = gr[c].clone()
                if prox_mu:
                    p.grad.add_(p.detach() - s, alpha=prox_mu)
            ref.step()
        opt.step(stacked, grads)
    for c, copy in enumerate(copies):
        for p, s in zip(copy.parameters(), stacked, strict=True):
            assert torch.equal(p.detach(), s[c])
    assert not torch.equal(stacked[1][0], start[1])  # it moved


def trained(digits, name, sets):
    """(sequential models [n, P] and losses [n, S], then each of the vectorised and batched
    trainers' (name, models, losses)) of six clients, and the start."""
    torch.set_num_threads(1)
    cfg, datas, start, seeds, seq, vec = setup(digits, name, *sets)
    bat = BatchedTrainer(build_model(name, digits.input_shape, 10), cfg.train, CPU)
    expected = [seq.train(start, d, seed=s) for d, s in zip(datas, seeds, strict=True)]
    models = torch.stack([m for m, _ in expected])
    losses = np.stack([l for _, l in expected])
    others = [(type(t).__name__, *t.train_many(start, datas, seeds)) for t in (vec, bat)]
    return start, models, losses, others


@pytest.mark.parametrize("sets", ADAM_OPTIONS)
def test_the_mlp_trains_the_sequential_trainers_models(digits, sets):
    """The losses of the sequential trainer to float32 rounding; the vectorised trainer,
    whose gradients are the sequential's bits for the MLP, gives its very models; the batched
    trainer's updates agree to 1e-4 of their length (measured: 2e-6 on an Intel Xeon without
    AVX-512, where one parameter differed by 3.5e-6, beyond SGD's 1e-6 per parameter: the
    batched trainer reduces a gradient in its own order, and Adam divides by √v + ε, so a
    gradient that float32 rounding leaves near zero moves its parameter by up to lr)."""
    start, models, losses, others = trained(digits, "mlp", sets)
    update = (models - start).norm(dim=1)
    for name, got, got_losses in others:
        assert np.allclose(got_losses, losses, rtol=1e-5, atol=1e-6), (name, sets)
        gap = (got - models).norm(dim=1) / update
        assert float(gap.max()) < 1e-4, (name, sets, gap)
        assert not torch.equal(got[0], start)
    assert torch.equal(others[0][1], models)


@pytest.mark.parametrize("name", ["cnn", "lenet5"])
@pytest.mark.parametrize("sets", ADAM_OPTIONS)
def test_conv_models_train_what_the_sequential_trains(digits, name, sets):
    """The same losses to float32 rounding, and models whose updates agree to 0.5% (measured
    here: at most 0.03%). Not SGD's 1e-6 per parameter: each trainer reduces a convolution's
    gradient in its own order, and Adam divides by √v + ε, so a gradient that float32
    rounding leaves near zero moves its parameter by up to lr in either direction (the
    sequential trainer itself, run on 2 threads instead of 1, moves the CNN's parameters by
    up to 4e-5 with Adam and 1.5e-8 with SGD)."""
    start, models, losses, others = trained(digits, name, sets)
    update = (models - start).norm(dim=1)
    for trainer, got, got_losses in others:
        assert np.allclose(got_losses, losses, rtol=1e-5, atol=1e-5), (trainer, name, sets)
        gap = (got - models).norm(dim=1) / update
        assert float(gap.max()) < 5e-3, (trainer, name, sets, gap)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_a_clients_bits_do_not_depend_on_its_company(digits, name):
    """With Adam as with SGD: other splits into calls, a client alone, the smallest chunks."""
    torch.set_num_threads(1)
    sets = ADAM_OPTIONS[1]
    cfg, datas, start, seeds, _, vec = setup(digits, name, *sets)
    bat = BatchedTrainer(build_model(name, digits.input_shape, 10), cfg.train, CPU)
    tiny = dataclasses.replace(cfg.train, chunk_mb=1)
    small = BatchedTrainer(build_model(name, digits.input_shape, 10), tiny, CPU)
    for trainer in (vec, bat):
        together, lt = trainer.train_many(start, datas, seeds)
        for group in ([0, 1], [5, 0, 3], [3]):
            got, gl = trainer.train_many(start, [datas[i] for i in group],
                                         [seeds[i] for i in group])  # fmt: skip
            for j, i in enumerate(group):
                assert torch.equal(got[j], together[i]), (type(trainer).__name__, group, i)
                assert np.array_equal(gl[j], lt[i])
    pairs, _ = small.train_many(start, datas, seeds)
    assert torch.equal(pairs, bat.train_many(start, datas, seeds)[0])


def adam_by_hand(model, start, data, seeds, *, lr: float, steps: int, batch: int, keep: bool):
    """Trainings of ``steps`` steps of torch.optim.Adam, one per seed, each from where the
    one before ended: a new Adam for each (``keep`` False) or one kept over all."""
    load_flat(model, start.clone())
    opt = None
    for seed in seeds:
        if opt is None or not keep:
            opt = torch.optim.Adam(model.parameters(), lr=lr)
        for idx in stream_rows(data.num_train, batch, steps, seed):
            opt.zero_grad()
            idx = torch.from_numpy(idx)
            F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
            opt.step()
    return flat_params(model)


def test_every_training_starts_with_a_fresh_optimiser(digits):
    """A client trained in two rounds, one after the other, is trained by two fresh Adams
    (zero moments, step 1 again), not by one Adam kept between its rounds."""
    torch.set_num_threads(1)
    cfg, datas, start, seeds, seq, vec = setup(digits, "mlp", 'train.optimizer="adam"',
                                               "train.lr=0.01")  # fmt: skip
    first, _ = seq.train(start, datas[0], seed=seeds[0])
    second, _ = seq.train(first, datas[0], seed=seeds[1])
    model = build_model("mlp", digits.input_shape, 10)
    args = dict(lr=0.01, steps=cfg.train.local_steps, batch=cfg.train.batch_size)
    assert torch.equal(second, adam_by_hand(model, start, datas[0], seeds[:2], keep=False, **args))
    kept = adam_by_hand(model, start, datas[0], seeds[:2], keep=True, **args)
    assert not torch.allclose(kept, second, rtol=1e-4, atol=1e-5)
    # the vectorised trainer too: its second call is the sequential's second training
    once, _ = vec.train_many(start, datas[:1], seeds[:1])
    again, _ = vec.train_many(once[0], datas[:1], seeds[1:2])
    assert torch.allclose(again[0], second, rtol=1e-5, atol=1e-6)


def test_sgd_is_the_default_and_adams_keys_default_to_the_papers():
    t = C.load().train
    assert (t.optimizer, t.beta1, t.beta2, t.eps) == ("sgd", 0.9, 0.999, 1e-8)
    adam = C.load(overrides=['train.optimizer="adamw"', "train.beta2=0.95"]).train
    assert (adam.optimizer, adam.beta1, adam.beta2, adam.weight_decay) == ("adamw", 0.9, 0.95, 0)


@pytest.mark.parametrize(
    "sets,key,needle",
    [
        (
            ['train.optimizer="adam"', "train.momentum=0.9"],
            "train.momentum",
            "has no effect with train.optimizer = 'adam'",
        ),
        (
            ['train.optimizer="adamw"', "train.momentum=0.5"],
            "train.momentum",
            "takes effect only with train.optimizer = 'sgd'",
        ),
        (["train.beta1=0.8"], "train.beta1", "has no effect with train.optimizer = 'sgd'"),
        (["train.eps=1e-6"], "train.eps", "only with train.optimizer = 'adam' or 'adamw'"),
        (['train.optimizer="adam"', "train.beta1=1.0"], "train.beta1", "[0, 1)"),
        (['train.optimizer="adam"', "train.beta2=-0.1"], "train.beta2", "[0, 1)"),
        (['train.optimizer="adam"', "train.eps=0"], "train.eps", "positive"),
        (['train.optimizer="adagrad"'], "train.optimizer", "sgd, adam, adamw"),
    ],
)
def test_a_contradictory_optimiser_config_is_one_line(capsys, tmp_path, monkeypatch, sets,
                                                      key, needle):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--preset", "digits"]
    for item in sets:
        argv += ["--set", item]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith("distfl: error: "), err
    assert key in err and needle in err, err
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_the_memory_estimate_counts_adams_two_moments():
    sgd, adam = C.load().train, C.load(overrides=['train.optimizer="adam"']).train
    assert (state_copies(sgd), state_copies(adam)) == (4, 5)
    P, B, F = 100_000, 16, 64
    assert clients_per_chunk(P, B, F, 64) == clients_per_chunk(P, B, F, 64, copies=4)
    assert clients_per_chunk(P, B, F, 64, copies=5) < clients_per_chunk(P, B, F, 64)
    over = ["server.clients_per_round=2", "train.chunk_mb=1024"]
    plain = size_terms(C.load(overrides=over))["trainer"][0]
    moments = size_terms(C.load(overrides=[*over, 'train.optimizer="adam"']))["trainer"][0]
    model = build_model("mlp", (64,), 10, hidden=(64,))
    P = sum(p.numel() for p in model.parameters())
    assert moments - plain == 2 * 4 * P  # one more float32 copy for each of 2 clients


def test_a_file_from_before_the_keys_keeps_its_config_digest():
    """The digest a run file of format 3 holds was taken before train.optimizer, beta1,
    beta2 and eps existed (and before run.data_seed, init_seed and sampling_seed, left out
    of it too): an SGD config (the keys at their defaults) keeps that digest, so such a file
    still matches its stored config; Adam's keys enter it."""
    config = C.load(preset="digits")
    assert config_digest(config) == format3_digest(config)
    adam = C.load(preset="digits", overrides=['train.optimizer="adam"'])
    beta = C.load(preset="digits", overrides=['train.optimizer="adam"', "train.beta1=0.8"])
    assert len({config_digest(config), config_digest(adam), config_digest(beta)}) == 3


def test_cflgps_gradient_probe_takes_an_sgd_step_whatever_the_optimiser(digits):
    """CFL-GP reads a client's gradient off one local step, (start − after) / lr: with
    train.optimizer = "adam" it still takes SGD's step (Adam's first step is lr times the
    gradient's sign), so its rows are those of an SGD run."""
    from distfl.algorithms.cflgp.client import CFLGPClient

    rows = {}
    for optimizer in ("sgd", "adam"):
        cfg, datas, start, _, _, _ = setup(digits, "mlp", f'train.optimizer="{optimizer}"',
                                           "train.weight_decay=0.01")  # fmt: skip
        context = types.SimpleNamespace(
            config=cfg, device=CPU, model=build_model("mlp", digits.input_shape, 10),
            data=lambda k, datas=datas: datas[k], stopping=lambda: False,
        )  # fmt: skip
        half = CFLGPClient(cfg.algorithm.params, context)
        rows[optimizer] = half.run("gradient", 2, start.unsqueeze(0), (3, 0))
    np.testing.assert_array_equal(rows["adam"], rows["sgd"])
    # a gradient, not a sign: its entries are not all ±1 (nor 0)
    assert not np.all(np.isin(np.abs(rows["adam"]).round(6), (0.0, 1.0)))
