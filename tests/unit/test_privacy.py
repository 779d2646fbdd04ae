"""Client-level differential privacy's pure parts (distfl.runtime.privacy): the clipping of
updates, the noise on the aggregates, the sensitivity of soft weights and the accountant's
ε, on small arrays against hand-computed values and opacus's own published one."""

from __future__ import annotations

import math

import pytest
import torch

from distfl.config import build
from distfl.config.privacy import PrivacySection
from distfl.errors import ConfigError
from distfl.runtime.privacy import (
    AggregateNoise,
    aggregate_noise,
    clip_updates,
    epsilon,
    noise_multiplier,
    run_sampling_rate,
    sampling_rate,
    sensitivity_spread,
)


def test_a_long_update_is_scaled_to_the_bound_and_a_short_one_kept_bit_for_bit():
    start = torch.tensor([1.0, -2.0])
    new = torch.tensor([[4.0, 2.0], [1.3, -1.6], [1.0, -2.0]])  # updates (3, 4), (.3, .4), 0
    out = clip_updates(new, start, 1.0)
    assert torch.allclose(out[0], torch.tensor([1.6, -1.2]))  # (3, 4)/5 from the start
    assert float(torch.linalg.vector_norm(out[0].double() - start.double())) <= 1.0
    assert torch.equal(out[1], new[1]) and torch.equal(out[2], new[2])
    assert torch.equal(new[0], torch.tensor([4.0, 2.0]))  # the input is left as it was
    assert clip_updates(new, start, 0.0) is new  # 0: no clipping


def test_a_row_is_clipped_the_same_whatever_rows_come_with_it():
    g = torch.Generator().manual_seed(3)
    start = torch.randn(50, generator=g)
    new = start + torch.randn(6, 50, generator=g) * torch.tensor([0.1, 3, 0.2, 5, 1, 9])[:, None]
    together = clip_updates(new, start, 2.0)
    for j in range(6):
        assert torch.equal(together[j], clip_updates(new[j : j + 1], start, 2.0)[0])
    lengths = torch.linalg.vector_norm(together.double() - start.double(), dim=1)
    assert (lengths <= 2.0).all()  # as rounded to float32, never past the bound
    assert int((lengths > 1.999).sum()) == 4  # the four longer than 2 end at the bound


@pytest.mark.parametrize(
    "weights, spread",
    [([[1.0], [1.0]], 1.0), ([[0.6, 0.8]], 1.0), ([[1.0, 1.0]], math.sqrt(2)),
     ([[0.5, 0.5], [0.2]], 1.0), ([], 1.0)],
)  # fmt: skip
def test_the_spread_of_soft_weights(weights, spread):
    assert sensitivity_spread(weights) == pytest.approx(spread)


def _noise(seed=0, noise=2.0, clip=0.5, w=3.0):
    return AggregateNoise(PrivacySection(clip=clip, noise=noise), seed=seed, max_weight=w)


def test_the_noise_is_a_function_of_seed_round_and_cluster():
    total = torch.zeros(1000, dtype=torch.float64)
    a = _noise().add(total, 4, "0.1")
    assert torch.equal(a, _noise().add(total, 4, "0.1"))
    for other in (_noise().add(total, 5, "0.1"), _noise().add(total, 4, "0.2"),
                  _noise(seed=1).add(total, 4, "0.1")):  # fmt: skip
        assert not torch.equal(a, other)


def test_the_noise_has_std_z_c_w_times_the_spread():
    total = torch.full((200_000,), 7.0, dtype=torch.float64)
    noised = _noise().add(total, 1, "0", spread=2.0) - 7.0
    assert _noise().std(2.0) == 2.0 * 0.5 * 3.0 * 2.0
    assert float(noised.std()) == pytest.approx(6.0, rel=0.01)
    assert abs(float(noised.mean())) < 0.05
    zero = AggregateNoise(PrivacySection(clip=1.0), seed=0, max_weight=3.0)
    assert zero.add(total, 1, "0") is total  # z = 0 draws nothing


def test_w_max_is_the_largest_split_or_one_for_fairavg():
    counts = torch.tensor([5, 40, 12]).numpy()
    config = build({"privacy": {"clip": 1.0, "noise": 1.0}})
    assert aggregate_noise(config, counts).max_weight == 40.0
    fair = build({"privacy": {"clip": 1.0, "noise": 1.0}, "server": {"aggregator": "fairavg"}})
    assert aggregate_noise(fair, counts).max_weight == 1.0
    assert aggregate_noise(build({"privacy": {"clip": 1.0}}), counts) is None


def test_the_rdp_epsilon_is_opacus_published_value():
    """opacus's tests/accountants_test.py: z = 1.5, q = 0.04, 90 epochs (2,250 steps),
    δ = 1e-5 give ε = 7.32911117143."""
    p = PrivacySection(clip=1.0, noise=1.5, delta=1e-5)
    assert epsilon(p, 0.04, 2250) == pytest.approx(7.32911117143, abs=1e-7)


def test_the_rdp_epsilon_is_the_rdp_accountants_to_the_bit():
    """One step's divergences computed once and multiplied by the steps: what opacus's
    RDPAccountant.get_epsilon computes for those steps, bit for bit."""
    from opacus.accountants import RDPAccountant

    p = PrivacySection(clip=1.0, noise=0.8, delta=1e-6)
    for steps in (1, 2, 37, 300, 5000):
        accountant = RDPAccountant()
        accountant.history = [(0.8, 0.1, steps)]
        assert epsilon(p, 0.1, steps) == accountant.get_epsilon(delta=1e-6)


def test_prv_is_tighter_than_rdp_and_epsilon_grows_with_the_rounds():
    rdp = PrivacySection(clip=1.0, noise=1.0, delta=1e-5)
    prv = PrivacySection(clip=1.0, noise=1.0, delta=1e-5, accountant="prv")
    series = [epsilon(rdp, 0.25, t) for t in (1, 2, 10, 100)]
    assert series == sorted(series) and len(set(series)) == 4
    assert 0.5 * series[-1] < epsilon(prv, 0.25, 100) < series[-1]
    assert math.isnan(epsilon(PrivacySection(clip=1.0), 0.25, 10))  # no noise, no ε


def test_a_target_epsilon_finds_a_z_that_just_meets_it():
    config = build(
        {
            "privacy": {"clip": 1.0, "epsilon": 4.0},
            "run": {"rounds": 50},
            "data": {"num_clients": 40},
            "server": {"clients_per_round": 10},
        }
    )
    z, q = noise_multiplier(config), run_sampling_rate(config)
    assert q == 0.25  # 10 of 40 clients a round
    assert 3.95 <= epsilon(config.privacy, q, 50, z) <= 4.0
    assert epsilon(config.privacy, q, 50, 0.97 * z) > 4.0
    cfl = build({"privacy": {"clip": 1.0, "epsilon": 4.0}, "algorithm": {"name": "cfl"}})
    assert run_sampling_rate(cfl) == 1.0  # every member trains every round
    assert noise_multiplier(build({"privacy": {"clip": 1.0, "noise": 0.7}})) == 0.7
    assert noise_multiplier(build({"privacy": {"clip": 1.0}})) == 0.0


def test_the_sampling_rate():
    assert sampling_rate(10, 40, False) == 0.25
    assert sampling_rate(10, 40, True) == 1.0
    assert sampling_rate(50, 40, False) == 1.0


@pytest.mark.parametrize(
    "raw, needle",
    [
        ({"privacy": {"noise": 1.0}}, "privacy.noise = 1.0 needs privacy.clip > 0"),
        ({"privacy": {"clip": -1.0}}, "privacy.clip = -1.0: must be in [0, 1e+12]"),
        ({"privacy": {"clip": math.inf}}, "privacy.clip = inf"),
        ({"privacy": {"clip": 1.0, "noise": 1.0, "delta": 1.0}}, "privacy.delta = 1.0"),
        ({"privacy": {"epsilon": 4.0}}, "privacy.epsilon = 4.0 needs privacy.clip > 0"),
        ({"privacy": {"clip": 1.0, "noise": 1.0, "epsilon": 4.0}}, "give one"),
        ({"privacy": {"sample_clip": 1.0}}, "needs train.trainer = 'vectorised', not 'auto'"),
        ({"privacy": {"sample_noise": 1.0}, "train": {"trainer": "vectorised"}},
         "privacy.sample_noise = 1.0 needs privacy.sample_clip > 0"),
        ({"privacy": {"delta": 0.01}}, "privacy.delta = 0.01 has no effect"),
        ({"privacy": {"clip": 1.0, "accountant": "prv"}}, "privacy.accountant = 'prv' has no"),
        ({"privacy": {"clip": 1.0, "noise": 1.0}, "algorithm": {"name": "pfedgraph"}},
         "graph row's mix of the clients' models"),
        ({"privacy": {"clip": 1.0, "noise": 1.0},
          "algorithm": {"name": "ifca"}}, "k-means centres"),
        ({"privacy": {"clip": 1.0, "noise": 1.0},
          "participation": {"availability": "fraction", "fraction": 0.5}},
         "needs participation.availability = 'always'"),
    ],
)  # fmt: skip
def test_refused_in_one_line(raw, needle):
    with pytest.raises(ConfigError) as e:
        build(raw)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_accepted():
    noised = {"clip": 1.0, "noise": 0.5}
    for raw in ({"privacy": {"clip": 1.0}}, {"privacy": noised},
                {"privacy": noised, "algorithm": {"name": "ifca", "init": "random"}},
                {"privacy": noised, "algorithm": {"name": "cfl"}},
                {"privacy": {"clip": 1.0, "sample_clip": 2.0, "sample_noise": 1.0},
                 "train": {"trainer": "vectorised"}}):  # fmt: skip
        assert build(raw).privacy.clip == 1.0
