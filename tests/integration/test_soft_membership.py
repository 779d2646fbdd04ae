"""Soft membership in real runs: a client that trains several cluster models in one round,
each update entering its cluster's aggregate with a weight of its own.

- ``softcheck`` (defined here, loaded as a plug-in) gives every sampled client two trainings
  with weights γ on a 2^-6 grid and asks for the trained models back; in its update it
  recomputes each cluster's aggregate in float64 from them, Σ γ_k n_k (θ_k − θ) / Σ γ_k n_k,
  and records the largest gap to the runtime's model: within float32 rounding of it, in one
  process and under torchrun (3 ranks), which give the same bits.
- FedEM (Marfoq et al. 2021): one process, torchrun (3 ranks), mpiexec (3 ranks) and a run
  stopped after round 2 and resumed all hold the same bits, the mixture weights π of every
  client (its state between rounds) included."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import distfl
from distfl.algorithms import ClusteringAlgorithm, RoundPlan, RoundUpdate, register
from distfl.algorithms.common.mixture_client import mixture_scores
from distfl.data import load_client, load_dataset, make_partition
from distfl.models import build_model
from distfl.runfile.reader import read_run_file
from distfl.train import sample_logits

pytestmark = pytest.mark.integration

HERE = str(Path(__file__).resolve())


@register
class SoftCheck(ClusteringAlgorithm):
    """Two clusters; each sampled client trains both, with weights drawn from (seed, round)."""

    name = "softcheck"

    def __init__(self, *, num_clients, clients_per_round, seed, **settings):
        roots = {"0": np.arange(num_clients), "1": ()}
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round,
                         seed=seed, roots=roots, **settings)  # fmt: skip
        self.rng = np.random.default_rng([seed, 5])
        self.before: dict[str, np.ndarray] = {}  # the models the round trains from

    def initial_models(self):
        return {"0": 1, "1": 2}

    def plan(self, round_index):
        ks = np.sort(self.rng.choice(self.num_clients, self.clients_per_round, replace=False))
        gammas = self.rng.integers(1, 64, size=(len(ks), 2)) / 64.0  # exact on 2^-20
        train = {
            int(k): {"0": float(g[0]), "1": float(g[1])} for k, g in zip(ks, gammas, strict=True)
        }
        return RoundPlan(round=round_index, train=train, return_models=frozenset(train))

    def update(self, round_index, plan, reports):
        stats = {}
        if self.before:  # round 1 trains from models this half has not seen
            for cid in ("0", "1"):
                rows = [i for i, c in enumerate(reports.clusters) if c == cid]
                start = self.before[cid].astype(np.float64)
                w = reports.weights[rows] * reports.num_samples[rows]
                delta = reports.models[rows].astype(np.float64) - start
                ref = start + (w[:, None] * delta).sum(axis=0) / w.sum()
                got = reports.cluster_models[cid].astype(np.float64)
                rel = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)
                stats[cid] = {"gap": float(rel.max()), "moved": float(np.abs(delta).max())}
        self.before = {c: np.array(m) for c, m in reports.cluster_models.items()}
        return RoundUpdate(stats=stats)

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state,
                "before": {c: m.copy() for c, m in self.before.items()}}  # fmt: skip

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]
        self.before = {c: np.asarray(m) for c, m in state["before"].items()}


FEDERATION = [
    "--set", "data.num_clients=8", "--set", "data.samples_per_client=40",
    "--set", "data.groups=[{count = 4, alpha = 1000.0}, "
    "{count = 4, alpha = 1000.0, permute_labels = true}]",
    "--set", "server.clients_per_round=4", "--set", "train.local_steps=3",
    "--set", "eval.every=2", "--set", 'run.progress="none"', "--set", "run.seed=11",
]  # fmt: skip


def softcheck_args(rounds: int) -> tuple[str, ...]:
    return (*FEDERATION, "--set", f"run.plugins=[{HERE!r}]",
            "--set", 'algorithm.name="softcheck"', "--set", f"run.rounds={rounds}")  # fmt: skip


def fedem_args(rounds: int, name: str = "fedem") -> tuple[str, ...]:
    return (*FEDERATION, "--set", f'algorithm.name="{name}"', "--set", "algorithm.num_clusters=2",
            "--set", f"run.rounds={rounds}")  # fmt: skip


def test_weighted_aggregates_equal_their_float64_sums(helpers, tmp_path):
    from runfile import assert_same_run  # (tests/ is not on a rank's path: this is a plug-in)
    from timing import limit

    cmd = [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
           "-m", "distfl", "run", *softcheck_args(4), "--out", "three.h5"]  # fmt: skip
    with helpers.plugins_forgotten():
        helpers.run_alone(tmp_path, *softcheck_args(4), "--out", "one.h5")
    proc = subprocess.run(cmd, cwd=tmp_path, env=helpers.clean_env(), capture_output=True,
                          text=True, timeout=limit(600))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = distfl.open(tmp_path / "one.h5")
    gap, moved = run.statistic("gap"), run.statistic("moved")
    assert list(gap["round"]) == [2, 3, 4]
    for cid in ("0", "1"):
        assert (np.asarray(moved[cid]) > 1e-4).all()  # the clients' updates are not nothing
        # the runtime's aggregate is the float64 sum rounded once to float32
        assert (np.asarray(gap[cid]) <= 2.0**-23).all(), gap
    assert_same_run(tmp_path / "one.h5", tmp_path / "three.h5")


@pytest.mark.parametrize("name", ["fedem", "fedrc"])
def test_fedem_same_bits_at_every_world_size_and_resumed(helpers, tmp_path, name):
    """FedEM and FedRC (its robust E-step, with the label counts every client sends back
    and the server keeps)."""
    from runfile import assert_same_run

    def args(rounds):
        return fedem_args(rounds, name)

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, rounds=4)
    mpi = tmp_path / "mpi.h5"
    config = tmp_path / "fedem.toml"
    config.write_text('[run]\nprogress = "none"\n')
    helpers.launch_script("mpiexec.sh", mpi, config, *fedem_args(4, name))
    for other in (multi, resumed, mpi):
        assert_same_run(single, other)
    stored = read_run_file(single)
    pi = np.asarray(stored.state["algorithm"]["pi"])
    assert pi.shape == (8, 2)
    assert np.allclose(pi.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    trained = np.abs(pi - 0.5).max(axis=1) > 1e-6  # clients that trained moved off 1/M
    assert trained.sum() >= 4
    # the table of weights: every round, a row per (trained client, component); each
    # client's last rows are its π in the state; the ARI is marked as the largest weight's
    table = stored.tables["tables/weights"]
    rounds, ks = np.asarray(table["round"]), np.asarray(table["client"])
    assert sorted(set(rounds.tolist())) == [1, 2, 3, 4]
    assert all((rounds == t).sum() == 4 * 2 for t in range(1, 5))  # 4 clients × M = 2
    for k in set(ks.tolist()):
        last = (ks == k) & (rounds == rounds[ks == k].max())
        mine = np.asarray(table["weight"])[last]
        assert mine.tolist() == pi[k].tolist()
    summary = distfl.open(single).summary()
    assert summary["membership"] == "largest weight" and summary["ari"] is not None
    shown = helpers.cli(tmp_path, "inspect", str(single))
    assert "(each client in its cluster of largest weight)" in shown.stdout
    # every client's accuracy is its mixture's: Σ_m π_km softmax(h_m(x)) on its test split,
    # recomputed here from the file's final models and π
    assert list(stored.state["model_ids"]) == ["0", "1"]
    models = torch.from_numpy(np.asarray(stored.state["models"]))
    cfg = stored.config
    dataset = load_dataset(cfg)
    part = make_partition(cfg, dataset)
    model = build_model(cfg.model.name, dataset.input_shape, dataset.num_classes,
                        params=cfg.model.params)  # fmt: skip
    accuracy = np.asarray(stored.state["client_accuracy"])
    for k in range(8):
        data = load_client(dataset, part, k, torch.device("cpu"), groups=cfg.groups,
                           seed=cfg.run.seed)  # fmt: skip
        logits = sample_logits(model, models, data.x_test).numpy()
        bal, _, _ = mixture_scores(logits, pi[k], data.y_test.numpy())
        assert bal == pytest.approx(accuracy[k], abs=1e-6), k


def test_fedce_same_bits_at_every_world_size_and_resumed(helpers, tmp_path):
    """FedCE: its histories (the server's per-client state) and the soft mix of the
    returned models survive a resume and give the same bits under torchrun."""
    from runfile import assert_same_run

    def args(rounds):
        return (*FEDERATION, "--set", 'algorithm.name="fedce"', "--set",
                f"run.rounds={rounds}")  # fmt: skip

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, rounds=4)
    assert_same_run(single, multi)
    assert_same_run(single, resumed)
    history = np.asarray(read_run_file(single).state["algorithm"]["history"])
    assert history.shape == (8, 2) and (history.sum(axis=1) > 0).sum() >= 4


def test_pfedgraph_same_bits_at_every_world_size_and_resumed(helpers, tmp_path):
    """pFedGraph: a model per client, the graph's aggregates and the initial model it keeps
    survive a resume and give the same bits under torchrun; each trained client's model is
    its row of the graph applied to the round's trained models."""
    from runfile import assert_same_run

    def args(rounds):
        return (*FEDERATION, "--set", 'algorithm.name="pfedgraph"', "--set",
                "algorithm.lam=0.5", "--set", f"run.rounds={rounds}")  # fmt: skip

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, rounds=4)
    assert_same_run(single, multi)
    assert_same_run(single, resumed)
    stored = read_run_file(single)
    graph = stored.tables["tables/graph"]
    rounds = np.asarray(graph["round"])
    assert all((rounds == t).sum() == 16 for t in range(1, 5))  # 4 clients, 4 × 4 pairs
    weight, ks = np.asarray(graph["weight"]), np.asarray(graph["client"])
    for t in range(1, 5):
        for k in set(ks[rounds == t].tolist()):
            assert weight[(rounds == t) & (ks == k)].sum() == pytest.approx(1.0, abs=1e-12)
    summary = distfl.open(single).summary()
    assert summary["membership"] == "none" and summary["ari"] is None


def test_fedsoft_same_bits_at_every_world_size_and_resumed(helpers, tmp_path):
    """FedSoft: each client trains its personal model once and that one model enters both
    clusters' sums with weight u_ks·n_k. One process, torchrun (3 ranks), mpiexec (3 ranks)
    and a resume hold the same bits, the personal models and weights included; each
    cluster's last model is Σ_k v_sk w_k over the last round's clients, recomputed in
    float64 from the file's personal models and weights (within float32 rounding)."""
    from runfile import assert_same_run

    def args(rounds):
        return (*FEDERATION, "--set", 'algorithm.name="fedsoft"', "--set", "algorithm.lam=0.5",
                "--set", f"run.rounds={rounds}")  # fmt: skip

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, rounds=4)
    mpi = tmp_path / "mpi.h5"
    config = tmp_path / "fedsoft.toml"
    config.write_text('[run]\nprogress = "none"\n')
    helpers.launch_script("mpiexec.sh", mpi, config, *args(4))
    for other in (multi, resumed, mpi):
        assert_same_run(single, other)
    stored = read_run_file(single)
    state = stored.state["algorithm"]
    trained = np.asarray(state["trained"])
    personal = np.asarray(state["personal"], dtype=np.float64)
    assert len(trained) >= 4 and personal.shape[0] == len(trained)
    table = stored.tables["tables/weights"]
    rounds, ks = np.asarray(table["round"]), np.asarray(table["client"])
    last = rounds == 4
    cohort = sorted(set(ks[last].tolist()))
    assert len(cohort) == 4
    u = np.asarray(table["weight"])[last].reshape(4, 2)  # clients ascending, clusters "0", "1"
    w = np.stack([personal[list(trained).index(k)] for k in cohort])
    counts = np.asarray(stored.clients["num_train"], dtype=np.float64)[cohort]
    models = np.asarray(stored.state["models"], dtype=np.float64)
    assert list(stored.state["model_ids"]) == ["0", "1"]
    for s in range(2):
        q = np.round(u[:, s] * 2.0**20) * counts  # the runtime's weights, on the 2^-20 grid
        ref = (q[:, None] * w).sum(axis=0) / q.sum()
        rel = np.abs(models[s] - ref) / np.maximum(np.abs(ref), 1e-6)
        assert rel.max() <= 2.0**-22, (s, rel.max())
    assert np.abs(models[0] - models[1]).max() > 1e-4  # two clusters, two models
    summary = distfl.open(single).summary()
    assert summary["membership"] == "largest weight" and summary["ari"] is not None


def test_fedsac_same_bits_at_every_world_size_and_resumed(helpers, tmp_path):
    """FedSaC: the feature bases each trained client computes after its training, the graph
    they enter and the personalised models give the same bits under torchrun and resumed;
    each round's graph rows sum to 1 and a client's subspace overlaps itself fully."""
    from runfile import assert_same_run

    def args(rounds):
        return (*FEDERATION, "--set", 'algorithm.name="fedsac"', "--set",
                f"run.rounds={rounds}")  # fmt: skip

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, rounds=4)
    assert_same_run(single, multi)
    assert_same_run(single, resumed)
    graph = read_run_file(single).tables["tables/graph"]
    rounds, ks, others = (np.asarray(graph[c]) for c in ("round", "client", "other"))
    weight, overlap = np.asarray(graph["weight"]), np.asarray(graph["complementarity"])
    assert all((rounds == t).sum() == 16 for t in range(1, 5))
    for t in range(1, 5):
        for k in set(ks[rounds == t].tolist()):
            assert weight[(rounds == t) & (ks == k)].sum() == pytest.approx(1.0, abs=1e-12)
    assert overlap[ks == others] == pytest.approx(1.0, abs=1e-12)
    assert (np.abs(overlap[ks != others]) < 1 - 1e-6).all()  # other clients' features differ
    summary = distfl.open(single).summary()
    assert summary["membership"] == "none" and summary["ari"] is None
