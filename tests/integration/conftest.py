"""Small helpers shared by the integration tests: free ports, a launcher-free environment,
reading a child's output in a thread, and killing process trees.

Tests reach them through the ``helpers`` fixture rather than ``from conftest import ...``:
another conftest.py higher up would make the module name ``conftest`` ambiguous.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable

import pytest
from timing import limit

# Variables by which distfl.comm.env.detect() recognises a launcher. The tests set the ones
# they want; inherited ones (pytest itself run under srun or mpiexec) would change the world.
LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without launcher variables, plus ``extra``; one torch thread."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torch_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The environment torchrun gives rank ``rank`` of a one-node world."""
    return clean_env(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


def distfl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "distfl", "run", *args]


def venv_tool(name: str) -> str:
    """A launcher installed next to the Python that runs the tests (mpiexec, torchrun)."""
    return os.path.join(os.path.dirname(sys.executable), name)


class LineReader:
    """Drains a child's text stream in a daemon thread, so that pipes never fill up and a
    test can wait for a given line with a timeout."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        try:
            for line in stream:
                self.lines.append(line)
                self._queue.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self._queue.put(None)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> str | None:
        """The first line (from now on) that matches, or None at EOF or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            if predicate(line):
                return line

    def text(self, join_timeout: float | None = None) -> str:
        """Everything read so far; waits briefly for EOF first (``join_timeout`` seconds, by
        default ``limit(5)``)."""
        self._thread.join(limit(5) if join_timeout is None else join_timeout)
        return "".join(self.lines)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (mpiexec's proxies call setsid, so killing the
    launcher's process group is not enough)."""
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def pids_with(marker: str, env_item: str | None = None) -> list[int]:
    """Live processes of this user whose command line contains ``marker`` and, if given,
    whose environment contains ``env_item`` (e.g. ``PMI_RANK=2``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmdline:
                continue
            if env_item is not None:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if env_item.encode() not in f.read().split(b"\0"):
                        continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(procs: Iterable[subprocess.Popen], marker: str | None = None) -> None:
    """SIGKILL each launched process's group, every descendant, and (when given) every
    process whose command line contains ``marker``; then reap the Popen objects."""
    procs = list(procs)
    pids: set[int] = set()
    for p in procs:
        if p.poll() is None:
            pids.update(descendants(p.pid))
    if marker:
        pids.update(pids_with(marker))
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # started with start_new_session=True
            except (ProcessLookupError, PermissionError):
                pass
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _kill(pid)
    for p in procs:
        try:
            p.wait(timeout=limit(10))
        except subprocess.TimeoutExpired:
            pass
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def start_ranks(
    args: Iterable[str],
    cwd,
    world: int = 1,
    *,
    args_of: Callable[[int], list[str]] | None = None,
    quiet_workers: bool = False,
    env: dict[str, str] | None = None,
) -> list[subprocess.Popen]:
    """``distfl run ARGS`` started as the ranks of one launch, in ``cwd``: one process
    without a launcher's variables (``world`` 1) or ``world`` ranks of a torchrun-style world
    on a free port, each in a session of its own (a signal to the test's group reaches
    none), its stdout and stderr pipes of text (``quiet_workers``: the workers' stdout
    discarded). ``args_of(rank)``: each rank's own arguments, in place of ``args``;
    ``env``: variables every rank gets besides."""
    port = free_port()
    procs = []
    for rank in range(world):
        rank_env = clean_env() if world == 1 else torch_env(rank, world, port)
        procs.append(
            subprocess.Popen(
                distfl_cmd(*(args_of(rank) if args_of else args)),
                cwd=cwd,
                env={**rank_env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if quiet_workers and rank else subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                start_new_session=True,
            )
        )
    return procs


def signal_after_first_round(proc, sig, marker: str, *, exit_within: float) -> str:
    """Send ``sig`` to ``proc`` (one ``distfl run`` with stdout and stderr pipes) once its
    first progress line of a round comes; it must then exit 0 within ``exit_within``
    seconds (the assertions show its stderr). Its tree is killed either way (``marker``:
    as :func:`kill_tree` takes it). Returns its stdout."""
    try:
        stdout, stderr = LineReader(proc.stdout), LineReader(proc.stderr)
        assert stdout.wait_for(lambda line: line.startswith("round "), limit(60)), stderr.text(0)
        proc.send_signal(sig)
        assert proc.wait(timeout=exit_within) == 0, stderr.text()
        return stdout.text()
    finally:
        kill_tree([proc], marker=marker)


def bench_json(cwd, *args: str, timeout: float) -> dict:
    """``distfl bench ARGS --json`` in ``cwd``: it must exit 0 (within ``timeout``: a hang,
    not a slow machine, is what that catches), leave nothing in ``cwd`` and print one JSON
    object, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "bench", *args, "--json"],
        env=clean_env(), capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip
    what = " ".join(["distfl bench", *args])
    assert proc.returncode == 0, f"{what} failed:\n{proc.stdout}\n{proc.stderr}"
    assert os.listdir(cwd) == [], "the bench leaves nothing behind in its working directory"
    return json.loads(proc.stdout)  # stdout is one JSON object and nothing else


def launch_together(
    commands: dict[str, list[str]], cwd, timeout: float | None = None
) -> dict[str, str]:
    """Each command of ``commands`` (a name: its argv) started at once in ``cwd``, stdout and
    stderr together; each must exit 0 (the assertion names it and shows its output).
    Returns each one's output by name. ``timeout``: each one's limit, by default
    ``limit(300)``."""
    procs = {
        name: subprocess.Popen(
            argv,
            cwd=cwd,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for name, argv in commands.items()
    }
    outputs = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=limit(300) if timeout is None else timeout)
        assert proc.returncode == 0, f"{name}:\n{out}"
        outputs[name] = out
    return outputs


def run_alone(cwd, *args: str) -> str:
    """``distfl run ARGS`` in this process, through :func:`distfl.run` (which writes the file
    ``distfl run`` writes, bit for bit), from ``cwd``: for runs that only make a file to
    compare with, it saves starting a Python that imports torch (3 s of CPU each). ARGS:
    ``--config``, ``--preset``, ``--set`` and ``--out`` (required). Returns the output
    (progress and summary)."""
    import io

    import distfl

    kw: dict = {"overrides": []}
    rest = list(args)
    while rest:
        flag, value = rest.pop(0), rest.pop(0)
        if flag == "--set":
            kw["overrides"].append(value)
        elif flag in ("--config", "--preset", "--out"):
            kw[flag[2:]] = value
        else:
            raise ValueError(f"run_alone takes --config, --preset, --set and --out, not {flag}")
    stream = io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        distfl.run(kw.pop("config", None), stream=stream, **kw)
    finally:
        os.chdir(here)
    return stream.getvalue()


@contextlib.contextmanager
def plugins_forgotten():
    """A block that loads plug-ins in this process (``run_alone``, ``cli`` with
    ``run.plugins``), undone after it: ``sys.path`` (a plug-in's folder goes on it), the
    algorithms, datasets and models registered (a class the block registered is forgotten,
    one it replaced is registered again) and the plug-in modules it imported, so that
    another test's file of the same name or class registers afresh."""
    from distfl.plugins import ALGORITHMS, DATASETS, MODELS

    kinds = (ALGORITHMS, DATASETS, MODELS)
    path, modules = list(sys.path), set(sys.modules)
    registered = [dict(kind.items()) for kind in kinds]
    try:
        yield
    finally:
        sys.path[:] = path
        for kind, before in zip(kinds, registered, strict=True):
            for name, cls in kind.items():
                if before.get(name) is not cls:
                    kind.remove(name)
                    if name in before:
                        kind.add(before[name])
        for name in set(sys.modules) - modules:
            if name.startswith("distfl_plugin_"):
                del sys.modules[name]


class Hung(BaseException):
    """An in-process command ran past its limit (a BaseException: no ``except Exception``
    of the code under test takes it for its own error)."""


@contextlib.contextmanager
def _alarm(seconds: float):
    """:class:`Hung` in this (the main) thread once ``seconds`` have passed."""

    def expire(signum, frame):
        raise Hung(f"still running after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli(
    cwd, *args, env: dict[str, str] | None = None, timeout: float | None = None
) -> types.SimpleNamespace:
    """``distfl ARGS`` in this process from ``cwd``, through :func:`distfl.cli.main` (what
    the command runs): ``returncode``, ``stdout`` and ``stderr``, as a finished process has
    them. For a command whose process is not what the test is about, it saves starting a
    Python that imports torch and the readers' libraries (3 to 5 s of CPU each).

    What the command writes to file descriptor 2 below Python (HDF5's diagnostics, say)
    is in ``stderr`` too; an exception that escapes ``main`` gives code 1 and its traceback
    on ``stderr``, as ``python -m distfl`` would; ``env``: variables set during the call;
    launcher variables are unset during it. A call still running after ``timeout`` seconds
    (by default ``limit(600)``) raises :class:`Hung`."""
    import io
    import tempfile
    import traceback

    from distfl.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env = dict(os.environ)
    here = os.getcwd()
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as below:
        saved_fd = os.dup(2)
        os.dup2(below.fileno(), 2)
        try:
            for name in LAUNCHER_VARS:
                os.environ.pop(name, None)
            os.environ.update(env or {})
            os.chdir(cwd)
            with (
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
                _alarm(limit(600) if timeout is None else timeout),
            ):
                try:
                    code = main([str(a) for a in args])
                except SystemExit as exc:  # argparse's --help and --version
                    code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                except Exception:  # what the process would print before exiting 1
                    traceback.print_exc()
                    code = 1
        finally:
            os.chdir(here)
            os.environ.clear()
            os.environ.update(saved_env)
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
        below.seek(0)
        low = below.read().decode(errors="replace")
    return types.SimpleNamespace(
        args=["distfl", *map(str, args)], returncode=code, stdout=out.getvalue(),
        stderr=err.getvalue() + low,
    )  # fmt: skip


def launch_script(script: str, out, config, *args: str, nproc: int = 3):
    """Run ``launch/<script>`` (``local.sh``, ``torchrun.sh``, ...) on ``config`` with
    ``NPROC=nproc``, writing ``out`` from its folder; asserts it ended with code 0 and
    returns ``out``."""
    from pathlib import Path

    env = clean_env(CONFIG=str(config), OUT=str(out), NPROC=str(nproc))
    env["PYTHON"] = sys.executable
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        ["bash", str(root / "launch" / script), *args],
        env=env, capture_output=True, text=True, timeout=limit(300), cwd=Path(out).parent,
    )  # fmt: skip
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


def alone_torchrun_resumed(tmp, args: Callable[..., tuple[str, ...]], rounds: int):
    """Three runs of ``args(rounds=...)`` in ``tmp``: one process (``w1.h5``), torchrun with
    3 ranks (``w3.h5``, started first and run beside the others), and one process stopped
    after round 2 and resumed to ``rounds`` with ``distfl run --resume`` (``resumed.h5``, its
    resume running only the rounds left). The one-process runs and the resume are the code
    of ``distfl run`` in this process. Returns their paths, in that order."""
    from concurrent.futures import ThreadPoolExecutor

    single, multi, resumed = tmp / "w1.h5", tmp / "w3.h5", tmp / "resumed.h5"
    torchrun = [
        venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
        "-m", "distfl", "run", *args(rounds=rounds), "--out", str(multi), "--comm", "torch",
    ]  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:  # the ranks, while this process runs W=1
        ranks = pool.submit(subprocess.run, torchrun, env=clean_env(),
                            capture_output=True, text=True, timeout=limit(400))  # fmt: skip
        run_alone(tmp, *args(rounds=rounds), "--out", str(single))
        run_alone(tmp, *args(rounds=2), "--out", str(resumed))
        proc = cli(tmp, "run", *args(rounds=rounds), "--resume", str(resumed))
        p3 = ranks.result()
    assert p3.returncode == 0, p3.stdout + p3.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{rounds - 2} rounds in" in proc.stdout  # only the remaining rounds ran
    return single, multi, resumed


@pytest.fixture(scope="session")
def helpers() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        free_port=free_port,
        clean_env=clean_env,
        torch_env=torch_env,
        distfl_cmd=distfl_cmd,
        venv_tool=venv_tool,
        LineReader=LineReader,
        descendants=descendants,
        pids_with=pids_with,
        kill_tree=kill_tree,
        start_ranks=start_ranks,
        signal_after_first_round=signal_after_first_round,
        bench_json=bench_json,
        run_alone=run_alone,
        plugins_forgotten=plugins_forgotten,
        cli=cli,
        launch_together=launch_together,
        alone_torchrun_resumed=alone_torchrun_resumed,
        launch_script=launch_script,
    )


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """The run file of ``distfl run`` with no arguments (the ``default`` preset: FedGWC on
    digits, 300 rounds, one split), run once per session in a directory of its own, as a
    process of its own (the in-process runs of the tests are compared with it); its stdout
    and stderr are the fixture's ``stdout``/``stderr``. Tests only read it."""
    cwd = tmp_path_factory.mktemp("default-run")
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run"],
        env=clean_env(), cwd=cwd, capture_output=True, text=True, timeout=limit(600),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return types.SimpleNamespace(
        path=cwd / "distfl-run.h5", dir=cwd, stdout=proc.stdout, stderr=proc.stderr
    )
