"""Which worker runs each task of a step.

Every client has a home worker: the contiguous shards of :func:`~distfl.data.shard_clients`
(near-equal total samples). ``static`` placement sends every task home, as a fixed shard
would. ``balanced`` placement (the default) balances the step's predicted cost across the
workers: each worker first takes the tasks of its own clients, in client order, up to its
fair share of the step's cost (the total over the number of workers); the rest go, the
costliest first, to the least loaded worker (ties: the lowest worker). A client thus stays
with its home worker, whose cache holds its data, unless its home has more than its share
this step. Placement decides only where a task runs, never what it computes: every
result's bits are independent of it.
"""

from __future__ import annotations

import heapq

import numpy as np

from distfl.data import shard_clients

PLACEMENTS = ("balanced", "static")


def home_workers(weights: np.ndarray, num_workers: int) -> np.ndarray:
    """[K] the home worker of each client: contiguous shards of near-equal total weight."""
    home = np.zeros(len(weights), dtype=np.int64)
    if num_workers <= 1:
        return home
    for w, shard in enumerate(shard_clients(np.asarray(weights), num_workers)):
        home[shard.start : shard.stop] = w
    return home


def place(
    clients: np.ndarray,
    costs: np.ndarray,
    home: np.ndarray,
    num_workers: int,
    *,
    balanced: bool = True,
) -> np.ndarray:
    """[n] the worker of each task. ``clients`` ascending, ``costs`` [n] non-negative
    predicted costs, ``home`` [K] the clients' home workers."""
    clients = np.asarray(clients, dtype=np.int64)
    n = len(clients)
    if num_workers <= 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    mine = home[clients]
    if not balanced:
        return mine.copy()
    costs = np.asarray(costs, dtype=np.float64)
    share = costs.sum() / num_workers
    worker = np.full(n, -1, dtype=np.int64)
    load = np.zeros(num_workers)
    for w in range(num_workers):
        at = np.flatnonzero(mine == w)
        upto = np.cumsum(costs[at])
        keep = at[upto <= share * (1 + 1e-12)]
        worker[keep] = w
        load[w] = costs[keep].sum()
    rest = np.flatnonzero(worker < 0)
    if len(rest):
        rest = rest[np.argsort(-costs[rest], kind="stable")]
        heap = [(load[w], w) for w in range(num_workers)]
        heapq.heapify(heap)
        for i in rest:
            lw, w = heapq.heappop(heap)
            worker[i] = w
            heapq.heappush(heap, (lw + costs[i], w))
    return worker


class Placement:
    """Where the tasks of the run's steps go: each client's home worker
    (:func:`home_workers`, by its training samples) and ``server.placement``; a task's
    predicted cost is, unless a step names another, its client's local training: S steps of
    min(B, n_k) samples."""

    def __init__(
        self,
        num_train: np.ndarray,
        batch_size: int,
        local_steps: int,
        num_workers: int,
        *,
        balanced: bool = True,
    ) -> None:
        #: [K] predicted cost of each client's local training
        self.train_cost = np.minimum(num_train, batch_size) * local_steps
        #: [K] each client's home worker; placement balances each step's tasks from there
        self.home = home_workers(num_train, num_workers)
        self.num_workers = num_workers
        self.balanced = balanced

    def workers(self, clients: np.ndarray, cost: np.ndarray | None = None) -> np.ndarray:
        """[n] the worker of each task of ``clients`` (ascending), by ``cost`` ([K], samples
        each client works through; default :attr:`train_cost`)."""
        cost = self.train_cost if cost is None else cost
        return place(clients, cost[clients], self.home, self.num_workers, balanced=self.balanced)


__all__ = ["PLACEMENTS", "Placement", "home_workers", "place"]
