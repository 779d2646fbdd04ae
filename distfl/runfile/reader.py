"""The run file's reader: :func:`read_run_file` reads and verifies a file that
:mod:`~distfl.runfile.writer` wrote (its integrity record, its config, the shapes and values
of every part against that config: :mod:`~distfl.runfile.integrity`,
:mod:`~distfl.runfile.contents`) into a :class:`RunFile`, what a resume restores and what
:class:`~distfl.runfile.run.Run`, the one model every reader of results uses, holds; and
:func:`check_resumable`, which refuses to resume under a config that would change the
computation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from distfl.config import Config, from_json
from distfl.errors import CheckpointError, ConfigError
from distfl.hierarchy import HierarchyNode
from distfl.paths import regular_file
from distfl.runfile import integrity, layout
from distfl.runfile.atomic import why
from distfl.runfile.contents import Contents
from distfl.runfile.digest import (
    RESUMABLE_CHANGES,
    _flatten,
    added_algorithm_keys,
    config_digest,
    tree_digest,
)
from distfl.runfile.layout import FORMAT
from distfl.text import printable

#: /state's attributes that are the file's own, not part of the state it holds
STATE_OWN = ("sha256", "config_sha256")


def _read_tree(group: h5py.Group, contents: Contents | None = None) -> dict[str, Any]:
    """group -> dict, dataset -> array, attribute -> its JSON value (``contents``: the
    checks of the file it is read from, which bound the JSON's nesting)."""
    parse = json.loads if contents is None else contents.json_value
    tree: dict[str, Any] = {}
    for key, value in group.attrs.items():
        if key not in STATE_OWN:
            tree[key] = parse(value) if contents is None else parse(value, f"{group.name}@{key}")
    for key, item in group.items():
        tree[key] = _read_tree(item, contents) if isinstance(item, h5py.Group) else item[()]
    return tree


def read_hierarchy(group: h5py.Group) -> list[HierarchyNode]:
    return [
        HierarchyNode(
            id=node_id,
            parent=str(g.attrs["parent"]),
            created_round=int(g.attrs["created_round"]),
            split_round=int(g.attrs["split_round"]),
            members=g["members"][()],
            datasets={k: g[k][()] for k in g if k != "members"},
        )
        for node_id, g in group.items()
    ]


@dataclass
class RunFile:
    """What a run file holds, read back for resumption or inspection: everything but the
    cluster models of /final (and, with ``state=False``, /state's arrays)."""

    config: Config
    world_size: int
    hierarchy: list[HierarchyNode]
    state: dict[str, Any]
    #: every per-row table by its key in distfl.runfile.layout.TABLES (a table a file
    #: written before it existed lacks is {}), then the algorithm's own tables by
    #: ``tables/<name>`` (/metrics/tables/<name>); cluster ids as str
    tables: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    #: /clients: group, class_counts, num_train, num_test, accuracy (owner, natural
    #: partitions)
    clients: dict[str, np.ndarray] = field(default_factory=dict)
    #: /final/leaves (ids) and /final/assignment (each client's index into them)
    leaves: list[str] = field(default_factory=list)
    assignment: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: /world: where the ranks of the launch that wrote the file ran (None: not recorded)
    world: dict[str, Any] | None = None
    #: the local trainer the workers used ("" before it was recorded)
    trainer: str = ""
    #: bytes each rank hands to the exact sums' reduce per model parameter (0: not recorded)
    sum_bytes_per_param: float = 0.0
    #: when the loop of rounds of the launch that wrote the file began (Unix seconds; 0: not
    #: recorded)
    loop_started: float = 0.0
    #: the distfl that wrote the file; when the run's first file was written; this write
    version: str = ""
    created: str = ""
    written: str = ""
    #: whether an integrity record covered every part (False: a file without one, such as
    #: distfl 0.1.0's, of which only /state's SHA-256 was checked: its contents are
    #: unverified)
    verified: bool = True

    @property
    def metrics(self) -> dict[str, np.ndarray]:
        return self.tables.get("metrics", {})

    @property
    def cluster_metrics(self) -> dict[str, np.ndarray]:
        return self.tables.get("clusters", {})

    @property
    def evaluation(self) -> dict[str, np.ndarray]:
        return self.tables.get("evaluation", {})

    @property
    def membership(self) -> dict[str, np.ndarray]:
        return self.tables.get("membership", {})

    @property
    def timing(self) -> dict[str, np.ndarray]:
        return self.tables.get("timing", {})

    @property
    def worker_timing(self) -> dict[str, np.ndarray]:
        return self.tables.get("workers", {})


def _read_table(f: h5py.File, table: layout.Table) -> dict[str, np.ndarray]:
    g = f.get(table.path)
    if g is None:
        return {}
    out = {k: v[()] for k, v in g.items() if isinstance(v, h5py.Dataset)}
    for c in table.columns:
        if c.kind == "str" and c.name in out:
            out[c.name] = np.array([_text(x) for x in out[c.name]], dtype=object)
    return out


def _read_algorithm_tables(f: h5py.File) -> dict[str, dict[str, np.ndarray]]:
    """The tables of the run's algorithm's own (/metrics/tables/<name>), by their keys
    (``tables/<name>``); text columns as str."""
    out = {}
    for name, g in f.get(layout.ALGORITHM_TABLES, {}).items():
        order = [_text(x) for x in g.attrs.get("columns", sorted(g))]
        columns = {k: g[k][()] for k in order}
        for k, v in columns.items():
            if v.dtype == object:
                columns[k] = np.array([_text(x) for x in v], dtype=object)
        out[layout.ALGORITHM_PREFIX + name] = columns
    return out


def _read_world(g: h5py.Group) -> dict[str, Any]:
    world: dict[str, Any] = {k: v for k, v in g.attrs.items()}
    for key, ds in g.items():
        values = ds[()]
        world[key] = values.tolist() if ds.dtype.kind != "O" else [_text(x) for x in values]
    return world


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: what only files written with an integrity record hold (distfl 0.1.0 wrote none of them):
#: a file without a record that holds one had its record removed
SEALED_ONLY = ("@format", "@written", "/world", "/timing/workers")


#: what a reader says of a file without an integrity record
UNVERIFIED = (
    "has no integrity record (distfl 0.1.0 wrote none): only its /state's SHA-256 was "
    "checked, its contents are unverified"
)


def _check_unsealed(f: h5py.File, path: Path) -> None:
    """A file without an integrity record must be distfl 0.1.0's: one of a sealed format
    whose record was removed is refused."""
    for part in SEALED_ONLY:
        present = part[1:] in f.attrs if part.startswith("@") else part in f
        if present:
            raise CheckpointError(
                f"run file {path} has no integrity record, yet it is of a format that always "
                f"has one (it holds {part}): the record was removed, and the file cannot be "
                "trusted"
            )


def _stored_config(f: h5py.File, path: Path, plugins: bool) -> Config:
    text = f.attrs["config"]
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise CheckpointError(f"run file {path}: its stored config is not text")
    try:
        return from_json(text, plugins=plugins)
    except ConfigError as exc:
        raise CheckpointError(f"run file {path}: its stored config is invalid: {exc}") from None


def _check_format(f: h5py.File, config: Config, contents: Contents) -> None:
    """``@format`` a format this reader knows; a file of format 3 or later carries the
    digest of the config its state was computed with, and that config is the stored one."""
    fmt = 0
    if "format" in f.attrs:
        fmt = contents.integer(f.attrs["format"], "@format", 2, 1 << 62, "a format")
        if fmt > FORMAT:
            raise CheckpointError(
                f"run file {contents.path} is of format {fmt}; this distfl reads formats up to "
                f"{FORMAT} (it was written by a newer distfl)"
            )
    digest = f["state"].attrs.get("config_sha256")
    if digest is None:
        if fmt >= 3:
            raise contents.bad("/state@config_sha256 is missing (a file of format 3 has it)")
        return
    digest = contents.text(digest, "/state@config_sha256")
    earlier = added_algorithm_keys(config)  # keys added since, at their former behaviour
    if digest != config_digest(config) and not (
        earlier and digest == config_digest(config, leave_out=earlier)
    ):
        raise contents.bad(
            "the stored config is not the one /state was computed with (its digest, "
            "/state@config_sha256, differs): the config was changed after the run wrote it"
        )


def _check_regular(path: Path) -> None:
    """CheckpointError unless ``path`` is a regular file (no FIFO, device or directory is
    ever opened)."""
    try:
        kind = regular_file(path)
    except FileNotFoundError:
        raise CheckpointError(
            f"run file {path} does not exist; expected a distfl HDF5 run file"
        ) from None
    except OSError as exc:  # a name too long, a folder on the way that is not one, ...
        raise CheckpointError(f"run file {path} cannot be read ({why(exc)})") from None
    if kind:
        raise CheckpointError(f"run file {path} is {kind}; expected a distfl HDF5 run file")


def _run_file(f: h5py.File, config: Config, stored: dict[str, Any], sealed: bool) -> RunFile:
    """The :class:`RunFile` of the verified file ``f``, its state ``stored``."""
    timing = f["timing"].attrs
    return RunFile(
        config=config,
        world_size=int(f.attrs["world_size"]),
        hierarchy=read_hierarchy(f["hierarchy"]),
        state=stored,
        tables={
            **{t.key: _read_table(f, t) for t in layout.TABLES},
            **_read_algorithm_tables(f),
        },
        clients={k: v[()] for k, v in f["clients"].items()},
        leaves=[_text(x) for x in f["final/leaves"][()]],
        assignment=f["final/assignment"][()],
        world=_read_world(f["world"]) if "world" in f else None,
        trainer=str(timing.get("trainer", "")),
        sum_bytes_per_param=float(timing.get("sum_bytes_per_param", 0.0)),
        loop_started=float(timing.get("loop_started", 0.0)),
        version=str(f.attrs.get("distfl_version", "")),
        created=str(f.attrs.get("created", "")),
        written=str(f.attrs.get("written", "")),
        verified=sealed,
    )


def read_run_file(path: str | Path, *, state: bool = True, plugins: bool = False) -> RunFile:
    """Read and verify a run file; raise CheckpointError (exit code 2) with the reason.

    In order, each step before anything the next reads: the file is a regular file and
    HDF5; it holds no link distfl never writes; its integrity record (when it has one) is
    of the form distfl writes and names exactly the parts the file has, by their names
    alone; no dataset claims more values than its bytes on disk give
    (:func:`~distfl.runfile.integrity.check_storage`); the stored config matches its
    SHA-256 and is valid; every part has the kind, dtype and shape a run of that config
    gives it, from HDF5's metadata (:meth:`~distfl.runfile.contents.Contents.check_shapes`:
    a file that claims more models than its tree has is refused before it is hashed);
    every part matches its SHA-256; and the values are what a run of that config could
    have written (:mod:`distfl.runfile.contents`). A file without a record (distfl 0.1.0's)
    has its /state's SHA-256 checked, and is read with ``verified = False``.

    ``state=False`` reads only /state's attributes (the round), not its arrays (every
    cluster's model and an algorithm's state, such as a K×K matrix): enough to look at a
    run's results, at a fraction of the memory for a large federation. ``plugins``: import
    the stored config's ``run.plugins`` (code the file names; see
    :func:`~distfl.config.from_json`); by default nothing is imported."""
    path = Path(path)
    _check_regular(path)
    try:
        with h5py.File(path, "r") as f:
            if "config" not in f.attrs or "state" not in f:
                raise CheckpointError(
                    f"run file {path} is not a distfl run file with resumable state "
                    "(no config attribute or no /state group)"
                )
            integrity.check_links(f, path)
            sealed = integrity.has_record(f)
            if sealed:
                record = integrity.read_record(f, path)
                integrity.check_parts(f, record, path)  # by name: before anything is hashed
            else:
                _check_unsealed(f, path)
            integrity.check_storage(f, path)
            if sealed:  # the stored config first: the shapes are checked against it
                integrity.check_digests(f, record, path, only=("/@config",))
            config = _stored_config(f, path, plugins)
            contents = Contents(f, config, path)
            done = contents.check_shapes()  # from the metadata: before anything is hashed
            if sealed:
                integrity.check_digests(f, record, path)  # /state's values too
            _check_format(f, config, contents)
            contents.check_values()
            if not state:
                own = f["state"].attrs
                stored: dict[str, Any] = {
                    k: contents.json_value(v, f"/state@{k}")
                    for k, v in own.items()
                    if k not in STATE_OWN
                }
                stored["round"] = done
            else:
                stored = _read_tree(f["state"], contents)
            digest = f["state"].attrs.get("sha256", "")
            # a file without a record (distfl 0.1.0's) has /state's SHA-256 only: every
            # reader checks it, the ones that do not use /state's arrays too
            whole = stored if state else (_read_tree(f["state"], contents) if not sealed else None)
            if not sealed and tree_digest(whole) != digest:
                raise CheckpointError(
                    f"run file {path} is corrupt: /state does not match its SHA-256"
                )
            return _run_file(f, config, stored, sealed)
    except CheckpointError as exc:  # it may name parts of the file: printed as escaped
        raise CheckpointError(printable(exc)) from None
    except (OSError, KeyError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(
            printable(f"run file {path} cannot be read (truncated or not HDF5?): {first}")
        ) from None


def check_resumable(stored: Config, current: Config, path: str | Path) -> None:
    """Refuse to resume when a key that changes the computation differs."""
    a, b = _flatten(stored.to_dict()), _flatten(current.to_dict())
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        if key == "run.rounds" and current.privacy.epsilon > 0:
            raise CheckpointError(
                f"run file {path} ran for run.rounds = {a.get(key)} with privacy.epsilon = "
                f"{current.privacy.epsilon!r}: its noise was found for that many rounds, so "
                "run.rounds cannot change on resume"
            )
        if key in RESUMABLE_CHANGES:
            continue
        raise CheckpointError(
            f"run file {path} is from a different config: {key} is {json.dumps(a.get(key))} "
            f"there and {json.dumps(b.get(key))} here (only {', '.join(RESUMABLE_CHANGES)} "
            "may change on resume)"
        )


__all__ = [
    "STATE_OWN",
    "UNVERIFIED",
    "RunFile",
    "check_resumable",
    "read_hierarchy",
    "read_run_file",
]
