"""pFedGraph's graph step against scipy's solver and the public code's worked numbers, its
aggregation by hand, and the local cosine term's gradient against autograd and across the
three trainers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from test_batched import batched
from test_vectorised import setup

from distfl.algorithms.common.graph import (
    aggregate_rows,
    graph_rows,
    negative_cosines,
    project_to_simplex,
)
from distfl.datasets.digits import load_digits_dataset
from distfl.train.optim import cosine_gradients


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def _qp_by_scipy(p, d, alpha):
    """min α‖a − p‖² + d·a over the simplex, by SLSQP (an independent solver)."""
    n = len(p)
    res = minimize(lambda a: alpha * np.sum((a - p) ** 2) + d @ a, np.full(n, 1.0 / n),
                   jac=lambda a: 2 * alpha * (a - p) + d, method="SLSQP",
                   bounds=[(0.0, 1.0)] * n,
                   constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1.0}],
                   options={"ftol": 1e-14, "maxiter": 500})  # fmt: skip
    assert res.success, res.message
    return res.x


def test_the_graph_rows_are_the_quadratic_programs_minimisers():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(1, 12))
        sizes = rng.integers(10, 500, n).astype(float)
        d = -rng.uniform(-1, 1, (n, n))
        alpha = float(rng.choice([0.05, 0.8, 5.0]))
        A = graph_rows(sizes, d, alpha)
        p = sizes / sizes.sum()
        for i in range(n):
            assert A[i].min() >= 0 and A[i].sum() == pytest.approx(1.0, abs=1e-12)
            ref = _qp_by_scipy(p, d[i], alpha)
            assert A[i] == pytest.approx(ref, abs=1e-6), (trial, i)


def test_the_public_codes_worked_row():
    """n = 6, equal sizes, cosines (1, .8, .2, .2, .2, .2), α = 0.8: (0.521, 0.396, 0.021 × 4)."""
    cos = np.array([1.0, 0.8, 0.2, 0.2, 0.2, 0.2])
    row = graph_rows(np.ones(6), np.tile(-cos, (6, 1)), 0.8)[0]
    assert row == pytest.approx([0.521, 0.396, 0.021, 0.021, 0.021, 0.021], abs=5e-4)


def test_projection_edge_cases():
    assert project_to_simplex(np.array([5.0])).tolist() == [1.0]
    assert project_to_simplex(np.array([0.2, 0.3, 0.5])) == pytest.approx([0.2, 0.3, 0.5])
    assert project_to_simplex(np.array([3.0, 0.0, -1.0])).tolist() == [1.0, 0.0, 0.0]


def test_negative_cosines_clip_and_zero_updates():
    U = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.0, 0.0]])
    d = negative_cosines(U)
    assert d[0, 1] == -1.0  # cos 0.995 > 0.9 counts as 1
    assert d[0, 2] == pytest.approx(0.0, abs=1e-15)
    assert d[3].tolist() == [0.0, 0.0, 0.0, 0.0] and d[0, 0] == -1.0


def test_aggregate_rows_by_hand():
    A = np.array([[0.25, 0.75], [1.0, 0.0]])
    W = np.array([[4.0, 8.0], [0.0, 4.0]])
    assert aggregate_rows(A, W).tolist() == [[1.0, 5.0], [4.0, 8.0]]


def test_the_cosine_terms_gradient_is_autograds():
    torch.manual_seed(0)
    params = [torch.randn(3, 4, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    anchors = [torch.randn(3, 4, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    leaves = [p.clone().requires_grad_() for p in params]
    flat = torch.cat([x.reshape(-1) for x in leaves])
    a = torch.cat([x.reshape(-1) for x in anchors])
    (-0.7 * torch.dot(flat, a) / (flat.norm() * a.norm())).backward()
    got = cosine_gradients(params, anchors, 0.7, stacked=False)
    for g, leaf in zip(got, leaves, strict=True):
        assert torch.allclose(g, leaf.grad, rtol=1e-12, atol=1e-14)
    # stacked: each client's gradient is its own
    stacked = cosine_gradients([torch.stack([p, 2 * p]) for p in params], anchors, 0.7,
                               stacked=True)  # fmt: skip
    twice = cosine_gradients([2 * p for p in params], anchors, 0.7, stacked=False)
    for s, one, two in zip(stacked, got, twice, strict=True):
        assert torch.allclose(s[0], one) and torch.allclose(s[1], two)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_trainers_agree_with_the_cosine_term(digits, name):
    from distfl.models import build_model
    from distfl.train import SequentialTrainer, VectorisedTrainer

    torch.set_num_threads(1)
    cfg, datas, start, seeds, _, _ = setup(digits, name, "train.momentum=0.9", "train.lr=0.5")
    c = 5.0  # large, so that the term shows in the models
    seq = SequentialTrainer(build_model(name, digits.input_shape, 10), cfg.train,
                            torch.device("cpu"), cosine=c)  # fmt: skip
    vec = VectorisedTrainer(build_model(name, digits.input_shape, 10), cfg.train,
                            torch.device("cpu"), cosine=c)  # fmt: skip
    v_models, _ = vec.train_many(start, datas, seeds)
    b_models, _ = batched(digits, name, cfg, cosine=c).train_many(start, datas, seeds)
    plain, _ = batched(digits, name, cfg).train_many(start, datas, seeds)
    for i, (d, s) in enumerate(zip(datas, seeds, strict=True)):
        m, _ = seq.train(start, d, seed=s)
        assert torch.allclose(v_models[i], m, rtol=1e-5, atol=1e-6), (name, i)
        assert torch.allclose(b_models[i], m, rtol=1e-5, atol=1e-6), (name, i)
        assert not torch.allclose(plain[i], m, rtol=1e-4, atol=1e-5)


def test_the_pooled_pieces_are_the_whole_matrices_rows():
    from distfl.algorithms.common.graph import aggregate_piece, graph_piece

    rng = np.random.default_rng(3)
    U = rng.normal(size=(7, 30))
    U[2] = U[1] * 1.01 + 1e-3  # a near-copy: its cosine is counted as 1
    sizes = rng.integers(5, 50, 7).astype(float)
    A = graph_rows(sizes, negative_cosines(U), 0.8)
    payload = {"updates": U, "sizes": sizes, "alpha": np.array([0.8])}
    rows = np.stack([graph_piece(payload, i) for i in range(7)])
    np.testing.assert_allclose(rows, A, rtol=0, atol=1e-13)
    W = rng.normal(size=(7, 11))
    mixed = np.stack([aggregate_piece({"graph": rows, "models": W}, i) for i in range(7)])
    np.testing.assert_allclose(mixed, rows @ W, rtol=1e-12, atol=1e-12)
