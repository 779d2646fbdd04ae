"""The Python API's parts that need no training: ``import distfl`` loads neither the API
nor torch; ``distfl.open`` reads the stored run files of tests/data (every algorithm) into
the tables, tree and scores that ``distfl inspect`` shows, refuses a missing or damaged
file with the project's CheckpointError, and is read-only; overrides become ``--set``
items; ``distfl.run`` and ``distfl.suite`` refuse bad input before anything runs."""

from __future__ import annotations

import importlib.util
import io
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from timing import limit

import distfl
from distfl import api, config
from distfl.errors import CheckpointError, ConfigError, UserError
from distfl.runfile import integrity, layout
from distfl.runfile.reader import read_run_file
from distfl.tools.inspection import inspect_run

DATA = Path(__file__).resolve().parents[1] / "data" / "runfiles-v0.1.0"
FILES = sorted(DATA.glob("*.h5"))
FEDGWC = DATA / "fedgwc.h5"
# distfl 0.1.0's files have no integrity record: opening one warns that it is unverified
# (tests/integration/test_tampering.py checks that it does)
pytestmark = pytest.mark.filterwarnings("ignore::distfl.errors.UnverifiedRunFile")

no_pandas = pytest.mark.skipif(
    importlib.util.find_spec("pandas") is not None,
    reason="pandas is importable in this process, so tables are DataFrames here",
)


def column(table, name: str) -> np.ndarray:
    return np.asarray(table[name])


def test_import_distfl_loads_neither_the_api_nor_torch():
    code = """
import sys
import distfl
assert "distfl.api" not in sys.modules and "h5py" not in sys.modules
assert {"open", "run", "suite", "Run"} <= set(dir(distfl))
run = distfl.open(sys.argv[1])
run.metrics, run.tree, run.summary(), repr(run), str(run.tree)
assert isinstance(run, distfl.Run) and distfl.Run is sys.modules["distfl.api"].Run
assert distfl.run is sys.modules["distfl.api"].run
try:
    distfl.nothing
except AttributeError:
    pass
else:
    raise AssertionError("distfl.nothing")
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code, str(FEDGWC)],
        capture_output=True, text=True, timeout=limit(120),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", "import distfl, open and read a file without torch"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_open_agrees_with_inspect(path):
    run = distfl.open(path)
    text = io.StringIO()
    inspect_run(path, text)
    lines = text.getvalue().splitlines()
    tree = lines[lines.index("hierarchy") + 1 : next(i for i, ln in enumerate(lines)
                                                       if ln.startswith("final "))]  # fmt: skip
    assert str(run.tree) == "\n".join(tree)
    assert [n.id for n in run.tree.values()] == [re.sub(r"^[ │├└─]*", "", ln).split()[0]
                                                 for ln in tree]  # fmt: skip
    s = run.summary()

    def shown(x):
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"

    out = text.getvalue()
    assert (
        f"final      {s['clusters']} cluster(s); federation balanced accuracy "
        + shown(s["accuracy"])
        in out
    )
    assert f"WAS        {shown(s['was'])}" in out and f"WADB       {shown(s['wadb'])}" in out
    if f"{s['groups']} recorded groups" in out:
        assert f"Rand index {shown(s['rand'])}, ARI {shown(s['ari'])}" in out
    assert f"round {run.round} of {run.rounds}" in out
    assert repr(run).count("\n") == 0 and run.algorithm in repr(run)

    stored = read_run_file(path, state=False)
    assert run.config == stored.config and run.leaves == stored.leaves
    for name in api.TABLES:
        table, columns = run.table(name), stored.tables[name]
        names = list(table.columns if hasattr(table, "columns") else table.dtype.names)
        if columns:
            assert sorted(names) == sorted(columns)
            assert len(table) == len(next(iter(columns.values())))
        else:  # a table the file lacks (written before it existed): declared columns, no row
            assert names == list(layout.BY_KEY[name].names) and len(table) == 0
    assert len(run.assignment) == run.num_clients == len(run.groups)
    for node in run.tree.leaves:
        assert np.array_equal(np.flatnonzero(run.assignment == node.id), node.members)
    for node in run.tree.splits:
        kids = np.concatenate([run.tree[k].members for k in node.children])
        assert sorted(kids) == sorted(node.members) or run.algorithm in ("ifca", "fesem")


def test_tree_of_a_split():
    tree = distfl.open(FEDGWC).tree
    assert list(tree) == ["0", "0.0", "0.1", "0.2"] and len(tree) == 4
    root = tree["0"]
    assert (root.parent, root.children, root.depth) == ("", ("0.0", "0.1", "0.2"), 0)
    assert root.split_round == 24 and not root.is_leaf and root.size == 16
    assert {"db_scores", "interaction", "affinity", "labels"} <= set(root.datasets)
    assert [n.id for n in tree.roots] == ["0"] and [n.id for n in tree.splits] == ["0"]
    assert [(n.parent, n.depth, n.created_round, n.is_leaf) for n in tree.leaves] == [
        ("0", 1, 24, True)
    ] * 3
    table = tree.table()
    assert list(column(table, "id")) == list(tree)
    assert list(column(table, "size")) == [16, 6, 7, 3]
    assert list(column(table, "split_round")) == [24, -1, -1, -1]
    assert repr(tree) == "<distfl Tree: 4 clusters, 3 leaves, 1 splits>"


def test_every_table_of_the_layout_is_an_attribute_of_its_name():
    run = distfl.open(FEDGWC)
    for table in layout.TABLES:
        by_name, by_key = getattr(run, table.key), run.table(table.key)
        for name in by_key.dtype.names if hasattr(by_key, "dtype") else by_key.columns:
            np.testing.assert_array_equal(column(by_name, name), column(by_key, name))
        assert len(by_name) == len(by_key)
        doc = getattr(type(run), table.key).__doc__
        assert all(name in doc for name in table.names), table.key  # documented by the layout
    assert len(run.metrics) == 25 and len(run.clusters) > 0  # (tables, not empty stand-ins)


def test_statistic_is_the_clusters_table_round_by_round():
    run = distfl.open(FEDGWC)
    assert run.statistics == ["mse"]  # CFL's norms are NaN in a FedGWC run
    wide, long = run.statistic("mse"), run.clusters
    assert list(column(wide, "round")) == list(range(1, 26))
    for cid in ("0", "0.0", "0.1", "0.2"):
        rows = (column(long, "cluster") == cid) & np.isfinite(column(long, "mse"))
        at = column(long, "round")[rows] - 1
        assert np.array_equal(column(wide, cid)[at], column(long, "mse")[rows])
        assert np.isfinite(column(wide, cid)).sum() == rows.sum()
    with pytest.raises(KeyError, match="recorded: mse"):
        run.statistic("mean_norm")


def test_run_is_read_only():
    run = distfl.open(FEDGWC)
    with pytest.raises(AttributeError, match="read-only"):
        run.round = 3
    with pytest.raises(AttributeError, match="read-only"):
        del run.config
    for values in (run.assignment, run.groups, run.class_counts, run.tree["0"].members,
                   run.tree["0"].datasets["interaction"]):  # fmt: skip
        with pytest.raises(ValueError):
            values[0] = values[1]
    with pytest.raises(TypeError):
        run.tree["0"].datasets["x"] = np.zeros(1)
    metrics = run.metrics  # a table is the caller's copy
    if hasattr(metrics, "loc"):  # a DataFrame
        metrics.loc[0, "round"] = 99
    else:
        metrics["round"][0] = 99
    assert column(metrics, "round")[0] == 99 and column(run.metrics, "round")[0] == 1


@no_pandas
def test_tables_are_record_arrays_without_pandas():
    run = distfl.open(FEDGWC)
    for table in (*(run.table(n) for n in api.TABLES), run.clients, run.tree.table(),
                  run.statistic("mse")):  # fmt: skip
        assert isinstance(table, np.recarray)
    assert run.clusters.cluster.dtype.kind == "U" and run.metrics["round"].dtype == np.int64
    assert run.membership.dtype.names == layout.MEMBERSHIP.names
    assert list(run.clients.dtype.names) == [
        "client", "group", "cluster", "accuracy", "num_train", "num_test",
    ]  # fmt: skip
    assert list(run.clients.cluster) == list(run.assignment)


def test_rows_table_types_columns():
    rows = [
        {"a": "x", "b": 1, "c": 0.5, "d": None, "e": 2},
        {"a": "y", "b": 2, "c": None, "d": None, "e": 3.5},
    ]
    table = api.rows_table(rows, ["a", "b", "c", "d", "e"])
    assert column(table, "b").dtype == np.int64
    assert column(table, "c").dtype == np.float64 and math.isnan(column(table, "c")[1])
    assert column(table, "d").dtype == np.float64 and np.isnan(column(table, "d")).all()
    assert list(column(table, "e")) == [2.0, 3.5]
    assert list(column(table, "a")) == ["x", "y"]


def test_open_refuses_missing_and_damaged_files(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        distfl.open(tmp_path / "nothing.h5")
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(FEDGWC.read_bytes()[:20_000])
    with pytest.raises(CheckpointError, match="cannot be read"):
        distfl.open(truncated)
    changed = tmp_path / "changed.h5"
    shutil.copy(FEDGWC, changed)
    with h5py.File(changed, "r+") as f:
        integrity.seal(f)  # as today's writer leaves a file (this one predates the record)
    assert distfl.open(changed).round == 25
    with h5py.File(changed, "r+") as f:
        f["metrics/accuracy"][0] = 0.5
    with pytest.raises(CheckpointError, match="damaged: /metrics/accuracy differs"):
        distfl.open(changed)
    text = tmp_path / "text.h5"
    text.write_text("not HDF5\n")
    with pytest.raises(CheckpointError, match="cannot be read"):
        distfl.open(text)
    with pytest.raises(CheckpointError):
        distfl.open(tmp_path)


def test_set_items():
    items = api.set_items(
        {
            "run.rounds": np.int64(50),
            "algorithm": {"name": "none"},
            "data.groups": ({"count": 2, "alpha": 1.0},),
            "run.out": Path("a b.h5"),
            "train.lr": np.float32(0.5),
            "run.progress": "none",
            "comm.timeout_s": 1e-3,
        }
    )
    parsed = {(s, k): v for s, k, v in map(config.parse_set, items)}
    assert parsed == {
        ("run", "rounds"): 50,
        ("algorithm", "name"): "none",
        ("data", "groups"): [{"count": 2, "alpha": 1.0}],
        ("run", "out"): "a b.h5",
        ("train", "lr"): 0.5,
        ("run", "progress"): "none",
        ("comm", "timeout_s"): 1e-3,
    }
    assert api.set_items(["run.rounds=5"]) == ["run.rounds=5"]
    assert api.set_items(None) == []
    with pytest.raises(ConfigError, match="give a dict"):
        api.set_items("run.rounds=5")
    with pytest.raises(ConfigError, match="has no TOML form"):
        api.set_items({"run.rounds": object()})
    with pytest.raises(ConfigError, match="not a 'section.key=value' item"):
        api.set_items([("run.rounds", 5)])


def test_run_refuses_bad_input_before_running(tmp_path):
    out = tmp_path / "run.h5"
    with pytest.raises(ConfigError, match="run.nope"):
        distfl.run(out=out, overrides={"run.nope": 1})
    with pytest.raises(ConfigError, match="unknown"):
        distfl.run(preset="no-such-preset", out=out)
    with pytest.raises(ConfigError, match="config file"):
        distfl.run(tmp_path / "missing.toml", out=out)
    stored = distfl.open(FEDGWC).config
    with pytest.raises(ConfigError, match="not both"):
        distfl.run(stored, preset="digits", out=out)
    with pytest.raises(ConfigError, match="config is a int"):
        distfl.run(3, out=out)
    taken = tmp_path / "taken.h5"
    taken.write_bytes(b"x")
    with pytest.raises(UserError, match="exists"):
        distfl.run(out=taken)
    assert taken.read_bytes() == b"x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.h5"]


def test_run_refuses_a_bad_world_size_before_any_rank_starts(tmp_path):
    out = tmp_path / "run.h5"
    for bad in (2.0, "3", True, None):
        with pytest.raises(ConfigError, match=r"world_size = .* is a \w+; give an int"):
            distfl.run(out=out, world_size=bad)
    for bad in (0, -2):
        with pytest.raises(ConfigError, match=f"world_size = {bad}: give 1 .*at least 2"):
            distfl.run(out=out, world_size=bad)
    tiny = {"data.num_clients": 4, "server.clients_per_round": 2}
    with pytest.raises(ConfigError, match="fewer clients than the 5 worker ranks"):
        distfl.run(preset="digits", overrides=tiny, out=out, world_size=6)
    for backend in ("local", "mpi"):
        with pytest.raises(ConfigError, match=f"comm.backend = '{backend}'"):
            distfl.run(preset="digits", overrides={**tiny, "comm.backend": backend}, out=out,
                       world_size=3)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_suite_refuses_bad_input_before_running(tmp_path):
    out = tmp_path / "suite"
    with pytest.raises(ConfigError, match="neither a preset nor a .toml file"):
        distfl.suite("no-such-scenario", out=out)
    with pytest.raises(ConfigError, match="--algorithms 'nope'"):
        distfl.suite("default", algorithms="fedgwc,nope", out=out)
    with pytest.raises(UserError, match="seeds"):
        distfl.suite("default", seeds="0,x", out=out)
    with pytest.raises(UserError, match="seeds"):
        distfl.suite("default", seeds=[0.5], out=out)
    with pytest.raises(UserError, match="at least 1"):
        distfl.suite("default", workers=0, out=out)
    with pytest.raises(ConfigError, match="run.nope"):
        distfl.suite("default", overrides={"run.nope": 1}, out=out)
    assert not out.exists()
