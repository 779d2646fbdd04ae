"""The Python API on real runs: ``distfl.open`` of the default run (``distfl run`` with no
arguments) gives the metrics, the tree and the scores that ``distfl inspect`` prints for the
same file; ``distfl.run`` writes the file ``distfl run`` writes with the same settings, bit
for bit, and refuses an existing output unless ``force``; ``distfl.run(..., world_size=3)``
starts the three ranks torchrun starts and gives the one-process bits, a rank that fails
raises its one-line error and a Ctrl-C stops the ranks with a checkpoint; opening never
imports a run file's plug-ins; ``distfl.suite`` returns one row per job, as suite.json has
them; with pandas importable (installed apart, in ``.venv/extras/pandas``, by
scripts/ensure_venv.sh) every table is a DataFrame holding the same values. Without pandas
the tables are NumPy record arrays (this process's venv has no pandas)."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from runfile import assert_same_run, read_run
from timing import limit

import distfl
from distfl.errors import UserError
from distfl.metrics import rand_index
from distfl.runfile import layout
from distfl.tools.suite import COLUMNS

pytestmark = pytest.mark.integration

#: pandas for the DataFrame test, installed apart from the venv (scripts/ensure_venv.sh)
PANDAS = Path(sys.prefix) / "extras" / "pandas"
no_pandas = pytest.mark.skipif(
    importlib.util.find_spec("pandas") is not None,
    reason="pandas is importable in this process, so tables are DataFrames here (the record "
    "arrays are tested where it is not, as in ./test.sh's venv)",
)

# Three groups of three digits clients (near-IID, one class each, permuted labels), as in
# test_suite.py: two quick runs.
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
SUITE_OVERRIDES = {"run.rounds": 3, "eval.every": 1}

TREE_LINE = re.compile(
    r"^[ │├└─]*(?P<id>[\d.]+)\s+(?P<members>\d+) clients  "
    r"(?:split at round (?P<split>\d+) into (?P<children>\d+) \(DB \S+\)"
    r"|leaf, accuracy (?P<accuracy>\S+))$"
)


def inspect_text(helpers, path: Path) -> str:
    """What ``distfl inspect PATH`` prints (its code, in this process)."""
    proc = helpers.cli(path.parent, "inspect", str(path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def parse_inspect(text: str) -> dict:
    """What ``distfl inspect`` printed, as numbers: the round, the tree's nodes (id, member
    count, split round and children, or leaf accuracy), the final clusters, the accuracy,
    WAS, WADB, Rand and ARI (as printed, 3 decimals), and the hierarchy block itself."""
    lines = text.splitlines()
    out: dict = {}
    m = re.search(r"round (\d+) of (\d+)", text)
    out["round"], out["rounds"] = int(m[1]), int(m[2])
    block = lines[lines.index("hierarchy") + 1 :]
    block = block[: next(i for i, ln in enumerate(block) if ln.startswith("final "))]
    out["hierarchy"] = "\n".join(block)
    out["nodes"] = []
    for line in block:
        node = TREE_LINE.match(line)
        assert node, f"not a tree line: {line!r}"
        out["nodes"].append(node.groupdict())
    m = re.search(r"^final\s+(\d+) cluster\(s\); federation balanced accuracy (\S+)$", text, re.M)
    out["clusters"], out["accuracy"] = int(m[1]), m[2]
    out["was"] = re.search(r"^WAS\s+(\S+)", text, re.M)[1]
    out["wadb"] = re.search(r"^WADB\s+(\S+)", text, re.M)[1]
    m = re.search(r"Rand index (\S+), ARI (\S+) against the (\d+) recorded groups", text)
    out["rand"], out["ari"], out["groups"] = m[1], m[2], int(m[3])
    return out


def fmt(x) -> str:
    """As ``distfl inspect`` prints a score."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def column(table, name: str) -> np.ndarray:
    """A column of a DataFrame or a record array as a NumPy array."""
    return np.asarray(table[name])


# -- distfl.open on the default run ------------------------------------------------------


def test_open_default_run_agrees_with_inspect(default_run, helpers):
    run = distfl.open(default_run.path)
    shown = parse_inspect(inspect_text(helpers, default_run.path))
    assert (run.round, run.rounds, run.finished) == (shown["round"], shown["rounds"], True)
    assert run.round == run.config.run.rounds == 300  # the default preset, whole

    # the tree: the same nodes in the same order, member counts, splits and leaf accuracies
    tree = run.tree
    assert [n.id for n in tree.values()] == [n["id"] for n in shown["nodes"]]
    assert len(tree.splits) >= 1, "the default run splits"
    clients = run.clients
    for node, row in zip(tree.values(), shown["nodes"], strict=True):
        assert node.size == int(row["members"]) == len(node.members)
        if node.is_leaf:
            assert row["split"] is None
            mine = column(clients, "cluster") == node.id
            assert np.array_equal(np.flatnonzero(mine), node.members)
            assert fmt(float(np.nanmean(column(clients, "accuracy")[mine]))) == row["accuracy"]
        else:
            assert node.split_round == int(row["split"])
            assert len(node.children) == int(row["children"])
            assert all(tree[kid].parent == node.id for kid in node.children)
    assert str(tree) == shown["hierarchy"]

    # the scores below the tree
    s = run.summary()
    assert s["clusters"] == shown["clusters"] == len(run.leaves) == len(tree.leaves)
    for key in ("accuracy", "was", "wadb", "rand", "ari"):
        assert fmt(s[key]) == shown[key], key
    assert s["groups"] == shown["groups"] == len(run.config.groups)
    assert s["first_split"] == min(n.split_round for n in tree.splits)
    assert (s["round"], s["rounds"], s["finished"]) == (300, 300, True)

    # the metrics: one row per round, as the file holds them, ending where inspect does
    metrics, stored = run.metrics, read_run(default_run.path, tops=("metrics",))
    assert list(column(metrics, "round")) == list(range(1, run.round + 1))
    for name in layout.METRICS.names:
        a, b = column(metrics, name), stored[f"metrics/{name}"]
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    assert column(metrics, "num_clusters")[-1] == shown["clusters"]
    assert column(metrics, "num_splits").sum() == len(tree.splits)
    accuracy = column(metrics, "accuracy")
    assert fmt(float(accuracy[np.isfinite(accuracy)][-1])) == shown["accuracy"]


def test_assignment_groups_and_statistics_of_the_default_run(default_run):
    run = distfl.open(default_run.path)
    stored = read_run(default_run.path, tops=("clients", "final"))
    leaves = [x.decode() if isinstance(x, bytes) else x for x in stored["final/leaves"]]
    assert run.leaves == leaves
    assert list(run.assignment) == [leaves[i] for i in stored["final/assignment"]]
    assert np.array_equal(run.groups, stored["clients/group"])
    assert np.array_equal(run.class_counts, stored["clients/class_counts"])
    assert run.summary()["rand"] == rand_index(run.groups, run.assignment)
    # FedGWC's statistics, round by round and cluster by cluster, as the clusters table has them
    assert "mse" in run.statistics
    mse, clusters = run.statistic("mse"), run.clusters
    for cid in [n.id for n in run.tree.values()]:
        rows = column(clusters, "cluster") == cid
        have = np.isfinite(column(clusters, "mse")) & rows
        if have.any():
            wide = column(mse, cid)
            at = np.searchsorted(column(mse, "round"), column(clusters, "round")[have])
            assert np.array_equal(wide[at], column(clusters, "mse")[have])
            assert np.isfinite(wide).sum() == have.sum()
    assert repr(run).count("\n") == 0 and "fedgwc on digits, 40 clients" in repr(run)


@no_pandas
def test_tables_are_record_arrays_without_pandas(default_run):
    run = distfl.open(default_run.path)
    stored = read_run(default_run.path, tops=("metrics", "timing"))
    for name in distfl.api.TABLES:
        table = run.table(name)
        assert isinstance(table, np.recarray), name
        path = layout.BY_KEY[name].path
        written = sorted(
            k.split("/")[-1] for k in stored if "@" not in k and k.rsplit("/", 1)[0] == path
        )
        if not written and layout.BY_KEY[name].optional:  # (newcomers': only with them)
            assert list(table.dtype.names) == list(layout.BY_KEY[name].names) and not len(table)
            continue
        assert sorted(table.dtype.names) == written, name
        declared = [c for c in layout.BY_KEY[name].names if c in written]
        assert list(table.dtype.names[: len(declared)]) == declared, name
        for c in table.dtype.names:
            values = stored[f"{path}/{c}"]
            if values.dtype.kind == "O":
                values = np.array([v.decode() for v in values])
            assert np.array_equal(table[c], values, equal_nan=values.dtype.kind == "f"), c
    assert run.clusters.cluster.dtype.kind == "U"
    with pytest.raises(KeyError, match="tables: metrics, clusters"):
        run.table("nope")


# -- distfl.run --------------------------------------------------------------------------


def test_run_in_process_gives_the_bits_of_distfl_run(default_run, tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    out = tmp_path / "api.h5"
    run = distfl.run(out=out)  # the settings of `distfl run` with no arguments
    assert isinstance(run, distfl.Run) and run.finished and run.path == out
    assert_same_run(default_run.path, out)  # metrics, hierarchy, final, clients, state
    assert torch.get_num_threads() == threads
    printed = capsys.readouterr().out
    assert "final balanced accuracy" in printed and str(out) in printed


def test_run_refuses_an_existing_out_unless_force(tmp_path, capsys):
    out = tmp_path / "taken.h5"
    out.write_bytes(b"not to be lost")
    with pytest.raises(UserError, match="exists"):
        distfl.run(out=out, overrides={"run.rounds": 2})
    assert out.read_bytes() == b"not to be lost"
    run = distfl.run(out=out, force=True, overrides={"run.rounds": 2, "run.progress": "none"})
    assert (run.round, run.rounds, run.finished) == (2, 2, True)
    with pytest.raises(UserError, match="exists"):  # a run file too
        distfl.run(out=out, overrides={"run.rounds": 2})
    assert distfl.open(out).round == 2


#: a small run for the launches on several ranks (and the same run alone)
RANKS_RUN = {"data.num_clients": 6, "server.clients_per_round": 4, "run.rounds": 6,
             "eval.every": 3, "run.progress": "none"}  # fmt: skip


def test_run_on_three_ranks_gives_the_bits_of_one_process(tmp_path):
    import h5py

    alone = distfl.run(preset="digits", overrides=RANKS_RUN, out=tmp_path / "w1.h5",
                       stream=io.StringIO())  # fmt: skip
    printed = io.StringIO()
    three = distfl.run(preset="digits", overrides=RANKS_RUN, out=tmp_path / "w3.h5",
                       world_size=3, stream=printed)  # fmt: skip
    assert isinstance(three, distfl.Run) and three.finished and three.path == tmp_path / "w3.h5"
    assert_same_run(alone.path, three.path)
    with h5py.File(three.path, "r") as f:
        assert f.attrs["world_size"] == 3
    assert "world size 3" in printed.getvalue()  # rank 0's summary, through stream
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w1.h5", "w3.h5"]


BROKEN = """
from distfl.datasets import DatasetSpec, register


@register
class Broken(DatasetSpec):
    name = "api_broken"
    source = "a loader that fails"
    num_classes = 3
    sample_shape = (2,)
    sample_bytes = 16
    num_samples = 600

    @classmethod
    def load(cls, config):
        raise RuntimeError("the disk went away")
"""


def test_a_failed_rank_raises_its_one_line_error(tmp_path, monkeypatch):
    from distfl.errors import RanksFailed
    from distfl.plugins import DATASETS

    (tmp_path / "broken.py").write_text(BROKEN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    overrides = {**RANKS_RUN, "run.plugins": ["broken.py"], "data.dataset": "api_broken"}
    try:
        with pytest.raises(RanksFailed) as info:
            distfl.run(preset="digits", overrides=overrides, out="run.h5", world_size=2)
    finally:
        DATASETS.remove("api_broken")
    assert str(info.value) == (
        f"the loader of data.dataset = 'api_broken' ({tmp_path / 'broken.py'}) raised "
        "RuntimeError: the disk went away; nothing was run; the traceback is in "
        "run.h5.traceback.txt"
    )
    assert (info.value.rank, info.value.exit_code) == (0, 1)
    assert "[rank 0] distfl: error: the loader" in info.value.output
    assert not (tmp_path / "run.h5").exists()


INTERRUPTED = """
import sys

import distfl

try:
    distfl.run(preset="digits", out="run.h5", world_size=2, overrides={
        "data.num_clients": 6, "server.clients_per_round": 4, "run.rounds": 5000,
        "eval.every": 1, "run.progress": "lines"})  # a line a round: each evaluates
except KeyboardInterrupt as exc:
    print(f"KeyboardInterrupt: {exc}", flush=True)
    sys.exit(7)
"""


def test_ctrl_c_stops_the_ranks_with_a_checkpoint(tmp_path, helpers):
    """SIGINT to the Python that called distfl.run(..., world_size=2) goes on to the ranks
    (each in a session of its own): they stop after the current round with a checkpoint,
    and the call raises KeyboardInterrupt saying where."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED], cwd=tmp_path, env=helpers.clean_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    out = helpers.LineReader(proc.stdout)
    try:
        assert out.wait_for(lambda line: line.startswith("round "), timeout=limit(300)), out.text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=limit(300)) == 7, out.text()
    finally:
        helpers.kill_tree([proc])
    said = out.text().splitlines()[-1]
    done = distfl.open(tmp_path / "run.h5")
    assert said == (
        f"KeyboardInterrupt: stopped after round {done.round} of 5000; the checkpoint is "
        "run.h5 (distfl run --resume run.h5 goes on)"
    )
    assert 1 <= done.round < 5000


PLUGIN = '''
from dataclasses import dataclass
from pathlib import Path

from distfl.algorithms import ClusteringAlgorithm, Params, RoundPlan, RoundUpdate, register

with open(Path(__file__).parent / "plugin-imported", "a") as marker:
    marker.write("imported\\n")


@dataclass(frozen=True)
class HalvesParams(Params):
    at_round: int = 1


@register
class Halves(ClusteringAlgorithm):
    """In round at_round the root splits into the first and the second half of the clients."""

    name = "api_halves"
    Params = HalvesParams

    def __init__(self, *, num_clients, clients_per_round, seed, at_round=1):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.at_round = at_round

    def plan(self, round_index):
        leaves = self.tree.leaves()
        return RoundPlan(round_index, {int(k): c for c, m in leaves.items() for k in m})

    def update(self, round_index, plan, reports):
        if round_index != self.at_round or not self.tree["0"].is_leaf:
            return RoundUpdate()
        members = self.tree.members("0")
        half = len(members) // 2
        children = {"0.0": members[:half], "0.1": members[half:]}
        return RoundUpdate(splits=[self.tree.split("0", children, round_index, {})])
'''


def test_open_never_imports_the_plugins_a_file_names(tmp_path, helpers):
    plugin = tmp_path / "api_halves.py"
    plugin.write_text(PLUGIN)
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--preset", "digits",
         "--set", f"run.plugins=[{str(plugin)!r}]", "--set", 'algorithm.name="api_halves"',
         "--set", "run.rounds=2", "--set", 'run.progress="none"', "--out", "halves.h5"],
        cwd=tmp_path, env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(300),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    marker = tmp_path / "plugin-imported"
    assert marker.exists()  # the run imported it
    marker.unlink()
    run = distfl.open(tmp_path / "halves.h5")
    assert run.algorithm == "api_halves" and run.config.run.plugins == (str(plugin),)
    assert [n.id for n in run.tree.values()] == ["0", "0.0", "0.1"]
    assert run.summary()["first_split"] == 1 and "api_halves" in repr(run)
    str(run.tree), run.metrics, run.clusters, run.clients  # noqa: B018
    assert not marker.exists()


# -- distfl.suite ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api-suite")
    scenario = tmp / "tiny.toml"
    scenario.write_text(TINY_TOML)
    args = dict(
        scenarios=[str(scenario)], algorithms="fedgwc,none", seeds=[0], out=str(tmp / "out"),
        overrides=SUITE_OVERRIDES,
    )  # fmt: skip
    stream = io.StringIO()
    table = distfl.suite(**args, stream=stream)
    return table, args, stream.getvalue()


def test_suite_returns_one_row_per_job(suite_run):
    table, args, printed = suite_run
    assert "2 of 2 runs finished" in printed
    assert list(table.columns if hasattr(table, "columns") else table.dtype.names) == [
        *COLUMNS,
        "file",
    ]
    assert len(table) == 2
    assert list(column(table, "algorithm")) == ["fedgwc", "fedavg"]  # none: its aggregator
    assert list(column(table, "scenario")) == ["tiny", "tiny"]
    assert list(column(table, "groups")) == [3, 3]
    written = json.loads((Path(args["out"]) / "suite.json").read_text())
    assert written["columns"] == list(COLUMNS)
    for i, row in enumerate(written["rows"]):
        for c in COLUMNS:
            mine = column(table, c)[i]
            if row[c] is None:
                assert isinstance(mine, float) and math.isnan(mine), c
            else:
                assert mine == row[c], c
        run = distfl.open(column(table, "file")[i])
        assert run.finished and run.round == 3
        assert run.summary()["rand"] == row["rand"]


# -- pandas ------------------------------------------------------------------------------

DATAFRAMES = textwrap.dedent(
    """
    import json, sys
    import pandas as pd
    import distfl

    run = distfl.open(sys.argv[1])
    out = {"tables": {}}
    for name in distfl.api.TABLES:
        df = run.table(name)
        assert isinstance(df, pd.DataFrame), name
        out["tables"][name] = {c: df[c].tolist() for c in df.columns}
    for name in ("clients", "metrics", "statistic"):
        df = run.statistic("mse") if name == "statistic" else getattr(run, name)
        assert isinstance(df, pd.DataFrame), name
    assert isinstance(run.tree.table(), pd.DataFrame)
    out["clients"] = {c: run.clients[c].tolist() for c in run.clients.columns}
    args = json.loads(sys.argv[2])
    table = distfl.suite(**args, stream=open("/dev/null", "w"))  # finished: kept
    assert isinstance(table, pd.DataFrame)
    out["suite"] = {c: table[c].tolist() for c in table.columns}
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(
    not (PANDAS / "pandas").is_dir(),
    reason=f"pandas is not installed in {PANDAS} (scripts/ensure_venv.sh installs it there)",
)
def test_tables_are_dataframes_with_pandas(default_run, suite_run, helpers):
    table, args, _ = suite_run
    proc = subprocess.run(
        [sys.executable, "-c", DATAFRAMES, str(default_run.path), json.dumps(args)],
        env=helpers.clean_env(PYTHONPATH=str(PANDAS)), capture_output=True, text=True,
        timeout=limit(300),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    stored = read_run(default_run.path, tops=("metrics", "timing"))
    for name, columns in got["tables"].items():
        path = layout.BY_KEY[name].path
        written = [k.split("/")[-1] for k in stored if "@" not in k and k.rsplit("/", 1)[0] == path]
        if not written and layout.BY_KEY[name].optional:  # (newcomers': only with them)
            assert columns == dict.fromkeys(layout.BY_KEY[name].names, []), name
            continue
        assert sorted(columns) == sorted(written), name
        declared = [c for c in layout.BY_KEY[name].names if c in written]
        assert list(columns)[: len(declared)] == declared, name
        for c, values in columns.items():
            want = stored[f"{path}/{c}"]
            if want.dtype.kind == "O":
                assert values == [v.decode() for v in want], c
            else:
                assert np.array_equal(np.asarray(values, want.dtype), want, equal_nan=True), c
    run = distfl.open(default_run.path)
    assert got["clients"]["cluster"] == list(run.assignment)
    assert got["clients"]["group"] == run.groups.tolist()
    assert list(got["suite"]) == [*COLUMNS, "file"]
    for c, values in got["suite"].items():
        want = column(table, c).tolist()
        assert [None if isinstance(v, float) and math.isnan(v) else v for v in values] == [
            None if isinstance(v, float) and math.isnan(v) else v for v in want
        ], c
