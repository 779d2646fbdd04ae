"""Which launcher started this process, and where this rank sits in the world.

Read from the environment only; nothing here initialises a process group.

- torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``,
  ``GROUP_WORLD_SIZE`` (its agents: the hosts)
- Open MPI: ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_LOCAL_RANK``
- MPICH/Hydra and ``srun --mpi=pmi2``: ``PMI_RANK``, ``PMI_SIZE`` (``MPI_LOCALRANKID``)
- Slurm steps (``srun`` without MPI): ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``,
  ``SLURM_LOCALID``, ``SLURM_STEP_NUM_NODES``; the rendezvous host is the first node of
  ``SLURM_JOB_NODELIST`` and the port is derived from the job id unless ``MASTER_PORT`` is
  set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: the values of comm.backend served by torch.distributed
TORCH_BACKENDS = ("torch", "gloo")


@dataclass(frozen=True)
class LaunchInfo:
    #: "torchrun", "mpi", "slurm" or "single"
    launcher: str
    rank: int
    world_size: int
    local_rank: int
    #: rendezvous for torch.distributed (empty when the launcher does not give one)
    master_addr: str = ""
    master_port: int = 0
    #: hosts the world spans, as far as the launcher says (torchrun's GROUP_WORLD_SIZE,
    #: Slurm's node count); 1 when it does not say
    num_hosts: int = 1

    @property
    def default_backend(self) -> str:
        """The communicator ``comm.backend = "auto"`` picks for this launcher."""
        if self.world_size == 1:
            return "local"
        return "mpi" if self.launcher == "mpi" else "torch"


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = env.get(key)
    if value is None or value == "":
        if default is None:
            raise KeyError(key)
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {key}={value!r} is not an integer") from None


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand Slurm's compact host list: ``"gpu[01-03,07],c5"`` -> gpu01 gpu02 gpu03 gpu07 c5."""
    hosts: list[str] = []
    # split on commas that are not inside brackets
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", nodelist):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not m:
            hosts.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                width = len(lo)
                for i in range(int(lo), int(hi) + 1):
                    hosts.extend(expand_nodelist(f"{prefix}{i:0{width}d}{suffix}"))
            else:
                hosts.extend(expand_nodelist(f"{prefix}{part}{suffix}"))
    return hosts


def slurm_port(env: Mapping[str, str]) -> int:
    """A rendezvous port per job, so that two jobs sharing a node do not collide."""
    job = _int(env, "SLURM_JOB_ID", 0)
    return 15000 + job % 20000


def detect(env: Mapping[str, str] | None = None, backend: str = "auto") -> LaunchInfo:
    """Work out the launch from ``env`` (default: ``os.environ``).

    ``backend = "torch"`` (or ``"gloo"``) inside a Slurm step takes the step's variables
    even where srun also set PMI ones (clusters whose ``MpiDefault`` is pmi2 set them for
    every step)."""
    env = os.environ if env is None else env
    if backend in TORCH_BACKENDS and "RANK" not in env and _slurm_step(env):
        return _slurm(env)
    if "RANK" in env and "WORLD_SIZE" in env:
        return LaunchInfo(
            launcher="torchrun",
            rank=_int(env, "RANK"),
            world_size=_int(env, "WORLD_SIZE"),
            local_rank=_int(env, "LOCAL_RANK", 0),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(env, "MASTER_PORT", 29500),
            num_hosts=_int(env, "GROUP_WORLD_SIZE", 1),
        )
    if "OMPI_COMM_WORLD_SIZE" in env:
        return LaunchInfo(
            launcher="mpi",
            rank=_int(env, "OMPI_COMM_WORLD_RANK"),
            world_size=_int(env, "OMPI_COMM_WORLD_SIZE"),
            local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0),
        )
    if "PMI_SIZE" in env and "PMI_RANK" in env:
        local = env.get("MPI_LOCALRANKID", env.get("SLURM_LOCALID", "0"))
        return LaunchInfo(
            launcher="mpi",
            rank=_int(env, "PMI_RANK"),
            world_size=_int(env, "PMI_SIZE"),
            local_rank=int(local) if local.isdigit() else 0,
        )
    if _slurm_step(env):
        return _slurm(env)
    return LaunchInfo(launcher="single", rank=0, world_size=1, local_rank=0)


def _slurm_step(env: Mapping[str, str]) -> bool:
    # Inside the batch script SLURM_PROCID=0 is set but only one process runs: only srun
    # steps set SLURM_STEP_ID, so that is what marks a multi-process step.
    return "SLURM_STEP_ID" in env and "SLURM_PROCID" in env


def _slurm(env: Mapping[str, str]) -> LaunchInfo:
    world = _int(env, "SLURM_STEP_NUM_TASKS", _int(env, "SLURM_NTASKS", 1))
    nodes = expand_nodelist(env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST", "")))
    return LaunchInfo(
        launcher="slurm",
        rank=_int(env, "SLURM_PROCID"),
        world_size=world,
        local_rank=_int(env, "SLURM_LOCALID", 0),
        master_addr=env.get("MASTER_ADDR", nodes[0] if nodes else "127.0.0.1"),
        master_port=_int(env, "MASTER_PORT", slurm_port(env)),
        num_hosts=_int(env, "SLURM_STEP_NUM_NODES", _int(env, "SLURM_JOB_NUM_NODES", 1)),
    )
