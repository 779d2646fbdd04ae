"""Reading a run file never runs code from it. A run file stores its config, whose
``run.plugins`` names Python modules; ``status``, ``inspect``, ``report`` and ``gather``
read a file without importing them (an algorithm of one's own is shown from the stored
values), and ``run --resume`` imports them only when the command line names them again or
says ``--trust-plugins``.

Two files of a real run of a plug-in's algorithm (2 rounds of the digits preset): the file
as written, and the same file with its stored config edited (h5py) so that ``run.plugins``
also names ``evil.py`` (and its integrity record written anew, as anyone editing a file
can). Each plug-in file leaves a marker beside itself when imported.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cliproc import assert_one_line_error
from timing import limit

pytestmark = pytest.mark.integration

PLUGIN = '''
from dataclasses import dataclass
from pathlib import Path

from distfl.algorithms import ClusteringAlgorithm, Params, RoundPlan, RoundUpdate, register

with open(Path(__file__).parent / "plugin-imported", "a") as marker:
    marker.write("imported\\n")


@dataclass(frozen=True)
class ParitySplitParams(Params):
    at_round: int = 10


@register
class ParitySplit(ClusteringAlgorithm):
    """Every client trains every round; in round at_round the root splits into the even
    and the odd clients."""

    name = "parity_split"
    Params = ParitySplitParams

    def __init__(self, *, num_clients, clients_per_round, seed, at_round=10):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.at_round = at_round

    def plan(self, round_index):
        leaves = self.tree.leaves()
        return RoundPlan(round_index, {int(k): c for c, m in leaves.items() for k in m})

    def update(self, round_index, plan, reports):
        if round_index != self.at_round or not self.tree["0"].is_leaf:
            return RoundUpdate()
        members = self.tree.members("0")
        children = {"0.0": members[members % 2 == 0], "0.1": members[members % 2 == 1]}
        return RoundUpdate(splits=[self.tree.split("0", children, round_index, {})])
'''

EVIL = """
from pathlib import Path

(Path(__file__).parent / "evil-imported").write_text("imported")
"""

MARKERS = ("plugin-imported", "evil-imported")


def distfl(helpers, cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distfl", *map(str, args)],
        cwd=cwd,
        env=helpers.clean_env(),
        capture_output=True,
        text=True,
        timeout=limit(300),
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory, helpers) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("untrusted")
    plugin, evil = tmp / "parity_split.py", tmp / "evil.py"
    plugin.write_text(PLUGIN)
    evil.write_text(EVIL)
    proc = distfl(
        helpers, tmp, "run", "--preset", "digits",
        "--set", f"run.plugins=[{str(plugin)!r}]", "--set", 'algorithm.name="parity_split"',
        "--set", "algorithm.at_round=2", "--set", "run.rounds=2",
        "--set", 'run.progress="none"', "--out", "plain.h5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp / "plugin-imported").exists()  # the run itself imported it
    tampered = tmp / "tampered.h5"
    shutil.copy(tmp / "plain.h5", tampered)
    import h5py

    with h5py.File(tampered, "r+") as f:
        config = json.loads(f.attrs["config"])
        config["run"]["plugins"] = [str(plugin), str(evil)]
        f.attrs["config"] = json.dumps(config, sort_keys=True)
        # a file's integrity record is a checksum, not a signature: whoever edits the file
        # can seal it anew (dropping it is refused: the file's format always has one)
        from distfl.runfile import integrity

        del f["integrity"]
        integrity.seal(f)
    return {"dir": tmp, "plugin": plugin, "evil": evil, "plain": tmp / "plain.h5",
            "tampered": tampered}  # fmt: skip


def clear(made) -> None:
    for name in MARKERS:
        (made["dir"] / name).unlink(missing_ok=True)


def imported(made) -> set[str]:
    return {name for name in MARKERS if (made["dir"] / name).exists()}


def copy_of(made, which: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{which}.h5"
    shutil.copy(made[which], path)
    return path


def resume(path: Path) -> tuple[str, ...]:
    """``distfl run --resume PATH`` for one more round."""
    return ("run", "--resume", str(path), "--set", "run.rounds=3")


READERS = {
    "status": lambda f, out: ["status", f],
    "inspect": lambda f, out: ["inspect", f],
    "report": lambda f, out: ["report", f, "--out", out],
    "gather": lambda f, out: ["gather", f, "--csv", out.with_suffix(".csv")],
}


@pytest.mark.parametrize("which", ["plain", "tampered"])
@pytest.mark.parametrize("reader", list(READERS))
def test_reading_a_run_file_imports_none_of_its_plugins(made, helpers, tmp_path, reader, which):
    clear(made)
    out = tmp_path / "report"
    proc = distfl(helpers, tmp_path, *READERS[reader](made[which], out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert imported(made) == set()
    if reader == "status":
        assert proc.stdout == f"{made[which]}: finished (round 2 of 2)\n"
    elif reader == "inspect":
        assert "parity_split on digits" in proc.stdout
        assert "split at round 2 into 2" in proc.stdout
    elif reader == "report":
        page = (out / "index.html").read_text()
        assert "parity_split" in page and "at_round = 2" in page  # the stored config
        assert (out / "accuracy.png").exists() and (out / "tree.png").exists()
    else:
        with open(out.with_suffix(".csv"), newline="") as f:
            (row,) = csv.DictReader(f)
        assert row["algorithm"] == "parity_split" and row["clusters"] == "2"


def test_resume_of_a_tampered_file_is_refused_without_trust(made, helpers, tmp_path):
    path = copy_of(made, "tampered", tmp_path)
    before = path.read_bytes()
    clear(made)
    proc = distfl(helpers, tmp_path, *resume(path))
    plugins = [str(made["plugin"]), str(made["evil"])]
    assert_one_line_error(
        proc, f"{path} names plug-ins {plugins} (run.plugins)", "--trust-plugins",
        "--set run.plugins=[...]",
    )  # fmt: skip
    # naming one's own plug-in again does not cover the other one
    mine = f"run.plugins=[{str(made['plugin'])!r}]"
    proc = distfl(helpers, tmp_path, *resume(path), "--set", mine)
    line = assert_one_line_error(proc, f"names plug-ins [{str(made['evil'])!r}]")
    assert "parity_split.py" not in line
    assert imported(made) == set()
    assert path.read_bytes() == before


def test_resume_with_trust_plugins_imports_them(made, helpers, tmp_path):
    path = copy_of(made, "tampered", tmp_path)
    clear(made)
    proc = distfl(
        helpers, tmp_path, "run", "--resume", path, "--trust-plugins", "--set", "run.rounds=3"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert imported(made) == {"plugin-imported", "evil-imported"}
    status = distfl(helpers, tmp_path, "status", path)
    assert status.returncode == 0 and "finished (round 3 of 3)" in status.stdout


def test_resume_of_a_plugin_run_names_the_plugin_again(made, helpers, tmp_path):
    path = copy_of(made, "plain", tmp_path)
    clear(made)
    proc = distfl(helpers, tmp_path, *resume(path))
    assert_one_line_error(proc, f"names plug-ins [{str(made['plugin'])!r}]", "--trust-plugins")
    assert imported(made) == set()
    mine = f"run.plugins=[{str(made['plugin'])!r}]"
    proc = distfl(helpers, tmp_path, *resume(path), "--set", mine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert imported(made) == {"plugin-imported"}
    status = distfl(helpers, tmp_path, "status", path)
    assert status.returncode == 0 and "finished (round 3 of 3)" in status.stdout


def test_resume_naming_the_plugin_in_a_config_file(made, helpers, tmp_path):
    path = copy_of(made, "plain", tmp_path)
    toml = tmp_path / "again.toml"
    import h5py

    from distfl.config import from_json

    with h5py.File(path, "r") as f:
        toml.write_text(from_json(f.attrs["config"]).to_toml())  # names run.plugins
    clear(made)
    proc = distfl(
        helpers, tmp_path, "run", "--config", toml, "--resume", path, "--set", "run.rounds=3"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert imported(made) == {"plugin-imported"}


def test_report_with_trust_plugins_imports_them(made, helpers, tmp_path):
    clear(made)
    out = tmp_path / "report"
    proc = distfl(helpers, tmp_path, "report", made["plain"], "--out", out, "--trust-plugins")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert imported(made) == {"plugin-imported"}
    assert "parity_split" in (out / "index.html").read_text()
