"""Running a federation in this process's role: rank 0 the server, ranks 1..W-1 workers;
W=1 runs both in one process."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TextIO

import torch

from distfl.comm import detect, make_communicator, resolve_backend
from distfl.comm.base import Communicator
from distfl.comm.env import LaunchInfo
from distfl.comm.world import describe_world
from distfl.config import Config, check_world
from distfl.config.effects import warning_lines
from distfl.data import load_dataset, make_partition
from distfl.errors import LoaderFailed, UserError
from distfl.runfile.atomic import remove_stale_temporaries
from distfl.runfile.output import OutputLock, check_output, keep_traceback
from distfl.runfile.reader import RunFile, check_resumable, read_run_file
from distfl.runtime.capacity import (
    available_bytes,
    check_population,
    check_sizes,
    evaluation_note,
    run_file_bytes,
)
from distfl.runtime.device import prepare_device
from distfl.runtime.export import check_exports
from distfl.runtime.model_size import config_parameters
from distfl.runtime.participation import check_participation
from distfl.runtime.server import Server
from distfl.runtime.stopping import StopFlag, stop_signals
from distfl.runtime.threads import blas_threads
from distfl.runtime.worker import Worker, worker_loop
from distfl.text import exception_line


def _train_device(config: Config, comm: Communicator) -> torch.device:
    if comm.device.type == "cuda":
        return prepare_device(comm.device)
    if config.run.device == "cuda" or (config.run.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            from distfl.errors import ConfigError

            raise ConfigError("run.device = 'cuda' but torch sees no CUDA device; use auto or cpu")
        return prepare_device(torch.device(f"cuda:{comm.local_rank % torch.cuda.device_count()}"))
    return torch.device("cpu")


def run(
    config: Config,
    *,
    info: LaunchInfo | None = None,
    stream: TextIO | None = None,
    resume: str | None = None,
    force: bool = False,
    signals_after: str = "restore",
) -> dict | None:
    """Run one federation in this process's role. Returns the summary on rank 0.

    The stop signals are handled while it runs (:mod:`distfl.runtime.stopping`);
    ``signals_after`` says what becomes of them after it (``stop_signals``' ``after``).

    With ``resume``, continue from that run file's /state (every rank checks the file, so
    a bad checkpoint stops all of them with the same message before any collective).
    ``run.out`` must not exist unless it is the file resumed or ``force`` is given; rank 0
    checks it and locks it before the first round (:func:`_agree_to_start`)."""
    info = detect(backend=config.comm.backend) if info is None else info
    check_world(config, info.world_size)
    saved = None
    if resume is not None:
        saved = read_run_file(resume)
        check_resumable(saved.config, config, resume)
        _check_models(saved, resume)
    resolve_backend(config.comm.backend, info)  # a wrong backend is a config error, not a hang
    torch.set_num_threads(config.run.threads)
    use_cuda = config.run.device != "cpu" and torch.cuda.is_available()
    comm = make_communicator(
        config.comm.backend, timeout_s=config.comm.timeout_s, use_cuda=use_cuda, info=info
    )
    stop = StopFlag()
    finished = False
    config = _through_links(config)
    lock = OutputLock(Path(config.run.out)) if comm.rank == 0 else None
    try:
        with stop_signals(stop, after=signals_after), blas_threads(config.run.threads):
            world = describe_world(comm, info)
            _agree_to_start(config, comm, lock, resume=resume, force=force)
            result = _run_role(config, comm, saved, stop, stream or sys.stdout, world)
        finished = True
        return result
    finally:
        try:
            comm.close(graceful=finished)
        finally:
            if lock is not None:
                lock.release()


def _check_models(saved: RunFile, path: str) -> None:
    """The models of a resumed file's /state as wide as its stored config's model has
    parameters (a dataset or a model of a plug-in not imported is left unchecked): a file
    sealed anew with models of another width is refused in one line, not at a later
    round."""
    from distfl.errors import CheckpointError, ConfigError

    config = saved.config
    try:
        want = config_parameters(config)
    except ConfigError:
        return
    have = saved.state["models"].shape[1]
    if have != want:
        raise CheckpointError(
            f"run file {path} is inconsistent: /state/models holds models of {have} "
            f"parameters; the stored config's model ({config.model.name} on "
            f"{config.data.dataset}) has {want}"
        )


def _through_links(config: Config) -> Config:
    """The config with run.out the file a symbolic link there points to: the lock, the
    temporary file and the rename are the target's, so that a writer of the target and a
    run through the link exclude each other, and the link stays a link to the result."""
    out = config.run.out
    if not os.path.islink(out):
        return config
    return dataclasses.replace(
        config, run=dataclasses.replace(config.run, out=os.path.realpath(out))
    )


def _agree_to_start(
    config: Config, comm: Communicator, lock: OutputLock | None, *, resume, force: bool
) -> None:
    """Every rank refuses alike, before any of them allocates the population (rank 0 says
    why): rank 0 reads the memory available and, when the run fits in it, checks that the
    run file can be written (:func:`check_output`) and locks it; the others decide on the
    same two numbers. The paths of ``run.export`` are checked with the run file's
    (:func:`~distfl.runtime.export.check_exports`)."""
    refusal: UserError | None = None
    mine = 0
    if comm.rank == 0:
        mine = available_bytes() or -1  # -1: not known
        try:
            _check_memory(config, mine)
            check_participation(config)
            out = Path(config.run.out)
            need = run_file_bytes(config)
            if resume and Path(resume).is_file():
                need = max(need, Path(resume).stat().st_size)
            check_output(out, force=force, resuming=Path(resume) if resume else None,
                         need_bytes=need)  # fmt: skip
            check_exports(config, force=force, resuming=resume)
            assert lock is not None
            lock.acquire()
            remove_stale_temporaries(out)
        except UserError as exc:
            refusal = exc
    flags = torch.tensor([mine, 0 if refusal is None else 1], dtype=torch.int64)
    if comm.world_size > 1:
        comm.broadcast(flags, src=0)
    if refusal is not None:
        raise refusal
    if comm.rank == 0 and (note := evaluation_note(config)):
        print(f"distfl: {note}", file=sys.stderr, flush=True)
    _check_memory(config, int(flags[0]))
    if int(flags[1]):
        raise UserError(f"rank 0 cannot write the run file {config.run.out}")


def _check_memory(config: Config, available: int) -> None:
    """The population and every size the config sets against ``available`` bytes (<= 0:
    not known)."""
    known = available if available > 0 else None
    check_population(config, known)
    check_sizes(config, known)


def _load_dataset(config: Config, rank: int):
    """:func:`~distfl.data.load_dataset`; a loader that raises anything but a UserError (a
    missing or malformed data file) is a :class:`~distfl.errors.LoaderFailed` of one line
    that names the dataset, where it is defined and the error, with the traceback in
    ``RUN.h5.traceback.txt`` (written by rank 0)."""
    try:
        return load_dataset(config)
    except UserError:
        raise
    except Exception as exc:
        from distfl.datasets import dataset_spec

        name = config.data.dataset
        module = sys.modules.get(dataset_spec(name).__module__)
        where = getattr(module, "__file__", None) or dataset_spec(name).__module__
        told = ""  # every rank meets the error; rank 0 writes the traceback and says where
        if rank == 0:
            told = "; " + keep_traceback(config.run.out, f"the loader of data.dataset = "
                                         f"{name!r} failed", exc)  # fmt: skip
        raise LoaderFailed(
            f"the loader of data.dataset = {name!r} ({where}) raised {exception_line(exc)}; "
            f"nothing was run{told}"
        ) from None


def _run_role(
    config: Config, comm, saved, stop: StopFlag, stream: TextIO, world: dict | None
) -> dict | None:
    if comm.rank == 0:  # the keys without effect the config did not refuse
        for line in warning_lines(config):
            print(f"distfl: warning: {line}", file=sys.stderr, flush=True)
    device = _train_device(config, comm)
    dataset = _load_dataset(config, comm.rank)
    partition = make_partition(config, dataset)
    if comm.rank == 0:
        worker = None
        if comm.world_size == 1:
            worker = Worker(
                config, dataset, partition, 0, device=device, comm_device=comm.device, stop=stop
            )
        server = Server(
            config,
            comm,
            labels=dataset.y,
            input_shape=dataset.input_shape,
            num_classes=dataset.num_classes,
            partition=partition,
            local_worker=worker,
            device=device,
            stream=stream,
            stop=stop,
            world=world,
        )
        if server.trainer_note:
            print(f"distfl: {server.trainer_note}", file=sys.stderr, flush=True)
        if saved is not None:
            server.restore(saved)
        return server.run()
    worker = Worker(
        config, dataset, partition, comm.rank - 1, device=device, comm_device=comm.device,
        stop=stop,
    )  # fmt: skip
    worker_loop(config, comm, worker)
    return None


__all__ = ["run"]
