"""The step protocol's plan encoding, per-client seeds and the sequential trainer."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from distfl.config import TrainSection
from distfl.data import ClientData
from distfl.exact import NUM_LIMBS, SumLayout
from distfl.models import build_model, flat_params, load_flat
from distfl.runtime.protocol import (
    EVAL,
    EVAL_WIDTH,
    HEADER,
    PROBE,
    RETURN_MODEL,
    STEP,
    STOP,
    TASK_WIDTH,
    TRAIN,
    Plan,
    ProbeShape,
    empty_output,
)
from distfl.train import SequentialTrainer, client_seed, evaluate
from distfl.train.sequential import BatchStream

CPU = torch.device("cpu")

# --------------------------------------------------------------------------- Plan


def make_plan() -> Plan:
    return Plan(
        kind=STEP,
        round=7,
        num_models=2,
        clients=np.array([0, 2, 3, 4], dtype=np.int64),
        model=np.array([0, 1, 0, 1], dtype=np.int64),
        tasks=np.array([TRAIN | EVAL, TRAIN, RETURN_MODEL | EVAL, EVAL], dtype=np.int64),
        worker=np.array([1, 0, 0, 1], dtype=np.int64),
        probe_op=2,
        probe=ProbeShape(6, (3, 9)),
    )


def test_plan_encode_layout():
    plan = make_plan()
    head, tasks = plan.encode_header(), plan.encode_tasks()
    assert head.dtype == tasks.dtype == torch.int64
    assert head.shape == (HEADER,) and tasks.shape == (4, TASK_WIDTH)
    # kind, round, models, probe op, tasks, state width; the probe's width, argument
    # count, arguments
    assert head.tolist() == [STEP, 7, 2, 2, 4, 0, 6, 2, 3, 9] + [0] * 6
    one = int(np.array(1.0).view(np.int64))  # the weight column: γ = 1.0's float64 bits
    assert one == 0x3FF0000000000000
    assert tasks.tolist() == [
        [0, 0, 3, 1, one], [2, 1, 1, 0, one], [3, 0, 6, 0, one], [4, 1, 2, 1, one]
    ]  # fmt: skip


def test_soft_plan_round_trip_weights_state_and_slots():
    """A client that trains two models has two rows; the weights travel as their exact
    float64 bits and the state rows beside them; a plan of weights 1 keeps G = 0."""
    weight = np.array([0.1, 0.9, 1.0, 1.0 / 3.0])
    state = np.array([[0.25, 0.75], [0.25, 0.75], [1.0, 0.0], [np.pi, -0.0]])
    plan = Plan(
        STEP, 3, 2, np.array([5, 5, 6, 8]), np.array([0, 1, 1, 0]),
        np.array([TRAIN | PROBE, TRAIN, TRAIN, TRAIN]), np.array([0, 0, 1, 1]),
        weight=weight, state=state,
    )  # fmt: skip
    head = plan.encode_header()
    assert int(head[5]) == 2  # the state's width
    back = Plan.decode(head, plan.encode_tasks(), torch.from_numpy(state))
    assert back.weight.tobytes() == weight.tobytes()
    assert back.state.tobytes() == state.tobytes()
    assert back.slots().tolist() == [0, 1, 0, 0]
    assert plan.weight_bits() == 20 and make_plan().weight_bits() == 0
    # without a state broadcast the decoded plan has zero rows of the header's width
    assert Plan.decode(head, plan.encode_tasks()).state.shape == (4, 2)


def test_plan_round_trip():
    plan = make_plan()
    back = Plan.decode(plan.encode_header(), plan.encode_tasks())
    assert (back.kind, back.round, back.num_models, back.probe_op) == (STEP, 7, 2, 2)
    assert (back.probe.width, back.probe.args) == (6, (3, 9))
    for name in ("clients", "model", "tasks", "worker"):
        assert getattr(back, name).tolist() == getattr(plan, name).tolist(), name
        assert getattr(back, name).dtype == np.int64
    assert back.of_worker(0).tolist() == [1, 2] and back.of_worker(1).tolist() == [0, 3]


def test_plan_decode_copies():
    plan = make_plan()
    head, tasks = plan.encode_header(), plan.encode_tasks()
    back = Plan.decode(head, tasks)
    tasks.fill_(0)  # a reused receive buffer must not change a decoded plan
    assert back.clients.tolist() == [0, 2, 3, 4]


def test_plan_round_trip_large_values():
    one = np.array([123_456_789_012], dtype=np.int64)
    plan = Plan(STEP, 2**40, 1, one, np.zeros(1, np.int64), np.ones(1, np.int64), one * 0)
    back = Plan.decode(plan.encode_header(), plan.encode_tasks())
    assert back.round == 2**40 and back.clients.tolist() == [123_456_789_012]


def test_plan_is_as_long_as_its_tasks_not_the_population():
    # a step of 3 tasks among a population of a million: the header and 3 rows
    clients = np.array([5, 70_000, 999_999], dtype=np.int64)
    z = np.zeros(3, dtype=np.int64)
    plan = Plan(STEP, 1, 1, clients, z, z + TRAIN, z)
    assert plan.encode_tasks().numel() == 3 * TASK_WIDTH


def test_plan_any_and_stop():
    plan = make_plan()
    assert plan.any(TRAIN) and plan.any(EVAL) and plan.any(RETURN_MODEL)
    one = np.array([0], dtype=np.int64)
    only_eval = Plan(STEP, 1, 1, one, one, one * 0 + EVAL, one)
    assert not only_eval.any(TRAIN) and only_eval.any(EVAL) and not only_eval.any(RETURN_MODEL)
    stop = Plan.stop()
    assert stop.kind == STOP and stop.num_tasks == 0
    assert not stop.any(TRAIN | EVAL | RETURN_MODEL)
    back = Plan.decode(stop.encode_header(), None)
    assert back.kind == STOP and back.num_tasks == 0


def test_empty_output_shapes():
    limbs = SumLayout("limbs", (6, 4))
    out = empty_output(make_plan(), num_steps=3, layout=limbs, device=CPU)
    assert out.loss_rows.shape == (0, 4)
    assert out.sums.shape == (2, NUM_LIMBS * 10 + 1)
    assert out.sums.dtype == torch.int64 and int(out.sums.abs().sum()) == 0
    assert out.bounds is None and out.finish_sums is None
    assert out.eval_rows.shape == (0, EVAL_WIDTH)
    assert out.model_rows.shape == (0, 10)
    one = np.array([0], dtype=np.int64)
    no_train = Plan(STEP, 1, 1, one, one, one * 0 + EVAL, one)
    assert empty_output(no_train, num_steps=3, layout=limbs, device=CPU).sums is None


def test_empty_output_scaled_joins_with_zero_bounds_and_sums():
    out = empty_output(make_plan(), num_steps=3, layout=SumLayout("scaled", (6, 4)), device=CPU)
    assert out.sums is None
    assert out.bounds.shape == (2, 2) and out.bounds.dtype == torch.float64
    assert int(out.bounds.abs().sum()) == 0
    sums = out.finish_sums(torch.zeros((2, 2), dtype=torch.int64))
    assert sums.shape == (2, 10 + 1) and sums.dtype == torch.int64
    assert int(sums.abs().sum()) == 0


def test_terms_per_model_counts_the_training_tasks_only():
    clients = np.array([1, 2, 3, 4, 5], dtype=np.int64)
    model = np.array([0, 2, 2, 0, 2], dtype=np.int64)
    tasks = np.array([TRAIN, TRAIN | EVAL, EVAL, TRAIN | RETURN_MODEL, TRAIN], dtype=np.int64)
    plan = Plan(STEP, 0, 3, clients, model, tasks, np.zeros(5, dtype=np.int64))
    assert plan.terms_per_model().tolist() == [2, 0, 2]


def test_rows_per_rank_follows_the_placement():
    clients = np.arange(6, dtype=np.int64)
    tasks = np.array(
        [TRAIN, TRAIN | RETURN_MODEL, EVAL, TRAIN | EVAL, TRAIN | RETURN_MODEL, RETURN_MODEL],
        dtype=np.int64,
    )
    worker = np.array([0, 1, 1, 0, 1, 1], dtype=np.int64)
    plan = Plan(STEP, 0, 1, clients, np.zeros(6, dtype=np.int64), tasks, worker)
    # rank 0 (the server) answers nothing above W = 1; worker w is rank w + 1
    assert plan.rows_per_rank(TRAIN, 3) == [0, 2, 2]
    assert plan.rows_per_rank(EVAL, 3) == [0, 1, 1]
    assert plan.rows_per_rank(TRAIN | RETURN_MODEL, 3) == [0, 0, 2]  # both bits
    assert plan.rows_per_rank(TRAIN, 1) == [4]
    assert plan.rows_per_rank(PROBE, 4) == [0, 0, 0, 0]


# --------------------------------------------------------------------------- client_seed


def test_client_seed_distinct_and_stable():
    seeds = {}
    for key in itertools.product(range(3), range(4), range(5)):
        s = client_seed(*key)
        assert isinstance(s, int)
        assert 0 <= s < 2**63
        assert client_seed(*key) == s  # stable
        seeds[key] = s
    # every (seed, round, client) gets its own value; permutations of the triple too
    assert len(set(seeds.values())) == len(seeds)
    assert client_seed(0, 1, 2) != client_seed(0, 2, 1) != client_seed(1, 0, 2)


def test_client_seed_large_inputs():
    s = client_seed(2**63 - 1, 10_000, 123_456)
    assert 0 <= s < 2**63
    assert s != client_seed(2**63 - 2, 10_000, 123_456)


# --------------------------------------------------------------------------- BatchStream


def take(stream: BatchStream, n: int) -> list[list[int]]:
    return [stream.next().tolist() for _ in range(n)]


def test_batch_stream_divisible_covers_every_index_once_per_pass():
    stream = BatchStream(12, 4, torch.Generator().manual_seed(0))
    batches = take(stream, 9)  # three passes of three batches
    assert all(len(b) == 4 for b in batches)
    for p in range(3):
        chunk = sum(batches[3 * p : 3 * p + 3], [])
        assert sorted(chunk) == list(range(12))
    # passes are reshuffled
    assert sum(batches[0:3], []) != sum(batches[3:6], [])


def test_batch_stream_remainder_is_dropped():
    # 10 samples, batches of 4: two batches per pass (8 distinct indices), then reshuffle
    stream = BatchStream(10, 4, torch.Generator().manual_seed(1))
    batches = take(stream, 6)
    for p in range(3):
        chunk = batches[2 * p] + batches[2 * p + 1]
        assert len(set(chunk)) == 8
        assert all(0 <= i < 10 for i in chunk)


def test_batch_stream_batch_larger_than_data():
    stream = BatchStream(5, 16, torch.Generator().manual_seed(2))
    for b in take(stream, 4):
        assert len(b) == 5
        assert sorted(b) == list(range(5))


def test_batch_stream_order_is_randperm_of_the_generator():
    # the batches are consecutive slices of torch.randperm drawn from the generator
    stream = BatchStream(6, 3, torch.Generator().manual_seed(5))
    ref = torch.Generator().manual_seed(5)
    p1 = torch.randperm(6, generator=ref).tolist()
    p2 = torch.randperm(6, generator=ref).tolist()
    assert take(stream, 4) == [p1[:3], p1[3:], p2[:3], p2[3:]]


def test_batch_stream_same_seed_same_batches():
    a = take(BatchStream(20, 3, torch.Generator().manual_seed(9)), 10)
    b = take(BatchStream(20, 3, torch.Generator().manual_seed(9)), 10)
    c = take(BatchStream(20, 3, torch.Generator().manual_seed(10)), 10)
    assert a == b
    assert a != c


# --------------------------------------------------------------------------- SequentialTrainer

NUM_CLASSES = 3


def tiny_data(n_train: int = 20, n_test: int = 8, seed: int = 0) -> ClientData:
    g = torch.Generator().manual_seed(seed)
    return ClientData(
        x_train=torch.rand(n_train, 1, 8, 8, generator=g),
        y_train=torch.randint(0, NUM_CLASSES, (n_train,), generator=g),
        x_test=torch.rand(n_test, 1, 8, 8, generator=g),
        y_test=torch.randint(0, NUM_CLASSES, (n_test,), generator=g),
    )


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return build_model("mlp", (1, 8, 8), NUM_CLASSES, hidden=(8,))


def trainer(**kw) -> SequentialTrainer:
    cfg = TrainSection(**{"local_steps": 5, "batch_size": 4, "lr": 0.1, **kw})
    return SequentialTrainer(tiny_model(), cfg, CPU)


def reference_batches(n: int, b: int, seed: int, steps: int) -> list[torch.Tensor]:
    """Independent re-statement of the batch order: slices of successive randperms."""
    g = torch.Generator().manual_seed(seed)
    b = min(b, n)
    out: list[torch.Tensor] = []
    while len(out) < steps:
        perm = torch.randperm(n, generator=g)
        out += [perm[i : i + b] for i in range(0, n - b + 1, b)]
    return out[:steps]


def test_train_returns_s_losses_and_a_new_model():
    t = trainer()
    data = tiny_data()
    start = flat_params(tiny_model())
    start_copy = start.clone()
    new, losses = t.train(start, data, seed=123)
    assert losses.shape == (5,) and losses.dtype == np.float64
    assert np.all(np.isfinite(losses)) and np.all(losses > 0)
    assert new.shape == start.shape and new.dtype == torch.float32
    assert not torch.equal(new, start)
    assert torch.equal(start, start_copy)  # the start buffer is not modified


def test_train_same_seed_bit_identical_different_seed_differs():
    t = trainer()
    data = tiny_data()
    start = flat_params(tiny_model())
    a, la = t.train(start, data, seed=7)
    b, lb = t.train(start, data, seed=7)
    assert torch.equal(a, b)
    assert la.tobytes() == lb.tobytes()
    # a fresh trainer (another worker) gives the same bits too
    c, lc = trainer().train(start, data, seed=7)
    assert torch.equal(a, c) and la.tobytes() == lc.tobytes()
    d, ld = t.train(start, data, seed=8)
    assert not torch.equal(a, d)
    assert not np.array_equal(la, ld)


def test_train_takes_exactly_local_steps_optimizer_steps(monkeypatch):
    calls = []
    original = torch.optim.SGD.step

    def counting_step(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", counting_step)
    for steps in (1, 3, 7):
        calls.clear()
        _, losses = trainer(local_steps=steps).train(flat_params(tiny_model()), tiny_data(), seed=1)
        assert len(calls) == steps
        assert len(losses) == steps


def test_lr_zero_leaves_model_unchanged_and_records_losses():
    t = trainer(lr=0.0, local_steps=6, batch_size=4)
    data = tiny_data()
    start = flat_params(tiny_model())
    new, losses = t.train(start, data, seed=5)
    assert torch.equal(new, start)
    # each loss is the loss of the (unchanged) start model on that step's batch
    ref = tiny_model()
    load_flat(ref, start)
    with torch.no_grad():
        expected = [
            float(nn.functional.cross_entropy(ref(data.x_train[idx]), data.y_train[idx]))
            for idx in reference_batches(20, 4, 5, 6)
        ]
    assert losses.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)
    # different batches give different losses: the batches do change between steps
    assert len(set(losses.tolist())) > 1


def test_train_matches_hand_written_sgd():
    lr, steps, bs, seed = 0.2, 4, 6, 11
    data = tiny_data(n_train=14)
    start = flat_params(tiny_model())
    new, losses = trainer(lr=lr, local_steps=steps, batch_size=bs).train(start, data, seed=seed)

    ref = tiny_model()
    load_flat(ref, start)
    ref_losses = []
    for idx in reference_batches(14, bs, seed, steps):
        ref.zero_grad()
        loss = nn.functional.cross_entropy(ref(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        with torch.no_grad():
            for p in ref.parameters():
                p -= lr * p.grad
        ref_losses.append(float(loss.detach()))
    assert losses.tolist() == pytest.approx(ref_losses, rel=1e-5)
    assert torch.allclose(new, flat_params(ref), rtol=0, atol=1e-6)


def test_evaluate_hand_checked():
    data = tiny_data()
    model = tiny_model()
    flat = flat_params(model)
    bal, acc, loss = evaluate(model, flat, data)
    with torch.no_grad():
        logits = model(data.x_test)
    pred = logits.argmax(dim=1).numpy()
    y = data.y_test.numpy()
    assert acc == pytest.approx(float((pred == y).mean()))
    recalls = [float((pred[y == c] == c).mean()) for c in np.unique(y)]
    assert bal == pytest.approx(sum(recalls) / len(recalls))
    assert loss == pytest.approx(float(nn.functional.cross_entropy(logits, data.y_test)))
