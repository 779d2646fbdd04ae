"""Models (shapes, flat buffers), metrics and the FedAvg aggregator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from distfl.metrics import balanced_accuracy, federation_mean
from distfl.models import build_model, flat_params, load_flat, num_params

# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet5", "mnist_cnn"])
@pytest.mark.parametrize("shape, classes", [((1, 8, 8), 10), ((3, 32, 32), 100)])
def test_output_shape(name, shape, classes):
    torch.manual_seed(0)
    model = build_model(name, shape, classes)
    x = torch.rand(5, *shape)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (5, classes)
    assert torch.isfinite(out).all()
    assert out.dtype == torch.float32


def test_mlp_parameter_count_hand_computed():
    # 64 -> 32 -> 16 -> 10: (64*32 + 32) + (32*16 + 16) + (16*10 + 10)
    model = build_model("mlp", (1, 8, 8), 10, hidden=(32, 16))
    assert num_params(model) == 64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10
    # no hidden layer: one linear map
    assert num_params(build_model("mlp", (1, 8, 8), 10, hidden=())) == 64 * 10 + 10


def test_lenet5_parameter_count_hand_computed():
    # 8x8 -> conv(pad 2) 8x8 -> pool 4x4 -> conv 4x4 -> pool 2x2: 16*2*2 = 64 features
    expected = (
        (1 * 6 * 25 + 6) + (6 * 16 * 25 + 16) + (64 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    )
    assert num_params(build_model("lenet5", (1, 8, 8), 10)) == expected


def test_cnn_parameter_count_hand_computed():
    # 32x32 -> 16x16 -> 8x8 with 64 channels: 4096 features
    expected = (
        (3 * 64 * 25 + 64)
        + (64 * 64 * 25 + 64)
        + (4096 * 384 + 384)
        + (384 * 192 + 192)
        + (192 * 100 + 100)
    )
    assert num_params(build_model("cnn", (3, 32, 32), 100)) == expected


def test_mnist_cnn_parameter_count_hand_computed():
    # 28x28 -> conv 3x3 (pad 1) 28x28 -> pool 14x14 -> conv 14x14 -> pool 7x7, 128 channels
    expected = (
        (1 * 64 * 9 + 64) + (64 * 128 * 9 + 128) + (128 * 7 * 7 * 128 + 128) + (128 * 10 + 10)
    )
    model = build_model("mnist_cnn", (1, 28, 28), 10)
    assert num_params(model) == expected
    # the embedding (the last linear layer's input) is the paper's 128 wide
    from distfl.models import last_linear

    assert last_linear(model).in_features == 128


def test_unknown_model():
    from distfl.errors import ConfigError

    with pytest.raises(ConfigError, match="^model.name = 'resnet'"):
        build_model("resnet", (1, 8, 8), 10)


@pytest.mark.parametrize("name", ["mlp", "lenet5"])
def test_flat_round_trip(name):
    torch.manual_seed(1)
    model = build_model(name, (1, 8, 8), 10)
    flat = flat_params(model)
    assert flat.dtype == torch.float32
    assert flat.ndim == 1 and flat.numel() == num_params(model)
    assert flat.is_contiguous()
    # the flat vector is the parameters in order
    params = list(model.parameters())
    assert torch.equal(flat[: params[0].numel()], params[0].detach().reshape(-1))

    new = torch.arange(flat.numel(), dtype=torch.float32) / 1000.0
    load_flat(model, new)
    assert torch.equal(flat_params(model), new)
    first = params[0]
    assert torch.equal(first.detach().reshape(-1), new[: first.numel()])
    # the earlier flat copy is independent of the model
    assert not torch.equal(flat, new)


def test_flat_params_is_a_copy():
    model = build_model("mlp", (1, 8, 8), 10)
    flat = flat_params(model)
    flat.zero_()
    assert flat_params(model).abs().sum() > 0


def test_load_flat_into_another_model_gives_same_outputs():
    torch.manual_seed(2)
    a = build_model("lenet5", (1, 8, 8), 10)
    torch.manual_seed(3)
    b = build_model("lenet5", (1, 8, 8), 10)
    x = torch.rand(4, 1, 8, 8)
    assert not torch.equal(a(x), b(x))
    load_flat(b, flat_params(a))
    assert torch.equal(a(x), b(x))


def test_load_flat_too_long_raises_value_error():
    model = build_model("mlp", (1, 8, 8), 10)
    n = num_params(model)
    with pytest.raises(ValueError, match=str(n)):
        load_flat(model, torch.zeros(n + 1))


def test_load_flat_too_short_raises():
    model = build_model("mlp", (1, 8, 8), 10)
    n = num_params(model)
    with pytest.raises((ValueError, RuntimeError)):
        load_flat(model, torch.zeros(n - 1))


def test_load_flat_too_short_raises_value_error():
    model = build_model("mlp", (1, 8, 8), 10)
    with pytest.raises(ValueError):
        load_flat(model, torch.zeros(num_params(model) - 1))


# --------------------------------------------------------------------------- balanced accuracy


def test_balanced_accuracy_hand_computed():
    # class 0: 2 of 3 right; class 1: 1 of 1 right
    assert balanced_accuracy([0, 0, 0, 1], [0, 0, 1, 1]) == pytest.approx((2 / 3 + 1) / 2)
    # plain accuracy would be 3/4 here; balanced is 5/6
    assert balanced_accuracy([0, 0, 0, 1], [0, 0, 1, 1]) != pytest.approx(0.75)


def test_balanced_accuracy_more_cases():
    assert balanced_accuracy([1, 1, 1], [1, 1, 1]) == 1.0
    assert balanced_accuracy([1, 1, 1], [0, 2, 0]) == 0.0
    # class 0: 1/2, class 1: 0/1, class 2: 3/3 -> (0.5 + 0 + 1) / 3
    y_true = np.array([0, 0, 1, 2, 2, 2])
    y_pred = np.array([0, 2, 0, 2, 2, 2])
    assert balanced_accuracy(y_true, y_pred) == pytest.approx(0.5)
    # majority-class predictor on an imbalanced set: 1 and 0 -> 0.5, not 0.9
    assert balanced_accuracy([0] * 9 + [1], [0] * 10) == pytest.approx(0.5)


def test_balanced_accuracy_ignores_classes_absent_from_y_true():
    # predictions of class 5 and 9 (never true) only count as misses of the true class
    y_true = [2, 2, 3, 3]
    y_pred = [2, 9, 5, 3]
    assert balanced_accuracy(y_true, y_pred) == pytest.approx((0.5 + 0.5) / 2)
    # a single true class: plain recall of that class
    assert balanced_accuracy([4, 4, 4, 4], [4, 1, 4, 4]) == pytest.approx(0.75)


def test_balanced_accuracy_empty_is_nan():
    assert math.isnan(balanced_accuracy(np.array([], dtype=int), np.array([], dtype=int)))


# --------------------------------------------------------------------------- federation mean


def test_federation_mean_unweighted_skips_nan():
    assert federation_mean([0.5, float("nan"), 1.0]) == pytest.approx(0.75)
    assert federation_mean([0.2, 0.4, 0.9]) == pytest.approx(0.5)


def test_federation_mean_weighted():
    # NaN client dropped with its weight: (0.5*1 + 1.0*3) / (1 + 3)
    assert federation_mean([0.5, float("nan"), 1.0], [1, 100, 3]) == pytest.approx(0.875)
    assert federation_mean([0.0, 1.0], [3, 1]) == pytest.approx(0.25)
    # equal weights = unweighted
    assert federation_mean([0.1, 0.7], [5, 5]) == pytest.approx(0.4)


def test_federation_mean_all_nan():
    assert math.isnan(federation_mean([float("nan"), float("nan")]))
    assert math.isnan(federation_mean([float("nan")], [3]))
