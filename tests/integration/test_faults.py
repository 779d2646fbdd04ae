"""Faults a user meets with real runs, each against the ``distfl`` command (a process of
its own where a signal, a kill, a pipe or a second writer is the point; elsewhere its code,
``distfl.cli.main``, in the test's process): nothing a run has written is lost, replaced
or altered without a word, and a damaged run file is refused with one line naming the
part, never a traceback.

- an existing ``--out`` is refused (a finished run file, a text file, a directory); an
  unwritable location, or a disk without room, before the first round;
- a disk that fills during the run (a small tmpfs, as root): the write goes into the room
  held for it, and the run ends there in one line, every completed round kept and
  resumable, no temporary file left; a disk that fills before the first periodic
  checkpoint loses no round either;
- a second writer of the same path (a second run, or a resume while the run writes) is
  refused and the first run is untouched;
- Ctrl-C checkpoints like SIGTERM, a second Ctrl-C writes the rounds it completed and
  exits at once; a closed stdout
  (``| head``) costs nothing;
- resuming a finished run changes nothing; shortening a run is refused;
- a changed, missing or added part of a run file (a metric, a column, the stored config,
  a tree node, the ground truth) is refused by status, inspect, report, gather and resume;
- the kill loop: a run killed (SIGKILL) at random moments while it checkpoints every round,
  and resumed each time, always leaves a readable file and ends on the bits of the run
  that was never interrupted.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same_run, fedgwc_toml
from timing import limit

from distfl.errors import CheckpointError
from distfl.runfile.reader import read_run_file

pytestmark = pytest.mark.integration

TINY = ["--preset", "digits", "--set", "run.rounds=3", "--set", 'run.progress="none"']


#: the default limit of one distfl command (catches a hang)
TIMEOUT = limit(600)


def distfl(helpers, cwd, *args):
    """``distfl ARGS`` from ``cwd`` in this process: its exit code, stdout and stderr."""
    return helpers.cli(cwd, *args)


def process(helpers, cwd, *args, timeout=TIMEOUT):
    """``distfl ARGS`` from ``cwd`` as a process of its own (beside others, in a thread)."""
    return subprocess.run(
        [sys.executable, "-m", "distfl", *args], cwd=cwd, env=helpers.clean_env(),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def start(helpers, cwd, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "distfl", "run", *args], cwd=cwd, env=helpers.clean_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def round_of(path: Path) -> int:
    with h5py.File(path, "r") as f:
        return int(f["state"].attrs["round"])


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".tmp", ".lock")))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, helpers) -> Path:
    """A finished 3-round run file, copied by the tests that change it."""
    tmp = tmp_path_factory.mktemp("faults")
    proc = distfl(helpers, tmp, "run", *TINY, "--out", "done.h5")
    assert proc.returncode == 0, proc.stderr
    return tmp / "done.h5"


# -- no silent replacement ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["run-file", "text-file"])
def test_an_existing_out_is_refused_and_kept(helpers, tmp_path, finished, kind):
    target = tmp_path / "out.h5"
    if kind == "run-file":
        shutil.copy(finished, target)
    else:
        target.write_text("my notes, not a run file\n")
    before = target.read_bytes()
    proc = distfl(helpers, tmp_path, "run", *TINY, "--out", "out.h5")
    line = assert_one_line_error(proc, "out.h5 exists", "--force", "--resume out.h5")
    if kind == "run-file":
        assert "a distfl run file at round 3 of 3" in line
    assert target.read_bytes() == before
    assert leftovers(tmp_path) == []
    forced = distfl(helpers, tmp_path, "run", *TINY, "--out", "out.h5", "--force")
    assert forced.returncode == 0, forced.stderr
    assert target.read_bytes() != before and round_of(target) == 3


def test_the_default_out_is_not_replaced_by_a_second_run(helpers, tmp_path):
    """``./run.sh`` twice: the second run refuses instead of replacing the first result."""
    args = ("run", "--preset", "digits", "--set", "run.rounds=2")
    assert distfl(helpers, tmp_path, *args).returncode == 0
    first = (tmp_path / "distfl-run.h5").read_bytes()
    assert_one_line_error(distfl(helpers, tmp_path, *args), "distfl-run.h5 exists")
    assert (tmp_path / "distfl-run.h5").read_bytes() == first


@pytest.mark.parametrize("where", ["directory", "below-a-file", "read-only"])
def test_an_unwritable_out_is_refused_before_the_first_round(helpers, tmp_path, where):
    if where == "directory":
        (tmp_path / "d.h5").mkdir()
        out, needle = "d.h5", "not a regular file"
    elif where == "below-a-file":
        (tmp_path / "plain").write_text("x")
        out, needle = "plain/run.h5", "cannot write the run file plain/run.h5"
    else:
        if os.geteuid() == 0:
            out, needle = "/proc/distfl-run.h5", "cannot write the run file /proc/distfl-run.h5"
        else:
            (tmp_path / "ro").mkdir(mode=0o500)
            out, needle = "ro/run.h5", "cannot write the run file ro/run.h5"
    proc = distfl(helpers, tmp_path, "run", "--preset", "digits", "--set", "run.rounds=50",
                  "--out", out)  # fmt: skip
    assert_one_line_error(proc, needle)
    assert "round " not in proc.stdout  # refused before the first round


def test_a_device_is_not_replaced_even_with_force(helpers, tmp_path):
    proc = distfl(helpers, tmp_path, "run", *TINY, "--out", os.devnull, "--force")
    assert_one_line_error(proc, f"run.out = {os.devnull} exists and is not a regular file")
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull)
    assert not list(Path(os.devnull).parent.glob("null.*.tmp"))


# -- a full disk -------------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path):
    """A 24 MiB tmpfs (root only: mount)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_disk_without_room_is_refused_before_the_first_round(helpers, tmpfs):
    (tmpfs / "filler").write_bytes(b"\0" * (20 << 20))  # leaves 4 MiB
    proc = distfl(helpers, tmpfs, "run", *TINY, "--out", "run.h5")
    assert_one_line_error(proc, "cannot write the run file run.h5", "free on its disk")
    assert leftovers(tmpfs) == [] and not (tmpfs / "run.h5").exists()


def test_a_disk_that_fills_during_the_run_keeps_the_last_checkpoint(helpers, tmpfs, tmp_path):
    # 5000 rounds: few enough that the run file's estimate fits the 24 MiB disk (the
    # check before the first round), many more than the run makes before the disk fills
    proc = start(helpers, tmpfs, "--preset", "digits", "--set", "run.rounds=5000",
                 "--set", "checkpoint.every=1", "--set", 'run.progress="none"',
                 "--out", "run.h5")  # fmt: skip
    try:
        deadline = time.monotonic() + limit(60)
        while not (tmpfs / "run.h5").exists() and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmpfs / "run.h5").exists(), proc.stderr.read() if proc.poll() is not None else ""
        fill(tmpfs)  # the disk fills up
        _, err = proc.communicate(timeout=limit(60))
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "No space left on device" in err, err
    assert leftovers(tmpfs) == []
    (tmpfs / "filler").unlink()
    kept = round_of(tmpfs / "run.h5")
    # the write of the round before the disk filled went into the room held for it
    assert f"it holds round {kept}" in err and "distfl run --resume run.h5" in err, err
    assert kept >= 1
    status = distfl(helpers, tmpfs, "status", "run.h5")
    assert status.returncode == 1 and f"stopped at round {kept} of 5000" in status.stdout
    # the kept checkpoint resumes (a few more rounds, to another disk)
    resumed = distfl(helpers, tmpfs, "run", "--resume", "run.h5", "--out",
                     str(tmp_path / "more.h5"), "--set", f"run.rounds={kept + 2}")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert round_of(tmp_path / "more.h5") == kept + 2


def fill(directory: Path) -> None:
    """Fill the disk of ``directory`` to its last byte."""
    with open(directory / "filler", "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                pass


@pytest.mark.parametrize("ending", ["finished", "SIGTERM"])
def test_a_disk_full_before_the_first_checkpoint_keeps_every_round(helpers, tmpfs, ending):
    """The disk fills after a few rounds, long before the first periodic checkpoint: the
    run's next write (at its end, or at a stop signal) goes into the room held for it, and
    the file holds every round the run completed."""
    # (5000 rounds: the run file's estimate fits the 24 MiB disk, checked before round 1)
    rounds = 40 if ending == "finished" else 5000
    proc = start(helpers, tmpfs, "--preset", "digits", "--set", f"run.rounds={rounds}",
                 "--set", "eval.every=1", "--set", 'run.progress="lines"',
                 "--out", "run.h5")  # fmt: skip
    try:
        out, err = helpers.LineReader(proc.stdout), helpers.LineReader(proc.stderr)
        for _ in range(3):
            assert out.wait_for(lambda line: line.startswith("round "), limit(60)), err.text(0)
        fill(tmpfs)
        if ending == "SIGTERM":
            assert out.wait_for(lambda line: line.startswith("round "), limit(60))
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=limit(120))
        assert out.wait_for(lambda line: line.lstrip().startswith("run file"), limit(30))
    finally:
        helpers.kill_tree([proc], marker=str(tmpfs))
    assert proc.returncode == 0, err.text()
    printed = [int(s.split()[1].split("/")[0]) for s in out.text().splitlines()
               if s.startswith("round ")]  # fmt: skip
    assert round_of(tmpfs / "run.h5") == printed[-1]
    if ending == "finished":
        assert printed[-1] == rounds
    else:
        assert "stopped by SIGTERM" in out.text()
    assert leftovers(tmpfs) == []


# -- two writers -------------------------------------------------------------------------


def test_a_second_writer_is_refused_and_the_first_is_untouched(helpers, tmp_path):
    first = start(helpers, tmp_path, "--preset", "digits", "--set", "run.rounds=100000",
                  "--set", "checkpoint.every=5", "--set", 'run.progress="lines"',
                  "--set", "eval.every=1", "--out", "run.h5")  # fmt: skip
    try:
        out = helpers.LineReader(first.stdout)
        assert out.wait_for(lambda line: line.startswith("round "), limit(60))
        deadline = time.monotonic() + limit(60)
        while not (tmp_path / "run.h5").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        again = distfl(helpers, tmp_path, "run", *TINY, "--out", "run.h5", "--force")
        assert_one_line_error(again, "run.h5 is being written by another distfl run",
                              f"pid {first.pid}")  # fmt: skip
        resume = distfl(helpers, tmp_path, "run", "--resume", "run.h5")
        assert_one_line_error(resume, "run.h5 is being written by another distfl run")
        assert first.poll() is None  # the first run goes on
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=limit(30)) == 0, first.stderr.read()
    finally:
        helpers.kill_tree([first], marker=str(tmp_path))
    assert "stopped by SIGTERM" in out.text()
    assert round_of(tmp_path / "run.h5") >= 1
    assert leftovers(tmp_path) == []


# -- signals and a closed stdout ---------------------------------------------------------


def test_ctrl_c_checkpoints(helpers, tmp_path):
    args = ("--preset", "digits", "--set", "run.rounds=100000", "--set", "eval.every=1",
            "--set", 'run.progress="lines"')  # fmt: skip
    proc = start(helpers, tmp_path, *args, "--out", "once.h5")
    try:
        out = helpers.LineReader(proc.stdout)
        assert out.wait_for(lambda line: line.startswith("round "), limit(60))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=limit(30)) == 130
        assert "stopped by SIGINT" in out.text()
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    done = round_of(tmp_path / "once.h5")
    assert 1 <= done < 100000
    resumed = distfl(helpers, tmp_path, "run", "--resume", "once.h5",
                     "--set", f"run.rounds={done + 1}")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize("gap", [0.05, 0.3])
def test_a_double_ctrl_c_keeps_every_completed_round(helpers, tmp_path, gap):
    """Two Ctrl-C ``gap`` seconds apart long before the first periodic checkpoint: the
    second does not wait for anything, and the rounds completed before it are on disk."""
    proc = start(helpers, tmp_path, "--preset", "digits", "--set", "run.rounds=100000",
                 "--set", "eval.every=1", "--set", 'run.progress="lines"',
                 "--out", "twice.h5")  # fmt: skip
    try:
        out, err = helpers.LineReader(proc.stdout), helpers.LineReader(proc.stderr)
        for _ in range(3):
            assert out.wait_for(lambda line: line.startswith("round "), limit(60))
        proc.send_signal(signal.SIGINT)
        time.sleep(gap)  # two signals at once would be one: a pending signal is not queued
        proc.send_signal(signal.SIGINT)
        second = time.monotonic()
        assert proc.wait(timeout=limit(30)) == 130, err.text()
        assert time.monotonic() - second < limit(15)
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    printed = [int(s.split()[1].split("/")[0]) for s in out.text().splitlines()
               if s.startswith("round ")]  # fmt: skip
    # a first Ctrl-C that finished the stop before the second came leaves stderr empty
    lines = err.text().strip().splitlines()
    assert lines == [] or (len(lines) == 1 and lines[0].startswith("distfl: interrupted")), lines
    assert round_of(tmp_path / "twice.h5") >= printed[-1]
    assert leftovers(tmp_path) == []
    assert distfl(helpers, tmp_path, "status", "twice.h5").returncode == 1  # whole, unfinished


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_the_summary_changes_nothing(helpers, tmp_path, sig):
    """The run is complete once its summary is out: a signal during the process's teardown
    (a launcher's belated SIGTERM, an impatient Ctrl-C) leaves the exit code 0."""
    proc = start(helpers, tmp_path, *TINY, "--out", "done.h5")
    try:
        out = helpers.LineReader(proc.stdout)
        assert out.wait_for(lambda line: line.lstrip().startswith("run file"), limit(60))
        proc.send_signal(sig)
        assert proc.wait(timeout=limit(30)) == 0, proc.stderr.read()
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    assert round_of(tmp_path / "done.h5") == 3


def test_a_closed_stdout_costs_no_result(helpers, tmp_path):
    """``distfl run ... | head -1``: the reader goes away after one line; the run goes on
    and writes its file."""
    cmd = (f"{sys.executable} -m distfl run --preset digits --set run.rounds=30 --set "
           "eval.every=1 --set 'run.progress=\"lines\"' --out piped.h5 | head -1")  # fmt: skip
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path,
                          env=helpers.clean_env(), capture_output=True, text=True,
                          timeout=limit(120))  # fmt: skip
    assert proc.stdout.startswith("round "), proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert round_of(tmp_path / "piped.h5") == 30


# -- resuming a finished run -------------------------------------------------------------


def test_resuming_a_finished_run_changes_nothing(helpers, tmp_path, finished):
    target = tmp_path / "done.h5"
    shutil.copy(finished, target)
    before = target.read_bytes()
    proc = distfl(helpers, tmp_path, "run", "--resume", "done.h5")
    assert proc.returncode == 0, proc.stderr
    assert "finished (round 3 of 3); nothing to resume" in proc.stdout
    assert target.read_bytes() == before
    shorter = distfl(helpers, tmp_path, "run", "--resume", "done.h5", "--set", "run.rounds=2")
    assert_one_line_error(shorter, "run.rounds = 2", "at round 3 already")
    assert target.read_bytes() == before


def test_resume_keeps_what_the_first_writer_recorded(helpers, tmp_path, finished):
    target = tmp_path / "more.h5"
    shutil.copy(finished, target)
    with h5py.File(target, "r") as f:
        created = f.attrs["created"]
        per_param = f["timing"].attrs["sum_bytes_per_param"]
    proc = distfl(helpers, tmp_path, "run", "--resume", "more.h5", "--set", "run.rounds=4")
    assert proc.returncode == 0, proc.stderr
    with h5py.File(target, "r") as f:
        assert f.attrs["created"] == created
        assert f.attrs["written"] >= created
        assert f["timing"].attrs["sum_bytes_per_param"] == per_param > 0


# -- damaged run files -------------------------------------------------------------------


def _flip_metric(f):
    f["metrics/accuracy"][-1] = 0.123


def _drop_column(f):
    del f["metrics/clusters/mse"]


def _edit_lr(f):
    config = json.loads(f.attrs["config"])
    config["train"]["lr"] = 0.5
    f.attrs["config"] = json.dumps(config)


def _regroup(f):
    group = f["clients/group"][()]
    group[0] += 1
    f["clients/group"][...] = group


def _drop_root(f):
    del f["hierarchy/0"]


def _drop_group(f):
    del f["clients/group"]


def _add_node(f):
    f.create_group("hierarchy/0.7").create_dataset("members", data=np.arange(3))


DAMAGE = {
    "metric-value": (_flip_metric, "/metrics/accuracy differs"),
    "metric-column": (_drop_column, "/metrics/clusters/mse is missing"),
    "stored-lr": (_edit_lr, "/@config differs"),
    "ground-truth": (_regroup, "/clients/group differs"),
    "tree-node": (_drop_root, "/hierarchy/0 is missing"),
    "group-column": (_drop_group, "/clients/group is missing"),
    "added-node": (_add_node, "/hierarchy/0.7"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_part_is_refused_by_every_reader(helpers, tmp_path, finished, case):
    damage, needle = DAMAGE[case]
    target = tmp_path / "damaged.h5"
    shutil.copy(finished, target)
    with h5py.File(target, "r+") as f:
        damage(f)
    before = target.read_bytes()
    for args in (("status", "damaged.h5"), ("inspect", "damaged.h5"),
                 ("report", "damaged.h5", "--out", "rep"), ("gather", "damaged.h5"),
                 ("run", "--resume", "damaged.h5", "--set", "run.rounds=4")):  # fmt: skip
        proc = distfl(helpers, tmp_path, *args)
        assert_one_line_error(proc, "damaged.h5 is damaged", needle)
    assert target.read_bytes() == before


def test_a_flipped_byte_on_disk_is_refused(helpers, tmp_path, finished):
    """A byte changed in the file itself, under the values of a dataset: found by the
    integrity record (or, in HDF5's own structures, by HDF5), never read as truth."""
    target = tmp_path / "flipped.h5"
    shutil.copy(finished, target)
    with h5py.File(target, "r") as f:
        offset = f["final/models"].id.get_offset()
    data = bytearray(target.read_bytes())
    data[offset + 17] ^= 0x40
    target.write_bytes(bytes(data))
    proc = distfl(helpers, tmp_path, "inspect", "flipped.h5")
    assert_one_line_error(proc, "flipped.h5 is damaged", "/final/models differs")


# -- the kill loop -----------------------------------------------------------------------

#: kills of the loop, over two chains that run side by side (DISTFL_KILL_LOOP overrides
#: it, e.g. DISTFL_KILL_LOOP=200 for a longer soak; the seed differs from run to run, so
#: that the suite's runs together try many more moments than one run does): each kill is
#: a launch of its own (a process that imports torch), the most of this module's time
KILLS = int(os.environ.get("DISTFL_KILL_LOOP", "6"))
#: a launch gets through at most 3 rounds and a quarter second before its kill (here a
#: round takes 0.18 s): 10 rounds per kill of the longer chain leave it rounds to spare
KILL_ROUNDS = 10 * (KILLS - KILLS // 2)


def _kill_chain(helpers, tmp_path, common, out: Path, kills_wanted: int, rng) -> int:
    """Launch, kill at a random moment of the rounds loop, resume, ... ``kills_wanted``
    times, checking the file after every kill; then finish the run. Returns the kills."""
    kills = 0
    while kills < kills_wanted:
        args = ["--resume", str(out)] if out.exists() else ["--out", str(out)]
        proc = start(helpers, tmp_path, *common, *args)
        try:
            lines = helpers.LineReader(proc.stdout)
            # after the first, second or third round's progress line: a kill after the
            # second or third lands past a checkpoint even where the first write is slow
            for _ in range(rng.randint(1, 3)):
                began = lines.wait_for(lambda line: line.startswith("round "), limit(120))
                if began is None:
                    break
            if began is None:  # the chain reached the last round before a progress line
                assert proc.wait(timeout=limit(60)) == 0, proc.stderr.read()
                break
            time.sleep(rng.uniform(0.0, 0.25))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=limit(30))
        finally:
            helpers.kill_tree([proc], marker=str(out))
        if proc.returncode == 0:  # it finished before the kill
            break
        kills += 1
        if out.exists():  # whole: its integrity record and /state check out
            try:
                read_run_file(out)
            except CheckpointError as exc:
                raise AssertionError(f"{out.name}, kill {kills}: {exc}") from None
    if not out.exists():  # every launch died before its first checkpoint
        finish = process(helpers, tmp_path, "run", *common, "--out", str(out), timeout=limit(300))
        assert finish.returncode == 0, finish.stderr
    elif round_of(out) < KILL_ROUNDS:
        finish = process(helpers, tmp_path, "run", "--resume", str(out), timeout=limit(300))
        assert finish.returncode == 0, finish.stderr
    return kills


def test_random_kills_during_checkpoints_always_leave_a_resumable_file(helpers, tmp_path):
    """Every round is checkpointed; each launch is SIGKILLed at a random moment of its rounds
    loop (often inside a write) and the next resumes. After every kill the file is either
    absent (killed before the first checkpoint) or whole: its integrity record holds and it
    resumes. The run that ends each chain has the bits of the uninterrupted run."""
    from concurrent.futures import ThreadPoolExecutor

    config = tmp_path / "fedgwc.toml"
    config.write_text(fedgwc_toml(KILL_ROUNDS, progress="lines"))
    common = ["--config", str(config), "--set", "checkpoint.every=1", "--set", "eval.every=1"]
    seed = int(os.environ.get("DISTFL_KILL_SEED", str(random.SystemRandom().randrange(1 << 30))))
    chains = {"a.h5": KILLS - KILLS // 2, "b.h5": KILLS // 2}
    with ThreadPoolExecutor(len(chains) + 1) as pool:
        reference = pool.submit(process, helpers, tmp_path, "run", *common, "--out",
                                "reference.h5", timeout=limit(600))  # fmt: skip
        done = {
            name: pool.submit(
                _kill_chain,
                helpers,
                tmp_path,
                common,
                tmp_path / name,
                n,
                random.Random(f"{seed}-{name}"),
            )  # fmt: skip
            for name, n in chains.items()
        }
        assert reference.result().returncode == 0, reference.result().stderr
        try:
            kills = {name: future.result() for name, future in done.items()}
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} (DISTFL_KILL_SEED): {exc}") from None
    # the chains are long enough for every kill to land before their last round
    assert kills == chains, f"seed {seed} (DISTFL_KILL_SEED): kills {kills}"
    for name in chains:
        assert_same_run(tmp_path / "reference.h5", tmp_path / name)
    assert [p for p in leftovers(tmp_path) if p.endswith(".tmp")] == []
