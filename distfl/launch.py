"""Launching a run: the config ``distfl run`` runs and the run in this process's role.

The library beneath the command line: :mod:`distfl.cli` (``distfl run``) and
:func:`distfl.run` (:mod:`distfl.api`) both launch through :func:`run_config` and
:func:`launch`, so the same settings write the same file bit for bit either way.
"""

from __future__ import annotations

import os
import signal
import sys


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
    and ``comm`` (comm.backend). Raises ConfigError; a key without effect that ``base``
    holds at the same value is not refused (the run warns of it)."""
    from distfl import config
    from distfl.config.effects import carried_over

    items = list(overrides)
    if out is not None:  # --out '' is an empty path, refused, not the default
        items.append(f"run.out={config.toml_string(out)}")
    if comm:
        items.append(f"comm.backend={config.toml_string(comm)}")
    preset = preset if preset or path or base else "default"
    with carried_over(base):  # a stored key without effect is warned of, not refused
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
    from distfl.errors import ConfigError
    from distfl.runfile.reader import read_run_file

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


#: how long the other ranks may go on after one failed before they are stopped (SIGTERM):
#: a rank that meets an error every rank meets waits 2 s (cli.RANK0_GRACE_S) so that rank
#: 0 says it; torchrun stops the others at once
RANKS_GRACE_S = 5.0
#: how long a rank stopped by SIGTERM or a second Ctrl-C gets before SIGKILL
RANKS_KILL_S = 30.0


def launch_ranks(config, *, world_size: int, force: bool = False, stream=None):
    """Run ``config`` on ``world_size`` processes of this machine, started as ``torchrun
    --standalone --nproc-per-node world_size -m distfl run`` starts its ranks (rank 0 the
    server, the others workers; torch.distributed over 127.0.0.1 on a free port):
    ``python -u -m distfl run --config FILE`` each, FILE a temporary TOML file that reads
    back to ``config``, with torchrun's variables (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ...), in this process's directory,
    each in a session of its own.
    Their standard output (rank 0's progress and summary) goes to ``stream`` as it comes;
    their standard error is kept, and written to this process's when they all succeed.

    Returns None, or ``{"stopped_by": "SIGINT", "rounds": R}`` (as :func:`launch`'s
    summary says it) when a Ctrl-C here (KeyboardInterrupt) stopped the run: it goes to
    every rank, as a terminal's to torchrun's ranks; the first stops the run after the
    current round with a checkpoint, a second does not wait for anything
    (:class:`~distfl.errors.Interrupted` is raised, saying what the run file holds), a
    third ends the ranks at once. A rank that fails ends the run: the others are stopped
    after :data:`RANKS_GRACE_S` and :class:`~distfl.errors.RanksFailed` is raised with its
    one-line error. Raises ConfigError, before any rank starts, for a world the config or
    the communicator cannot serve."""
    import subprocess
    import tempfile
    from pathlib import Path

    from distfl.comm.env import TORCH_BACKENDS
    from distfl.config import check_world
    from distfl.errors import ConfigError

    check_world(config, world_size)
    if config.comm.backend not in ("auto", *TORCH_BACKENDS):
        raise ConfigError(
            f"comm.backend = {config.comm.backend!r}: the ranks of distfl.run(..., "
            f"world_size={world_size}) talk over torch.distributed; use auto, torch or gloo "
            "(for MPI, launch distfl run with mpiexec)"
        )
    argv = [sys.executable, "-u", "-m", "distfl", "run", *(["--force"] if force else [])]
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="distfl-ranks-") as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text(config.to_toml(), encoding="utf-8")
        read_fd, write_fd = os.pipe()  # every rank's stdout, as a terminal takes them
        try:
            for env in _rank_envs(world_size):
                procs.append(subprocess.Popen(
                    [*argv, "--config", str(path)], env=env, stdin=subprocess.DEVNULL,
                    stdout=write_fd, stderr=subprocess.PIPE, start_new_session=True))  # fmt: skip
            os.close(write_fd)
            write_fd = -1
            errors = [_drain(p.stderr) for p in procs]
            interrupts, first = _follow(procs, read_fd, sys.stdout if stream is None else stream)
        finally:
            if write_fd >= 0:
                os.close(write_fd)
            os.close(read_fd)
            _end(procs, signal.SIGKILL)
    said = [text() for text in errors]
    if interrupts:
        return _interrupted(config, said[0], interrupts)
    if first is not None:
        raise _failed(first, [p.returncode for p in procs], said)
    sys.stderr.write("".join(said))
    return None


def _rank_envs(world_size: int) -> list[dict[str, str]]:
    """Each rank's environment: this process's, with what torchrun gives its ranks on one
    node (one torch thread unless ``OMP_NUM_THREADS`` says otherwise, as torchrun does)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = {"WORLD_SIZE": world_size, "LOCAL_WORLD_SIZE": world_size, "GROUP_RANK": 0,
             "GROUP_WORLD_SIZE": 1, "ROLE_WORLD_SIZE": world_size, "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": port}  # fmt: skip
    world["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", 1)
    return [
        {**os.environ, **{k: str(v) for k, v in world.items()},
         "RANK": str(rank), "LOCAL_RANK": str(rank), "ROLE_RANK": str(rank)}
        for rank in range(world_size)
    ]  # fmt: skip


def _drain(pipe):
    """Read ``pipe`` until it closes, in a thread of its own; returns a function that waits
    for the end and gives the text."""
    import threading

    chunks: list[bytes] = []

    def read() -> None:
        with pipe:
            chunks.extend(pipe)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()

    def text() -> str:
        thread.join(timeout=10)
        return b"".join(chunks).decode("utf-8", "replace")

    return text


def _follow(procs, read_fd: int, stream) -> tuple[int, int | None]:
    """Copy the ranks' output to ``stream`` until every rank has ended, passing a Ctrl-C
    on and stopping the others when one fails: (the Ctrl-Cs passed on, the first rank that
    failed or None)."""
    import codecs
    import selectors
    import time

    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    selector = selectors.DefaultSelector()
    selector.register(read_fd, selectors.EVENT_READ)
    interrupts, first, since, sent = 0, None, None, 0  # sent: 1 SIGTERM, 2 SIGKILL
    while True:
        try:
            if selector.select(timeout=0.2):
                chunk = os.read(read_fd, 1 << 16)
                if chunk:
                    stream.write(decoder.decode(chunk))
                    stream.flush()
                    continue
                selector.unregister(read_fd)  # every rank closed it: wait for their ends
            codes = [p.poll() for p in procs]
            if all(code is not None for code in codes):
                stream.write(decoder.decode(b"", final=True))
                return interrupts, first
            if first is None:
                stopped = (0, 130) if interrupts else (0,)  # 130: a rank that Ctrl-C stopped
                first = next((r for r, c in enumerate(codes) if c not in (None, *stopped)), None)
                since = time.monotonic() if first is not None else since
            late = time.monotonic() - since if since is not None else 0.0
            if sent == 0 and late > RANKS_GRACE_S:
                sent = 1
                _end(procs, signal.SIGTERM)
            elif sent == 1 and late > RANKS_GRACE_S + RANKS_KILL_S:
                sent = 2
                _end(procs, signal.SIGKILL)
        except KeyboardInterrupt:
            interrupts += 1
            _end(procs, signal.SIGINT if interrupts < 3 else signal.SIGKILL)
            if interrupts == 2 and sent == 0:  # the ranks end now, or SIGKILL ends them
                since, sent = time.monotonic() - RANKS_GRACE_S, 1


def _end(procs, sig: int) -> None:
    """``sig`` to every rank still running (SIGKILL: and reap it)."""
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGKILL:
            proc.wait()


def _interrupted(config, said: str, interrupts: int) -> dict:
    """What a Ctrl-C left: the summary's ``stopped_by`` and ``rounds`` (the run file's
    round), or Interrupted with what rank 0 said after a second Ctrl-C."""
    from distfl.errors import Interrupted
    from distfl.runfile.reader import read_run_file

    told = [ln for ln in said.splitlines() if ln.startswith("distfl: ")]
    if interrupts > 1 and told and told[-1] != "distfl: interrupted":
        raise Interrupted(told[-1].removeprefix("distfl: "))
    if interrupts > 2 or not os.path.exists(config.run.out):
        raise KeyboardInterrupt("the ranks were ended; the run file holds what they wrote")
    done = int(read_run_file(config.run.out, state=False).state["round"])
    return {"stopped_by": "SIGINT", "rounds": done}


def _failed(first: int, codes: list[int], said: list[str]):
    """RanksFailed for rank ``first``, the first to fail (``codes``: each rank's exit
    code, ``said``: its standard error): its ``distfl: error:`` line, else rank 0's where
    ``first`` exited saying nothing (as every rank but 0 does on an error every rank meets),
    else its last line (a traceback's last) or how it ended."""
    from distfl.errors import RanksFailed

    def lines(rank: int) -> list[str]:
        return [ln.strip() for ln in said[rank].splitlines() if ln.strip()]

    def error_line(rank: int) -> str | None:
        mine = [ln for ln in lines(rank) if ln.startswith("distfl: error: ")]
        return mine[-1].removeprefix("distfl: error: ") if mine else None

    rank = first
    if error_line(first) is None and not lines(first) and codes[first] > 0 and error_line(0):
        rank = 0
    message, code = error_line(rank), codes[rank]
    if message is None:
        how = f"ended by signal {-code}" if code < 0 else f"exit code {code}"
        if -code in signal.valid_signals():
            how = f"ended by {signal.Signals(-code).name}"
        message = f"rank {rank} of {len(codes)} failed ({how})"
        message += f": {lines(rank)[-1]}" if lines(rank) else ""
    output = "".join(
        f"[rank {r}] {line}\n" for r, text in enumerate(said) for line in text.splitlines()
    )
    return RanksFailed(message, rank=rank, exit_code=code, output=output)
