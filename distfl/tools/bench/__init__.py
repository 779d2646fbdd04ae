"""``distfl bench``: distfl against a plain PyTorch loop and Flower, on one workload, in one
run.

Rows, all on the same workload (digits, K clients, N sampled per round, one model, S local
SGD steps of batch B per client, R rounds of FedAvg; :mod:`~distfl.tools.bench.workload`),
all on the CPU with one torch thread per process:

a. a plain PyTorch loop, the baseline (:mod:`~distfl.tools.bench.plain`);
b. distfl alone (W=1, in this process) with the default trainer (``train.trainer = auto``);
c. distfl alone with ``train.trainer = sequential``;
d. distfl under ``torchrun --standalone --nproc-per-node 3`` (server + 2 workers, gloo)
   (b to d: :mod:`~distfl.tools.bench.distfl_rows`, from the run files they write);
e. Flower's simulation, when flwr is installed (:mod:`~distfl.tools.bench.flower`).

Each row reports rounds/s and client-steps/s over its rounds loop (setup, process start and
torch's one-time lazy imports excluded), its ratio to the plain loop, the share of the
loop's wall time spent beyond local training ("overhead"; each row's module says how it
measures time in local training) and the bytes rank 0 moves per round.
:mod:`~distfl.tools.bench.report` checks the targets and prints the table;
:mod:`~distfl.tools.bench.main` runs it all. ``--server-math`` also times FedGWC's
``affinity`` + ``choose_split`` for K = 1,000, 10,000 and 30,000, each K in a fresh process
(:mod:`~distfl.tools.bench.server_math`).
"""

from __future__ import annotations

from distfl.tools.bench.main import bench_main, run_bench
from distfl.tools.bench.report import print_report
from distfl.tools.bench.server_math import server_math_rows
from distfl.tools.bench.workload import Workload

__all__ = ["Workload", "bench_main", "print_report", "run_bench", "server_math_rows"]
