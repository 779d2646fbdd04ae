"""FedSoft's importance weights and mix by hand, its proximal pull against a hand-computed
SGD step and across the three trainers, its client half's start and pull, its plan and
state, and the memory check's count of its personal models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_batched import batched
from test_vectorised import setup

from distfl.algorithms.fedsoft import (
    FedSoft,
    importance_weights,
    mix_of,
    split_row,
    state_row,
)
from distfl.datasets.digits import load_digits_dataset
from distfl.models import build_model, load_flat


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def test_importance_weights_by_hand():
    # 3 clusters, 4 samples: sample 0 and 2 least under cluster 1, sample 1 under 0, sample
    # 3 ties 0 and 2 (the first wins); cluster 2 is picked by none: σ
    losses = np.array([[2.0, 0.5, 3.0, 1.0], [1.0, 0.9, 0.1, 4.0], [5.0, 5.0, 5.0, 1.0]])
    u = importance_weights(losses, 1e-4)
    assert u.tolist() == [2 / 4, 2 / 4, 1e-4]  # not renormalised, as the code
    # a NaN loss counts as +∞; no samples: uniform
    nan = np.array([[np.nan, 1.0], [0.5, np.nan]])
    assert importance_weights(nan, 0.01).tolist() == [0.5, 0.5]
    assert importance_weights(np.zeros((4, 0)), 0.01).tolist() == [0.25] * 4


def test_a_diverged_model_takes_no_sample_where_the_codes_argmin_gives_it_every_one():
    """The deviation docs/algorithms.md names: a model whose loss is NaN on every sample
    (diverged) gets σ here; an argmin over the raw losses, the code's (torch's argmin
    returns a NaN's index as numpy's does), would give it all 3 samples."""
    import torch

    losses = np.array([[0.2, 0.4, 0.3], [np.nan, np.nan, np.nan]])
    assert importance_weights(losses, 1e-4).tolist() == [1.0, 1e-4]
    assert torch.argmin(torch.tensor(losses), dim=0).tolist() == [1, 1, 1]
    assert np.argmin(losses, axis=0).tolist() == [1, 1, 1]
    every = np.full((2, 3), np.nan)  # every model NaN: the first takes them
    assert importance_weights(every, 1e-4).tolist() == [1.0, 1e-4]


def test_mix_and_state_rows_by_hand():
    models = np.array([[1.0, 2.0], [3.0, 6.0]])
    assert mix_of(models, np.array([0.75, 0.25])).tolist() == [1.5, 3.0]
    assert mix_of(models, np.array([0.3, 0.1])).tolist() == pytest.approx([1.5, 3.0])
    row = state_row(np.array([0.6, 0.4]), np.array([7.0, 8.0, 9.0], dtype=np.float32), 3)
    assert row.tolist() == [1.0, 0.6, 0.4, 7.0, 8.0, 9.0]
    has, u, w = split_row(row, 2)
    assert has and u.tolist() == [0.6, 0.4] and w.tolist() == [7.0, 8.0, 9.0]
    has, _, w = split_row(state_row(np.array([1.0, 1e-4]), None, 3), 2)
    assert not has and w.tolist() == [0.0, 0.0, 0.0]


def test_the_pull_is_one_sgd_step_by_hand(digits):
    """One plain SGD step from w with the pull toward a: w − lr (∇ℓ(w) + μ (w − a)), ∇ℓ by
    autograd on the step's batch."""
    from distfl.train import SequentialTrainer
    from distfl.train.sequential import BatchStream

    torch.set_num_threads(1)
    cfg, datas, start, seeds, _, _ = setup(digits, "mlp", "train.local_steps=1", "train.lr=0.1")
    model = build_model("mlp", digits.input_shape, 10)
    torch.manual_seed(7)
    anchor = start + 0.3 * torch.randn_like(start)
    mu = 2.5
    seq = SequentialTrainer(model, cfg.train, torch.device("cpu"))
    got, _ = seq.train(start, datas[0], seed=seeds[0], pull=(anchor, mu))
    # by hand
    ref = build_model("mlp", digits.input_shape, 10)
    load_flat(ref, start)
    idx = BatchStream(datas[0].num_train, cfg.train.batch_size,
                      torch.Generator().manual_seed(seeds[0])).next()  # fmt: skip
    loss = torch.nn.functional.cross_entropy(ref(datas[0].x_train[idx]), datas[0].y_train[idx])
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    g = torch.cat([x.reshape(-1) for x in grads])
    expected = start - 0.1 * (g + mu * (start - anchor))
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-7)
    plain, _ = seq.train(start, datas[0], seed=seeds[0])
    assert not torch.allclose(plain, got, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_trainers_agree_with_the_pull(digits, name, optimizer):
    from distfl.train import SequentialTrainer, VectorisedTrainer

    torch.set_num_threads(1)
    sets = ("train.momentum=0.9", "train.lr=0.05") if optimizer == "sgd" else (
        'train.optimizer="adam"', "train.lr=0.01")  # fmt: skip
    cfg, datas, start, seeds, _, _ = setup(digits, name, *sets)
    torch.manual_seed(3)
    pull = (start + 0.1 * torch.randn_like(start), 1.0)
    seq = SequentialTrainer(build_model(name, digits.input_shape, 10), cfg.train,
                            torch.device("cpu"))  # fmt: skip
    vec = VectorisedTrainer(build_model(name, digits.input_shape, 10), cfg.train,
                            torch.device("cpu"))  # fmt: skip
    v_models, _ = vec.train_many(start, datas[:1], seeds[:1], pull=pull)
    b_models, _ = batched(digits, name, cfg).train_many(start, datas[:1], seeds[:1], pull=pull)
    plain, _ = batched(digits, name, cfg).train_many(start, datas[:1], seeds[:1])
    m, _ = seq.train(start, datas[0], seed=seeds[0], pull=pull)
    assert torch.isfinite(m).all()
    assert torch.allclose(v_models[0], m, rtol=1e-5, atol=1e-6), name
    assert torch.allclose(b_models[0], m, rtol=1e-5, atol=1e-6), name
    assert not torch.allclose(plain[0], m, rtol=1e-4, atol=1e-5)


class _Context:
    """What a worker offers a client half, for one client of the digits."""

    def __init__(self, digits, data):
        from distfl import config as C

        self.config = C.load(preset="digits")
        self.device = torch.device("cpu")
        self.model = build_model("mlp", digits.input_shape, 10)
        self._data = data

    def data(self, client):
        return self._data

    def stopping(self):
        return False


def test_the_client_half_starts_from_the_personal_model_and_pulls_to_the_mix(digits):
    from distfl.algorithms.fedsoft.algorithm import FedSoftParams
    from distfl.algorithms.fedsoft.client import FedSoftClient
    from distfl.train.sequential import sample_losses

    _, datas, start, _, _, _ = setup(digits, "mlp")
    torch.manual_seed(4)
    models = torch.stack([start, start + 0.2 * torch.randn_like(start)])
    half = FedSoftClient(FedSoftParams(num_clusters=2, lam=0.1, sigma=1e-4),
                         _Context(digits, datas[0]))  # fmt: skip
    u = half.run("importance", 0, models, ())
    losses = sample_losses(half.context.model, models, datas[0]).numpy()
    assert u.tolist() == importance_weights(losses, 1e-4).tolist()
    # before its first training: it starts from its mix and is pulled to it
    first = half.prepare("start", 0, models, state_row(u, None, start.numel()))
    mix = (u[0] * models[0].double() + u[1] * models[1].double()) / u.sum()
    assert np.allclose(first.start, mix.numpy(), rtol=0, atol=1e-6)
    assert np.array_equal(first.start, first.pull) and first.pull_mu == pytest.approx(0.1 * u.sum())
    # after: from its personal model, still pulled to its mix
    personal = (start + 1.0).numpy()
    later = half.prepare("start", 0, models, state_row(u, personal, start.numel()))
    assert np.array_equal(later.start, personal) and np.array_equal(later.pull, first.pull)
    # EMD-CFL's port: every training starts from the mix
    port = FedSoftClient(FedSoftParams(num_clusters=2, lam=0.0, start="mix"), half.context)
    again = port.prepare("start", 0, models, state_row(u, personal, start.numel()))
    assert np.array_equal(again.start, first.start) and again.pull_mu == 0.0
    # its evaluation is the personal model's
    scores = half.evaluate("personal", 0, models, state_row(u, personal, start.numel()))
    from distfl.train.sequential import evaluate

    assert scores == evaluate(half.context.model, torch.from_numpy(personal), datas[0])


def test_fedsoft_plans_one_training_entering_every_cluster():
    algo = FedSoft(num_clients=10, clients_per_round=3, seed=0, num_clusters=2)
    algo.federation = type(algo.federation)(10, 3, 0, num_params=4)
    request = algo.plan_probe(1)
    assert request.op == "importance" and request.clusters == ["0", "1"]
    ks = request.clients.tolist()
    rows = np.array([[0.75, 0.25], [1e-4, 1.0], [0.5, 0.5]])
    algo.update_probe(1, request, rows)
    assert [algo.tree.assignment()[1][k] for k in ks] == [0, 1, 0]  # largest weight, first tie
    plan = algo.plan(1)
    assert plan.one_training and plan.prepare == "start" and plan.return_models == set(ks)
    assert plan.train[ks[0]] == {"0": 0.75, "1": 0.25}
    assert plan.client_state[ks[0]].tolist() == [0.0, 0.75, 0.25, 0, 0, 0, 0]
    # with the run's initial model known, a client's first training starts from it
    shared = type(algo.federation)(10, 3, 0, num_params=4,
                                   initial_model=np.full(4, 0.5, dtype=np.float32))  # fmt: skip
    algo.federation, plain = shared, algo.federation
    assert algo.plan(1).client_state[ks[0]].tolist() == [1.0, 0.75, 0.25, 0.5, 0.5, 0.5, 0.5]
    algo.federation = plain
    # the update keeps each client's model (returned once per cluster) as its personal one
    from distfl.algorithms.api.base import ClientReports

    models = np.repeat(np.arange(3, dtype=np.float32)[:, None] * np.ones((1, 4)), 2, axis=0)
    reports = ClientReports(clients=np.repeat(ks, 2), losses=np.zeros((6, 1)),
                            num_samples=np.ones(6, dtype=np.int64), models=models)  # fmt: skip
    update = algo.update(1, plan, reports)
    assert [algo.personal[k].tolist() for k in ks] == [[0.0] * 4, [1.0] * 4, [2.0] * 4]
    assert update.rows["weights"]["weight"].tolist() == rows.reshape(-1).tolist()
    # state survives a round trip; a later plan starts each client from its personal model
    again = FedSoft(num_clients=10, clients_per_round=3, seed=0, num_clusters=2)
    again.federation = algo.federation
    again.load_state_dict(algo.state_dict())
    assert again.plan_probe(2).clients.tolist() == algo.plan_probe(2).clients.tolist()
    assert {k: v.tolist() for k, v in again.personal.items()} == {
        k: v.tolist() for k, v in algo.personal.items()
    }
    row = again.client_rows(np.array([ks[1], 9 if 9 not in ks else 8]))
    assert row[0].tolist() == [1.0, 1e-4, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert row[1].tolist() == [0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_the_memory_check_counts_the_personal_models():
    """A personal model per client (4·P bytes and S weights, three copies): a population
    whose personal models do not fit is refused in one line naming data.num_clients."""
    from distfl import config as C
    from distfl.errors import ConfigError
    from distfl.runtime.capacity import check_sizes, size_terms

    def fedsoft(K):
        return C.load(preset="digits", overrides=[
            'algorithm.name="fedsoft"', "algorithm.num_clusters=2", f"data.num_clients={K}",
            "server.clients_per_round=10", "eval.clients=100",
        ])  # fmt: skip

    small = size_terms(fedsoft(1000))["algorithm_state"][0]
    assert size_terms(fedsoft(3000))["algorithm_state"][0] == 3 * small
    cfg = fedsoft(2_000_000)
    need = sum(b for b, _ in size_terms(cfg).values())
    with pytest.raises(ConfigError) as err:
        check_sizes(cfg, need // 2)
    text = str(err.value)
    assert "\n" not in text and text.startswith("data.num_clients = 2000000: ")
    assert "the algorithm's state" in text and "clients fit" in text
