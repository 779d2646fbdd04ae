"""The run file's writer: the HDF5 file, written by rank 0 only, atomically: built in
memory, written beside, flushed, renamed (distfl.runfile.atomic); :mod:`~distfl.runfile.reader`
reads it back.

Layout (declared in full in distfl.runfile.layout; docs/run-file.md):

    /                 attrs: distfl_version, config (JSON), seed, world_size, created (the
                      run's first write), written (this write)
    /clients/         group [K], class_counts [K, C], num_train [K], num_test [K],
                      owner [K] (natural partitions: the writer or owner index of each client)
    /hierarchy/<id>   attrs parent, created_round, split_round; dataset members
    /final/           assignment [K], leaves [L] (strings), models [L, P] float32
    /metrics/         one resizable column per per-round metric (deterministic values);
                      /metrics/clusters/ the same per (round, cluster);
                      /metrics/evaluation/ per (evaluation round, evaluated cluster);
                      /metrics/membership/ per (round, leaf cluster, ground-truth group)
    /timing/          wall-clock columns (differ from run to run, kept apart from /metrics);
                      attrs trainer, loop_started, sum_bytes_per_param; /timing/workers/
                      per (round, worker rank)
    /state/           what exact resumption needs (attrs round, sha256, config_sha256;
                      models, algorithm)
    /world/           where the ranks of the launch that wrote the file ran: host [W],
                      local_rank [W], address [W]; attrs launcher, backend, rendezvous,
                      rendezvous_ip
    /integrity/       path [n], sha256 [n]: a SHA-256 of every other dataset and attribute
                      (distfl.runfile.integrity), checked whenever the file is read, as is
                      what the file holds against its stored config (distfl.runfile.contents)
"""

from __future__ import annotations

import datetime
import io
import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from distfl import __version__
from distfl.config import Config
from distfl.hierarchy import HierarchyNode
from distfl.runfile import integrity, layout
from distfl.runfile.atomic import MARK, USERBLOCK, DiskReserve, write_atomically
from distfl.runfile.digest import (
    config_digest,
    tree_digest,
)
from distfl.runfile.layout import FORMAT

#: arrays larger than this are written chunked and compressed (lossless LZF, which h5py
#: always has): FedGWC's K×K interaction matrices, EMD-CFL's distances, big client arrays
COMPRESS_ABOVE = 1 << 20


def _dataset(group: h5py.Group, name: str, values) -> h5py.Dataset:
    """``group[name] = values``, chunked and LZF-compressed above COMPRESS_ABOVE bytes."""
    values = np.asarray(values)
    if values.nbytes > COMPRESS_ABOVE and values.dtype.kind in "biuf" and values.ndim:
        return group.create_dataset(name, data=values, chunks=True, compression="lzf")
    return group.create_dataset(name, data=values)


def _write_tree(group: h5py.Group, tree: dict[str, Any]) -> None:
    """dict -> group, ndarray -> dataset, anything else -> a JSON attribute."""
    for key, value in tree.items():
        if isinstance(value, dict):
            _write_tree(group.create_group(key), value)
        elif isinstance(value, np.ndarray):
            _dataset(group, key, value)
        else:
            group.attrs[key] = json.dumps(value)


def storable(state: dict) -> dict:
    """An algorithm's or aggregator's state_dict as _write_tree stores it: nested dicts,
    arrays as arrays, numpy scalars as Python numbers, everything else as JSON."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out[key] = storable(value)
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = value
    return out


def write_hierarchy(group: h5py.Group, nodes: list[HierarchyNode]) -> None:
    """One subgroup per cluster node: attrs parent, created_round, split_round; datasets
    members and what the algorithm stored at its split."""
    for node in nodes:
        n = group.create_group(node.id)
        n.attrs["parent"] = node.parent
        n.attrs["created_round"] = node.created_round
        n.attrs["split_round"] = node.split_round
        _dataset(n, "members", np.asarray(node.members, dtype=np.int64))
        for name, values in node.datasets.items():
            _dataset(n, name, values)


def _column(group: h5py.Group, name: str, values: np.ndarray) -> None:
    """A resizable column (so that a later writer can append rounds)."""
    values = np.asarray(values)
    dtype = h5py.string_dtype() if values.dtype == object else values.dtype
    group.create_dataset(
        name,
        data=values,
        dtype=dtype,
        maxshape=(None, *values.shape[1:]),
        chunks=(max(1, min(len(values), 1024)), *values.shape[1:]),
    )


def write_run_file(
    path: str | Path,
    *,
    config: Config,
    world_size: int,
    clients: dict[str, np.ndarray],
    world: dict | None = None,
    hierarchy: list[HierarchyNode],
    leaves: list[str],
    assignment: np.ndarray,
    leaf_models: np.ndarray,
    tables: dict[str, dict[str, np.ndarray]],
    state: dict[str, Any],
    trainer: str = "",
    loop_started: float = 0.0,
    sum_bytes_per_param: float = 0.0,
    created: str = "",
    room: DiskReserve | None = None,
) -> str:
    """Write the whole run file to ``path`` atomically (a reader never sees half a file):
    built in memory, sealed with its integrity record, then put in place by
    :func:`~distfl.runfile.atomic.write_atomically` (a failed write leaves the previous file
    and no temporary one; :class:`~distfl.runfile.atomic.RunFileWriteError`).

    ``tables``: the columns of each per-row table, by the table's key in
    :data:`distfl.runfile.layout.TABLES` (``Record.arrays()``). ``created``: when the run's
    first file was written (kept on resume); default now. ``room``: the disk's room held
    for this write (:class:`~distfl.runfile.atomic.DiskReserve`). Returns the ``created``
    it wrote."""
    path = Path(path)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    image = io.BytesIO()
    with h5py.File(image, "w", userblock_size=USERBLOCK) as f:
        f.attrs["distfl_version"] = __version__
        f.attrs["format"] = FORMAT
        f.attrs["config"] = config.to_json()
        f.attrs["seed"] = config.run.seed
        f.attrs["world_size"] = world_size
        f.attrs["created"] = created or now
        f.attrs["written"] = now
        g = f.create_group("clients")
        for name, values in clients.items():
            _dataset(g, name, values)
        write_hierarchy(f.create_group("hierarchy"), hierarchy)
        fin = f.create_group("final")
        _dataset(fin, "assignment", np.asarray(assignment, dtype=np.int64))
        fin.create_dataset("leaves", data=np.array(leaves, dtype=h5py.string_dtype()))
        fin.create_dataset("models", data=np.asarray(leaf_models, dtype=np.float32))
        for table in layout.TABLES:  # by the one declaration of the layout
            if table.optional and not any(len(v) for v in tables.get(table.key, {}).values()):
                continue
            g = f.require_group(table.path)
            for name, values in tables.get(table.key, {}).items():
                _column(g, name, values)
        for key in sorted(k for k in tables if k not in layout.BY_KEY):  # the algorithm's
            g = f.require_group(layout.table_path(key))
            for name, values in tables[key].items():
                _column(g, name, values)
            # its columns' order (the datasets of a group are listed by name)
            g.attrs["columns"] = np.array(list(tables[key]), dtype=h5py.string_dtype())
        t = f["timing"]
        t.attrs["trainer"] = trainer
        # when the writing process's rounds loop began (Unix seconds): launch to this
        # instant is the start-up (imports, data, partition, process group)
        t.attrs["loop_started"] = loop_started
        # bytes each rank hands to the exact sums' reduce per model parameter (besides
        # the 8 bytes of Σ n_k per model), in the last round that trained
        t.attrs["sum_bytes_per_param"] = sum_bytes_per_param
        if world is not None:
            _write_world(f.create_group("world"), world)
        s = f.create_group("state")
        _write_tree(s, state)
        s.attrs["sha256"] = tree_digest(state)
        s.attrs["config_sha256"] = config_digest(config)
        integrity.seal(f)
    data = image.getbuffer()
    data[: len(MARK)] = MARK  # the user block: HDF5 leaves it to the file's writer
    write_atomically(path, data, room)
    return created or now


def _write_world(group: h5py.Group, world: dict) -> None:
    strings = h5py.string_dtype()
    for key, value in world.items():
        if key == "local_rank":
            group.create_dataset(key, data=np.asarray(value, dtype=np.int64))
        elif isinstance(value, list):
            group.create_dataset(key, data=np.array(value, dtype=strings))
        else:
            group.attrs[key] = value


__all__ = ["COMPRESS_ABOVE", "storable", "write_hierarchy", "write_run_file"]
