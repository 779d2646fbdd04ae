"""Communicators: in-process (world size 1), torch.distributed, mpi4py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distfl.comm.env import LaunchInfo, detect
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
    if backend == "torch" and info.world_size > 1 and not info.master_addr:
        raise ConfigError(
            f"comm.backend = 'torch' needs a rendezvous address, which {info.launcher} does not "
            "give; launch with torchrun or srun, set MASTER_ADDR/MASTER_PORT, "
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
    if backend == "torch":
        from distfl.comm.torch_dist import TorchCommunicator

        return TorchCommunicator(
            info, timeout_s=timeout_s, use_cuda=use_cuda and torch.cuda.is_available()
        )
    from distfl.comm.mpi import MPICommunicator

    return MPICommunicator(info, timeout_s=timeout_s)


__all__ = ["LaunchInfo", "detect", "make_communicator", "resolve_backend"]
