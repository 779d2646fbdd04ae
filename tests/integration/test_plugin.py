"""An algorithm added in one file: this test file defines a toy clustering algorithm and its
client half, registers it, and runs it through ``run.plugins`` alone (W=1), under torchrun
(W=3, gloo) and under mpiexec (W=3): the same bits every time, and the probe's rows, which
the runtime carries without reading them, are what the client half computed.

The toy: in round 1 every client answers the probe "describe" with [its id, its train
samples, the squared norm of the broadcast model + the probe's argument]; every client
trains every round; in round ``split_round`` the root splits into the even and the odd
clients. (Nothing else in the package names it.)
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from distfl.algorithms import (
    ClientHalf,
    ClientReports,
    ClusteringAlgorithm,
    Params,
    ProbeRequest,
    RoundPlan,
    RoundUpdate,
    register,
    require,
)

pytestmark = pytest.mark.integration

ARGUMENT = 7


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


@register
class ToyParity(ClusteringAlgorithm):
    name = "toy_parity"
    Params = ToyParams
    client_ops = ("describe",)
    client = ToyClient

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


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("plugin")
    bin_dir = Path(sys.executable).parent
    cmds = {
        "w1": [sys.executable, "-m", "distfl", "run"],
        "torchrun3": [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
                      "-m", "distfl", "run", "--comm", "torch"],
        "mpiexec3": [str(bin_dir / "mpiexec"), "-n", "3", sys.executable, "-m", "distfl", "run",
                     "--comm", "mpi"],
    }  # fmt: skip
    procs = {
        name: subprocess.Popen(
            [*cmd, *ARGS, "--out", str(tmp / f"{name}.h5")],
            cwd=tmp,
            env=helpers.clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for name, cmd in cmds.items()
    }
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}:\n{out}"
    return {name: tmp / f"{name}.h5" for name in cmds}


@pytest.mark.parametrize("world", ["torchrun3", "mpiexec3"])
def test_the_toy_gives_the_same_bits_on_every_world(runs, world):
    from runfile import assert_same_run

    assert_same_run(runs["w1"], runs[world])


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


def readme_plugin() -> str:
    """The example algorithm of README.md's "Adding an algorithm", exactly as written."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Adding an algorithm") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_the_readme_example_runs_as_its_first_line_says(tmp_path, helpers):
    import h5py

    code = readme_plugin()
    first = code.splitlines()[0]
    assert first.startswith("# median_split.py: distfl run ")
    (tmp_path / "median_split.py").write_text(code)
    command = first.split(": ", 1)[1].split()[2:]  # the arguments after "distfl run"
    args = [a.strip("'") for a in command]
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", *args, "--preset", "digits",
         "--set", "run.rounds=3", "--set", "algorithm.at_round=2",
         "--set", 'run.progress="none"', "--out", "median.h5"],
        cwd=tmp_path, env=helpers.clean_env(), capture_output=True, text=True, timeout=120,
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
    import json

    (tmp_path / "median_split.py").write_text(readme_plugin())
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "suite", "rotated", "--algorithms", "median_split,none",
         "--set", "run.plugins=['median_split.py']", "--set", "algorithm.at_round=2",
         "--set", "run.rounds=3", "--set", "data.samples_per_client=40", "--out", "suite"],
        cwd=tmp_path, env=helpers.clean_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "suite" / "suite.json").read_text())["rows"]
    by_algorithm = {r["algorithm"]: r for r in rows}
    assert by_algorithm["median_split"]["clusters"] == 2  # at_round went to it alone
    assert by_algorithm["fedavg"]["clusters"] == 1
    report = subprocess.run(
        [sys.executable, "-m", "distfl", "report", "suite"], cwd=tmp_path,
        env=helpers.clean_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "suite" / "report" / "index.html").read_text()
    assert "median_split" in page


def test_a_report_of_the_toy_run(runs, helpers, tmp_path):
    """The toy records per-cluster "mse" like FedGWC but has none of FedGWC's settings: the
    figure is drawn without the ε line."""
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "report", str(runs["w1"]), "--out", str(tmp_path / "r")],
        env=helpers.clean_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "mse.png").exists()
    assert "once it stays below" not in (tmp_path / "r" / "index.html").read_text()
