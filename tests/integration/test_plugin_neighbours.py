"""Plug-ins that import their neighbours, in every rank: an algorithm given as a file
(``plug/nb_algo.py``, beside which lie the module it imports as it loads, ``nb_rules.py``,
and its client half, ``nb_client.py``, named ``"nb_client:Parity"`` and imported by the
workers when they first probe) and a dataset given as a module name (``nb_pkg.data``, a
package in the directory the run starts in, without PYTHONPATH). One run names both, from
the directory above ``plug/``: alone through the ``distfl`` command (whose Python does not
search the current directory by itself) and under torchrun with three ranks; the two files
hold the same bits, and the split is the one the neighbours compute."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ALGORITHM = '''
from nb_rules import by_parity  # beside this file

from distfl.algorithms import ClusteringAlgorithm, ProbeRequest, RoundPlan, RoundUpdate, register


@register
class NeighbourParity(ClusteringAlgorithm):
    """Round 1 asks each client its parity (the client half beside this file); in round 2
    the root splits into the even and the odd clients (the rule beside this file)."""

    name = "nb_parity"
    client = "nb_client:Parity"
    client_ops = ("parity",)

    def plan_probe(self, round_index):
        if round_index != 1:
            return None
        return ProbeRequest(self.tree.members("0"), ["0"], op="parity", width=1)

    def update_probe(self, round_index, request, rows):
        self.parity = rows[:, 0]

    def plan(self, round_index):
        leaves = self.tree.leaves()
        return RoundPlan(round_index, {int(k): c for c, m in leaves.items() for k in m})

    def update(self, round_index, plan, reports):
        if round_index != 2:
            return RoundUpdate()
        children = by_parity(self.tree.members("0"), self.parity)
        return RoundUpdate(splits=[self.tree.split("0", children, round_index, {})])
'''
RULES = """
def by_parity(members, parity):
    return {"0.0": members[parity == 0], "0.1": members[parity == 1]}
"""
CLIENT = """
import numpy as np

from distfl.algorithms import ClientHalf


class Parity(ClientHalf):
    def run(self, op, client, models, args):
        return np.array([client % 2], dtype=np.float64)
"""
DATASET = """
import numpy as np

from distfl.data.dataset import Dataset
from distfl.datasets import DatasetSpec, register


@register
class NeighbourBlobs(DatasetSpec):
    name = "nb_blobs"
    source = "generated (numpy, seed 0)"
    num_classes = 3
    sample_shape = (2,)
    sample_bytes = 2 * 4 + 8
    num_samples = 300

    @classmethod
    def load(cls, config):
        y = np.repeat(np.arange(3), 100)
        x = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])[y]
        x = x + np.random.default_rng(0).standard_normal((300, 2))
        return Dataset(name=cls.name, x=x.astype(np.float32), y=y, num_classes=3)
"""
ARGS = [
    "--set", 'run.plugins=["plug/nb_algo.py", "nb_pkg.data"]',
    "--set", 'algorithm.name="nb_parity"', "--set", 'data.dataset="nb_blobs"',
    "--set", "data.num_clients=6", "--set", "data.samples_per_client=30",
    "--set", "data.groups=[{count = 6, alpha = 1000.0}]",
    "--set", "server.clients_per_round=6", "--set", "run.rounds=3",
    "--set", 'run.progress="none"',
]  # fmt: skip


def write_plugins(root: Path) -> None:
    (root / "plug").mkdir()
    (root / "plug" / "nb_algo.py").write_text(ALGORITHM)
    (root / "plug" / "nb_rules.py").write_text(RULES)
    (root / "plug" / "nb_client.py").write_text(CLIENT)
    (root / "nb_pkg").mkdir()
    (root / "nb_pkg" / "__init__.py").write_text("")
    (root / "nb_pkg" / "data.py").write_text(DATASET)


def test_plugins_find_their_neighbours_alone_and_under_torchrun(tmp_path, helpers):
    import h5py
    from runfile import assert_same_run

    write_plugins(tmp_path)
    distfl_command = Path(sys.executable).parent / "distfl"
    helpers.launch_together(
        {
            "alone": [str(distfl_command), "run", *ARGS, "--out", "w1.h5"],
            "torchrun": [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node",
                         "3", "-m", "distfl", "run", *ARGS, "--out", "w3.h5"],
        },
        tmp_path,
    )  # fmt: skip
    assert_same_run(tmp_path / "w1.h5", tmp_path / "w3.h5")
    with h5py.File(tmp_path / "w3.h5", "r") as f:
        assert f.attrs["world_size"] == 3
        assert int(f["hierarchy/0"].attrs["split_round"]) == 2
        assert f["hierarchy/0.0/members"][()].tolist() == [0, 2, 4]
        assert f["hierarchy/0.1/members"][()].tolist() == [1, 3, 5]
