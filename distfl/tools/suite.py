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
``--force``.

The table (also ``OUT/suite.csv`` and ``OUT/suite.json``) has one row per run: scenario,
algorithm (``fedavg`` for ``none``: one global model), seed, true groups, clusters found,
Rand index, ARI, WAS, WADB, final balanced accuracy (the mean, the worst client's and the 10th
percentile), round of the first split and wall time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from distfl.errors import CheckpointError, ConfigError, UserError, did_you_mean
from distfl.paths import self_command

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


@dataclass(frozen=True)
class Job:
    scenario: str  # the name in the table: a preset's name or a config file's stem
    source: tuple[str, ...]  # ("--preset", NAME) or ("--config", PATH)
    algorithm: str  # as listed in --algorithms: an algorithm or a variant's name
    seed: int
    out: Path
    overrides: tuple[str, ...]  # the user's --set items (for this algorithm), the suite's own
    config: Any  # the checked distfl.config.Config
    variant: bool = False  # ``algorithm`` names a variant

    @property
    def name(self) -> str:
        """The algorithm as the table shows it: a variant's name, or algorithm_label."""
        return self.algorithm if self.variant else algorithm_label(self.config)

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.name} seed {self.seed}"


#: a variant's name: like an algorithm's (it names run files)
VARIANT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
VARIANT_FORM = "NAME=ALGORITHM:KEY=VALUE[,KEY=VALUE...]"


def parse_variant(text: str) -> tuple[str, str, tuple[str, ...]]:
    """``NAME=ALGORITHM:KEY=VALUE,KEY=VALUE`` -> (NAME, ALGORITHM, ("algorithm.KEY=VALUE",
    ...)); UserError naming the form otherwise. The keys and values are checked when the
    jobs' configs are built (ConfigError naming the key)."""
    name, eq, rest = text.partition("=")
    algorithm, _, keys = rest.partition(":")
    name, algorithm = name.strip(), algorithm.strip()
    if not eq or not VARIANT_NAME.match(name) or not VARIANT_NAME.match(algorithm):
        raise UserError(f"--variant {text!r}: expected {VARIANT_FORM}, NAME in [a-z0-9_]")
    items = []
    for part in (p.strip() for p in keys.split(",")):
        if not part:
            continue
        key, has, _ = part.partition("=")
        if not has or not key.strip() or "." in key:
            raise UserError(
                f"--variant {text!r}: {part!r} is not KEY=VALUE (a key of [algorithm], "
                f"without 'algorithm.'); expected {VARIANT_FORM}"
            )
        items.append(f"algorithm.{part}")
    return name, algorithm, tuple(items)


#: a run file's name without ``.h5``: ``<scenario>--<algorithm>--s<seed>`` (run_file_stem)
RUN_FILE_STEM = re.compile(r"^(?P<scenario>.+)--(?P<algorithm>[a-z][a-z0-9_]*)--s(?P<seed>-?\d+)$")


def run_file_stem(scenario: str, algorithm: str, seed: int) -> str:
    return f"{scenario}--{algorithm}--s{seed}"


#: the algorithm of one global model, and the name --algorithms also takes for it (what the
#: tables, the figures and the run files call it with the default aggregator)
GLOBAL_MODEL = "none"
GLOBAL_MODEL_NAME = "fedavg"


def algorithm_label(config) -> str:
    """The algorithm as the table names it: ``none`` (one global model) is its aggregator."""
    name = config.algorithm.name
    return config.server.aggregator if name == "none" else name


def default_scenarios() -> list[str]:
    """The default job's scenario and the papers' scenarios, in the order of the presets."""
    from distfl.presets import SCENARIOS

    return ["default", *SCENARIOS]


def _source(scenario: str) -> tuple[str, tuple[str, ...]]:
    from distfl.presets import PRESETS

    if scenario.endswith(".toml") or os.sep in scenario:
        if not os.path.isfile(scenario):
            raise ConfigError(f"scenario {scenario!r}: no such config file (expected TOML)")
        return Path(scenario).stem, ("--config", scenario)
    if scenario not in PRESETS:
        raise ConfigError(
            f"scenario {scenario!r} is neither a preset nor a .toml file; presets: "
            + ", ".join(PRESETS)
        )
    return scenario, ("--preset", scenario)


def algorithm_overrides(
    overrides: list[str] | tuple[str, ...], algorithms: list[str]
) -> dict[str, tuple[str, ...]]:
    """The ``--set`` items of each algorithm's jobs: every item, except that an item
    ``algorithm.KEY=V`` goes only to the algorithms that take KEY (:func:`key_owners`). An
    ``algorithm.KEY`` that none of ``algorithms`` takes is a ConfigError naming the key and
    the algorithms that do take it."""
    from distfl import config as cfg
    from distfl.algorithms import key_owners

    out: dict[str, list[str]] = {a: [] for a in algorithms}
    for item in overrides:
        section, key, _ = cfg.parse_set(item)
        if section != "algorithm" or key == "name":
            for items in out.values():
                items.append(item)
            continue
        owners = key_owners(key)
        takers = [a for a in algorithms if a in owners]
        if not takers:
            whose = (
                f"it is a key of {', '.join(owners)} only"
                if owners
                else "no algorithm takes it (see distfl keys)"
            )
            raise ConfigError(
                f"--set algorithm.{key}: none of the listed algorithms "
                f"({', '.join(algorithms)}) takes {key}; {whose}"
            )
        for a in takers:
            out[a].append(item)
    return {a: tuple(items) for a, items in out.items()}


def _load_plugins(scenarios: list[str], overrides: list[str]) -> None:
    """Import the ``run.plugins`` the scenarios' files and the ``--set`` items name, so that
    the algorithms they define are known before the jobs are planned."""
    from distfl import config as cfg
    from distfl.algorithms import load_plugins

    specs: list = []
    for scenario in scenarios:
        kind, value = _source(scenario)[1]
        if kind == "--config":
            run = cfg.read_toml(value).get("run", {})
            if isinstance(run, dict) and isinstance(run.get("plugins"), list):
                specs += run["plugins"]
    for item in overrides:
        section, key, value = cfg.parse_set(item)
        if (section, key) == ("run", "plugins"):
            specs += value if isinstance(value, list) else [value]
    load_plugins([str(s) for s in specs])


def plan_jobs(
    scenarios: list[str],
    algorithms: list[str],
    seeds: list[int],
    out_dir: str | Path,
    overrides: list[str],
    variants: list[str] | tuple[str, ...] = (),
    true_clusters: bool = False,
) -> list[Job]:
    """Every (scenario, algorithm, seed) with its config built and checked (ConfigError).
    ``overrides``: the user's ``--set`` items, as :func:`algorithm_overrides` shares them;
    ``variants``: ``--variant`` texts (:func:`parse_variant`), whose names ``algorithms``
    may list; ``true_clusters``: each algorithm that declares a
    :attr:`~distfl.algorithms.ClusteringAlgorithm.clusters_key` is given the scenario's
    number of data groups through it (:func:`true_clusters_item`)."""
    from distfl.algorithms import algorithm_names

    if not scenarios or not algorithms or not seeds:
        raise UserError("distfl suite needs at least one scenario, algorithm and seed")
    _load_plugins(scenarios, overrides)
    allowed = algorithm_names()
    # FedAvg by the name the tables, the figures and the run files give it
    algorithms = [GLOBAL_MODEL if a == GLOBAL_MODEL_NAME else a for a in algorithms]
    defined = _defined_variants(variants, allowed)
    _check_listed(algorithms, seeds, allowed, defined)
    base_of = {a: defined[a][0] if a in defined else a for a in algorithms}
    shared = algorithm_overrides(overrides, list(dict.fromkeys(base_of.values())))
    jobs, names = [], set()
    for scenario in scenarios:
        name, source = _source(scenario)
        if name in names:
            raise UserError(f"scenario {name!r} is listed twice")
        names.add(name)
        for algorithm in algorithms:
            base = base_of[algorithm]
            mine = defined[algorithm][1] if algorithm in defined else ()
            for seed in seeds:
                jobs.append(
                    _plan_job(name, source, algorithm, seed, out_dir=out_dir, base=base,
                              items=(*shared[base], *mine), variant=algorithm in defined,
                              true_clusters=true_clusters)
                )  # fmt: skip
    return jobs


def _defined_variants(
    variants: list[str] | tuple[str, ...], allowed: list[str]
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The ``--variant`` texts as name -> (algorithm, its items); a name that is already an
    algorithm's or another variant's, or an algorithm that is none, is refused."""
    defined: dict[str, tuple[str, tuple[str, ...]]] = {}
    for text in variants:
        name, base, items = parse_variant(text)
        if name in allowed or name in defined or name == GLOBAL_MODEL_NAME:
            what = "an algorithm's" if name in allowed else "another variant's"
            raise UserError(f"--variant {text!r}: {name!r} is already {what} name")
        if base not in allowed:
            raise ConfigError(
                f"--variant {text!r}: {base!r} is not an algorithm; allowed values are "
                + ", ".join(allowed)
            )
        defined[name] = (base, items)
    return defined


def _check_listed(
    algorithms: list[str], seeds: list[int], allowed: list[str], defined: dict
) -> None:
    """Refuse an algorithm that is neither an algorithm nor a variant, a variant that
    ``--algorithms`` does not list, and an algorithm or a seed listed twice."""
    for a in algorithms:
        if a not in allowed and a not in defined:
            more = f" or a --variant's name ({', '.join(defined)})" if defined else ""
            guess = did_you_mean(a, [*allowed, *defined])
            raise ConfigError(
                f"--algorithms {a!r}{guess}: allowed values are {', '.join(allowed)}{more}"
            )
    unused = [name for name in defined if name not in algorithms]
    if unused:
        raise UserError(f"--variant {unused[0]!r} is not listed in --algorithms")
    for option, values in (("--algorithms", algorithms), ("--seeds", seeds)):
        twice = [v for i, v in enumerate(values) if v in values[:i]]
        if twice:  # two jobs would write the same run file at once
            raise UserError(f"{option}: {twice[0]!r} is listed twice")


def _plan_job(
    name: str, source: tuple[str, ...], algorithm: str, seed: int, *, out_dir: str | Path,
    base: str, items: tuple[str, ...], variant: bool, true_clusters: bool,
) -> Job:  # fmt: skip
    """One job: its run file (named by ``algorithm``, or for one global model by its
    aggregator) and its config, from the scenario's ``source``, ``items`` (the user's
    ``--set`` items for ``base`` and the variant's own) and the job's own items."""
    from distfl import config as cfg

    kind, value = source

    def build(out: Path, given=()):
        own = (
            f"algorithm.name={cfg.toml_string(base)}",
            f"run.seed={seed}",
            f"run.out={cfg.toml_string(str(out))}",
            'run.progress="none"',
        )
        every = (*given, *items, *own)
        config = cfg.load(
            path=value if kind == "--config" else None,
            preset=value if kind == "--preset" else None,
            overrides=every,
        )
        return every, config

    listed = Path(out_dir) / f"{run_file_stem(name, algorithm, seed)}.h5"
    job_items, config = build(listed)
    given = true_clusters_item(base, items, config, true_clusters)
    if given:
        job_items, config = build(listed, given)
    if not variant and algorithm_label(config) != algorithm:
        # one global model: the file is named as the table names the algorithm
        # (its aggregator), unless a suite run before named it by --algorithms
        shown = listed.with_name(f"{run_file_stem(name, algorithm_label(config), seed)}.h5")
        out = listed if listed.exists() and not shown.exists() else shown
        job_items, config = build(out, given)
    else:
        out = listed
    return Job(name, source, algorithm, seed, out, job_items, config, variant)


def true_clusters_item(
    algorithm: str, items: tuple[str, ...], config: Any, wanted: bool
) -> tuple[str, ...]:
    """``("algorithm.KEY=G",)`` where ``wanted`` and ``algorithm`` declares a clusters_key
    KEY (G: the number of data groups of ``config``'s scenario), else ``()``. An item of the
    user's (``--set`` or ``--variant``) that sets KEY as well is refused: the two would
    contradict each other."""
    from distfl import config as cfg
    from distfl.algorithms import algorithm_class

    key = algorithm_class(algorithm).clusters_key if wanted else None
    if key is None:
        return ()
    for item in items:
        section, name, _ = cfg.parse_set(item)
        if section == "algorithm" and name == key:
            raise UserError(
                f"--true-clusters gives {algorithm} its {key} (the number of data groups); "
                f"{item!r} sets it too: leave one of them out"
            )
    return (f"algorithm.{key}={len(config.groups)}",)


def given_clusters_line(jobs: list[Job]) -> str:
    """What ``--true-clusters`` gave: which algorithms take the number of groups through
    which key, and which find the number themselves."""
    from distfl.algorithms import algorithm_class

    given, own = {}, []
    for job in jobs:
        key = algorithm_class(job.config.algorithm.name).clusters_key
        if key is None:
            own.append(job.name)
        else:
            given[job.name] = key
    parts = [f"{name} ({key})" for name, key in dict.fromkeys(given.items())]
    text = "--true-clusters: " + (
        "given each scenario's number of data groups: " + ", ".join(parts)
        if parts
        else "no listed algorithm takes a number of clusters"
    )
    own = list(dict.fromkeys(own))
    if own:
        text += f"; at their own settings (they find the number themselves): {', '.join(own)}"
    return text + "\n"


def _existing(job: Job, force: bool) -> str:
    """What to do with the job's run file: "run", "keep" (finished) or "resume"."""
    from distfl.checkpoint import read_run_file

    if force or not job.out.exists():
        return "run"
    try:
        stored = read_run_file(job.out)
    except CheckpointError as exc:
        raise UserError(f"{exc}; remove it or run the suite with --force") from None
    # the file is at the job's path, whatever name of its directory wrote it (run.out)
    if replace(stored.config, run=replace(stored.config.run, out=job.config.run.out)) != job.config:
        raise UserError(
            f"{job.out} holds a run of another config; use another --out, or --force to "
            "overwrite it"
        )
    return "keep" if int(stored.state.get("round", 0)) >= job.config.run.rounds else "resume"


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


def _execute(job: Job, action: str, nproc: int = 1) -> Outcome:
    if action == "keep":
        return Outcome(job, action, 0, 0.0)
    log = job.out.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run(
            _command(job, action, nproc),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    seconds = time.perf_counter() - start
    error = ""
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln]
        error = lines[-1] if lines else f"exit code {proc.returncode}"
    return Outcome(job, action, proc.returncode, seconds, error)


def _row(outcome: Outcome) -> dict[str, Any]:
    from distfl.tools.gather import gather_rows

    job = outcome.job
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        scenario=job.scenario,
        algorithm=job.name,
        seed=job.seed,
        groups=len(job.config.groups),
    )
    if outcome.returncode == 0:
        (g,) = gather_rows([job.out])
        for column in COLUMNS[4:]:
            row[column] = g[column]
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
    for job in jobs:
        job.out.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    done = [0]

    def one(i: int) -> Outcome:
        outcome = _execute(jobs[i], actions[i], nproc)
        with lock:
            done[0] += 1
            what = {"keep": "kept (finished before)", "resume": "resumed", "run": "done"}
            status = (
                what[outcome.action]
                if outcome.returncode == 0
                else f"FAILED ({outcome.error}; log {jobs[i].out.with_suffix('.log')})"
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
    return [_row(o) for o in outcomes], outcomes


def write_outputs(rows: list[dict[str, Any]], out_dir: str | Path) -> None:
    """``suite.csv`` and ``suite.json`` in ``out_dir`` (each written beside and put in
    place; the suite's own, so a regular file of a run before is replaced, a link, a FIFO or
    a device never)."""
    from distfl.record.output import write_file
    from distfl.tools.gather import write_csv

    out_dir = Path(out_dir)
    target = {"label": "the suite's table", "other": "remove it, or give another --out"}
    write_csv(rows, out_dir / "suite.csv", replace=True, target=target)
    text = json.dumps({"columns": list(COLUMNS), "rows": rows}, indent=1) + "\n"
    write_file(out_dir / "suite.json", text, replace=True, **target)


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
    stream: TextIO = sys.stdout,
) -> tuple[list[dict[str, Any]], list[Outcome]]:
    """What ``distfl suite`` does once its arguments are read (shared with
    :func:`distfl.suite`): plan and check every job (refusing before anything runs), run,
    keep or resume each, write ``suite.csv`` and ``suite.json`` in ``out`` and report on
    ``stream``. ``scenarios``: None or empty for :func:`default_scenarios`. ``table``: a
    paper's table (:data:`distfl.tools.paper_tables.TABLES`) whose arguments
    :func:`table_arguments` gave: its comparison with the paper's values is printed after
    the suite's table and written to ``comparison.md``. Returns the rows (in job order; a
    failed run's scores are None) and each job's outcome."""
    from distfl.tools.gather import format_table

    scenarios = list(scenarios or default_scenarios())
    if workers < 1:
        raise UserError(f"--workers {workers}: must be at least 1")
    if nproc < 1:
        raise UserError(f"--nproc {nproc}: must be at least 1")
    jobs = plan_jobs(
        scenarios, list(algorithms), list(seeds), out, list(overrides), list(variants),
        true_clusters=true_clusters,
    )  # fmt: skip
    actions = [_existing(job, force) for job in jobs]  # refusals before any output
    start = time.perf_counter()
    stream.write(
        f"distfl suite: {len(jobs)} runs ({len(scenarios)} scenarios x {len(algorithms)} "
        f"algorithms x {len(seeds)} seeds), {workers} at a time"
        + (f", each on {nproc} ranks (torchrun)" if nproc > 1 else "")
        + f", run files in {out}\n"
    )
    if true_clusters:
        stream.write(given_clusters_line(jobs))
    rows, outcomes = run_suite(
        jobs, workers=workers, force=force, stream=stream, actions=actions, nproc=nproc
    )
    write_outputs(rows, out)
    stream.write("\n" + format_table(rows))
    failed = [o for o in outcomes if o.returncode != 0]
    stream.write(
        f"\n{len(jobs) - len(failed)} of {len(jobs)} runs finished in "
        f"{time.perf_counter() - start:.1f} s; table also in {Path(out) / 'suite.csv'}\n"
    )
    for o in failed:
        stream.write(f"failed: {o.job.label}: {o.error}\n")
    if table is not None:
        text = table_comparison(table, rows, algorithms)
        write_file_beside(Path(out) / "comparison.md", text)
        stream.write("\n" + text)
    return rows, outcomes


def table_comparison(table: str, rows: list[dict[str, Any]], algorithms: list[str]) -> str:
    """The paper's table ``table`` beside the suite's ``rows`` (Markdown)."""
    from distfl.algorithms import algorithm_names
    from distfl.tools.paper_tables import TABLES, comparison, format_comparison

    spec = TABLES[table]
    known = set(algorithm_names())
    absent = [row.label for name, row in spec.rows.items()
              if name not in known and name != "fedavg"]  # fmt: skip
    return format_comparison(spec, comparison(spec, rows), absent)


def write_file_beside(path: Path, text: str) -> None:
    """The suite's own file ``path`` (replaced when a suite wrote it before; never a link)."""
    from distfl.record.output import write_file

    write_file(path, text, replace=True, label="the suite's comparison",
               other="remove it, or give another --out")  # fmt: skip


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
    known = set(algorithm_names())
    algorithms = kw.get("algorithms") or [a for a in spec.algorithms if a in known]
    bases = set(algorithms) | {parse_variant(v)[1] for v in kw.get("variants", ())}
    items = []
    for item in spec.items:
        section, key, _ = cfg.parse_set(item)
        if section != "algorithm" or bases & set(key_owners(key)):
            items.append(item)
    return {
        **kw,
        "scenarios": [spec.scenario],
        "algorithms": list(algorithms),
        "seeds": list(kw.get("seeds") or spec.seeds),
        "overrides": [*items, *kw.get("overrides", ())],
        "true_clusters": True,
        "table": table,
    }


def suite_arguments(args) -> dict[str, Any]:
    """``distfl suite``'s parsed arguments as :func:`suite`'s: the scenarios (the default
    ones where none are named), the algorithms and seeds as lists, and the rest; with
    ``--table``, the table's (:func:`table_arguments`)."""
    table = getattr(args, "table", None)
    seeds_text = args.seeds if args.seeds is not None else ("" if table else "0")
    try:
        seeds = [int(s) for s in seeds_text.split(",") if s]
    except ValueError:
        raise UserError(f"--seeds {args.seeds!r}: expected integers like 0,1,2") from None
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
    )
    return table_arguments(kw, table) if table else kw


def suite_main(args, stream: TextIO = sys.stdout) -> int:
    """``distfl suite``; 0 when every run finished, 1 when one failed (its row is empty)."""
    _, outcomes = suite(**suite_arguments(args), stream=stream)
    return 1 if any(o.returncode != 0 for o in outcomes) else 0
