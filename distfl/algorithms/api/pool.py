"""The server's work spread over the ranks: an algorithm's independent pieces of work
(a row of a matrix per task) are functions registered with :func:`pooled`, which the
runtime's pool runs on every rank and gathers (:class:`ServerPool` is the interface, and
:data:`LOCAL_POOL` the pool of one process)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

#: the pooled functions, by "module:qualname" (what :func:`pooled` registered)
_POOLED: dict[str, Callable[[dict[str, np.ndarray], int], np.ndarray]] = {}


def pooled(fn: Callable[[dict[str, np.ndarray], int], Any]) -> Callable:
    """Register ``fn(payload, task) -> row`` as a function the server may spread over the
    ranks (:meth:`ServerPool.map`): ``payload`` a dict of numpy arrays that every rank
    receives, ``task`` the index of the piece to compute, the row a 1-D float64 array of
    the map's width. Its row must depend on the payload and the index alone (seeds travel
    in the payload), so that the result is the same whichever rank computes it. Ranks find
    the function by its module and name: it must be defined at module level of a module
    every rank imports (the algorithm's own, or one named in ``run.plugins``)."""
    _POOLED[f"{fn.__module__}:{fn.__qualname__}"] = fn
    return fn


def pooled_name(fn: Callable) -> str:
    """The name a pooled function travels by."""
    name = f"{fn.__module__}:{fn.__qualname__}"
    if _POOLED.get(name) is not fn:
        raise ValueError(f"{name} is not registered with @pooled")
    return name


def pooled_function(name: str) -> Callable[[dict[str, np.ndarray], int], np.ndarray]:
    """The pooled function named ``name`` (its module is imported first when needed); only a
    function registered with :func:`pooled` is ever returned, never any other attribute."""
    if name not in _POOLED:
        module = name.partition(":")[0]
        if module:
            importlib.import_module(module)
    try:
        return _POOLED[name]
    except KeyError:
        raise ValueError(f"no pooled function {name!r} (functions register with @pooled)") from None


class PooledTaskFailed(RuntimeError):
    """A piece of a :meth:`ServerPool.map` raised; raised on the server after every piece ran."""


def pooled_row(fn: Callable, payload: dict[str, np.ndarray], task: int, width: int) -> np.ndarray:
    """``fn(payload, task)`` as a float64 row of ``width`` values (what every rank runs)."""
    row = np.asarray(fn(payload, task), dtype=np.float64).reshape(-1)
    if row.shape != (width,):
        raise ValueError(f"a pooled task returned {row.size} values, not {width}")
    return row


class ServerPool:
    """Where the server's independent pieces of work run: this one computes them in the
    server's process (one-process runs, and algorithms used on their own). In a run over
    several ranks the runtime replaces an algorithm's :attr:`ClusteringAlgorithm.pool` with
    one that hands the pieces to the worker ranks, which are idle while the server clusters,
    and gathers their rows in task order. A piece's row depends on its payload and index
    only, so the result has the same bits on any world size."""

    #: ranks that compute pieces
    ranks: int = 1

    def map(self, fn: Callable, payload: dict[str, np.ndarray], tasks: int,
            width: int) -> np.ndarray:  # fmt: skip
        """``[tasks, width]`` float64: row i is ``fn(payload, i)``; ``fn`` registered with
        :func:`pooled`, ``payload`` arrays of bool, integer or float dtypes. Raises
        :class:`PooledTaskFailed` when a piece raised (after every piece ran)."""
        name = pooled_name(fn)  # what a worker rank would look up: registered, or refused
        out = np.empty((tasks, width), dtype=np.float64)
        failed = []
        for i in range(tasks):
            try:
                out[i] = pooled_row(fn, payload, i, width)
            except Exception as e:  # the same outcome as on a worker rank
                failed.append(f"task {i}: {type(e).__name__}: {e}")
        if failed:
            raise PooledTaskFailed(f"{name}: " + "; ".join(failed))
        return out


#: the in-process pool every algorithm starts with
LOCAL_POOL = ServerPool()


__all__ = [
    "LOCAL_POOL",
    "PooledTaskFailed",
    "ServerPool",
    "pooled",
    "pooled_function",
    "pooled_name",
    "pooled_row",
]
