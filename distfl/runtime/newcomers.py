"""Newcomers (``data.held_out``): clients drawn as their groups' others, after every trained
client (ids K, K + 1, ...), that never train. At every evaluation the algorithm gives each a
model by its rule for a client that never trained
(:attr:`~distfl.algorithms.api.base.ClusteringAlgorithm.newcomers`: a probe of their train
splits, then :meth:`~distfl.algorithms.api.base.ClusteringAlgorithm.place_newcomers`), and
each is evaluated on its test split as a trained client is: its accuracies go to
/metrics/held_out, their mean, worst, 10th percentile and the ARI of the clusters they
joined against their groups to /metrics. Nothing of it changes the algorithm's state or
the trained clients' bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from distfl.metrics import at_last_evaluation, federation_mean, low_tail
from distfl.metrics.clustering import adjusted_rand_index
from distfl.runfile.layout import HELD_OUT_COLUMNS
from distfl.runtime.protocol import EVAL

if TYPE_CHECKING:
    from distfl.runtime.components import ServerView

#: the newcomers' /metrics columns without newcomers and in rounds without evaluation
NO_NEWCOMERS = dict.fromkeys(HELD_OUT_COLUMNS, math.nan)


@dataclass(frozen=True)
class Newcomers:
    """The run's newcomers, and the sizes of every client of the partition (the ``trained``
    ones, then the newcomers), by which a step's tasks are placed."""

    #: K, the clients that train
    trained_clients: int = 0
    #: [K + H] every client's group, train and test samples
    group: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    num_train: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    num_test: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, partition, num_clients: int) -> Newcomers:
        """The clients of ``partition`` beyond the first ``num_clients``."""
        return cls(num_clients, np.asarray(partition.group, dtype=np.int64),
                   partition.num_train(), partition.num_test())  # fmt: skip

    @property
    def ids(self) -> np.ndarray:
        """The newcomers' ids: K, K + 1, ..."""
        return np.arange(self.trained_clients, len(self.group), dtype=np.int64)

    @property
    def groups(self) -> np.ndarray:
        """The newcomers' ground-truth groups."""
        return self.group[self.trained_clients :]

    def trained(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The trained clients' (0 .. K-1) groups, train and test samples."""
        K = self.trained_clients
        return self.group[:K], self.num_train[:K], self.num_test[:K]

    def __len__(self) -> int:
        return len(self.group) - self.trained_clients


def evaluation_cost(server: ServerView, finetune_steps: int) -> np.ndarray:
    """[K + H] each client's predicted work in an evaluation, in samples: its test split,
    and its fine-tuning steps of min(B, n_k) samples, three passes each, where the
    algorithm fine-tunes first."""
    every = server.newcomers
    if not finetune_steps:
        return every.num_test
    batch = np.minimum(every.num_train, server.config.train.batch_size)
    return every.num_test + 3 * finetune_steps * batch


#: newcomers per worker in one step of their evaluation (a stop signal waits for one step)
STEP_NEWCOMERS = 256


def evaluate_newcomers(server: ServerView, t: int, cost: np.ndarray) -> dict[str, float]:
    """Round ``t``'s evaluation of the newcomers, in steps of :data:`STEP_NEWCOMERS` a
    worker (each newcomer's placement and figures are its own, whatever its step): their
    placement by the algorithm's rule, their rows of /metrics/held_out, and their /metrics
    columns (:data:`~distfl.runfile.layout.HELD_OUT_COLUMNS`)."""
    new = server.newcomers
    if not len(new):
        return dict(NO_NEWCOMERS)
    size = STEP_NEWCOMERS * max(server.comm.world_size - 1, 1)
    ids, groups = new.ids, new.groups
    parts = [_evaluate_step(server, t, cost, ids[i : i + size], groups[i : i + size])
             for i in range(0, len(new), size)]  # fmt: skip
    leaves = [c for part, _ in parts for c in part]
    rows = np.concatenate([r for _, r in parts])
    server.state.record.held_out.extend({
        "round": np.full(len(new), t, dtype=np.int64), "client": ids, "group": groups,
        "cluster": np.array(leaves, dtype=object), "accuracy": rows[:, 1],
        "accuracy_plain": rows[:, 2], "test_loss": rows[:, 3],
    }, source="the newcomers' evaluation")  # fmt: skip
    weights = rows[:, 4] if server.config.eval.weighted else None
    worst, p10 = low_tail(rows[:, 1])
    membership = server.algorithm.membership != "none"
    ari = adjusted_rand_index(groups, leaves) if membership else math.nan
    return {"held_out_accuracy": federation_mean(rows[:, 1], weights),
            "held_out_accuracy_worst": worst, "held_out_accuracy_p10": p10,
            "held_out_ari": ari}  # fmt: skip


def _evaluate_step(
    server: ServerView, t: int, cost: np.ndarray, ids: np.ndarray, groups: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """The newcomers ``ids`` placed and evaluated: each one's cluster, and its evaluation
    row (id, balanced accuracy, accuracy, loss, test samples)."""
    algorithm = server.algorithm
    request = algorithm.newcomer_probe(ids.copy())
    every = server.newcomers
    answers = None if request is None else server.probe(request, t, cost=every.num_train)
    placed = algorithm.place_newcomers(ids.copy(), groups.copy(), answers)
    leaves = [str(c) for c in placed.clusters]
    if len(leaves) != len(ids) or any(c not in server.state.models for c in leaves):
        raise RuntimeError(f"algorithm {algorithm.name!r} placed {len(ids)} newcomers in "
                           f"{len(leaves)} clusters, or in one without a model")  # fmt: skip
    model_of = {int(k): c for k, c in zip(ids, leaves, strict=True)}
    own = type(algorithm).evaluation
    tasks = dict.fromkeys(model_of, EVAL)
    if own is None:
        _, out = server.step(model_of, tasks, t, cost=cost)
    else:  # every leaf's model and the newcomer's row, as for a trained client
        state = np.asarray(placed.rows, dtype=np.float64).reshape(len(ids), -1)
        _, out = server.step(
            model_of, tasks, t, cost=cost, models=sorted(server.state.models),
            probe_op=server.client_op(own), state={int(k): state[i] for i, k in enumerate(ids)},
        )  # fmt: skip
    server.count(len(ids) * (4 * server.num_params + 8 * 5))
    rows = out.eval_rows.cpu().numpy()
    if not np.array_equal(rows[:, 0].astype(np.int64), ids):
        raise RuntimeError(f"round {t}: newcomers' evaluation rows for {rows[:, 0]}")
    return leaves, rows


def summary_line(server: ServerView) -> str | None:
    """The summary's line of the newcomers (None without them): how many, and at the last
    evaluation their mean, worst and 10th-percentile balanced accuracy and the ARI of the
    clusters they joined (none for an algorithm without clusters to score)."""
    if not len(server.newcomers):
        return None
    metrics = server.state.record.metrics
    v = {c: at_last_evaluation(metrics["accuracy"], metrics[c]) for c in HELD_OUT_COLUMNS}
    ari = "" if math.isnan(v["held_out_ari"]) else f", ARI {v['held_out_ari']:.4f}"
    return (f"  newcomers                {v['held_out_accuracy']:.4f} "
            f"({len(server.newcomers)} never trained), worst "
            f"{v['held_out_accuracy_worst']:.4f}, 10th percentile "
            f"{v['held_out_accuracy_p10']:.4f}{ari}")  # fmt: skip


__all__ = ["NO_NEWCOMERS", "Newcomers", "evaluate_newcomers", "evaluation_cost", "summary_line"]
