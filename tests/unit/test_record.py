"""The run file's integrity record and its safe writing (distfl.runfile), on small files made
here: digests by part, what verify names, the atomic write, the writer's lock, and the
checks of an output path."""

from __future__ import annotations

import hashlib
import os

import h5py
import numpy as np
import pytest

from distfl.errors import CheckpointError, UserError
from distfl.runfile import integrity
from distfl.runfile.atomic import RunFileWriteError, write_atomically
from distfl.runfile.output import OutputLock, check_output


def make(path, *, accuracy=(0.5, 0.75), config='{"run": {"rounds": 2}}'):
    with h5py.File(path, "w") as f:
        f.attrs["config"] = config
        f.attrs["world_size"] = 3
        m = f.create_group("metrics")
        m.create_dataset("accuracy", data=np.asarray(accuracy, dtype=np.float64))
        m.create_dataset("cluster", data=np.array(["0", "0.1"], dtype=h5py.string_dtype()))
        node = f.create_group("hierarchy/0")
        node.attrs["split_round"] = -1
        node.create_dataset("members", data=np.arange(5))
        integrity.seal(f)


def test_digests_name_every_dataset_and_attribute(tmp_path):
    make(tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r") as f:
        parts = integrity.digests(f)
        stored = [p.decode() for p in f["integrity/path"][()]]
    assert sorted(parts) == [
        "/@config", "/@world_size", "/hierarchy/0/members", "/hierarchy/0@split_round",
        "/metrics/accuracy", "/metrics/cluster",
    ]  # fmt: skip
    assert stored == sorted(parts)  # the record itself is not a part


def test_a_dataset_digest_is_the_sha256_of_its_dtype_shape_and_bytes(tmp_path):
    make(tmp_path / "a.h5")
    values = np.asarray((0.5, 0.75), dtype=np.float64)
    want = hashlib.sha256(f"{values.dtype.str}{values.shape}".encode() + values.tobytes())
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert integrity.digests(f)["/metrics/accuracy"] == want.hexdigest()


def test_slabs_hash_as_the_whole(tmp_path, monkeypatch):
    with h5py.File(tmp_path / "big.h5", "w") as f:
        f.create_dataset("m", data=np.arange(1000, dtype=np.float32).reshape(100, 10))
    with h5py.File(tmp_path / "big.h5", "r") as f:
        whole = integrity.digests(f)["/m"]
        monkeypatch.setattr(integrity, "SLAB_BYTES", 7 * 40)  # 7 rows a slab, 15 slabs
        assert integrity.digests(f)["/m"] == whole


def test_same_content_same_record_and_one_change_one_part(tmp_path):
    make(tmp_path / "a.h5")
    make(tmp_path / "b.h5")
    make(tmp_path / "c.h5", accuracy=(0.5, 0.7500001))
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "b.h5") as b, \
            h5py.File(tmp_path / "c.h5") as c:  # fmt: skip
        da, db, dc = integrity.digests(a), integrity.digests(b), integrity.digests(c)
    assert da == db
    assert [k for k in da if da[k] != dc[k]] == ["/metrics/accuracy"]


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda f: f["metrics/accuracy"].__setitem__(0, 0.25), "/metrics/accuracy differs"),
        (lambda f: f.attrs.__setitem__("config", "{}"), "/@config differs"),
        (lambda f: f["hierarchy/0"].attrs.__setitem__("split_round", 1),
         "/hierarchy/0@split_round differs"),
        (lambda f: f.__delitem__("hierarchy/0"), "/hierarchy/0 is missing"),
        (lambda f: f["metrics"].__delitem__("cluster"), "/metrics/cluster is missing"),
        (lambda f: f.attrs.__delitem__("world_size"), "/@world_size is missing"),
        (lambda f: f.create_dataset("metrics/new", data=[1]), "/metrics/new was not written"),
    ],
)  # fmt: skip
def test_verify_names_the_damaged_part(tmp_path, damage, needle):
    make(tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r") as f:
        integrity.verify(f, "a.h5")  # intact
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        damage(f)
    with h5py.File(tmp_path / "a.h5", "r") as f, pytest.raises(CheckpointError) as err:
        integrity.verify(f, "a.h5")
    assert "run file a.h5 is damaged: " in str(err.value) and needle in str(err.value)


def test_an_unknown_scheme_is_refused(tmp_path):
    make(tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        f["integrity"].attrs["scheme"] = "sha3-v9"
    with h5py.File(tmp_path / "a.h5", "r") as f, pytest.raises(CheckpointError, match="sha3"):
        integrity.verify(f, "a.h5")


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda f: (f["integrity"].__delitem__("sha256"),
                    f["integrity"].create_dataset("sha256", data=np.arange(6))),
         "has a sha256 that is not a list of SHA-256 digests"),
        (lambda f: (f["integrity"].__delitem__("path"),
                    f["integrity"].create_dataset("path", data=np.arange(6))),
         "has a path that is not a list of text"),
        (lambda f: f["integrity"].create_dataset("more", data=[1]), "holds 'more'"),
        (lambda f: f["integrity/sha256"].__setitem__(0, b"z" * 64), "holds 'zzz"),
        (lambda f: f["integrity"].attrs.__setitem__("scheme", 7), "scheme that is not text"),
    ],
)  # fmt: skip
def test_a_record_of_another_form_is_refused_in_one_line(tmp_path, damage, needle):
    make(tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        damage(f)
    with h5py.File(tmp_path / "a.h5", "r") as f, pytest.raises(CheckpointError) as err:
        integrity.verify(f, "a.h5")
    assert "run file a.h5 is damaged: its integrity record /integrity " in str(err.value)
    assert needle in str(err.value)


def test_an_added_part_is_refused_before_anything_is_hashed(tmp_path, monkeypatch):
    """16 GB of float64 claimed by a chunked dataset with no chunk on disk: named at once,
    not hashed first."""
    make(tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        f.create_dataset("metrics/huge", shape=(2 * 10**9,), dtype="f8", chunks=(1 << 16,))

    def hashed(ds):
        raise AssertionError(f"{ds.name} hashed")

    monkeypatch.setattr(integrity, "_dataset_digest", hashed)
    with h5py.File(tmp_path / "a.h5", "r") as f, pytest.raises(CheckpointError) as err:
        integrity.verify(f, "a.h5")
    assert "/metrics/huge was not written by distfl" in str(err.value)


@pytest.mark.parametrize(
    "make_dataset, needle",
    [
        (lambda f: f.create_dataset("metrics/gz", data=np.zeros(100), compression="gzip",
                                    chunks=(10,)), "/metrics/gz is filtered with deflate"),
        (lambda f: f.create_dataset("metrics/out", shape=(4,), dtype="f8",
                                    external=[("/dev/zero", 0, 32)]),
         "/metrics/out keeps its values in another file"),
        (lambda f: f.create_dataset("metrics/claim", shape=(10**8,), dtype="f8",
                                    chunks=(1 << 16,), compression="lzf"),
         "/metrics/claim claims 762.9 MiB of values but holds 0 bytes on disk"),
    ],
)  # fmt: skip
def test_a_dataset_that_is_not_held_as_distfl_holds_it_is_refused(
    tmp_path, monkeypatch, make_dataset, needle
):
    """Sealed with it (the record is a checksum; the one that claims 763 MiB with a digest
    made up, as hashing it would read them): a dataset filtered as distfl never does, one
    whose values lie in another file, one that claims more than its bytes hold. None is
    hashed."""
    path = tmp_path / "a.h5"
    real = integrity._dataset_digest
    with h5py.File(path, "w") as f:
        f.attrs["config"] = "{}"
        make_dataset(f)
        monkeypatch.setattr(integrity, "_dataset_digest", lambda ds: "0" * 64)
        integrity.seal(f)
    monkeypatch.setattr(integrity, "_dataset_digest", real)
    with h5py.File(path, "r") as f, pytest.raises(CheckpointError) as err:
        integrity.verify(f, "a.h5")
    assert needle in str(err.value)


# -- writing -------------------------------------------------------------------------------


def test_write_atomically_replaces_and_leaves_nothing_beside(tmp_path):
    target = tmp_path / "run.h5"
    target.write_bytes(b"old")
    write_atomically(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["run.h5"]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "run.h5"
    target.write_bytes(b"old")
    os.chmod(tmp_path, 0o500)  # no new file in the directory
    try:
        if os.access(tmp_path, os.W_OK):  # root writes anyway: a missing directory instead
            os.chmod(tmp_path, 0o700)
            target = tmp_path / "gone" / "run.h5"
        with pytest.raises(RunFileWriteError) as err:
            write_atomically(target, b"new")
    finally:
        os.chmod(tmp_path, 0o700)
    assert f"cannot write the run file {target}" in str(err.value)
    assert (tmp_path / "run.h5").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["run.h5"]


def test_the_lock_admits_one_writer(tmp_path):
    target = tmp_path / "run.h5"
    first = OutputLock(target)
    first.acquire()
    assert (tmp_path / "run.h5.lock").read_text().startswith(f"pid {os.getpid()} on ")
    with pytest.raises(UserError, match="being written by another distfl run"):
        OutputLock(target).acquire()  # another open file: flock refuses it
    first.release()
    assert not (tmp_path / "run.h5.lock").exists()
    with OutputLock(target):  # free again
        pass


def test_check_output(tmp_path):
    target = tmp_path / "run.h5"
    check_output(target, force=False, resuming=None, need_bytes=0)  # a new path
    target.write_text("notes")
    with pytest.raises(UserError, match="exists .a file of 5 bytes.*--force"):
        check_output(target, force=False, resuming=None, need_bytes=0)
    check_output(target, force=True, resuming=None, need_bytes=0)
    check_output(target, force=False, resuming=target, need_bytes=0)  # the file resumed
    (tmp_path / "d.h5").mkdir()
    with pytest.raises(UserError, match="not a regular file"):
        check_output(tmp_path / "d.h5", force=True, resuming=None, need_bytes=0)
    with pytest.raises(RunFileWriteError, match="free on its disk"):
        check_output(tmp_path / "new.h5", force=False, resuming=None, need_bytes=1 << 62)
    nested = tmp_path / "a" / "b" / "run.h5"
    check_output(nested, force=False, resuming=None, need_bytes=0)
    assert nested.parent.is_dir() and os.listdir(nested.parent) == []
