"""A run file changed after distfl wrote it is refused by every reader (status, inspect,
report, gather, ``run --resume`` and ``distfl.open``) with exit code 2 and one line, never
a traceback and never accepted:

- its integrity record deleted (the file's format always has one), with the stored config
  edited or not;
- a soft link, an external link, or a second name (hard link) of a part added;
- crafted parts sealed anew with distfl's own record (a checksum, not a signature): a
  member id outside the clients, a deleted per-client array, a part no run file has, an
  algorithm's table whose columns differ in length.

distfl 0.1.0's files, which have no record, stay readable (tests/test_old_runfiles.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error

from distfl.record import integrity

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("tamper")
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--preset", "digits", "--set", "run.rounds=2",
         "--set", 'run.progress="none"', "--out", "run.h5"],
        cwd=tmp, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return tmp / "run.h5"


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


def _resealed(change):
    def tamper(f: h5py.File) -> None:
        change(f)
        del f["integrity"]
        integrity.seal(f)

    tamper.__name__ = change.__name__
    return tamper


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


TAMPERS = {
    "record deleted": (_unsealed, "no integrity record"),
    "record deleted, config edited": (_unsealed_and_edited, "no integrity record"),
    "record deleted, state edited": (_unsealed_state_edited, "no integrity record"),
    "soft link": (_soft_link, "/hierarchy/0.3 is a soft link"),
    "hard link": (_hard_link, "/metrics/clusters/zz is a second name of"),
    "hard link sorting first": (_hard_link_first, "is a second name of"),
    "external link": (_external_link, "/zz is an external link"),
    "resealed: member out of range": (_resealed(_member_out_of_range),
                                      "/hierarchy/0/members holds a client id outside"),
    "resealed: clients/group deleted": (_resealed(_group_deleted), "/clients/group is missing"),
    "resealed: undeclared part": (_resealed(_undeclared_part), "notes is no part"),
    "resealed: soft link": (_resealed(_soft_link_resealed), "is a soft link"),
    "resealed: an uneven table": (_resealed(_uneven_own_table),
                                  "/metrics/tables/mine's columns are not of one length"),
}  # fmt: skip

READERS = {
    "status": lambda f, d: ["status", f],
    "inspect": lambda f, d: ["inspect", f],
    "report": lambda f, d: ["report", f, "--out", str(d / "report")],
    "gather": lambda f, d: ["gather", f],
    "resume": lambda f, d: ["run", "--resume", f, "--set", "run.rounds=3"],
}


@pytest.mark.parametrize("name", list(TAMPERS))
def test_every_reader_refuses_a_tampered_file(written, tmp_path, name):
    tamper, needle = TAMPERS[name]
    path = tmp_path / "run.h5"
    shutil.copy(written, path)
    with h5py.File(path, "r+") as f:
        tamper(f)
    before = path.read_bytes()
    for reader, args in READERS.items():
        proc = subprocess.run(
            [sys.executable, "-m", "distfl", *args(str(path), tmp_path)], cwd=tmp_path,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if reader == "gather":  # gather skips what it cannot read, says why, exits 1 or 2
            assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
            assert needle in proc.stderr, (reader, proc.stderr)
            continue
        line = assert_one_line_error(proc, needle)
        assert "run.h5" in line, (reader, line)
    assert path.read_bytes() == before  # nothing rewrote it
    assert not (tmp_path / "report").exists() or not any((tmp_path / "report").iterdir())
    code = f"import distfl; distfl.open({str(path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr
