"""A run file whose values were changed and sealed anew with distfl's own record (a checksum,
not a signature: anyone who reads distfl's code can) is refused by every reader when it holds
a value no run of its stored config writes: dtypes as documented, NaN only where a run
writes NaN, the models' width that of the stored config's model, worker ranks within the
run's worlds, JSON of bounded depth, a generator numpy takes; and its shapes are checked
before anything is hashed. A value a run does write (NaN in a round without evaluation) is
read as it is.

The files are real runs of 2 rounds of the digits preset (``eval.every`` = 10: only the
last round evaluates), of ``none``, CFL and FedGWC with FedAvgM, run in this process. Each
reader is called in this process too (``helpers.cli``)."""

from __future__ import annotations

import math
import re
from unittest import mock

import h5py
import numpy as np
import pytest
from runfile import refused_by_every_reader, resealed, tampered

import distfl
from distfl.errors import CheckpointError
from distfl.runfile import integrity

pytestmark = pytest.mark.integration

ROUNDS = 2
RUNS = {
    "none": (),
    "cfl": ('algorithm.name="cfl"',),
    "fedgwc": ('algorithm.name="fedgwc"', 'server.aggregator="fedavgm"'),
    "fedpns": ('participation.selection="fedpns"',),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers) -> dict:
    tmp = tmp_path_factory.mktemp("resealed")
    for name, items in RUNS.items():
        sets = [x for item in items for x in ("--set", item)]
        helpers.run_alone(tmp, "--preset", "digits", "--set", f"run.rounds={ROUNDS}",
                          "--set", 'run.progress="none"', *sets, "--out", f"{name}.h5")  # fmt: skip
    return {name: tmp / f"{name}.h5" for name in RUNS}


def _replace(f: h5py.File, name: str, values: np.ndarray) -> None:
    del f[name]
    f[name] = values


# -- the defects of issue 59: each refused by every reader ----------------------------------


def _accuracy_all_nan(f):
    f["metrics/accuracy"][:] = np.nan


def _rounds_seen_nan(f):
    f["state/algorithm"].attrs["rounds_seen"] = "NaN"


def _state_models_float64(f):
    _replace(f, "state/models", f["state/models"][()].astype(np.float64))


def _state_models_nan(f):
    f["state/models"][:] = np.nan


def _models_of_another_model(f):
    """/state/models and /final/models both one parameter wider than the stored config's
    model (and so as wide as each other)."""
    for name in ("state/models", "final/models"):
        models = f[name][()]
        _replace(f, name, np.zeros((models.shape[0], models.shape[1] + 1), np.float32))


def _worker_rank_50(f):
    f["timing/workers/rank"][:] = 50


DEEP = "[" * 50_000 + "]" * 50_000


def _deep_generator(f):
    f["state/algorithm/rng"].attrs["bit_generator"] = DEEP


DEFECTS = {
    "every accuracy NaN": ("none", _accuracy_all_nan,
                           "/metrics/accuracy holds NaN in round 2, where /metrics/evaluation "
                           "has an evaluation"),
    "rounds_seen NaN": ("cfl", _rounds_seen_nan,
                        "/state/algorithm@rounds_seen = nan holds NaN or Infinity"),
    "state models of float64": ("none", _state_models_float64,
                                "/state/models holds float64 values; a run file's are float32"),
    "state models all NaN": ("none", _state_models_nan,
                             "/state/models holds a value that is not finite"),
    "models of another model": ("none", _models_of_another_model,
                                "/final/models holds models of 4811 parameters; the stored "
                                "config's model (mlp on digits) has 4810"),
    "worker rank 50 in a world of one": ("none", _worker_rank_50,
                                         "/timing/workers/rank holds rank 50, outside every "
                                         "world of this run (0 to data.num_clients = 20)"),
    "JSON 50,000 deep in the state": ("none", _deep_generator,
                                      "/state/algorithm/rng@bit_generator is nested deeper "
                                      "than 32 levels"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(DEFECTS))
def test_every_reader_refuses_a_value_no_run_writes(helpers, runs, tmp_path, name):
    run, change, needle = DEFECTS[name]
    path = tampered(runs[run], tmp_path, resealed(change))
    refused_by_every_reader(helpers, path, needle, rounds=ROUNDS)


def _models_claimed_and_held(f):
    """/state/models of 10,000 x 4,810 float32 zeros (184 MiB), LZF-compressed to about 2 MiB
    on disk: what the bytes on disk could hold, so only its shape tells it from a run's."""
    del f["state/models"]
    ds = f.create_dataset("state/models", shape=(10_000, 4810), dtype="f4", chunks=(512, 4810),
                          compression="lzf")  # fmt: skip
    zeros = np.zeros((512, 4810), np.float32)
    for start in range(0, 10_000, 512):
        ds[start : start + 512] = zeros[: 10_000 - start]


def test_shapes_are_checked_before_anything_is_hashed(runs, tmp_path):
    """Models claimed for 10,000 clusters where /state@model_ids names one: refused from
    the file's metadata, before a dataset is hashed (the hashing would read every value it
    claims)."""
    path = tampered(runs["none"], tmp_path, resealed(_models_claimed_and_held))
    hashed = []
    real = integrity._dataset_digest

    def spy(ds: h5py.Dataset) -> str:
        hashed.append(ds.name)
        return real(ds)

    with mock.patch.object(integrity, "_dataset_digest", spy):
        with pytest.raises(CheckpointError, match="/state/models holds 10000 models of 4810"):
            distfl.open(path)
    assert hashed == []


def test_a_nan_a_run_writes_is_read(helpers, runs):
    """Round 1 evaluates nothing (eval.every = 10): its accuracy is NaN, and the file is
    read as it is."""
    run = distfl.open(runs["none"])
    accuracy = np.asarray(run.metrics["accuracy"], dtype=np.float64)
    assert math.isnan(accuracy[0]) and 0 <= accuracy[1] <= 1
    assert helpers.cli(runs["none"].parent, "status", runs["none"]).returncode == 0


# -- more values no run writes: refused by status and distfl.open ---------------------------


def _set(name: str, value, index=slice(None)):
    def change(f):
        f[name][index] = value

    change.__name__ = f"set_{name}"
    return change


def _attr(group: str, key: str, value: str):
    def change(f):
        f[group].attrs[key] = value

    change.__name__ = f"attr_{key}"
    return change


def _retyped(name: str, dtype):
    def change(f):
        _replace(f, name, f[name][()].astype(dtype))

    change.__name__ = f"retyped_{name}"
    return change


def _retyped_rows(name: str, rows: int):
    def change(f):
        _replace(f, name, f[name][()][:rows])

    change.__name__ = f"rows_{name}"
    return change


def _evaluation_removed(f):
    """Round 2's evaluation deleted, and the federation's figures with it."""
    for key in list(f["metrics/evaluation"]):
        old = f[f"metrics/evaluation/{key}"]
        values, dtype = old[()][:0], old.dtype
        del f[f"metrics/evaluation/{key}"]
        f.create_dataset(f"metrics/evaluation/{key}", data=values, dtype=dtype,
                         maxshape=(None,), chunks=(1,))  # fmt: skip
    for key in ("accuracy", "accuracy_plain", "test_loss", "accuracy_worst", "accuracy_p10"):
        f[f"metrics/{key}"][:] = np.nan


def _two_leaves(f, second: np.ndarray, assignment: np.ndarray) -> None:
    """The root split in round 1 into 0.0 (clients 0-10) and 0.1 (``second``)."""
    f["hierarchy/0"].attrs["split_round"] = 1
    for cid, members in (("0.0", np.arange(0, 11)), ("0.1", second)):
        g = f.create_group(f"hierarchy/{cid}")
        g.attrs["parent"], g.attrs["created_round"], g.attrs["split_round"] = "0", 1, -1
        g["members"] = members
    _replace(f, "final/leaves", np.array(["0.0", "0.1"], dtype=h5py.string_dtype()))
    _replace(f, "final/models", np.concatenate([f["final/models"][()]] * 2))
    _replace(f, "final/assignment", assignment)


def _client_in_two_leaves(f):
    _two_leaves(f, np.arange(10, 20), np.array([0] * 10 + [1] * 10))


def _assignment_not_the_leaves(f):
    _two_leaves(f, np.arange(11, 20), np.array([1] * 11 + [0] * 9))


def _evaluation_table_deleted(f):
    del f["metrics/evaluation"]
    _accuracy_all_nan(f)


def _eleven_classes(f):
    counts = f["clients/class_counts"][()]
    _replace(f, "clients/class_counts", np.pad(counts, ((0, 0), (0, 1))))


def _one_worker_twice(f):
    f["timing/workers/round"][:] = 1


def _long_host(f):
    _replace(f, "world/host", np.array(["h" * 100_000], dtype=h5py.string_dtype()))


PROBES = {
    "train loss NaN in a round clients reported": (
        "none", _set("metrics/train_loss_last", np.nan),
        "/metrics/train_loss_last holds nan in round 1, in which 10 clients reported"),
    "train loss infinite": ("none", _set("metrics/train_loss_first", np.inf, 0),
                            "/metrics/train_loss_first holds inf in round 1"),
    "test loss NaN where evaluated": ("none", _set("metrics/test_loss", np.nan, -1),
                                      "/metrics/test_loss holds NaN in round 2"),
    "evaluation NaN, every client with test data": (
        "none", _set("metrics/evaluation/accuracy", np.nan),
        "/metrics/evaluation/accuracy holds NaN, yet every client of the run has test data"),
    "an evaluation round without its evaluation": (
        "none", _evaluation_removed, "/metrics/evaluation has no evaluation in round 2"),
    "the evaluation table deleted": ("none", _evaluation_table_deleted,
                                     "/metrics/evaluation is missing"),
    "elapsed seconds infinite": ("none", _set("timing/elapsed_s", np.inf, -1),
                                 "/timing/elapsed_s holds inf"),
    "elapsed seconds negative": ("none", _set("timing/elapsed_s", -1.0),
                                 "/timing/elapsed_s holds -1.0"),
    "cache MiB negative": ("none", _set("timing/workers/cache_mb", -5.0),
                           "/timing/workers/cache_mb holds -5.0"),
    "client accuracies of float32": ("none", _retyped("clients/accuracy", np.float32),
                                     "/clients/accuracy holds float32 values"),
    "training samples of int8": ("none", _retyped("clients/num_train", np.int8),
                                 "/clients/num_train holds int8 values"),
    "groups of uint64": ("none", _retyped("clients/group", np.uint64),
                         "/clients/group holds uint64 values"),
    "a metric of float16": ("none", _retyped("metrics/accuracy", np.float16),
                            "/metrics/accuracy holds float16 values"),
    "final models of float64": ("none", _retyped("final/models", np.float64),
                                "/final/models holds float64 values"),
    "final models NaN": ("none", _set("final/models", np.nan),
                         "/final/models holds a value that is not finite"),
    "a state model infinite": ("none", _set("state/models", np.inf, (0, 0)),
                               "/state/models holds a value that is not finite"),
    "members out of order": ("none", _set("hierarchy/0/members", np.arange(19, -1, -1)),
                             "/hierarchy/0/members is not in ascending order"),
    "a client in two leaves": ("none", _client_in_two_leaves,
                               "/hierarchy/0.1/members names client 10, a member of another "
                               "leaf too"),
    "an assignment that is not the leaves'": ("none", _assignment_not_the_leaves,
                                              "/final/assignment puts client 0 in another leaf"),
    "eleven classes of digits": ("none", _eleven_classes,
                                 "/clients/class_counts counts 11 classes; data.dataset = "
                                 "'digits' has 10"),
    "a billion participants": ("none", _set("metrics/num_participants", 10**9, 0),
                               "/metrics/num_participants holds 1000000000, more than the 20 "
                               "clients times clusters"),
    "a worker's trillion clients": ("none", _set("timing/workers/clients", 10**12, 0),
                                    "/timing/workers/clients holds 1000000000000"),
    "a million clusters": ("none", _set("metrics/num_clusters", 10**6),
                           "/metrics/num_clusters holds 1000000, more than the 1 clusters"),
    "one worker rank twice in a round": ("none", _one_worker_twice,
                                         "/timing/workers holds two rows of one worker rank"),
    "a local rank of a million": ("none", _set("world/local_rank", 10**6),
                                  "/world/local_rank holds a rank outside the world"),
    "membership of a million clients": ("none", _set("metrics/membership/clients", 10**6),
                                        "/metrics/membership/clients holds 1000000"),
    "membership of group 99": ("none", _set("metrics/membership/group", 99),
                               "/metrics/membership/group holds a group outside 0..0"),
    "an evaluation of a million clients": ("none", _set("metrics/evaluation/clients", 10**6),
                                           "/metrics/evaluation/clients holds 1000000"),
    "a launcher of 2 MB": ("none", _attr("world", "launcher", "x" * (2 << 20)),
                           "/world@launcher holds 2,097,152 characters of text"),
    "a host of 100,000 characters": ("none", _long_host,
                                     "/world/host holds 100,000 characters of text"),
    "rounds_seen of text": ("cfl", _attr("state/algorithm", "rounds_seen", '"abc"'),
                            "/state/algorithm@rounds_seen = 'abc' is not a count"),
    "rounds_seen negative": ("cfl", _attr("state/algorithm", "rounds_seen", "-7"),
                             "/state/algorithm@rounds_seen = -7 is not a count"),
    "a generator numpy has not": ("fedgwc", _attr("state/algorithm/rng", "bit_generator",
                                                  '"MT19937"'),
                                  "/state/algorithm/rng is not the state of a random generator"),
    "a generator's state of text": ("fedgwc", _attr("state/algorithm/rng/state", "state", '"x"'),
                                    "/state/algorithm/rng/state@state = 'x' is not a "
                                    "generator's state"),
    "a cluster's mse NaN": ("fedgwc", _attr("state/algorithm/clusters/0", "mse", "NaN"),
                            "/state/algorithm/clusters/0@mse = nan holds NaN or Infinity"),
    "a cluster's quiet rounds of text": ("fedgwc", _attr("state/algorithm/clusters/0", "quiet",
                                                         '"x"'),
                                         "/state/algorithm/clusters/0@quiet = 'x' is not a "
                                         "count"),
    "FedGWC's rewards of 3 clients": ("fedgwc", _retyped_rows("state/algorithm/gamma", 3),
                                      "/state/algorithm/gamma holds 3 rows, not 20"),
    "FedGWC's rewards NaN": ("fedgwc", _set("state/algorithm/gamma", np.nan),
                             "/state/algorithm/gamma does not hold finite numbers"),
    "FedAvgM's velocity NaN": ("fedgwc", _set("state/aggregator/velocity", np.nan),
                               "/state/aggregator/velocity does not hold finite numbers"),
    "FedPNS's counts negative": ("fedpns", _set("state/selection/times_selected", -1),
                                 "/state/selection/times_selected does not hold counts from 0"),
    "FedPNS's client 99": ("fedpns", _set("state/selection/counted_ids", 99, -1),
                           "/state/selection/counted_ids does not hold ascending client ids"),
    "FedAvgM's velocity of client 5": ("fedgwc", _attr("state/aggregator", "ids", "[5]"),
                                       "/state/aggregator@ids is not a list of cluster ids"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PROBES))
def test_a_value_no_run_writes_is_refused(helpers, runs, tmp_path, name):
    run, change, needle = PROBES[name]
    path = tampered(runs[run], tmp_path, resealed(change))
    with pytest.raises(CheckpointError, match=re.escape(needle)):
        distfl.open(path)
    proc = helpers.cli(tmp_path, "status", path)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


# -- what the built-in algorithms keep in /state: each value of a declared kind ---------------

SMALL = ["run.rounds=3", "eval.every=2", 'run.progress="none"', "data.num_clients=12",
         "data.samples_per_client=40", "server.clients_per_round=6",
         "data.groups=[{count = 6, alpha = 1000.0}, {count = 6, alpha = 1000.0, "
         "rotation = 180.0}]"]  # fmt: skip


def _states() -> dict[str, list[str]]:
    """Each built-in algorithm (FedGWC also with its observed interaction and FedAvgM, the
    federation also with FedPNS's selection), by name: its overrides."""
    from distfl.algorithms import algorithm_names

    cases = {name: [f'algorithm.name="{name}"'] for name in algorithm_names()}
    cases["fedgwc observed"] = ['algorithm.name="fedgwc"', 'algorithm.interaction="observed"',
                                'server.aggregator="fedavgm"']  # fmt: skip
    cases["fedpns"] = ['participation.selection="fedpns"']
    return cases


def test_every_value_a_built_in_state_holds_has_a_kind(tmp_path):
    """The names of /state's JSON values that distfl's own algorithms, aggregators and
    selection write are those :data:`~distfl.runfile.state_checks.KINDS` gives a kind (so a
    value changed to another kind is refused), and such a file reads."""
    import io

    from distfl.runfile.state_checks import KINDS

    seen: dict[str, str] = {}
    for case, items in _states().items():
        out = tmp_path / f"{case.replace(' ', '-')}.h5"
        distfl.run(preset="digits", overrides=[*SMALL, *items], out=out, stream=io.StringIO())
        with h5py.File(out, "r") as f:

            def visit(name, item, case=case):
                for key in item.attrs:
                    seen.setdefault(key, f"{case}: /state/{name}@{key}")

            f["state"].visititems(visit)
            seen.update({k: f"{case}: /state@{k}" for k in f["state"].attrs})
        assert distfl.open(out).round == 3
    unknown = sorted(where for key, where in seen.items()
                     if key not in KINDS and key not in ("sha256", "config_sha256"))  # fmt: skip
    assert not unknown, unknown
