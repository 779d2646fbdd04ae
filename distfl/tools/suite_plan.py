"""The jobs of ``distfl suite`` (:mod:`distfl.tools.suite`), planned before any runs: every
(scenario, algorithm, seed) with its run file and its config built and checked; the
``--variant`` and ``--set`` items each algorithm's jobs take, and ``--true-clusters``' own."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distfl.errors import ConfigError, UserError, did_you_mean


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
    #: the ``--grid`` point of the job: its items (none without a grid)
    point: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The algorithm as the table shows it: a variant's name, or algorithm_label, and
        the job's grid point (:func:`~distfl.tools.suite_grid.point_name`)."""
        from distfl.tools.suite_grid import point_name

        return point_name(self.algorithm if self.variant else algorithm_label(self.config),
                          self.point)  # fmt: skip

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.name} seed {self.seed}"


#: a variant's name: like an algorithm's (it names run files)
VARIANT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
VARIANT_FORM = "NAME=ALGORITHM:KEY=VALUE[,KEY=VALUE...]"


def parse_variant(text: str) -> tuple[str, str, tuple[str, ...]]:
    """``NAME=ALGORITHM:KEY=VALUE,KEY=VALUE`` -> (NAME, ALGORITHM, ("algorithm.KEY=VALUE",
    ...)); a KEY of another section is written whole (``server.aggregator="fedprox"``: FedProx
    as a variant of one global model). UserError naming the form otherwise. The keys and
    values are checked when the jobs' configs are built (ConfigError naming the key)."""
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
        if not has or not key.strip() or key.strip().startswith("algorithm."):
            raise UserError(
                f"--variant {text!r}: {part!r} is not KEY=VALUE (a key of [algorithm], "
                f"without 'algorithm.', or SECTION.KEY of another); expected {VARIANT_FORM}"
            )
        items.append(part if "." in key else f"algorithm.{part}")
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
    overrides: list[str] | tuple[str, ...], algorithms: list[str], option: str = "--set"
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
                f"{option} algorithm.{key}: none of the listed algorithms "
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
    grid: list[str] | tuple[str, ...] = (),
) -> list[Job]:
    """Every (scenario, algorithm, seed) with its config built and checked (ConfigError).
    ``overrides``: the user's ``--set`` items, as :func:`algorithm_overrides` shares them;
    ``variants``: ``--variant`` texts (:func:`parse_variant`), whose names ``algorithms``
    may list; ``true_clusters``: each algorithm that declares a
    :attr:`~distfl.algorithms.ClusteringAlgorithm.clusters_key` is given the scenario's
    number of data groups through it (:func:`true_clusters_item`); ``grid``: ``--grid``
    texts, each algorithm's jobs at every point of the keys it takes
    (:mod:`distfl.tools.suite_grid`)."""
    from distfl.algorithms import algorithm_names
    from distfl.tools import suite_grid

    if not scenarios or not algorithms or not seeds:
        raise UserError("distfl suite needs at least one scenario, algorithm and seed")
    _load_plugins(scenarios, overrides)
    allowed = algorithm_names()
    # FedAvg by the name the tables, the figures and the run files give it
    algorithms = [GLOBAL_MODEL if a == GLOBAL_MODEL_NAME else a for a in algorithms]
    defined = _defined_variants(variants, allowed)
    _check_listed(algorithms, seeds, allowed, defined)
    base_of = {a: defined[a][0] if a in defined else a for a in algorithms}
    bases = list(dict.fromkeys(base_of.values()))
    shared = algorithm_overrides(overrides, bases)
    spread = suite_grid.parse_grid(grid)
    # a grid key no listed algorithm takes is refused as such a --set item is
    algorithm_overrides([items[0] for _, items in spread], bases, "--grid")
    jobs, names = [], set()
    for scenario in scenarios:
        name, source = _source(scenario)
        if name in names:
            raise UserError(f"scenario {name!r} is listed twice")
        names.add(name)
        for algorithm in algorithms:
            base = base_of[algorithm]
            mine = defined[algorithm][1] if algorithm in defined else ()
            if spread:
                suite_grid.check_not_set(spread, (*shared[base], *mine), algorithm)
            for point in suite_grid.points(spread, base):
                for seed in seeds:
                    jobs.append(
                        _plan_job(name, source, algorithm, seed, out_dir=out_dir, base=base,
                                  items=(*shared[base], *mine), variant=algorithm in defined,
                                  true_clusters=true_clusters, point=point)
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
    point: tuple[str, ...] = (),
) -> Job:  # fmt: skip
    """One job: its run file (named by ``algorithm``, or for one global model by its
    aggregator, and its grid ``point``'s suffix) and its config, from the scenario's
    ``source``, ``items`` (the user's ``--set`` items for ``base`` and the variant's own),
    the point's items and the job's own items."""
    from distfl import config as cfg
    from distfl.tools.suite_grid import suffix

    kind, value = source
    items, tail = (*items, *point), suffix(point)

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

    listed = Path(out_dir) / f"{run_file_stem(name, algorithm + tail, seed)}.h5"
    job_items, config = build(listed)
    given = true_clusters_item(base, items, config, true_clusters)
    if given:
        job_items, config = build(listed, given)
    if not variant and algorithm_label(config) != algorithm:
        # one global model: the file is named as the table names the algorithm
        # (its aggregator), unless a suite run before named it by --algorithms
        label = algorithm_label(config) + tail
        shown = listed.with_name(f"{run_file_stem(name, label, seed)}.h5")
        out = listed if listed.exists() and not shown.exists() else shown
        job_items, config = build(out, given)
    else:
        out = listed
    return Job(name, source, algorithm, seed, out, job_items, config, variant, point)


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
