"""torch.distributed: gloo on CPU; NCCL when CUDA is present, with a CPU gloo group for
control messages (the round plan, loss rows).

A tensor goes over the group that matches its device, so the runtime only chooses where
a tensor lives. A failed or timed-out collective raises :class:`~distfl.errors.CommError`.
"""

from __future__ import annotations

import datetime
import functools
import os

import torch
import torch.distributed as dist

from distfl.comm.base import Communicator
from distfl.comm.env import LaunchInfo
from distfl.comm.iface import gloo_interface
from distfl.errors import CommError


def _collective(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except (RuntimeError, dist.DistError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CommError(
                f"rank {self.rank}: {fn.__name__} failed (a peer rank died or the "
                f"{self.timeout_s:g} s collective timeout passed): {first}"
            ) from exc

    return wrapper


class TorchCommunicator(Communicator):
    name = "torch"
    #: set once this process has destroyed a process group it created (see distfl.cli.entry)
    group_destroyed = False

    def __init__(self, info: LaunchInfo, *, timeout_s: float, use_cuda: bool) -> None:
        self.rank = info.rank
        self.world_size = info.world_size
        self.local_rank = info.local_rank
        self.timeout_s = timeout_s
        self.bytes_moved = 0
        self._owns_group = False
        timeout = datetime.timedelta(seconds=timeout_s)
        if use_cuda:
            self.device = torch.device(f"cuda:{info.local_rank % torch.cuda.device_count()}")
            torch.cuda.set_device(self.device)
            backend = "nccl"
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        #: the interface and local address gloo uses, when chosen here (see comm.iface)
        self.interface = gloo_interface(
            info.master_addr, info.master_port, num_hosts=info.num_hosts
        )
        if not dist.is_initialized():
            try:
                dist.init_process_group(
                    backend=backend,
                    init_method=f"tcp://{info.master_addr}:{info.master_port}",
                    rank=info.rank,
                    world_size=info.world_size,
                    timeout=timeout,
                )
            except (RuntimeError, dist.DistError) as exc:
                first = str(exc).strip().splitlines()[0]
                local = os.environ.get("GLOO_SOCKET_IFNAME") or "the host name's address"
                if self.interface is not None:
                    local = f"{self.interface[0]} ({self.interface[1]})"
                raise CommError(
                    f"rank {self.rank}: could not join the process group at "
                    f"{info.master_addr}:{info.master_port} from {local} within "
                    f"{timeout_s:g} s: {first}"
                ) from exc
            self._owns_group = True
        self._cpu_group = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else None
        self.backend = backend

    def _group(self, t: torch.Tensor):
        return None if t.is_cuda or self._cpu_group is None else self._cpu_group

    @_collective
    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        dist.broadcast(t, src=src, group=self._group(t))
        n = t.numel() * t.element_size()
        self.bytes_moved += n * (self.world_size - 1) if self.rank == src else n
        return t

    @_collective
    def reduce_sum(self, t: torch.Tensor, dst: int = 0) -> torch.Tensor | None:
        dist.reduce(t, dst=dst, op=dist.ReduceOp.SUM, group=self._group(t))
        n = t.numel() * t.element_size()
        self.bytes_moved += n * (self.world_size - 1) if self.rank == dst else n
        return t if self.rank == dst else None

    @_collective
    def all_reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._group(t))
        self._count_all_reduce(t.numel() * t.element_size())
        return t

    @_collective
    def gather_rows(
        self, t: torch.Tensor, dst: int = 0, counts: list[int] | None = None
    ) -> torch.Tensor | None:
        group = self._group(t)
        if counts is not None:
            self._check_rows(t, counts)
            sizes = list(counts) if self.rank == dst else None
            n_max = max(counts, default=0)
        else:
            count = torch.tensor([t.shape[0]], dtype=torch.int64, device=t.device)
            gathered = (
                [torch.zeros_like(count) for _ in range(self.world_size)]
                if self.rank == dst
                else None
            )
            dist.gather(count, gather_list=gathered, dst=dst, group=group)
            # every rank must send the same shape: the senders learn the largest count
            longest = torch.zeros(1, dtype=torch.int64, device=t.device)
            sizes = [int(c.item()) for c in gathered] if self.rank == dst else None
            if self.rank == dst:
                longest[0] = max(sizes)
            dist.broadcast(longest, src=dst, group=group)
            n_max = int(longest.item())
        padded = torch.zeros((n_max, *t.shape[1:]), dtype=t.dtype, device=t.device)
        padded[: t.shape[0]] = t
        parts = (
            [torch.empty_like(padded) for _ in range(self.world_size)] if self.rank == dst else None
        )
        dist.gather(padded, gather_list=parts, dst=dst, group=group)
        row_bytes = padded[0:1].numel() * padded.element_size() if n_max else 0
        if self.rank != dst:
            self.bytes_moved += t.shape[0] * row_bytes
            return None
        self.bytes_moved += sum(s for r, s in enumerate(sizes) if r != dst) * row_bytes
        return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)], dim=0)

    @_collective
    def barrier(self) -> None:
        dist.barrier(group=self._cpu_group)

    def close(self, graceful: bool = False) -> None:
        if self._owns_group and dist.is_initialized():
            if graceful:
                # Destroying a gloo group while a peer still tears its own down can abort
                # the process ("terminate called without an active exception"): on a clean
                # finish, every rank first meets the others. After an error a peer may be
                # gone, and waiting for it would only hang.
                try:
                    dist.barrier(group=self._cpu_group)
                except (RuntimeError, dist.DistError):
                    pass
            dist.destroy_process_group()
            TorchCommunicator.group_destroyed = True
        self._owns_group = False
