"""``train.batches = "counter"``: the hash is lowbias32, exact in int64 (checked against
Python's unbounded integers), a bijection; a client's batches are, pass by pass, a
permutation of its samples cut into n // b batches (checked against a one-client
reference written from the definition with plain Python integers and ``sorted``); they do
not depend on the other clients of the chunk nor on how a chunk is sliced; the three
trainers train on them to the same models; and they are not ``stream``'s."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_vectorised import setup

from distfl.datasets.digits import load_digits_dataset
from distfl.models import build_model
from distfl.train import BatchedTrainer
from distfl.train import counter as counter_module
from distfl.train.counter import A, B, counter_rows, mix, mix_int, mul32

CPU = torch.device("cpu")


def test_mul32_is_the_product_mod_2_to_the_32():
    rng = np.random.default_rng(0)
    xs = [0, 1, 0xFFFFFFFF, *rng.integers(0, 2**32, size=200).tolist()]
    for c in (0x7FEB352D, 0x846CA68B, 0xFFFFFFFF, 1):
        got = mul32(torch.tensor(xs, dtype=torch.int64), c).tolist()
        assert got == [(x * c) % 2**32 for x in xs]


def test_mix_is_lowbias32_and_a_bijection():
    assert mix_int(0) == 0  # every step of lowbias32 keeps 0
    xs = torch.arange(0, 1 << 20, dtype=torch.int64) * 4093 % (1 << 32)
    got = mix(xs)
    assert got.tolist()[:50] == [mix_int(int(x)) for x in xs[:50]]
    assert len(set(got.tolist())) == len(xs)  # no two inputs share a key
    assert int(got.min()) >= 0 and int(got.max()) < 1 << 32


def reference_rows(n: int, seed: int, batch_size: int, steps: int) -> list[list[int]]:
    """One client's batches from the module's definition, with Python integers."""
    b = min(batch_size, n)
    client = mix_int((seed >> 32) ^ mix_int((seed & 0xFFFFFFFF) ^ A))
    out: list[list[int]] = []
    p = 0
    while len(out) < steps:
        k = mix_int(client ^ mix_int((p + B) & 0xFFFFFFFF))
        order = sorted(range(n), key=lambda i: mix_int(k ^ mix_int(i + 1)))
        out += [order[q * b : (q + 1) * b] for q in range(n // b)]
        p += 1
    return out[:steps]


NUMS = [10, 37, 5, 16, 64, 3]
SEEDS = [0, 1, 2**40 + 3, 7, 2**62 + 11, 123456789]


def test_the_rows_are_the_definitions_and_each_pass_a_permutation():
    rows, b = counter_rows(torch.tensor(NUMS), torch.tensor(SEEDS), 16, 11)
    assert rows.shape == (11, len(NUMS), 16) and b.tolist() == [min(16, n) for n in NUMS]
    for c, (n, seed) in enumerate(zip(NUMS, SEEDS, strict=True)):
        bc = min(16, n)
        mine = rows[:, c, :bc].tolist()
        assert mine == reference_rows(n, seed, 16, 11), c
        assert (rows[:, c, bc:] == 0).all()  # padding
        per_pass = n // bc
        for p in range(0, 11, per_pass):
            drawn = [i for row in mine[p : p + per_pass] for i in row]
            assert len(set(drawn)) == len(drawn) and all(0 <= i < n for i in drawn)


def test_a_clients_rows_do_not_depend_on_the_chunk_nor_its_slices(monkeypatch):
    together, _ = counter_rows(torch.tensor(NUMS), torch.tensor(SEEDS), 8, 9)
    for c in range(len(NUMS)):
        alone, _ = counter_rows(torch.tensor(NUMS[c : c + 1]), torch.tensor(SEEDS[c : c + 1]),
                                8, 9)  # fmt: skip
        width = alone.shape[2]
        assert torch.equal(alone[:, 0], together[:, c, :width])
    monkeypatch.setattr(counter_module, "SLICE_KEYS", 64)  # a slice of one or two clients
    sliced, _ = counter_rows(torch.tensor(NUMS), torch.tensor(SEEDS), 8, 9)
    assert torch.equal(sliced, together)


def test_seeds_and_passes_give_other_batches():
    rows, _ = counter_rows(torch.tensor([64, 64]), torch.tensor([5, 6]), 16, 8)
    assert not torch.equal(rows[:, 0], rows[:, 1])
    passes = rows[:, 0].reshape(2, 4, 16)
    assert not torch.equal(passes[0], passes[1])


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_the_trainers_train_alike_on_counter_batches(digits, name):
    """Sequential, vectorised and batched on ``counter`` batches: the same models to float32
    rounding, and not the models of ``stream`` batches."""
    torch.set_num_threads(1)
    cfg, datas, start, seeds, seq, vec = setup(digits, name, 'train.batches="counter"')
    stream_cfg, *_, stream_seq, _ = setup(digits, name)
    assert cfg.train.batches == "counter" and stream_cfg.train.batches == "stream"
    batched = BatchedTrainer(build_model(name, digits.input_shape, 10), cfg.train, CPU)
    vm, vl = vec.train_many(start, datas, seeds)
    bm, bl = batched.train_many(start, datas, seeds)
    for i, (d, s) in enumerate(zip(datas, seeds, strict=True)):
        m, losses = seq.train(start, d, seed=s)
        for other, other_losses in ((vm[i], vl[i]), (bm[i], bl[i])):
            assert torch.allclose(other, m, rtol=1e-5, atol=1e-6), (name, i)
            assert np.allclose(other_losses, losses, rtol=1e-5, atol=1e-6), (name, i)
        assert not torch.allclose(stream_seq.train(start, d, seed=s)[0], m, atol=1e-4)


def test_batch_rows_of_either_kind_have_the_same_shape(digits):
    from distfl.train.sequential import batch_rows

    cfg, datas, *_ = setup(digits, "mlp", "train.batch_size=32")
    nums, seeds = [d.num_train for d in datas], list(range(len(datas)))
    a, ba = batch_rows(cfg.train, nums, seeds, CPU)
    counter = dataclasses.replace(cfg.train, batches="counter")
    b, bb = batch_rows(counter, nums, seeds, CPU)
    assert a.shape == b.shape and ba == bb == [min(32, n) for n in nums]
    assert a.dtype == b.dtype == torch.int64
