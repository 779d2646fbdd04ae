"""``distfl run|keys|inspect|report|status|gather|suite|bench`` (also ``python -m distfl``).

Bad input exits with code 2 and one line on stderr; a failed collective (a peer rank
died, a timeout) exits with code 3 and one line naming the rank.
"""

from __future__ import annotations

import argparse
import os
import sys

from distfl import __version__
from distfl.errors import (
    CommError,
    DivergedError,
    Interrupted,
    LoaderFailed,
    RoundFailed,
    UserError,
)
from distfl.launch import is_rank0, launch, run_config
from distfl.text import printable
from distfl.tools.paper_tables import TABLES as PAPER_TABLES


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for config errors
        self.exit(2, f"distfl: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="distfl", description="Cluster-scale emulator for clustered federated learning."
    )
    p.add_argument("--version", action="version", version=f"distfl {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_run(sub)
    _add_keys(sub)
    _add_inspect(sub)
    _add_status(sub)
    _add_compare(sub)
    _add_gather(sub)
    _add_suite(sub)
    _add_report(sub)
    _add_bench(sub)
    return p


class _Once(argparse.Action):
    """An option given at most once: a second ``--config`` is refused, not one of the
    two silently dropped."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if getattr(namespace, self.dest) is not None:
            from distfl.config.checks import shown

            first = shown(getattr(namespace, self.dest))
            parser.error(
                f"{option_string} is given twice ({first} and {shown(values)}); give it once"
            )
        setattr(namespace, self.dest, values)


class _InOrder(argparse.Action):
    """``--set KEY=VALUE``, and ``--out`` and ``--comm`` as the items ``run.out=...`` and
    ``comm.backend=...``: appended to ``overrides`` in command-line order, where of two
    items for one key the later wins. ``--out`` and ``--comm`` also keep their value."""

    def __init__(self, *args, key: str | None = None, **kwargs) -> None:
        self.key = key
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        items = list(getattr(namespace, "overrides", None) or [])
        if self.key is None:
            items.append(values)
        else:
            from distfl.config.toml import toml_string

            items.append(f"{self.key}={toml_string(values)}")
            setattr(namespace, self.dest, values)
        namespace.overrides = items


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run",
        help="run a federation (alone, under torchrun, mpiexec or srun)",
        description="The config: the defaults, then --preset, then --config, then --set, --out "
        "and --comm in their command-line order (of two for one key the later wins).",
    )
    run.add_argument("--config", metavar="FILE.toml", action=_Once, help="TOML config file")
    run.add_argument(
        "--preset",
        metavar="NAME",
        action=_Once,
        help="start from a named preset (see `distfl keys`); without --config and --preset "
        "the 'default' preset runs",
    )
    run.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action=_InOrder,
        default=[],
        dest="overrides",
        help="override one key, e.g. --set run.rounds=50 (value read as TOML); repeatable, "
        "one key each, the later of two for one key wins",
    )
    run.add_argument(
        "--out",
        metavar="RUN.h5",
        action=_InOrder,
        key="run.out",
        help="HDF5 run file (same as --set run.out=..., in its place on the command line)",
    )
    run.add_argument(
        "--comm",
        choices=("auto", "local", "torch", "gloo", "mpi"),
        action=_InOrder,
        key="comm.backend",
        help="communicator (same as --set comm.backend=..., in its place on the command line)",
    )
    run.add_argument(
        "--resume",
        metavar="RUN.h5",
        action=_Once,
        help="continue a run from its run file's /state; without --config and --preset "
        "with the config stored in the file; writes to RUN.h5 unless --out or --set run.out "
        "names another file",
    )
    run.add_argument(
        "--trust-plugins",
        action="store_true",
        help="--resume: import the plug-ins the run file names (run.plugins: Python code), "
        "without naming them again with --set run.plugins=[...] or --config",
    )
    run.add_argument(
        "--trust-unverified",
        action="store_true",
        help="--resume: continue a run file that has no integrity record (distfl 0.1.0 wrote "
        "none; one made to look like such a file has none either), of which only /state can "
        "be verified; without it such a file is refused",
    )
    run.add_argument(
        "--force",
        action="store_true",
        help="replace an existing file at run.out (without it an existing file is refused, "
        "unless it is the run file --resume continues)",
    )


def _add_keys(sub: argparse._SubParsersAction) -> None:
    ks = sub.add_parser(
        "keys",
        help="list every config key: its type or allowed values, the value a plain `distfl run` "
        "uses and where that value comes from; and the presets",
        description="Every config key with its type or allowed values, the value a run starts "
        "from and its source: 'preset NAME' when the preset sets it, else 'built-in default'. "
        "Without --preset: a plain `distfl run` (neither --config nor --preset), which starts "
        "from the preset 'default'. The other algorithms' own keys follow, at their defaults.",
    )
    ks.add_argument(
        "--preset",
        metavar="NAME",
        help="show the values `distfl run --preset NAME` starts from",
    )


def _add_inspect(sub: argparse._SubParsersAction) -> None:
    ins = sub.add_parser("inspect", help="print a run file's hierarchy, accuracies and scores")
    ins.add_argument("path", metavar="RUN.h5")


def _add_status(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser(
        "status", help="say whether a run file's run finished (exit 0) or stopped early (exit 1)"
    )
    st.add_argument("path", metavar="RUN.h5")


def _add_compare(sub: argparse._SubParsersAction) -> None:
    cmp = sub.add_parser(
        "compare",
        help="say whether two run files hold the same bits, part by part, and where they differ",
        description="Compares the parts config, clients, metrics, tree and state of two run "
        "files bit for bit (timing, the wall-clock part, is ignored by default) and names "
        "where each part first differs: the dataset, the index and both values. Exit 0 when "
        "every compared part is the same, 1 when one differs, 2 when a file cannot be read "
        "(one line saying why).",
    )
    cmp.add_argument("a", metavar="A.h5")
    cmp.add_argument("b", metavar="B.h5")
    cmp.add_argument(
        "--ignore",
        metavar="PARTS",
        default="timing",
        help="parts left out, comma-separated, of config, clients, metrics, tree, state, "
        "timing (default: timing; '' compares every part)",
    )


def _add_gather(sub: argparse._SubParsersAction) -> None:
    ga = sub.add_parser(
        "gather",
        help="tabulate run files (config, accuracy, clustering scores); CSV on request",
        description="One row per run file that can be read; a file that cannot be is named on "
        "stderr ('distfl gather: skipped PATH: reason') and left out. Exit 0 when every file "
        "was read; 1 when some were skipped and at least one was gathered (the table and the "
        "CSV hold those); 2 when none could be read, or for a wrong argument (an unknown "
        "--key, a path that does not exist, a --csv that exists without --force), with one "
        "line and no table.",
    )
    ga.add_argument(
        "paths",
        metavar="RUN.h5",
        nargs="+",
        help="run files, or directories (every *.h5 directly inside, sorted by name)",
    )
    ga.add_argument("--csv", metavar="OUT.csv", help="also write the rows as CSV to OUT.csv")
    ga.add_argument(
        "--force",
        action="store_true",
        help="replace an existing OUT.csv (a regular file; never a link, a FIFO or a device)",
    )
    ga.add_argument(
        "--key",
        metavar="SECTION.KEY",
        action="append",
        default=[],
        dest="keys",
        help="add a column with this config value, e.g. --key algorithm.epsilon; repeatable",
    )


def _add_suite(sub: argparse._SubParsersAction) -> None:
    su = sub.add_parser(
        "suite",
        help="run scenarios x algorithms x seeds and tabulate how well each clustering "
        "matched the ground truth",
        description="Each (scenario, algorithm, seed) is a normal run with its own run file "
        "OUT/<scenario>--<algorithm>--s<seed>.h5; the table is also written to OUT/suite.csv "
        "and OUT/suite.json. Finished runs are kept and unfinished ones resumed when the same "
        "suite runs again.",
    )
    su.add_argument(
        "scenarios",
        metavar="SCENARIO",
        nargs="*",
        help="presets or TOML config files (default: 'default' and the papers' scenarios: "
        "table3-*, table4-*, rotated, backdoor)",
    )
    su.add_argument(
        "--algorithms",
        default=None,
        metavar="A,B",
        help="values of algorithm.name or --variant names, comma-separated (fedgwc,none; "
        "none, also written fedavg, is one global model, named by its aggregator (fedavg) in "
        "the table, the figures and the run files)",
    )
    su.add_argument(
        "--variant",
        dest="variants",
        metavar="NAME=ALGORITHM:KEY=VALUE,...",
        action="append",
        default=[],
        help="an algorithm with settings of its own, listed in --algorithms by NAME (e.g. "
        "fedgwc_paper=fedgwc:db_threshold=1,epsilon=1e-5,patience=1); repeatable",
    )
    su.add_argument(
        "--true-clusters",
        action="store_true",
        help="give every algorithm that takes a number of clusters (its clusters_key, e.g. "
        "IFCA's num_clusters) each scenario's number of data groups, as the papers give "
        "their rivals; the others run at their own settings",
    )
    su.add_argument(
        "--seeds", default=None, metavar="S,T",
        help="seeds, comma-separated, and ranges: 0-9 is 0,1,...,9 (0; a --table's own, "
        "0,1,2)",
    )  # fmt: skip
    su.add_argument(
        "--table",
        default=None,
        metavar="NAME",
        help=f"a source paper's comparison table ({', '.join(PAPER_TABLES)}): its scenario "
        "and settings, every method of it distfl has (or those of --algorithms), "
        "--true-clusters, its seeds; prints the paper's columns with the paper's value "
        "beside each row and writes OUT/comparison.md",
    )
    _add_suite_running(su)


def _add_suite_running(su: argparse.ArgumentParser) -> None:
    """The suite's options on where and how its runs run."""
    su.add_argument(
        "--out", default="distfl-suite", metavar="DIR",
        help="directory of the run files (distfl-suite)",
    )  # fmt: skip
    su.add_argument(
        "--workers", type=int, default=1, metavar="N", help="runs at a time, each a process (1)"
    )
    su.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="ranks of each run (1: one process; N > 1: each run under torchrun "
        "--standalone --nproc-per-node N with --comm torch, rank 0 the server)",
    )
    su.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="overrides",
        help="override a key in every run, e.g. --set data.dataset=mnist; repeatable",
    )
    su.add_argument("--force", action="store_true", help="rerun and overwrite existing run files")


def _add_report(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser(
        "report",
        help="figures of a run file (or of a suite directory) as PNGs and one index.html",
        description="Writes PNG figures and an index.html showing them with the run's config "
        "and summary: accuracy over rounds, the MSE of each cluster's interaction matrix, at "
        "each split the P and W heatmaps, the 2-D spectral embedding and the DB score per "
        "candidate n, the cluster tree and the class distribution of each final cluster. A "
        "run in progress is reported from its last checkpoint. For a directory (a distfl "
        "suite): the comparison table, a bar chart per metric and a report of each run.",
    )
    rp.add_argument("target", metavar="RUN.h5|DIR", help="a run file or a directory of them")
    rp.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: RUN-report beside the file, DIR/report for a suite)",
    )
    rp.add_argument(
        "--pdf",
        action="store_true",
        help="also write each figure as a PDF (vector lines and text, for papers)",
    )
    rp.add_argument(
        "--trust-plugins",
        action="store_true",
        help="import the plug-ins the run files name (run.plugins: Python code), so that "
        "their algorithms' own figures can be drawn; by default nothing is imported",
    )


def _add_bench(sub: argparse._SubParsersAction) -> None:
    be = sub.add_parser(
        "bench",
        help="measure distfl against a plain PyTorch loop and Flower on one workload",
        description="Rounds/s, client-steps/s, overhead beyond local training and bytes per "
        "round of a plain PyTorch loop, distfl at W=1 (default and sequential trainer), distfl "
        "under torchrun with 3 ranks and Flower's simulation, on the same FedAvg workload. "
        "With --scale: what a population costs instead (real runs from K = 1,000 to 100,000).",
    )
    be.add_argument("--clients", type=int, default=100, metavar="K", help="clients (100)")
    be.add_argument(
        "--per-round", type=int, default=100, metavar="N", help="clients per round (100)"
    )
    be.add_argument(
        "--model", choices=("mlp", "cnn", "lenet5", "mnist_cnn"), default="mlp", help="(mlp)"
    )
    be.add_argument("--steps", type=int, default=8, metavar="S", help="local SGD steps (8)")
    be.add_argument("--batch", type=int, default=16, metavar="B", help="batch size (16)")
    be.add_argument("--rounds", type=int, default=10, metavar="R", help="rounds (10)")
    be.add_argument("--json", action="store_true", help="print one JSON object, not a table")
    be.add_argument("--skip-flower", action="store_true", help="leave out the Flower row")
    be.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="run the rows N times, interleaved, and report each row's fastest pass (3)",
    )
    be.add_argument(
        "--server-math",
        action="store_true",
        help="also time FedGWC's affinity + split choice for K = 1,000, 10,000 and 30,000",
    )
    be.add_argument(
        "--scale",
        action="store_true",
        help="instead: the population-scale bench, real `distfl run`s of FedAvg, IFCA and "
        "FedGWC from K = 1,000 to 100,000 at W=1 and W=3 (start-up, s/round, peak memory, "
        "run-file size, worker imbalance); the workload flags above are ignored",
    )
    be.add_argument(
        "--scale-quick",
        action="store_true",
        help="--scale on a few tiny rows (K = 200 and 400, 3 rounds), for tests",
    )
    be.add_argument(
        "--scale-only",
        metavar="KEY",
        action="append",
        default=[],
        help="--scale: only the rows whose key matches this glob, e.g. "
        "'fedavg-K100000-*-W1-*' (keys: ALGORITHM-K<K>-N<cohort>-W<W>-PLACEMENT); repeatable",
    )


def _config_from_args(args: argparse.Namespace):
    stored = None
    if args.resume:
        # the run file is checked (its format, its config; not yet its arrays) before the
        # runtime and torch are imported: a wrong file is refused in a fraction of a second
        from distfl.errors import CheckpointError
        from distfl.runfile.reader import UNVERIFIED, read_run_file

        saved = read_run_file(args.resume, state=False)
        if not saved.verified and not args.trust_unverified:
            raise CheckpointError(
                f"run file {args.resume} {UNVERIFIED}; resume it with --trust-unverified "
                "if you trust what it holds"
            )
        stored = saved.config
        if stored.run.plugins:  # code named by the file: imported only when the user says so
            _check_plugins_named(args, stored.run.plugins)
            stored = read_run_file(args.resume, state=False, plugins=True).config
    # `distfl run --resume RUN.h5` alone continues with the config stored in the file
    base = stored if not args.config and not args.preset else None
    from distfl.config.toml import toml_string

    items = list(args.overrides)  # --set, --out and --comm, in command-line order
    if args.resume:  # the file it continues, unless --out or --set run.out names another
        items.insert(0, f"run.out={toml_string(args.resume)}")
    loaded = run_config(path=args.config, preset=args.preset, overrides=items, base=base)
    if stored is not None:
        from distfl.runfile.reader import check_resumable

        check_resumable(stored, loaded, args.resume)
    return loaded


def _check_plugins_named(args: argparse.Namespace, stored: tuple[str, ...]) -> None:
    """Refuse to resume a run file whose ``run.plugins`` the command line does not name
    again (``--set run.plugins=[...]``, or ``--config``'s run.plugins) unless
    ``--trust-plugins`` is given: reading a file never runs code it names. Every rank
    parses the same command line and decides alike."""
    from distfl import config
    from distfl.errors import CheckpointError

    if args.trust_plugins:
        return
    named: list = []
    if args.config:
        table = config.read_toml(args.config).get("run", {})
        if isinstance(table, dict) and "plugins" in table:
            named = table["plugins"]
    for item in args.overrides:  # the last --set run.plugins wins, as in config.load
        section, key, value = config.parse_set(item)
        if (section, key) == ("run", "plugins"):
            named = value
    named = named if isinstance(named, list) else [named]
    missing = [spec for spec in stored if spec not in named]
    if missing:
        raise CheckpointError(
            f"{args.resume} names plug-ins {missing} (run.plugins): they are Python code and "
            "are not imported from a file; resume with --trust-plugins, or name them again "
            "with --set run.plugins=[...]"
        )


def _cmd_keys(preset: str | None) -> int:
    from distfl.tools.keys import format_keys, key_rows

    sys.stdout.write(format_keys(key_rows(preset), preset))
    return 0


#: how long a rank other than 0 waits before it exits on an error every rank meets
RANK0_GRACE_S = 2.0


def _rank0_says(exc: Exception) -> None:
    """Rank 0 prints the error that every rank met; the others exit silently, after
    :data:`RANK0_GRACE_S`: torchrun and mpiexec end all ranks as soon as one fails, and a
    rank that refused (say) the world size in a fraction of a second would otherwise have
    rank 0 killed before it reached the same line."""
    if is_rank0():
        print(f"distfl: error: {printable(exc)}", file=sys.stderr)
        return
    import time

    time.sleep(RANK0_GRACE_S)


def entry() -> int:
    """The ``distfl`` command and ``python -m distfl``: :func:`main`, then the exit.

    A process that used a torch.distributed (gloo) process group ends with ``os._exit``
    once its group is destroyed and its output flushed. When this was added, a finished
    rank left to the interpreter's normal exit aborted about once per hundred launches
    ("terminate called without an active exception", SIGABRT, with no Python frame on the
    stack: a C++ thread still joinable when the runtime's objects are torn down at exit).
    Everything the run writes is written and closed before this point. With torch 2.13,
    destroy_process_group joins gloo's threads (one transport loop, two work loops per
    rank) and nothing but the main thread is left at exit, in a rank or in torchrun's
    agent; scripts/teardown_loop.py counted no abort in 100 launches each with this exit,
    without it, and without it or the barrier of ``TorchCommunicator.close`` (the first
    and the last also at torchrun's ``--rdzv-backend c10d``). The exit is kept for the
    older torch versions distfl accepts (>= 2.1), where this was not measured.

    Output to a reader that stopped reading (``distfl inspect RUN.h5 | head -3``) ends the
    command quietly with exit code 141, as a process ended by SIGPIPE: no traceback, and
    nothing more written to the closed pipe."""
    try:
        code = main(exiting=True)
        sys.stdout.flush()
    except BrokenPipeError:
        from distfl.progress import stdout_to_devnull

        stdout_to_devnull()
        code = 141
    except KeyboardInterrupt:  # a Ctrl-C after the run's own handling (its teardown)
        code = 130
    torch_dist = sys.modules.get("distfl.comm.torch_dist")
    if torch_dist is not None and torch_dist.TorchCommunicator.group_destroyed:
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: list[str] | None = None, *, exiting: bool = False) -> int:
    """``distfl ARGV``; the exit code. ``exiting``: the process ends after it (the command
    line), so a stop signal after a run changes nothing any more and is ignored; called
    from Python, the signal handlers are left as they were."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "keys":
            return _cmd_keys(args.preset)
        if args.command == "inspect":
            from distfl.tools.inspection import inspect_run

            inspect_run(args.path, sys.stdout, errors=sys.stderr)
            return 0
        if args.command == "compare":
            from distfl.tools.compare import compare_main

            return compare_main(args, sys.stdout, errors=sys.stderr)
        if args.command == "status":
            from distfl.tools.gather import run_status

            return run_status(args.path, sys.stdout, errors=sys.stderr)
        if args.command == "gather":
            from distfl.tools.gather import gather

            return gather(
                args.paths,
                sys.stdout,
                csv_path=args.csv,
                keys=args.keys,
                errors=sys.stderr,
                force=args.force,
            )
        if args.command == "suite":
            from distfl.tools.suite import suite_main

            return suite_main(args)
        if args.command == "report":
            from distfl.report import report_main

            return report_main(args)
        if args.command == "bench":
            from distfl.tools.bench import bench_main

            return bench_main(args)
        if args.command == "run":
            config = _config_from_args(args)
            after = "ignore" if exiting else "restore"  # a teardown's signal changes nothing
            summary = launch(config, resume=args.resume, force=args.force, signals_after=after)
            # Ctrl-C checkpoints like SIGTERM, but a shell still learns it was interrupted;
            # not a rank of torchrun's, which reads every code but 0 as a failed rank
            # (launch/torchrun.sh exits 130 after a Ctrl-C it handed to the ranks)
            interrupted = summary and summary.get("stopped_by") == "SIGINT"
            return 130 if interrupted and "TORCHELASTIC_RUN_ID" not in os.environ else 0
    except UserError as exc:
        _rank0_says(exc)  # every rank sees the same bad input; one line is enough
        return exc.exit_code
    except (CommError, RoundFailed) as exc:  # RoundFailed: raised on rank 0 alone
        print(f"distfl: error: {printable(exc)}", file=sys.stderr)
        return exc.exit_code
    except (DivergedError, LoaderFailed) as exc:
        _rank0_says(exc)  # every rank stops on the same bounds, or loads the same dataset
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print(f"distfl: {exc}" if isinstance(exc, Interrupted) else "distfl: interrupted",
              file=sys.stderr)  # fmt: skip
        return 130
    return 1
