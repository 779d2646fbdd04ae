"""``distfl suite``: scenarios × algorithms × seeds, each a normal run with its own run file,
and one table of how well each clustering matched the scenario's ground truth.

Every run is a separate ``python -m distfl run`` process (``--workers`` of them at a time),
writing ``OUT/<scenario>--<algorithm>--s<seed>.h5`` and its output to the ``.log`` beside.
Each job is its scenario with the user's ``--set`` items and then ``algorithm.name`` of the
job; an item ``algorithm.KEY=V`` goes only to the jobs whose algorithm takes KEY (and is
refused when none of the listed algorithms does), and a scenario's own algorithm keys fall
away by themselves in the jobs of another algorithm. A *variant* (``--variant
NAME=ALGORITHM:KEY=VALUE,...``) is an algorithm with settings of its own under a name of
its own, listed in ``--algorithms`` like an algorithm: its keys come after the suite-wide
items, and its name is the table's algorithm and the run files' (FedGWC with the paper's
settings beside the tuned ones, in one suite). Every config is built and checked
before the first run starts, so a bad key or value exits with code 2 and nothing has run.
Run again with the same arguments and finished runs are kept, unfinished ones (a preempted
suite) resumed from their ``/state``; a run file holding another config is refused unless
``--force``. Nothing of the user's in ``OUT`` is replaced or written through
(:mod:`distfl.tools.suite_files`): a file the suite did not write at a log's or the table's
path is refused unless ``--force``, a symbolic link, a FIFO or a device anywhere it writes
even with it, all before the first run starts.

The table (also ``OUT/suite.csv`` and ``OUT/suite.json``) has one row per run: scenario,
algorithm (``fedavg`` for ``none``: one global model), seed, true groups, clusters found,
Rand index, ARI, WAS, WADB, final balanced accuracy (the mean, the worst client's and the 10th
percentile), round of the first split and wall time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from distfl.errors import CheckpointError, UserError, did_you_mean
from distfl.paths import self_command
from distfl.tools.gather import NEWCOMER_COLUMNS  # added where a run has newcomers
from distfl.tools.suite_files import (
    COMPARISON,
    GRID,
    LABELS,
    OTHER,
    check_directory,
    check_run_path,
    csv_text,
    json_text,
    log_head,
    log_may_be_replaced,
    make_directory,
    read_own,
    results_to_replace,
)
from distfl.tools.suite_plan import (  # those marked F401: read from here (distfl.report)
    RUN_FILE_STEM,  # noqa: F401
    Job,
    algorithm_label,  # noqa: F401
    algorithm_overrides,  # noqa: F401
    default_scenarios,
    given_clusters_line,
    parse_variant,
    plan_jobs,
)

#: the table's columns, in order
COLUMNS = (
    "scenario",
    "algorithm",
    "seed",
    "groups",
    "clusters",
    "rand",
    "ari",
    "was",
    "wadb",
    "accuracy",
    "accuracy_worst",
    "accuracy_p10",
    "first_split",
    "wall_s",
)
#: the columns a suite of runs with a loss target (``eval.loss_target``) adds: the last
#: evaluation's test loss, the simulated time, and the rounds, federation bytes and
#: simulated seconds until the mean test loss first reached the target
COMPLEXITY_COLUMNS = ("test_loss", "sim_s", "rounds_to_target", "bytes_to_target",
                      "sim_s_to_target")  # fmt: skip
#: the columns a suite's table may have
COLUMN_SETS = tuple(COLUMNS + more + new for more in ((), COMPLEXITY_COLUMNS)
                    for new in ((), NEWCOMER_COLUMNS))  # fmt: skip


def _existing(job: Job, force: bool) -> str:
    """What to do with the job's run file: "run", "keep" (finished) or "resume". Refuses
    (UserError) what the suite may not replace or write through (:mod:`suite_files`): at the
    run file's path anything but a regular file, at its log's a file the suite did not write
    (unless ``force``)."""
    from distfl.runfile.reader import read_run_file

    if not check_run_path(job.out) or force:
        action = "run"
    else:
        try:
            stored = read_run_file(job.out)
        except CheckpointError as exc:
            raise UserError(f"{exc}; remove it or run the suite with --force") from None
        # the file is at the job's path, whatever name of its directory wrote it (run.out)
        config = replace(stored.config, run=replace(stored.config.run, out=job.config.run.out))
        if config != job.config:
            raise UserError(
                f"{job.out} holds a run of another config; use another --out, or --force to "
                "overwrite it"
            )
        done = int(stored.state.get("round", 0)) >= job.config.run.rounds
        action = "keep" if done else "resume"
    if action != "keep":
        log_may_be_replaced(_log(job), force=force, resuming=action == "resume")
    return action


def _log(job: Job) -> Path:
    return job.out.with_suffix(".log")


def _command(job: Job, action: str, nproc: int = 1) -> list[str]:
    """The job's ``distfl run`` command: in one process, or with ``nproc`` > 1 under
    torchrun (one node, ``--standalone``: a free port of its own) with ``--comm torch``."""
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(nproc), "-m", "distfl", "run", *job.source,
               "--comm", "torch"]  # fmt: skip
    else:
        cmd = self_command("run", *job.source)
    for item in job.overrides:
        cmd += ["--set", item]
    if action == "resume":
        cmd += ["--resume", str(job.out)]
    elif job.out.exists():  # "run" over an existing file: the suite's --force
        cmd += ["--force"]
    return cmd


@dataclass
class Outcome:
    job: Job
    action: str  # run, resume or keep
    returncode: int
    seconds: float
    error: str = ""


def _execute(job: Job, action: str, nproc: int = 1, force: bool = False) -> Outcome:
    """Run the job (or keep it), its output in its log (:func:`log_head`, then what the run
    prints); a log that may no longer be written (a link put there meanwhile) fails the
    job alone."""
    from distfl.runfile.output import place_file

    if action == "keep":
        return Outcome(job, action, 0, 0.0)
    log = _log(job)
    start = time.perf_counter()
    try:
        replaced = log_may_be_replaced(log, force=force, resuming=action == "resume")
        fd = place_file(log, data=log_head(job.label).encode(), replace=replaced,
                        label="the run's log", other=OTHER)  # fmt: skip
    except UserError as exc:
        return Outcome(job, action, 2, 0.0, f"distfl: error: {exc}")
    try:
        proc = subprocess.run(
            _command(job, action, nproc), stdout=fd, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        os.close(fd)
    seconds = time.perf_counter() - start
    error = ""
    if proc.returncode != 0:
        text = (read_own(log) or b"").decode("utf-8", errors="replace")
        lines = [ln for ln in text.splitlines()[1:] if ln]
        error = lines[-1] if lines else f"exit code {proc.returncode}"
    return Outcome(job, action, proc.returncode, seconds, error)


def _row(outcome: Outcome, columns: tuple[str, ...] = COLUMNS) -> dict[str, Any]:
    from distfl.tools.gather import gather_rows

    job = outcome.job
    row: dict[str, Any] = dict.fromkeys(columns)
    row.update(
        scenario=job.scenario,
        algorithm=job.name,
        seed=job.seed,
        groups=len(job.config.groups),
    )
    if outcome.returncode == 0:
        (g,) = gather_rows([job.out])
        for column in columns[4:]:
            row[column] = g.get(column)  # (no newcomers' figures of a run without them)
    return row


def run_suite(
    jobs: list[Job],
    *,
    workers: int,
    force: bool,
    stream: TextIO,
    actions: list[str] | None = None,
    nproc: int = 1,
) -> tuple[list[dict[str, Any]], list[Outcome]]:
    """Run (or keep, or resume) every job, ``workers`` at a time, each on ``nproc``
    ranks (:func:`_command`); rows in job order."""
    if actions is None:
        actions = [_existing(job, force) for job in jobs]  # every refusal before any run
    for directory in dict.fromkeys(job.out.parent for job in jobs):
        make_directory(directory)
    lock = threading.Lock()
    done = [0]

    def one(i: int) -> Outcome:
        outcome = _execute(jobs[i], actions[i], nproc, force)
        with lock:
            done[0] += 1
            what = {"keep": "kept (finished before)", "resume": "resumed", "run": "done"}
            status = (
                what[outcome.action]
                if outcome.returncode == 0
                else f"FAILED ({outcome.error}; log {_log(jobs[i])})"
            )
            stream.write(
                f"[{done[0]}/{len(jobs)}] {jobs[i].label}: {status}"
                + (f" in {outcome.seconds:.1f} s" if outcome.action != "keep" else "")
                + "\n"
            )
            stream.flush()
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        outcomes = list(pool.map(one, range(len(jobs))))
    columns = suite_columns(jobs)
    return [_row(o, columns) for o in outcomes], outcomes


def suite_columns(jobs) -> tuple[str, ...]:
    """The suite table's columns: :data:`COLUMNS`, :data:`COMPLEXITY_COLUMNS` when a run
    has a loss target, and :data:`NEWCOMER_COLUMNS` when a run has newcomers."""
    complexity = any(job.config.eval.loss_target > 0 for job in jobs)
    newcomers = any(job.config.data.held_out > 0 for job in jobs)
    return (COLUMNS + (COMPLEXITY_COLUMNS if complexity else ())
            + (NEWCOMER_COLUMNS if newcomers else ()))  # fmt: skip


def write_outputs(
    rows: list[dict[str, Any]],
    out_dir: str | Path,
    *,
    force: bool = False,
    table: str | None = None,
    check_only: bool = False,
    best: str | None = None,
) -> None:
    """``suite.json`` and ``suite.csv`` in ``out_dir`` (``comparison.md``, the paper's
    ``table`` beside ``rows``; with a grid's ``best`` column, ``grid.csv``), each written
    beside and put in place. A file there is replaced only where the suite wrote it
    (:func:`results_to_replace`) or with ``force``; a link, a FIFO or a device never.
    ``check_only``: refuse what would be refused, write nothing (before any run starts)."""
    from distfl.runfile.output import write_file

    out_dir = Path(out_dir)
    there = results_to_replace(
        out_dir, force=force, comparison=table is not None,
        column_sets=COLUMN_SETS, compare=_comparison_titled,
        grid_texts=None if best is None else grid_texts,
    )  # fmt: skip
    if check_only:
        return
    columns = list(rows[0]) if rows else list(COLUMNS)
    texts = {"suite.json": json_text(rows, columns), "suite.csv": csv_text(rows, columns)}
    if table is not None:
        texts[COMPARISON] = table_comparison(table, rows)
    if best is not None:
        texts[GRID] = grid_text(rows, best)
    for name, text in texts.items():
        write_file(out_dir / name, text, replace=there[name], label=LABELS[name], other=OTHER)


def _comparison_titled(title: str, rows: list[dict[str, Any]]) -> str | None:
    """The comparison the suite writes of ``rows`` for the paper's table titled ``title``
    (None for no such table, or rows that are not a suite's)."""
    from distfl.tools.paper_tables import table_titled

    name = table_titled(title)
    try:
        return None if name is None else table_comparison(name, rows)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def suite(
    scenarios: list[str] | None = None,
    *,
    algorithms: list[str],
    seeds: list[int],
    out: str | Path,
    workers: int = 1,
    overrides: list[str] | tuple[str, ...] = (),
    variants: list[str] | tuple[str, ...] = (),
    force: bool = False,
    true_clusters: bool = False,
    table: str | None = None,
    nproc: int = 1,
    grid: list[str] | tuple[str, ...] = (),
    best: str = "accuracy",
    stream: TextIO | None = None,
) -> tuple[list[dict[str, Any]], list[Outcome]]:
    """What ``distfl suite`` does once its arguments are read (shared with
    :func:`distfl.suite`): plan and check every job (refusing before anything runs), run,
    keep or resume each, write ``suite.csv`` and ``suite.json`` in ``out`` and report on
    ``stream``. ``scenarios``: None or empty for :func:`default_scenarios`. ``table``: a
    paper's table (:data:`distfl.tools.paper_tables.TABLES`) whose arguments
    :func:`table_arguments` gave: its comparison with the paper's values is printed after
    the suite's table and written to ``comparison.md``. ``grid``: ``--grid`` texts, each
    algorithm run at every point of the keys it takes, the points' table (the best by
    ``best`` marked) printed and written to ``grid.csv`` (:mod:`distfl.tools.suite_grid`).
    Returns the rows (in job order; a
    failed run's scores are None) and each job's outcome. ``stream``: by default the
    ``sys.stdout`` of the call."""
    from distfl.tools import suite_grid

    stream = sys.stdout if stream is None else stream
    suite_grid.check_best(best)
    graded = best if grid else None
    scenarios = list(scenarios or default_scenarios())
    if workers < 1:
        raise UserError(f"--workers {workers}: must be at least 1")
    if nproc < 1:
        raise UserError(f"--nproc {nproc}: must be at least 1")
    jobs = plan_jobs(
        scenarios, list(algorithms), list(seeds), out, list(overrides), list(variants),
        true_clusters=true_clusters, grid=grid,
    )  # fmt: skip
    check_directory(out)
    actions = [_existing(job, force) for job in jobs]  # refusals before any output
    write_outputs([], out, force=force, table=table, check_only=True, best=graded)
    start = time.perf_counter()
    stream.write(
        f"distfl suite: {len(jobs)} runs ({len(scenarios)} scenarios x {len(algorithms)} "
        f"algorithms{' at their grid points' if grid else ''} x {len(seeds)} seeds), "
        f"{workers} at a time"
        + (f", each on {nproc} ranks (torchrun)" if nproc > 1 else "")
        + f", run files in {out}\n"
    )
    if grid:
        stream.write(grid_line(jobs))
    if true_clusters:
        stream.write(given_clusters_line(jobs))
    rows, outcomes = run_suite(
        jobs, workers=workers, force=force, stream=stream, actions=actions, nproc=nproc
    )
    write_outputs(rows, out, force=force, table=table, best=graded)
    _report(rows, outcomes, time.perf_counter() - start, Path(out), table, graded, stream)
    return rows, outcomes


def _report(rows, outcomes, seconds: float, out: Path, table, best, stream: TextIO) -> None:
    """What the suite prints after its runs: the table of runs, the summary over the seeds,
    the grid's points (with a ``best`` column), the closing line, the failures and the
    paper's ``table`` beside ours."""
    from distfl.tools import suite_grid
    from distfl.tools.gather import format_table
    from distfl.tools.seed_summary import several_seeds, summarize
    from distfl.tools.seed_summary import text as seed_text

    stream.write("\n" + format_table(rows))
    if several_seeds(rows):
        stream.write("\nover the seeds (mean ± sd, the worst seed):\n" + seed_text(summarize(rows)))
    if best is not None:
        stream.write(
            f"\nthe grid's points (the best {best} of each algorithm marked; also in "
            f"{out / GRID}):\n"
            + format_table(suite_grid.grid_cells(suite_grid.grid_rows(rows, best), best))
        )
    stream.write("\n" + summary_line(outcomes, seconds, out))
    for o in outcomes:
        if o.returncode != 0:
            stream.write(f"failed: {o.job.label}: {o.error}\n")
    if table is not None:
        stream.write("\n" + table_comparison(table, rows))


def grid_text(rows: list[dict[str, Any]], best: str = "accuracy") -> str:
    """``grid.csv`` of a suite's ``rows``: a header and
    :func:`~distfl.tools.suite_grid.grid_rows` (``distfl gather --csv``'s cells)."""
    from distfl.tools.suite_grid import grid_columns, grid_rows

    lines = grid_rows(rows, best)
    return csv_text(lines, list(lines[0]) if lines else grid_columns(best))


def grid_texts(rows: list[dict[str, Any]]) -> set[str]:
    """Every ``grid.csv`` a suite may write of ``rows`` (one per ``--best`` column)."""
    from distfl.tools.suite_grid import BEST_COLUMNS

    return {grid_text(rows, best) for best in BEST_COLUMNS}


def grid_line(jobs: list[Job]) -> str:
    """How many points of the grid each algorithm runs at (the keys it takes)."""
    counts: dict[str, set] = {}
    for job in jobs:
        counts.setdefault(job.algorithm, set()).add(job.point)
    parts = [f"{name} {len(p)}" for name, p in counts.items()]
    return f"--grid: points of the keys each algorithm takes: {', '.join(parts)}\n"


def summary_line(outcomes: list[Outcome], seconds: float, out: Path) -> str:
    """The suite's closing line: how many of the runs it started finished and in what time,
    and how many it kept from before (finished already, not run again)."""
    kept = sum(o.action == "keep" for o in outcomes)
    now = len(outcomes) - kept
    finished = sum(o.action != "keep" and o.returncode == 0 for o in outcomes)
    table = f"table also in {out / 'suite.csv'}"
    if not kept:
        return f"{finished} of {now} runs finished in {seconds:.1f} s; {table}\n"
    before = f"{kept} {'run' if kept == 1 else 'runs'} kept from before (finished already)"
    if not now:
        return f"{before}, 0 run now; {table}\n"
    return f"{before}, {now} run now: {finished} of {now} finished in {seconds:.1f} s; {table}\n"


def table_comparison(table: str, rows: list[dict[str, Any]]) -> str:
    """The paper's table ``table`` beside the suite's ``rows`` (Markdown)."""
    from distfl.tools.paper_tables import TABLES, absent_rows, comparison, format_comparison

    spec = TABLES[table]
    return format_comparison(spec, comparison(spec, rows), absent_rows(spec))


def table_arguments(kw: dict[str, Any], table: str) -> dict[str, Any]:
    """:func:`suite`'s arguments ``kw`` for the paper's table ``table``: its scenario, its
    methods that distfl has (unless ``kw["algorithms"]`` names some), its seeds (unless
    given), its ``--set`` items before the user's (an ``algorithm.KEY`` item only where a
    listed method takes KEY) and ``true_clusters``. UserError for an unknown table or a
    scenario named beside it."""
    from distfl import config as cfg
    from distfl.algorithms import algorithm_names, key_owners
    from distfl.tools.paper_tables import TABLES

    if table not in TABLES:
        raise UserError(f"--table {table!r}{did_you_mean(table, list(TABLES))}: tables are "
                        + ", ".join(TABLES))  # fmt: skip
    spec = TABLES[table]
    if kw.get("scenarios"):
        raise UserError(f"--table {table} runs its own scenario ({spec.scenario}): name no "
                        "scenario beside it")  # fmt: skip
    own = {parse_variant(v)[0]: v for v in spec.variants}
    known = set(algorithm_names()) | set(own)
    algorithms = kw.get("algorithms") or [a for a in spec.algorithms if a in known]
    variants = [own[a] for a in algorithms if a in own] + list(kw.get("variants", ()))
    bases = set(algorithms) | {parse_variant(v)[1] for v in variants}
    items = []
    for item in spec.items:
        section, key, _ = cfg.parse_set(item)
        if section != "algorithm" or bases & set(key_owners(key)):
            items.append(item)
    return {
        **kw,
        "scenarios": [spec.scenario],
        "algorithms": list(algorithms),
        "variants": variants,
        "seeds": list(kw.get("seeds") or spec.seeds),
        "overrides": [*items, *kw.get("overrides", ())],
        "true_clusters": True,
        "table": table,
    }


#: the most seeds one ``--seeds`` may name
MAX_SEEDS = 10_000
_SEED_ITEM = re.compile(r"(\d{1,18})(?:-(\d{1,18}))?")


def seed_list(text: str) -> list[int]:
    """The seeds of ``--seeds``: comma-separated integers and ranges ``A-B`` (A to B, both
    included), in the order given: ``0-9`` is 0,1,...,9 and ``0-2,7`` 0,1,2,7. A seed
    named twice, a range that runs backwards, more than :data:`MAX_SEEDS` seeds or anything
    else is a UserError naming what was wrong."""
    seeds: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        m = _SEED_ITEM.fullmatch(item)
        if m is None:
            raise UserError(f"--seeds {text!r}: {item!r} is neither a seed nor a range; "
                            "expected integers and ranges like 0-9,12")  # fmt: skip
        first = int(m.group(1))
        last = first if m.group(2) is None else int(m.group(2))
        if last < first:
            raise UserError(f"--seeds {text!r}: the range {item!r} runs backwards")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise UserError(f"--seeds {text!r}: more than {MAX_SEEDS:,} seeds")
        seeds.extend(range(first, last + 1))
    twice = [s for s, n in Counter(seeds).items() if n > 1]
    if twice:
        raise UserError(f"--seeds {text!r}: seed {min(twice)} is named twice")
    return seeds


def suite_arguments(args) -> dict[str, Any]:
    """``distfl suite``'s parsed arguments as :func:`suite`'s: the scenarios (the default
    ones where none are named), the algorithms and seeds as lists, and the rest; with
    ``--table``, the table's (:func:`table_arguments`)."""
    table = getattr(args, "table", None)
    seeds_text = args.seeds if args.seeds is not None else ("" if table else "0")
    seeds = seed_list(seeds_text)
    algorithms_text = (
        args.algorithms if args.algorithms is not None else ("" if table else "fedgwc,none")
    )
    kw = dict(
        scenarios=list(args.scenarios or ([] if table else default_scenarios())),
        algorithms=[a for a in algorithms_text.split(",") if a],
        seeds=seeds,
        out=args.out,
        workers=args.workers,
        overrides=list(args.overrides),
        variants=list(args.variants),
        force=args.force,
        true_clusters=args.true_clusters,
        nproc=args.nproc,
        grid=list(args.grid),
        best=args.best,
    )
    return table_arguments(kw, table) if table else kw


def suite_main(args, stream: TextIO | None = None) -> int:
    """``distfl suite``; 0 when every run finished, 1 when one failed (its row is empty)."""
    _, outcomes = suite(**suite_arguments(args), stream=stream)
    return 1 if any(o.returncode != 0 for o in outcomes) else 0
