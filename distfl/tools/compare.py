"""``distfl compare A.h5 B.h5``: whether two run files hold the same bits, part by part, and
where they first differ.

Both files are read and verified first (:func:`distfl.runfile.reader.read_run_file`, which
imports none of their plug-ins): a file that cannot be read is refused with one line (exit
code 2). Then every dataset and attribute of each part is compared bit for bit (a float
NaN equals a NaN of the same bits): a part is the same when both files hold the same
names, dtypes, shapes and bytes in it. Exit 0 when every compared part is the same, 1 when
one differs.

The parts (:data:`PARTS`):

- ``config``: the stored config, key by key, but for the keys that cannot change a run's
  results (:data:`NOT_RESULTS`: where the file goes, the progress display, the
  communicator's backend and timeout, the checkpoint's period, the data cache, the
  placement of clients on workers), and the seed;
- ``clients``: /clients (groups, class counts, samples, accuracies);
- ``metrics``: /metrics and every table under it (the algorithm's own tables included);
- ``tree``: /hierarchy and /final (the clusters, their members, what the algorithm stored
  at each split, the final assignment and the leaves' models);
- ``state``: /state (what exact resumption reads);
- ``timing``: the wall-clock parts: /timing, /world and the root's world_size, created,
  written and distfl_version, which differ between any two runs (ignored by default).

/integrity (the SHA-256 of every other part) is never compared: it differs wherever a part
does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import h5py
import numpy as np

from distfl.errors import ConfigError, did_you_mean
from distfl.runfile import integrity
from distfl.runfile.digest import RESUMABLE_CHANGES
from distfl.runfile.reader import read_run_file
from distfl.text import printable

#: the parts compared, in order, each with the top-level groups it covers
PARTS = {
    "config": (),
    "clients": ("clients",),
    "metrics": ("metrics",),
    "tree": ("hierarchy", "final"),
    "state": ("state",),
    "timing": ("timing", "world"),
}
#: the root attributes of each part (the stored config is compared key by key)
ROOT_ATTRS = {
    "config": ("seed",),
    "timing": ("world_size", "created", "written", "distfl_version", "format"),
}
#: the parts left out unless asked for
IGNORED = ("timing",)
#: config keys that cannot change a run's results: the keys a resume may change, but the
#: rounds (a longer run holds more), and the checkpoint's period in seconds
NOT_RESULTS = tuple(k for k in RESUMABLE_CHANGES if k != "run.rounds") + ("checkpoint.seconds",)


@dataclass(frozen=True)
class Difference:
    """Where a part first differs: ``where`` (a dataset, ``path@attr`` or a config key),
    what each file holds there, and how many entries of it differ."""

    where: str
    a: str
    b: str
    count: int = 1

    def line(self) -> str:
        more = f" (1 of {self.count:,} entries that differ)" if self.count > 1 else ""
        return printable(f"{self.where}: {self.a} in A, {self.b} in B{more}")


@dataclass
class PartResult:
    part: str
    compared: bool
    differences: list[Difference]
    #: what was left out of the comparison (config keys that cannot change results)
    note: str = ""

    @property
    def same(self) -> bool:
        return not self.differences


def parse_ignore(text: str) -> tuple[str, ...]:
    """``--ignore``: parts by name, comma-separated ("" for none); an unknown part is a
    ConfigError naming the parts."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        if name not in PARTS:
            raise ConfigError(
                f"--ignore {name!r}{did_you_mean(name, PARTS)}: allowed parts are "
                f"{', '.join(PARTS)} (comma-separated)"
            )
    return names


def compare_files(
    a: str | Path, b: str | Path, ignore: Iterable[str] = IGNORED
) -> list[PartResult]:
    """Each part of :data:`PARTS` of run files ``a`` and ``b``, compared (or not, where
    ``ignore`` names it). A file that cannot be read raises CheckpointError."""
    ignore = set(ignore)
    stored = [read_run_file(path, state=False) for path in (a, b)]
    out: list[PartResult] = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        for part, tops in PARTS.items():
            if part in ignore:
                out.append(PartResult(part, False, []))
                continue
            differences: list[Difference] = []
            note = ""
            if part == "config":
                differences, note = _config(stored[0].config.to_dict(), stored[1].config.to_dict())
            for name in ROOT_ATTRS.get(part, ()):
                differences += _attr("/", name, fa, fb)
            for top in tops:
                differences += _group(fa, fb, top)
            out.append(PartResult(part, True, differences, note))
    return out


def _config(a: dict, b: dict) -> tuple[list[Difference], str]:
    flat_a = {f"{s}.{k}": v for s, sec in a.items() for k, v in sec.items()}
    flat_b = {f"{s}.{k}": v for s, sec in b.items() for k, v in sec.items()}
    differences, skipped = [], []
    for key in sorted(set(flat_a) | set(flat_b)):
        x, y = flat_a.get(key, "(none)"), flat_b.get(key, "(none)")
        if x == y:
            continue
        if key in NOT_RESULTS:
            skipped.append(key)
            continue
        differences.append(Difference(key, _json(x), _json(y)))
    verb = "differs" if len(skipped) == 1 else "differ"
    note = f"{', '.join(skipped)} {verb}, which cannot change the results" if skipped else ""
    return differences, note


def _json(value) -> str:
    return value if value == "(none)" else json.dumps(value)


def _walk(f: h5py.File, top: str) -> dict[str, h5py.Dataset | h5py.Group]:
    """Every group and dataset under ``/top`` (itself included), by path."""
    items: dict[str, h5py.Dataset | h5py.Group] = {}
    if top not in f:
        return items
    items["/" + top] = f[top]

    def keep(name: str, item) -> None:  # (visititems stops at a callback's first non-None)
        items[f"/{top}/{name}"] = item

    if isinstance(f[top], h5py.Group):
        f[top].visititems(keep)
    return items


def _group(fa: h5py.File, fb: h5py.File, top: str) -> list[Difference]:
    ia, ib = _walk(fa, top), _walk(fb, top)
    out: list[Difference] = []
    for path in sorted(set(ia) | set(ib)):
        x, y = ia.get(path), ib.get(path)
        if x is None or y is None:
            out.append(Difference(path, _kind(x), _kind(y)))
            continue
        if isinstance(x, h5py.Dataset) != isinstance(y, h5py.Dataset):
            out.append(Difference(path, _kind(x), _kind(y)))
            continue
        if isinstance(x, h5py.Dataset):
            diff = _arrays(path, x[()], y[()])
            if diff is not None:
                out.append(diff)
        for name in sorted(set(x.attrs) | set(y.attrs)):
            out += _attr(path, name, x, y)
    return out


def _kind(item) -> str:
    if item is None:
        return "nothing"
    if isinstance(item, h5py.Group):
        return "a group"
    return f"a dataset {item.dtype} {tuple(item.shape)}"


def _attr(path: str, name: str, x, y) -> list[Difference]:
    where = f"{path}@{name}" if path != "/" else f"/@{name}"
    if name not in x.attrs or name not in y.attrs:
        have = ("nothing" if name not in obj.attrs else "an attribute" for obj in (x, y))
        return [Difference(where, *have)]
    diff = _arrays(where, x.attrs[name], y.attrs[name])
    return [] if diff is None else [diff]


def _arrays(where: str, x, y) -> Difference | None:
    """The first difference of two values read from the files (an array, a string, a
    number), None when they hold the same bits."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.kind in "OSU" or y.dtype.kind in "OSU":
        xs, ys = _texts(x), _texts(y)
        if x.shape != y.shape:
            return Difference(where, f"shape {x.shape}", f"shape {y.shape}")
        wrong = [i for i, (p, q) in enumerate(zip(xs, ys, strict=True)) if p != q]
        if not wrong:
            return None
        i = wrong[0]
        at = f"{where}[{', '.join(map(str, np.unravel_index(i, x.shape)))}]" if x.ndim else where
        return Difference(at, repr(xs[i]), repr(ys[i]), len(wrong))
    if x.dtype != y.dtype or x.shape != y.shape:
        return Difference(where, f"{x.dtype} {x.shape}", f"{y.dtype} {y.shape}")
    bx = x.reshape(-1).view(np.uint8).reshape(x.size, -1) if x.size else x.reshape(0, 0)
    by = y.reshape(-1).view(np.uint8).reshape(y.size, -1) if y.size else y.reshape(0, 0)
    unequal = np.flatnonzero((bx != by).any(axis=1)) if x.size else np.zeros(0, np.int64)
    if not len(unequal):
        return None
    i = int(unequal[0])
    index = np.unravel_index(i, x.shape)
    at = f"{where}[{', '.join(map(str, index))}]" if x.ndim else where
    return Difference(at, _number(x.reshape(-1)[i]), _number(y.reshape(-1)[i]), len(unequal))


def _texts(values: np.ndarray) -> list[str]:
    flat = values.reshape(-1) if values.ndim else values.reshape(1)
    return [v.decode() if isinstance(v, bytes) else str(v) for v in flat.tolist()]


def _number(value) -> str:
    """A number with every digit that tells it apart (17 significant digits for a float)."""
    if isinstance(value, np.floating):
        v = float(value)
        return repr(v) if math.isfinite(v) else str(v)
    return str(value.item() if hasattr(value, "item") else value)


def report(
    results: list[PartResult],
    a: str,
    b: str,
    stream: TextIO,
    *,
    unverified: Iterable[str] = (),
) -> int:
    """The comparison as lines, one per part; 0 when every compared part is the same, else
    1. ``unverified``: the files of ``a`` and ``b`` read without an integrity record, each
    marked so on its line."""
    w = stream.write
    marks = {p: " (unverified: it has no integrity record)" for p in unverified}
    w(f"A  {printable(a)}{marks.get(a, '')}\nB  {printable(b)}{marks.get(b, '')}\n")
    for r in results:
        if not r.compared:
            w(f"{r.part:<8} not compared (--ignore {r.part})\n")
            continue
        if r.same:
            w(f"{r.part:<8} same" + (f" ({r.note})" if r.note else "") + "\n")
            continue
        n = len(r.differences)
        w(f"{r.part:<8} differs at {n} place{'s' if n > 1 else ''}; first: "
          f"{r.differences[0].line()}\n")  # fmt: skip
    differing = [r.part for r in results if r.compared and not r.same]
    if differing:
        w(f"distfl compare: the runs differ ({', '.join(differing)})\n")
        return 1
    w("distfl compare: the runs hold the same bits in every compared part\n")
    return 0


def compare_main(args, stream: TextIO, *, errors: TextIO | None = None) -> int:
    """``distfl compare A B [--ignore PARTS]``; a file without an integrity record is said
    so on ``errors`` and marked on its line."""
    from distfl.runfile.run import unverified_warning

    ignore = parse_ignore(args.ignore)
    results = compare_files(args.a, args.b, ignore)
    unverified = [p for p in dict.fromkeys((args.a, args.b)) if not _sealed(p)]
    for path in unverified:
        if errors is not None:
            errors.write(unverified_warning(path))
    return report(results, args.a, args.b, stream, unverified=unverified)


def _sealed(path: str | Path) -> bool:
    """Whether the run file at ``path`` (read and verified already) has an integrity
    record."""
    with h5py.File(path, "r") as f:
        return integrity.has_record(f)


__all__ = ["IGNORED", "NOT_RESULTS", "PARTS", "compare_files", "compare_main", "report"]
