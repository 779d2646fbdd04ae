"""What ``/state`` of a run file must hold beyond its shapes, checked for
:class:`~distfl.runfile.contents.Contents` by every reader (not only by a resume, which
restores it):

- every JSON value of its tree (an algorithm's, an aggregator's and the selection's
  numbers, flags and generators, as the writer's ``_write_tree`` stores them) parsed with
  its nesting bounded;
- where distfl's own code wrote them (a built-in algorithm, the aggregators, FedPNS's
  selection), no number that is not finite (NaN, Infinity), and each value of a name
  listed in :data:`KINDS` of its kind: a count a whole number from 0, a round one of the
  run's, a flag true or false, a statistic a finite number from 0, a random generator's
  state one numpy takes, a cluster id one of /hierarchy; the selection's state of the
  run's clients. A plug-in's algorithm keeps what it likes under /state/algorithm: only the
  nesting is bounded there;
- the arrays of distfl's own state a reader can tell (:func:`_check_arrays`: a built-in
  algorithm's per-client rewards and counts, FedAvgM's velocities, FedPNS's clients,
  probabilities and counts); an algorithm's other arrays are checked as numbers only;
- the models of /final and /state finite (a run never records a model of NaN or
  Infinity: a training that gives one stops, keeping the round before).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from distfl.runfile import integrity

if TYPE_CHECKING:
    from distfl.runfile.opened import OpenedFile

#: /state's own attributes: the file's digests, not values of the state
OWN = ("sha256", "config_sha256")
#: the kind of each JSON value distfl's own state holds, by its name (the attribute's)
KINDS = {
    **dict.fromkeys(("rounds_seen", "split_tests", "quiet", "repeats", "reassignments",
                     "decompositions", "age", "leaf_count", "seeding", "P_size",
                     "has_uint32", "uinteger"), "count"),
    **dict.fromkeys(("sampled_round",), "round"),
    **dict.fromkeys(("unseeded", "has_prev", "warm"), "flag"),
    **dict.fromkeys(("mse", "mean_norm", "max_norm", "shift"), "statistic"),
    **dict.fromkeys(("round", "num_clients"), "own"),
    "model_ids": "clusters",
    "ids": "clusters",
    "bit_generator": "text",
    "state": "big",
    "inc": "big",
}  # fmt: skip
#: a random generator's state (a group ``rng`` of a built-in algorithm's state)
GENERATOR = "rng"


def check(c: OpenedFile) -> None:
    """Every check of this module on ``c``'s file (its shapes checked before)."""
    builtin = _builtin_algorithm(c)
    values: dict[str, Any] = {}

    def visit(path: str, group: h5py.Group) -> None:
        for key, raw in group.attrs.items():
            if path == "/state" and key in OWN:
                continue
            values[f"{path}@{key}"] = c.json_value(raw, f"{path}@{key}")
        for name, item in group.items():
            if isinstance(item, h5py.Group):
                visit(f"{path}/{name}", item)

    visit("/state", c.f["state"])
    for where, value in values.items():
        ours = builtin or not where.startswith("/state/algorithm")
        if ours:
            _check_value(c, where, value)
    if builtin:
        for where in _generators(c.f["state/algorithm"]) if "algorithm" in c.f["state"] else ():
            _check_generator(c, where, values)
    if "selection" in c.f["state"] and "/state/selection@num_clients" in values:
        if values["/state/selection@num_clients"] != c.K:
            raise c.bad(f"/state/selection@num_clients is not the run's {c.K} clients")
    _check_arrays(c, builtin, values)
    for where in ("final/models", "state/models"):
        _check_finite(c, c.f[where])


def _check_arrays(c: OpenedFile, builtin: bool, values: dict[str, Any]) -> None:
    """The arrays of distfl's own state that every reader can tell: a built-in algorithm's
    per-client rewards and counts (one per client), FedAvgM's velocities (one model per
    cluster of its ids, finite) and FedPNS's clients, probabilities and counts."""
    st = c.f["state"]
    arrays: list[tuple[str, str, int | None]] = [  # (path, kind, rows)
        ("selection/labeled_ids", "ids", None), ("selection/counted_ids", "ids", None),
        ("selection/labeled_prob", "weight", _rows(st, "selection/labeled_ids")),
        ("selection/times_selected", "count", _rows(st, "selection/counted_ids")),
        ("selection/times_labeled", "count", _rows(st, "selection/counted_ids")),
        ("aggregator/velocity", "finite", len(values.get("/state/aggregator@ids", ()))),
    ]  # fmt: skip
    if builtin:  # (FedGWC's rewards and times sampled)
        arrays += [("algorithm/gamma", "finite", c.K), ("algorithm/times_sampled", "count", c.K)]
    for name, kind, rows in arrays:
        ds = st.get(name)
        if not isinstance(ds, h5py.Dataset) or (name.endswith("velocity") and not ds.size):
            continue
        where = f"/state/{name}"
        if ds.dtype.kind not in ("iu" if kind in ("ids", "count") else "f") or ds.ndim < 1:
            raise c.bad(f"{where} holds {ds.dtype} values of {ds.ndim} dimensions, which "
                        "distfl's own state never holds")  # fmt: skip
        if rows is not None and ds.shape[0] != rows:
            raise c.bad(f"{where} holds {ds.shape[0]} rows, not {rows}")
        a = ds[()]
        odd = {
            "ids": a.size and (a.min() < 0 or a.max() >= c.K or (np.diff(a) <= 0).any()),
            "count": a.size and a.min() < 0,
            "weight": not (np.isfinite(a).all() and (a >= 0).all()),
            "finite": not np.isfinite(a).all(),
        }[kind]
        if odd:
            what = {
                "ids": "ascending client ids of the run",
                "count": "counts from 0",
                "weight": "finite numbers from 0",
                "finite": "finite numbers",
            }[kind]
            raise c.bad(f"{where} does not hold {what}")  # fmt: skip


def _rows(group: h5py.Group, name: str) -> int | None:
    ds = group.get(name)
    return ds.shape[0] if isinstance(ds, h5py.Dataset) and ds.ndim else None


def _builtin_algorithm(c: OpenedFile) -> bool:
    from distfl.errors import ConfigError
    from distfl.plugins import ALGORITHMS

    try:
        cls = ALGORITHMS.get(c.config.algorithm.name)
    except ConfigError:
        return False
    return cls.__module__.startswith("distfl.")


def _check_value(c: OpenedFile, where: str, value: Any) -> None:
    """``value`` (parsed) finite throughout, and of the kind :data:`KINDS` gives its name."""
    if not _finite(value):
        raise c.bad(f"{where} = {_shown(value)} holds NaN or Infinity, which distfl's "
                    "own state never holds")  # fmt: skip
    kind = KINDS.get(where.rpartition("@")[2])
    whole = type(value) is int
    if kind == "count" and not (whole and value >= 0):
        raise c.bad(f"{where} = {_shown(value)} is not a count (a whole number from 0)")
    if kind == "round" and not (whole and 0 <= value <= c.done):
        raise c.bad(f"{where} = {_shown(value)} is not a round of this run (0 to {c.done})")
    if kind == "flag" and type(value) is not bool:
        raise c.bad(f"{where} = {_shown(value)} is not true or false")
    if kind == "statistic" and not (type(value) in (int, float) and value >= 0):
        raise c.bad(f"{where} = {_shown(value)} is not a number from 0")
    if kind == "clusters" and not (
        isinstance(value, list) and all(isinstance(x, str) and x in c.f["hierarchy"] for x in value)
    ):
        raise c.bad(f"{where} is not a list of cluster ids of /hierarchy")
    if kind == "big" and not (whole and 0 <= value < 1 << 128):
        raise c.bad(f"{where} = {_shown(value)} is not a generator's state")


def _finite(value: Any) -> bool:
    """No NaN or Infinity anywhere in a parsed JSON value (its nesting is bounded)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(x) for x in value)
    if isinstance(value, dict):
        return all(_finite(x) for x in value.values())
    return True


def _shown(value: Any) -> str:
    return repr(value)[:40]


def _generators(group: h5py.Group, path: str = "/state/algorithm") -> list[str]:
    """The paths of the random generators' states below ``group``."""
    out = []
    for name, item in group.items():
        if isinstance(item, h5py.Group):
            where = f"{path}/{name}"
            out += [where] if name == GENERATOR else _generators(item, where)
    return out


def _check_generator(c: OpenedFile, where: str, values: dict[str, Any]) -> None:
    """A numpy bit generator's state, as ``bit_generator.state`` gives it: numpy itself
    must take it."""
    state = {k.rpartition("@")[2]: v for k, v in values.items() if k.startswith(f"{where}@")}
    state["state"] = {
        k.rpartition("@")[2]: v for k, v in values.items() if k.startswith(f"{where}/state@")
    }
    name = state.get("bit_generator")
    try:
        generator = getattr(np.random, name)() if name in ("PCG64", "PCG64DXSM") else None
        if generator is None:
            raise ValueError(name)
        generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError):
        raise c.bad(f"{where} is not the state of a random generator numpy has") from None


def _check_finite(c: OpenedFile, ds: h5py.Dataset) -> None:
    """Every value of ``ds`` finite, read in slabs of :data:`integrity.SLAB_BYTES`."""
    if not ds.size:
        return
    step = max(1, integrity.SLAB_BYTES // max(1, ds.dtype.itemsize * ds.shape[1]))
    for start in range(0, ds.shape[0], step):
        if not np.isfinite(ds[start : start + step]).all():
            raise c.bad(f"{ds.name} holds a value that is not finite (NaN or Infinity); a "
                        "run never records such a model")  # fmt: skip


__all__ = ["KINDS", "check"]
