"""Communicators: in-process (world size 1), torch.distributed, mpi4py.

``comm.backend`` names one: ``torch`` (torch.distributed: NCCL for the tensors on CUDA,
with a gloo group for control messages, where CUDA is present and ``run.device`` allows
it; gloo elsewhere), ``gloo`` (torch.distributed with gloo for every collective, the
tensors passing through host memory, while the clients still train on ``run.device``: NCCL
refuses two ranks on one GPU, gloo does not), ``mpi`` (mpi4py), ``local`` (one process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distfl.comm.env import TORCH_BACKENDS, LaunchInfo, detect
from distfl.errors import ConfigError

if TYPE_CHECKING:  # torch loads only when a communicator is built
    from distfl.comm.base import Communicator


def resolve_backend(requested: str, info: LaunchInfo) -> str:
    backend = info.default_backend if requested == "auto" else requested
    if backend == "local" and info.world_size > 1:
        raise ConfigError(
            f"comm.backend = 'local' runs one process, but the launcher ({info.launcher}) "
            f"started {info.world_size}; use auto, torch or mpi"
        )
    if backend in TORCH_BACKENDS and info.world_size > 1 and not info.master_addr:
        raise ConfigError(
            f"comm.backend = '{backend}' needs a rendezvous address, which {info.launcher} does "
            "not give; launch with torchrun or srun, set MASTER_ADDR/MASTER_PORT, "
            "or use comm.backend = mpi"
        )
    return backend


def make_communicator(
    requested: str, *, timeout_s: float, use_cuda: bool, info: LaunchInfo | None = None
) -> Communicator:
    """Build the communicator for this process; nothing is initialised before this call."""
    import torch

    info = detect() if info is None else info
    backend = resolve_backend(requested, info)
    if backend == "local" or info.world_size == 1:
        from distfl.comm.local import LocalCommunicator

        return LocalCommunicator()
    if backend in TORCH_BACKENDS:
        from distfl.comm.torch_dist import TorchCommunicator

        nccl = backend == "torch" and use_cuda and torch.cuda.is_available()
        return TorchCommunicator(info, timeout_s=timeout_s, use_cuda=nccl)
    from distfl.comm.mpi import MPICommunicator

    return MPICommunicator(info, timeout_s=timeout_s)


__all__ = ["TORCH_BACKENDS", "LaunchInfo", "detect", "make_communicator", "resolve_backend"]
