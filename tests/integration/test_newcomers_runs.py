"""Newcomers (data.held_out) in real runs: each family's rule checked by hand from the run
file's final models and the newcomers' own data (hard: IFCA's least train loss; soft:
FedEM's mixture weights learnt by EM, then its mixture, and FedSoft's importance weights,
then its mix of the cluster models; one global model: FedAvg's, and
FedAvg + fine-tuning's placed alike and measured after fine-tuning); the newcomers change
no bit of the training; the same bits alone, under torchrun, under mpiexec and resumed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from docpage import first_run_and_its_output
from runfile import assert_same, assert_same_run, read_run

from distfl.data import load_client, load_dataset, make_partition
from distfl.metrics import balanced_accuracy
from distfl.models import load_flat
from distfl.runfile.reader import read_run_file
from distfl.runtime.seeding import ModelSeeding

pytestmark = pytest.mark.integration

#: 12 trained clients of digits in two groups (the second rotated a half turn), 2 newcomers
#: of each
FEDERATION = (
    "data.num_clients=12", "data.samples_per_client=80", "server.clients_per_round=6",
    'data.groups=[{count=6, alpha=1000.0, name="up"}, '
    '{count=6, alpha=1000.0, name="down", rotation=180.0}]',
    "eval.every=2", "run.progress=none", "train.local_steps=5",
)  # fmt: skip
ROUNDS = 6


def _args(algorithm: str, rounds: int = ROUNDS, held_out: str = "2", *more: str):
    sets = [*FEDERATION, f'algorithm.name="{algorithm}"', f"run.rounds={rounds}",
            f"data.held_out={held_out}", *more]  # fmt: skip
    return tuple(part for s in sets for part in ("--set", s))


def _run(tmp_path, helpers, algorithm: str, *more: str):
    out = tmp_path / f"{algorithm}.h5"
    helpers.run_alone(tmp_path, *_args(algorithm, ROUNDS, "2", *more), "--out", str(out))
    return out


def _newcomers(path):
    """The run's final models by leaf, the newcomers' data by id, their rows of the last
    evaluation in /metrics/held_out, and a model to load a flat state into."""
    run = read_run_file(path)
    config = run.config
    dataset = load_dataset(config)
    partition = make_partition(config, dataset)
    K = config.data.num_clients
    data = {k: load_client(dataset, partition, k, torch.device("cpu"), groups=config.groups,
                           seed=config.run.effective_data_seed())
            for k in range(K, partition.num_clients)}  # fmt: skip
    with torch.no_grad():
        model = ModelSeeding(config, dataset.input_shape, dataset.num_classes).build(0)
    held = run.tables["held_out"]
    last = held["round"] == held["round"].max()
    rows = {int(k): (str(c), float(a)) for k, c, a in
            zip(held["client"][last], held["cluster"][last], held["accuracy"][last],
                strict=True)}  # fmt: skip
    models = dict(zip(run.leaves, read_run(path)["final/models"], strict=True))
    return models, data, rows, model


def _logits(model, flat, x) -> torch.Tensor:
    load_flat(model, torch.as_tensor(flat))
    model.eval()
    with torch.no_grad():
        return model(x).double()


def _sample_losses(model, flat, x, y) -> np.ndarray:
    return torch.nn.functional.cross_entropy(_logits(model, flat, x), y, reduction="none").numpy()


def test_the_hard_rule_is_each_newcomers_least_train_loss(tmp_path, helpers):
    models, data, rows, model = _newcomers(
        _run(tmp_path, helpers, "ifca", "algorithm.num_clusters=2")
    )
    assert sorted(rows) == [12, 13, 14, 15]
    for k, d in data.items():
        losses = {
            c: _sample_losses(model, m, d.x_train, d.y_train).mean() for c, m in models.items()
        }
        best = min(sorted(losses), key=lambda c: losses[c])
        assert rows[k][0] == best, (k, losses)
        pred = _logits(model, models[best], d.x_test).argmax(1).numpy()
        assert rows[k][1] == pytest.approx(balanced_accuracy(d.y_test.numpy(), pred), abs=1e-12)


def test_the_soft_rule_is_em_on_the_weights_then_the_mixture(tmp_path, helpers):
    models, data, rows, model = _newcomers(
        _run(tmp_path, helpers, "fedem", "algorithm.num_clusters=2")
    )
    ids = sorted(models, key=int)
    for k, d in data.items():
        ell = np.stack([_sample_losses(model, models[c], d.x_train, d.y_train) for c in ids])
        pi = np.full(len(ids), 1 / len(ids))
        for _ in range(200_000):  # plain EM on the weights, to its fixed point
            q = pi[:, None] * np.exp(-(ell - ell.min(axis=0)))
            pi, before = (q / q.sum(axis=0)).mean(axis=1), pi
            if np.abs(pi - before).max() < 1e-14:
                break
        assert rows[k][0] == ids[int(np.argmax(pi))]
        soft = [torch.softmax(_logits(model, models[c], d.x_test), 1).numpy() for c in ids]
        pred = np.einsum("m,mnc->nc", pi, np.stack(soft)).argmax(1)
        assert rows[k][1] == pytest.approx(balanced_accuracy(d.y_test.numpy(), pred), abs=1e-12)


def test_fedsofts_rule_is_its_importance_weights_then_its_mix(tmp_path, helpers):
    """FedSoft's estimate (each train sample counts for the cluster model of its least
    loss; σ = 1e-4 for a model no sample picks), its largest weight, and the mix
    Σ u_s c_s / Σ u_s on which the newcomer is measured."""
    models, data, rows, model = _newcomers(
        _run(tmp_path, helpers, "fedsoft", "algorithm.num_clusters=2")
    )
    ids = sorted(models, key=int)
    for k, d in data.items():
        ell = np.stack([_sample_losses(model, models[c], d.x_train, d.y_train) for c in ids])
        counts = np.bincount(ell.argmin(axis=0), minlength=len(ids)).astype(float)
        u = np.where(counts == 0, 1e-4 * ell.shape[1], counts) / ell.shape[1]
        assert rows[k][0] == ids[int(np.argmax(u))]
        mix = sum(u[j] * models[c].astype(np.float64) for j, c in enumerate(ids)) / u.sum()
        pred = _logits(model, mix.astype(np.float32), d.x_test).argmax(1).numpy()
        assert rows[k][1] == pytest.approx(balanced_accuracy(d.y_test.numpy(), pred), abs=1e-12)


def test_the_global_model_and_its_fine_tuned_form(tmp_path, helpers):
    models, data, rows, model = _newcomers(_run(tmp_path, helpers, "none"))
    for k, d in data.items():
        pred = _logits(model, models["0"], d.x_test).argmax(1).numpy()
        assert rows[k] == ("0", pytest.approx(balanced_accuracy(d.y_test.numpy(), pred), abs=1e-12))
    tuned = _newcomers(_run(tmp_path, helpers, "fedavg_ft"))
    # the same global model (fedavg_ft trains as FedAvg does), every newcomer on it, and
    # measured after its fine-tuning: other accuracies
    assert np.array_equal(tuned[0]["0"], models["0"])
    assert {c for c, _ in tuned[2].values()} == {"0"}
    assert [a for _, a in tuned[2].values()] != [a for _, a in rows.values()]


def _without(run: dict, *names: str) -> dict:
    return {k: v for k, v in run.items() if not any(n in k for n in names)}


def test_newcomers_change_no_bit_of_the_training(tmp_path, helpers):
    """Every part of a run without newcomers is the same with them, but the config, the
    newcomers' own columns and the bytes their evaluation moves."""
    plain, held = tmp_path / "plain.h5", tmp_path / "held.h5"
    helpers.run_alone(tmp_path, *_args("ifca", ROUNDS, "0"), "--out", str(plain))
    helpers.run_alone(tmp_path, *_args("ifca", ROUNDS, "0.5"), "--out", str(held))
    a, b = read_run(plain), read_run(held)
    assert "metrics/held_out/client" in b and "metrics/held_out/client" not in a
    assert np.isnan(a["metrics/held_out_accuracy"]).all()
    assert np.isfinite(b["metrics/held_out_accuracy"][[1, 3, 5]]).all()
    assert (b["metrics/federation_bytes"] >= a["metrics/federation_bytes"]).all()
    left_out = ("config", "held_out", "federation_bytes")
    assert_same(_without(a, *left_out), _without(b, *left_out))


@pytest.mark.parametrize("algorithm", ["ifca", "fedem"])
def test_the_same_bits_alone_under_torchrun_mpiexec_and_resumed(tmp_path, helpers, algorithm):
    def args(rounds):
        return _args(algorithm, rounds, "2", "algorithm.num_clusters=2")

    runs = helpers.alone_torchrun_resumed(tmp_path, args, ROUNDS)
    if algorithm == "fedem":
        config = tmp_path / "c.toml"
        config.write_text('[run]\nprogress = "none"\n')
        runs = (*runs, helpers.launch_script("mpiexec.sh", tmp_path / "mpi.h5", config,
                                             *args(ROUNDS)))  # fmt: skip
    for other in runs[1:]:
        assert_same_run(runs[0], other)
    held = read_run(runs[0])["metrics/held_out/round"]
    assert held.tolist() == [2] * 4 + [4] * 4 + [6] * 4  # every evaluation's four


def test_the_pages_first_command_prints_the_summary_line_it_shows(tmp_path, helpers):
    page = Path(__file__).resolve().parents[2] / "docs" / "newcomers.md"
    printed, shown = first_run_and_its_output(page, tmp_path, helpers)
    assert shown.strip() in printed


def test_the_newcomers_steps_change_no_bit(tmp_path, helpers, monkeypatch):
    """Newcomers evaluated one a step (as a stop signal would find them) give the bits of
    the default steps."""
    import distfl.runtime.newcomers as newcomers

    whole = _run(tmp_path, helpers, "fedem", "algorithm.num_clusters=2")
    monkeypatch.setattr(newcomers, "STEP_NEWCOMERS", 1)
    (tmp_path / "one").mkdir()
    one = _run(tmp_path / "one", helpers, "fedem", "algorithm.num_clusters=2")
    assert_same_run(whole, one)


def test_inspect_gather_and_the_suite_show_the_newcomers(tmp_path, helpers):
    """The figures /metrics holds at the last evaluation, in inspect's line, in gather's
    columns (empty for a run without newcomers) and in the suite's table."""
    import csv
    import json

    held = _run(tmp_path, helpers, "ifca", "algorithm.num_clusters=2")
    plain = tmp_path / "plain.h5"
    helpers.run_alone(tmp_path, *_args("ifca", ROUNDS, "0", "algorithm.num_clusters=2"),
                      "--out", str(plain))  # fmt: skip
    m = read_run(held)
    acc, worst, p10, ari = (m[f"metrics/held_out_{c}"][-1] for c in
                            ("accuracy", "accuracy_worst", "accuracy_p10", "ari"))  # fmt: skip
    proc = helpers.cli(tmp_path, "inspect", str(held))
    assert proc.returncode == 0, proc.stderr
    assert (f"newcomers  4 never trained: balanced accuracy {acc:.3f}, worst {worst:.3f}, "
            f"10th percentile {p10:.3f}, ARI {ari:.3f}\n") in proc.stdout  # fmt: skip
    assert "newcomers" not in helpers.cli(tmp_path, "inspect", str(plain)).stdout
    proc = helpers.cli(tmp_path, "gather", str(held), str(plain), "--csv", "g.csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "g.csv").open()))
    assert list(rows[0])[-5:] == ["newcomers", "held_out_accuracy", "held_out_accuracy_worst",
                                  "held_out_accuracy_p10", "held_out_ari"]  # fmt: skip
    assert float(rows[0]["held_out_accuracy"]) == acc and rows[0]["newcomers"] == "4"
    assert rows[1]["newcomers"] == "" and rows[1]["held_out_ari"] == ""
    sets = ("--set", "run.rounds=2", "--set", "data.held_out=1", "--set", 'run.progress="none"')
    proc = helpers.cli(tmp_path, "suite", "default", "--algorithms", "oracle", "--seeds", "0",
                       *sets, "--out", "s")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((tmp_path / "s" / "suite.json").read_text())["rows"]
    assert row["newcomers"] == 2 and row["held_out_ari"] == 1.0  # the default's two groups
