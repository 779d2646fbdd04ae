"""World size 1: the server and its one worker share a process; collectives are identities."""

from __future__ import annotations

import torch

from distfl.comm.base import Communicator


class LocalCommunicator(Communicator):
    name = "local"

    def __init__(self) -> None:
        self.rank = 0
        self.world_size = 1
        self.local_rank = 0
        self.device = torch.device("cpu")
        self.bytes_moved = 0

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        return t

    def reduce_sum(self, t: torch.Tensor, dst: int = 0) -> torch.Tensor | None:
        return t

    def all_reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def gather_rows(
        self, t: torch.Tensor, dst: int = 0, counts: list[int] | None = None
    ) -> torch.Tensor | None:
        return t

    def barrier(self) -> None:
        pass

    def close(self, graceful: bool = False) -> None:
        pass
