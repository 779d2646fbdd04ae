"""Server aggregators: FedAvgM's momentum, FairAvg's uniform weights, FedProx's check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distfl import config as cfg
from distfl.aggregators import Aggregator, FairAvg, FedAvgM, build_aggregator
from distfl.errors import ConfigError
from distfl.plugins import AGGREGATORS


def f64(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_the_registry_holds_the_four_and_the_settings_text_names_them():
    assert AGGREGATORS.first_then_by_name("fedavg") == ["fedavg", "fairavg", "fedavgm", "fedprox"]
    for name, cls in AGGREGATORS.items():
        assert cls.name == name and issubclass(cls, Aggregator)
    allowed = cfg.ServerSection.__dataclass_fields__["aggregator"].metadata["allowed"]
    assert allowed == ", ".join(f"`{n}`" for n in ("fedavg", "fedavgm", "fedprox", "fairavg"))


def test_fedavg_hand_computed():
    model = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float32)
    # two clients with n = 2 and n = 6, updates +1 and -1 on the first parameter etc.
    delta_sum = torch.tensor([2 * 1.0 + 6 * -1.0, 2 * 0.5 + 6 * 0.5, 0.0], dtype=torch.float64)
    out = Aggregator()("0", model, delta_sum, 8)
    # 1 + (-4/8), -2 + 4/8, 0.5 + 0
    assert out.dtype == torch.float32
    assert out.tolist() == [0.5, -1.5, 0.5]


def test_fedavg_is_computed_in_float64():
    model = torch.tensor([1.0], dtype=torch.float32)
    # mean update 2^-24 + 2^-50: in float64, 1 + 2^-24 + 2^-50 is exact and just above
    # half an ulp of 1.0f, so it rounds up to 1 + 2^-23; in float32 the update would be
    # 2^-24 and the tie 1 + 2^-24 would round to even, 1.0
    delta = torch.tensor([4 * (2.0**-24 + 2.0**-50)], dtype=torch.float64)
    out = Aggregator()("0", model, delta, 4)
    assert out.tolist() == [1.0 + 2.0**-23]


def test_fedavg_zero_weight_keeps_model():
    model = torch.tensor([1.0, 2.0, 3.0])
    out = Aggregator()("0", model, torch.tensor([5.0, 5.0, 5.0], dtype=torch.float64), 0)
    assert torch.equal(out, model)
    out[0] = 99.0
    assert model[0] == 1.0  # a copy, not the same tensor


def test_fedavgm_two_rounds_hand_computed():
    agg = FedAvgM(lr=0.5, momentum=0.9)
    model = torch.tensor([1.0, 0.0])
    # round 1: mean update Δ1 = (2, -4)/2 = (1, -2); v = Δ1; θ = θ + 0.5 v
    m1 = agg("0", model, f64(2.0, -4.0), 2)
    assert m1.tolist() == [1.5, -1.0]
    # round 2: Δ2 = (0.5, 0.5); v = 0.9 (1, -2) + (0.5, 0.5) = (1.4, -1.3); θ += 0.5 v
    m2 = agg("0", m1, f64(1.0, 1.0), 2)
    assert m2.tolist() == pytest.approx([1.5 + 0.7, -1.0 - 0.65], abs=1e-6)
    assert agg.velocity["0"].tolist() == pytest.approx([1.4, -1.3])


def test_fedavgm_without_momentum_is_fedavg():
    rng = np.random.default_rng(0)
    plain, m = Aggregator(), FedAvgM(lr=1.0, momentum=0.0)
    model = torch.from_numpy(rng.standard_normal(5).astype(np.float32))
    for _ in range(3):
        delta = torch.from_numpy(rng.standard_normal(5))
        a, b = plain("0", model, delta, 7), m("0", model, delta, 7)
        assert torch.equal(a, b)
        model = a


def test_fedavgm_keeps_one_velocity_per_cluster_and_children_inherit():
    agg = FedAvgM(lr=1.0, momentum=0.5)
    agg("0", torch.zeros(2), f64(2.0, 0.0), 1)
    agg("1", torch.zeros(2), f64(0.0, 4.0), 2)
    agg.split("0", ["0.0", "0.1"])
    assert "0" not in agg.velocity
    assert agg.velocity["0.0"].tolist() == [2.0, 0.0] == agg.velocity["0.1"].tolist()
    assert agg.velocity["1"].tolist() == [0.0, 2.0]
    agg.velocity["0.0"][0] = 9.0
    assert agg.velocity["0.1"][0] == 2.0  # copies, not one shared tensor


def test_fedavgm_zero_weight_keeps_model_and_velocity():
    agg = FedAvgM(lr=1.0, momentum=0.9)
    agg("0", torch.zeros(1), f64(1.0), 1)
    out = agg("0", torch.tensor([3.0]), f64(5.0), 0)
    assert out.tolist() == [3.0]
    assert agg.velocity["0"].tolist() == [1.0]


def test_fedavgm_state_round_trip_continues_identically():
    a = FedAvgM(lr=0.3, momentum=0.8)
    model = torch.tensor([0.25, -1.0, 2.0])
    model = a("0.1", model, f64(1.0, 2.0, 3.0), 3)
    b = FedAvgM(lr=0.3, momentum=0.8)
    b.load_state_dict(a.state_dict())
    delta = f64(-0.5, 0.25, 1.0)
    assert torch.equal(a("0.1", model, delta, 2), b("0.1", model, delta, 2))
    empty = FedAvgM()
    empty.load_state_dict(FedAvgM().state_dict())
    assert empty.velocity == {}


def test_fairavg_weights_clients_uniformly_and_averages_like_fedavg():
    assert FairAvg.uniform and not Aggregator.uniform and not AGGREGATORS.get("fedprox").uniform
    # with uniform weights the reduced sums are Σ Δθ_k and the count of clients
    out = FairAvg()("0", torch.tensor([1.0]), f64(3.0 + 1.0), 2)
    assert out.tolist() == [3.0]


def test_build_aggregator_reads_server_section():
    c = cfg.load(
        preset="digits",
        overrides=['server.aggregator="fedavgm"', "server.lr=0.25", "server.momentum=0.5"],
    )
    agg = build_aggregator(c.server)
    assert isinstance(agg, FedAvgM) and agg.lr == 0.25 and agg.momentum == 0.5


@pytest.mark.parametrize(
    "overrides, key",
    [
        (['server.aggregator="fedprox"'], "server.aggregator"),
        (['server.aggregator="fedavgm"', "server.momentum=1.0"], "server.momentum"),
        (["server.lr=0.0"], "server.lr"),
        (['server.aggregator="fedmedian"'], "server.aggregator"),
    ],
)
def test_bad_aggregator_settings(overrides, key):
    with pytest.raises(ConfigError) as e:
        cfg.load(preset="digits", overrides=overrides)
    assert str(e.value).startswith(key)
