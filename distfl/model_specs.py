"""Models by name: what a model declares (:class:`ModelSpec`), :func:`register`, which checks
a spec and adds it to :data:`distfl.plugins.MODELS`, and the specs of the four built-in
models (their networks are in :mod:`distfl.models`).

A spec says in one place what the config check, the memory check, the trainers and the docs
need of a model: its name (``model.name``), its own keys under ``[model]`` (its ``Params``),
which samples it takes (:meth:`ModelSpec.accepts`) and how it is built
(:meth:`ModelSpec.build`, an ``nn.Module``). Nothing here imports torch: a config that names
a model is checked, and a run file that names one is read, without it; ``build`` imports what
it needs when it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from distfl.errors import ConfigError
from distfl.plugins import MODELS
from distfl.settings import Condition, Params, setting

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class NoParams(Params):
    """A model without keys of its own."""


class ModelSpec:
    """One model. Subclass it, set the class attributes, write :meth:`build` (and
    :meth:`accepts` where it takes only some samples), and decorate the class with
    :func:`register`."""

    #: ``model.name = name`` (lower case: letters, digits, _)
    name: ClassVar[str] = ""
    #: the docs' model table: the network, in a few words
    network: ClassVar[str] = ""
    #: the docs' model table: where it comes from
    source: ClassVar[str] = ""
    #: its own keys under ``[model]``: a frozen dataclass of :class:`~distfl.settings.Params`
    #: whose fields are declared with ``setting(default, allowed, doc)`` and whose ``check``
    #: refuses impossible values (``config.model.<key>`` reads them)
    Params: ClassVar[type[Params]] = NoParams

    @classmethod
    def accepts(cls, input_shape: tuple[int, ...], num_classes: int, params: Any) -> str:
        """ "" where the model takes samples of ``input_shape`` (one sample's shape, [C, H, W]
        for images) and ``num_classes`` classes; else what it needs, as the end of the
        sentence "it needs ..." (the config check's one line names the model and the
        dataset). Called before anything is built, without torch."""
        return ""

    @classmethod
    def build(cls, input_shape: tuple[int, ...], num_classes: int, params: Any) -> nn.Module:
        """A freshly initialised network (its parameters drawn from torch's global generator,
        which the run seeds) taking a batch [B, *input_shape] to logits [B, num_classes];
        ``params`` holds the model's own keys (an instance of its ``Params``). Checked
        before round 1 (:func:`distfl.models.built`, :func:`distfl.models.check_logits`): a
        ``torch.nn.Module`` with parameters whose last ``nn.Linear`` has ``num_classes``
        outputs, and floating logits that require grad."""
        raise NotImplementedError(f"{cls.__name__} has no build")

    @classmethod
    def parameter_count(cls, input_shape: tuple[int, ...], num_classes: int, params: Any):
        """The parameters of :meth:`build`'s network, counted without building it, for the
        memory check; None (the default): the check builds it on torch's meta device (which
        holds no values) and counts them."""
        return None

    @classmethod
    def activations_per_sample(cls, input_shape: tuple[int, ...], num_classes: int, params: Any):
        """float32 values one sample's forward pass produces (every layer's output), for the
        memory check; None (the default): measured with one forward pass of one sample on
        torch's meta device, every leaf module's output counted."""
        return None


def register(cls: type[ModelSpec]) -> type[ModelSpec]:
    """Class decorator: make ``cls`` available as ``model.name = cls.name``."""
    MODELS.check_class(cls, ModelSpec)
    if not (isinstance(cls.Params, type) and issubclass(cls.Params, Params)):
        raise TypeError(f"{cls.__name__}.Params must subclass distfl.settings.Params")
    if "name" in cls.Params.keys():
        raise ValueError(f"{cls.__name__}.Params.name: model.name names the model; rename it")
    cls.Params.check_declarations(cls.__name__)
    if cls.build.__func__ is ModelSpec.build.__func__:
        raise TypeError(f"{cls.__name__} has no build")
    return MODELS.add(cls)


def model_names() -> list[str]:
    """Every registered name, sorted."""
    return MODELS.names()


def model_spec(name: str) -> type[ModelSpec]:
    """The spec registered as ``name``; ConfigError naming the registered ones otherwise."""
    return MODELS.get(name)


def model_specs() -> list[type[ModelSpec]]:
    """Every registered spec, by name."""
    return MODELS.classes()


# -- the built-in models ----------------------------------------------------------------

#: the image models of :mod:`distfl.models`: (channels of the two convolutions, kernel
#: size, dense widths before the classes); the other built-in model is the MLP of
#: model.hidden
CONV_MODELS: dict[str, tuple[tuple[int, int], int, tuple[int, ...]]] = {
    "cnn": ((64, 64), 5, (384, 192)),
    "lenet5": ((6, 16), 5, (120, 84)),
    "mnist_cnn": ((64, 128), 3, (128,)),
}


def _image(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """[C, H, W] of an image shape; other shapes as one channel and one row."""
    if len(shape) == 3:
        return shape[0], shape[1], shape[2]
    return 1, 1, math.prod(shape)


def parameter_count(
    model: str, shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (64,)
) -> int:
    """The parameters of :func:`distfl.models.build_model` ``(model, shape, num_classes,
    hidden=hidden)``, counted without building it: the MLP's dense layers over the flattened
    input, or the image models' two "same" convolutions, each followed by a 2x2 max-pool,
    then their dense layers."""
    if model in CONV_MODELS:
        (c1, c2), k, dense = CONV_MODELS[model]
        c, h, w = _image(shape)
        count = c * c1 * k * k + c1 + c1 * c2 * k * k + c2
        width = c2 * (h // 2 // 2) * (w // 2 // 2)
    else:
        count, width, dense = 0, math.prod(shape), hidden
    for d in (*dense, num_classes):
        count += width * d + d
        width = d
    return count


def activations_per_sample(
    model: str, shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (64,)
) -> int:
    """float32 values one sample's forward pass produces, every layer's output (ReLU and
    pooling included) counted: a generous bound of what evaluating a client holds."""
    if model in CONV_MODELS:
        (c1, c2), _, dense = CONV_MODELS[model]
        c, h, w = _image(shape)
        h1, w1 = h // 2, w // 2
        count = 2 * c1 * h * w + c1 * h1 * w1 + 2 * c2 * h1 * w1 + c2 * (h1 // 2) * (w1 // 2)
    else:
        count, dense = 0, hidden
    return count + 2 * sum(dense) + num_classes


def _widths(key: str, widths: tuple[int, ...]) -> None:
    for i, h in enumerate(widths):
        if h < 1:
            raise ConfigError(f"model.{key}[{i}] = {h!r}: must be at least 1")


@dataclass(frozen=True)
class MLPParams(Params):
    hidden: tuple[int, ...] = setting((64,), "list of int ≥ 1", "hidden widths of the MLP")

    def check(self, config: Any) -> None:
        _widths("hidden", self.hidden)


@dataclass(frozen=True)
class ImageParams(Params):
    """The image models use no key of their own. ``model.hidden`` was a key of every model
    before each model declared its own: they take it still, unused, so that the configs and
    run files that give it read as they did (a run file's stored config is checked against
    the digest its state was written with). Set to another value than its default, it is
    refused: it would take no effect."""

    hidden: tuple[int, ...] = setting(
        (64,), "`[64]`", "not used (the MLP's widths; taken at its default so that configs and "
        "run files that give it read as before; another value is refused)",
    )  # fmt: skip

    conditions = {
        "hidden": Condition(("model.name",), "a model that reads it (the MLP's widths)",
                            lambda c: False)
    }  # fmt: skip

    def check(self, config: Any) -> None:
        _widths("hidden", self.hidden)


@register
class MLPSpec(ModelSpec):
    name = "mlp"
    network = "dense layers of `model.hidden` widths (default `[64]`), ReLU"
    source = "the project's small default"
    Params = MLPParams

    @classmethod
    def build(cls, input_shape, num_classes, params):
        from distfl.models import MLP

        return MLP(input_shape, num_classes, tuple(params.hidden))

    @classmethod
    def parameter_count(cls, input_shape, num_classes, params):
        return parameter_count(cls.name, tuple(input_shape), num_classes, tuple(params.hidden))

    @classmethod
    def activations_per_sample(cls, input_shape, num_classes, params):
        return activations_per_sample(
            cls.name, tuple(input_shape), num_classes, tuple(params.hidden)
        )


class _ImageSpec(ModelSpec):
    """Two "same" convolutions, each followed by ReLU and a 2x2 max-pooling: images of at
    least 4x4 pixels."""

    Params = ImageParams
    #: the class of :mod:`distfl.models` it builds
    network_class: ClassVar[str] = ""

    @classmethod
    def accepts(cls, input_shape, num_classes, params):
        if len(input_shape) == 3 and min(input_shape[1:]) >= 4:
            return ""
        return "images [C, H, W] of at least 4x4 pixels (two 2x2 poolings)"

    @classmethod
    def build(cls, input_shape, num_classes, params):
        from distfl import models

        return getattr(models, cls.network_class)(input_shape, num_classes)

    @classmethod
    def parameter_count(cls, input_shape, num_classes, params):
        return parameter_count(cls.name, tuple(input_shape), num_classes)

    @classmethod
    def activations_per_sample(cls, input_shape, num_classes, params):
        return activations_per_sample(cls.name, tuple(input_shape), num_classes)


@register
class SmallCNNSpec(_ImageSpec):
    name = "cnn"
    network = "two 5x5 conv blocks of 64 channels, dense 384-192-C"
    source = "the FedGWC paper's CNN (CIFAR)"
    network_class = "SmallCNN"


@register
class LeNet5Spec(_ImageSpec):
    name = "lenet5"
    network = "LeNet-5"
    source = "the FedGWC paper's FEMNIST model"
    network_class = "LeNet5"


@register
class MnistCNNSpec(_ImageSpec):
    name = "mnist_cnn"
    network = (
        "3x3 convolutions of 64 and 128 channels with 2x2 max-pooling, dense 128-C (a "
        "128-wide embedding)"
    )
    source = (
        "the EMD-CFL paper's MNIST CNN; the paper gives neither kernel nor pooling, 3x3 with "
        "2x2 max-pooling is this project's choice"
    )
    network_class = "MnistCNN"


#: the built-in models, in the order the docs list them
BUILT_IN = ("mlp", "cnn", "lenet5", "mnist_cnn")


__all__ = [
    "BUILT_IN",
    "CONV_MODELS",
    "ImageParams",
    "MLPParams",
    "ModelSpec",
    "NoParams",
    "Params",
    "activations_per_sample",
    "model_names",
    "model_spec",
    "model_specs",
    "parameter_count",
    "register",
    "setting",
]
