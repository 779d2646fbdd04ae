"""The server's pieces of work on the worker ranks (:class:`~distfl.algorithms.api.base.ServerPool`
over the collectives).

While the server clusters, the workers wait for the next step. An algorithm's
``pool.map(fn, payload, tasks, width)`` becomes one step of kind ``COMPUTE``:

1. the step's header (:func:`~distfl.runtime.protocol.run_step`'s first broadcast) says
   ``COMPUTE``;
2. a broadcast of two int64 lengths, then one of the job as bytes: a JSON description
   (the function's name, the number of tasks, the row width, each payload array's name,
   dtype and shape) followed by the arrays' raw bytes. No pickle: a rank reads numbers only;
3. task i runs on rank ``1 + i mod (W - 1)``;
4. one gather of float64 rows: per task ``[ok, row...]``, and one row per worker
   ``[tasks, seconds]``. The server puts the rows back in task order. A task that raised
   an exception is ``ok`` 0 (the worker says why on stderr; :class:`PooledTaskFailed` on
   the server); one that raised what is no Exception (SystemExit, a plug-in's own
   BaseException) fails the round, as a step's tasks do (:class:`WorkerRaised`).

A task's row depends on the payload and its index alone, so the result is the same on any
world size (the one-process pool runs the same function on the same arrays).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import numpy as np
import torch

from distfl.algorithms.api.pool import (
    PooledTaskFailed,
    ServerPool,
    pooled_function,
    pooled_name,
    pooled_row,
)
from distfl.comm.base import Communicator
from distfl.runtime.protocol import WorkerRaised, gather_blocks
from distfl.runtime.stopping import StopNow

#: a task's ``ok`` when its worker left it at a stop signal (1: computed, 0: it raised)
LEFT = -1.0
#: a task's ``ok`` when it, or one before it on its rank, raised what is no Exception
RAISED = -2.0

#: the dtypes a payload array may have (the job's description names them)
DTYPES = ("bool", "int32", "int64", "uint64", "float32", "float64")


def encode_job(name: str, tasks: int, width: int, payload: dict[str, np.ndarray]) -> bytes:
    arrays = []
    blobs = []
    for key in sorted(payload):
        a = np.ascontiguousarray(payload[key])
        if a.dtype.name not in DTYPES:
            raise TypeError(f"pooled payload {key!r}: dtype {a.dtype} (allowed: {DTYPES})")
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        arrays.append([key, a.dtype.name, list(a.shape)])
        blobs.append(a.tobytes())
    head = json.dumps({"fn": name, "tasks": tasks, "width": width, "arrays": arrays}).encode()
    return len(head).to_bytes(8, "little") + head + b"".join(blobs)


def decode_job(data: bytes) -> tuple[str, int, int, dict[str, np.ndarray]]:
    n = int.from_bytes(data[:8], "little")
    head = json.loads(data[8 : 8 + n].decode())
    pos = 8 + n
    payload = {}
    for key, dtype, shape in head["arrays"]:
        if dtype not in DTYPES:
            raise ValueError(f"pooled payload {key!r}: dtype {dtype}")
        dt = np.dtype(dtype).newbyteorder("<")
        size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        payload[key] = np.frombuffer(data, dtype=dt, count=size // dt.itemsize, offset=pos)
        payload[key] = payload[key].reshape(shape)
        pos += size
    return head["fn"], int(head["tasks"]), int(head["width"]), payload


def tasks_of(rank: int, tasks: int, world_size: int) -> np.ndarray:
    """The task indices rank ``rank`` (1..W-1) computes."""
    return np.arange(rank - 1, tasks, world_size - 1, dtype=np.int64)


def exchange(
    comm: Communicator, job: tuple[bytes, int, int] | None, stop=None, raised=None
) -> tuple[np.ndarray, np.ndarray] | None:
    """One pooled job over the world, after its header: ``job`` (rank 0: its bytes, its
    tasks and its row width) travels from rank 0, each worker decodes it and computes its
    tasks (a worker whose ``stop`` flag is set leaves the rest, ``ok`` = LEFT; one whose
    task raised what is no Exception tells ``raised(exc)`` and leaves the rest, ``ok`` =
    RAISED), and rank 0 gets (``[tasks, 1 + width]`` rows ``[ok, row...]`` in task order,
    ``[W - 1, 2]`` per worker ``[tasks, seconds]``); None on the workers."""
    size = torch.zeros(1, dtype=torch.int64)
    if job is not None:
        size[0] = len(job[0])
    size = comm.broadcast(size.to(comm.device), src=0).cpu()
    buf = torch.zeros(int(size[0]), dtype=torch.uint8)
    if job is not None:
        buf = torch.frombuffer(bytearray(job[0]), dtype=torch.uint8)
    buf = comm.broadcast(buf.to(comm.device), src=0).cpu()
    W = comm.world_size
    if job is not None:  # rank 0 sent the job: it knows its shape and computes no task
        _, tasks, width = job
        rows = torch.zeros((0, 1 + width), dtype=torch.float64)
        timing = torch.zeros((0, 2), dtype=torch.float64)
    else:
        t0 = time.perf_counter()
        name, tasks, width, payload = decode_job(buf.numpy().tobytes())
        mine = tasks_of(comm.rank, tasks, W)
        rows = torch.from_numpy(_compute(comm.rank, name, mine, payload, width, stop, raised))
        timing = torch.tensor([[len(mine), time.perf_counter() - t0]], dtype=torch.float64)
    counts = [0] + [len(tasks_of(r, tasks, W)) for r in range(1, W)]
    got = gather_blocks(comm, [(rows, counts), (timing, [0] + [1] * (W - 1))])
    if got is None:
        return None
    flat, per_rank = (g.numpy() for g in got)
    order = np.concatenate([tasks_of(r, tasks, W) for r in range(1, W)])
    result = np.empty_like(flat)
    result[order] = flat
    return result, per_rank


def _compute(rank, name, mine, payload, width, stop, raised) -> np.ndarray:
    """A worker's rows ``[ok, row...]`` of its tasks ``mine`` (:func:`exchange`)."""
    out = np.zeros((len(mine), 1 + width), dtype=np.float64)
    fn = pooled_function(name)
    for j, i in enumerate(mine):
        if stop is not None and stop.name:  # the rest is left: the server abandons it
            out[j:, 0] = LEFT
            break
        try:
            out[j, 1:] = pooled_row(fn, payload, int(i), width)
            out[j, 0] = 1.0
        except Exception as e:
            print(f"rank {rank}: {name} task {i}: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)  # fmt: skip
            out[j, 1:] = np.nan
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit, a plug-in's own: the round fails
            if raised is None:
                raise
            raised(e)
            out[j:, 0] = RAISED
            break
    return out


class RankPool(ServerPool):
    """The server's pool in a run over W > 1 ranks: each map is one ``COMPUTE`` step.
    ``announce(may_leave)`` sends the step's header (the workers then call :func:`exchange`);
    ``account(rank, tasks, seconds)`` is told what each worker did."""

    def __init__(self, comm: Communicator, announce, account, stop=None) -> None:
        self.comm = comm
        self.ranks = comm.world_size - 1
        self._announce = announce
        self._account = account
        #: the process's StopFlag: the job's collectives are shielded from it, and when the
        #: server's work is abandonable the workers may leave the job's tasks at a signal
        self._stop = stop

    def map(self, fn, payload, tasks, width):
        name = pooled_name(fn)
        job = encode_job(name, int(tasks), int(width), payload)
        stop = self._stop
        may_leave = stop is not None and stop.abandoning
        with stop.shielded() if stop is not None else contextlib.nullcontext():
            self._announce(may_leave)
            result, per_rank = exchange(self.comm, (job, int(tasks), int(width)))
        for r, (n, seconds) in enumerate(per_rank, start=1):
            self._account(r, int(n), float(seconds))
        failed = np.flatnonzero(result[:, 0] == RAISED)
        if len(failed):  # the rank of task i is 1 + i mod (W - 1)
            raise WorkerRaised(sorted({1 + int(i) % self.ranks for i in failed}))
        if (result[:, 0] == LEFT).any():  # a worker left its tasks at a stop signal
            raise StopNow
        bad = np.flatnonzero(result[:, 0] != 1.0)
        if len(bad):
            raise PooledTaskFailed(
                f"{name}: tasks {bad.tolist()} raised on their ranks (each said why on stderr)"
            )
        return result[:, 1:]


class TimedPool(ServerPool):
    """The one-process pool, which tells ``account(0, tasks, seconds)`` (rank 0's work) what
    it computed."""

    def __init__(self, account) -> None:
        self._account = account

    def map(self, fn, payload, tasks, width):
        t0 = time.perf_counter()
        try:
            return super().map(fn, payload, tasks, width)
        finally:
            self._account(0, int(tasks), time.perf_counter() - t0)


__all__ = ["RankPool", "TimedPool", "decode_job", "encode_job", "exchange", "tasks_of"]
