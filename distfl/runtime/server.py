"""The server (rank 0): plans rounds, aggregates cluster models, evaluates, writes HDF5."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

import numpy as np
import torch

from distfl.aggregators import AGGREGATORS
from distfl.algorithms import ClientReports, RoundPlan, build_algorithm
from distfl.checkpoint import HierarchyNode, write_run_file
from distfl.comm.base import Communicator
from distfl.config import Config
from distfl.data import Partition
from distfl.exact import NUM_LIMBS, from_limbs
from distfl.metrics import federation_mean
from distfl.models import build_model, flat_params, num_params
from distfl.progress import Progress
from distfl.runtime.protocol import EVAL, STEP, TRAIN, Plan, run_step
from distfl.runtime.worker import Worker


class Server:
    def __init__(
        self,
        config: Config,
        comm: Communicator,
        *,
        labels: np.ndarray,
        input_shape: tuple[int, ...],
        num_classes: int,
        partition: Partition,
        local_worker: Worker | None,
        stream: TextIO | None = None,
    ):
        self.config = config
        self.comm = comm
        self.partition = partition
        self.labels = labels
        self.worker = local_worker
        self.stream = stream or sys.stdout
        self.K = config.data.num_clients
        self.S = config.train.local_steps
        torch.manual_seed(config.run.seed)
        model = build_model(config.model.name, input_shape, num_classes, hidden=config.model.hidden)
        self.P = num_params(model)
        self.algorithm = build_algorithm(config)
        self.aggregate = AGGREGATORS[config.server.aggregator]
        self.models: dict[str, torch.Tensor] = {
            cid: flat_params(model) for cid in self.algorithm.clusters()
        }
        self.hierarchy = {
            cid: HierarchyNode(id=cid, parent="", created_round=0, members=members)
            for cid, members in self.algorithm.clusters().items()
        }
        self.num_train = partition.num_train()
        self.metrics: dict[str, list[float]] = {
            k: []
            for k in (
                "round",
                "num_clusters",
                "num_participants",
                "train_loss_first",
                "train_loss_last",
                "accuracy",
                "accuracy_plain",
                "test_loss",
            )
        }
        self.timing: dict[str, list[float]] = {"round": [], "elapsed_s": []}
        self.client_steps = 0

    # -- one step over the world -------------------------------------------------------

    def _step(self, model_of: dict[int, str], tasks: dict[int, int], round_index: int):
        clusters = sorted(set(model_of.values()))
        index = {cid: i for i, cid in enumerate(clusters)}
        mo = np.full(self.K, -1, dtype=np.int64)
        tk = np.zeros(self.K, dtype=np.int64)
        for k, cid in model_of.items():
            mo[k] = index[cid]
            tk[k] = tasks[k]
        plan = Plan(STEP, round_index, len(clusters), mo, tk)
        models = torch.stack([self.models[c] for c in clusters]).to(self.comm.device)
        _, out = run_step(
            self.comm,
            plan.encode(),
            models,
            num_clients=self.K,
            num_params=self.P,
            num_steps=self.S,
            execute=self.worker.execute if self.worker is not None else None,
        )
        return clusters, out

    def train_round(self, plan: RoundPlan) -> ClientReports:
        clusters, out = self._step(plan.train, {k: TRAIN for k in plan.train}, plan.round)
        sums = out.sums.cpu().reshape(len(clusters), -1)
        for i, cid in enumerate(clusters):
            weight = int(sums[i, -1])
            delta = from_limbs(sums[i, :-1].reshape(NUM_LIMBS, self.P))
            self.models[cid] = self.aggregate(self.models[cid], delta, weight)
        rows = out.loss_rows.cpu().numpy()
        clients = rows[:, 0].astype(np.int64)
        expected = np.array(sorted(plan.train), dtype=np.int64)
        if not np.array_equal(clients, expected):
            raise RuntimeError(f"round {plan.round}: loss rows for {clients}, planned {expected}")
        self.client_steps += len(clients) * self.S
        return ClientReports(
            clients=clients, losses=rows[:, 1:], num_samples=self.num_train[clients]
        )

    def evaluate(self, round_index: int) -> tuple[float, float, float]:
        """Every client evaluates its cluster's model on its local test split."""
        model_of = {}
        for cid, members in self.algorithm.clusters().items():
            for k in members:
                model_of[int(k)] = cid
        _, out = self._step(model_of, {k: EVAL for k in model_of}, round_index)
        rows = out.eval_rows.cpu().numpy()
        weights = rows[:, 4] if self.config.eval.weighted else None
        return (
            federation_mean(rows[:, 1], weights),
            federation_mean(rows[:, 2], weights),
            federation_mean(rows[:, 3], weights),
        )

    def stop_workers(self) -> None:
        run_step(
            self.comm,
            Plan.stop(self.K).encode(),
            None,
            num_clients=self.K,
            num_params=self.P,
            num_steps=self.S,
            execute=None,
        )

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        cfg = self.config
        progress = Progress(cfg.run.rounds, cfg.run.progress, self.stream)
        t_start = time.perf_counter()
        accuracy = math.nan
        for t in range(1, cfg.run.rounds + 1):
            plan = self.algorithm.plan_round(t)
            reports = self.train_round(plan)
            self.algorithm.update(t, plan, reports)
            acc = acc_plain = test_loss = math.nan
            if t % cfg.eval.every == 0 or t == cfg.run.rounds:
                acc, acc_plain, test_loss = self.evaluate(t)
                accuracy = acc
            elapsed = time.perf_counter() - t_start
            self._record(t, reports, acc, acc_plain, test_loss, elapsed)
            progress.update(
                t, clusters=len(self.models), accuracy=acc, rounds_per_s=t / max(elapsed, 1e-9)
            )
            if cfg.checkpoint.every and t % cfg.checkpoint.every == 0 and t < cfg.run.rounds:
                self.write()
        self.stop_workers()
        wall = time.perf_counter() - t_start
        self.write()
        summary = {
            "rounds": cfg.run.rounds,
            "accuracy": accuracy,
            "num_clusters": len(self.models),
            "wall_s": wall,
            "client_steps_per_s": self.client_steps / max(wall, 1e-9),
            "bytes_per_round": self.comm.bytes_moved / cfg.run.rounds,
        }
        self._print_summary(summary)
        return summary

    def _record(self, t, reports: ClientReports, acc, acc_plain, test_loss, elapsed) -> None:
        m = self.metrics
        m["round"].append(t)
        m["num_clusters"].append(len(self.models))
        m["num_participants"].append(len(reports.clients))
        m["train_loss_first"].append(float(reports.losses[:, 0].mean()))
        m["train_loss_last"].append(float(reports.losses[:, -1].mean()))
        m["accuracy"].append(acc)
        m["accuracy_plain"].append(acc_plain)
        m["test_loss"].append(test_loss)
        self.timing["round"].append(t)
        self.timing["elapsed_s"].append(elapsed)

    def write(self) -> None:
        leaves, assignment = self.algorithm.assignment()
        int_cols = {"round", "num_clusters", "num_participants"}
        write_run_file(
            self.config.run.out,
            config=self.config,
            world_size=self.comm.world_size,
            clients={
                "group": self.partition.group,
                "class_counts": self.partition.class_counts(self.labels),
                "num_train": self.partition.num_train(),
                "num_test": self.partition.num_test(),
            },
            hierarchy=list(self.hierarchy.values()),
            leaves=leaves,
            assignment=assignment,
            leaf_models=torch.stack([self.models[c] for c in leaves]).numpy(),
            metrics={
                k: np.array(v, dtype=np.int64 if k in int_cols else np.float64)
                for k, v in self.metrics.items()
            },
            timing={
                "round": np.array(self.timing["round"], dtype=np.int64),
                "elapsed_s": np.array(self.timing["elapsed_s"]),
            },
        )

    def _print_summary(self, s: dict[str, float]) -> None:
        w = self.comm.world_size
        moved = (
            "0 B (one process)" if w == 1 else f"{_bytes(s['bytes_per_round'])} (rank 0's traffic)"
        )
        lines = [
            f"distfl: {s['rounds']} rounds in {s['wall_s']:.2f} s "
            f"({s['rounds'] / max(s['wall_s'], 1e-9):.2f} rounds/s), "
            f"world size {w} ({self.comm.name})",
            f"  final balanced accuracy  {s['accuracy']:.4f} (mean over {self.K} clients)",
            f"  clusters                 {s['num_clusters']}",
            f"  client-steps/s           {s['client_steps_per_s']:.1f}",
            f"  bytes moved per round    {moved}",
            f"  run file                 {self.config.run.out}",
        ]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
