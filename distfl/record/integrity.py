"""The run file's integrity record: a SHA-256 of every dataset and every attribute that
resumption and the readers depend on, stored in the file itself (``/integrity``) and checked
when the file is read.

Each part is named by its path: ``/metrics/accuracy`` for a dataset's dtype, shape and
values, ``/hierarchy/0@split_round`` for an attribute (``/@config`` for the stored config).
A part that changed, is missing, or was added since distfl wrote the file is refused with
one line naming it (:class:`~distfl.errors.CheckpointError`, exit code 2). Files written
before the record existed carry none; for them only ``/state``'s own SHA-256 is checked, as
it always was.

Datasets are hashed in slabs of at most :data:`SLAB_BYTES`, so that checking a large file
(an algorithm's K×K matrices, many cluster models) needs little memory.
"""

from __future__ import annotations

import hashlib
from typing import Any

import h5py
import numpy as np

from distfl.errors import CheckpointError

#: the group that holds the record (not itself covered)
GROUP = "integrity"
#: the hash and the canonical form of each part; a reader refuses a scheme it does not know
SCHEME = "sha256-v1"
#: bytes of a dataset hashed at a time
SLAB_BYTES = 64 << 20


def _feed_array(h: Any, a: np.ndarray) -> None:
    if a.dtype == object:  # variable-length strings: each element, length-prefixed
        for item in a.reshape(-1):
            b = item if isinstance(item, bytes) else str(item).encode()
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    else:
        h.update(np.ascontiguousarray(a).tobytes())


def _dataset_digest(ds: h5py.Dataset) -> str:
    h = hashlib.sha256()
    h.update(f"{ds.dtype.str}{ds.shape}".encode())
    if ds.shape == ():
        _feed_array(h, np.asarray(ds[()]))
    elif ds.size:
        row = max(1, ds.dtype.itemsize * (ds.size // ds.shape[0]))
        step = max(1, SLAB_BYTES // row)
        for start in range(0, ds.shape[0], step):
            _feed_array(h, ds[start : start + step])
    return h.hexdigest()


def _attr_digest(value: Any) -> str:
    h = hashlib.sha256()
    if isinstance(value, str):
        h.update(b"str:" + value.encode())
    elif isinstance(value, bytes):
        h.update(b"bytes:" + value)
    else:
        a = np.asarray(value)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        _feed_array(h, a)
    return h.hexdigest()


def check_links(f: h5py.File, path: Any) -> None:
    """Refuse (CheckpointError) a link distfl never writes: a soft or external link, or a
    second name (hard link) of a group or dataset. Every name of the file is looked at, not
    only every object (h5py's ``visititems`` sees an object under one name)."""
    names: list[str] = []
    bad: list[tuple[str, str]] = []

    def visit(name: str, link) -> None:
        names.append(name)
        if not isinstance(link, h5py.HardLink):
            bad.append((name, type(link).__name__))

    f.visititems_links(visit)
    if bad:
        name, kind = bad[0]
        what = {"SoftLink": "a soft link", "ExternalLink": "an external link"}.get(kind, kind)
        raise CheckpointError(
            f"run file {path} is damaged: /{name} is {what}, which distfl never writes"
        )
    seen: dict[Any, str] = {}
    for name in sorted(names):
        address = _address(f[name])
        if address in seen:
            raise CheckpointError(
                f"run file {path} is damaged: /{name} is a second name of /{seen[address]} "
                "(a hard link, which distfl never writes)"
            )
        seen[address] = name


def _address(obj) -> Any:
    info = h5py.h5o.get_info(obj.id)
    return getattr(info, "token", None) or info.addr


def digests(f: h5py.File) -> dict[str, str]:
    """The SHA-256 of every part of ``f`` but the integrity record itself, by path (every
    name of every group and dataset: a second name of one is a part of its own)."""
    out: dict[str, str] = {}

    def attrs(obj: h5py.HLObject, path: str) -> None:
        for key in obj.attrs:
            out[f"{path}@{key}"] = _attr_digest(obj.attrs[key])

    attrs(f, "/")
    names: list[str] = []
    f.visititems_links(lambda name, link: names.append(name))
    for name in sorted(names):
        if name == GROUP or name.startswith(GROUP + "/"):
            continue
        link = f.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            out[f"/{name}"] = f"link:{type(link).__name__}"  # never followed
            continue
        obj = f[name]
        if isinstance(obj, h5py.Dataset):
            out[f"/{name}"] = _dataset_digest(obj)
        attrs(obj, f"/{name}")
    return out


def seal(f: h5py.File) -> None:
    """Write the integrity record of everything ``f`` holds now (the writer's last step)."""
    parts = digests(f)
    names = sorted(parts)
    g = f.create_group(GROUP)
    g.attrs["scheme"] = SCHEME
    g.create_dataset("path", data=np.array(names, dtype=h5py.string_dtype()))
    g.create_dataset("sha256", data=np.array([parts[n] for n in names], dtype="S64"))


def has_record(f: h5py.File) -> bool:
    return GROUP in f


def verify(f: h5py.File, path: Any) -> None:
    """Raise CheckpointError naming the first part of ``f`` that differs from its record
    (changed, missing, or not written by distfl). ``f`` must have a record."""
    g = f[GROUP]
    scheme = g.attrs.get("scheme", "")
    if scheme != SCHEME:
        raise CheckpointError(
            f"run file {path} has an integrity record of an unknown kind ({scheme!r}); "
            "it was written by a newer distfl"
        )
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in g["path"][()]]
    stored = dict(zip(names, (d.decode() for d in g["sha256"][()]), strict=True))
    current = digests(f)
    for name in sorted(stored):
        if name not in current:
            raise CheckpointError(
                f"run file {path} is damaged: {_first_missing(f, name)} is missing (distfl "
                "wrote it; the file was changed since)"
            )
        if current[name] != stored[name]:
            raise CheckpointError(
                f"run file {path} is damaged: {name} differs from what distfl wrote "
                "(its SHA-256 does not match)"
            )
    extra = sorted(set(current) - set(stored))
    if extra:
        raise CheckpointError(
            f"run file {path} is damaged: {extra[0]} was not written by distfl"
            + (f" (and {len(extra) - 1} more parts)" if len(extra) > 1 else "")
        )


def _first_missing(f: h5py.File, name: str) -> str:
    """The shallowest part on the way to ``name`` that ``f`` lacks (``/hierarchy/0`` rather
    than every dataset under it); ``name`` itself when it is a lone attribute."""
    obj, _, _ = name.partition("@")
    parts = [p for p in obj.split("/") if p]
    for depth in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:depth])
        if prefix not in f:
            return prefix
    return name


__all__ = ["GROUP", "SCHEME", "check_links", "digests", "has_record", "seal", "verify"]
