"""The argument parser of every ``distfl`` command (:func:`parser`); :mod:`distfl.cli` runs
what it reads."""

from __future__ import annotations

import argparse

from distfl import __version__
from distfl.tools.paper_tables import TABLES as PAPER_TABLES
from distfl.tools.suite_grid import BEST_COLUMNS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for config errors
        self.exit(2, f"distfl: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
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
        "--grid",
        metavar="SECTION.KEY=V1,V2",
        action="append",
        default=[],
        help="run every algorithm at each value of KEY (e.g. train.lr=0.01,0.05); several "
        "--grid keys make the product of their values, an algorithm.KEY spreading only the "
        "algorithms that take KEY; the points' table goes to OUT/grid.csv; repeatable",
    )
    su.add_argument(
        "--best",
        default="accuracy",
        choices=BEST_COLUMNS,
        help="the column whose mean over the seeds marks each algorithm's best grid point "
        "(accuracy)",
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


__all__ = ["parser"]
