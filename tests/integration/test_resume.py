"""Resumption: a run stopped half-way (by its round count or by a signal) and resumed from
its run file ends bit for bit where the uninterrupted run ends, at W=1 (in the test's
process) and W=3 (three rank processes with torchrun's variables). A bad checkpoint is
refused with exit code 2 and one line."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same, fedgwc_toml, read_run
from timing import limit

pytestmark = pytest.mark.integration

ROUNDS = 40
# FedGWC on a scenario that splits before and goes on after the half-way point, so that
# the resumed state (interaction matrices, sampling generator, hierarchy) matters.
CONFIG = fedgwc_toml(ROUNDS)
read_all = read_run


def cli(helpers, tmp_path, *args, check=True):
    """``distfl run ARGS`` from ``tmp_path``, in this process (the command's code)."""
    proc = helpers.cli(tmp_path, "run", *args)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def three_ranks(helpers, tmp_path, *args):
    """``distfl run ARGS`` from ``tmp_path`` as the 3 ranks of a one-node world with the
    variables torchrun gives them (real processes, gloo; no torchrun agent above them):
    each must exit 0. Rank 0's output, as ``stdout`` and ``stderr``."""
    procs = helpers.start_ranks(args, tmp_path, 3)
    try:
        readers = [(helpers.LineReader(p.stdout), helpers.LineReader(p.stderr)) for p in procs]
        for p, (out, err) in zip(procs, readers, strict=True):
            assert p.wait(timeout=limit(300)) == 0, out.text() + err.text()
        return types.SimpleNamespace(stdout=readers[0][0].text(), stderr=readers[0][1].text())
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, helpers):
    """The uninterrupted run at W=1, and its config file."""
    tmp = tmp_path_factory.mktemp("resume")
    config = tmp / "fedgwc.toml"
    config.write_text(CONFIG)
    out = tmp / "full.h5"
    cli(helpers, tmp, "--config", str(config), "--out", str(out))
    return config, out


def test_reference_run_splits_across_the_halfway_point(reference):
    _, out = reference
    with h5py.File(out, "r") as f:
        splits = [f["hierarchy"][n].attrs["split_round"] for n in f["hierarchy"]]
        num_clusters = f["metrics/num_clusters"][()]
    rounds = [r for r in splits if r >= 0]
    assert rounds, "the scenario must split for the resume tests to mean something"
    assert min(rounds) <= ROUNDS // 2 and num_clusters[-1] > 1


@pytest.mark.parametrize("world", [1, 3])
def test_stop_halfway_and_resume_equals_uninterrupted(helpers, tmp_path, reference, world):
    config, full = reference
    out = tmp_path / "half.h5"
    first = ["--config", str(config), "--out", str(out), "--set", f"run.rounds={ROUNDS // 2}"]
    second = ["--config", str(config), "--resume", str(out)]
    run = cli if world == 1 else three_ranks
    run(helpers, tmp_path, *first)
    with h5py.File(out, "r") as f:
        assert f["state"].attrs["round"] == str(ROUNDS // 2)  # JSON-encoded attribute
        assert list(f["metrics/round"][()]) == list(range(1, ROUNDS // 2 + 1))
    proc = run(helpers, tmp_path, *second)
    assert f"{ROUNDS // 2} rounds in" in proc.stdout  # only the remaining rounds ran
    assert_same(read_all(full), read_all(out))


def test_sigusr1_checkpoints_and_resume_equals_uninterrupted(helpers, tmp_path, reference):
    """Like Slurm's warning signal: every rank gets SIGUSR1; the server checkpoints after the
    round in flight, all ranks exit 0 within seconds; resuming finishes the same run."""
    config, full = reference
    out = tmp_path / "signalled.h5"
    args = ["--config", str(config), "--out", str(out), "--set", "eval.every=1"]
    procs = helpers.start_ranks(args, tmp_path, 3)
    try:
        stdout0 = helpers.LineReader(procs[0].stdout)
        stderrs = [helpers.LineReader(p.stderr) for p in procs]
        began = stdout0.wait_for(lambda line: line.startswith("round "), limit(60))
        assert began, stderrs[0].text(0)
        for p in procs:
            p.send_signal(signal.SIGUSR1)
        signalled = time.monotonic()
        for r, p in enumerate(procs):
            assert p.wait(timeout=limit(30)) == 0, stderrs[r].text()
        assert time.monotonic() - signalled < limit(15)
        text = stdout0.text()
        assert "stopped by SIGUSR1 after round" in text, text
        # the line docs/checkpoints.md shows (its round and file aside)
        (line,) = [x for x in text.splitlines() if x.startswith("distfl: stopped by SIGUSR1")]
        page = (Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md").read_text()
        (shown,) = [x for x in page.splitlines() if x.startswith("distfl: stopped by SIGUSR1")]

        def masked(x: str, path: str) -> str:
            return re.sub(r"round \d+/\d+", "round N/T", x).replace(path, "RUN")

        assert masked(line, str(out)) == masked(shown, "run.h5")
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    with h5py.File(out, "r") as f:
        stopped_at = int(f["state"].attrs["round"])
    assert 1 <= stopped_at < ROUNDS
    # resume at another world size: the result does not depend on it
    cli(helpers, tmp_path, "--config", str(config), "--resume", str(out), "--set", "eval.every=1")
    ref = read_all(full)
    got = read_all(out)
    # eval.every differs (it is allowed to), so the accuracy columns, the per-cluster
    # evaluation table and the evaluation's share of the traffic differ; training does not
    # (with eval.every = 1 before and after the stop, the resumed file's evaluation table has
    # every round: the checkpoint's rows were kept and the resumed rounds' appended)
    assert np.unique(got["metrics/evaluation/round"]).tolist() == list(range(1, ROUNDS + 1))
    evaluated = ("accuracy", "accuracy_worst", "accuracy_p10", "accuracy_plain", "test_loss",
                 "federation_bytes", "evaluation")  # fmt: skip
    for key in list(ref):
        if key.split("/")[1].split("@")[0] in evaluated:
            ref.pop(key), got.pop(key)
    assert_same(ref, got)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_single_process(helpers, tmp_path, reference, sig):
    """SIGTERM, and SIGHUP (a closed terminal, a dropped ssh session) alike: the round in
    flight ends, the file holds it, exit code 0."""
    config, _ = reference
    out = tmp_path / "term.h5"
    (proc,) = helpers.start_ranks(["--config", str(config), "--out", str(out),
                                   "--set", "eval.every=1", "--set", "run.rounds=100000"],
                                  tmp_path)  # fmt: skip
    stdout = helpers.signal_after_first_round(proc, sig, str(tmp_path), exit_within=limit(60))
    assert f"stopped by {sig.name}" in stdout
    with h5py.File(out, "r") as f:
        assert 1 <= int(f["state"].attrs["round"]) < 100000
        assert len(f["metrics/round"]) == int(f["state"].attrs["round"])


def test_under_nohup_a_sighup_is_ignored(helpers, tmp_path, reference):
    """``nohup distfl run``: the process starts with SIGHUP ignored, and a SIGHUP (the
    terminal closing) neither stops the run nor changes its result."""
    config, full = reference
    out = tmp_path / "nohup.h5"
    proc = subprocess.Popen(
        ["nohup", *helpers.distfl_cmd("--config", str(config), "--out", str(out))],
        cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    stdout = helpers.signal_after_first_round(
        proc, signal.SIGHUP, str(tmp_path), exit_within=limit(300)
    )
    assert "stopped by" not in stdout
    assert f"{ROUNDS} rounds in" in stdout
    assert_same(read_run(full), read_run(out))


def _round_of(line: str) -> int:
    """The round of a progress line ("round  8/40 | ..."), 0 for any other line."""
    if not line.startswith("round "):
        return 0
    return int(line.split()[1].split("/")[0])


def _one_line_exit_2(proc, *needles):
    err = assert_one_line_error(proc, *needles)
    assert err.startswith(("distfl: error: checkpoint", "distfl: error: run file")), err


def test_resume_with_a_different_config_is_refused(helpers, tmp_path, reference):
    config, full = reference
    copy = tmp_path / "copy.h5"
    shutil.copy(full, copy)
    before = copy.read_bytes()
    proc = cli(helpers, tmp_path, "--config", str(config), "--resume", str(copy),
               "--set", "train.lr=0.2", check=False)  # fmt: skip
    _one_line_exit_2(proc, "train.lr", "different config")
    assert copy.read_bytes() == before  # nothing lost or rewritten


def test_truncated_checkpoint_is_refused(helpers, tmp_path, reference):
    config, full = reference
    bad = tmp_path / "truncated.h5"
    data = full.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    proc = cli(helpers, tmp_path, "--config", str(config), "--resume", str(bad), check=False)
    _one_line_exit_2(proc, str(bad), "cannot be read")


def test_corrupt_state_is_refused(helpers, tmp_path, reference):
    config, full = reference
    bad = tmp_path / "corrupt.h5"
    shutil.copy(full, bad)
    with h5py.File(bad, "r+") as f:
        models = f["state/models"]
        models[0, 0] = models[0, 0] + 1.0  # the bytes change, the recorded SHA-256 does not
    proc = cli(helpers, tmp_path, "--config", str(config), "--resume", str(bad), check=False)
    _one_line_exit_2(proc, "damaged", "/state/models differs", "SHA-256")


def test_not_a_run_file_and_missing_file_are_refused(helpers, tmp_path, reference):
    config, _ = reference
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not an HDF5 file at all\n" * 100)
    proc = cli(helpers, tmp_path, "--config", str(config), "--resume", str(garbage), check=False)
    _one_line_exit_2(proc, "cannot be read")
    missing = tmp_path / "missing.h5"
    proc = cli(helpers, tmp_path, "--config", str(config), "--resume", str(missing), check=False)
    _one_line_exit_2(proc, "does not exist")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    proc = cli(helpers, tmp_path, "--config", str(config), "--resume", str(other), check=False)
    _one_line_exit_2(proc, "not a distfl run file")


def test_a_bad_run_file_is_refused_before_the_runtime_is_imported(tmp_path, reference):
    """With a config given too, the run file is still checked first: the refusal comes
    before torch (and every rank's start-up) is paid for."""
    config, full = reference
    (tmp_path / "garbage.h5").write_bytes(b"not an HDF5 file at all\n")
    shutil.copy(full, tmp_path / "copy.h5")
    probe = (
        "import sys\n"
        "from distfl.cli import main\n"
        "for args in (['--resume', 'garbage.h5'],\n"
        "             ['--resume', 'copy.h5', '--set', 'run.seed=9']):\n"
        f"    code = main(['run', '--config', {str(config)!r}, *args])\n"
        "    print(code, 'torch' in sys.modules, 'distfl.runtime' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=limit(120))  # fmt: skip
    assert proc.stdout.splitlines() == ["2 False False", "2 False False"], proc.stdout
    errors = proc.stderr.splitlines()
    assert "garbage.h5 cannot be read" in errors[0] and "run.seed is" in errors[1], errors


def test_crash_after_a_periodic_checkpoint_resumes_exactly(helpers, tmp_path, reference):
    """`checkpoint.every`: a run killed outright (SIGKILL, no chance to write) loses only the
    rounds since its last checkpoint, and resuming from that checkpoint ends bit for bit
    where the uninterrupted run ends."""
    config, full = reference
    out = tmp_path / "crashed.h5"
    # open-ended, so that the kill never races the end of the run; the resume below sets
    # the reference's 40 rounds (run.rounds may change on resume)
    (proc,) = helpers.start_ranks(["--config", str(config), "--out", str(out),
                                   "--set", "checkpoint.every=5", "--set", "run.rounds=100000"],
                                  tmp_path)  # fmt: skip
    try:
        stdout = helpers.LineReader(proc.stdout)
        helpers.LineReader(proc.stderr)
        assert stdout.wait_for(lambda line: _round_of(line) >= 6, limit(120)), stdout.text(0)
        proc.kill()
        proc.wait(timeout=limit(10))
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    assert not (tmp_path / "crashed.h5.tmp").exists() or out.exists()
    with h5py.File(out, "r") as f:
        saved = int(f["state"].attrs["round"])
        assert saved % 5 == 0 and 5 <= saved < ROUNDS, saved
        assert len(f["metrics/round"]) == saved
    cli(helpers, tmp_path, "--config", str(config), "--resume", str(out),
        "--set", "checkpoint.every=5")  # fmt: skip
    assert_same(read_all(full), read_all(out))


def test_resume_alone_uses_the_stored_config(helpers, tmp_path, reference):
    """`distfl run --resume RUN.h5` with no --config or --preset continues with the config
    the file carries; --set may still change what is allowed to change."""
    config, full = reference
    out = tmp_path / "half.h5"
    cli(helpers, tmp_path, "--config", str(config), "--out", str(out),
        "--set", f"run.rounds={ROUNDS // 2}")  # fmt: skip
    proc = cli(helpers, tmp_path, "--resume", str(out), "--set", f"run.rounds={ROUNDS}")
    assert f"{ROUNDS // 2} rounds in" in proc.stdout
    assert_same(read_all(full), read_all(out))
    refused = cli(helpers, tmp_path, "--resume", str(out), "--set", "train.lr=0.3", check=False)
    _one_line_exit_2(refused, "train.lr")
