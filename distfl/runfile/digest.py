"""The digest of what a run's config decides (``/state@config_sha256``): every key but
those a resume may change, with the keys added since a file was written left out at the
value that reproduces what such a file's run computed; and the digest of the state tree
itself (``/state@sha256``, :func:`tree_digest`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np

from distfl.config import Config
from distfl.config.participation import ParticipationSection
from distfl.config.privacy import PrivacySection

#: keys that may differ between a checkpoint and the run that resumes it: they change
#: where and how long a run goes, never what it computes
RESUMABLE_CHANGES = (
    "run.rounds",
    "run.out",
    "run.progress",
    "run.export",
    "run.device",
    "comm.backend",
    "comm.timeout_s",
    "checkpoint.every",
    "data.cache_mb",
    "server.placement",
    "eval.loss_target",
)


#: config keys added after format 3, each with the value that computes what a run did
#: before the key existed: a key that holds it is left out of :func:`config_digest`, so a
#: file written before the key still matches its stored config (read back with the value)
ADDED_KEYS: dict[str, Any] = {
    "train.optimizer": "sgd",
    "train.beta1": 0.9,
    "train.beta2": 0.999,
    "train.eps": 1e-8,
    "eval.coverage": False,
    "eval.loss_target": 0.0,
    "run.data_seed": -1,
    "run.init_seed": -1,
    "run.sampling_seed": -1,
    "data.rotation_span": 1.0,
    "data.held_out": 0.0,
    "train.batches": "stream",
    # [participation] at its defaults: every client always available, no clock
    **{f"participation.{k}": v for k, v in dataclasses.asdict(ParticipationSection()).items()},
    # [privacy] at its defaults: no clipping, no noise
    **{f"privacy.{k}": v for k, v in dataclasses.asdict(PrivacySection()).items()},
}
#: keys of a group of ``data.groups`` added since, likewise: one at this value is left out of
#: the group's entry in :func:`config_digest`
ADDED_GROUP_KEYS: dict[str, Any] = {
    "availability": -1.0,
    "dropout": -1.0,
    "speed_scale": 1.0,
    "bandwidth_scale": 1.0,
}


def config_digest(config: Config, *, leave_out: frozenset[str] = frozenset()) -> str:
    """SHA-256 of what in ``config`` decides what a run computes (every key but those a
    resume may change, :data:`RESUMABLE_CHANGES`, and ``run.plugins``, where the code comes
    from), in a canonical JSON: written to ``/state@config_sha256`` with the state it
    computed, so that a stored config changed since is not read as the one of the run. A key
    of :data:`ADDED_KEYS` at its former behaviour's value is left out, and so are the keys
    ``leave_out`` names."""
    keys = _flatten(config.to_dict())
    keys["data.groups"] = [
        {k: v for k, v in group.items() if not (k in ADDED_GROUP_KEYS and v == ADDED_GROUP_KEYS[k])}
        for group in keys.get("data.groups", ())
    ]
    kept = {
        k: v
        for k, v in keys.items()
        if k not in RESUMABLE_CHANGES and k != "run.plugins" and k not in leave_out
        and not (k in ADDED_KEYS and v == ADDED_KEYS[k])
    }  # fmt: skip
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def added_algorithm_keys(config: Config) -> frozenset[str]:
    """The keys of ``config``'s algorithm that hold the value its ``stored_defaults`` gives a
    file written before the key existed (``algorithm.KEY``): such a file's digest was
    computed without them."""
    params = config.algorithm.params
    stored = getattr(type(params), "stored_defaults", {})
    return frozenset(
        f"algorithm.{key}" for key, value in stored.items()
        if getattr(params, key, None) == value
    )  # fmt: skip


def _flatten(d: dict[str, Any]) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, sec in d.items() for k, v in sec.items()}


def tree_digest(tree: dict[str, Any]) -> str:
    """SHA-256 of a state tree in a canonical order: names, dtypes, shapes, bytes, values."""
    h = hashlib.sha256()

    def walk(t: dict[str, Any], prefix: str) -> None:
        for key in sorted(t):
            value = t[key]
            h.update(f"{prefix}/{key}".encode())
            if isinstance(value, dict):
                walk(value, f"{prefix}/{key}")
            elif isinstance(value, np.ndarray):
                a = np.ascontiguousarray(value)
                h.update(f"{a.dtype.str}{a.shape}".encode())
                h.update(a.tobytes())
            else:
                h.update(json.dumps(value, sort_keys=True).encode())

    walk(tree, "")
    return h.hexdigest()


__all__ = [
    "ADDED_GROUP_KEYS", "ADDED_KEYS", "RESUMABLE_CHANGES", "added_algorithm_keys",
    "config_digest", "tree_digest",
]  # fmt: skip
