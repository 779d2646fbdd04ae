"""The evaluation of the clients' cluster models: when a round evaluates, which clients, the
steps it is cut into over the world, and the figures it gives
(:class:`~distfl.runtime.components.Scores`); the server calls it after a round's update
(:meth:`RoundLoop.round <distfl.runtime.round_loop.RoundLoop.round>`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from distfl.hierarchy import node_order
from distfl.metrics import federation_mean, low_tail
from distfl.runtime.components import Scores
from distfl.runtime.newcomers import evaluate_newcomers, evaluation_cost
from distfl.runtime.protocol import EVAL, EVAL_WIDTH

if TYPE_CHECKING:
    from distfl.runtime.components import ServerView


class Evaluation:
    """Every ``eval.every`` rounds and in the last, every client (or a sample of them:
    ``eval.clients``) evaluates its cluster's model on its local test split; the
    per-cluster means, worst and 10th-percentile balanced accuracies go to
    /metrics/evaluation, each client's accuracy to /clients/accuracy. Calling it returns
    the federation's (:class:`~distfl.runtime.components.Scores`).

    The evaluation is cut into steps of about ``STEP_S`` seconds each, in ascending client
    order, so that a stop signal waits for one step at most and the progress display
    follows a long one; the rows, and so every mean, are those of one step."""

    #: seconds an evaluation step aims at (measured on the steps before it)
    STEP_S = 1.0
    #: clients per worker in the first step, and the bounds of a step's clients per worker
    FIRST_STEP = 64
    MIN_STEP, MAX_STEP = 16, 1 << 16

    def __init__(self) -> None:
        #: wall seconds per evaluated client, measured by the last evaluation (NaN: none yet)
        self.client_s = math.nan

    def due(self, server: ServerView, t: int) -> bool:
        return t % server.config.eval.every == 0 or t == server.config.run.rounds

    def clients(self, server: ServerView, t: int) -> np.ndarray | None:
        """The clients evaluated in round ``t``: all (None), or a sample drawn from (seed,
        round), the same at any W and on resume (``eval.clients``)."""
        n = server.config.eval.evaluated(server.num_clients)
        if n >= server.num_clients:
            return None
        rng = np.random.default_rng([server.config.run.seed, 0xE7A1, t])
        return np.sort(rng.choice(server.num_clients, size=n, replace=False))

    def expected_s(self, server: ServerView, t: int) -> float:
        """Seconds round ``t``'s evaluation is expected to take: the last evaluation's
        seconds per client, or before any, the last round's training seconds per client."""
        per = self.client_s
        if not math.isfinite(per):
            per = server.timing.train_s / max(server.timing.clients_trained, 1)
        return server.config.eval.evaluated(server.num_clients) * per

    @staticmethod
    def _state(server: ServerView, clients: np.ndarray) -> dict[int, np.ndarray] | None:
        """The state rows of ``clients`` for the algorithm's own evaluation (None: none)."""
        rows = server.algorithm.client_rows(clients)
        if rows is None:
            return None
        rows = np.asarray(rows, dtype=np.float64).reshape(len(clients), -1)
        return {int(k): rows[i] for i, k in enumerate(clients)}

    @staticmethod
    def cost(server: ServerView) -> np.ndarray:
        """[K + H] each client's predicted work in an evaluation, the newcomers' too
        (:func:`~distfl.runtime.newcomers.evaluation_cost`), where the algorithm fine-tunes
        first (ClusteringAlgorithm.evaluation_finetune) with its fine-tuning steps, as the
        capacity counts them."""
        steps = type(server.algorithm).evaluation_finetune(
            server.algorithm.params, local_steps=server.config.train.local_steps
        )
        return evaluation_cost(server, steps)

    def __call__(self, server: ServerView, t: int) -> Scores:
        leaves, assign = server.tree.assignment()
        chosen = self.clients(server, t)
        clients = np.arange(server.num_clients) if chosen is None else chosen
        clients = clients[assign[clients] >= 0]  # a client in no leaf has no model yet
        leaf_of = assign[clients]
        total = len(clients)
        workers = max(server.comm.world_size - 1, 1)
        cost = self.cost(server)
        started = time.perf_counter()
        own = type(server.algorithm).evaluation  # the algorithm's evaluation op, if any
        parts, done, size = [], 0, self.FIRST_STEP * workers
        while done < total:
            ks, ls = clients[done : done + size], leaf_of[done : done + size]
            model_of = {int(k): leaves[int(i)] for k, i in zip(ks, ls, strict=True)}
            if own is None:
                _, out = server.step(model_of, dict.fromkeys(model_of, EVAL), t, cost=cost)
            else:  # every leaf's model and the client's state row to its client half
                _, out = server.step(
                    model_of, dict.fromkeys(model_of, EVAL), t, cost=cost,
                    models=sorted(leaves), probe_op=server.client_op(own),
                    state=self._state(server, ks),
                )  # fmt: skip
            parts.append(out.eval_rows.cpu().numpy())
            done += len(ks)
            seconds = time.perf_counter() - started
            per = seconds / done
            size = int(np.clip(self.STEP_S / max(per, 1e-9), self.MIN_STEP * workers,
                               self.MAX_STEP * workers))  # fmt: skip
            server.evaluating(t, done, total, seconds)
        if total:
            self.client_s = (time.perf_counter() - started) / total
        server.count(total * (4 * server.num_params + 8 * 5))
        rows = np.concatenate(parts) if parts else np.zeros((0, EVAL_WIDTH))
        evaluated = rows[:, 0].astype(np.int64)
        server.state.client_accuracy[evaluated] = rows[:, 1]
        weights = rows[:, 4] if server.config.eval.weighted else None
        leaf_index = assign[evaluated]
        for i in sorted(set(leaf_index.tolist()), key=lambda i: node_order(leaves[i])):
            mine = leaf_index == i
            w = None if weights is None else weights[mine]
            worst, p10 = low_tail(rows[mine, 1])
            server.state.record.evaluation.append({
                "round": t,
                "cluster": leaves[i],
                "clients": int(mine.sum()),
                "accuracy": federation_mean(rows[mine, 1], w),
                "accuracy_worst": worst,
                "accuracy_p10": p10,
                "accuracy_plain": federation_mean(rows[mine, 2], w),
                "test_loss": federation_mean(rows[mine, 3], w),
            })  # fmt: skip
        worst, p10 = low_tail(rows[:, 1])
        sample = {}
        if server.config.eval.coverage:
            seen = np.isin(evaluated, server.state.trained_ids)
            for name, part in (("loss_in_sample", seen), ("loss_out_of_sample", ~seen)):
                w = None if weights is None else weights[part]
                sample[name] = federation_mean(rows[part, 3], w) if part.any() else math.nan
        newcomers = evaluate_newcomers(server, t, cost)
        return Scores(
            newcomers=newcomers,
            accuracy=federation_mean(rows[:, 1], weights),
            accuracy_plain=federation_mean(rows[:, 2], weights),
            test_loss=federation_mean(rows[:, 3], weights),
            accuracy_worst=worst,
            accuracy_p10=p10,
            **sample,
        )


__all__ = ["Evaluation"]
