"""``distfl bench --scale``: what a population of clients costs, run by run, from K = 1,000 to
K = 100,000: start-up, steady seconds per round, peak memory, run-file size, how evenly the
workers share the training, and what the server's clustering costs.

Every row is a real ``distfl run`` subprocess on its own TOML config (digits, 80 samples per
client, no groups, the mlp, 8 local steps of batch 16, 6 rounds, evaluation only after the
last round on at most 1,000 clients, one torch thread per process, on the CPU), at W=1
(``python -m distfl run --config X --out Y``) and under ``torchrun --standalone
--nproc-per-node 3 ... --comm torch`` (server + 2 workers, gloo):

- FedAvg (``algorithm.name = "none"``) and IFCA (4 clusters) for K = 1,000, 10,000 and
  100,000 with a cohort of 1,000 clients per round;
- FedGWC for K = 1,000, 5,000 and 10,000 with 10% participation, with the paper's split
  test (``min_observations = 0``, ``stable_tests = 1``, ``reference_draws = 0``) and
  ``algorithm.epsilon = 1.0``, ``algorithm.patience = 1``: every MSE of P is below ε, so
  the split test (the K×K affinity and spectral step) runs within the first rounds, and
  again in every round on every cluster, and its cost is in the rounds measured (P, K×K,
  is in the run file). The clusters multiply round by round (the last column), and as
  each cluster samples its own share of clients a round trains somewhat more than K/10 of
  them;
- the imbalance pairs: FedAvg for K = 200 and 1,000 at 10% participation, W=3, 20 rounds,
  with ``server.placement = "balanced"`` and ``"static"``, on the paper's CNN
  (``model.name = "cnn"``): the MLP's vectorised training of 10 to 50 clients takes 10 to
  20 ms a round, under this machine's noise, and batches them so well that its time
  hardly follows the number of clients; the CNN's time is proportional to it;
- FedAvg on the ``gaussian`` dataset (clients that own their data) for K = 2,000 and
  100,000 with a cohort of 100, W=1;
- FedGWC on observed entries (``algorithm.interaction = "observed"``: only the pairs of P
  sampled together are kept, which a dense K×K P of 100,000 clients could not be) at
  (K, cohort) = (2,714, 10), (20,000, 200) and (100,000, 1,000), W=1, with
  ``epsilon = 1.0``, ``patience = 1``, ``min_observations = 0`` and ``stable_tests = 1``, so
  that a split test runs in every round, and the default ``reference_draws`` (15): the
  measured test is the calibrated one. Its references are drawn only for a partition the
  test proposes (a Davies–Bouldin score below 1): the valley test's uniform samples where
  fewer than half of the cluster's pairs were observed, as in each of these rows, else the
  Gaussian references;
- FedGWC's calibrated split test on a dense P of K = 2,000 and 2,100 clients, one on each
  side of :data:`distfl.algorithms.fedgwc.spectral.SMALL_K` (2,048: the affinity is float64
  up to it, float32 above), 10% participation, W=1, 2 rounds, ``patience = 2`` (one test, in
  round 2), ``reference_draws = 15`` and ``db_threshold = 1e9``, so that the test proposes
  its best partition and draws its 15 Gaussian references (each a K×K draw, its affinity and
  its spectral clustering): the measured test's seconds are those of the calibrated test at
  either size.
- PACFL and FedClust (one-shot hierarchical clustering) at (2,714, 10) with every client in
  the one-shot round (their default and the papers'), and at (20,000, 200) with
  ``algorithm.probe_clients = 2000``: the one-shot round clusters a uniform sample of 2,000
  and the others join the nearest cluster when first sampled. Round 1, the one-shot round
  (every probed client's row, the n × n distances and the clustering), is left out of the
  per-round columns like every row's first round: it is in the process's wall time.
- Local (a model per client) and FedAvg + fine-tuning at the same two sizes: the K models
  Local holds, or the fine-tuning before each evaluation, against FedAvg's rows.
- CFL-GP with its default keys (4 models, whole-gradient profiles, clustering rounds 1, 3
  and 5) at (2,714, 10) and (20,000, 200): the clustering rounds' gradients, profiles and
  spectral clustering of the clients sampled in them (30 and 600 by round 5).

``--scale-only GLOB`` (repeatable) runs the rows whose key matches. ``--scale-quick`` runs a
few rows of tiny sizes instead (K = 200 and 400, 3 rounds), for the tests.

Each number comes from the run file each run writes (read, and verified, through
:func:`distfl.runfile.run.read`) and the clock of this process:

- start-up: ``/timing`` attribute ``loop_started`` (when rank 0's rounds loop began, Unix
  seconds) less the time just before the launch: process start, imports, data, partition
  and (W=3) the process group;
- seconds per round: the median of ``np.diff(/timing/elapsed_s)``, the rounds after the first
  (round 1 pays torch's one-time lazy imports in every process); the slowest of them too;
- rank 0's peak resident MiB (``/timing/rss_mb``, its peak so far at each round) and the
  largest worker's (``/timing/workers/rss_mb``; at W=1 the one worker is rank 0 itself);
- worker imbalance: in each round after the first, the slowest worker's ``train_s`` over
  the workers' mean, averaged over those rounds and at its worst round (1.0 is even;
  always 1.0 at W=1), with the mean ``train_s`` per worker and round and the clients each
  worker trains per round;
- the run file's size in MiB, and the clusters at the end (``/metrics/num_clusters``);
- the split tests (rows of ``/metrics/clusters`` with a finite ``db`` or with
  ``test_failed``; none for an algorithm without them), timed by ``/timing/update_s``, the
  server's seconds in the algorithm's update: the round's update of P and every split test
  of the round (once its clusters have split, one test per cluster that trained). Over the
  rounds after the first in which a test ran: the median of the round's update over its
  tests (seconds per split test), the median and the largest update (a round of tests),
  the number of tests, and of those that drew references (a finite ``valley_reference``
  or ``db_reference``); each round's update and tests are in the JSON;
- the memory check's estimate of the run (every term of
  :func:`distfl.runtime.capacity.size_terms`) and the memory available before the launch.
  A run the check refuses (exit 2, one line) is the row's status, "refused by the memory
  check", with that line.

A row that fails (non-zero exit, no run file, over :data:`SCALE_TIMEOUT_S`) reports its
status and the tail of its stderr; the others still run.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from distfl import __version__
from distfl.errors import ConfigError
from distfl.paths import self_command
from distfl.tools.bench.common import clean_env, log, tail
from distfl.tools.bench.distfl_rows import _torchrun
from distfl.tools.bench.report import json_safe
from distfl.tools.bench.scale_grid import (
    BATCH,
    LOCAL_STEPS,
    SAMPLES_PER_CLIENT,
    SCALE_W,
    Case,
    config_toml,
    scale_cases,
)

#: wall-clock limit of each row's ``distfl run`` (its process group is killed after it)
SCALE_TIMEOUT_S = 900


def scale_row(case: Case, status: str = "ok", **fields: Any) -> dict:
    """A row of the table; ``status`` is "ok" or why the row has no numbers."""
    out = {
        "key": case.key,
        "label": case.label,
        "status": status,
        **asdict(case),
        "rounds_run": None,
        "startup_s": None,
        "round_s": None,
        "round_s_max": None,
        "rank0_peak_mib": None,
        "worker_peak_mib": None,
        "run_file_mib": None,
        "imbalance": None,
        "imbalance_max": None,
        "train_s_per_round": None,
        "clients_per_worker": None,
        "clusters": None,
        "split_test_s": None,
        "split_round_s": None,
        "split_round_s_max": None,
        "split_tests": None,
        "split_test_rounds": None,
        "referenced_tests": None,
        "update_s_by_round": None,
        "split_tests_by_round": None,
        "admitted": None,
        "memory_estimate_mib": None,
        "memory_available_mib": None,
        "process_wall_s": None,
        "command": "",
        "stderr_tail": "",
    }
    out.update(fields)
    return out


def run_file_numbers(path: Path, launched: float) -> dict:
    """What a row reads of its run file (see the module's docstring); ``launched`` is
    ``time.time()`` just before the launch."""
    import numpy as np

    from distfl.runfile.run import read

    stored = read(path).stored
    timing = stored.timing
    loop_started = stored.loop_started
    elapsed = np.asarray(timing["elapsed_s"], dtype=np.float64)
    rss = np.asarray(timing["rss_mb"], dtype=np.float64)
    w = {name: np.asarray(col) for name, col in stored.worker_timing.items()}
    clusters = stored.metrics["num_clusters"]
    rounds = np.asarray(timing["round"], dtype=np.int64)
    update_s = np.asarray(timing["update_s"], dtype=np.float64)
    tested, referenced = split_test_rows(stored.cluster_metrics)
    steady = np.diff(elapsed)  # rounds 2..R: round 1 pays torch's lazy imports
    test_rounds = np.unique(tested)
    per_round = np.array([np.count_nonzero(tested == t) for t in rounds], dtype=np.int64)
    measured = (rounds > 1) & (per_round > 0) & np.isfinite(update_s)
    round_s = update_s[measured]
    later = w["round"] > 1
    ratios, train, clients = [], [], []
    for t in np.unique(w["round"][later]):
        this = w["round"] == t
        mean = float(w["train_s"][this].mean())
        train.append(mean)
        clients.append(float(w["clients"][this].mean()))
        if mean > 0:
            ratios.append(float(w["train_s"][this].max()) / mean)
    peak0 = float(rss.max()) if rss.size else None
    peak_w = float(w["rss_mb"].max()) if w["rss_mb"].size else None
    if peak0 is not None and peak_w is not None and not w["rank"].any():
        # one process (the worker is rank 0 itself), read at two moments of each step
        peak0 = peak_w = max(peak0, peak_w)
    return {
        "rounds_run": int(elapsed.size),
        "startup_s": loop_started - launched,
        "round_s": float(np.median(steady)) if steady.size else None,
        "round_s_max": float(steady.max()) if steady.size else None,
        "rank0_peak_mib": peak0,
        "worker_peak_mib": peak_w,
        "run_file_mib": os.path.getsize(path) / 2**20,
        "imbalance": float(np.mean(ratios)) if ratios else None,
        "imbalance_max": float(np.max(ratios)) if ratios else None,
        "train_s_per_round": float(np.mean(train)) if train else None,
        "clients_per_worker": float(np.mean(clients)) if clients else None,
        "clusters": int(clusters[-1]) if len(clusters) else None,
        "split_test_s": float(np.median(round_s / per_round[measured])) if round_s.size else None,
        "split_round_s": float(np.median(round_s)) if round_s.size else None,
        "split_round_s_max": float(round_s.max()) if round_s.size else None,
        "split_tests": int(tested.size),
        "split_test_rounds": int(test_rounds.size),
        "referenced_tests": int(referenced),
        "update_s_by_round": [float(v) for v in update_s],
        "split_tests_by_round": [int(n) for n in per_round],
    }


def split_test_rows(clusters) -> tuple[Any, int]:
    """The round of each split test in a run file's /metrics/clusters table (a row with a
    finite ``db``, the best Davies–Bouldin score, or ``test_failed`` set: a test that could
    not be computed; none for an algorithm without split tests), and how many tests drew
    references (a finite ``valley_reference`` or ``db_reference``)."""
    import numpy as np

    rounds = np.asarray(clusters["round"], dtype=np.int64)

    def column(name: str) -> np.ndarray:
        if name not in clusters:
            return np.full(rounds.size, np.nan)
        return np.asarray(clusters[name], dtype=np.float64)

    ran = np.isfinite(column("db")) | (column("test_failed") > 0)
    drew = np.isfinite(column("valley_reference")) | np.isfinite(column("db_reference"))
    return rounds[ran], int(np.count_nonzero(ran & drew))


def memory_check(config: Path) -> dict:
    """The memory check's estimate of the run (MiB: every term
    :func:`~distfl.runtime.capacity.size_terms` counts, the population and the algorithm's
    pairs included) and the memory available now, which the run compares it with."""
    from distfl.config import load
    from distfl.runtime.capacity import available_bytes, size_terms

    need = sum(b for b, _ in size_terms(load(path=config)).values())
    available = available_bytes()
    return {
        "memory_estimate_mib": need / 2**20,
        "memory_available_mib": None if available is None else available / 2**20,
    }


def _command(case: Case, config: Path, out: Path) -> list[str]:
    args = ["run", "--config", str(config), "--out", str(out), "--force"]  # scratch files
    if case.world_size == 1:
        return self_command(*args)
    return [
        *_torchrun(),
        "--standalone",
        "--nproc-per-node",
        str(case.world_size),
        "-m",
        "distfl",
        *args,
        "--comm",
        "torch",
    ]


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the row's process group (the launcher and every rank it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


#: a row's status when the run's memory check refused it
REFUSED = "refused by the memory check"


def refused(returncode: int, stderr: str) -> bool:
    """Whether a run was refused by its memory check: exit 2, its last line comparing the
    estimate with the memory this machine has available (distfl.runtime.capacity)."""
    lines = (stderr or "").strip().splitlines()
    return returncode == 2 and bool(lines) and "this machine has available" in lines[-1]


def run_case(case: Case, tmp: Path, timeout_s: float = SCALE_TIMEOUT_S) -> dict:
    """One row: write its config, run it as a subprocess in its own process group (all of
    it killed on timeout), read its run file, remove the file."""
    config = tmp / f"{case.key}.toml"
    out = tmp / f"{case.key}.h5"
    config.write_text(config_toml(case.config()))
    cmd = _command(case, config, out)
    check = memory_check(config)
    launched = time.time()
    proc = subprocess.Popen(
        cmd,
        env=clean_env(OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        return scale_row(
            case,
            f"failed: timed out after {timeout_s:g} s",
            command=shlex.join(cmd),
            stderr_tail=tail(stderr or stdout),
            **check,
        )
    except BaseException:  # interrupted: its own session would not see the Ctrl-C
        _kill_group(proc)
        proc.wait()
        raise
    wall = time.time() - launched
    common = {"process_wall_s": wall, "command": shlex.join(cmd), **check}
    if refused(proc.returncode, stderr):
        return scale_row(case, REFUSED, admitted=False, stderr_tail=tail(stderr), **common)
    if proc.returncode != 0 or not out.exists():
        return scale_row(
            case,
            f"failed: exit {proc.returncode}",
            stderr_tail=tail(stderr or stdout),
            **common,
        )
    try:
        got = run_file_numbers(out, launched)
    finally:
        out.unlink()
    status = "ok" if got["rounds_run"] == case.rounds else f"ran {got['rounds_run']} rounds"
    return scale_row(case, status, admitted=True, **got, **common)


def _select(cases: list[Case], only: list[str]) -> list[Case]:
    if not only:
        return cases
    picked = [c for c in cases if any(fnmatch.fnmatchcase(c.key, p) for p in only)]
    if not picked:
        keys = ", ".join(c.key for c in cases)
        raise ConfigError(f"bench --scale-only {' '.join(only)}: no row matches; rows: {keys}")
    return picked


def run_scale(
    *, quick: bool = False, only: list[str] | None = None, command: str = "", quiet: bool = False
) -> dict:
    """Every row of the grid (or those whose key matches a glob of ``only``), one after
    another in a temporary directory removed afterwards; returns the report (what
    ``--json`` prints)."""
    cases = _select(scale_cases(quick), list(only or []))
    try:
        torch_version = metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "distfl_version": __version__,
        "torch_version": torch_version,
        "python_version": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": quick,
        "timeout_s": SCALE_TIMEOUT_S,
        "configs": {c.key: c.config() for c in cases},
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="distfl-bench-scale-") as tmp_name:
        for i, case in enumerate(cases, 1):
            log(quiet, f"[{i}/{len(cases)}] {case.label} ...")
            t0 = time.perf_counter()
            try:
                r = run_case(case, Path(tmp_name))
            except Exception as exc:  # a failed row is reported, the others still run
                r = scale_row(case, f"failed: {type(exc).__name__}: {exc}")
            report["rows"].append(r)
            log(quiet, f"  {r['status']} ({time.perf_counter() - t0:.1f} s)")
    return report


COLUMNS = (
    ("algorithm", "algorithm", "{}"),
    ("K", "clients", "{:,}"),
    ("cohort", "cohort", "{:,}"),
    ("W", "world_size", "{}"),
    ("placement", "placement", "{}"),
    ("start-up s", "startup_s", "{:.1f}"),
    ("s/round", "round_s", "{:.2f}"),
    ("rank-0 peak MiB", "rank0_peak_mib", "{:.0f}"),
    ("largest worker peak MiB", "worker_peak_mib", "{:.0f}"),
    ("run file MiB", "run_file_mib", "{:.1f}"),
    ("worker max/mean train", "imbalance", "{:.2f}"),
    ("worst round", "imbalance_max", "{:.2f}"),
    ("train s/round", "train_s_per_round", "{:.2f}"),
    ("clients/worker", "clients_per_worker", "{:.0f}"),
    ("clusters", "clusters", "{}"),
    ("split test s", "split_test_s", "{:.2f}"),
    ("test round s", "split_round_s", "{:.2f}"),
    ("slowest", "split_round_s_max", "{:.2f}"),
    ("tests", "split_tests", "{}"),
    ("with refs", "referenced_tests", "{}"),
    ("check est. MiB", "memory_estimate_mib", "{:.0f}"),
)
#: columns a failed row still has (its status follows them)
KEY_COLUMNS = 5


def print_scale_report(report: dict, stream: TextIO) -> None:
    """The report as the table ``distfl bench --scale`` prints, with its header and notes."""
    out = stream.write
    out(
        f"distfl bench --scale ({report['date']}; distfl {report['distfl_version']}, torch "
        f"{report['torch_version']}, Python {report['python_version']}, {report['cpus']} CPUs)\n"
        f"command: {report['command']}\n"
        f"digits (gaussian where the key says), {SAMPLES_PER_CLIENT} samples per client, mlp (cnn "
        f"where the key says), "
        f"{LOCAL_STEPS} local steps of "
        f"batch {BATCH}, evaluation after the last round only; CPU, 1 torch thread per "
        f"process; W={SCALE_W}: torchrun, server + {SCALE_W - 1} workers (gloo)\n\n"
    )

    def cell(r: dict, field: str, fmt: str) -> str:
        return "n/a" if r[field] is None else fmt.format(r[field])

    head = [name for name, _, _ in COLUMNS]
    lines = []
    for r in report["rows"]:
        cells = [cell(r, f, fmt) for _, f, fmt in COLUMNS]
        lines.append(cells if r["status"] == "ok" else [*cells[:KEY_COLUMNS], r["status"]])
    widths = [len(h) for h in head]
    for cells in lines:
        if len(cells) == len(head):
            widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]

    def fmt_line(cells: list[str]) -> str:
        """Text columns (algorithm, placement) to the left, numbers to the right."""
        return "  ".join(
            c.ljust(w) if i in (0, 4) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )

    out(fmt_line(head).rstrip() + "\n")
    for cells in lines:
        if len(cells) == len(head):
            out(fmt_line(cells) + "\n")
        else:
            out(fmt_line(cells[:KEY_COLUMNS]) + "  " + cells[-1] + "\n")
    out(
        "\nstart-up: launch to the start of rank 0's rounds loop; s/round: median over the "
        "rounds after the first (the last one evaluates); peaks: resident memory, from the "
        "run file; worker max/mean train: the slowest worker's training time over the "
        "workers' mean, per round after the first, averaged and at the worst round "
        "(train s/round and clients/worker: per worker and round); tests: the run's split "
        "tests (rows of /metrics/clusters with a db score or test_failed), with refs: those "
        "that drew references; over the rounds after the first with a test, the server's "
        "update (/timing/update_s: the round's interaction update and its split tests) over "
        "the round's tests (split test s, the median), and whole (test round s: the median; "
        "slowest); check est. MiB: the memory check's estimate of the run (a refused row "
        "exits 2)\n"
    )
    for r in report["rows"]:
        if r["status"] != "ok" and r["stderr_tail"]:
            out(f"  {r['label']}: {r['stderr_tail']}\n")
    stream.flush()


def _command_line(args) -> str:
    parts = ["distfl", "bench", "--scale"]
    if getattr(args, "scale_quick", False):
        parts.append("--scale-quick")
    for pattern in getattr(args, "scale_only", None) or []:
        parts += ["--scale-only", pattern]
    if getattr(args, "json", False):
        parts.append("--json")
    return shlex.join(parts)


def scale_main(args, stream: TextIO | None = None) -> int:
    """``distfl bench --scale``: exit 0 when every row ran, else 1."""
    stream = stream or sys.stdout
    report = run_scale(
        quick=bool(getattr(args, "scale_quick", False)),
        only=getattr(args, "scale_only", None),
        command=_command_line(args),
    )
    if getattr(args, "json", False):
        stream.write(json.dumps(json_safe(report), indent=1) + "\n")
        stream.flush()
    else:
        print_scale_report(report, stream)
    return 0 if all(r["status"] == "ok" for r in report["rows"]) else 1
