"""``distfl suite`` end to end, with real ``distfl run`` processes (the suite command itself
runs in the test's process, but where its process is the point): the table, suite.csv and
suite.json agree with each other and with ``distfl gather``; every suite run equals a plain
``distfl run`` (its code, in the test's process) bit for bit; running the suite again keeps
finished runs (``--force`` reruns them) and resumes the runs of a suite stopped by SIGTERM;
a run file of another config, and bad input (an ``algorithm.KEY`` that none of the listed
algorithms takes among it), exit 2 with one line before anything runs; a run that fails
leaves its row empty and the exit code 1 while the other runs complete.

Every suite here runs with a relative ``--out out`` from its own directory, so that the run
files of two directories hold the same ``run.out`` and can be compared config and all.
"""

from __future__ import annotations

import csv
import json
import os
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
from runfile import assert_same_run
from timing import limit

from distfl.tools.suite import COLUMNS

pytestmark = pytest.mark.integration

ROUNDS = 3
COMMON = ["--set", f"run.rounds={ROUNDS}", "--set", "eval.every=1"]
# Three groups of three digits clients: near-IID, one class each, and permuted labels.
TINY_TOML = """\
[data]
num_clients = 9
samples_per_client = 30
groups = [
  {count = 3, alpha = 1000.0},
  {count = 3, alpha = 0.0},
  {count = 3, alpha = 1000.0, permute_labels = true},
]
[train]
local_steps = 2
[server]
clients_per_round = 3
"""
# A valid config that fails when it runs: digits has no class 12 (exit 2 at partition time).
CLASS_12_TOML = """\
[data]
num_clients = 4
samples_per_client = 30
groups = [{count = 2, alpha = 1000.0}, {count = 2, alpha = 1000.0, classes = [3, 12]}]
[server]
clients_per_round = 2
"""
SCENARIOS = {"digits-mixed": 2, "tiny": 3}  # name in the table -> number of groups
ALGORITHMS = {"fedgwc": "fedgwc", "none": "fedavg"}  # --algorithms value -> table name
SEEDS = (0, 1)
JOBS = [(s, a, seed) for s in SCENARIOS for a in ALGORITHMS for seed in SEEDS]  # job order
METRICS = COLUMNS[4:]  # the columns read from the run file


def run_name(scenario: str, algorithm: str, seed: int) -> str:
    """A job's run file: named by the algorithm as the table names it (``none``: fedavg)."""
    return f"{scenario}--{ALGORITHMS.get(algorithm, algorithm)}--s{seed}.h5"


def label(scenario: str, algorithm: str, seed: int) -> str:
    return f"{scenario} {ALGORITHMS[algorithm]} seed {seed}"


#: the default limit of one distfl command (catches a hang)
TIMEOUT = limit(600)


def distfl(helpers, cwd, *args, timeout=TIMEOUT):
    """``distfl ARGS`` from ``cwd``, the command's code in this process: a suite's runs are
    processes of their own all the same (``distfl run``, as the suite starts them)."""
    return helpers.cli(cwd, *args, timeout=timeout)


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def stored_config(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])


def state_round(path: Path) -> int:
    with h5py.File(path, "r") as f:
        return int(json.loads(f["state"].attrs["round"]))


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and modification time, by name."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def progress_lines(stdout: str, total: int) -> dict[str, str]:
    """``[i/total] LABEL: STATUS`` lines as {label: status}; the counters run 1..total."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in lines] == [f"[{i}/{total}" for i in range(1, total + 1)]
    return dict(ln.split("] ", 1)[1].split(": ", 1) for ln in lines)


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of the printed table's rows (under its header line)."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split() == list(COLUMNS))
    rows = []
    for ln in lines[start + 1 :]:
        if not ln.strip():
            break
        rows.append(ln.split())
    return rows


def copy_suite(src: Path, dst: Path) -> Path:
    """A copy of a suite's directory (run files with their modification times)."""
    shutil.copytree(src, dst)
    return dst / "out"


@pytest.fixture(scope="module")
def base(tmp_path_factory, helpers):
    """The suite of two scenarios (a preset and a config file) x two algorithms x two seeds,
    two runs at a time."""
    root = tmp_path_factory.mktemp("suite")
    toml = root / "tiny.toml"
    toml.write_text(TINY_TOML)
    work = root / "first"
    work.mkdir()
    seeds = ",".join(map(str, SEEDS))
    args = ["suite", "digits-mixed", str(toml), "--algorithms", ",".join(ALGORITHMS),
            "--seeds", seeds, "--workers", "2", "--out", "out", *COMMON]  # fmt: skip
    proc = distfl(helpers, work, *args)
    return types.SimpleNamespace(root=root, toml=toml, work=work, out=work / "out", args=args,
                                 proc=proc)  # fmt: skip


def test_the_suite_sums_up_each_pair_over_its_seeds(base):
    """Two seeds of each scenario and algorithm: after the table of runs, one line per pair
    with the mean ± sd over its seeds and the worst seed, of the rows in suite.json."""
    from distfl.tools.seed_summary import summarize, text

    rows = json.loads((base.out / "suite.json").read_text())["rows"]
    head = "over the seeds (mean ± sd, the worst seed):\n"
    assert head in base.proc.stdout, base.proc.stdout
    printed = base.proc.stdout.split(head, 1)[1]
    lines = summarize(rows)
    assert printed.startswith(text(lines)), printed
    assert len(lines) == len(SCENARIOS) * len(ALGORITHMS)
    for line in lines:
        pair = (line["scenario"], line["algorithm"])
        aris = [r["ari"] for r in rows if (r["scenario"], r["algorithm"]) == pair]
        assert len(aris) == len(SEEDS) and line["seeds"] == str(len(SEEDS))
        assert line["ari"].startswith(f"{sum(aris) / len(aris):.3f} ± ")


def test_suite_runs_every_job_and_tabulates_it(helpers, base):
    proc = base.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    n = len(JOBS)
    assert proc.stdout.startswith(
        f"distfl suite: {n} runs (2 scenarios x 2 algorithms x 2 seeds), 2 at a time, "
        "run files in out\n"
    ), proc.stdout
    statuses = progress_lines(proc.stdout, n)
    assert sorted(statuses) == sorted(label(*job) for job in JOBS)
    assert all(s.startswith("done in ") and s.endswith(" s") for s in statuses.values()), statuses
    assert f"{n} of {n} runs finished" in proc.stdout
    files = [base.out / run_name(*job) for job in JOBS]
    for path in files:
        assert path.is_file() and path.with_suffix(".log").is_file(), path
        assert state_round(path) == ROUNDS
    assert not list(base.out.glob("*.tmp"))

    # suite.csv: a header and one line per run, in job order
    assert len((base.out / "suite.csv").read_text().splitlines()) == 1 + n
    header, rows = read_csv(base.out / "suite.csv")
    assert header == list(COLUMNS)
    want = [(s, ALGORITHMS[a], str(seed)) for s, a, seed in JOBS]
    assert [(r["scenario"], r["algorithm"], r["seed"]) for r in rows] == want
    for row, (scenario, _, _), path in zip(rows, JOBS, files, strict=True):
        assert int(row["groups"]) == SCENARIOS[scenario]
        assert int(row["groups"]) == len(stored_config(path)["data"]["groups"])
        with h5py.File(path, "r") as f:
            assert int(row["groups"]) == len(np.unique(f["clients/group"][()]))

    # suite.json: the same rows, as numbers and nulls
    doc = json.loads((base.out / "suite.json").read_text())
    assert doc["columns"] == list(COLUMNS)
    assert len(doc["rows"]) == n
    for jrow, row in zip(doc["rows"], rows, strict=True):
        assert list(jrow) == list(COLUMNS)
        for column, value in jrow.items():
            text = "" if value is None else repr(value) if isinstance(value, float) else str(value)
            assert text == row[column], (column, value, row[column])
        assert type(jrow["seed"]) is int and type(jrow["groups"]) is int
        assert type(jrow["accuracy"]) is float and type(jrow["rand"]) is float

    # the printed table: the same rows, '-' where a value is undefined
    cells = table_rows(proc.stdout)
    assert len(cells) == n
    for line, row in zip(cells, rows, strict=True):
        assert line[:4] == [row[c] for c in COLUMNS[:4]]
        for column, cell in zip(COLUMNS[4:], line[4:], strict=True):
            if row[column] == "":
                assert cell == "-", column
            elif column in ("clusters", "first_split"):
                assert cell == row[column], column
            else:
                assert cell == f"{float(row[column]):.4f}", column

    # every number is what `distfl gather` reports for the same file
    gathered = base.root / "gather.csv"
    g = distfl(helpers, base.work, "gather", *map(str, files), "--csv", str(gathered))
    assert g.returncode == 0, g.stdout + g.stderr
    _, grows = read_csv(gathered)
    assert [r["file"] for r in grows] == [str(p) for p in files]
    for row, grow, (_, algorithm, seed) in zip(rows, grows, JOBS, strict=True):
        assert (grow["algorithm"], int(grow["seed"])) == (ALGORITHMS[algorithm], seed)
        assert (grow["rounds_done"], grow["rounds"]) == (str(ROUNDS), str(ROUNDS))
        for column in METRICS:
            assert row[column] == grow[column], column
        assert float(row["accuracy"]) > 0.0 and 0.0 <= float(row["rand"]) <= 1.0


@pytest.fixture(scope="module")
def plain(base, helpers):
    """Plain runs of some of the suite's jobs (both scenarios, both algorithms), with the
    run's own default progress and another run file: the code of ``distfl run``, in this
    process (``helpers.run_alone``, which writes the file ``distfl run`` writes, bit for
    bit; the suite's runs are the processes here)."""
    directory = base.root / "plain"
    directory.mkdir()
    picked = [("digits-mixed", "fedgwc", 1), ("tiny", "none", 0)]
    for scenario, algorithm, seed in picked:
        source = ["--config", str(base.toml)] if scenario == "tiny" else ["--preset", scenario]
        helpers.run_alone(
            directory, *source, *COMMON, "--set", f'algorithm.name="{algorithm}"',
            "--set", f"run.seed={seed}", "--out", run_name(scenario, algorithm, seed),
        )  # fmt: skip
    return directory, picked


def test_suite_run_equals_plain_run(base, plain):
    directory, picked = plain
    for job in picked:
        ours, theirs = base.out / run_name(*job), directory / run_name(*job)
        a, b = stored_config(ours), stored_config(theirs)
        assert a["run"].pop("out") == f"out/{run_name(*job)}"
        assert a["run"].pop("progress") == "none"
        b["run"].pop("out"), b["run"].pop("progress")
        assert a == b, job  # the suite adds nothing but run.out and run.progress
        with h5py.File(ours, "r") as f, h5py.File(theirs, "r") as g:
            for key in ("seed", "world_size", "distfl_version"):
                assert f.attrs[key] == g.attrs[key], key
        # metrics, hierarchy, final models and assignment, clients and state: bit for bit
        assert_same_run(ours, theirs)


def test_rerun_keeps_finished_runs(helpers, base):
    before = snapshot(base.out)
    proc = distfl(helpers, base.work, *base.args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = progress_lines(proc.stdout, len(JOBS))
    assert statuses == {label(*job): "kept (finished before)" for job in JOBS}
    assert "done" not in proc.stdout and "resumed" not in proc.stdout
    after = snapshot(base.out)
    assert sorted(after) == sorted(before)
    for name, (data, mtime) in before.items():
        if name.startswith("suite."):
            assert after[name][0] == data, name  # the table written again, the same
        else:
            assert after[name] == (data, mtime), name  # run files and logs untouched


def test_rerun_by_another_path_keeps_finished_runs(helpers, base):
    """The same directory named by its absolute path (from elsewhere) holds the same runs."""
    before = snapshot(base.out)
    args = [a if a != "out" else str(base.out) for a in base.args]
    proc = distfl(helpers, base.root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = progress_lines(proc.stdout, len(JOBS))
    assert statuses == {label(*job): "kept (finished before)" for job in JOBS}
    after = snapshot(base.out)
    for name in before:
        if not name.startswith("suite."):
            assert after[name] == before[name], name
    assert (base.out / "suite.csv").read_bytes() == before["suite.csv"][0]


def test_force_reruns_finished_runs(helpers, base, tmp_path):
    """A suite of one finished job (tiny, FedGWC, seed 0) with --force: that run is written
    again, to the same result; every other run of the directory is left alone."""
    out = copy_suite(base.work, tmp_path / "forced")
    before = snapshot(out)
    proc = distfl(helpers, tmp_path / "forced", "suite", str(base.toml), "--algorithms",
                  "fedgwc", "--seeds", "0", "--out", "out", "--force", *COMMON)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rerun = [("tiny", "fedgwc", 0)]
    statuses = progress_lines(proc.stdout, 1)
    assert sorted(statuses) == sorted(label(*job) for job in rerun)
    assert all(s.startswith("done in ") for s in statuses.values()), statuses
    after = snapshot(out)
    rerun_files = [run_name(*job) for job in rerun]
    for name, (data, mtime) in before.items():
        if name in rerun_files:
            assert after[name][1] > mtime and after[name][0] != data, name  # written again
            assert_same_run(out / name, base.out / name)  # to the same result
        elif name.endswith(".h5") or name.endswith(".log"):
            if Path(name).with_suffix(".h5").name not in rerun_files:
                assert after[name] == (data, mtime), name  # the other runs are left alone


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (distfl installs it before training)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        pass
    return False


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_suite_stopped_by_sigterm_resumes_its_runs(helpers, base, tmp_path):
    """As when a batch system preempts the job: every run checkpoints on SIGTERM and the
    suite dies; the same suite again resumes both runs, which end where uninterrupted runs
    end, bit for bit."""
    work = tmp_path / "preempted"
    work.mkdir()
    args = ["suite", str(base.toml), "--algorithms", "fedgwc,none", "--seeds", "1",
            "--workers", "2", "--out", "out", *COMMON]  # fmt: skip
    jobs = [("tiny", "fedgwc", 1), ("tiny", "none", 1)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "distfl", *args], cwd=work, env=helpers.clean_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    signalled: set[int] = set()  # the suite's runs
    try:
        stdout = helpers.LineReader(proc.stdout)
        stderr = helpers.LineReader(proc.stderr)
        deadline = time.monotonic() + limit(60)
        while len(signalled) < len(jobs) and time.monotonic() < deadline:
            for pid in helpers.descendants(proc.pid):
                if pid not in signalled and _catches_sigterm(pid):
                    os.kill(pid, signal.SIGTERM)  # each run as soon as it can checkpoint
                    signalled.add(pid)
            time.sleep(0.01)
        assert len(signalled) == len(jobs), stdout.text(0) + stderr.text(0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=limit(30)) == -signal.SIGTERM
        deadline = time.monotonic() + limit(60)
        while not all(_gone(pid) for pid in signalled) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(pid) for pid in signalled)
    finally:
        helpers.kill_tree([proc])
        for pid in signalled:  # no longer the suite's children once it died
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    out = work / "out"
    for job in jobs:
        path = out / run_name(*job)
        # round 0 when the signal came during round 1's training (left at once)
        assert 0 <= state_round(path) < ROUNDS, path
        assert "stopped by SIGTERM" in path.with_suffix(".log").read_text()
    assert not (out / "suite.csv").exists()

    again = distfl(helpers, work, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    statuses = progress_lines(again.stdout, len(jobs))
    assert sorted(statuses) == sorted(label(*job) for job in jobs)
    assert all(s.startswith("resumed in ") for s in statuses.values()), statuses
    for job in jobs:
        path = out / run_name(*job)
        assert state_round(path) == ROUNDS
        assert stored_config(path) == stored_config(base.out / run_name(*job))
        assert_same_run(path, base.out / run_name(*job))
    _, rows = read_csv(out / "suite.csv")
    assert [(r["algorithm"], r["seed"]) for r in rows] == [("fedgwc", "1"), ("fedavg", "1")]


def test_run_file_of_another_config_is_refused(helpers, base, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    name = run_name("tiny", "none", 0)
    shutil.copy2(base.out / name, out / name)
    before = snapshot(out)
    proc = distfl(helpers, tmp_path, "suite", str(base.toml), "--algorithms", "fedgwc,none",
                  "--seeds", "0", "--workers", "2", "--out", "out", "--set", "train.lr=0.2",
                  *COMMON)  # fmt: skip
    assert_one_line_error(proc, f"out/{name}", "--force")
    assert proc.stdout == ""
    assert snapshot(out) == before  # nothing ran: no other run file, no log, no table


def test_unreadable_run_file_is_refused(helpers, base, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    name = run_name("tiny", "none", 0)
    (out / name).write_bytes(b"not an HDF5 file\n" * 100)
    before = snapshot(out)
    proc = distfl(helpers, tmp_path, "suite", str(base.toml), "--algorithms", "fedgwc,none",
                  "--seeds", "0", "--out", "out", *COMMON)  # fmt: skip
    assert_one_line_error(proc, f"out/{name}", "--force")
    assert proc.stdout == ""
    assert snapshot(out) == before


@pytest.mark.parametrize(
    "args, needle",
    [
        (["digits-mixed", "--algorithms", "fedgwc,fedprox"], "fedprox"),
        (["no-such-scenario"], "no-such-scenario"),
        (["digits-mixed", "--set", "train.nope=1"], "train.nope"),
        (["digits-mixed", "--set", "run.rounds=0"], "run.rounds"),
        (["digits-mixed", "--seeds", "x"], "--seeds"),
        (["digits-mixed", "--seeds", "0,1,0"], "--seeds"),
        (["digits-mixed", "--algorithms", "none,fedgwc,none"], "--algorithms"),
        (["digits-mixed", "--workers", "0"], "--workers"),
        (["digits-mixed", "{tmp}/missing.toml"], "missing.toml"),
        (["digits-mixed", "{tmp}/broken.toml"], "broken.toml"),
        (["digits-mixed", "digits-mixed"], "listed twice"),
        (["digits-mixed", "--grid", "train.lr=0.1,0.1"], "given twice"),
        (["digits-mixed", "--grid", "train.nope=1,2"], "train.nope"),
        (["digits-mixed", "--algorithms", "none", "--grid", "algorithm.eps1=1,2"], "cfl"),
        (["digits-mixed", "--grid", "train.lr=0.1,0.2", "--set", "train.lr=0.3"], "train.lr"),
    ],
    ids=["algorithm", "scenario", "set-key", "set-value", "seeds", "seed-twice",
         "algorithm-twice", "workers", "missing-toml", "broken-toml", "scenario-twice",
         "grid-value-twice", "grid-key", "grid-no-taker", "grid-and-set"],
)  # fmt: skip
def test_bad_input_exits_2_before_anything_runs(helpers, tmp_path, args, needle):
    (tmp_path / "broken.toml").write_text("[data\nnum_clients = 4\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = distfl(helpers, tmp_path, "suite", *args, "--out", "out", timeout=limit(60))
    assert_one_line_error(proc, needle)
    assert proc.stdout == ""
    assert not (tmp_path / "out").exists()


def test_algorithm_key_of_no_listed_algorithm_exits_2(helpers, tmp_path):
    """``--set algorithm.KEY=V`` goes only to the listed algorithms that take KEY; when none
    does, the suite refuses it before anything runs, naming the key and who takes it."""
    proc = distfl(helpers, tmp_path, "suite", "digits-mixed", "--algorithms", "none", "--set",
                  "algorithm.eps1=0.3", "--out", "out", timeout=limit(60))  # fmt: skip
    assert_one_line_error(proc, "algorithm.eps1", "cfl")
    assert proc.stdout == ""
    assert not (tmp_path / "out").exists()


def test_failed_run_leaves_its_row_empty_and_exit_code_1(helpers, base, tmp_path):
    bad = tmp_path / "class12.toml"
    bad.write_text(CLASS_12_TOML)
    proc = distfl(helpers, tmp_path, "suite", str(bad), str(base.toml), "--algorithms", "none",
                  "--seeds", "0", "--workers", "2", "--out", "out", *COMMON)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = tmp_path / "out"
    log = out / "class12--fedavg--s0.log"
    assert "class 12" in log.read_text()
    assert not (out / "class12--fedavg--s0.h5").exists()
    statuses = progress_lines(proc.stdout, 2)
    failed = statuses[label("class12", "none", 0)]
    assert failed.startswith("FAILED (distfl: error: ") and "class 12" in failed, failed
    assert f"; log out/{log.name}) in " in failed, failed
    assert statuses[label("tiny", "none", 0)].startswith("done in ")
    assert "1 of 2 runs finished" in proc.stdout
    assert "failed: class12 fedavg seed 0: distfl: error: " in proc.stdout
    assert state_round(out / run_name("tiny", "none", 0)) == ROUNDS

    # the failed run's row: what the suite knows, and '-' (empty, null) for every metric
    cells = table_rows(proc.stdout)
    assert cells[0] == ["class12", "fedavg", "0", "2"] + ["-"] * len(METRICS)
    _, rows = read_csv(out / "suite.csv")
    assert [rows[0][c] for c in COLUMNS] == ["class12", "fedavg", "0", "2"] + [""] * len(METRICS)
    doc = json.loads((out / "suite.json").read_text())
    assert [doc["rows"][0][c] for c in METRICS] == [None] * len(METRICS)
    # the other run completed, with the numbers of the same run in the first suite
    _, first = read_csv(base.out / "suite.csv")
    [same] = [r for r in first if [r[c] for c in COLUMNS[:3]] == ["tiny", "fedavg", "0"]]
    for column in METRICS:
        if column != "wall_s":
            assert rows[1][column] == same[column], column


def test_a_folder_named_distfl_in_the_working_directory_does_not_shadow_it(helpers, tmp_path):
    """A clone in the home folder, say: the suite's runs are started so that the current
    directory's ``distfl`` folder is not imported in place of the package."""
    shadow = tmp_path / "distfl"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowing folder')\n")
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    script = Path(sys.executable).parent / "distfl"  # the console script: no cwd on sys.path
    proc = subprocess.run(
        [str(script), "suite", "tiny.toml", "--algorithms", "none", "--seeds", "0",
         "--out", "out", *COMMON],
        cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=limit(300),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shadowing" not in proc.stdout + proc.stderr
    assert state_round(tmp_path / "out" / run_name("tiny", "none", 0)) == ROUNDS
