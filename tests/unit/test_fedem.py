"""FedEM's math (Marfoq et al., NeurIPS 2021) against hand-computed values, and training
with a weight per sample: the three trainers agree with the formula Σ_i w_i ℓ_i / b, and a
client's bits do not depend on its company."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_batched import batched
from test_vectorised import setup

from distfl.algorithms.common.mixture_client import mixture_scores
from distfl.algorithms.fedem import FedEM, mixture_weights, responsibilities
from distfl.datasets.digits import load_digits_dataset
from distfl.train.sequential import weighted_loss_function


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def test_estep_responsibilities_by_hand():
    """q_im = π_m e^{-ℓ_mi} / Σ_j π_j e^{-ℓ_ji}, written out for 2 components, 3 samples."""
    pi = np.array([0.25, 0.75])
    ell = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    q = responsibilities(pi, ell)
    for i in range(3):
        a = 0.25 * math.exp(-ell[0, i])
        b = 0.75 * math.exp(-ell[1, i])
        assert q[0, i] == pytest.approx(a / (a + b), rel=1e-15)
        assert q[1, i] == pytest.approx(b / (a + b), rel=1e-15)
    # sample 1: equal losses, so q is π itself
    assert q[:, 1] == pytest.approx(pi, rel=1e-15)
    # the M-step: π_new = mean over the samples, by hand
    a0 = 0.25 / (0.25 + 0.75 * math.exp(-1.0))
    a2 = 0.25 * math.exp(-2.0) / (0.25 * math.exp(-2.0) + 0.75)
    new = mixture_weights(q)
    assert new[0] == pytest.approx((a0 + 0.25 + a2) / 3, rel=1e-14)
    assert new.sum() == pytest.approx(1.0, rel=1e-15)


def test_estep_is_stable_for_large_losses_and_nan():
    """Losses of 1000 do not underflow to 0/0; a NaN loss explains nothing; a sample no
    component explains keeps π; π = 0 gives 1/M."""
    q = responsibilities(np.array([0.5, 0.5]), np.array([[1000.0, np.nan], [1001.0, 3.0]]))
    e = 1.0 / (1.0 + math.exp(-1.0))
    assert q[:, 0] == pytest.approx([e, 1 - e], rel=1e-14)
    assert q[:, 1].tolist() == [0.0, 1.0]
    dead = responsibilities(np.array([0.2, 0.8]), np.array([[np.inf], [np.nan]]))
    assert dead[:, 0].tolist() == [0.2, 0.8]
    assert responsibilities(np.zeros(2), np.ones((2, 1)))[:, 0].tolist() == [0.5, 0.5]
    # a component of weight 0 stays at 0
    assert responsibilities(np.array([0.0, 1.0]), np.zeros((2, 2)))[0].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"\[2, n\]"):
        responsibilities(np.array([0.5, 0.5]), np.zeros((3, 2)))


def test_mixture_scores_by_hand():
    """p = Σ π_m softmax(z_m): prediction, accuracy and −log p(y) of two samples."""
    logits = np.array([[[2.0, 0.0], [0.0, 0.0]], [[0.0, 3.0], [1.0, 0.0]]])  # [M=2, n=2, C=2]
    pi = np.array([0.6, 0.4])
    y = np.array([1, 0])

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    p0 = 0.6 * softmax(logits[0, 0]) + 0.4 * softmax(logits[1, 0])
    p1 = 0.6 * softmax(logits[0, 1]) + 0.4 * softmax(logits[1, 1])
    bal, acc, loss = mixture_scores(logits, pi, y)
    pred = [int(np.argmax(p0)), int(np.argmax(p1))]
    assert pred == [0, 0]  # sample 0 (label 1) wrong, sample 1 (label 0) right
    assert acc == 0.5 and bal == 0.5
    assert loss == pytest.approx(-(math.log(p0[1]) + math.log(p1[0])) / 2, rel=1e-14)


def test_weighted_loss_by_hand():
    logits = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.5, 0.5]])
    y = torch.tensor([0, 0, 1])
    w = torch.tensor([0.5, 2.0, 1.0])
    each = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    got = weighted_loss_function("cross_entropy")(logits, y, w)
    assert float(got) == pytest.approx(float((each * w).sum() / 3), rel=1e-7)
    margin = torch.tensor([1.0, -2.0, 0.0])  # (2y − 1)(z1 − z0) for y = 0, 0, 1
    hinge = weighted_loss_function("hinge")(logits, y, w)
    expected = sum(float(wi) * max(0.0, 1.0 - float(m)) for wi, m in zip(w, margin, strict=True))
    assert float(hinge) == pytest.approx(expected / 3, rel=1e-7)


def _weights(datas, seed=5):
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.uniform(0.0, 1.0, d.num_train).astype(np.float32)) for d in datas]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_trainers_agree_with_sample_weights(digits, name):
    """Sequential, vectorised and batched trainers take the same weighted steps (to float32
    rounding), and the weights change the result (a weighted training is not the plain one)."""
    torch.set_num_threads(1)
    cfg, datas, start, seeds, seq, vec = setup(digits, name, "train.momentum=0.9")
    weights = _weights(datas)
    v_models, v_losses = vec.train_many(start, datas, seeds, weights=weights)
    b_models, b_losses = batched(digits, name, cfg).train_many(start, datas, seeds,
                                                               weights=weights)  # fmt: skip
    plain, _ = vec.train_many(start, datas, seeds)
    for i, (d, s) in enumerate(zip(datas, seeds, strict=True)):
        m, l = seq.train(start, d, seed=s, weights=weights[i])
        for other, ol in ((v_models, v_losses), (b_models, b_losses)):
            assert torch.allclose(other[i], m, rtol=1e-5, atol=1e-6), (name, i)
            assert np.allclose(ol[i], l, rtol=1e-5, atol=1e-6), (name, i)
        assert not torch.allclose(plain[i], m, rtol=1e-4, atol=1e-5)


def test_unit_weights_train_as_the_mean_loss(digits):
    """Every weight 1 is the plain batch mean: the same model to float32 rounding."""
    torch.set_num_threads(1)
    _, datas, start, seeds, seq, _ = setup(digits, "mlp")
    ones = torch.ones(datas[0].num_train)
    weighted, _ = seq.train(start, datas[0], seed=seeds[0], weights=ones)
    plain, _ = seq.train(start, datas[0], seed=seeds[0])
    assert torch.allclose(weighted, plain, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["vectorised", "batched"])
def test_a_weighted_clients_bits_do_not_depend_on_its_company(digits, kind):
    torch.set_num_threads(1)
    cfg, datas, start, seeds, _, vec = setup(digits, "cnn")
    trainer = vec if kind == "vectorised" else batched(digits, "cnn", cfg)
    weights = _weights(datas, seed=7)
    together, lt = trainer.train_many(start, datas, seeds, weights=weights)
    for group in ([0, 1], [3, 5, 2], [4]):
        got, gl = trainer.train_many(start, [datas[i] for i in group],
                                     [seeds[i] for i in group],
                                     weights=[weights[i] for i in group])  # fmt: skip
        for j, i in enumerate(group):
            assert torch.equal(got[j], together[i]), (kind, group, i)
            assert np.array_equal(gl[j], lt[i]), (kind, group, i)


def test_fedem_plans_every_component_with_the_estep():
    alg = FedEM(num_clients=12, clients_per_round=4, seed=1, num_clusters=3)
    plan = alg.plan(1)
    assert len(plan.train) == 4 and plan.prepare == "estep" and plan.prepare_width == 3
    for k in plan.train:
        assert plan.targets(k) == [("0", 1.0), ("1", 1.0), ("2", 1.0)]
        assert plan.client_state[k].tolist() == [1 / 3] * 3
    assert plan.clusters() == ["0", "1", "2"]
    # every client starts in the first component's leaf, each component from its own seed
    assert alg.clusters()["0"].tolist() == list(range(12))
    assert alg.initial_models() == {"0": 1, "1": 2, "2": 3}


def test_fedem_components_order_as_strings():
    """Ten or more components: π's columns follow the broadcast order (ascending ids)."""
    alg = FedEM(num_clients=20, clients_per_round=2, seed=0, num_clusters=11)
    assert alg.ids == sorted(alg.ids) and alg.ids[:3] == ["0", "1", "10"]
    assert alg.plan(1).clusters() == alg.ids


def test_fedem_keeps_the_weights_and_the_largest_as_cluster():
    from distfl.algorithms.api.base import ClientReports

    alg = FedEM(num_clients=6, clients_per_round=2, seed=4, num_clusters=2)
    plan = alg.plan(1)
    ks = sorted(plan.train)
    rows = np.array([[0.2, 0.8], [0.9, 0.1]])
    reports = ClientReports(clients=np.repeat(ks, 2), losses=np.zeros((4, 1)),
                            num_samples=np.ones(4, dtype=np.int64), rows=rows)  # fmt: skip
    alg.update(1, plan, reports)
    assert alg.pi[ks].tolist() == rows.tolist()
    assert alg.client_rows(np.array(ks)).tolist() == rows.tolist()
    _, assign = alg.tree.assignment()
    leaves = alg.tree.leaf_ids()
    assert [leaves[assign[k]] for k in ks] == ["1", "0"]
    state = alg.state_dict()
    again = FedEM(num_clients=6, clients_per_round=2, seed=4, num_clusters=2)
    again.load_state_dict(state)
    assert np.array_equal(again.pi, alg.pi)
    assert sorted(again.plan(2).train) == sorted(alg.plan(2).train)


def test_the_memory_check_counts_fedems_weights():
    """π grows with the population (8·M bytes a client, three copies): the memory check
    counts it, and a population whose weights do not fit is refused in one line naming
    data.num_clients and how many clients fit."""
    from distfl import config as C
    from distfl.errors import ConfigError
    from distfl.runtime.capacity import check_sizes, size_terms

    def fedem(K, M=4):
        return C.load(preset="digits", overrides=[
            'algorithm.name="fedem"', f"algorithm.num_clusters={M}", f"data.num_clients={K}",
            "server.clients_per_round=10", "eval.clients=100",
        ])  # fmt: skip

    small, large = (
        size_terms(fedem(1000))["algorithm_state"][0],
        size_terms(fedem(3000))["algorithm_state"][0],
    )
    assert small == 3 * 8 * 4 * 1000 and large == 3 * small
    assert "algorithm_state" not in size_terms(C.load(preset="digits"))
    cfg = fedem(2_000_000, M=64)
    need = sum(b for b, _ in size_terms(cfg).values())
    with pytest.raises(ConfigError) as err:
        check_sizes(cfg, need // 2)
    text = str(err.value)
    assert "\n" not in text and text.startswith("data.num_clients = 2000000: ")
    assert "the algorithm's state" in text and "clients fit" in text
    fits = int(text.rsplit("at most about ", 1)[1].split(" ")[0].replace(",", ""))
    assert 0 < fits < 2_000_000
    check_sizes(fedem(fits, M=64), need // 2)  # the count said to fit does fit


# --------------------------------------------------------------------------- FedRC


def test_fedrc_estep_by_hand():
    """q_im ∝ π_m e^{-ℓ_mi} / P_m(y_i): 2 clusters, 2 classes, 3 samples, written out."""
    from distfl.algorithms.fedrc import label_counts, label_shares, robust_responsibilities

    pi = np.array([0.4, 0.6])
    ell = np.array([[0.5, 1.0, 0.2], [0.3, 0.1, 2.0]])
    P = np.array([[0.8, 0.2], [0.3, 0.7]])
    y = np.array([0, 1, 1])
    q = robust_responsibilities(pi, ell, P, y)
    for i in range(3):
        a = 0.4 * math.exp(-ell[0, i]) / P[0, y[i]]
        b = 0.6 * math.exp(-ell[1, i]) / P[1, y[i]]
        assert q[:, i] == pytest.approx([a / (a + b), b / (a + b)], rel=1e-14)
    # a uniform P changes nothing: FedEM's E-step
    flat = robust_responsibilities(pi, ell, np.full((2, 2), 0.5), y)
    assert flat == pytest.approx(responsibilities(pi, ell), rel=1e-14)
    counts = label_counts(q, y, 3)
    assert counts.shape == (2, 3) and counts[:, 2].tolist() == [0.0, 0.0]
    assert counts[0, 0] == q[0, 0] and counts[0, 1] == pytest.approx(q[0, 1] + q[0, 2])
    shares = label_shares(counts)
    assert shares.sum(axis=1) == pytest.approx([1.0, 1.0])
    assert shares[0, 2] == pytest.approx(1e-8 / (counts[0].sum() + 1e-8), rel=1e-9)


def test_fedrc_keeps_every_clients_counts_for_the_label_shares():
    from distfl.algorithms.api.base import ClientReports, Federation
    from distfl.algorithms.fedrc import FedRC

    alg = FedRC(num_clients=5, clients_per_round=2, seed=3, num_clusters=2)
    alg.federation = Federation(5, 2, 3, num_classes=3)
    plan = alg.plan(1)
    ks = sorted(plan.train)
    assert plan.prepare_width == 2 + 2 * 3
    first = next(iter(plan.client_state.values()))
    assert first.tolist() == [0.5, 0.5] + [1 / 3] * 6  # π, then a uniform P
    rows = np.array([[0.25, 0.75, 1, 2, 0, 3, 4, 5], [0.5, 0.5, 0, 0, 6, 1, 0, 0]], float)
    reports = ClientReports(clients=np.repeat(ks, 2), losses=np.zeros((4, 1)),
                            num_samples=np.ones(4, dtype=np.int64), rows=rows)  # fmt: skip
    alg.update(1, plan, reports)
    assert alg.pi[ks].tolist() == [[0.25, 0.75], [0.5, 0.5]]
    total = np.array([[1, 2, 6], [4, 4, 5]], dtype=float)
    assert alg.label_share() == pytest.approx(total / total.sum(axis=1, keepdims=True))
    again = FedRC(num_clients=5, clients_per_round=2, seed=3, num_clusters=2)
    again.federation = alg.federation
    again.load_state_dict(alg.state_dict())
    assert np.array_equal(again.counts, alg.counts) and np.array_equal(again.pi, alg.pi)
