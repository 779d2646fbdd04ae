"""Run files written by distfl 0.1.0 before each algorithm had its own keys and before the
cluster tree had one owner (tests/data/runfiles-v0.1.0/: a flat [algorithm] section with
every algorithm's keys, cluster members also stored in /state/algorithm) still load:
inspect, gather and report read them, and each resumes to the same bits as a run of its
stored config from the start with today's code.

The files were written by that version's ``distfl run`` on small federations (one per
algorithm, each finishing on an evaluation round, so that extending ``run.rounds`` adds no
evaluation a fresh run would not have). Bits are those of a CPU's float kernels:
``kernels.sha256`` holds the fingerprint (tests/runfile.py) of the machine that wrote them,
and the bit-for-bit comparison runs where this machine's fingerprint is the same. The
server's numpy math (CFL's weighted mean update, a BLAS product) takes the kernel OpenBLAS
picks for the CPU: the files were written where it picked its Haswell kernel (an AVX-512
CPU gets SkylakeX's, whose last bits differ), so the runs here pin OPENBLAS_CORETYPE to
the writer's kernel, which any AVX2 CPU runs."""

from __future__ import annotations

import functools
import io
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same, kernel_fingerprint, read_run
from timing import limit

from distfl.runfile.checkpoint import UNVERIFIED, read_run_file
from distfl.tools.gather import gather_rows
from distfl.tools.inspection import inspect_run

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "runfiles-v0.1.0"
FILES = sorted(DATA.glob("*.h5"))
MORE = 4  # rounds added on resume


#: the OpenBLAS kernel of the machine that wrote the files
WRITER_BLAS = "Haswell"


#: the default limit of one distfl command (catches a hang)
TIMEOUT = limit(600)


def distfl(helpers, cwd, *args, timeout=TIMEOUT):
    """``distfl ARGS`` as a process of its own, with the writer's OpenBLAS kernel (chosen
    when OpenBLAS loads: a process's first import of numpy)."""
    return subprocess.run(
        [sys.executable, "-m", "distfl", *args], cwd=cwd,
        env=helpers.clean_env(OPENBLAS_CORETYPE=WRITER_BLAS),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def stored(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])


def test_the_files_are_of_the_old_layout():
    assert [p.stem for p in FILES] == [
        "cfl", "emdcfl", "fedgwc", "fesem", "flcl", "ifca", "none", "oracle",
    ]  # fmt: skip
    for path in FILES:
        algorithm = stored(path)["algorithm"]
        assert {"emd_epsilon", "flcl_eta", "beta", "eps1", "num_clusters"} <= set(algorithm)
    with h5py.File(DATA / "fedgwc.h5", "r") as f:
        assert "members" in f["state/algorithm/clusters/0.0"]
    with h5py.File(DATA / "ifca.h5", "r") as f:
        assert "assign" in f["state/algorithm"]


def test_the_stored_configs_keep_each_algorithms_own_values():
    emd = read_run_file(DATA / "emdcfl.h5", state=False).config.algorithm
    old = stored(DATA / "emdcfl.h5")["algorithm"]
    # EMD-CFL's ε was emd_epsilon; the flat table's epsilon was FedGWC's
    assert (emd.name, emd.epsilon, emd.steps, emd.samples) == (
        "emdcfl", old["emd_epsilon"], old["emd_steps"], old["emd_samples"],
    )  # fmt: skip
    assert emd.epsilon != old["epsilon"]
    flcl = read_run_file(DATA / "flcl.h5", state=False).config.algorithm
    assert (flcl.period, flcl.eta) == (3, 0.9)
    fedgwc = read_run_file(DATA / "fedgwc.h5", state=False).config.algorithm
    assert (fedgwc.epsilon, fedgwc.patience) == (0.001, 2)
    none = read_run_file(DATA / "none.h5", state=False).config
    assert none.to_dict()["algorithm"] == {"name": "none"}
    # written before the per-client draw: they keep drawing their clients as 0.1.0 did
    assert "draw" not in stored(DATA / "none.h5")["data"]
    assert none.data.draw == "sequential"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_inspect_reads_them(path):
    assert read_run_file(path).state["round"] > 0  # the SHA-256 of /state checks out
    shown, said = io.StringIO(), io.StringIO()
    inspect_run(path, shown, errors=said)
    assert "hierarchy" in shown.getvalue()
    assert f"run        {stored(path)['algorithm']['name']} on " in shown.getvalue()
    # they have no integrity record: read, and said to be unverified
    assert "UNVERIFIED" in shown.getvalue().splitlines()[0]
    assert said.getvalue() == f"distfl: warning: run file {path} {UNVERIFIED}\n"


def test_a_resume_of_one_needs_trust_unverified(helpers, tmp_path):
    copy = tmp_path / "none.h5"
    shutil.copy(DATA / "none.h5", copy)
    proc = helpers.cli(tmp_path, "run", "--resume", str(copy), "--set", "run.rounds=6")
    assert_one_line_error(proc, f"run file {copy} has no integrity record", "--trust-unverified")
    assert copy.read_bytes() == (DATA / "none.h5").read_bytes()


def test_gather_reads_them(helpers, tmp_path):
    table = helpers.cli(tmp_path, "gather", str(DATA), "--key", "algorithm.epsilon",
                        "--csv", str(tmp_path / "t.csv"))  # fmt: skip
    assert table.returncode == 0, table.stderr
    rows = {r["file"]: r for r in gather_rows(FILES, keys=["algorithm.epsilon"])}
    assert rows[str(DATA / "emdcfl.h5")]["algorithm.epsilon"] == 0.02  # emd_epsilon's value
    assert rows[str(DATA / "fedgwc.h5")]["algorithm.epsilon"] == 0.001
    assert rows[str(DATA / "cfl.h5")]["algorithm.epsilon"] is None
    assert len(table.stdout.strip().splitlines()) == len(FILES) + 1


@pytest.mark.parametrize("name", ["fedgwc", "emdcfl", "cfl"])
def test_report_reads_them(helpers, tmp_path, name):
    proc = helpers.cli(tmp_path, "report", str(DATA / f"{name}.h5"), "--out",
                       str(tmp_path / "rep"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rep" / "index.html").exists()
    assert list((tmp_path / "rep").glob("split-*-matrices.png"))


#: the float kernels of the machine that wrote the files (tests/runfile.py)
KERNELS = (DATA / "kernels.sha256").read_text().strip()


@functools.cache
def other_kernels() -> str | None:
    """Why this machine's bits cannot be those of the files, or None where they can."""
    here = kernel_fingerprint()
    if here == KERNELS:
        return None
    return (
        f"this CPU's float32 kernels (fingerprint {here[:12]}) differ from those of the "
        f"machine that wrote the files ({KERNELS[:12]}): its bits cannot be theirs"
    )


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, helpers):
    """Each old file resumed for MORE rounds, and its stored config run from the start for
    as many rounds, both by today's code; the runs from the start only where they can be
    compared bit for bit (the same float kernels as the writer's: None elsewhere). Where
    they cannot, the bits do not matter, nor the OpenBLAS kernel: the resumes run one after
    the other in this process (the code of ``distfl run``), saving a start of torch each."""
    tmp = tmp_path_factory.mktemp("old-runfiles")
    compare = other_kernels() is None

    def one(path: Path):
        rounds = stored(path)["run"]["rounds"] + MORE
        copy = tmp / f"{path.stem}-resumed.h5"
        shutil.copy(path, copy)
        toml = tmp / f"{path.stem}.toml"
        toml.write_text(read_run_file(path, state=False).config.to_toml())
        fresh = tmp / f"{path.stem}-fresh.h5"
        args = ("run", "--resume", str(copy), "--set", f"run.rounds={rounds}",
                "--trust-unverified")  # fmt: skip
        if not compare:
            return path.stem, (helpers.cli(tmp, *args), copy), (None, None)
        a = distfl(helpers, tmp, *args)
        b = distfl(helpers, tmp, "run", "--config", str(toml), "--out", str(fresh),
                   "--set", f"run.rounds={rounds}")  # fmt: skip
        return path.stem, (a, copy), (b, fresh)

    if not compare:
        return {name: (a, b) for name, a, b in map(one, FILES)}
    with ThreadPoolExecutor(max_workers=4) as pool:
        return {name: (a, b) for name, a, b in pool.map(one, FILES)}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_they_resume(resumed, path):
    (a, resumed_file), _ = resumed[path.stem]
    assert a.returncode == 0, a.stderr
    rounds = stored(path)["run"]["rounds"]
    with h5py.File(resumed_file, "r") as f, h5py.File(path, "r") as old:
        assert int(f["state"].attrs["round"]) == rounds + MORE
        assert len(f["metrics/round"]) == rounds + MORE
        # the stored rounds are kept as they were
        column = "metrics/train_loss_last"
        assert f[column][:rounds].tobytes() == old[column][()].tobytes()


def assert_same_resumed(resumed: Path, fresh: Path, old: Path) -> None:
    """``resumed`` (``old`` resumed) and ``fresh`` (its config run from the start) bit for
    bit: every dataset and attribute ``old`` had that today's code still writes, and every
    one added since that both files hold, except where the old file could not have had it
    for its own rounds: a column of a per-row table of /metrics that ``old`` lacks (a
    statistic such as FLCL's regret, a table such as /metrics/membership) is compared over
    the rows of the resumed rounds (NaN in the fresh run's where the resumed run lacks the
    column); one only the fresh run has elsewhere (something a split in the old file's
    rounds stores today) is left out."""
    had = read_run(old)
    a, b = read_run(resumed), read_run(fresh)
    assert set(a) <= set(b), f"only in the resumed file: {sorted(set(a) - set(b))}"
    last = int(np.max(had["metrics/round"]))  # the old file's last round

    def rows(run: dict, key: str) -> np.ndarray | None:
        """The rows of the resumed rounds of a column of a per-row /metrics table that the
        old file lacked; None for any other key."""
        table = key.rpartition("/")[0]
        if key in had or not key.startswith("metrics/") or "@" in key:
            return None
        if f"{table}/round" not in run:
            return None
        return run[key][run[f"{table}/round"] > last]

    whole = sorted(k for k in b if (k in had or k in a) and rows(b, k) is None)
    assert [k for k in whole if k not in a] == [], "the resumed file lacks what the old one had"
    assert_same({k: a[k] for k in whole}, {k: b[k] for k in whole})
    for key in sorted(b):
        mine = rows(b, key)
        if mine is None:
            continue
        if key in a:
            assert_same({key: rows(a, key)}, {key: mine})
        else:  # never recorded in the resumed rounds: nor by the fresh run in them
            assert mine.dtype.kind == "f" and np.isnan(mine).all(), key


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_resume_equals_a_run_from_the_start(resumed, path):
    """The file's own rounds, written by 0.1.0, are those today's code computes from the
    start, and its resumed rounds those of the uninterrupted run: bit for bit, which only
    a machine with the same float kernels as the one that wrote the files can show. The
    comparison covers the datasets the old file had and those added since that both files
    hold; a column of a /metrics table the old file lacked (a statistic 0.1.0 dropped, such
    as FLCL's regret and bound, or a table it did not write) only over the resumed rounds'
    rows, as the old file cannot have it for its own rounds (:func:`assert_same_resumed`)."""
    if (why := other_kernels()) is not None:
        pytest.skip(why)
    (a, resumed_file), (b, fresh_file) = resumed[path.stem]
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert_same_resumed(resumed_file, fresh_file, path)
