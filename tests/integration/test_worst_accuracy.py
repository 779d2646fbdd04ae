"""The worst client's and the 10th-percentile balanced accuracy of a real run: what the run
file records at its last evaluation is what an independent computation from the clients'
accuracies it holds (/clients/accuracy, each client's at the last evaluation) gives, over
the federation and per cluster; and every reader shows those numbers: the run's summary,
``distfl suite`` (its table, suite.csv and suite.json), ``inspect``, ``gather --csv``,
``report`` (its summary table), ``distfl.open`` and the JSON-lines and TensorBoard exports.

One job: the oracle on ``digits-mixed`` (12 clients: 8 near-IID, 4 of one class each, so
two clusters and clients far apart), 4 rounds, evaluated in rounds 2 and 4, made by
``distfl suite`` (a normal ``distfl run`` process, its output in the log beside). Its file
without the new columns stands for a file written before them: it is read, and resumed
to 6 rounds beside an uninterrupted run of 6."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import statistics
import types

import h5py
import numpy as np
import pytest
from runfile import assert_same, read_run

import distfl
from distfl.runtime.export import export_paths

pytestmark = pytest.mark.integration

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
EXPORTS = '["jsonl", "tensorboard"]' if HAS_TENSORBOARD else '["jsonl"]'
STEM = "digits-mixed--oracle--s0"


def distfl_cli(helpers, cwd, *args):
    """``distfl ARGS`` from ``cwd``, in this process (a suite's runs are processes of their
    own); it must exit 0; its stdout."""
    proc = helpers.cli(cwd, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def low_tail_by_hand(values) -> tuple[float, float]:
    """The minimum and the 10th percentile (numpy's default linear interpolation, which is
    the standard library's "inclusive" method) of the finite values."""
    v = [float(x) for x in values if math.isfinite(x)]
    if len(v) == 1:
        return v[0], v[0]
    return min(v), statistics.quantiles(v, n=10, method="inclusive")[0]


@pytest.fixture(scope="module")
def job(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("worst")
    printed = distfl_cli(
        helpers, tmp, "suite", "digits-mixed", "--algorithms", "oracle", "--seeds", "0",
        "--set", "run.rounds=4", "--set", "eval.every=2", "--set", f"run.export={EXPORTS}",
        "--out", "suite",
    )  # fmt: skip
    path = tmp / "suite" / f"{STEM}.h5"
    with h5py.File(path, "r") as f:
        clients = f["clients/accuracy"][()]
        leaves = [x.decode() if isinstance(x, bytes) else str(x) for x in f["final/leaves"][()]]
        assignment = f["final/assignment"][()]
        metrics = {k: f["metrics"][k][()] for k in ("round", "accuracy", "accuracy_worst",
                                                    "accuracy_p10")}  # fmt: skip
        evaluation = {k: f["metrics/evaluation"][k][()] for k in f["metrics/evaluation"]}
    evaluation["cluster"] = np.array(
        [x.decode() if isinstance(x, bytes) else str(x) for x in evaluation["cluster"]]
    )
    worst, p10 = low_tail_by_hand(clients)
    return types.SimpleNamespace(
        dir=tmp, path=path, suite_out=printed, clients=clients, leaves=leaves,
        assignment=assignment, metrics=metrics, evaluation=evaluation, worst=worst, p10=p10,
    )  # fmt: skip


def test_the_federations_figures_are_those_of_the_clients_accuracies(job):
    m = job.metrics
    last = len(m["round"]) - 1
    assert m["round"][last] == 4 and np.isfinite(job.clients).all()
    assert len(set(job.clients.tolist())) > 2  # clients far apart: the figures say something
    assert m["accuracy_worst"][last] == job.worst  # the minimum, to the bit
    assert m["accuracy_p10"][last] == pytest.approx(job.p10, rel=1e-12, abs=1e-15)
    assert m["accuracy_worst"][last] < m["accuracy_p10"][last] < m["accuracy"][last]
    # recorded where the run evaluated (rounds 2 and 4), NaN in the other rounds
    evaluated = np.isfinite(m["accuracy"])
    assert m["round"][evaluated].tolist() == [2, 4]
    for column in ("accuracy_worst", "accuracy_p10"):
        assert np.array_equal(np.isfinite(m[column]), evaluated), column


def test_each_clusters_figures_are_those_of_its_clients(job):
    e = job.evaluation
    last = e["round"] == 4
    assert sorted(e["cluster"][last].tolist()) == sorted(job.leaves) and len(job.leaves) == 2
    for i, cid in enumerate(job.leaves):
        mine = job.clients[job.assignment == i]
        row = np.flatnonzero(last & (e["cluster"] == cid))[0]
        worst, p10 = low_tail_by_hand(mine)
        assert e["clients"][row] == len(mine)
        assert e["accuracy_worst"][row] == worst, cid
        assert e["accuracy_p10"][row] == pytest.approx(p10, rel=1e-12, abs=1e-15), cid
    # the federation's worst client is the worst of the clusters' worst clients
    assert job.metrics["accuracy_worst"][-1] == e["accuracy_worst"][last].min()


def test_the_runs_summary_prints_them(job):
    log = (job.dir / "suite" / f"{STEM}.log").read_text(encoding="utf-8")
    line = (
        f"  worst client             {job.worst:.4f}, 10th percentile {job.p10:.4f} "
        "(of the same clients' balanced accuracies)"
    )
    assert line in log.splitlines()


def test_the_suite_shows_them_beside_the_mean(job):
    doc = json.loads((job.dir / "suite" / "suite.json").read_text())
    columns = doc["columns"]
    at = columns.index("accuracy")
    assert columns[at + 1 : at + 3] == ["accuracy_worst", "accuracy_p10"]
    (row,) = doc["rows"]
    assert row["accuracy_worst"] == job.worst
    assert row["accuracy_p10"] == pytest.approx(job.p10, rel=1e-12, abs=1e-15)
    with open(job.dir / "suite" / "suite.csv", newline="") as fh:
        (cells,) = list(csv.DictReader(fh))
    assert float(cells["accuracy_worst"]) == row["accuracy_worst"]
    assert float(cells["accuracy_p10"]) == row["accuracy_p10"]
    lines = job.suite_out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["scenario"])
    table = dict(zip(lines[head].split(), lines[head + 1].split(), strict=True))
    assert (table["accuracy_worst"], table["accuracy_p10"]) == (
        f"{row['accuracy_worst']:.4f}", f"{row['accuracy_p10']:.4f}",
    )  # fmt: skip


def test_inspect_shows_them(job, helpers):
    out = distfl_cli(helpers, job.dir, "inspect", str(job.path))
    line = (
        f"worst      client {job.worst:.3f}, 10th percentile {job.p10:.3f} (balanced "
        "accuracy, the same evaluation)"
    )
    assert line in out.splitlines()


def test_gather_writes_them_to_its_csv(job, helpers):
    csv_path = job.dir / "gathered.csv"
    distfl_cli(helpers, job.dir, "gather", str(job.path), "--csv", str(csv_path))
    with open(csv_path, newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["accuracy_worst"]) == job.worst
    assert float(row["accuracy_p10"]) == pytest.approx(job.p10, rel=1e-12, abs=1e-15)


def test_the_report_shows_them(job, helpers):
    distfl_cli(helpers, job.dir, "report", str(job.path), "--out", "rep")
    page = (job.dir / "rep" / "index.html").read_text(encoding="utf-8")
    summary = page[page.index("<h2>Summary</h2>") :]
    head = summary[: summary.index("</tr>")]
    assert "<th>accuracy_worst</th><th>accuracy_p10</th>" in head
    assert f"<td>{job.worst:.4f}</td><td>{job.p10:.4f}</td>" in summary
    assert (job.dir / "rep" / "accuracy.png").is_file()


def test_the_python_api_gives_them(job):
    run = distfl.open(job.path)
    assert run.accuracy_worst == job.worst
    assert run.accuracy_p10 == pytest.approx(job.p10, rel=1e-12, abs=1e-15)
    s = run.summary()
    assert (s["accuracy_worst"], s["accuracy_p10"]) == (run.accuracy_worst, run.accuracy_p10)
    m = run.metrics
    assert np.asarray(m["accuracy_worst"]).tobytes() == job.metrics["accuracy_worst"].tobytes()
    e = run.evaluation
    assert np.asarray(e["accuracy_p10"]).tobytes() == job.evaluation["accuracy_p10"].tobytes()


def test_the_exports_hold_them(job):
    paths = export_paths(job.path)
    jsonl, tb = paths["jsonl"], paths["tensorboard"]
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    metrics = [r for r in rows if r["table"] == "metrics"]
    assert metrics[-1]["accuracy_worst"] == job.worst
    assert metrics[0]["accuracy_worst"] is None  # round 1: no evaluation
    evaluation = [r for r in rows if r["table"] == "evaluation" and r["round"] == 4]
    assert {r["cluster"]: r["accuracy_p10"] for r in evaluation} == {
        c: float(v)
        for c, v, t in zip(job.evaluation["cluster"], job.evaluation["accuracy_p10"],
                           job.evaluation["round"], strict=True)
        if t == 4
    }  # fmt: skip
    if not HAS_TENSORBOARD:
        return
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb))
    events.Reload()
    worst = events.Scalars("metrics/accuracy_worst")
    assert [e.step for e in worst] == [2, 4]
    assert worst[-1].value == pytest.approx(job.worst, abs=1e-7)  # float32 events
    tags = set(events.Tags()["scalars"])
    for cid in job.leaves:
        assert {f"accuracy_worst/{cid}", f"accuracy_p10/{cid}"} <= tags, cid


#: the columns this file's figures added to the run file's tables
NEW_COLUMNS = [f"{table}/{column}" for table in ("metrics", "metrics/evaluation")
               for column in ("accuracy_worst", "accuracy_p10")]  # fmt: skip


def test_a_file_written_before_the_columns_reads_and_resumes_to_the_same_bits(job, helpers):
    """A file of the layout before the columns (the job's file without them, sealed anew:
    what the code before wrote) is read by every reader, without the figures, and resumes
    to the bits of an uninterrupted run: every part the same, the new columns NaN in the
    rounds the file held and the uninterrupted run's values in the resumed rounds."""
    from distfl.runfile import integrity
    from distfl.runfile.reader import read_run_file
    from distfl.tools.gather import gather_rows
    from distfl.tools.inspection import inspect_run

    before = job.dir / "before.h5"
    before.write_bytes(job.path.read_bytes())
    with h5py.File(before, "r+") as f:
        for name in NEW_COLUMNS:
            del f[name]
        del f[integrity.GROUP]
        integrity.seal(f)
    run = distfl.open(before)
    assert (run.accuracy_worst, run.accuracy_p10) == (None, None)
    assert (run.summary()["accuracy_worst"], run.summary()["accuracy_p10"]) == (None, None)
    m = run.metrics
    columns = list(m.columns) if hasattr(m, "columns") else list(m.dtype.names)
    assert "accuracy" in columns and "accuracy_worst" not in columns
    (row,) = gather_rows([before])
    assert (row["accuracy_worst"], row["accuracy_p10"]) == (None, None)
    shown = io.StringIO()
    inspect_run(before, shown)
    assert "federation balanced accuracy" in shown.getvalue()
    assert "worst      client" not in shown.getvalue()

    toml = job.dir / "before.toml"
    toml.write_text(read_run_file(before, state=False).config.to_toml())
    resumed_out = distfl_cli(helpers, job.dir, "run", "--resume", str(before),
                             "--set", "run.rounds=6")  # fmt: skip
    assert "  worst client             " in resumed_out
    fresh = job.dir / "fresh.h5"
    distfl_cli(helpers, job.dir, "run", "--config", str(toml), "--out", str(fresh),
               "--set", "run.rounds=6")  # fmt: skip
    same = helpers.cli(job.dir, "compare", str(before), str(fresh), "--ignore", "metrics,timing")
    assert same.returncode == 0, same.stdout + same.stderr
    a, b = read_run(before), read_run(fresh)
    assert sorted(a) == sorted(b)
    assert_same({k: a[k] for k in a if k not in NEW_COLUMNS},
                {k: b[k] for k in b if k not in NEW_COLUMNS})  # fmt: skip
    for name in NEW_COLUMNS:
        rounds = a[f"{name.rpartition('/')[0]}/round"]
        held = rounds <= 4
        assert np.isnan(a[name][held]).all(), name
        assert a[name][~held].tobytes() == b[name][~held].tobytes(), name
        assert np.isfinite(b[name][~held]).any(), name
