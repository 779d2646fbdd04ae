"""Models: the built-in networks (an MLP, the small CNN of the FedGWC paper, LeNet-5, the
EMD-CFL paper's MNIST CNN), and :func:`build_model`, which builds any registered model by
name (:mod:`distfl.model_specs`: the built-in ones, and one of your own registered through
``run.plugins``).

Each takes the dataset's input shape [C, H, W] and class count. The convolutions are
padded ("same"), so the CNN and LeNet-5 also fit the 8x8 digits; the flattened size is
measured with one dummy forward pass.

A model state travels as one contiguous float32 flat buffer of its parameters
(:func:`flat_params`, :func:`load_flat`). Buffers (batch norm's running statistics) are no
part of it: loading a state puts them back to the values the model was built with, so they
never depend on what a rank trained before.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from distfl.errors import ConfigError
from distfl.plugins import MODELS, defined_in, raised
from distfl.pooling import MaxPool2x2


def _flat_size(features: nn.Module, input_shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, *input_shape)).numel())


class MLP(nn.Module):
    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (64,)
    ):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(input_shape)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvNet(nn.Module):
    """Two conv blocks ("same" convolution, ReLU, 2x2 max-pool) and dense layers (the hidden
    widths, then the classes): the shape of the papers' CNNs."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        *,
        channels: tuple[int, int],
        dense: tuple[int, ...],
        kernel: int = 5,
    ):
        super().__init__()
        c1, c2 = channels
        pad = kernel // 2
        self.features = nn.Sequential(
            nn.Conv2d(input_shape[0], c1, kernel, padding=pad),
            nn.ReLU(),
            MaxPool2x2(),
            nn.Conv2d(c1, c2, kernel, padding=pad),
            nn.ReLU(),
            MaxPool2x2(),
            nn.Flatten(),
        )
        width = _flat_size(self.features, input_shape)
        layers: list[nn.Module] = []
        for d in dense:
            layers += [nn.Linear(width, d), nn.ReLU()]
            width = d
        layers.append(nn.Linear(width, num_classes))
        self.classifier = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class SmallCNN(ConvNet):
    """64 and 64 channels, dense 384-192-classes: the CIFAR model of the FedGWC paper's
    experiments."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes, channels=(64, 64), dense=(384, 192))


class LeNet5(ConvNet):
    """LeNet-5 (6 and 16 channels, 120-84-classes), the FEMNIST model of the FedGWC paper."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes, channels=(6, 16), dense=(120, 84))


class MnistCNN(ConvNet):
    """The simple CNN of the EMD-CFL paper's MNIST experiments (appendix D.2): convolutions of
    64 and 128 channels, one dense layer of 128 (the 128-wide embedding), then the classes.
    The paper gives neither kernel nor pooling; 3x3 "same" kernels with 2x2 max-pooling are
    this project's choice."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes, channels=(64, 128), dense=(128,), kernel=3)


def build_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    hidden: tuple[int, ...] | None = None,
    params: Any = None,
) -> nn.Module:
    """A freshly initialised model ``model.name = name`` (a registered model) for samples of
    ``input_shape`` and ``num_classes`` classes. ``params``: its own keys (``config.model
    .params``; by default their defaults); ``hidden``: ``model.hidden`` in their place (the
    built-in models' one key). A model with buffers keeps a copy of their initial values,
    which :func:`load_flat` restores."""
    spec = MODELS.get(name)
    if params is None:
        params = spec.Params()
    if hidden is not None:
        params = spec.Params.made(params, {"hidden": tuple(hidden)})
    model = built(spec, tuple(input_shape), num_classes, params)
    initial = {n: b.detach().clone() for n, b in model.named_buffers()}
    if initial:
        model._distfl_initial_buffers = initial
    check_logits(model, tuple(input_shape), num_classes, who=model_named(spec))
    return model


def model_named(spec: type) -> str:
    """How a one-line error names a model: ``model.name = 'x' (the file defining it)``."""
    return f"model.name = {spec.name!r} ({defined_in(spec)})"


def built(spec: type, input_shape: tuple[int, ...], num_classes: int, params: Any) -> nn.Module:
    """``spec.build(...)``, refused in one line naming the model (a ConfigError) where it
    raises (its ``sys.exit`` too), gives no ``torch.nn.Module``, a module without
    parameters or without an ``nn.Linear`` of ``num_classes`` outputs last (the classifier,
    whose input is the embedding some algorithms read: :func:`last_linear`)."""
    who = model_named(spec)
    try:
        model = spec.build(input_shape, num_classes, params)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise ConfigError(f"{who}: build() raised {raised(exc)}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{who}: build() returned {type(model).__name__}, not a torch.nn.Module")
    if next(iter(model.parameters()), None) is None:
        raise ConfigError(f"{who}: build() gave a module without parameters: nothing to train")
    linear = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linear or linear[-1].out_features != num_classes:
        last = f"its last gives {linear[-1].out_features}" if linear else "it has none"
        raise ConfigError(
            f"{who}: build() gave a module whose last nn.Linear is not a classifier of the "
            f"{num_classes} classes ({last}); distfl reads the classes and the embedding from it"
        )
    return model


def check_logits(model: nn.Module, input_shape: tuple[int, ...], num_classes: int, *,
                 who: str) -> None:  # fmt: skip
    """Refuse (a ConfigError that begins with ``who``) a model whose forward pass of a batch
    of two zero samples raises or gives anything but logits of shape [2, num_classes], of a
    floating dtype, that require grad (training could not change detached ones). The pass
    runs in eval mode (no dropout draw, no running statistics moved) with torch's generator
    put back after it: the model and the run's bits are as they were."""
    modes = [(m, m.training) for m in model.modules()]
    batch = f"a batch of 2 samples of shape {list(input_shape)}"
    try:
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            model.eval()
            out = model(torch.zeros(2, *input_shape))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise ConfigError(f"{who}: {batch} raised {raised(exc)}") from None
    finally:
        for m, mode in modes:
            m.training = mode
    want = f"[2, {num_classes}] ([batch, num_classes])"
    wrong = ""
    if not isinstance(out, torch.Tensor):
        wrong = f"gave {type(out).__name__}, not a tensor of logits {want}"
    elif tuple(out.shape) != (2, num_classes):
        wrong = f"gave logits of shape {list(out.shape)}; expected {want}"
    elif not out.dtype.is_floating_point:
        wrong = f"gave logits of dtype {out.dtype}; expected a floating dtype"
    elif not out.requires_grad:
        wrong = ("gave logits that do not require grad (detached from its parameters): "
                 "training could not change them")  # fmt: skip
    if wrong:
        raise ConfigError(f"{who}: {batch} {wrong}")


def last_linear(model: nn.Module) -> nn.Linear:
    """The model's last ``nn.Linear`` (its input is the penultimate-layer embedding)."""
    return [m for m in model.modules() if isinstance(m, nn.Linear)][-1]


def last_linear_inputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The penultimate-layer embedding: the input of the model's last nn.Linear."""
    last = last_linear(model)
    seen: list[torch.Tensor] = []
    handle = last.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0]))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0].reshape(len(x), -1)


def last_layer_span(model: nn.Module) -> tuple[int, int]:
    """[start, stop) of the last ``nn.Linear``'s parameters (weight, then bias) in the flat
    model (:func:`flat_params`' order); (0, 0) when they do not lie together there."""
    last = last_linear(model)
    own = {id(p) for p in last.parameters()}
    offset, start, stop = 0, None, None
    for p in model.parameters():
        if id(p) in own:
            start = offset if start is None else start
            stop = offset + p.numel()
        elif start is not None and stop is not None and stop == offset:
            break
        offset += p.numel()
    if start is None or stop - start != sum(p.numel() for p in last.parameters()):
        return (0, 0)
    return (start, stop)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flat_params(model: nn.Module) -> torch.Tensor:
    """The model's parameters as one new contiguous float32 vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).to(torch.float32)


def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy a flat vector into the model's parameters, in place, and put its buffers back to
    the values it was built with (:func:`build_model`)."""
    expected = num_params(model)
    if flat.numel() != expected:
        raise ValueError(f"flat buffer holds {flat.numel()} values, the model {expected}")
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n
        initial = getattr(model, "_distfl_initial_buffers", None)
        if initial:
            for name, b in model.named_buffers():
                b.copy_(initial[name])
