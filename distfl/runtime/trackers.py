"""The experiment trackers of ``run.export`` (:mod:`distfl.runtime.export` checks their
paths and feeds them the rows the run file gained): each gets the same scalars
(:func:`scalars`), by round, and none of them needs a network.

- ``tensorboard``: TensorBoard events in ``<out>-tb/`` (``torch.utils.tensorboard``). A
  resumed run drops the events of the rounds after its file's last (``purge_step``).
- ``mlflow``: one MLflow run in the MLflow file store ``mlruns/`` of the run file's
  directory (the store of every run written there, so that ``mlflow ui`` compares them),
  experiment ``distfl``, named after the run file, tagged ``distfl.run_file`` with its
  absolute path, with the config as params (``algorithm.name``, ``train.lr``, ...) and
  whole as the artifact ``config.toml``. A resumed or ``--force``d run marks the MLflow
  runs of its file deleted (``mlflow gc`` removes them; ``MlflowClient.restore_run`` brings
  one back) and writes a new one from the rows of its file.
- ``wandb``: one Weights & Biases offline run in ``<out>-wandb/wandb/`` (``wandb sync``
  uploads it), project ``distfl``, named after the run file, with the config. A resumed
  or ``--force``d run removes the offline runs it finds there and writes a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distfl.config.checks import missing_export
from distfl.errors import ConfigError, UserError
from distfl.runfile.digest import _flatten
from distfl.runfile.output import check_directory

#: the MLflow experiment of every run distfl exports, and the W&B project
PROJECT = "distfl"
#: the MLflow tag that names the run file of an MLflow run (its absolute path)
RUN_FILE_TAG = "distfl.run_file"
#: the longest config value kept as an MLflow param (the whole config is config.toml)
MAX_PARAM = 500
#: the metrics one MLflow log_batch call carries at most (MLflow's limit)
BATCH = 1000


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def scalars(key: str, rows: list[dict[str, Any]], first_round: int) -> Iterator[tuple]:
    """(name, value, round) of each scalar the trackers show, from the rows of the run
    file's table ``key`` of rounds ``first_round`` on: the per-round metrics
    (``metrics/<column>``), each cluster's evaluated accuracy, its worst client's and its
    10th percentile (``accuracy/<cluster>``, ``accuracy_worst/<cluster>``,
    ``accuracy_p10/<cluster>``) and the wall clock (``timing/elapsed_s``); NaN left out."""
    for row in rows:
        t = int(row.get("round", 0))
        if t < first_round:
            continue  # already in the tracker (a resumed run's TensorBoard directory)
        if key == "metrics":
            for name, value in row.items():
                if name != "round" and _finite(value):
                    yield f"metrics/{name}", float(value), t
        elif key == "evaluation":
            for name in ("accuracy", "accuracy_worst", "accuracy_p10"):
                if _finite(row.get(name)):
                    yield f"{name}/{row['cluster']}", float(row[name]), t
        elif key == "timing" and _finite(row.get("elapsed_s")):
            yield "timing/elapsed_s", float(row["elapsed_s"]), t


def _cannot(kind: str, path: Path, exc: BaseException) -> UserError:
    """The line that says the ``kind`` export at ``path`` could not be written: an OS
    error's reason, or the tracker's own error (a corrupt store, say), named."""
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    else:
        lines = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return UserError(f"cannot write the {kind} export {path}: {reason}")


def _directory(kind: str, path: Path, *, existing: bool, target: dict) -> bool:
    """Make the directory of the ``kind`` export at ``path`` where none is there, after
    :func:`check_directory` (``existing``: one there may be written to); True where one
    was there. One made meanwhile by another run is checked again as found."""
    if check_directory(path, existing=existing, **target) is not None:
        return True
    try:
        os.mkdir(path)
    except FileExistsError:
        check_directory(path, existing=existing, **target)
        return True
    except OSError as exc:
        raise _cannot(kind, path, exc) from None
    return False


class TensorBoard:
    def __init__(self, directory: Path, first_round: int, *, existing: bool, target: dict):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch's module needs the tensorboard package
            raise ConfigError(missing_export("tensorboard")) from None
        _directory("tensorboard", directory, existing=existing, target=target)
        # the events of rounds from first_round on, left by an earlier writer, are dropped
        self.writer = SummaryWriter(log_dir=str(directory), purge_step=first_round)
        self.first_round = first_round

    def rows(self, key: str, rows: list[dict[str, Any]]) -> None:
        for name, value, t in scalars(key, rows, self.first_round):
            self.writer.add_scalar(name, value, t)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@contextlib.contextmanager
def _file_store_allowed() -> Iterator[None]:
    """MLflow 3 refuses its file store unless MLFLOW_ALLOW_FILE_STORE is true: set for the
    making of the client only (the store it opens is kept), the user's value restored."""
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on ``directory`` (the runs that share an MLflow store create its
    experiment once)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class MLflow:
    """One MLflow run of the run file ``run_file`` in the file store ``store``."""

    def __init__(self, store: Path, run_file: Path, config: Any, *, replace: bool) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ConfigError(missing_export("mlflow")) from None
        _directory("mlflow", store, existing=True, target=_store_target())
        self.store, self.path = store, str(Path(run_file).resolve())
        try:
            with _file_store_allowed():
                self.client = MlflowClient(tracking_uri=store.resolve().as_uri())
                with _locked(store):
                    experiment = self.client.get_experiment_by_name(PROJECT)
                    ids = (experiment.experiment_id if experiment is not None
                           else self.client.create_experiment(PROJECT))  # fmt: skip
            if replace:
                self._retire(ids)
            run = self.client.create_run(
                ids, run_name=Path(run_file).stem, tags={RUN_FILE_TAG: self.path}
            )
            self.run_id = run.info.run_id
            params = [Param(k, _param(v)) for k, v in _flatten(config.to_dict()).items()]
            params = [p for p in params if len(p.value) <= MAX_PARAM]
            for i in range(0, len(params), 100):  # MLflow takes 100 params a call
                self.client.log_batch(self.run_id, params=params[i : i + 100])
            self.client.log_text(self.run_id, config.to_toml(), "config.toml")
        except Exception as exc:  # an OS error, or MLflow's own (a corrupt store, say)
            raise _cannot("mlflow", store, exc) from None
        self.pending: list = []

    def _retire(self, experiment_id: str) -> None:
        """Mark deleted the active MLflow runs of this run file (it is resumed or
        replaced): the new run holds every round of the file."""
        quoted = self.path.replace("'", "\\'")
        earlier = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`{RUN_FILE_TAG}` = '{quoted}'"
        )
        for run in earlier:
            if run.info.status == "RUNNING":
                self.client.set_terminated(run.info.run_id, "KILLED")
            self.client.delete_run(run.info.run_id)

    def rows(self, key: str, rows: list[dict[str, Any]]) -> None:
        from mlflow.entities import Metric

        for name, value, t in scalars(key, rows, 0):
            self.pending.append(Metric(name, value, 0, t))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for i in range(0, len(pending), BATCH):
            self.client.log_batch(self.run_id, metrics=pending[i : i + BATCH])

    def close(self) -> None:
        self.flush()
        self.client.set_terminated(self.run_id, "FINISHED")


def _param(value: Any) -> str:
    import json

    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _store_target() -> dict[str, str]:
    return {"label": "the mlflow store", "other": "leave mlflow out of run.export"}


class WandB:
    """One Weights & Biases offline run in ``directory``/wandb."""

    def __init__(self, directory: Path, run_file: Path, config: Any, *, existing: bool,
                 target: dict) -> None:  # fmt: skip
        try:
            import wandb
        except ImportError:
            raise ConfigError(missing_export("wandb")) from None
        if _directory("wandb", directory, existing=existing, target=target):
            _remove_offline_runs(directory / "wandb")
        settings = wandb.Settings(
            mode="offline", silent=True, console="off", x_disable_stats=True,
            save_code=False, disable_git=True,
        )  # fmt: skip
        try:
            self.run = wandb.init(
                dir=os.path.abspath(directory), project=PROJECT, name=Path(run_file).stem,
                config=config.to_dict(), settings=settings, reinit="create_new",
            )  # fmt: skip
        except Exception as exc:  # an OS error, or W&B's own
            raise _cannot("wandb", directory, exc) from None
        self.pending: dict[int, dict[str, float]] = {}

    def rows(self, key: str, rows: list[dict[str, Any]]) -> None:
        for name, value, t in scalars(key, rows, 0):
            self.pending.setdefault(t, {})[name] = value

    def flush(self) -> None:
        """Log the scalars gathered since the last flush, a round at a time in order (a
        W&B run's steps only go up; the tables' rows come a table at a time)."""
        pending, self.pending = self.pending, {}
        for t in sorted(pending):
            self.run.log(pending[t], step=t)

    def close(self) -> None:
        self.flush()
        self.run.finish()


def _remove_offline_runs(directory: Path) -> None:
    """Remove the W&B offline runs (``offline-run-*`` directories) in ``directory``: the
    export of a run file that is resumed or replaced is made anew."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.startswith("offline-run-") and stat.S_ISDIR(
            entry.stat(follow_symlinks=False).st_mode
        ):
            shutil.rmtree(entry.path)


__all__ = ["MLflow", "TensorBoard", "WandB", "scalars"]
