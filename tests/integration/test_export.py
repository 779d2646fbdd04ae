"""``run.export``: the live JSON lines hold every row of the run file's tables, value for
value (NaN as null); a resumed run writes them anew from its file, so that they hold the
rounds of the file and no other; the TensorBoard events open with tensorboard's own reader
and hold the per-round metrics of the file (skipped where tensorboard is not installed).

The runs are FedGWC on the digits preset (a table of per-cluster statistics besides the
runtime's), made in this process through ``distfl.run`` (``helpers.run_alone``), the code
of ``distfl run``; the resume goes through the command line's ``main``."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from distfl.runfile.reader import read_run_file
from distfl.runtime.export import export_paths, table_name

pytestmark = pytest.mark.integration

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
EXPORTS = '["jsonl", "tensorboard"]' if HAS_TENSORBOARD else '["jsonl"]'
ARGS = (
    "--preset", "digits", "--set", 'algorithm.name="fedgwc"', "--set", "eval.every=2",
    "--set", 'run.progress="none"', "--set", f"run.export={EXPORTS}",
)  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory, helpers) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    helpers.run_alone(tmp, *ARGS, "--set", "run.rounds=6", "--out", "run.h5")
    return tmp


def json_rows(path: Path) -> dict[str, list[dict]]:
    """The JSON lines by table, each row without its "table"."""
    out: dict[str, list[dict]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out.setdefault(row.pop("table"), []).append(row)
    return out


def assert_rows_are_the_files(run_file: Path, skip: tuple[str, ...] = ()) -> None:
    """Every row of every table of ``run_file`` is in its JSON lines, in order, with every
    column's value (NaN as null), and the JSON lines hold no other row."""
    tables = read_run_file(run_file, state=False).tables
    exported = json_rows(export_paths(run_file)["jsonl"])
    names = {table_name(k) for k, columns in tables.items() if columns and k not in skip}
    assert set(exported) - set(skip) == names
    for key, columns in tables.items():
        if key in skip or not columns:
            continue
        rows = exported[table_name(key)]
        n = len(next(iter(columns.values())))
        assert len(rows) == n, key
        for name, values in columns.items():
            got = [row[name] for row in rows]
            for x, y in zip(np.asarray(values).tolist(), got, strict=True):
                if isinstance(x, float) and math.isnan(x):
                    assert y is None, (key, name)
                else:
                    assert y == x, (key, name, x, y)


def test_the_json_lines_hold_every_row_of_the_run_file(made):
    run_file = made / "run.h5"
    assert_rows_are_the_files(run_file)
    rows = json_rows(export_paths(run_file)["jsonl"])
    assert [r["round"] for r in rows["metrics"]] == [1, 2, 3, 4, 5, 6]
    assert "mse" in rows["clusters"][0]  # FedGWC's statistic, a column of its table
    assert sum(r["accuracy"] is not None for r in rows["metrics"]) == 3  # rounds 2, 4, 6


def test_a_resumed_run_writes_its_json_lines_anew_from_its_file(made, helpers, tmp_path):
    """Three rounds, then resumed to six: the JSON lines are the rows of the resumed file
    (no round twice), and but for the wall clock and round 3 (the end of the first run,
    which evaluated there) they are the six rounds in one go's."""
    from distfl.cli import main

    helpers.run_alone(tmp_path, *ARGS, "--set", "run.rounds=3", "--out", "part.h5")
    first = json_rows(tmp_path / "part.jsonl")
    assert [r["round"] for r in first["metrics"]] == [1, 2, 3]
    here = Path.cwd()
    try:
        import os

        os.chdir(tmp_path)
        assert main(["run", "--resume", "part.h5", "--set", "run.rounds=6"]) == 0
    finally:
        os.chdir(here)
    assert_rows_are_the_files(tmp_path / "part.h5")
    resumed, straight = json_rows(tmp_path / "part.jsonl"), json_rows(made / "run.jsonl")
    assert [r["round"] for r in resumed["metrics"]] == [1, 2, 3, 4, 5, 6]
    for table in ("metrics", "clusters", "evaluation", "membership"):
        # round 3 ended the first run, which evaluated in it; the others are the same
        assert [r for r in resumed[table] if r["round"] != 3] == [
            r for r in straight[table] if r["round"] != 3
        ], table


@pytest.mark.skipif(
    not HAS_TENSORBOARD, reason="tensorboard is not installed (distfl[tensorboard])"
)
def test_the_tensorboard_events_open_with_tensorboards_reader(made):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_file = made / "run.h5"
    events = EventAccumulator(str(export_paths(run_file)["tensorboard"]))
    events.Reload()
    metrics = read_run_file(run_file, state=False).tables["metrics"]
    accuracy = events.Scalars("metrics/accuracy")
    finite = np.isfinite(metrics["accuracy"])
    assert [e.step for e in accuracy] == metrics["round"][finite].tolist()
    np.testing.assert_allclose([e.value for e in accuracy], metrics["accuracy"][finite],
                               rtol=1e-6)  # fmt: skip
    loss = events.Scalars("metrics/train_loss_last")
    assert [e.step for e in loss] == metrics["round"].tolist()
    clusters = {tag for tag in events.Tags()["scalars"] if tag.startswith("accuracy/")}
    assert clusters and all(tag.split("/", 1)[1][0] == "0" for tag in clusters)
