"""A round's work at the clients, as the algorithm asks it: its probe (each client's row
for the algorithm's server half) and its training (the plan's clients trained, and the
aggregator's new model of each planned cluster). Both go over the world as steps of
:class:`~distfl.runtime.steps.WorldSteps`; the bytes a real federation would move are
counted through the server's ``count``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

import numpy as np

from distfl.algorithms import ClientReports, ClusteringAlgorithm, ProbeRequest, RoundPlan
from distfl.runtime.aggregation import ClusterAggregation
from distfl.runtime.privacy import sensitivity_spread
from distfl.runtime.protocol import AFTER, MAY_GIVE_UP, PROBE, RETURN_MODEL, TRAIN, ProbeShape
from distfl.runtime.run_state import RunState
from distfl.runtime.steps import WorldSteps
from distfl.runtime.timing import RoundTiming


def client_op(algorithm: ClusteringAlgorithm, op: str, what: str = "op") -> int:
    """The 1-based index of ``op`` among the algorithm's client_ops (``what`` it was asked
    for, in the error)."""
    ops = type(algorithm).client_ops
    if op not in ops:
        raise RuntimeError(f"{algorithm.name} asked for {what} {op!r}; its client_ops are {ops}")
    return ops.index(op) + 1


@dataclass
class ClientSteps:
    """The probe and the training of ``algorithm``'s rounds over ``steps``, on the models
    of ``state``; ``count`` adds the bytes a real federation would move."""

    algorithm: ClusteringAlgorithm
    steps: WorldSteps
    aggregation: ClusterAggregation
    state: RunState
    timing: RoundTiming
    _: KW_ONLY
    num_params: int
    local_steps: int
    num_train: np.ndarray
    count: Callable[[int], None]

    def step(self, model_of, tasks, round_index, **kw):
        return self.steps.run(self.state.models, model_of, tasks, round_index, **kw)

    def probe(self, request: ProbeRequest, round_index: int, *,
              cost: np.ndarray | None = None) -> np.ndarray | None:  # fmt: skip
        """The probe's rows without the client id, [n, width], as the algorithm's client
        half answered them; None when a worker gave up rows at a stop signal (an algorithm
        whose probe may be abandoned: ClusteringAlgorithm.probe_abandonable). ``cost``:
        each client's predicted work (default its train split)."""
        n, M, width = len(request.clients), len(request.clusters), request.row_width()
        probe_op = client_op(self.algorithm, request.op, "probe")
        if request.federation_bytes is not None:
            self.count(request.federation_bytes)
        else:  # each client downloads the models and uploads its row
            self.count(n * (M * 4 * self.num_params + width * 8))
        clusters = list(request.clusters)
        model_of = {int(k): clusters[0] for k in request.clients}
        tasks = {int(k): PROBE for k in request.clients}
        _, out = self.step(
            model_of, tasks, round_index, clusters=clusters,
            cost=self.num_train if cost is None else cost,
            probe_op=probe_op,
            probe=ProbeShape(width, tuple(int(a) for a in request.args)),
        )  # fmt: skip
        rows = out.probe_rows.cpu().numpy()
        if self.algorithm.probe_abandonable and (rows[:, 0] < 0).any():
            return None
        expected = np.asarray(request.clients, dtype=np.int64)
        if not np.array_equal(rows[:, 0].astype(np.int64), expected):
            raise RuntimeError(f"round {round_index}: probe rows for {rows[:, 0]}")
        return rows[:, 1:]

    def train(self, plan: RoundPlan, may_give_up: bool = False) -> ClientReports | None:
        """Train the plan's clients; the aggregator makes each planned cluster's new model.
        None: with ``may_give_up``, a worker left its training at a stop signal (the round
        is to be discarded)."""
        give_up = MAY_GIVE_UP if may_give_up else 0
        if plan.prepare is not None and plan.after is not None:
            raise RuntimeError(
                f"{self.algorithm.name}'s plan for round {plan.round} has both a prepare op "
                f"({plan.prepare!r}) and an after op ({plan.after!r}); a plan takes one"
            )
        op = plan.prepare if plan.prepare is not None else plan.after
        answers = (PROBE if plan.prepare is not None else AFTER) if op is not None else 0
        tasks = {k: TRAIN | give_up | answers | (RETURN_MODEL if k in plan.return_models else 0)
                 for k in plan.train}  # fmt: skip
        targets = {k: plan.targets(k) for k in plan.train}
        soft = plan.soft()
        trainings = len(targets) if plan.one_training else sum(len(v) for v in targets.values())
        # each training downloads its model, uploads its update and its S losses
        self.count(trainings * (8 * self.num_params + 8 * self.local_steps + 8))
        probe_op, shape, state = 0, None, None
        if op is not None:
            width = int(plan.prepare_width if plan.prepare is not None else plan.after_width)
            probe_op = client_op(self.algorithm, op)
            shape = ProbeShape(width)
            state = self._state_rows(plan)
            self.count(len(plan.train) * 8 * (width + _state_width(plan)))
        clusters, out = self.step(
            targets if soft else plan.train, tasks, plan.round, probe_op=probe_op,
            probe=shape, state=state,
        )  # fmt: skip
        if may_give_up and (out.loss_rows[:, 0] < 0).any():
            return None
        sums = out.sums.cpu().reshape(len(clusters), -1)
        self.state.sum_bytes_per_param = self.aggregation.bytes_per_param(sums)
        spread = 1.0  # client-level DP's factor for soft weights, where noise is drawn
        if soft and self.aggregation.noise is not None:
            spread = sensitivity_spread([[g for _, g in targets[k]] for k in targets])
        self.aggregation.apply(self.state.models, clusters, sums, out.exponents, out.weight_bits,
                               round_index=plan.round, spread=spread)  # fmt: skip
        rows = out.loss_rows.cpu().numpy()
        clients = rows[:, 0].astype(np.int64)
        expected = np.array([k for k in sorted(targets) for _ in targets[k]], dtype=np.int64)
        if not np.array_equal(clients, expected):
            raise RuntimeError(f"round {plan.round}: loss rows for {clients}, planned {expected}")
        self.timing.client_steps += trainings * self.local_steps
        models = None
        if plan.return_models:
            models = out.model_rows.cpu().numpy()
            returned = sum(len(targets[k]) for k in plan.return_models)
            if len(models) != returned:
                raise RuntimeError(f"round {plan.round}: {len(models)} client models returned")
        prepared = None
        if op is not None:
            answered = out.probe_rows.cpu().numpy()
            if not np.array_equal(answered[:, 0].astype(np.int64), np.array(sorted(targets))):
                raise RuntimeError(f"round {plan.round}: {op!r} rows for {answered[:, 0]}")
            prepared = answered[:, 1:]
        return ClientReports(
            clients=clients,
            losses=rows[:, 1:],
            num_samples=self.num_train[clients],
            models=models,
            cluster_models={c: m.numpy() for c, m in self.state.models.items()},
            clusters=[c for k in sorted(targets) for c, _ in targets[k]] if soft else None,
            weights=(
                np.array([g for k in sorted(targets) for _, g in targets[k]]) if soft else None
            ),  # fmt: skip
            rows=prepared,
        )

    def _state_rows(self, plan: RoundPlan) -> dict[int, np.ndarray] | None:
        """Each trained client's state row (zeros for one the plan leaves out), or None."""
        width = _state_width(plan)
        if not width:
            return None
        rows = {}
        for k in plan.train:
            row = np.asarray(plan.client_state.get(k, np.zeros(width)), dtype=np.float64)
            if row.shape != (width,):
                raise RuntimeError(
                    f"{self.algorithm.name}: client {k}'s state row has shape {row.shape}, "
                    f"not ({width},)"
                )
            rows[k] = row.reshape(-1)
        return rows


def _state_width(plan: RoundPlan) -> int:
    rows = list(plan.client_state.values())
    return len(np.asarray(rows[0]).reshape(-1)) if rows else 0


__all__ = ["ClientSteps", "client_op"]
