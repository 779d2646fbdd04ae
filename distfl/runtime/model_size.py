"""What a run's model costs whatever its clients, for the memory estimate of
:mod:`distfl.runtime.capacity`: its parameters and a sample's activations
(:func:`model_counts`), and cuBLAS's fixed workspace where it trains on CUDA
(:func:`cuda_workspace_bytes`).

A built-in model's are counted from its name, the input shape, the classes and
``model.hidden`` without building it (:func:`parameter_count`,
:func:`activations_per_sample`); another model's are what its spec declares
(``ModelSpec.parameter_count``, ``ModelSpec.activations_per_sample``), or else measured
(:func:`measured_counts`): the model built on torch's meta device, which holds no values,
and one forward pass of one sample there."""

from __future__ import annotations

import functools
import os
from typing import Any

from distfl.config import Config
from distfl.errors import ConfigError
from distfl.model_specs import (
    CONV_MODELS,
    activations_per_sample,
    model_spec,
    parameter_count,
)
from distfl.plugins import raised


def config_parameters(config) -> int:
    """The parameters of ``config``'s model on its dataset (ConfigError for a model or a
    dataset of a plug-in not imported)."""
    from distfl.datasets import dataset_spec

    spec = dataset_spec(config.data.dataset)
    shape = tuple(spec.input_shape(config))
    return model_counts(config.model.name, shape, spec.classes(config), config.model.params)[0]


def model_counts(
    name: str, shape: tuple[int, ...], num_classes: int, params: Any
) -> tuple[int, int]:
    """(parameters, float32 activations per sample) of ``model.name = name`` with its own keys
    ``params`` (``config.model.params``) for samples of ``shape``."""
    if name == "mlp" or name in CONV_MODELS:
        hidden = tuple(params.hidden)
        return (
            parameter_count(name, shape, num_classes, hidden),
            activations_per_sample(name, shape, num_classes, hidden),
        )
    return _declared_or_measured(model_spec(name), tuple(shape), num_classes, params)


@functools.lru_cache(maxsize=32)
def _declared_or_measured(
    spec: type, shape: tuple[int, ...], num_classes: int, params: Any
) -> tuple[int, int]:
    count = spec.parameter_count(shape, num_classes, params)
    act = spec.activations_per_sample(shape, num_classes, params)
    if count is None or act is None:
        measured = measured_counts(spec, shape, num_classes, params)
        count = measured[0] if count is None else count
        act = measured[1] if act is None else act
    return int(count), int(act)


def measured_counts(spec, shape: tuple[int, ...], num_classes: int, params: Any) -> tuple[int, int]:
    """(parameters, float32 values one sample's forward pass produces) of ``spec``'s model,
    built on torch's meta device (no memory, no values): every tensor an operation of the
    forward pass returns is counted (views included, as the built-in models' formulas
    count every layer's output: a generous bound). A model that cannot run on the meta
    device is built on the CPU for the measure."""
    import torch
    from torch.overrides import TorchFunctionMode

    from distfl.models import built, model_named

    class Count(TorchFunctionMode):
        values = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.values += t.numel()
            return out

    def measure(device: str) -> tuple[int, int]:
        with torch.random.fork_rng(devices=[]), torch.device(device):
            model = built(spec, tuple(shape), num_classes, params)
            count = sum(p.numel() for p in model.parameters())
            x = torch.zeros(1, *shape)
            with torch.no_grad(), Count() as counter:
                model(x)
        return count, counter.values

    try:
        return measure("meta")
    except KeyboardInterrupt:
        raise
    except BaseException:  # an operation without a meta kernel, a value read (.item())
        pass
    try:
        return measure("cpu")
    except (ConfigError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # its forward pass: one line naming it (its sys.exit too)
        raise ConfigError(f"{model_named(spec)}: a forward pass of one sample of shape "
                          f"{list(shape)} raised {raised(exc)}") from None  # fmt: skip


def workspace_config() -> str:
    """The ``CUBLAS_WORKSPACE_CONFIG`` a CUDA run trains with: the environment's when it is
    one of the deterministic ones, else the one :func:`~distfl.runtime.device.prepare_device`
    sets."""
    from distfl.runtime.device import DETERMINISTIC_WORKSPACES

    got = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    return got if got in DETERMINISTIC_WORKSPACES else DETERMINISTIC_WORKSPACES[0]


def cuda_workspace_bytes(config: Config) -> int:
    """The bytes of cuBLAS's workspace where the run trains on CUDA (``run.device`` cuda,
    or auto with a CUDA device), else 0. ``:SIZE:COUNT`` pairs: COUNT buffers of SIZE KiB
    each, allocated by torch's caching allocator on the device's first matrix product."""
    device = config.run.device
    if device == "cpu":
        return 0
    if device == "auto":
        import torch

        if not torch.cuda.is_available():
            return 0
    fields = workspace_config().split(":")[1:]
    return sum(
        int(size) * 1024 * int(count) for size, count in zip(fields[::2], fields[1::2], strict=True)
    )
