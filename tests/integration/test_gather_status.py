"""``distfl status`` and ``distfl gather`` on real run files: status exits 0 on a finished
run, 1 on a run stopped by SIGTERM, 2 (one line) on a missing, garbage or truncated file;
gather tabulates a sweep, and its CSV matches values recomputed here from the HDF5 file
with scikit-learn; a truncated file among them is skipped, named on stderr (exit 1).
``inspect``, ``status`` and ``gather`` printing to a reader that stopped reading
(``| head -3``) end quietly."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import fedgwc_toml
from sklearn.metrics import (
    adjusted_rand_score,
    davies_bouldin_score,
    rand_score,
    silhouette_score,
)
from timing import limit

from distfl.tools.gather import COLUMNS, gather_rows

pytestmark = pytest.mark.integration

SEEDS = (1, 2, 3)
SMALL = ["--preset", "digits", "--set", "run.rounds=3", "--set", "data.num_clients=6",
         "--set", "server.clients_per_round=3", "--set", 'run.progress="none"']  # fmt: skip
# FedGWC on two groups (one label-permuted) that splits the root at round 19 (seed 3)
FEDGWC = fedgwc_toml(25, progress="none")


def distfl(helpers, cwd, *args):
    """``distfl ARGS`` from ``cwd``, in this process (the command's code; what is tested is
    what it prints and exits with, not its process: the closed pipe's test starts one)."""
    return helpers.cli(cwd, *args)


def one_line_error(proc, *needles):
    err = assert_one_line_error(proc, *needles)
    assert proc.stdout == ""
    return err


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    """Three FedAvg runs (one per seed) in sweep/, and a FedGWC run that splits."""
    tmp = tmp_path_factory.mktemp("gather")
    sweep = tmp / "sweep"
    sweep.mkdir()
    (tmp / "fedgwc.toml").write_text(FEDGWC)
    fedavg = [sweep / f"seed{s}.h5" for s in SEEDS]
    fedgwc = tmp / "fedgwc.h5"
    cmds = [
        [*SMALL, "--set", f"run.seed={s}", "--out", str(p)]
        for s, p in zip(SEEDS, fedavg, strict=True)
    ]
    cmds.append(["--config", str(tmp / "fedgwc.toml"), "--out", str(fedgwc)])
    for c in cmds:  # in this process: helpers.run_alone, the code of distfl run
        helpers.run_alone(tmp, *c)
    return tmp, sweep, fedavg, fedgwc


def expected(path: Path) -> dict[str, object]:
    """The gather columns recomputed from the file with h5py, json and scikit-learn."""
    with h5py.File(path, "r") as f:
        config = json.loads(f.attrs["config"])
        acc = f["metrics/accuracy"][()]
        groups = f["clients/group"][()]
        counts = f["clients/class_counts"][()].astype(float)
        assignment = f["final/assignment"][()]
        splits = [int(g.attrs["split_round"]) for g in f["hierarchy"].values()]
        elapsed = f["timing/elapsed_s"][()]
        done = int(json.loads(f["state"].attrs["round"]))
    freqs = -np.sort(-(counts / counts.sum(axis=1, keepdims=True)), axis=1)
    scored = 2 <= len(np.unique(assignment)) <= len(assignment) - 1
    name = config["algorithm"]["name"]
    return {  # one global model (none) named by its aggregator, as suite and report do
        "algorithm": config["server"]["aggregator"] if name == "none" else name,
        "seed": config["run"]["seed"],
        "beta": config["algorithm"].get("beta"),  # FedGWC's key: absent for FedAvg
        "rounds_done": done,
        "rounds": config["run"]["rounds"],
        "clusters": int(len(np.unique(assignment))),
        "accuracy": float(acc[np.isfinite(acc)][-1]),
        "rand": rand_score(groups, assignment),
        "ari": adjusted_rand_score(groups, assignment),
        "was": silhouette_score(freqs, assignment) if scored else None,
        "wadb": davies_bouldin_score(freqs, assignment) if scored else None,
        "first_split": min((r for r in splits if r >= 0), default=None),
        "wall_s": float(elapsed[-1]),
    }


def check_csv_row(row: dict[str, str], path: Path) -> None:
    want = expected(path)
    assert row["file"] == str(path)
    assert row["algorithm"] == want["algorithm"]
    for col in ("seed", "rounds_done", "rounds", "clusters"):
        assert int(row[col]) == want[col], col
    if want["beta"] is None:
        assert row["beta"] == ""
    else:
        assert float(row["beta"]) == want["beta"]
    assert float(row["accuracy"]) == want["accuracy"]  # full precision: exact
    assert float(row["wall_s"]) == want["wall_s"]
    for col in ("rand", "ari", "was", "wadb"):
        if want[col] is None:
            assert row[col] == "", col
        else:
            assert float(row[col]) == pytest.approx(want[col], abs=1e-9), col
    if want["first_split"] is None:
        assert row["first_split"] == ""
    else:
        assert int(row["first_split"]) == want["first_split"]


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_status_finished(helpers, runs):
    tmp, _, fedavg, _ = runs
    proc = distfl(helpers, tmp, "status", str(fedavg[0]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{fedavg[0]}: finished (round 3 of 3)\n"
    assert proc.stderr == ""


def test_status_of_a_run_stopped_by_sigterm(helpers, tmp_path):
    out = tmp_path / "stopped.h5"
    args = [*SMALL, "--set", "run.rounds=100000", "--set", 'run.progress="lines"']
    (proc,) = helpers.start_ranks([*args, "--out", str(out)], tmp_path)
    helpers.signal_after_first_round(proc, signal.SIGTERM, str(tmp_path), exit_within=limit(30))
    with h5py.File(out, "r") as f:
        done = int(f["state"].attrs["round"])
    assert 1 <= done < 100000
    status = distfl(helpers, tmp_path, "status", str(out))
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout == f"{out}: stopped at round {done} of 100000 (resume with --resume)\n"
    # and gather reports it as it is
    [row] = gather_rows([out])
    assert (row["rounds_done"], row["rounds"]) == (done, 100000)


@pytest.mark.parametrize("kind", ["missing", "garbage", "truncated"])
def test_status_of_a_bad_file_exits_2(helpers, runs, tmp_path, kind):
    _, _, fedavg, _ = runs
    bad = tmp_path / f"{kind}.h5"
    if kind == "garbage":
        bad.write_bytes(b"not an HDF5 file\n" * 100)
    elif kind == "truncated":
        data = fedavg[0].read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    one_line_error(distfl(helpers, tmp_path, "status", str(bad)), str(bad))


def test_gather_table_and_csv(helpers, runs, tmp_path):
    _, sweep, fedavg, _ = runs
    out = tmp_path / "sweep.csv"
    proc = distfl(helpers, tmp_path, "gather", str(sweep), "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 + len(SEEDS), proc.stdout
    assert lines[0].split() == list(COLUMNS)
    header, rows = read_csv(out)
    assert header == list(COLUMNS)
    assert [r["file"] for r in rows] == [str(p) for p in fedavg]  # sorted by name
    assert [int(r["seed"]) for r in rows] == list(SEEDS)
    for line, row, path in zip(lines[1:], rows, fedavg, strict=True):
        check_csv_row(row, path)
        cells = line.split()
        assert cells[0] == str(path)
        assert cells[COLUMNS.index("accuracy")] == f"{float(row['accuracy']):.4f}"
        # one cluster against one group: Rand and ARI 1, WAS/WADB and the split undefined
        assert (float(row["rand"]), float(row["ari"])) == (1.0, 1.0)
        for col in ("was", "wadb", "first_split"):
            assert cells[COLUMNS.index(col)] == "-", col
    assert not list(tmp_path.glob("*.tmp"))


def first_split(path: Path) -> int:
    """The round of the earliest split, read from /hierarchy."""
    with h5py.File(path, "r") as f:
        return min(int(g.attrs["split_round"]) for g in f["hierarchy"].values() if
                   int(g.attrs["split_round"]) >= 0)  # fmt: skip


def test_gather_fedgwc_run_that_splits(helpers, runs, tmp_path):
    _, _, fedavg, fedgwc = runs
    out = tmp_path / "gwc.csv"
    proc = distfl(helpers, tmp_path, "gather", str(fedgwc), str(fedavg[1]), "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    _, rows = read_csv(out)
    assert [r["file"] for r in rows] == [str(fedgwc), str(fedavg[1])]  # as given
    check_csv_row(rows[0], fedgwc)
    check_csv_row(rows[1], fedavg[1])
    assert rows[0]["algorithm"] == "fedgwc" and int(rows[0]["clusters"]) > 1
    assert int(rows[0]["first_split"]) == first_split(fedgwc) > 1
    assert rows[0]["was"] != "" and rows[0]["wadb"] != ""


def test_gather_rows_is_a_pure_function(runs):
    _, _, fedavg, fedgwc = runs
    rows = gather_rows([fedgwc, *fedavg], keys=["algorithm.epsilon"])
    assert [list(r) for r in rows] == [[*COLUMNS, "algorithm.epsilon"]] * 4
    assert rows[0]["algorithm.epsilon"] == 0.001 and rows[1]["algorithm.epsilon"] is None
    assert rows[0]["first_split"] == first_split(fedgwc) and rows[1]["first_split"] is None
    assert rows[1]["was"] is None and isinstance(rows[0]["was"], float)
    assert all(type(r["seed"]) is int and type(r["accuracy"]) is float for r in rows)


def test_gather_directory_takes_only_h5_files_directly_inside(helpers, runs, tmp_path):
    _, _, fedavg, fedgwc = runs
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    shutil.copy(fedavg[1], d / "b.h5")
    shutil.copy(fedgwc, d / "a.h5")
    shutil.copy(fedavg[0], d / "sub" / "c.h5")  # not directly inside
    (d / "c.h5.tmp").write_bytes(b"a run file being written")
    (d / "notes.txt").write_text("not a run file")
    out = tmp_path / "d.csv"
    proc = distfl(helpers, tmp_path, "gather", str(d), "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    _, rows = read_csv(out)
    assert [r["file"] for r in rows] == [str(d / "a.h5"), str(d / "b.h5")]
    assert [int(r["seed"]) for r in rows] == [3, SEEDS[1]]


def test_gather_key_adds_a_column(helpers, runs, tmp_path):
    _, sweep, _, fedgwc = runs
    out = tmp_path / "keys.csv"
    proc = distfl(helpers, tmp_path, "gather", str(sweep), str(fedgwc), "--key", "train.lr",
                  "--key", "algorithm.epsilon", "--csv", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [*COLUMNS, "train.lr", "algorithm.epsilon"]
    assert [line.split()[-2:] for line in lines[1:]] == [["0.1", "-"]] * 3 + [["0.1", "0.001"]]
    header, rows = read_csv(out)
    assert header == [*COLUMNS, "train.lr", "algorithm.epsilon"]
    assert [(r["train.lr"], r["algorithm.epsilon"]) for r in rows] == [("0.1", "")] * 3 + [
        ("0.1", "0.001")
    ]


def test_gather_unknown_key_exits_2(helpers, runs, tmp_path):
    _, sweep, _, _ = runs
    out = tmp_path / "x.csv"
    proc = distfl(helpers, tmp_path, "gather", str(sweep), "--key", "train.nope", "--csv", str(out))
    one_line_error(proc, "train.nope")
    assert not out.exists()


def test_gather_skips_a_bad_file_and_exits_1(helpers, runs, tmp_path):
    """A truncated file among the sweep's: the table and the CSV hold the three runs, the
    bad file is named on stderr, and the exit code is 1."""
    _, sweep, fedavg, _ = runs
    bad = tmp_path / "bad.h5"
    data = fedavg[0].read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    out = tmp_path / "x.csv"
    proc = distfl(helpers, tmp_path, "gather", str(sweep), str(bad), "--csv", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()[1:]] == [str(p) for p in fedavg]
    err = proc.stderr.splitlines()
    assert len(err) == 2 and err[0].startswith(f"distfl gather: skipped {bad}: "), proc.stderr
    assert (
        err[1] == f"distfl gather: 1 of {len(SEEDS) + 1} run files skipped, {len(SEEDS)} gathered"
    )
    _, rows = read_csv(out)
    for row, path in zip(rows, fedavg, strict=True):
        check_csv_row(row, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.h5", "x.csv"]  # no temp file


def test_gather_nothing_found_exits_2(helpers, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(distfl(helpers, tmp_path, "gather", str(empty)), str(empty))


@pytest.mark.parametrize("command", ["inspect", "status", "gather"])
@pytest.mark.parametrize("reader", ["closed", "one-line"])
def test_printing_to_a_closed_pipe_is_quiet(helpers, runs, tmp_path, command, reader):
    """As ``distfl inspect RUN.h5 | head -3``: the reader closes its end early (before the
    command writes anything, or after the first line), and the command ends without a
    traceback: exit 141 (as a process ended by SIGPIPE) when a write failed, else as usual."""
    _, _, _, fedgwc = runs
    r, w = os.pipe()
    if reader == "closed":
        os.close(r)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "distfl", command, str(fedgwc)], cwd=tmp_path,
            env=helpers.clean_env(), stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(w)
    if reader == "one-line":
        first = {"inspect": "run file ", "status": str(fedgwc), "gather": "file "}[command]
        with os.fdopen(r, "rb") as pipe:
            assert pipe.readline().decode().startswith(first)
    _, err = proc.communicate(timeout=limit(60))
    err = err.decode()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err == ""
    if reader == "closed":
        assert proc.returncode == 141
    else:
        assert proc.returncode in (0, 141)
