"""Every key with its default, the values it allows and what it means, as the
configuration reference (``distfl keys``, the docs site) lists them."""

from __future__ import annotations

import dataclasses
import json
from typing import get_type_hints

from distfl.config.parse import describe_type
from distfl.config.schema import AlgorithmSection, Config
from distfl.plugins import ALGORITHMS, DATASETS, MODELS


def describe_keys() -> list[tuple[str, str, str]]:
    """(key, type, default) of every config key but the algorithms' own, for ``distfl keys``
    (those are in :func:`describe_algorithm_keys`)."""
    rows = []
    for section, cls in get_type_hints(Config).items():
        if section == "algorithm":
            names = ", ".join(ALGORITHMS.names())
            rows.append(("algorithm.name", f"one of {names}", json.dumps(AlgorithmSection.name)))
            continue
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name == "params":  # a dataset's or a model's own keys: describe_*_keys
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            rows.append((f"{section}.{f.name}", describe_type(hints[f.name]), json.dumps(default)))
    return rows


def describe_dataset_keys() -> dict[str, list[tuple[str, str, str]]]:
    """Per dataset name: (key, type, default) of each of its own keys (under [data])."""
    out = {}
    for spec in DATASETS.classes():
        hints = get_type_hints(spec.Params)
        out[spec.name] = [
            (f"data.{f.name}", describe_type(hints[f.name]), json.dumps(f.default))
            for f in dataclasses.fields(spec.Params)
        ]
    return out


def describe_model_keys() -> dict[str, list[tuple[str, str, str]]]:
    """Per model name: (key, type, default) of each of its own keys (under [model])."""
    out = {}
    for spec in MODELS.classes():
        hints = get_type_hints(spec.Params)
        out[spec.name] = [
            (f"model.{f.name}", describe_type(hints[f.name]), json.dumps(f.default))
            for f in dataclasses.fields(spec.Params)
        ]
    return out


def describe_algorithm_keys() -> dict[str, list[tuple[str, str, str]]]:
    """Per algorithm name: (key, type, default) of each of its own keys."""
    out = {}
    for name in ALGORITHMS.names():
        params = ALGORITHMS.get(name).Params
        hints = get_type_hints(params)
        out[name] = [
            (f"algorithm.{f.name}", describe_type(hints[f.name]), json.dumps(f.default))
            for f in dataclasses.fields(params)
        ]
    return out
