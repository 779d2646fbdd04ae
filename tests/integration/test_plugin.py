"""An algorithm added in one file: this test file defines a toy clustering algorithm, its
client half and a report figure of its own, registers it, and runs it through
``run.plugins`` alone (W=1, the code of ``distfl run`` in the test's process), under
torchrun (W=3, gloo) and under mpiexec (W=3): the same bits every time, and the probe's
rows, which the runtime carries without reading them, are what the client half computed.

The toy: in round 1 every client answers the probe "describe" with [its id, its train
samples, the squared norm of the broadcast model + the probe's argument]; every client
trains every round; in round ``split_round`` the root splits into the even and the odd
clients. Each round it records per cluster "mse" (the round's number: a statistic of
FedGWC's name, drawn by FedGWC's figure) and "parity_gap", a statistic of its own (the mean
last-step loss of the cluster's even clients minus its odd clients', for a cluster holding
both): a column of /metrics/clusters of its own, drawn by the toy's own figure when a
report imports the plug-in (``--trust-plugins``) and by the report's generic per-cluster
plot when it does not. (Nothing else in the package names it.)

Its server work goes through its pool, with functions of its own: each round "loss_square",
the sum of the squared last losses of its clients, one piece per client (computed by the
worker ranks under torchrun and mpiexec), and in round 3 a map whose odd pieces raise,
which it records as "pool_failed" and carries on.

It has two tables of its own (``tables``): "client_loss", one row per client that trained
(its last loss and its local steps), and "loss_gaps", one row per pair of the round's first
PAIRED clients (the difference of their last losses), at /metrics/tables/<name>: the same
bits on every world, carried on by a resume.
"""

from __future__ import annotations

import html
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from distfl.algorithms import (
    ClientHalf,
    ClientReports,
    ClusteringAlgorithm,
    Column,
    Params,
    PooledTaskFailed,
    ProbeRequest,
    RecordTable,
    ReportFigure,
    RoundPlan,
    RoundUpdate,
    pooled,
    register,
    require,
)

pytestmark = pytest.mark.integration


def limit(seconds: float) -> float:
    """tests/timing.py's limit, imported when called: distfl imports this file as a plug-in,
    in processes where tests/ is not on the path."""
    from timing import limit as scaled

    return scaled(seconds)


ARGUMENT = 7
PAIRED = 4  # the toy's table of pairs holds the pairs of the first 4 clients of each round


@dataclass(frozen=True)
class ToyParams(Params):
    split_round: int = 2

    def check(self, config) -> None:
        require(self.split_round >= 1, "split_round", self.split_round, "at least 1")


class ToyClient(ClientHalf):
    def run(self, op, client, models, args):
        if op != "describe":
            return super().run(op, client, models, args)
        data = self.context.data(client)
        norm2 = float(models[0].double().pow(2).sum())
        return np.array([client, data.num_train, norm2 + args[0]], dtype=np.float64)


def parity_gap(members: np.ndarray, reports: ClientReports) -> float | None:
    """The mean last-step loss of the even ``members`` minus that of the odd ones; None
    unless the cluster holds both."""
    last = dict(zip(reports.clients.tolist(), reports.losses[:, -1].tolist(), strict=True))
    even = [last[int(k)] for k in members if k % 2 == 0]
    odd = [last[int(k)] for k in members if k % 2 == 1]
    if not even or not odd:
        return None
    return float(np.mean(even) - np.mean(odd))


@pooled
def square_piece(payload, i):
    """Piece i of the toy's pooled work: the square of loss i."""
    return [payload["losses"][i] ** 2]


@pooled
def odd_pieces_raise(payload, i):
    if i % 2:
        raise FloatingPointError(f"piece {i} of the toy fails on purpose")
    return [float(i)]


PARITY_CAPTION = "The toy's own figure: the parity gap of each cluster that holds both parities."


def parity_figure(data, palette):
    """The toy's figure in ``distfl report``: its parity gap per cluster over rounds."""
    from matplotlib.figure import Figure

    from distfl.runfile.view import series

    per_cluster = series(data.cluster_metrics, "parity_gap")
    if not per_cluster:
        return None
    fig = Figure(figsize=(6, 4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for cid, (rounds, values) in per_cluster.items():
        ax.plot(rounds, values, color=palette.of(cid), marker="o", label=cid)
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel("even minus odd clients' last loss")
    ax.legend(title="cluster")
    ax.set_title("Parity gap")
    return fig, PARITY_CAPTION


@register
class ToyParity(ClusteringAlgorithm):
    name = "toy_parity"
    Params = ToyParams
    client_ops = ("describe",)
    client = ToyClient
    figures = (ReportFigure("Parity", "parity.png", parity_figure, stats=("parity_gap",)),)
    tables = (
        RecordTable("client_loss", "client", (
            Column("last_loss", "float", "the client's last local step's loss"),
            Column("steps", "int", "its local steps"),
        ), "each client that trained"),
        RecordTable("loss_gaps", "pair", (
            Column("gap", "float", "the first client's last loss minus the other's"),
        ), "each pair of the first PAIRED clients"),
    )  # fmt: skip

    def __init__(self, *, num_clients, clients_per_round, seed, split_round=2):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.split_round = split_round
        self.described = np.zeros((0, 3))

    def plan_probe(self, round_index):
        if round_index != 1:
            return None
        clients = np.arange(self.num_clients, dtype=np.int64)
        return ProbeRequest(clients, ["0"], op="describe", width=3, args=(ARGUMENT,))

    def update_probe(self, round_index, request, rows):
        self.described = np.asarray(rows, dtype=np.float64)

    def plan(self, round_index):
        leaves = self.tree.leaves()
        return RoundPlan(round_index, {int(k): c for c, m in leaves.items() for k in m})

    def update(self, round_index, plan: RoundPlan, reports: ClientReports) -> RoundUpdate:
        out = RoundUpdate(stats={cid: {"mse": float(round_index)} for cid in plan.clusters()})
        for cid in plan.clusters():
            gap = parity_gap(self.tree.members(cid), reports)
            if gap is not None:  # a cluster of one parity records none: NaN in its rows
                out.stats[cid]["parity_gap"] = gap
        last = np.ascontiguousarray(reports.losses[:, -1])
        squares = self.pool.map(square_piece, {"losses": last}, len(last), 1)
        out.stats[plan.clusters()[0]]["loss_square"] = float(squares.sum())
        if round_index == 3:
            try:
                self.pool.map(odd_pieces_raise, {}, 4, 1)
            except PooledTaskFailed:
                out.stats[plan.clusters()[0]]["pool_failed"] = 1.0
        steps = np.full(len(reports.clients), reports.losses.shape[1])
        out.rows["client_loss"] = {"client": reports.clients, "last_loss": last, "steps": steps}
        a, b = np.triu_indices(PAIRED, k=1)
        out.rows["loss_gaps"] = {"client": reports.clients[a], "other": reports.clients[b],
                                 "gap": last[a] - last[b]}  # fmt: skip
        if round_index == self.split_round and self.tree["0"].is_leaf:
            members = self.tree.members("0")
            children = {"0.0": members[members % 2 == 0], "0.1": members[members % 2 == 1]}
            info = {"labels": (members % 2).astype(np.int64)}
            out.splits.append(self.tree.split("0", children, round_index, info))
        return out

    def state_dict(self):
        return {"described": self.described}

    def load_state_dict(self, state):
        self.described = np.asarray(state["described"], dtype=np.float64)


K = 12
ROUNDS = 4
ARGS = (
    "--preset", "digits",
    "--set", f"run.plugins=[{str(Path(__file__).resolve())!r}]",
    "--set", 'algorithm.name="toy_parity"',
    "--set", "algorithm.split_round=2",
    "--set", f"data.num_clients={K}",
    "--set", f"server.clients_per_round={K}",
    "--set", "model.hidden=[8]",
    "--set", f"run.rounds={ROUNDS}",
    "--set", "eval.every=2",
    "--set", 'run.progress="none"',
)  # fmt: skip


def toy_in_process(helpers, cwd, *args: str):
    """``distfl ARGS`` in this process (``helpers.cli``), which imports this file as the
    plug-in that ``run.plugins`` names, its toy registering under another module's name; the
    toy of this module is registered again after it (the test of the registry's figures
    compares with it)."""
    with helpers.plugins_forgotten():
        return helpers.cli(cwd, *args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    """The toy's run at W=1 (the code of ``distfl run``, in this process) while the same run
    goes on under torchrun and under mpiexec, each started as processes beside it."""
    tmp = tmp_path_factory.mktemp("plugin")
    bin_dir = Path(sys.executable).parent
    cmds = {
        "torchrun3": [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
                      "-m", "distfl", "run", "--comm", "torch"],
        "mpiexec3": [str(bin_dir / "mpiexec"), "-n", "3", sys.executable, "-m", "distfl", "run",
                     "--comm", "mpi"],
    }  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:  # the worlds, while this process runs W=1
        worlds = pool.submit(helpers.launch_together, {
            name: [*cmd, *ARGS, "--out", str(tmp / f"{name}.h5")] for name, cmd in cmds.items()
        }, tmp)  # fmt: skip
        alone = toy_in_process(helpers, tmp, "run", *ARGS, "--out", str(tmp / "w1.h5"))
        worlds.result()
    assert alone.returncode == 0, alone.stdout + alone.stderr
    return {name: tmp / f"{name}.h5" for name in ("w1", *cmds)}


@pytest.mark.parametrize("world", ["torchrun3", "mpiexec3"])
def test_the_toy_gives_the_same_bits_on_every_world(runs, world):
    from runfile import assert_same_run, read_run

    assert "metrics/clusters/parity_gap" in read_run(runs[world], tops=("metrics",))
    assert_same_run(runs["w1"], runs[world])


def test_the_pooled_pieces_ran_on_the_workers(runs):
    """In one process rank 0 computes every piece (K a round, 4 more in round 3); over 3
    ranks the two workers share them and rank 0 computes none."""
    import h5py

    def pooled(path):
        with h5py.File(path, "r") as f:
            w = f["timing/workers"]
            ranks, rounds, n = w["rank"][()], w["round"][()], w["pooled"][()]
        return {(int(t), int(r)): int(c) for t, r, c in zip(rounds, ranks, n, strict=True)}

    assert pooled(runs["w1"]) == {(1, 0): K, (2, 0): K, (3, 0): K + 4, (4, 0): K}
    for world in ("torchrun3", "mpiexec3"):
        got = pooled(runs[world])
        assert {k: v for k, v in got.items() if k[1] == 0} == {}
        for t in range(1, ROUNDS + 1):
            assert got[(t, 1)] + got[(t, 2)] == (K + 4 if t == 3 else K)
            assert got[(t, 1)] == got[(t, 2)]  # K = 12 and 4 pieces share evenly


def test_the_toy_split_and_its_stats_are_in_the_run_file(runs):
    import h5py

    with h5py.File(runs["w1"], "r") as f:
        root = f["hierarchy/0"]
        assert int(root.attrs["split_round"]) == 2
        assert f["hierarchy/0.0/members"][()].tolist() == list(range(0, K, 2))
        assert f["hierarchy/0.1/members"][()].tolist() == list(range(1, K, 2))
        assert root["labels"][()].tolist() == [k % 2 for k in range(K)]
        assert [x.decode() for x in f["final/leaves"][()]] == ["0.0", "0.1"]
        clusters = f["metrics/clusters"]
        rounds, mse = clusters["round"][()], clusters["mse"][()]
        assert rounds.tolist() == [1, 2, 3, 3, 4, 4]  # the split parent trained in round 2
        assert mse.tolist() == [float(r) for r in rounds]
        assert f["metrics/num_clusters"][()].tolist() == [1, 2, 2, 2]
        # the toy's own statistic: a column of its own, finite where the cluster held both
        # parities (the root, rounds 1 and 2), NaN in the rows of the one-parity children
        gap = clusters["parity_gap"]
        assert gap.dtype == np.float64 and gap.shape == rounds.shape
        assert np.isfinite(gap[()]).tolist() == [True, True, False, False, False, False]
        # the pooled statistics: every round's sum of squared last losses, in the first
        # cluster's row; the failed map of round 3, recorded
        with_sum = np.isfinite(clusters["loss_square"][()])
        assert rounds[with_sum].tolist() == [1, 2, 3, 4]
        assert (clusters["loss_square"][with_sum] > 0).all()
        failed = clusters["pool_failed"][()]
        assert rounds[np.isfinite(failed)].tolist() == [3] and np.nansum(failed) == 1.0
        # the statistics of the first algorithms are written for every run, NaN here
        assert np.isnan(clusters["mean_norm"][()]).all() and len(clusters["p_within"]) == 6


def test_the_toys_own_tables_are_in_the_run_file(runs):
    """Its table per client holds every client of every round, and the mean of its last
    losses in a round is /metrics/train_loss_last, which the runtime computes apart; its
    table per pair holds, each round, the pairs of the first PAIRED clients and the
    difference of their rows in the table per client. distfl.open gives both in the
    declared column order."""
    import h5py

    import distfl

    with h5py.File(runs["w1"], "r") as f:
        per_client = {k: v[()] for k, v in f["metrics/tables/client_loss"].items()}
        pairs = {k: v[()] for k, v in f["metrics/tables/loss_gaps"].items()}
        train_loss_last = f["metrics/train_loss_last"][()]
    assert per_client["round"].tolist() == [t for t in range(1, ROUNDS + 1) for _ in range(K)]
    assert per_client["client"].tolist() == list(range(K)) * ROUNDS
    steps = distfl.open(runs["w1"]).config.train.local_steps
    assert per_client["steps"].dtype == np.int64 and set(per_client["steps"]) == {steps}
    for t in range(1, ROUNDS + 1):
        mine = per_client["last_loss"][per_client["round"] == t]
        assert mine.mean() == pytest.approx(train_loss_last[t - 1], rel=1e-12)
    a, b = np.triu_indices(PAIRED, k=1)
    assert len(pairs["round"]) == ROUNDS * len(a)
    assert pairs["client"].tolist() == a.tolist() * ROUNDS
    assert pairs["other"].tolist() == b.tolist() * ROUNDS
    last = per_client["last_loss"].reshape(ROUNDS, K)
    want = (last[:, a] - last[:, b]).ravel()
    np.testing.assert_array_equal(pairs["gap"], want)
    run = distfl.open(runs["w1"])
    assert run.own_tables == ["client_loss", "loss_gaps"]
    table = run.table("loss_gaps")
    names = list(table.columns) if hasattr(table, "columns") else list(table.dtype.names)
    assert names == ["round", "client", "other", "gap"]
    with pytest.raises(KeyError, match="tables: metrics, .*client_loss, loss_gaps"):
        run.table("nope")


def test_the_probe_rows_are_what_the_client_half_computed(runs):
    import h5py
    import torch

    from distfl.config import from_json
    from distfl.data import load_dataset
    from distfl.models import build_model, flat_params

    with h5py.File(runs["w1"], "r") as f:
        described = f["state/algorithm/described"][()]
        num_train = f["clients/num_train"][()]
        config = from_json(f.attrs["config"])
        bytes_round = f["metrics/federation_bytes"][()]
    dataset = load_dataset(config)
    torch.manual_seed(config.run.seed)  # the run's initial model, as the server builds it
    model = build_model("mlp", dataset.input_shape, dataset.num_classes, hidden=(8,))
    init = flat_params(model).double()
    P = init.numel()
    assert described.shape == (K, 3)
    assert described[:, 0].tolist() == list(range(K))
    assert described[:, 1].tolist() == num_train.tolist()
    np.testing.assert_array_equal(described[:, 2], float(init.pow(2).sum()) + ARGUMENT)
    # the probe's traffic by the default rule: each client downloads the one model and
    # uploads its row of 3 float64 (round 1 probes, round 3 does not; neither evaluates)
    assert bytes_round[0] - bytes_round[2] == K * (4 * P + 3 * 8)


def docs_plugin() -> str:
    """The example algorithm of docs/adding-an-algorithm.md, exactly as written."""
    page = Path(__file__).resolve().parents[2] / "docs" / "adding-an-algorithm.md"
    section = page.read_text(encoding="utf-8")
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def median_split_in_process(helpers, cwd, *args: str):
    """``distfl ARGS`` in this process (``helpers.cli``), for a command that imports the docs'
    median_split.py from ``cwd`` (run.plugins): the plug-in is forgotten after it (another
    test's file of the same name may register next)."""
    with helpers.plugins_forgotten():
        return helpers.cli(cwd, *args)


def test_the_docs_example_runs_as_its_first_line_says(tmp_path, helpers):
    """The command of the example's first line (the code of ``distfl run``, in this
    process) with a short run of its algorithm."""
    import h5py

    code = docs_plugin()
    first = code.splitlines()[0]
    assert first.startswith("# median_split.py: distfl run ")
    (tmp_path / "median_split.py").write_text(code)
    command = first.split(": ", 1)[1].split()[2:]  # the arguments after "distfl run"
    args = [a.strip("'") for a in command]
    proc = median_split_in_process(
        helpers, tmp_path, "run", *args, "--preset", "digits", "--set", "run.rounds=3",
        "--set", "algorithm.at_round=2", "--set", 'run.progress="none"', "--out", "median.h5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with h5py.File(tmp_path / "median.h5", "r") as f:
        assert int(f["hierarchy/0"].attrs["split_round"]) == 2
        last = f["hierarchy/0/last_loss"][()]
        low = f["hierarchy/0.0/members"][()]
        high = f["hierarchy/0.1/members"][()]
        assert sorted([*low, *high]) == list(range(20))
        assert last[low].max() <= np.median(last) < last[high].min()


def test_a_suite_of_an_algorithm_of_ones_own(tmp_path, helpers):
    """``distfl suite`` and ``distfl report`` (their code, in this process: the suite's runs
    are processes of their own, each importing the plug-in)."""
    import json

    (tmp_path / "median_split.py").write_text(docs_plugin())
    proc = median_split_in_process(
        helpers, tmp_path, "suite", "rotated", "--algorithms", "median_split,none",
        "--set", "run.plugins=['median_split.py']", "--set", "algorithm.at_round=2",
        "--set", "run.rounds=3", "--set", "data.samples_per_client=40", "--out", "suite",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "suite" / "suite.json").read_text())["rows"]
    by_algorithm = {r["algorithm"]: r for r in rows}
    assert by_algorithm["median_split"]["clusters"] == 2  # at_round went to it alone
    assert by_algorithm["fedavg"]["clusters"] == 1
    report = helpers.cli(tmp_path, "report", "suite")  # imports no plug-in
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "suite" / "report" / "index.html").read_text()
    assert "median_split" in page


def report(helpers, run_file: Path, out: Path, *more: str) -> set[str]:
    """``distfl report RUN --out OUT [more]``; the figures it wrote (each shown on the
    page)."""
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "report", str(run_file), "--out", str(out), *more],
        env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(300),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    written = {p.name for p in out.glob("*.png")}
    page = (out / "index.html").read_text(encoding="utf-8")
    assert all(f'src="{name}"' in page for name in written)
    return written


def test_a_report_of_the_toy_run(runs, helpers, tmp_path):
    """Without --trust-plugins nothing the file names is imported: the toy's own figure
    cannot be drawn, but its statistic is, from the file alone, by the report's per-cluster
    plot. The toy records per-cluster "mse" like FedGWC but has none of FedGWC's settings:
    FedGWC's figure draws it without the ε line."""
    out = tmp_path / "r"
    written = report(helpers, runs["w1"], out)
    assert {"mse.png", "stat-parity_gap.png"} <= written
    assert "parity.png" not in written and "stat-mse.png" not in written
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "once it stays below" not in page
    assert "/metrics/clusters/parity_gap" in page and html.escape(PARITY_CAPTION) not in page


def test_a_report_that_trusts_the_plugin_draws_its_own_figure(runs, helpers, tmp_path):
    """With --trust-plugins the report imports the toy (run.plugins): its own figure draws
    its statistic, which the generic plot then leaves alone (it still draws the pooled
    statistics, which no figure of the toy claims)."""
    out = tmp_path / "r"
    written = report(helpers, runs["w1"], out, "--trust-plugins")
    assert {"mse.png", "parity.png"} <= written
    stats = {name for name in written if name.startswith("stat-")}
    assert stats == {"stat-loss_square.png", "stat-pool_failed.png"}
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "<h2>Parity</h2>" in page and html.escape(PARITY_CAPTION) in page


def test_a_registered_algorithms_figure_is_drawn_in_process(runs, tmp_path):
    """The toy is registered in this process (this module is imported): write_run_report
    finds its figure through the registry, as it finds the package's algorithms'."""
    from distfl.algorithms import report_figures
    from distfl.report import write_run_report

    listed = report_figures("toy_parity")  # the run's algorithm's figures first
    assert listed[0] == ("toy_parity", ToyParity.figures[0])
    assert [f.file for name, f in listed if name == "toy_parity"] == ["parity.png"]
    index = write_run_report(runs["w1"], tmp_path / "r")
    written = {p.name for p in (tmp_path / "r").glob("*.png")}
    assert {"parity.png", "mse.png", "accuracy.png", "tree.png", "classes.png"} <= written
    assert "stat-parity_gap.png" not in written
    assert html.escape(PARITY_CAPTION) in index.read_text(encoding="utf-8")


def test_a_resumed_toy_run_carries_its_statistic_on(runs, helpers, tmp_path):
    """Two rounds, then resumed to four (each the code of ``distfl run``, in this process):
    the same bits as the four rounds in one go, its own statistic's column and its own
    tables included."""
    from runfile import assert_same_run

    plugin = ["--set", f"run.plugins=[{str(Path(__file__).resolve())!r}]"]
    first = [*ARGS, "--set", "run.rounds=2", "--out", "part.h5"]
    more = ["--resume", "part.h5", *plugin, "--set", f"run.rounds={ROUNDS}"]
    for args in (first, more):
        proc = toy_in_process(helpers, tmp_path, "run", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_same_run(tmp_path / "part.h5", runs["w1"])
