"""A run file changed after distfl wrote it is refused by every reader (status, inspect,
report, gather, compare, ``run --resume`` and ``distfl.open``) with exit code 2 and one
line, never a traceback, never accepted, never read at the cost of gigabytes or minutes:

- its integrity record deleted (the file's format always has one), with the stored config
  edited or not; the record's own datasets of another type;
- a soft link, an external link, or a second name (hard link) of a part added; a dataset
  added without sealing again (refused by its name before anything is hashed, however
  large it claims to be);
- crafted parts sealed anew with distfl's own record (a checksum, not a signature): a
  member id outside the clients, a deleted per-client array, a part no run file has, an
  algorithm's table whose columns differ in length, a round that is no round of the run,
  JSON nested 100,000 deep, metrics of text or of two dimensions, negative class counts, a
  world of 10^18 ranks, models of another shape, a dataset claiming far more values than
  its bytes on disk hold, and a stored config changed since the state was computed.

Each reader is called in this process (``distfl.cli.main``). A file without an integrity
record that is not of a sealed format (distfl 0.1.0's, or one made to look like one) is
read, but every reader says it is unverified, and ``--resume`` of it needs
``--trust-unverified`` (tests/test_old_runfiles.py reads the real 0.1.0 files)."""

from __future__ import annotations

import json
import shutil
import tracemalloc
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import refused_by_every_reader, resealed, seal_anew, tampered
from timing import limit

import distfl
from distfl.config import from_json
from distfl.errors import CheckpointError, UnverifiedRunFile
from distfl.runfile.digest import config_digest

pytestmark = pytest.mark.integration

ROUNDS = 2


@pytest.fixture(scope="module")
def written(tmp_path_factory, helpers) -> Path:
    tmp = tmp_path_factory.mktemp("tamper")
    helpers.run_alone(tmp, "--preset", "digits", "--set", f"run.rounds={ROUNDS}",
                      "--set", 'run.progress="none"', "--out", "run.h5")  # fmt: skip
    return tmp / "run.h5"


# -- changes to a file ---------------------------------------------------------------------


def _unsealed(f: h5py.File) -> None:
    del f["integrity"]


def _unsealed_and_edited(f: h5py.File) -> None:
    config = json.loads(f.attrs["config"])
    config["run"]["rounds"] = 1000
    f.attrs["config"] = json.dumps(config, sort_keys=True)
    del f["integrity"]


def _unsealed_state_edited(f: h5py.File) -> None:
    f["state/client_accuracy"][0] = 0.5
    del f["integrity"]


def _soft_link(f: h5py.File) -> None:
    f["hierarchy/0.3"] = h5py.SoftLink("/hierarchy/0")


def _hard_link(f: h5py.File) -> None:
    f["metrics/clusters/zz"] = f["metrics/clusters/mse"]


def _hard_link_first(f: h5py.File) -> None:  # the second name sorts before the first
    f["clients/aa"] = f["clients/num_test"]


def _external_link(f: h5py.File) -> None:
    f["zz"] = h5py.ExternalLink("other.h5", "/x")


def _huge_unsealed(f: h5py.File) -> None:
    """16 GB of float64 claimed by a chunked dataset of no chunk (a few KB on disk)."""
    f.create_dataset("metrics/extra", shape=(2 * 10**9,), dtype="f8", chunks=(1 << 16,))


def _odd_name_added(f: h5py.File) -> None:
    f["metrics/x\x1b[2J\nmore"] = np.arange(2)


def _record_of_integers(f: h5py.File) -> None:
    n = len(f["integrity/sha256"])
    del f["integrity/sha256"]
    f["integrity/sha256"] = np.arange(n, dtype=np.int64)


def _member_out_of_range(f: h5py.File) -> None:
    members = f["hierarchy/0/members"]
    members[0] = 99_999


def _group_deleted(f: h5py.File) -> None:
    del f["clients/group"]


def _undeclared_part(f: h5py.File) -> None:
    f["notes"] = np.arange(3)


def _uneven_own_table(f: h5py.File) -> None:
    f["metrics/tables/mine/round"] = np.arange(3)
    f["metrics/tables/mine/gap"] = np.zeros(2)


def _soft_link_resealed(f: h5py.File) -> None:
    f["hierarchy/0.3"] = h5py.SoftLink("/hierarchy/0")


def _round(value: str):
    def change(f: h5py.File) -> None:
        f["state"].attrs["round"] = value

    return change


DEEP = "[" * 100_000 + "]" * 100_000


def _deep_config(f: h5py.File) -> None:
    text = f.attrs["config"]
    f.attrs["config"] = text.replace('"export": []', f'"export": {DEEP}')


def _metric_as_text(f: h5py.File) -> None:
    del f["metrics/accuracy"]
    f["metrics/accuracy"] = np.array(["0.5", "0.9"], dtype=h5py.string_dtype())


def _metric_in_two_dimensions(f: h5py.File) -> None:
    del f["metrics/accuracy"]
    f["metrics/accuracy"] = np.full((ROUNDS, 3), 0.5)


def _accuracy_of_seven(f: h5py.File) -> None:
    f["metrics/accuracy"][-1] = 7.0


def _negative_counts(f: h5py.File) -> None:
    counts = f["clients/class_counts"]
    counts[0, 0] = -5


def _world_of_a_quintillion(f: h5py.File) -> None:
    f.attrs["world_size"] = 10**18


def _wider_state_models(f: h5py.File) -> None:
    models = f["state/models"][()]
    del f["state/models"]
    f["state/models"] = np.zeros((models.shape[0], models.shape[1] + 1), np.float32)


def _models_claimed(f: h5py.File) -> None:
    """/state/models of 100,000 × 4,810 float32 (1.8 GiB), of which no chunk is on disk."""
    del f["state/models"]
    f.create_dataset("state/models", shape=(100_000, 4810), dtype="f4", chunks=(64, 4810),
                     compression="lzf")  # fmt: skip


def _lr_changed(f: h5py.File) -> None:
    config = json.loads(f.attrs["config"])
    config["train"]["lr"] = 0.5
    f.attrs["config"] = json.dumps(config, sort_keys=True)


def _parent_loop(f: h5py.File) -> None:
    node = f["hierarchy/0"]
    node.attrs["parent"] = "0.1"
    node.attrs["split_round"] = 1
    node.attrs["created_round"] = 1
    child = f.create_group("hierarchy/0.1")
    child.attrs["parent"] = "0"
    child.attrs["created_round"] = 1
    child.attrs["split_round"] = 1
    child["members"] = np.arange(3)


def _node_of_another_name(f: h5py.File) -> None:
    f.create_group("hierarchy/x\x1b[2J").create_dataset("members", data=np.arange(2))
    g = f["hierarchy/x\x1b[2J"]
    g.attrs["parent"] = ""
    g.attrs["created_round"] = 0
    g.attrs["split_round"] = -1


TAMPERS = {
    "record deleted": (_unsealed, "no integrity record"),
    "record deleted, config edited": (_unsealed_and_edited, "no integrity record"),
    "record deleted, state edited": (_unsealed_state_edited, "no integrity record"),
    "soft link": (_soft_link, "/hierarchy/0.3 is a soft link"),
    "hard link": (_hard_link, "/metrics/clusters/zz is a second name of"),
    "hard link sorting first": (_hard_link_first, "is a second name of"),
    "external link": (_external_link, "/zz is an external link"),
    "16 GB added, not sealed": (_huge_unsealed, "/metrics/extra was not written by distfl"),
    "a name of control characters added": (_odd_name_added,
                                           "/metrics/x\\x1b[2J\\nmore was not written by"),
    "record of integers": (_record_of_integers,
                           "/integrity has a sha256 that is not a list of SHA-256 digests"),
    "resealed: member out of range": (resealed(_member_out_of_range),
                                      "/hierarchy/0/members holds a client id outside"),
    "resealed: clients/group deleted": (resealed(_group_deleted), "/clients/group is missing"),
    "resealed: undeclared part": (resealed(_undeclared_part), "notes is no part"),
    "resealed: soft link": (resealed(_soft_link_resealed), "is a soft link"),
    "resealed: an uneven table": (resealed(_uneven_own_table),
                                  "/metrics/tables/mine's columns are not of one length"),
    "resealed: round -5": (resealed(_round("-5")), "/state@round = -5 is not a round of this run"),
    "resealed: round 1e999": (resealed(_round("1e999")), "/state@round = inf is not a round"),
    "resealed: round of text": (resealed(_round('"abc"')), "/state@round = 'abc' is not a round"),
    "resealed: round nested deep": (resealed(_round(DEEP)),
                                    "/state@round is nested deeper than 32 levels"),
    "resealed: round without its metrics": (resealed(_round("1")),
                                            "/metrics/round holds 2 rows, not one for each"),
    "resealed: config nested deep": (resealed(_deep_config),
                                     "its stored config is invalid: the stored config nests"),
    "resealed: metric of text": (resealed(_metric_as_text),
                                 "/metrics/accuracy holds object values; a run file's are float"),
    "resealed: metric of two dimensions": (resealed(_metric_in_two_dimensions),
                                           "/metrics/accuracy has 2 dimensions"),
    "resealed: accuracy of 7": (resealed(_accuracy_of_seven),
                                "/metrics/accuracy holds an accuracy outside 0..1"),
    "resealed: negative class count": (resealed(_negative_counts),
                                       "/clients/class_counts holds a negative count"),
    "resealed: a world of 10^18": (resealed(_world_of_a_quintillion),
                                   "@world_size = 1000000000000000000 is not a world of this run"),
    "resealed: state models of another width": (resealed(_wider_state_models),
                                                "/state/models holds 1 models of 4811 parameters"),
    "resealed: models claimed, not held": (resealed(_models_claimed),
                                           "/state/models claims 1.8 GiB of values but holds 0"),
    "resealed: lr changed": (resealed(_lr_changed),
                             "the stored config is not the one /state was computed with"),
    "resealed: parents in a loop": (resealed(_parent_loop, digest=True), "parents loop back"),
    "resealed: a node of another name": (resealed(_node_of_another_name),
                                         "/hierarchy holds 'x\\x1b[2J', which is not a cluster id"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(TAMPERS))
def test_every_reader_refuses_a_tampered_file(helpers, written, tmp_path, name):
    tamper, needle = TAMPERS[name]
    path = tampered(written, tmp_path, tamper)
    refused_by_every_reader(helpers, path, needle, rounds=ROUNDS)


def test_a_huge_claim_is_refused_with_a_few_mib(helpers, written, tmp_path):
    """16 GB claimed by an added dataset, 1.8 GiB by /state/models (the file is a few
    hundred KB): each reader answers (within a hang's limit) with little memory."""
    for tamper in (_huge_unsealed, resealed(_models_claimed)):
        path = tampered(written, tmp_path, tamper)
        assert path.stat().st_size < 1 << 20
        for args in (["status", path], ["run", "--resume", path, "--set", "run.rounds=3"]):
            tracemalloc.start()
            proc = helpers.cli(tmp_path, *args, timeout=limit(30))
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert proc.returncode == 2, proc.stderr
            assert peak < 64 << 20, (args[0], peak)


def _two_million_clients(f: h5py.File) -> None:
    """An 8 MB file that claims 2,000,000 clients: its config and every per-client array
    grown to them, filled with zeros."""
    K = 2_000_000
    config = json.loads(f.attrs["config"])
    config["data"]["num_clients"] = K
    f.attrs["config"] = json.dumps(config, sort_keys=True)
    for name in ("clients/group", "clients/num_train", "clients/num_test",
                 "clients/class_counts", "clients/accuracy", "final/assignment",
                 "hierarchy/0/members", "state/client_accuracy"):  # fmt: skip
        old = f[name]
        shape, dtype = (K, *old.shape[1:]), old.dtype
        del f[name]
        values = np.zeros(shape, dtype)
        if name == "hierarchy/0/members":
            values = np.arange(K)
        f.create_dataset(name, data=values, chunks=True, compression="lzf")


def test_a_file_claiming_two_million_clients_is_refused_with_little_memory(
    helpers, written, tmp_path
):
    path = tampered(written, tmp_path, resealed(_two_million_clients, digest=True))
    assert path.stat().st_size < 16 << 20
    tracemalloc.start()
    proc = helpers.cli(tmp_path, "inspect", path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert_one_line_error(proc, "client holds fewer than two samples")
    assert peak < 256 << 20, peak


# -- a file without an integrity record ------------------------------------------------------


def _made_old(f: h5py.File) -> None:
    """Everything a file of distfl 0.1.0 lacks deleted, then a metric changed."""
    del f["integrity"]
    for key in ("format", "written"):
        del f.attrs[key]
    del f["world"]
    del f["timing/workers"]
    del f["state"].attrs["config_sha256"]
    f["metrics/accuracy"][-1] = 0.99


def test_a_file_without_a_record_is_read_as_unverified_everywhere(helpers, written, tmp_path):
    path = tampered(written, tmp_path, _made_old)
    said = "has no integrity record (distfl 0.1.0 wrote none)"
    proc = helpers.cli(tmp_path, "status", path)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{path}: finished (round 2 of 2)")
    assert f"distfl: warning: run file {path} {said}" in proc.stderr
    proc = helpers.cli(tmp_path, "inspect", path)
    assert proc.returncode == 0 and "UNVERIFIED" in proc.stdout.splitlines()[0]
    assert said in proc.stderr
    proc = helpers.cli(tmp_path, "gather", path)
    assert proc.returncode == 0 and said in proc.stderr
    proc = helpers.cli(tmp_path, "compare", path, tmp_path / "good.h5")
    assert proc.returncode == 1 and "A  " in proc.stdout and "(unverified:" in proc.stdout
    assert said in proc.stderr
    proc = helpers.cli(tmp_path, "report", path, "--out", tmp_path / "rep")
    assert proc.returncode == 0 and said in proc.stderr
    assert "unverified" in (tmp_path / "rep" / "index.html").read_text()
    with pytest.warns(UnverifiedRunFile, match="has no integrity record"):
        run = distfl.open(path)
    assert run.verified is False and run.accuracy == pytest.approx(0.99)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distfl.open(tmp_path / "good.h5").verified is True
    before = path.read_bytes()
    proc = helpers.cli(tmp_path, "run", "--resume", path, "--set", "run.rounds=3")
    assert_one_line_error(proc, f"{path} {said}", "--trust-unverified")
    assert path.read_bytes() == before
    proc = helpers.cli(tmp_path, "run", "--resume", path, "--set", "run.rounds=3",
                      "--trust-unverified")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert distfl.open(path).verified and distfl.open(path).round == 3  # sealed when written


# -- text from a file --------------------------------------------------------------------------


def test_text_from_a_file_is_printed_with_its_control_characters_escaped(
    helpers, written, tmp_path
):
    def colour(f):
        f["world/host"][0] = "\x1b[31mred\x1b[0m"
        f.attrs["distfl_version"] = "0.1\x1b]0;title\x07"

    path = tampered(written, tmp_path, resealed(colour))
    proc = helpers.cli(tmp_path, "inspect", path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "distfl 0.1\\x1b]0;title\\x07" in proc.stdout
    assert "world      \\x1b[31mred\\x1b[0m rank 0" in proc.stdout


def test_a_file_from_before_an_algorithm_key_existed_is_read(helpers, tmp_path):
    """A run file written before one of its algorithm's keys existed (FedSoft's ``start``)
    holds a config without the key and a digest taken without it: it is read, the key at
    its stored default (what the run did), and resumes; the same file with another key
    changed is still refused."""
    helpers.run_alone(tmp_path, "--preset", "digits", "--set", 'algorithm.name="fedsoft"',
                      "--set", "run.rounds=2", "--set", 'run.progress="none"',
                      "--out", "run.h5")  # fmt: skip
    old = tmp_path / "old.h5"
    shutil.copy(tmp_path / "run.h5", old)
    with h5py.File(old, "r+") as f:
        stored = json.loads(f.attrs["config"])
        del stored["algorithm"]["start"]
        f.attrs["config"] = json.dumps(stored)
        config = from_json(f.attrs["config"])
        f["state"].attrs["config_sha256"] = config_digest(
            config, leave_out=frozenset({"algorithm.start"})
        )
        seal_anew(f)
    run = distfl.open(old)
    assert run.config.algorithm.params.start == "personal"
    assert run.summary()["accuracy"] == distfl.open(tmp_path / "run.h5").summary()["accuracy"]
    resumed = helpers.cli(tmp_path, "run", "--resume", str(old), "--set", "run.rounds=3")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # another key changed under the same digest: refused, in one line
    changed = tmp_path / "changed.h5"
    shutil.copy(tmp_path / "run.h5", changed)
    with h5py.File(changed, "r+") as f:
        stored = json.loads(f.attrs["config"])
        del stored["algorithm"]["start"]
        stored["algorithm"]["lam"] = 0.5
        f.attrs["config"] = json.dumps(stored)
        seal_anew(f)
    with pytest.raises(CheckpointError, match="config_sha256, differs"):
        distfl.open(changed)
