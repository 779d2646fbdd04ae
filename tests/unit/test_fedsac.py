"""FedSaC's complementarity and graph: the subspaces' overlap on worked bases, the graph
rows against scipy's solver and the public code's worked numbers, the principal axes
against scikit-learn's PCA, and the pooled pieces against the whole computation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.decomposition import PCA

from distfl.algorithms.common.graph import negative_cosines
from distfl.algorithms.fedsac.graph import (
    complementarity_row,
    principal_basis,
    sac_piece,
    sac_row,
    subspace_overlap,
)


def _orthonormal(rng, k, d):
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return q[:, :k].T, q[:, k : 2 * k].T


def test_overlap_of_worked_subspaces():
    """The code's greedy signed matching and the principal angles on 84-dimensional bases:
    one basis gives 1; the same subspace with one axis flipped gives 0.5 in the code's
    matching (two angles 0, one π) and 1 by the principal angles; orthogonal subspaces 0."""
    B, other = _orthonormal(np.random.default_rng(0), 3, 84)
    flipped = B.copy()
    flipped[1] *= -1
    assert subspace_overlap(B, B) == pytest.approx(1.0, abs=1e-12)
    assert subspace_overlap(B, flipped, "code") == pytest.approx(0.5, abs=1e-12)
    assert subspace_overlap(B, flipped, "svd") == pytest.approx(1.0, abs=1e-7)
    assert subspace_overlap(B, other, "code") == pytest.approx(0.0, abs=1e-12)
    assert subspace_overlap(B, other, "svd") == pytest.approx(0.0, abs=1e-12)
    # the same subspace in another basis: the principal angles see one subspace
    R, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(3, 3)))
    assert subspace_overlap(B, R @ B, "svd") == pytest.approx(1.0, abs=1e-7)
    assert subspace_overlap(B, R @ B, "code") < 1.0
    # a zero axis (a client without the data for it) has cosine 0 with every other
    zero = B.copy()
    zero[2] = 0.0
    assert subspace_overlap(B, zero, "code") == pytest.approx(np.cos(np.pi / 6), abs=1e-12)


def test_the_public_codes_worked_graph_rows():
    """n = 6, equal sizes, cosines (1, .8, .2, .2, .2, .2) and overlaps (1, .9, .9, .3, .3,
    .3): client 2, as similar as 3–5 but with overlapping features, is dropped."""
    p = np.full(6, 1 / 6)
    s = -np.array([1.0, 0.8, 0.2, 0.2, 0.2, 0.2])
    c = np.array([1.0, 0.9, 0.9, 0.3, 0.3, 0.3])
    for (l1, l2), want in [
        ((0.9, 1.4), [0.366, 0.271, 0.0, 0.121, 0.121, 0.121]),
        ((1.2, 1.2), [0.248, 0.188, 0.0, 0.188, 0.188, 0.188]),
        ((0.0, 1.4), [0.563, 0.423, 0.003, 0.003, 0.003, 0.003]),
    ]:
        assert sac_row(p, c, s, l1, l2) == pytest.approx(want, abs=6e-4), (l1, l2)


def test_graph_rows_are_the_quadratic_programs_minimisers():
    rng = np.random.default_rng(2)
    for trial in range(30):
        n = int(rng.integers(1, 10))
        p = rng.dirichlet(np.ones(n))
        s, c = -rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
        l1, l2 = rng.uniform(0, 2, 2)
        row = sac_row(p, c, s, l1, l2)
        q = l1 * c + l2 * s
        res = minimize(lambda a, p=p, q=q: np.sum((a - p) ** 2) + q @ a, np.full(n, 1 / n),
                       jac=lambda a, p=p, q=q: 2 * (a - p) + q, method="SLSQP", bounds=[(0, 1)] * n,
                       constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}],
                       options={"ftol": 1e-14, "maxiter": 500})  # fmt: skip
        assert res.success
        assert row == pytest.approx(res.x, abs=1e-6), trial


def test_principal_axes_are_scikit_learns_pca():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 12)) @ np.diag(np.linspace(3, 0.1, 12))
    mine = principal_basis(X, 3)
    ref = PCA(n_components=3, svd_solver="full").fit(X).components_
    for a, b in zip(mine, ref, strict=True):  # one axis each, up to its sign
        assert abs(float(a @ b)) == pytest.approx(1.0, abs=1e-10)
    top = np.argmax(np.abs(mine), axis=1)
    assert (mine[np.arange(3), top] > 0).all()  # each signed by its largest entry
    # fewer samples than axes, constant rows: zero axes, no NaN
    assert np.isfinite(principal_basis(X[:2], 3)).all()
    assert (principal_basis(X[:2], 3)[1:] == 0).all()
    assert (principal_basis(np.ones((10, 12)), 3) == 0).all()


def test_the_pooled_pieces_are_the_whole_computation():
    rng = np.random.default_rng(4)
    n, P, k, D = 5, 30, 3, 8
    U = rng.normal(size=(n, P))
    bases = np.stack([principal_basis(rng.normal(size=(20, D)), k) for _ in range(n)])
    sizes = rng.integers(5, 50, n).astype(float)
    payload = {"updates": U, "bases": bases, "sizes": sizes,
               "settings": np.array([0.9, 1.4, 0.0])}  # fmt: skip
    rows = np.stack([sac_piece(payload, i) for i in range(n)])
    A, C = rows[:, :n], rows[:, n:]
    d = negative_cosines(U)
    p = sizes / sizes.sum()
    for i in range(n):
        assert C[i].tolist() == complementarity_row(bases, i).tolist()
        assert A[i] == pytest.approx(sac_row(p, C[i], d[i], 0.9, 1.4), abs=1e-13)
    assert np.allclose(C, C.T) and np.allclose(np.diag(C), 1.0)
