"""``run.export`` to MLflow and Weights & Biases, offline: the metrics are read back (MLflow
through its own client from the file store ``mlruns/``; W&B from the offline run's file,
through ``tests/wandb_offline.py``) and equal the run file's, round for round; the config
is there; a resumed run's export is made anew and holds each round once; runs side by side
share one MLflow experiment; the paths are refused as the other exports' are. Each test
skips with a reason where its package is not installed (``distfl[mlflow]``,
``distfl[wandb]``).

The runs are FedGWC on the digits preset, made in this process through ``distfl.run``
(``helpers.run_alone``); the resume and the refusals go through the command line's
``main``; the runs side by side are two processes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cliproc import assert_main_one_line_error
from timing import limit
from wandb_offline import history

from distfl.cli import main
from distfl.runfile.reader import read_run_file
from distfl.runtime.export import export_paths
from distfl.runtime.trackers import PROJECT, RUN_FILE_TAG

pytestmark = pytest.mark.integration

HAS_MLFLOW = importlib.util.find_spec("mlflow") is not None
HAS_WANDB = importlib.util.find_spec("wandb") is not None
needs_mlflow = pytest.mark.skipif(not HAS_MLFLOW, reason="mlflow is not installed (distfl[mlflow])")
needs_wandb = pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (distfl[wandb])")
KINDS = [k for k, there in (("mlflow", HAS_MLFLOW), ("wandb", HAS_WANDB)) if there]
ARGS = (
    "--preset", "digits", "--set", 'algorithm.name="fedgwc"', "--set", "eval.every=2",
    "--set", 'run.progress="none"', "--set", f"run.export={KINDS!r}".replace("'", '"'),
)  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory, helpers) -> Path:
    if not KINDS:
        pytest.skip("neither mlflow nor wandb is installed (distfl[mlflow], distfl[wandb])")
    tmp = tmp_path_factory.mktemp("trackers")
    helpers.run_alone(tmp, *ARGS, "--set", "run.rounds=6", "--out", "run.h5")
    return tmp / "run.h5"


@pytest.fixture()
def store_allowed(monkeypatch):
    """MLflow 3 opens a file store only with MLFLOW_ALLOW_FILE_STORE set."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def mlflow_runs(run_file: Path, *, deleted: bool = False) -> list:
    """The MLflow runs of ``run_file`` in the store beside it (active, or deleted)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=export_paths(run_file)["mlflow"].resolve().as_uri())
    experiment = client.get_experiment_by_name(PROJECT)
    view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
    runs = client.search_runs([experiment.experiment_id], run_view_type=view)
    path = str(run_file.resolve())
    return [r for r in runs if r.data.tags.get(RUN_FILE_TAG) == path]


def mlflow_history(run, name: str) -> tuple[list[int], list[float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=run.info.artifact_uri.rsplit("/", 3)[0])
    points = sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)
    return [m.step for m in points], [m.value for m in points]


def wandb_history(run_file: Path) -> tuple[dict, list[dict]]:
    """The config and history of the one W&B offline run of ``run_file``."""
    [path] = (export_paths(run_file)["wandb"] / "wandb").glob("offline-run-*/run-*.wandb")
    return history(path)


def file_metrics(run_file: Path) -> dict[str, np.ndarray]:
    return read_run_file(run_file, state=False).tables["metrics"]


@needs_mlflow
def test_the_mlflow_run_holds_the_run_files_metrics(made, store_allowed):
    [run] = mlflow_runs(made)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    metrics = file_metrics(made)
    finite = np.isfinite(metrics["accuracy"])
    steps, values = mlflow_history(run, "metrics/accuracy")
    assert steps == metrics["round"][finite].tolist() == [2, 4, 6]
    np.testing.assert_array_equal(values, metrics["accuracy"][finite])
    steps, values = mlflow_history(run, "metrics/train_loss_last")
    assert steps == [1, 2, 3, 4, 5, 6]
    np.testing.assert_array_equal(values, metrics["train_loss_last"])
    evaluation = read_run_file(made, state=False).tables["evaluation"]
    last = evaluation["round"] == 6
    pairs = zip(evaluation["cluster"][last], evaluation["accuracy"][last], strict=True)
    for cluster, accuracy in pairs:
        assert mlflow_history(run, f"accuracy/{cluster}")[1][-1] == accuracy


@needs_mlflow
def test_the_mlflow_run_holds_the_config(made, store_allowed):
    from mlflow.tracking import MlflowClient

    from distfl.config.parse import read_toml

    [run] = mlflow_runs(made)
    config = read_run_file(made, state=False).config
    assert run.data.params["algorithm.name"] == "fedgwc"
    assert float(run.data.params["train.lr"]) == config.train.lr
    assert run.data.params["run.export"] == str(KINDS).replace("'", '"')
    client = MlflowClient(tracking_uri=export_paths(made)["mlflow"].resolve().as_uri())
    where = client.download_artifacts(run.info.run_id, "config.toml", str(made.parent))
    assert read_toml(where) == read_toml_text(config.to_toml(), made.parent)


def read_toml_text(text: str, directory: Path) -> dict:
    from distfl.config.parse import read_toml

    path = directory / "expected-config.toml"
    path.write_text(text, encoding="utf-8")
    return read_toml(path)


@needs_wandb
def test_the_wandb_offline_run_holds_the_run_files_metrics(made):
    config, rows = wandb_history(made)
    assert config["algorithm"]["name"] == "fedgwc"
    assert config["run"]["rounds"] == 6
    metrics = file_metrics(made)
    assert [r["_step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["metrics/train_loss_last"] for r in rows] == metrics["train_loss_last"].tolist()
    evaluated = [(r["_step"], r["metrics/accuracy"]) for r in rows if "metrics/accuracy" in r]
    finite = np.isfinite(metrics["accuracy"])
    assert evaluated == list(zip(metrics["round"][finite].tolist(),
                                 metrics["accuracy"][finite].tolist(), strict=True))  # fmt: skip
    assert all("timing/elapsed_s" in r for r in rows)
    assert any(k.startswith("accuracy_worst/") for k in rows[-1])


def test_a_resumed_run_makes_its_tracker_exports_anew(made, helpers, tmp_path, monkeypatch):
    """Three rounds, then resumed to six: the MLflow run of the three is marked deleted
    and a new one holds the six rounds, as the W&B offline run does (the first removed);
    the losses are the run in one go's."""
    helpers.run_alone(tmp_path, *ARGS, "--set", "run.rounds=3", "--out", "part.h5")
    run_file = tmp_path / "part.h5"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    if HAS_MLFLOW:
        [first] = mlflow_runs(run_file)
        assert mlflow_history(first, "metrics/train_loss_last")[0] == [1, 2, 3]
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--resume", "part.h5", "--set", "run.rounds=6"]) == 0
    straight = file_metrics(made)["train_loss_last"].tolist()
    assert file_metrics(run_file)["train_loss_last"].tolist() == straight
    if HAS_MLFLOW:
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        [run] = mlflow_runs(run_file)
        [gone] = mlflow_runs(run_file, deleted=True)
        assert gone.info.run_id == first.info.run_id  # marked deleted, as it finished
        assert mlflow_history(run, "metrics/train_loss_last") == ([1, 2, 3, 4, 5, 6], straight)
        assert run.info.status == "FINISHED"
    if HAS_WANDB:
        _, rows = wandb_history(run_file)  # one offline run: the first's is removed
        assert [r["metrics/train_loss_last"] for r in rows] == straight


@needs_mlflow
def test_runs_side_by_side_share_one_mlflow_experiment(tmp_path, helpers, store_allowed):
    """Two processes started at once in one directory: one experiment, a run each."""
    tiny = ["--preset", "digits", "--set", "run.rounds=2", "--set", 'run.progress="none"',
            "--set", 'run.export=["mlflow"]']  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "distfl", "run", *tiny, "--out", f"{name}.h5"],
            cwd=tmp_path,
            env=helpers.clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for name in ("a", "b")
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=limit(300))
        assert proc.returncode == 0, out
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    named = [e for e in client.search_experiments() if e.name == PROJECT]
    assert len(named) == 1
    runs = client.search_runs([named[0].experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["a", "b"]
    assert "MLFLOW_ALLOW_FILE_STORE" in os.environ  # the test's, not the runs' doing


TINY = ["--preset", "digits", "--set", "run.rounds=1", "--set", "data.num_clients=6",
        "--set", "server.clients_per_round=3", "--set", 'run.progress="none"']  # fmt: skip


@needs_mlflow
def test_a_file_at_the_mlflow_store_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "mlruns").write_text("mine")
    monkeypatch.chdir(tmp_path)
    code = main(["run", *TINY, "--set", 'run.export=["mlflow"]', "--out", "x.h5", "--force"])
    assert_main_one_line_error(capsys, code, "mlruns is a file of 4 bytes, not a directory")
    assert sorted(os.listdir(tmp_path)) == ["mlruns"]
    assert (tmp_path / "mlruns").read_text() == "mine"


@needs_wandb
def test_an_existing_wandb_export_is_replaced_only_with_force(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["run", *TINY, "--set", 'run.export=["wandb"]', "--out", "x.h5"]
    assert main(argv) == 0
    [first] = (tmp_path / "x-wandb" / "wandb").glob("offline-run-*")
    (tmp_path / "x.h5").unlink()
    code = main(argv)
    assert_main_one_line_error(capsys, code, "x-wandb exists (a directory)", "--force")
    assert first.is_dir()
    assert main([*argv, "--force"]) == 0
    [second] = (tmp_path / "x-wandb" / "wandb").glob("offline-run-*")
    assert second != first and not first.exists()


@needs_mlflow
def test_a_corrupt_mlflow_store_stops_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    """MLflow's own error (an experiment's meta.yaml that is no YAML) is one line, exit 2,
    before round 1: no run file, and the store as it was."""
    meta = tmp_path / "mlruns" / "123" / "meta.yaml"
    meta.parent.mkdir(parents=True)
    meta.write_text("{{{ not yaml\n")
    monkeypatch.chdir(tmp_path)
    code = main(["run", *TINY, "--set", 'run.export=["mlflow"]', "--out", "x.h5"])
    assert_main_one_line_error(capsys, code, "cannot write the mlflow export mlruns: ParserError")
    assert sorted(os.listdir(tmp_path)) == ["mlruns"]
    assert meta.read_text() == "{{{ not yaml\n"
