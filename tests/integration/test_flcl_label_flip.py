"""FLCL on the FLCL paper's output-heterogeneity experiment (section V, Fig. 2): 20 clients of
the binary Gaussian mixture, 6 of them label-flipped, a linear model and the hinge loss.
One FedAvg model cannot serve both sides; FLCL's regret-driven decomposition gives every
client a cluster model with a far lower test loss, for seeds 0, 1 and 2 (real
``python -m distfl run`` processes, one process each)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from distfl import config as C
from distfl.data import load_clients, load_dataset, make_partition

pytestmark = pytest.mark.integration

SEEDS = (0, 1, 2)

FEDERATION = [
    'data.dataset="gaussian"',
    "data.num_clients=20",
    "data.groups=[{count=14, alpha=1.0}, {count=6, alpha=1.0, permute_labels=true}]",
    "model.hidden=[]",
    'train.loss="hinge"',
    "server.clients_per_round=20",
    "run.rounds=100",
    "eval.every=50",
    'run.progress="none"',
]

FLCL = [
    'algorithm.name="flcl"',
    "algorithm.flcl_eta=0.9",
    "algorithm.flcl_delta=3.0",
    "algorithm.flcl_period=5",
    'algorithm.flcl_expel="preference"',
]


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    """Run files of FedAvg and FLCL for each seed (in this process: helpers.run_alone, the
    code of ``distfl run``), and an FLCL run of 52 rounds resumed by ``distfl run``."""
    tmp = tmp_path_factory.mktemp("flcl")
    outs = {}
    for seed in SEEDS:
        for name, extra in (("fedavg", ['algorithm.name="none"']), ("flcl", FLCL)):
            outs[name, seed] = tmp / f"{name}-{seed}.h5"
            args = _sets([*FEDERATION, f"run.seed={seed}", *extra])
            helpers.run_alone(tmp, "--out", str(outs[name, seed]), *args)
    # the same FLCL run stopped after round 52 (after the root's split, while a child is
    # expelling), to be resumed
    out = outs["part", 0] = tmp / "flcl-part.h5"
    helpers.run_alone(
        tmp, "--out", str(out), *_sets([*FEDERATION, "run.seed=0", "run.rounds=52", *FLCL])
    )
    proc = helpers.cli(tmp, "run", "--resume", str(out), "--set", "run.rounds=100")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return outs


def final_test_loss(path) -> float:
    with h5py.File(path, "r") as f:
        return float(f["metrics/test_loss"][-1])


def test_flcl_beats_fedavg_on_the_label_flipped_federation(runs):
    for seed in SEEDS:
        fedavg = final_test_loss(runs["fedavg", seed])
        flcl = final_test_loss(runs["flcl", seed])
        print(f"seed {seed}: test hinge loss FedAvg {fedavg:.4f}, FLCL {flcl:.4f}")
        # measured: FedAvg 0.685, 0.853, 0.844; FLCL 0.182, 0.147, 0.123
        assert flcl < 0.5 * fedavg, (seed, fedavg, flcl)


def test_flcl_trains_every_client_and_decomposes(runs):
    for seed in SEEDS:
        with h5py.File(runs["flcl", seed], "r") as f:
            assert (f["metrics/num_participants"][()] == 20).all()  # no sampling
            assert f["hierarchy/0"].attrs["split_round"] > 0
            assert len(f["final/leaves"]) >= 2
            root = f["hierarchy/0"]
            labels = root["labels"][()]
            expelled_at = root["expelled_at"][()]
            # the expelled set is the second child, expelled one client per check
            assert sorted(root["members"][()][labels == 1]) == sorted(f["hierarchy/0.1/members"])
            assert (expelled_at[labels == 1] > 0).all() and (expelled_at[labels == 0] == -1).all()
            assert len(set(expelled_at[labels == 1].tolist())) == int(labels.sum())
            lam = root["combination"][()]
            assert lam[labels == 1].sum() == 0.0 and lam.sum() == pytest.approx(1.0)


def test_the_recorded_test_loss_is_the_hinge_loss_of_the_cluster_models(runs):
    """/metrics/test_loss recomputed from the run file: each client's leaf model (a linear
    model: weights [2, d], then biases [2]) on its test split, hinge loss of the margin
    (2y − 1)(z1 − z0), averaged over clients."""
    path = runs["flcl", 0]
    with h5py.File(path, "r") as f:
        cfg = C.from_json(f.attrs["config"])
        models = f["final/models"][()].astype(np.float64)
        assignment = f["final/assignment"][()]
        recorded = float(f["metrics/test_loss"][-1])
        assert json.loads(f.attrs["config"])["train"]["loss"] == "hinge"
    import torch

    dataset = load_dataset(cfg)
    part = make_partition(cfg, dataset)
    K, d = cfg.data.num_clients, cfg.data.dim
    data = load_clients(dataset, part, range(K), torch.device("cpu"), groups=cfg.groups,
                        seed=cfg.run.seed)  # fmt: skip
    losses = []
    for k in range(K):
        theta = models[assignment[k]]
        W, b = theta[: 2 * d].reshape(2, d), theta[2 * d :]
        x = data[k].x_test.numpy().astype(np.float64)
        y = data[k].y_test.numpy()
        z = x @ W.T + b
        margin = (2 * y - 1) * (z[:, 1] - z[:, 0])
        losses.append(np.maximum(0.0, 1.0 - margin).mean())
    assert recorded == pytest.approx(float(np.mean(losses)), rel=1e-5)


def test_a_resumed_run_ends_with_the_same_bits(runs):
    """Stopped after round 52 and resumed: the models, the hierarchy, the algorithm's state
    and the training losses of every round equal the uninterrupted run's (the stopped run
    also evaluated round 52, its last round then, so the evaluation columns differ there)."""
    with h5py.File(runs["flcl", 0], "r") as a, h5py.File(runs["part", 0], "r") as b:
        assert np.array_equal(a["final/models"][()], b["final/models"][()])
        assert list(a["final/leaves"]) == list(b["final/leaves"])
        assert sorted(a["hierarchy"]) == sorted(b["hierarchy"]) and len(a["hierarchy"]) >= 3
        for name in ("round", "num_clusters", "num_splits", "train_loss_first", "train_loss_last"):
            assert np.array_equal(a["metrics"][name][()], b["metrics"][name][()]), name

        def same(g, h):
            assert sorted(g) == sorted(h) and dict(g.attrs) == dict(h.attrs)
            for key in g:
                if isinstance(g[key], h5py.Group):
                    same(g[key], h[key])
                else:
                    assert np.array_equal(g[key][()], h[key][()]), g[key].name

        same(a["state/algorithm"], b["state/algorithm"])
