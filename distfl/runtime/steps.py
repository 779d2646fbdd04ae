"""The server's side of a step over the world (:func:`~distfl.runtime.protocol.run_step`):
it places the step's tasks on the workers (:class:`~distfl.runtime.placement.Placement`),
sends the plan and the cluster models, and puts the gathered rows back in client order; the
workers' timing rows go to the round's timing, a stop signal one of them reports stops
the run, and tasks that raised on a worker fail the round (:class:`WorkerRaised`). The
pooled work of the algorithm and the step that stops the workers go the same way."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from distfl.algorithms.api.base import ServerPool
from distfl.comm.base import Communicator
from distfl.exact import SumLayout
from distfl.runtime.placement import Placement
from distfl.runtime.pool import RankPool, TimedPool
from distfl.runtime.protocol import (
    ANSWERS,
    RETURN_MODEL,
    STEP,
    Plan,
    ProbeShape,
    StepOutput,
    WorkerRaised,
    exchange_reports,
    run_step,
)
from distfl.runtime.stopping import StopFlag
from distfl.runtime.timing import RoundTiming
from distfl.runtime.worker import Worker


class WorldSteps:
    """Runs the server's steps over ``comm``: ``layout`` is the exact sums' layout, each
    training task runs ``local_steps`` steps, and ``local_worker`` (in a one-process run)
    executes the tasks in this process."""

    def __init__(
        self,
        comm: Communicator,
        *,
        layout: SumLayout,
        local_steps: int,
        placement: Placement,
        local_worker: Worker | None,
        stop: StopFlag,
        timing: RoundTiming,
    ) -> None:
        self.comm = comm
        self.layout = layout
        self.local_steps = local_steps
        self.placement = placement
        self.worker = local_worker
        self.stop = stop
        self.timing = timing
        self.stopped = False  # whether the workers were told to stop

    def run(
        self,
        models: dict[str, torch.Tensor],
        model_of: dict[int, str | Sequence[tuple[str, float]]],
        tasks: dict[int, int],
        round_index: int,
        clusters: list[str] | None = None,
        probe_op: int = 0,
        probe: ProbeShape | None = None,
        cost: np.ndarray | None = None,
        state: dict[int, np.ndarray] | None = None,
    ) -> tuple[list[str], StepOutput]:
        """Run one step of ``tasks`` over the world with the models of ``clusters``
        (default: those ``model_of`` names, sorted), placed on the workers by predicted
        ``cost`` ([K], samples each client works through; default its local training's),
        the client's whole work on one worker. ``model_of[k]`` is a cluster id, or (soft
        membership) a sequence of (cluster id, weight γ): one task each, ascending cluster
        order. ``state[k]`` is client k's row for the client half (one width). The
        gathered rows come back sorted by client, a client's in its tasks' order."""
        entries = {k: _entries(v) for k, v in model_of.items()}
        if clusters is None:
            clusters = sorted({c for es in entries.values() for c, _ in es})
        index = {cid: i for i, cid in enumerate(clusters)}
        clients = np.array(sorted(entries), dtype=np.int64)
        per_client = self.placement.workers(clients, cost)
        rows = []
        for k, w in zip(clients.tolist(), per_client.tolist(), strict=True):
            ordered = sorted(entries[k], key=lambda e: index[e[0]])
            for slot, (cid, gamma) in enumerate(ordered):
                bits = tasks[k] if slot == 0 else tasks[k] & ~ANSWERS
                rows.append((k, index[cid], bits, w, gamma))
        width = 0 if not state else len(next(iter(state.values())))
        task_state = np.zeros((len(rows), width), dtype=np.float64)
        if width:
            for i, row in enumerate(rows):
                task_state[i] = state[row[0]]
        plan = Plan(
            STEP, round_index, len(clusters),
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.array([r[3] for r in rows], dtype=np.int64),
            probe_op, probe if probe is not None else ProbeShape(0),
            weight=np.array([r[4] for r in rows], dtype=np.float64), state=task_state,
        )  # fmt: skip
        stacked = torch.stack([models[c] for c in clusters]).to(self.comm.device)
        with self.stop.shielded():  # every rank leaves the step together; a stop acts at its end
            _, out = run_step(
                self.comm, plan, stacked, layout=self.layout, num_steps=self.local_steps,
                execute=self.worker.execute if self.worker is not None else None,
            )  # fmt: skip
            failed = []
            for row in out.timing_rows.cpu().numpy():
                if row[7] and not self.stop.name:
                    # a signal that reached a worker only: the run stops as well
                    self.stop.name = "a stop signal at a worker"
                if row[8]:
                    failed.append(int(row[0]))
                self.timing.add_step_row(row)
        if failed:
            raise WorkerRaised(failed)
        _in_client_order(plan, out)
        out.weight_bits = plan.weight_bits()
        return clusters, out

    def stop_workers(self, *, reports: bool = False) -> dict[int, dict]:
        """The step that ends every worker's loop (once: later calls do nothing); with
        ``reports`` (after :class:`WorkerRaised`), a ``FAILED`` step that brings each
        failed worker's report first, returned by rank
        (:func:`~distfl.runtime.protocol.exchange_reports`)."""
        if self.stopped:
            return {}
        self.stop.settle()
        self.stopped = True
        if not reports:
            self._header(Plan.stop())
            return {}
        self._header(Plan.failed())
        return exchange_reports(self.comm, None) or {}

    def announce_pooled(self, may_leave: bool) -> None:
        """The header of a step of the server's pooled work (the workers then compute)."""
        self._header(Plan.compute(may_leave))

    def _header(self, plan: Plan) -> None:
        run_step(self.comm, plan, None, layout=self.layout, num_steps=self.local_steps,
                 execute=None)  # fmt: skip

    def pool(self) -> ServerPool:
        """The algorithm's pool of server work: the worker ranks when there are any, else
        this process; what each computed goes to the round's timing."""
        if self.comm.world_size > 1:
            return RankPool(self.comm, self.announce_pooled, self.timing.add_pooled, stop=self.stop)
        return TimedPool(self.timing.add_pooled)


def _entries(target: str | Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """A client's tasks as (cluster id, weight γ): one of weight 1 for a cluster id."""
    if isinstance(target, str):
        return [(target, 1.0)]
    return [(str(c), float(g)) for c, g in target]


def _in_client_order(plan: Plan, out: StepOutput) -> None:
    """A step's gathered rows, which arrive worker by worker, in ascending client order."""
    out.loss_rows = _by_client(out.loss_rows)
    out.eval_rows = _by_client(out.eval_rows)
    if out.probe_rows is not None:
        out.probe_rows = _by_client(out.probe_rows)
    if plan.any(RETURN_MODEL) and len(out.model_rows):
        # rows arrive worker by worker (rank order), each worker's in client order
        back = (plan.tasks & RETURN_MODEL) != 0
        arrived = np.lexsort((plan.clients[back], plan.worker[back]))
        order = np.empty_like(arrived)
        order[arrived] = np.arange(len(arrived))
        out.model_rows = out.model_rows[torch.from_numpy(order)]


def _by_client(rows: torch.Tensor) -> torch.Tensor:
    """Rows ``[client, ...]`` in ascending client order (they arrive worker by worker)."""
    if len(rows) < 2:
        return rows
    order = torch.argsort(rows[:, 0].cpu(), stable=True)
    return rows[order.to(rows.device)]


__all__ = ["WorldSteps"]
