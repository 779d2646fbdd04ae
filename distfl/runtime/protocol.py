"""The step protocol shared by the server (rank 0) and the workers (ranks 1..W-1).

One step:

1. broadcast of the plan's header: an int64 tensor of fixed length ``HEADER`` —
   ``[kind, round, num_models, probe_op, num_tasks, state_width]`` and the probe's shape
   ``[width, num_args, args...]`` (``PROBE_SHAPE`` long; ``probe_op``, 1-based, names the
   probe among the algorithm's ``client_ops``, 0: none) — followed, in the same
   broadcast, by room for ``INLINE_TASKS`` task rows;
2. the tasks, ``[num_tasks, 5]`` int64 rows ``[client, model index, task bits, worker,
   weight]`` in ascending client order (inside the first broadcast when there are at most
   ``INLINE_TASKS``, else in a second one); a client that trains several models (soft
   membership) has one row per model, in ascending model index, on one worker, and only
   its first row carries PROBE (or AFTER). ``weight`` is the float64 bits of the factor γ its update
   enters its model's sum with (1.0 for a plain task). With ``state_width`` D > 0, a
   float64 broadcast ``[num_tasks, D]`` of each task's client state follows (what the
   algorithm's client half reads). The worker
   (0..W-2, rank = worker + 1; the in-process worker 0 at W=1) is the server's placement
   of the task (:mod:`distfl.runtime.placement`): the plan is as long as the step's
   tasks, not the population;
3. broadcast of the models the plan needs, stacked as one float32 buffer ``[M, P]``;
4. each worker runs its tasks;
5. if anyone trains: with ``comm.sums = "scaled"`` a max all-reduce of the bounds
   ``[M, L]`` (float64, one per model and parameter tensor) that fixes each tensor's grid
   (:mod:`distfl.exact`); one reduce of the exact fixed-point sums ``[M, P + 1]``
   (int64: Σ w_k Δθ_k on the grids, Σ q_k; ``[M, 3P + 1]`` with ``"limbs"``, three limbs
   per value), where q_k = round(γ_k 2^G)·(1 | n_k) and w_k = q_k 2^-G, with G = 0 when
   every γ of the step is 1 (:meth:`Plan.weight_bits`), so the weight column is exact;
   if the plan asks for models: gather of the clients' updated models ``[n, P]``;
6. one gather of the step's float64 rows, every rank's blocks back to back (their row
   counts follow from the plan, so no collective is spent on them): the probe rows
   ``[client, row...]`` (``width`` values each; what the algorithm's client half answered,
   before any training, or after it for AFTER tasks), the loss rows ``[client,
   l_1..l_S]``, the evaluation rows ``[client, balanced acc, acc, loss, n_test]``, and one
   timing row per worker ``[rank, clients trained, train s, busy s, clients
   materialised, cache MiB, peak RSS MiB, stop, failed]`` (stop: 1 when a stop signal
   reached that rank; failed: 1 when its tasks raised); a worker that left its training at a
   stop signal (tasks marked ``MAY_GIVE_UP``) still joins every collective: zero sums, zero
   models, and loss rows ``[-1 - client, NaN...]``; so does a worker whose tasks raised
   (:func:`failed_output`); rows arrive in rank order, each worker's in client order: the
   server sorts them.

Both sides call :func:`run_step`; which collectives happen is read from the plan, so all
ranks agree. With W=1 the server passes its own in-process worker. A header of kind
``COMPUTE`` is followed by a pooled job of the server's instead
(:mod:`distfl.runtime.pool`). A header of kind ``STOP`` ends every worker's loop; one of
kind ``FAILED`` (the server ends a run whose step a worker's tasks raised in) is followed by
one gather of each worker's failure report (:func:`exchange_reports`), then every worker
ends its loop.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from distfl.comm.base import Communicator
from distfl.errors import UserError
from distfl.exact import SumLayout, grid_exponents

# step kinds
STOP = 0
STEP = 1
#: a piece of the server's work for the workers (:mod:`distfl.runtime.pool`)
COMPUTE = 2
#: the run ends on a worker's failure: every worker sends its failure report, then stops
FAILED = 3
# per-client task bits
TRAIN = 1
EVAL = 2
RETURN_MODEL = 4
PROBE = 8
#: with TRAIN: the worker may leave the training at a stop signal, between local steps (the
#: server then discards the round: it holds a copy of the round before)
MAY_GIVE_UP = 16
#: with TRAIN, on a client's first task: its client half answers the step's op (a row, as a
#: probe's) after the training, on the model the client trained (FedSaC's feature bases)
AFTER = 32
#: the bits whose tasks answer a row of the step's op (before or after training)
ANSWERS = PROBE | AFTER
EVAL_WIDTH = 5  # client, balanced accuracy, accuracy, loss, num_test
#: rank, clients trained, seconds in local training, seconds in the step, clients
#: materialised, MiB of clients cached, peak resident MiB of the process, 1 when a stop
#: signal reached the rank (the server then stops the run after its last completed round),
#: and 1 when the rank's tasks raised (the server then fails the round)
TIMING_WIDTH = 9
#: what the server sums per worker and round: the timing row's six numbers after the rank,
#: then the server's pooled tasks the rank computed and their seconds
WORKER_FIELDS = 8
#: the probe's shape: width, number of arguments, up to MAX_PROBE_ARGS arguments
MAX_PROBE_ARGS = 8
PROBE_SHAPE = 2 + MAX_PROBE_ARGS
#: kind, round, num_models, probe_op, num_tasks, state width; then the probe's shape
STEP_FIELDS = 6
HEADER = STEP_FIELDS + PROBE_SHAPE
TASK_WIDTH = 5  # client, model index, task bits, worker, weight (float64 bits)
#: the fixed-point bits of a step's weights γ when one of them is not 1 (Plan.weight_bits)
WEIGHT_BITS = 20
#: tasks that travel inside the header's broadcast (a longer plan takes a second one)
INLINE_TASKS = 128
#: the characters of a worker's failure report: of its exception's first line, and of its
#: traceback (the end of a longer one is kept)
REPORT_LINE = 1000
REPORT_TRACEBACK = 16384


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
    """A step: its tasks in ascending client order, one entry per client that has one."""

    kind: int
    round: int
    num_models: int
    clients: np.ndarray  # [n] int64, ascending
    model: np.ndarray  # [n] int64 index into the step's models
    tasks: np.ndarray  # [n] int64 task bits
    worker: np.ndarray  # [n] int64 the worker that runs the task
    probe_op: int = 0  # 1-based index of the probe in the algorithm's client_ops; 0: none
    probe: ProbeShape = field(default_factory=lambda: ProbeShape(0))
    #: [n] float64 the factor γ each task's update enters its model's sum with (None: 1)
    weight: np.ndarray | None = None
    #: [n, D] float64 each task's client state for the client half (None: D = 0)
    state: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.clients)
        if self.weight is None:
            self.weight = np.ones(n, dtype=np.float64)
        if self.state is None:
            self.state = np.zeros((n, 0), dtype=np.float64)

    @property
    def num_tasks(self) -> int:
        return len(self.clients)

    def weight_bits(self) -> int:
        """G, the fixed-point bits of the step's weights: 0 when every γ is 1 (the weight
        of a client is then its count, 1 | n_k, as in a plain round), else WEIGHT_BITS."""
        return 0 if bool(np.all(self.weight == 1.0)) else WEIGHT_BITS

    def slots(self) -> np.ndarray:
        """[n] each task's position among its client's tasks (0 for a client's first)."""
        n = self.num_tasks
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        first = np.r_[True, self.clients[1:] != self.clients[:-1]]
        starts = np.flatnonzero(first)
        return np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))

    def probe_width(self) -> int:
        """Columns of a probe row after the client id."""
        return self.probe.width

    def any(self, bit: int) -> bool:
        return bool(np.any(self.tasks & bit))

    def terms_per_model(self) -> torch.Tensor:
        """[M] int64: how many clients train from each model (the terms of its sum)."""
        trained = (self.tasks & TRAIN) != 0
        return torch.from_numpy(np.bincount(self.model[trained], minlength=self.num_models))

    def rows_per_rank(self, bits: int, world_size: int, any_of: bool = False) -> list[int]:
        """How many rows each rank answers for the tasks that have all of ``bits`` (with
        ``any_of``: any of them): one per such task, on the rank of its worker (rank 0
        itself at W = 1)."""
        has = (self.tasks & bits) != 0 if any_of else (self.tasks & bits) == bits
        if world_size == 1:
            return [int(has.sum())]
        per_worker = np.bincount(self.worker[has], minlength=world_size - 1)
        return [0] + [int(c) for c in per_worker[: world_size - 1]]

    def of_worker(self, worker: int) -> np.ndarray:
        """Positions of ``worker``'s tasks (ascending client order)."""
        return np.flatnonzero(self.worker == worker)

    def encode_header(self) -> torch.Tensor:
        head = np.array(
            [self.kind, self.round, self.num_models, self.probe_op, self.num_tasks,
             self.state.shape[1]],
            dtype=np.int64,
        )  # fmt: skip
        return torch.cat([torch.from_numpy(head), self.probe.encode()])

    def encode_tasks(self) -> torch.Tensor:
        weight = np.ascontiguousarray(self.weight, dtype=np.float64).view(np.int64)
        rows = np.stack([self.clients, self.model, self.tasks, self.worker, weight], axis=1)
        return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))

    @staticmethod
    def decode(
        header: torch.Tensor, tasks: torch.Tensor | None, state: torch.Tensor | None = None
    ) -> Plan:
        h = header.cpu().numpy()
        rows = np.zeros((0, TASK_WIDTH), dtype=np.int64) if tasks is None else tasks.cpu().numpy()
        return Plan(
            kind=int(h[0]),
            round=int(h[1]),
            num_models=int(h[2]),
            clients=rows[:, 0].copy(),
            model=rows[:, 1].copy(),
            tasks=rows[:, 2].copy(),
            worker=rows[:, 3].copy(),
            probe_op=int(h[3]),
            probe=ProbeShape.decode(header[STEP_FIELDS:]),
            weight=np.ascontiguousarray(rows[:, 4]).view(np.float64).copy(),
            state=(
                state.cpu().numpy().astype(np.float64)
                if state is not None
                else np.zeros((len(rows), int(h[5])), dtype=np.float64)
            ),
        )

    @staticmethod
    def stop() -> Plan:
        none = np.zeros(0, dtype=np.int64)
        return Plan(STOP, 0, 0, none, none, none, none)

    @staticmethod
    def failed() -> Plan:
        """The header that ends a run whose step a worker's tasks raised in
        (:func:`exchange_reports` follows)."""
        none = np.zeros(0, dtype=np.int64)
        return Plan(FAILED, 0, 0, none, none, none, none)

    @staticmethod
    def compute(may_leave: bool = False) -> Plan:
        """The header of a pooled job (:func:`distfl.runtime.pool.exchange` follows); its
        ``round`` holds MAY_GIVE_UP when the workers may leave the job's tasks at a stop
        signal (the server then abandons the work it belongs to)."""
        none = np.zeros(0, dtype=np.int64)
        return Plan(COMPUTE, MAY_GIVE_UP if may_leave else 0, 0, none, none, none, none)


@dataclass
class StepOutput:
    """What one rank produced in a step (a worker's share, or the whole step on the server)."""

    loss_rows: torch.Tensor  # [n, 1+S] float64
    #: [M, layout.width] int64: the limbs' sums (``"limbs"``), or, on the server after the
    #: step, the reduced sums on the grids of ``exponents``
    sums: torch.Tensor | None
    eval_rows: torch.Tensor  # [n, EVAL_WIDTH] float64
    model_rows: torch.Tensor  # [n, P] float32
    probe_rows: torch.Tensor | None = None  # [n, 1+width] float64
    #: a worker's clients trained and seconds in local training in this step, clients it
    #: materialised and the MiB of clients it keeps
    trained: int = 0
    train_s: float = 0.0
    loaded: int = 0
    cache_mb: float = 0.0
    #: whether a stop signal reached the worker's rank
    stopped: bool = False
    #: whether the worker's tasks raised (:func:`failed_output`)
    failed: bool = False
    #: [workers, TIMING_WIDTH] float64, gathered on the server
    timing_rows: torch.Tensor | None = None
    #: ``"scaled"``: this rank's bounds [M, L] (float64) and the function that puts its
    #: terms on the agreed grids, exponents [M, L] -> sums [M, P + 1] (int64)
    bounds: torch.Tensor | None = None
    finish_sums: Callable[[torch.Tensor], torch.Tensor] | None = None
    #: ``"scaled"``, on the server: the grids' exponents [M, L] of the reduced sums
    exponents: torch.Tensor | None = None
    #: on the server: G, the step's weight column counts units of 2^-G (Plan.weight_bits)
    weight_bits: int = 0


def sum_layout(kind: str, model: torch.nn.Module) -> SumLayout:
    """The exact sums' layout of ``comm.sums = kind`` for ``model``: one grid per parameter
    tensor, in the order of the flat model."""
    return SumLayout(kind, tuple(int(p.numel()) for p in model.parameters()))


def empty_output(
    plan: Plan, *, num_steps: int, layout: SumLayout, device: torch.device
) -> StepOutput:
    """A rank with nothing to report still joins every collective with empty rows."""
    out = StepOutput(
        loss_rows=torch.zeros((0, 1 + num_steps), dtype=torch.float64),
        sums=None,
        eval_rows=torch.zeros((0, EVAL_WIDTH), dtype=torch.float64),
        model_rows=torch.zeros((0, layout.num_params), dtype=torch.float32),
        probe_rows=torch.zeros((0, 1 + plan.probe_width()), dtype=torch.float64),
    )
    if plan.any(TRAIN):
        zeros = torch.zeros((plan.num_models, layout.width), dtype=torch.int64, device=device)
        if layout.kind == "scaled":
            out.bounds = torch.zeros((plan.num_models, len(layout.segments)), dtype=torch.float64)
            out.finish_sums = lambda _exponents: zeros
        else:
            out.sums = zeros
    return out


def failed_output(
    plan: Plan, *, rank: int, world_size: int, num_steps: int, layout: SumLayout,
    device: torch.device,
) -> StepOutput:  # fmt: skip
    """The share of worker rank ``rank`` in a step its tasks raised in: it still joins every
    collective, with zero sums and models and as many rows of NaN as the plan gives it, and
    says it failed in its timing row (the server then fails the round)."""
    out = empty_output(plan, num_steps=num_steps, layout=layout, device=device)

    def nan_rows(bits: int, width: int, any_of: bool = False) -> torch.Tensor:
        n = plan.rows_per_rank(bits, world_size, any_of)[rank]
        return torch.full((n, width), math.nan, dtype=torch.float64)

    out.probe_rows = nan_rows(ANSWERS, 1 + plan.probe_width(), any_of=True)
    out.loss_rows = nan_rows(TRAIN, 1 + num_steps)
    out.eval_rows = nan_rows(EVAL, EVAL_WIDTH)
    returned = plan.rows_per_rank(TRAIN | RETURN_MODEL, world_size)[rank]
    out.model_rows = torch.zeros((returned, layout.num_params), dtype=torch.float32)
    out.failed = True
    return out


class WorkerRaised(BaseException):
    """The tasks of worker ``ranks`` raised in a step or a pooled job: the round fails, and
    what each raised comes with the ``FAILED`` step that ends the workers
    (:func:`exchange_reports`). A BaseException, so that an algorithm's ``except
    Exception`` around its pooled work does not take it for its own."""

    def __init__(self, ranks: list[int]) -> None:
        listed = ", ".join(map(str, ranks))
        super().__init__(f"the tasks of rank{'s' if len(ranks) > 1 else ''} {listed} raised")
        self.ranks = ranks


def failure_exit_code(exc: BaseException) -> int:
    """The exit code of a run whose round raised ``exc``: a UserError's own (2 for bad
    input, such as a plug-in's ConfigError), else 1; never 0 (a SystemExit(0) of a
    plug-in's fails the run all the same)."""
    code = getattr(exc, "exit_code", 1) if isinstance(exc, UserError) else 1
    return code if type(code) is int and 0 < code < 256 else 1


def failure_report(exc: BaseException) -> bytes:
    """What a worker tells the server of the exception its tasks raised: JSON of the exit
    code the run is to end with (:func:`failure_exit_code`), the exception's type and first
    line, and its traceback (:data:`REPORT_LINE` and :data:`REPORT_TRACEBACK` characters at
    most)."""
    exit_code = failure_exit_code(exc)
    lines = str(exc).strip().splitlines()
    text = "".join(traceback.format_exception(exc))
    if len(text) > REPORT_TRACEBACK:
        text = "...\n" + text[-REPORT_TRACEBACK:]
    line = lines[0][:REPORT_LINE] if lines else ""
    report = {"code": exit_code, "type": type(exc).__name__, "line": line, "traceback": text}
    return json.dumps(report).encode()


def exchange_reports(comm: Communicator, report: bytes | None) -> dict[int, dict] | None:
    """After a ``FAILED`` header: each worker's failure report (:func:`failure_report`;
    ``report`` None on rank 0 and on a worker whose tasks never raised) gathered on rank 0,
    by rank, in two gathers (the reports' lengths, then their bytes); a report that does not
    read as one is left out. None on the workers."""
    data = report or b""
    W = comm.world_size
    length = torch.tensor([[len(data)]], dtype=torch.int64)
    lengths = comm.gather_rows(length, 0, [1] * W)
    mine = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0)
    flat = comm.gather_rows(mine.to(torch.uint8).view(-1, 1), 0)
    if lengths is None or flat is None:
        return None
    blob = flat.view(-1).cpu().numpy().tobytes()
    reports, pos = {}, 0
    for rank, n in enumerate(lengths.view(-1).cpu().tolist()):
        part, pos = blob[pos : pos + n], pos + n
        try:
            read = json.loads(part.decode()) if part else None
        except ValueError:
            read = None
        if isinstance(read, dict):
            reports[rank] = read
    return reports


def run_step(
    comm: Communicator,
    plan: Plan | None,
    models: torch.Tensor | None,
    *,
    layout: SumLayout,
    num_steps: int,
    execute,
) -> tuple[Plan, StepOutput | None]:
    """One step, on any rank. ``plan``/``models`` are given on the server and received
    elsewhere. ``execute(plan, models) -> StepOutput`` runs this rank's tasks, or is None
    on a rank that hosts no clients. Returns the plan and, on the server, the step's
    gathered output (None on workers)."""
    plan = _broadcast_plan(comm, plan)
    if plan.kind in (STOP, COMPUTE, FAILED):  # a pooled job's own exchange follows its header
        return plan, None
    if models is None:
        models = torch.empty(
            (plan.num_models, layout.num_params), dtype=torch.float32, device=comm.device
        )
    comm.broadcast(models, src=0)
    t0 = time.perf_counter()
    if execute is not None:
        out = execute(plan, models)
    else:
        out = empty_output(plan, num_steps=num_steps, layout=layout, device=comm.device)
    busy = time.perf_counter() - t0

    result = StepOutput(out.loss_rows, None, out.eval_rows, out.model_rows, out.probe_rows)
    W = comm.world_size
    if plan.any(TRAIN):
        busy += _reduce_sums(comm, plan, out, layout, result)
    if plan.any(RETURN_MODEL):
        result.model_rows = comm.gather_rows(
            out.model_rows.to(comm.device), 0, plan.rows_per_rank(TRAIN | RETURN_MODEL, W)
        )
    timing = torch.zeros((0, TIMING_WIDTH), dtype=torch.float64)
    if execute is not None:
        row = [comm.rank, out.trained, out.train_s, busy, out.loaded, out.cache_mb, peak_rss_mb(),
               float(out.stopped), float(out.failed)]  # fmt: skip
        timing = torch.tensor([row], dtype=torch.float64)
    _gather_step_rows(comm, plan, out, timing, result)
    return plan, (result if comm.rank == 0 else None)


def _broadcast_plan(comm: Communicator, plan: Plan | None) -> Plan:
    """The step's plan on every rank: its header and, when they fit, its tasks travel in
    one broadcast of fixed length, more tasks in a second one."""
    first = torch.zeros(HEADER + INLINE_TASKS * TASK_WIDTH, dtype=torch.int64)
    if plan is not None:
        first[:HEADER] = plan.encode_header()
        if plan.num_tasks <= INLINE_TASKS:
            first[HEADER : HEADER + plan.num_tasks * TASK_WIDTH] = plan.encode_tasks().view(-1)
    first = comm.broadcast(first.to(comm.device), src=0).cpu()
    header = first[:HEADER]
    n = int(header[4])
    if n <= INLINE_TASKS:
        tasks = first[HEADER : HEADER + n * TASK_WIDTH].view(n, TASK_WIDTH)
    else:
        tasks = (
            plan.encode_tasks()
            if plan is not None
            else torch.zeros((n, TASK_WIDTH), dtype=torch.int64)
        )
        comm.broadcast(tasks, src=0)
    width = int(header[5])
    state = None
    if width and n:  # the tasks' client state, for the client half
        state = (
            torch.from_numpy(np.ascontiguousarray(plan.state, dtype=np.float64))
            if plan is not None
            else torch.zeros((n, width), dtype=torch.float64)
        )
        state = comm.broadcast(state.to(comm.device), src=0).cpu()
    return Plan.decode(header, tasks if n else None, state)


def _reduce_sums(
    comm: Communicator, plan: Plan, out: StepOutput, layout: SumLayout, result: StepOutput
) -> float:
    """Reduce a training step's exact sums into ``result.sums`` (``"scaled"``: on grids
    that every rank agrees on, their exponents in ``result.exponents``); the seconds this
    rank spent putting its terms on the grids."""
    sums = out.sums
    busy = 0.0
    if layout.kind == "scaled":  # every rank agrees on the grids, then puts its terms there
        bounds = comm.all_reduce_max(out.bounds.to(comm.device)).cpu()
        result.exponents = grid_exponents(bounds, plan.terms_per_model())
        t1 = time.perf_counter()
        sums = out.finish_sums(result.exponents)
        busy = time.perf_counter() - t1
    result.sums = comm.reduce_sum(sums.to(comm.device), dst=0)
    return busy


def _gather_step_rows(
    comm: Communicator, plan: Plan, out: StepOutput, timing: torch.Tensor, result: StepOutput
) -> None:
    """The step's float64 rows in one gather into ``result`` (on rank 0): probe, loss and
    evaluation rows (one per task that has them, on its worker's rank), and one timing
    row per rank that executes (every rank at W = 1, every worker above)."""
    W = comm.world_size
    blocks = {}
    if plan.any(ANSWERS):
        blocks["probe_rows"] = (out.probe_rows, plan.rows_per_rank(ANSWERS, W, any_of=True))
    if plan.any(TRAIN):
        blocks["loss_rows"] = (out.loss_rows, plan.rows_per_rank(TRAIN, W))
    if plan.any(EVAL):
        blocks["eval_rows"] = (out.eval_rows, plan.rows_per_rank(EVAL, W))
    blocks["timing_rows"] = (timing, [1] if W == 1 else [0] + [1] * (W - 1))
    gathered = gather_blocks(comm, list(blocks.values()))
    if gathered is not None:
        for name, rows in zip(blocks, gathered, strict=True):
            setattr(result, name, rows)


def gather_blocks(
    comm: Communicator, blocks: list[tuple[torch.Tensor, list[int]]]
) -> list[torch.Tensor] | None:
    """Several blocks of float64 rows ``(rows [n_r, width], every rank's n_r)`` gathered
    to rank 0 in one collective: each rank sends its blocks back to back, and rank 0
    cuts the whole apart again (each block's rows in rank order). None on other ranks."""
    widths = [int(rows.shape[1]) for rows, _ in blocks]
    lengths = [
        sum(counts[r] * w for (_, counts), w in zip(blocks, widths, strict=True))
        for r in range(comm.world_size)
    ]
    mine = torch.cat([rows.reshape(-1).to(torch.float64).cpu() for rows, _ in blocks])
    flat = comm.gather_rows(mine.to(comm.device).view(-1, 1), 0, lengths)
    if flat is None:
        return None
    flat = flat.view(-1).cpu()
    parts: list[list[torch.Tensor]] = [[] for _ in blocks]
    pos = 0
    for r in range(comm.world_size):
        for i, ((_, counts), w) in enumerate(zip(blocks, widths, strict=True)):
            parts[i].append(flat[pos : pos + counts[r] * w].view(counts[r], w))
            pos += counts[r] * w
    return [torch.cat(p) for p in parts]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (0 where not known)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024.0 if sys.platform != "darwin" else peak / 2**20
