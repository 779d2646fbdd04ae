"""``distfl run|keys|inspect|report|status|gather|suite|bench`` (also ``python -m distfl``).

Bad input exits with code 2 and one line on stderr; a failed collective (a peer rank
died, a timeout) exits with code 3 and one line naming the rank.
"""

from __future__ import annotations

import argparse
import os
import sys

from distfl.cli_parser import parser as _parser
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
