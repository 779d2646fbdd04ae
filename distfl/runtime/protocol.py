"""The step protocol shared by the server (rank 0) and the workers (ranks 1..W-1).

One step:

1. broadcast of the plan: an int64 tensor of fixed length ``HEADER + 2K`` —
   header ``[kind, round, num_models, probe_op]``, then for each client the index of the
   model it uses (or -1) and its task bits;
2. if anyone probes: broadcast of the probe's shape ``[width, num_args, args...]`` (int64,
   ``PROBE_SHAPE`` long); ``probe_op`` (1-based) names the probe among the algorithm's
   ``client_ops``;
3. broadcast of the models the plan needs, stacked as one float32 buffer ``[M, P]``;
4. workers run the tasks of their own clients;
5. if anyone probes: gather of ``[client, row...]`` rows (float64, ``width`` values each),
   what the algorithm's client half answered (before any training; the runtime does not
   read them);
   if anyone trains: gather of the loss rows ``[client, l_1..l_S]`` (float64) and one
   reduce of the exact fixed-point sums ``[M, 3P + 1]`` (int64: Σ n_k Δθ_k as limbs, Σ n_k);
   if anyone evaluates: gather of ``[client, balanced acc, acc, loss, n_test]`` rows;
   if the plan asks for models: gather of the clients' updated models ``[n, P]``;
6. gather of one timing row per worker ``[rank, clients trained, train s, busy s]``.

Both sides call :func:`run_step`; which collectives happen is read from the plan, so all
ranks agree. With W=1 the server passes its own in-process worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from distfl.comm.base import Communicator
from distfl.exact import NUM_LIMBS

HEADER = 4
# step kinds
STOP = 0
STEP = 1
# per-client task bits
TRAIN = 1
EVAL = 2
RETURN_MODEL = 4
PROBE = 8
EVAL_WIDTH = 5  # client, balanced accuracy, accuracy, loss, num_test
TIMING_WIDTH = 4  # rank, clients trained, seconds in local training, seconds in the step
#: the probe's shape: width, number of arguments, up to MAX_PROBE_ARGS arguments
MAX_PROBE_ARGS = 8
PROBE_SHAPE = 2 + MAX_PROBE_ARGS


@dataclass
class ProbeShape:
    """What the runtime needs to know of a probe: its row width and its integer arguments."""

    width: int
    args: tuple[int, ...] = ()

    def encode(self) -> torch.Tensor:
        if len(self.args) > MAX_PROBE_ARGS:
            raise ValueError(f"a probe takes at most {MAX_PROBE_ARGS} arguments")
        out = np.zeros(PROBE_SHAPE, dtype=np.int64)
        out[0], out[1] = self.width, len(self.args)
        out[2 : 2 + len(self.args)] = self.args
        return torch.from_numpy(out)

    @staticmethod
    def decode(t: torch.Tensor) -> ProbeShape:
        a = t.cpu().numpy()
        return ProbeShape(int(a[0]), tuple(int(v) for v in a[2 : 2 + int(a[1])]))


@dataclass
class Plan:
    kind: int
    round: int
    num_models: int
    model_of: np.ndarray  # [K] int64, -1 = none
    tasks: np.ndarray  # [K] int64 task bits
    probe_op: int = 0  # 1-based index of the probe in the algorithm's client_ops; 0: none
    probe: ProbeShape = field(default_factory=lambda: ProbeShape(0))

    def probe_width(self) -> int:
        """Columns of a probe row after the client id."""
        return self.probe.width

    def any(self, bit: int) -> bool:
        return bool(np.any(self.tasks & bit))

    def encode(self) -> torch.Tensor:
        header = np.array([self.kind, self.round, self.num_models, self.probe_op], dtype=np.int64)
        return torch.from_numpy(np.concatenate([header, self.model_of, self.tasks]))

    @staticmethod
    def decode(t: torch.Tensor, num_clients: int) -> Plan:
        a = t.cpu().numpy()
        return Plan(
            kind=int(a[0]),
            round=int(a[1]),
            num_models=int(a[2]),
            model_of=a[HEADER : HEADER + num_clients].copy(),
            tasks=a[HEADER + num_clients : HEADER + 2 * num_clients].copy(),
            probe_op=int(a[3]),
        )

    @staticmethod
    def stop(num_clients: int) -> Plan:
        none = np.full(num_clients, -1, dtype=np.int64)
        return Plan(STOP, 0, 0, none, np.zeros(num_clients, dtype=np.int64))


@dataclass
class StepOutput:
    """What one rank produced in a step (a worker's share, or the whole step on the server)."""

    loss_rows: torch.Tensor  # [n, 1+S] float64
    sums: torch.Tensor | None  # [M, 3P+1] int64
    eval_rows: torch.Tensor  # [n, EVAL_WIDTH] float64
    model_rows: torch.Tensor  # [n, P] float32
    probe_rows: torch.Tensor | None = None  # [n, 1+width] float64
    #: a worker's clients trained and seconds in local training in this step
    trained: int = 0
    train_s: float = 0.0
    #: [workers, TIMING_WIDTH] float64, gathered on the server
    timing_rows: torch.Tensor | None = None


def empty_output(
    plan: Plan, *, num_steps: int, num_params: int, device: torch.device
) -> StepOutput:
    """A rank with nothing to report still joins every collective with empty rows."""
    sums = None
    if plan.any(TRAIN):
        sums = torch.zeros((plan.num_models, NUM_LIMBS * num_params + 1), dtype=torch.int64)
    return StepOutput(
        loss_rows=torch.zeros((0, 1 + num_steps), dtype=torch.float64),
        sums=sums.to(device) if sums is not None else None,
        eval_rows=torch.zeros((0, EVAL_WIDTH), dtype=torch.float64),
        model_rows=torch.zeros((0, num_params), dtype=torch.float32),
        probe_rows=torch.zeros((0, 1 + plan.probe_width()), dtype=torch.float64),
    )


def run_step(
    comm: Communicator,
    plan_t: torch.Tensor,
    models: torch.Tensor | None,
    *,
    num_clients: int,
    num_params: int,
    num_steps: int,
    execute,
    probe: ProbeShape | None = None,
) -> tuple[Plan, StepOutput | None]:
    """One step, on any rank. ``plan_t``/``models``/``probe`` are given on the server and
    received elsewhere. ``execute(plan, models) -> StepOutput`` runs this rank's tasks, or
    is None on a rank that hosts no clients. Returns the plan and, on the server, the
    step's gathered output (None on workers)."""
    comm.broadcast(plan_t, src=0)
    plan = Plan.decode(plan_t, num_clients)
    if plan.kind == STOP:
        return plan, None
    if plan.any(PROBE):
        shape_t = (
            probe.encode() if probe is not None else torch.zeros(PROBE_SHAPE, dtype=torch.int64)
        )
        comm.broadcast(shape_t, src=0)
        plan.probe = ProbeShape.decode(shape_t)
    if models is None:
        models = torch.empty((plan.num_models, num_params), dtype=torch.float32, device=comm.device)
    comm.broadcast(models, src=0)
    t0 = time.perf_counter()
    if execute is not None:
        out = execute(plan, models)
    else:
        out = empty_output(plan, num_steps=num_steps, num_params=num_params, device=comm.device)
    busy = time.perf_counter() - t0

    result = StepOutput(out.loss_rows, None, out.eval_rows, out.model_rows, out.probe_rows)
    if plan.any(PROBE):
        result.probe_rows = comm.gather_rows(out.probe_rows, dst=0)
    if plan.any(TRAIN):
        result.loss_rows = comm.gather_rows(out.loss_rows, dst=0)
        result.sums = comm.reduce_sum(out.sums, dst=0)
    if plan.any(EVAL):
        result.eval_rows = comm.gather_rows(out.eval_rows, dst=0)
    if plan.any(RETURN_MODEL):
        result.model_rows = comm.gather_rows(out.model_rows.to(comm.device), dst=0)
    timing = torch.zeros((0, TIMING_WIDTH), dtype=torch.float64)
    if execute is not None:
        timing = torch.tensor([[comm.rank, out.trained, out.train_s, busy]], dtype=torch.float64)
    result.timing_rows = comm.gather_rows(timing, dst=0)
    return plan, (result if comm.rank == 0 else None)
