"""The run file's integrity record: a SHA-256 of every dataset and every attribute that
resumption and the readers depend on, stored in the file itself (``/integrity``) and checked
when the file is read.

Each part is named by its path: ``/metrics/accuracy`` for a dataset's dtype, shape and
values, ``/hierarchy/0@split_round`` for an attribute (``/@config`` for the stored config).
A part that changed, is missing, or was added since distfl wrote the file is refused with
one line naming it (:class:`~distfl.errors.CheckpointError`, exit code 2). Files written
before the record existed carry none; for them only ``/state``'s own SHA-256 is checked, as
it always was.

Nothing a file claims is read before it is checked: the record's own form first
(:func:`read_record`), then the names of the file's parts against it (:func:`check_parts`:
a part added or missing is refused before anything is hashed), then how many values each
dataset claims against the bytes it holds on disk (:func:`check_storage`), and only then
the digests (:func:`check_digests`). Datasets are hashed in slabs of at most
:data:`SLAB_BYTES`, so that checking a large file (an algorithm's K×K matrices, many
cluster models) needs little memory.
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


def _part_digest(f: h5py.File, name: str) -> str:
    """The digest of the attribute ``name`` (``/@config``, ``/state@round``) as
    :func:`digests` gives it."""
    obj, _, key = name.partition("@")
    return _attr_digest(f[obj or "/"].attrs[key])


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
    (changed, missing, or not written by distfl). ``f`` must have a record. The record's
    own form is checked first (:func:`read_record`), then the names of the parts against
    it and how much each dataset holds (:func:`check_parts`, :func:`check_storage`), and
    only then is anything hashed: a part distfl never wrote is refused before a byte of
    it is read."""
    stored = read_record(f, path)
    check_parts(f, stored, path)
    check_storage(f, path)
    check_digests(f, stored, path)


def read_record(f: h5py.File, path: Any) -> dict[str, str]:
    """The record of ``f`` (part -> SHA-256), its own form checked: a group of exactly
    ``path`` (text) and ``sha256`` (64 hexadecimal digits each), of one length, and the
    attribute ``scheme``; anything else is refused in one line (CheckpointError)."""

    def malformed(what: str) -> CheckpointError:
        return CheckpointError(
            f"run file {path} is damaged: its integrity record /{GROUP} {what}, which distfl "
            "never writes"
        )

    g = f.get(GROUP)
    if not isinstance(g, h5py.Group):
        raise malformed("is not a group")
    scheme = g.attrs.get("scheme", "")
    if isinstance(scheme, bytes):
        scheme = scheme.decode("utf-8", "replace")
    if not isinstance(scheme, str):
        raise malformed("has a scheme that is not text")
    if scheme != SCHEME:
        raise CheckpointError(
            f"run file {path} has an integrity record of an unknown kind ({scheme!r}); "
            "it was written by a newer distfl"
        )
    if set(g) != {"path", "sha256"} or set(g.attrs) != {"scheme"}:
        other = sorted((set(g) ^ {"path", "sha256"}) | (set(g.attrs) - {"scheme"}))
        raise malformed(f"holds {other[0]!r} where it holds path, sha256 and @scheme only")
    names, sums = g["path"], g["sha256"]
    if (
        not isinstance(names, h5py.Dataset)
        or names.ndim != 1
        or (h5py.check_string_dtype(names.dtype) is None)
    ):
        raise malformed("has a path that is not a list of text")
    if not isinstance(sums, h5py.Dataset) or sums.ndim != 1 or sums.dtype != np.dtype("S64"):
        raise malformed("has a sha256 that is not a list of SHA-256 digests")
    if names.shape != sums.shape:
        raise malformed("lists as many digests as parts")
    for ds in (names, sums):  # both are read whole: how much they claim is checked first
        _check_dataset_storage(ds, path)
    record: dict[str, str] = {}
    for name, digest in zip(names[()], sums[()], strict=True):
        try:
            text = name.decode() if isinstance(name, bytes) else str(name)
            hexa = digest.decode("ascii")
        except UnicodeDecodeError:
            raise malformed("holds a name or a digest that is not text") from None
        if len(hexa) != 64 or any(c not in "0123456789abcdef" for c in hexa):
            raise malformed(f"holds {hexa!r} where a SHA-256 digest goes")
        if text in record:
            raise malformed(f"names {text!r} twice")
        record[text] = hexa
    return record


def part_names(f: h5py.File) -> set[str]:
    """The names of every part of ``f`` but the record (the keys of :func:`digests`),
    found from the file's metadata alone: nothing is read or hashed."""
    out = {f"/@{key}" for key in f.attrs}
    names: list[str] = []
    f.visititems_links(lambda name, link: names.append(name))
    for name in names:
        if name == GROUP or name.startswith(GROUP + "/"):
            continue
        if not isinstance(f.get(name, getlink=True), h5py.HardLink):
            out.add(f"/{name}")
            continue
        obj = f[name]
        if isinstance(obj, h5py.Dataset):
            out.add(f"/{name}")
        out.update(f"/{name}@{key}" for key in obj.attrs)
    return out


def check_parts(f: h5py.File, stored: dict[str, str], path: Any) -> None:
    """Refuse (CheckpointError) a part the record ``stored`` lists that ``f`` lacks, and a
    part of ``f`` the record does not list, by their names alone (before hashing)."""
    current = part_names(f)
    for name in sorted(stored):
        if name not in current:
            raise CheckpointError(
                f"run file {path} is damaged: {_first_missing(f, name)} is missing (distfl "
                "wrote it; the file was changed since)"
            )
    extra = sorted(current - set(stored))
    if extra:
        raise CheckpointError(
            f"run file {path} is damaged: {extra[0]} was not written by distfl"
            + (f" (and {len(extra) - 1} more parts)" if len(extra) > 1 else "")
        )


def check_digests(
    f: h5py.File, stored: dict[str, str], path: Any, only: tuple[str, ...] | None = None
) -> None:
    """Hash every part the record ``stored`` lists (``only``: those of these names, which
    it lists: attributes, such as the stored config ``/@config``, read before the rest)
    and refuse the first that differs."""
    current = digests(f) if only is None else {name: _part_digest(f, name) for name in only}
    for name in sorted(current):
        if current[name] != stored[name]:
            raise CheckpointError(
                f"run file {path} is damaged: {name} differs from what distfl wrote "
                "(its SHA-256 does not match)"
            )


#: the filters a dataset of a run file may have: LZF (h5py's id 32000) alone
FILTERS = {32000: "lzf"}
#: the most LZF can compress: a match of 264 bytes takes 3 (88 to 1), rounded up
LZF_RATIO = 100
#: bytes a dataset may claim whatever it holds on disk (HDF5's own rounding of small chunks)
STORAGE_SLACK = 1 << 20


def check_storage(f: h5py.File, path: Any) -> None:
    """Refuse (CheckpointError) a dataset whose values would be read from anywhere but the
    file's own bytes (an external file, a virtual dataset), one with a filter distfl never
    writes, and one that claims more values than the bytes it holds on disk could give
    (its shape, from HDF5's metadata, against its allocated storage: LZF packs at most
    :data:`LZF_RATIO` to one), so that reading or hashing a file costs at most about that
    many times its size on disk."""
    names: list[str] = []
    f.visititems_links(lambda name, link: names.append(name))
    for name in sorted(names):
        obj = f.get(name)
        if isinstance(obj, h5py.Dataset):
            _check_dataset_storage(obj, path)


def _check_dataset_storage(ds: h5py.Dataset, path: Any) -> None:
    where = ds.name

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"run file {path} is damaged: {where} {what}")

    if ds.is_virtual:
        raise bad("is a virtual dataset, which distfl never writes")
    if ds.external:
        raise bad("keeps its values in another file, which distfl never writes")
    plist = ds.id.get_create_plist()
    filtered = False
    for i in range(plist.get_nfilters()):
        code, _, _, label = plist.get_filter(i)
        if code not in FILTERS:
            name = label.decode("ascii", "replace") if isinstance(label, bytes) else label
            raise bad(f"is filtered with {name or code}, which distfl never writes")
        filtered = True
    claimed = int(ds.size) * ds.dtype.itemsize
    held = int(ds.id.get_storage_size())
    if claimed > max((LZF_RATIO if filtered else 1) * held, STORAGE_SLACK):
        raise bad(
            f"claims {_bytes(claimed)} of values but holds {_bytes(held)} on disk (a file "
            "distfl wrote holds every value it claims)"
        )


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} bytes"


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


__all__ = [
    "GROUP",
    "SCHEME",
    "check_digests",
    "check_links",
    "check_parts",
    "check_storage",
    "digests",
    "has_record",
    "part_names",
    "read_record",
    "seal",
    "verify",
]
