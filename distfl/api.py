"""The Python API: run files as objects, and runs and suites launched from Python.

::

    import distfl

    run = distfl.open("distfl-run.h5")   # a read-only Run
    run.metrics                          # one row per round
    run.tree                             # the cluster hierarchy; print(run.tree) draws it
    run.summary()                        # the numbers `distfl inspect` prints
    distfl.run(out="more.h5", overrides={"run.rounds": 50})    # a one-process run, here
    distfl.run(out="w3.h5", world_size=3)  # on 3 processes, as torchrun launches them
    distfl.suite(["rotated"], algorithms=["fedgwc", "none"], out="suite")

:func:`open` gives a :class:`~distfl.runfile.run.Run` (:mod:`distfl.runfile.run`, the model that
``distfl inspect``, ``gather`` and ``report`` read through too); it never imports the
plug-ins the file's config names. Tables are pandas DataFrames when pandas is importable
(``pip install distfl[pandas]``) and NumPy record arrays otherwise.
:func:`run` runs ``distfl run``'s code (:func:`distfl.launch.run_config`,
:func:`distfl.launch.launch`) with one process, W = 1, or launches it on several
(:func:`distfl.launch.launch_ranks`), and gives the same file, bit for bit, as ``distfl
run`` with the same settings; :func:`suite` runs ``distfl suite``
(:func:`distfl.tools.suite.suite`). Both raise the project's errors
(:class:`~distfl.errors.ConfigError`, :class:`~distfl.errors.UserError`, ...) where the
command prints one line and exits.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from distfl.errors import ConfigError, UserError
from distfl.runfile.run import TABLES, Node, Run, Tree, make_table, open, rows_table

# -- launching ---------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A value as :func:`distfl.config.toml_value` takes it: NumPy scalars and arrays as
    Python numbers and lists, tuples as lists, paths as text."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def set_items(overrides: Mapping[str, Any] | Iterable[str] | None) -> list[str]:
    """Overrides as ``--set`` items: a dict ``{"run.rounds": 50, "algorithm.name":
    "none"}`` (a section may also be a dict of its keys: ``{"run": {"rounds": 50}}``), or
    items as given on the command line (``["run.rounds=50"]``). Values are Python values
    (bool, number, str, list, dict); ConfigError for one that has no TOML form."""
    from distfl.config import toml_value

    if overrides is None:
        return []
    if isinstance(overrides, str):
        raise ConfigError(
            f"overrides {overrides!r}: give a dict such as {{'run.rounds': 50}} or a list of "
            "'section.key=value' items"
        )
    if not isinstance(overrides, Mapping):
        items = list(overrides)
        bad = [i for i in items if not isinstance(i, str)]
        if bad:
            raise ConfigError(f"overrides: {bad[0]!r} is not a 'section.key=value' item")
        return items
    flat: list[tuple[str, Any]] = []
    for key, value in overrides.items():
        if not isinstance(key, str):
            raise ConfigError(f"overrides: key {key!r} is not a 'section.key' string")
        if "." not in key and isinstance(value, Mapping):
            flat += [(f"{key}.{k}", v) for k, v in value.items()]
        else:
            flat.append((key, value))
    items = []
    for key, value in flat:
        try:
            text = toml_value(_plain(value))
        except TypeError:
            raise ConfigError(
                f"overrides[{key!r}]: a {type(value).__name__} has no TOML form; give a bool, "
                "number, string, list or dict"
            ) from None
        items.append(f"{key}={text}")
    return items


def run(
    config=None,
    *,
    preset: str | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    out: str | os.PathLike,
    force: bool = False,
    stream: TextIO | None = None,
    world_size: int = 1,
) -> Run:
    """Run a federation and return :func:`open` of its run file: the code of ``distfl
    run``, which with the same settings writes the same file bit for bit. ``world_size``
    1 runs it in this process (W = 1); N >= 2 runs it on N processes of this machine, as
    ``torchrun --standalone --nproc-per-node N -m distfl run`` does (rank 0 the server,
    the others workers, torch.distributed over 127.0.0.1:
    :func:`distfl.launch.launch_ranks`), and waits for them; the same bits as at W = 1.

    ``config``: None (the ``default`` preset unless ``preset`` is given), the path of a
    TOML config file (as ``--config``, on top of ``preset``), or a
    :class:`~distfl.config.Config` (e.g. ``distfl.open(f).config``: a run of that config;
    the modules its ``run.plugins`` names are imported). ``overrides``: ``--set`` items
    (:func:`set_items`). ``out``: the run file; an existing file is refused unless
    ``force``. ``stream``: where progress and the summary go (default stdout; set
    ``run.progress = "none"`` for no progress lines).

    Raises ConfigError for a bad key or value (a ``world_size`` that is no int of at least
    1, or more workers than clients among them) and UserError for an output it may not
    write, before anything runs. Ctrl-C stops the run within seconds with a checkpoint of
    its last completed round (resume it with ``distfl run --resume``) and raises
    KeyboardInterrupt; a second Ctrl-C does not wait for anything: the last completed
    round is written and :class:`~distfl.errors.Interrupted` (a KeyboardInterrupt) says
    where. A rank that fails stops the others and raises
    :class:`~distfl.errors.RanksFailed` with its one-line error.
    torch's thread count and CPU random state are as they were when it returns."""
    from distfl.comm.env import LaunchInfo
    from distfl.config import Config
    from distfl.launch import launch, launch_ranks, run_config
    from distfl.runfile.output import check_output

    ranks = _world_size(world_size)
    path = base = None
    if isinstance(config, Config):
        if preset is not None:
            raise ConfigError(
                "distfl.run: give a Config or a preset, not both (a Config holds every key)"
            )
        base = config
    elif config is not None:
        if not isinstance(config, str | os.PathLike):
            raise ConfigError(
                f"distfl.run: config is a {type(config).__name__}; give a TOML file's path "
                "or a distfl.config.Config"
            )
        path = os.fspath(config)
    loaded = run_config(
        path=path, preset=preset, overrides=set_items(overrides), out=os.fspath(out), base=base
    )
    # refused here before torch is imported; the runtime checks again, with the file's size
    check_output(Path(loaded.run.out), force=force, resuming=None, need_bytes=0)
    if ranks > 1:
        summary = launch_ranks(loaded, world_size=ranks, force=force, stream=stream)
    else:
        import torch

        one = LaunchInfo(launcher="single", rank=0, world_size=1, local_rank=0)
        threads = torch.get_num_threads()
        try:
            with torch.random.fork_rng(devices=[]):
                summary = launch(loaded, info=one, force=force, stream=stream)
        finally:
            torch.set_num_threads(threads)
    if summary and summary.get("stopped_by") == "SIGINT":
        raise KeyboardInterrupt(
            f"stopped after round {summary.get('rounds')} of {loaded.run.rounds}; the "
            f"checkpoint is {loaded.run.out} (distfl run --resume {loaded.run.out} goes on)"
        )
    return open(loaded.run.out)


def _world_size(world_size: Any) -> int:
    """``world_size`` checked: an int, 1 (this process) or the ranks (at least 2)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int | np.integer):
        raise ConfigError(
            f"distfl.run: world_size = {world_size!r} is a {type(world_size).__name__}; give an "
            "int: 1 (this process) or the number of ranks (at least 2: the server and a worker)"
        )
    if world_size < 1:
        raise ConfigError(
            f"distfl.run: world_size = {world_size}: give 1 (this process) or the number of "
            "ranks (at least 2: the server and a worker)"
        )
    return int(world_size)


def _names(values: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """A name or names: one string or path, or a list of them."""
    if isinstance(values, str | os.PathLike):
        return [os.fspath(values)]
    return [os.fspath(v) for v in values]


def _seeds(seeds: int | str | Iterable[int]) -> list[int]:
    """Seeds: an int, a list of them, or text such as "0,1,2"."""
    if isinstance(seeds, str):
        items: list[Any] = [s.strip() for s in seeds.split(",") if s.strip()]
    elif isinstance(seeds, int | np.integer):
        items = [seeds]
    else:
        items = list(seeds)
    out = []
    for s in items:
        try:
            if isinstance(s, bool) or not isinstance(s, str | int | np.integer):
                raise ValueError
            out.append(int(s))
        except ValueError:
            raise UserError(f"seeds {seeds!r}: expected integers like [0, 1, 2]") from None
    return out


def suite(
    scenarios: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    *,
    algorithms: str | Iterable[str] | None = None,
    seeds: int | str | Iterable[int] | None = None,
    out: str | os.PathLike,
    workers: int = 1,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    variants: Iterable[str] = (),
    force: bool = False,
    true_clusters: bool = False,
    table: str | None = None,
    nproc: int = 1,
    grid: Iterable[str] = (),
    best: str = "accuracy",
    stream: TextIO | None = None,
):
    """Run ``distfl suite`` (scenarios × algorithms × seeds, each a ``distfl run``
    process, ``workers`` at a time, run files in ``out``) and return its table: one row
    per run, the columns of ``suite.csv`` (:data:`distfl.tools.suite.COLUMNS`) and
    ``file`` (the run's file, for :func:`open`). A DataFrame when pandas is importable,
    else a NumPy record array; a run that failed has NaN scores (its log is named on
    ``stream``, default stdout).

    ``scenarios``: presets or TOML files (None: ``default`` and the papers' scenarios);
    ``algorithms``: names or variants' names (a list, or "fedgwc,none"; default fedgwc and
    none, or a table's methods); ``seeds``: an int, a list, or "0,1" (default 0, or a
    table's seeds); ``overrides``: for every run (:func:`set_items`); ``variants``:
    ``--variant`` texts ("NAME=ALGORITHM:KEY=VALUE,..."); ``true_clusters``: as
    ``--true-clusters``, each algorithm that takes a number of clusters is given the
    scenario's number of data groups; ``table``: as ``--table``, a source paper's
    comparison table (its scenario, settings, methods and seeds where these are not given,
    and its comparison printed on ``stream``); ``nproc``: as ``--nproc``, the ranks of each
    run (above 1, under torchrun); ``grid``: ``--grid`` texts ("train.lr=0.01,0.05"), each
    algorithm run at every point of the keys it takes, the best point by ``best`` marked in
    ``out``'s grid.csv (the table's algorithm names the point). Finished runs in ``out`` are kept
    and unfinished ones resumed, unless ``force``. Raises ConfigError or UserError before
    any run starts."""
    from distfl.tools import suite as tool

    if algorithms is None:  # a table's own methods, else FedGWC and FedAvg
        algorithms = () if table is not None else ("fedgwc", "none")
    if seeds is None:
        seeds = () if table is not None else (0,)
    algorithms = (
        [a for a in algorithms.split(",") if a] if isinstance(algorithms, str) else list(algorithms)
    )
    kw = dict(
        scenarios=_names(scenarios) if scenarios is not None else None,
        algorithms=algorithms,
        seeds=_seeds(seeds),
        out=os.fspath(out),
        workers=workers,
        overrides=set_items(overrides),
        variants=list(variants),
        force=force,
        true_clusters=true_clusters,
        nproc=nproc,
        grid=list(grid),
        best=best,
    )
    if table is not None:
        kw = tool.table_arguments(kw, table)
    rows, outcomes = tool.suite(kw.pop("scenarios"), **kw, stream=stream or sys.stdout)
    rows = [{**row, "file": str(o.job.out)} for row, o in zip(rows, outcomes, strict=True)]
    return rows_table(rows, (*tool.COLUMNS, "file"))


__all__ = ["TABLES", "Node", "Run", "Tree", "make_table", "open", "run", "set_items", "suite"]
