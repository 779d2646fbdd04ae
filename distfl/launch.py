"""Launching a run: the config ``distfl run`` runs and the run in this process's role.

The library beneath the command line: :mod:`distfl.cli` (``distfl run``) and
:func:`distfl.run` (:mod:`distfl.api`) both launch through :func:`run_config` and
:func:`launch`, so the same settings write the same file bit for bit either way.
"""

from __future__ import annotations


def run_config(
    *,
    path: str | None = None,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | None = None,
    comm: str | None = None,
    base=None,
):
    """The config ``distfl run`` runs (shared with :func:`distfl.run`): ``base`` (a run
    file's stored config, for ``--resume``) or the defaults, then ``preset`` (the
    ``default`` preset when none of ``base``, ``preset`` and ``path`` is given), then the
    TOML file at ``path``, then the ``--set`` items ``overrides``, then ``out`` (run.out)
    and ``comm`` (comm.backend). Raises ConfigError."""
    from distfl import config

    items = list(overrides)
    if out is not None:  # --out '' is an empty path, refused, not the default
        items.append(f"run.out={config.toml_string(out)}")
    if comm:
        items.append(f"comm.backend={config.toml_string(comm)}")
    preset = preset if preset or path or base else "default"
    return config.load(path=path, preset=preset, overrides=items, base=base)


def launch(
    config,
    *,
    info=None,
    resume: str | None = None,
    force: bool = False,
    stream=None,
    signals_after: str = "restore",
):
    """Run ``config`` in this process's role, as ``distfl run`` does (shared with
    :func:`distfl.run`, which gives a one-process ``info``); returns the summary on rank 0,
    None on the other ranks and when ``resume`` names a run that has nothing left to do.

    What the launch alone decides (a world larger than the federation, a backend the
    launcher cannot serve) is refused before the runtime and torch are imported.
    ``signals_after``: what becomes of the stop signals after the run
    (:func:`distfl.runtime.stopping.stop_signals`)."""
    from distfl.comm import resolve_backend
    from distfl.comm.env import detect
    from distfl.config import check_world

    info = detect(backend=config.comm.backend) if info is None else info
    check_world(config, info.world_size)
    resolve_backend(config.comm.backend, info)
    if resume and resumed_run_is_done(resume, config):
        return None
    from distfl.runtime import run

    return run(config, info=info, resume=resume, force=force, stream=stream,
               signals_after=signals_after)  # fmt: skip


def resumed_run_is_done(path: str, config) -> bool:
    """True (and rank 0 says so) when the run file at ``path`` has reached ``run.rounds``
    and the output is that file: resuming it would change nothing, so nothing is written.
    ``run.rounds`` below the file's round is refused (a run cannot be shortened)."""
    import os

    from distfl.errors import ConfigError
    from distfl.runfile.checkpoint import read_run_file

    done = int(read_run_file(path, state=False).state["round"])
    if config.run.rounds < done:
        raise ConfigError(
            f"run.rounds = {config.run.rounds}: {path} is at round {done} already; give "
            f"run.rounds >= {done} to go on (a run is not shortened)"
        )
    same = os.path.exists(config.run.out) and os.path.samefile(config.run.out, path)
    if config.run.rounds > done or not same:
        return False
    if is_rank0():
        print(f"{path}: finished (round {done} of {config.run.rounds}); nothing to resume, "
              "the file is unchanged")  # fmt: skip
    return True


def is_rank0() -> bool:
    """Whether this process is rank 0 of its launch (or launched alone)."""
    from distfl.comm.env import detect

    try:
        return detect().rank == 0 and detect(backend="torch").rank == 0
    except (KeyError, ValueError):
        return True
