"""The HDF5 run file, written by rank 0 only, atomically: write beside, flush, rename.

Layout (DESIGN.md):

    /                 attrs: distfl_version, config (JSON), seed, world_size, created
    /clients/         group [K], class_counts [K, C], num_train [K], num_test [K]
    /hierarchy/<id>   attrs parent, created_round, split_round; dataset members
    /final/           assignment [K], leaves [L] (strings), models [L, P] float32
    /metrics/         one resizable column per per-round metric (deterministic values)
    /timing/          wall-clock columns (differ from run to run, kept apart from /metrics)
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from distfl import __version__
from distfl.config import Config


@dataclass
class HierarchyNode:
    id: str
    parent: str
    created_round: int
    members: np.ndarray
    split_round: int = -1
    datasets: dict[str, np.ndarray] = field(default_factory=dict)


def _column(group: h5py.Group, name: str, values: np.ndarray) -> None:
    values = np.asarray(values)
    group.create_dataset(
        name, data=values, maxshape=(None, *values.shape[1:]), chunks=True if values.size else None
    )


def write_run_file(
    path: str | Path,
    *,
    config: Config,
    world_size: int,
    clients: dict[str, np.ndarray],
    hierarchy: list[HierarchyNode],
    leaves: list[str],
    assignment: np.ndarray,
    leaf_models: np.ndarray,
    metrics: dict[str, np.ndarray],
    timing: dict[str, np.ndarray],
) -> None:
    """Write the whole run file to ``path`` atomically (a reader never sees half a file)."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["distfl_version"] = __version__
            f.attrs["config"] = config.to_json()
            f.attrs["seed"] = config.run.seed
            f.attrs["world_size"] = world_size
            f.attrs["created"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            g = f.create_group("clients")
            for name, values in clients.items():
                g.create_dataset(name, data=values)
            h = f.create_group("hierarchy")
            for node in hierarchy:
                n = h.create_group(node.id)
                n.attrs["parent"] = node.parent
                n.attrs["created_round"] = node.created_round
                n.attrs["split_round"] = node.split_round
                n.create_dataset("members", data=np.asarray(node.members, dtype=np.int64))
                for name, values in node.datasets.items():
                    n.create_dataset(name, data=values)
            fin = f.create_group("final")
            fin.create_dataset("assignment", data=np.asarray(assignment, dtype=np.int64))
            fin.create_dataset("leaves", data=np.array(leaves, dtype=h5py.string_dtype()))
            fin.create_dataset("models", data=np.asarray(leaf_models, dtype=np.float32))
            m = f.create_group("metrics")
            for name, values in metrics.items():
                _column(m, name, values)
            t = f.create_group("timing")
            for name, values in timing.items():
                _column(t, name, values)
            f.flush()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
