"""The collective interface the runtime speaks; three implementations beside this file.

Collectives move tensors (flat buffers), never pickled objects. Every implementation
counts the bytes it moves between processes, so a run can report its traffic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class Communicator(ABC):
    """Rank 0 is the federation's server; ranks 1..W-1 host clients."""

    rank: int
    world_size: int
    local_rank: int
    #: where tensors handed to the collectives must live (cuda for NCCL, else cpu)
    device: torch.device
    #: bytes this rank sent plus received over the network so far
    bytes_moved: int
    name: str

    @abstractmethod
    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Fill ``t`` on every rank with ``src``'s ``t``; returns ``t``."""

    @abstractmethod
    def reduce_sum(self, t: torch.Tensor, dst: int = 0) -> torch.Tensor | None:
        """Element-wise sum of ``t`` over ranks; the sum on ``dst``, None elsewhere.

        Only exact dtypes (integers) give a result independent of the reduction order;
        the runtime sends fixed-point integers (see :mod:`distfl.exact`)."""

    @abstractmethod
    def all_reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise maximum of ``t`` over ranks, on every rank (in ``t``; returned).
        The maximum does not depend on the order of its terms (no NaN: send +Inf)."""

    @abstractmethod
    def gather_rows(
        self, t: torch.Tensor, dst: int = 0, counts: list[int] | None = None
    ) -> torch.Tensor | None:
        """Concatenate every rank's ``t`` (shape [n_r, *row], n_r may differ) in rank order
        on ``dst``; None elsewhere. ``counts``: every rank's n_r, when every rank knows them
        (then no collective is spent on learning them)."""

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def close(self, graceful: bool = False) -> None:
        """Tear down the process group; safe to call twice. ``graceful``: every rank got
        to the end of the run and calls this too (so it may wait for the others)."""

    def _count_all_reduce(self, nbytes: int) -> None:
        """An all-reduce's traffic, counted as a reduce to rank 0 and a broadcast from it."""
        self.bytes_moved += 2 * nbytes * (self.world_size - 1) if self.rank == 0 else 2 * nbytes

    def _check_rows(self, t: torch.Tensor, counts: list[int]) -> None:
        """The rows a rank sends must be the count every rank was told (else a gather
        would hang or mix rows up)."""
        if t.shape[0] != counts[self.rank]:
            raise RuntimeError(
                f"rank {self.rank} has {t.shape[0]} rows to gather, not {counts[self.rank]}"
            )

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
