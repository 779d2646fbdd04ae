"""distfl.pooling: 2x2 max-pooling without a gradient as the maximum of four strided
quarters, checked against torch's max_pool2d (ties, NaN, infinities, odd sizes; bit for bit
but a zero's sign, and a built-in CNN's outputs bit for bit), and torch's kernel itself
wherever a gradient or another layer is wanted."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from distfl.models import ConvNet, LeNet5
from distfl.pooling import MaxPool2x2, max_pool, max_pool_2x2, plain_2x2


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.view(torch.int32), b.view(torch.int32))
    )


@pytest.mark.parametrize("shape", [(3, 2, 8, 8), (2, 3, 7, 9), (1, 1, 2, 2), (4, 5, 3, 3)])
def test_values_are_torchs_bits(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    x = torch.relu(x.round())  # zeros and small integers: windows with tied maxima
    x.view(-1)[::7] = -0.0
    with torch.no_grad():
        ours, torchs = max_pool_2x2(x), F.max_pool2d(x, 2)
    assert torch.equal(ours, torchs) and ours.is_contiguous()
    # bits differ only where a zero maximum carries the other sign
    differ = ours.view(torch.int32) != torchs.view(torch.int32)
    assert bool((ours[differ] == 0).all())
    x = x.abs()  # no -0.0 left: every bit torch's
    with torch.no_grad():
        assert same_bits(max_pool_2x2(x), F.max_pool2d(x, 2))


def test_a_window_past_the_edge_is_torchs_error():
    with pytest.raises(RuntimeError, match="too small"):
        max_pool_2x2(torch.zeros(2, 6, 1, 5))


def test_nan_and_infinities_as_torch():
    x = torch.tensor([[[[1.0, float("nan"), 2.0, 3.0],
                        [0.0, 5.0, float("inf"), -1.0],
                        [-float("inf"), -float("inf"), 4.0, 4.0],
                        [-float("inf"), -float("inf"), 4.0, float("nan")]]]])  # fmt: skip
    ours = max_pool_2x2(x)
    expected = torch.tensor([[[[float("nan"), float("inf")], [-float("inf"), float("nan")]]]])
    assert torch.equal(torch.isnan(ours), torch.isnan(expected))
    assert torch.equal(torch.nan_to_num(ours), torch.nan_to_num(expected))
    assert torch.equal(torch.isnan(F.max_pool2d(x, 2)), torch.isnan(ours))


def test_a_gradient_takes_torchs_kernel():
    x = torch.relu(torch.randn(2, 3, 6, 6).round()).requires_grad_()
    y = max_pool_2x2(x)
    assert y.grad_fn is not None and "MaxPool2D" in type(y.grad_fn).__name__
    grad = torch.randn_like(y)
    (ours,) = torch.autograd.grad(y, x, grad)
    x2 = x.detach().clone().requires_grad_()
    (torchs,) = torch.autograd.grad(F.max_pool2d(x2, 2), x2, grad)
    assert torch.equal(ours, torchs)
    # one gradient per window, where a window has tied maxima included
    assert int((ours != 0).sum()) <= y.numel()


def test_under_torch_func_torchs_kernel():
    from torch.func import vmap

    x = torch.randn(3, 2, 1, 4, 4)
    assert torch.equal(
        vmap(max_pool_2x2)(x), F.max_pool2d(x.reshape(6, 1, 4, 4), 2).view(3, 2, 1, 2, 2)
    )


def test_plain_2x2_and_other_layers():
    assert (
        plain_2x2(nn.MaxPool2d(2))
        and plain_2x2(MaxPool2x2())
        and plain_2x2(nn.MaxPool2d((2, 2), 2))
    )
    others = [
        nn.MaxPool2d(3),
        nn.MaxPool2d(2, 1),
        nn.MaxPool2d(2, padding=1),
        nn.MaxPool2d(2, ceil_mode=True),
    ]
    x = torch.randn(2, 3, 7, 7)
    for layer in others:
        assert not plain_2x2(layer)
        assert torch.equal(max_pool(layer, x), layer(x))
    assert torch.equal(max_pool(nn.MaxPool2d(2), x), F.max_pool2d(x, 2))


def test_built_in_cnn_evaluates_as_with_torchs_pooling():
    torch.manual_seed(3)
    model = LeNet5((1, 28, 28), 10)
    assert sum(isinstance(m, MaxPool2x2) for m in model.modules()) == 2
    reference = ConvNet((1, 28, 28), 10, channels=(6, 16), dense=(120, 84))
    reference.load_state_dict(model.state_dict())
    for i, m in enumerate(reference.features):
        if isinstance(m, MaxPool2x2):
            reference.features[i] = nn.MaxPool2d(2)
            reference.features[i].forward = lambda x: F.max_pool2d(x, 2)
    x = torch.randn(37, 1, 28, 28)
    with torch.no_grad():
        assert same_bits(model(x), reference(x))
