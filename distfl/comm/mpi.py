"""mpi4py: buffer methods (``Bcast``, ``Reduce``, ``Gatherv``) on CPU tensors, no pickling.

mpi4py is imported only when this communicator is built, so that importing distfl never
initialises MPI. When a rank dies, the MPI launcher (``mpiexec``, ``srun``) ends the job.
MPI has no collective timeout of its own, so a watchdog thread aborts the job when one
collective has waited longer than ``comm.timeout_s`` (a peer that hangs without dying).
"""

from __future__ import annotations

import functools
import sys
import threading
import time

import numpy as np
import torch

from distfl.comm.base import Communicator
from distfl.comm.env import LaunchInfo
from distfl.errors import CommError


def _np(t: torch.Tensor) -> np.ndarray:
    if t.is_cuda or not t.is_contiguous():
        raise ValueError("the MPI communicator moves contiguous CPU tensors only")
    return t.numpy()


class _Watchdog:
    """Calls ``expire(op)`` once if a collective stays open longer than ``timeout_s``."""

    def __init__(self, timeout_s: float, expire) -> None:
        self.timeout_s = timeout_s
        self.expire = expire
        self.op: str | None = None
        self.since = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="distfl-mpi-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        tick = min(1.0, self.timeout_s / 10)
        while not self._stop.wait(tick):
            op = self.op
            if op is not None and time.monotonic() - self.since > self.timeout_s:
                self.expire(op)
                return

    def close(self) -> None:
        self._stop.set()


def _collective(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self._watchdog.since = time.monotonic()
        self._watchdog.op = fn.__name__
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._watchdog.op = None

    return wrapper


class MPICommunicator(Communicator):
    name = "mpi"

    def __init__(self, info: LaunchInfo, *, timeout_s: float = 300.0) -> None:
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise CommError(
                "comm.backend = 'mpi' needs mpi4py: pip install 'distfl[mpi]' "
                f"(and an MPI such as pip's mpich) ({exc})"
            ) from None
        self._MPI = MPI
        self._comm = MPI.COMM_WORLD
        self.rank = self._comm.Get_rank()
        self.world_size = self._comm.Get_size()
        if self.world_size != info.world_size:
            raise CommError(
                f"MPI reports a world of {self.world_size} ranks but the launcher's environment "
                f"says {info.world_size}: is mpiexec from the same MPI as mpi4py? "
                "(use the mpiexec next to the Python that runs distfl)"
            )
        self.local_rank = info.local_rank
        self.device = torch.device("cpu")
        self.bytes_moved = 0
        self.timeout_s = timeout_s
        self._watchdog = _Watchdog(timeout_s, self._expire)

    def _expire(self, op: str) -> None:
        print(
            f"distfl: error: rank {self.rank}: {op} did not complete within the "
            f"{self.timeout_s:g} s collective timeout (a peer rank hung or died); "
            "aborting the MPI job",
            file=sys.stderr,
            flush=True,
        )
        # the line reaches the user through mpiexec's forwarding, which MPI_Abort can cut
        # short: give the launcher a moment to forward it first
        time.sleep(0.5)
        self._comm.Abort(3)

    @_collective
    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        self._comm.Bcast(_np(t), root=src)
        n = t.numel() * t.element_size()
        self.bytes_moved += n * (self.world_size - 1) if self.rank == src else n
        return t

    @_collective
    def reduce_sum(self, t: torch.Tensor, dst: int = 0) -> torch.Tensor | None:
        send = _np(t)
        if self.rank == dst:
            out = torch.empty_like(t)
            self._comm.Reduce(send, _np(out), op=self._MPI.SUM, root=dst)
            self.bytes_moved += send.nbytes * (self.world_size - 1)
            return out
        self._comm.Reduce(send, None, op=self._MPI.SUM, root=dst)
        self.bytes_moved += send.nbytes
        return None

    @_collective
    def all_reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        buf = _np(t)
        self._comm.Allreduce(self._MPI.IN_PLACE, buf, op=self._MPI.MAX)
        self._count_all_reduce(buf.nbytes)
        return t

    @_collective
    def gather_rows(
        self, t: torch.Tensor, dst: int = 0, counts: list[int] | None = None
    ) -> torch.Tensor | None:
        t = t.contiguous()
        row = int(np.prod(t.shape[1:])) if t.dim() > 1 else 1
        if counts is not None:
            self._check_rows(t, counts)
            counts = np.asarray(counts, dtype=np.int64) if self.rank == dst else None
        else:
            counts = np.zeros(self.world_size, dtype=np.int64) if self.rank == dst else None
            self._comm.Gather(np.array([t.shape[0]], dtype=np.int64), counts, root=dst)
        send = _np(t)
        if self.rank != dst:
            self._comm.Gatherv(send, None, root=dst)
            self.bytes_moved += send.nbytes
            return None
        total = int(counts.sum())
        out = torch.empty((total, *t.shape[1:]), dtype=t.dtype)
        elems = (counts * row).tolist()
        displs = np.concatenate([[0], np.cumsum(elems)[:-1]]).tolist()
        self._comm.Gatherv(send, [_np(out), elems, displs, self._mpi_type(out)], root=dst)
        self.bytes_moved += (total - t.shape[0]) * row * t.element_size()
        return out

    def _mpi_type(self, t: torch.Tensor):
        from mpi4py.util.dtlib import from_numpy_dtype

        return from_numpy_dtype(_np(t).dtype)

    @_collective
    def barrier(self) -> None:
        self._comm.Barrier()

    def close(self, graceful: bool = False) -> None:
        # MPI_Finalize runs at interpreter exit (mpi4py's default); only the watchdog stops here.
        self._watchdog.close()
