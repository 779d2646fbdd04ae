"""Bad input: the CLI exits with code 2 and prints exactly one line on stderr that names
the key (or the file) and what is allowed, without a Python traceback. The cases run the
command's code (``distfl.cli.main``) in the test's process; a few, and every one that
sets a launcher's variables, run ``python -m distfl`` as a process of its own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cliproc import assert_one_line_error
from timing import limit

import distfl

pytestmark = pytest.mark.integration

CLI_TIMEOUT = limit(60)  # a bad-input run ends in seconds; this only stops a hang
DISTFL_DIR = os.path.dirname(os.path.abspath(distfl.__file__))


def run_cli(helpers, args, tmp_path: Path, env=None, *, process: bool = False):
    """``distfl run ARGS``: its exit code, stdout and stderr; in this process unless
    ``process`` or ``env`` (a process's environment) is given.

    Without --config or --preset the FedGWC default preset would apply (its groups fix
    num_clients at 40); these cases start from the plain key defaults instead."""
    if "--config" not in args and "--preset" not in args:
        args = ["--preset", "digits", *args]
    if not process and env is None:
        return helpers.cli(tmp_path, "run", *args, timeout=CLI_TIMEOUT)
    return subprocess.run(
        [sys.executable, "-m", "distfl", "run", *args],
        cwd=tmp_path,
        env=env if env is not None else helpers.clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=CLI_TIMEOUT,
    )


# (test id, --set overrides, what the one line must contain: the key, then what is allowed)
SET_CASES = [
    ("unknown-key", ["data.foo=1"], ["data.foo", "allowed", "num_clients"]),
    ("unknown-section", ["nosuch.rounds=1"], ["[nosuch]", "allowed", "run", "train"]),
    ("rounds-not-int", ["run.rounds=abc"], ["run.rounds", "'abc'", "integer"]),
    ("num-clients-float", ["data.num_clients=1.5"], ["data.num_clients", "1.5", "integer"]),
    (
        "clients-per-round-above-num-clients",
        ["data.num_clients=20", "server.clients_per_round=21"],
        ["server.clients_per_round", "21", "between 1 and data.num_clients (20)"],
    ),
    ("local-steps-zero", ["train.local_steps=0"], ["train.local_steps", "at least 1"]),
    (
        "group-negative-alpha",
        ["data.groups=[{count=20, alpha=-1.0}]"],
        ["data.groups[0].alpha", "-1.0", "from 0 (one class per client) to 1e+06"],
    ),
    (
        "group-more-classes-per-client-than-classes",
        ['data.groups=[{count=20, partition="classes_per_client", classes_per_client=11}]'],
        ["data.groups[0].classes_per_client = 11", "at most the 10 classes of digits"],
    ),
    (
        "group-shards-do-not-divide",
        ['data.groups=[{count=20, partition="shards", shards_per_client=3}]'],
        ["data.groups[0].shards_per_client = 3", "must divide the group's 80 samples"],
    ),
    (
        "group-fewer-shards-than-a-client-holds",
        [
            "data.samples_per_client=400",
            'data.groups=[{count=20, partition="shards", shards_per_client=2, classes=[0]}]',
        ],
        ["data.groups", "the 178 samples of the classes of group 0 make 0 shards of 200"],
    ),
    (
        "unknown-model",
        ['model.name="resnet"'],
        ["model.name", "'resnet'", "allowed", "mlp", "cnn", "lenet5"],
    ),
]


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [pytest.param(o, n, id=i) for i, o, n in SET_CASES],
)
def test_bad_set_value(helpers, tmp_path, overrides, needles):
    out = tmp_path / "run.h5"
    args = [a for item in overrides for a in ("--set", item)] + ["--out", str(out)]
    proc = run_cli(helpers, args, tmp_path)
    assert_one_line_error(proc, *needles)
    assert not out.exists(), "bad input must be rejected before the run file is created"


def test_unknown_key_in_toml_file(helpers, tmp_path):
    cfg = tmp_path / "bad-key.toml"
    cfg.write_text("[run]\nrounds = 3\n\n[data]\nnum_clients = 20\nfoo = 1\n", encoding="utf-8")
    proc = run_cli(helpers, ["--config", str(cfg), "--out", str(tmp_path / "run.h5")], tmp_path)
    assert_one_line_error(proc, "data.foo", str(cfg), "allowed", "num_clients")


def test_unknown_section_in_toml_file(helpers, tmp_path):
    cfg = tmp_path / "bad-section.toml"
    cfg.write_text("[optimiser]\nlr = 0.1\n", encoding="utf-8")
    proc = run_cli(helpers, ["--config", str(cfg), "--out", str(tmp_path / "run.h5")], tmp_path)
    assert_one_line_error(proc, "[optimiser]", str(cfg), "allowed", "train")


def test_config_file_missing(helpers, tmp_path):
    cfg = tmp_path / "does-not-exist.toml"
    proc = run_cli(helpers, ["--config", str(cfg), "--out", str(tmp_path / "run.h5")], tmp_path)
    assert_one_line_error(proc, str(cfg), "does not exist", "TOML")


def test_config_file_invalid_toml(helpers, tmp_path):
    cfg = tmp_path / "broken.toml"
    cfg.write_text("[run\nrounds = = 3\n", encoding="utf-8")
    args = ["--config", str(cfg), "--out", str(tmp_path / "run.h5")]
    proc = run_cli(helpers, args, tmp_path, process=True)
    assert_one_line_error(proc, str(cfg), "not valid TOML")


def test_config_is_a_directory(helpers, tmp_path):
    cfg = tmp_path / "conf.d"
    cfg.mkdir()
    proc = run_cli(helpers, ["--config", str(cfg), "--out", str(tmp_path / "run.h5")], tmp_path)
    assert_one_line_error(proc, str(cfg), "is a directory; expected a TOML file")


def test_unknown_preset(helpers, tmp_path):
    proc = run_cli(
        helpers, ["--preset", "no-such-preset", "--out", str(tmp_path / "run.h5")], tmp_path
    )
    assert_one_line_error(proc, "--preset", "'no-such-preset'", "allowed", "digits", "digits-mixed")


def test_unknown_cli_flag(helpers, tmp_path):
    args = ["--no-such-flag", "--out", str(tmp_path / "run.h5")]
    proc = run_cli(helpers, args, tmp_path, process=True)
    assert_one_line_error(proc, "--no-such-flag", "--help")


def test_bad_choice_for_cli_flag(helpers, tmp_path):
    proc = run_cli(helpers, ["--comm", "carrier-pigeon"], tmp_path)
    assert_one_line_error(proc, "--comm", "carrier-pigeon", "local", "torch", "mpi")


# --- more workers than clients ------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_more_workers_than_clients_fails_before_network(helpers, tmp_path, rank):
    """WORLD_SIZE=30 means 29 workers for 20 clients. Every rank must exit 2 at once, before
    joining the process group; only rank 0 prints. A socket listening on MASTER_PORT shows
    whether anything tried to rendezvous (rank 0 would fail to bind it, rank 1 connect)."""
    out = tmp_path / "run.h5"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        env = helpers.clean_env(
            RANK=str(rank),
            WORLD_SIZE="30",
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        args = [
            "--set",
            "data.num_clients=20",
            "--set",
            "server.clients_per_round=5",
            "--set",
            "comm.timeout_s=5",
            "--out",
            str(out),
        ]
        proc = run_cli(helpers, args, tmp_path, env=env)
        listener.setblocking(False)
        try:
            conn, _ = listener.accept()
            conn.close()
            connected = True
        except BlockingIOError:
            connected = False
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    # it failed before any rendezvous: a rendezvous connects to MASTER_PORT first
    assert not connected, "the CLI reached MASTER_PORT before rejecting the world size"
    assert not out.exists()
    if rank == 0:
        assert_one_line_error(proc, "data.num_clients", "20", "29 worker", "30")
    else:
        assert proc.stderr.strip() == "", f"rank {rank} must stay silent:\n{proc.stderr}"


def torchrun_world_of_3(helpers, tmp_path: Path, *run_args: str) -> tuple[int, str]:
    """``distfl run RUN_ARGS`` under a real torchrun with 3 ranks in ``tmp_path``: its exit
    code and its output (stdout and stderr together)."""
    torchrun = helpers.venv_tool("torchrun")
    launcher = (
        [torchrun] if os.path.exists(torchrun) else [sys.executable, "-m", "torch.distributed.run"]
    )
    cmd = [
        *launcher, "--nproc-per-node", "3", "--master-addr", "127.0.0.1",
        "--master-port", str(helpers.free_port()), "-m", "distfl", "run", *run_args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
        errors="replace", start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=limit(120))
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    return proc.returncode, output


def test_more_workers_than_clients_under_torchrun(helpers, tmp_path):
    """2 workers for 1 client under a real torchrun: every rank exits 2, only rank 0 prints."""
    code, output = torchrun_world_of_3(
        helpers, tmp_path, "--preset", "digits", "--set", "data.num_clients=1",
        "--set", "server.clients_per_round=1", "--set", "comm.timeout_s=10",
        "--out", str(tmp_path / "run.h5"),
    )  # fmt: skip
    assert code != 0, output
    assert output.count("distfl: error: data.num_clients") == 1, output
    line = next(ln for ln in output.splitlines() if "distfl: error: data.num_clients" in ln)
    assert "2 worker" in line and "world of 3" in line, line
    # torchrun prints its own traceback and failure summary; none may come from distfl
    assert f'File "{DISTFL_DIR}' not in output, output
    assert "distfl.errors" not in output and "ConfigError" not in output, output
    assert not (tmp_path / "run.h5").exists()


BILLION = "data.num_clients=1000000000"


def test_a_population_that_cannot_fit_is_refused_before_anything_is_allocated(helpers, tmp_path):
    """10^9 clients: exit 2 and one line saying why and how many fit, from a process whose
    peak memory is that of a bare start (its only child is measured by a wrapper)."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stderr.write(p.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(p.returncode)\n"
    )
    cmd = [sys.executable, "-c", wrapper, sys.executable, "-m", "distfl", "run"]
    proc = subprocess.run(
        [*cmd, "--preset", "digits", "--set", BILLION, "--out", str(tmp_path / "run.h5")],
        cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=CLI_TIMEOUT,
    )  # fmt: skip
    line = assert_one_line_error(
        proc, "data.num_clients = 1000000000", "bytes per client", "available", "clients fit"
    )
    fits = int(line.rsplit("at most about ", 1)[1].split()[0].replace(",", ""))
    assert 1_000_000 < fits < 1_000_000_000, line
    assert int(proc.stdout) < 1024 * 1024, (
        f"peak {proc.stdout.strip()} KiB: something was allocated"
    )
    assert not (tmp_path / "run.h5").exists()


def test_a_population_that_cannot_fit_is_refused_by_every_rank_under_torchrun(helpers, tmp_path):
    code, output = torchrun_world_of_3(
        helpers, tmp_path, "--comm", "torch", "--preset", "digits", "--set", BILLION,
        "--set", "comm.timeout_s=20", "--out", str(tmp_path / "run.h5"),
    )  # fmt: skip
    assert code != 0, output
    # only rank 0 prints; every rank exits 2 (torchrun names the first failure's code)
    assert output.count("distfl: error: data.num_clients = 1000000000") == 1, output
    assert "exitcode: 2" in output and "exitcode: 1" not in output, output
    assert f'File "{DISTFL_DIR}' not in output and "ConfigError" not in output, output
    assert not (tmp_path / "run.h5").exists()
