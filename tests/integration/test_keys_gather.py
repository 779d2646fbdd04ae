"""``distfl keys`` and ``distfl gather`` as commands: ``keys`` shows the values that a plain
``distfl run`` uses (checked against the config stored in the run file of such a run) with
their sources, ``keys --preset NAME`` a preset's, and an unknown preset is one line, exit 2;
``gather`` over a directory with two real run files, a truncated copy and a text file named
``x.h5`` tabulates the two, names the two bad ones on stderr and exits 1, and over only bad
files (or a path that does not exist, or an unknown ``--key``) exits 2 with one line."""

from __future__ import annotations

import csv
import json

import h5py
import pytest
from cliproc import assert_one_line_error

from distfl.presets import PRESETS
from distfl.tools.gather import COLUMNS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.integration

SMALL = ["--preset", "digits", "--set", "run.rounds=2", "--set", 'run.progress="none"']


def distfl(helpers, cwd, *args):
    """``distfl ARGS`` from ``cwd``, in this process (the command's code; what is tested is
    what it prints and exits with, not its process)."""
    return helpers.cli(cwd, *args)


def key_lines(stdout: str) -> dict[str, list[str]]:
    """``distfl keys``' lines of the run's keys: key -> [value, source words..., type...];
    a value on the next line (``(next line)``) is put in its place."""
    lines = stdout.splitlines()
    out: dict[str, list[str]] = {}
    for i, line in enumerate(lines[2:], start=2):
        if not line or line[0].isspace() or line.startswith(("the other", "with ", "presets:")):
            if line.startswith("the other"):
                break
            continue
        if line.startswith("keys without effect"):  # (then the keys this run leaves unused)
            break
        key, value, *rest = line.split()
        if value == "(next":
            value, rest = lines[i + 1].strip(), rest[1:]
        out[key] = [value, *rest]
    return out


# -- keys ------------------------------------------------------------------------------------


def test_keys_shows_what_a_plain_run_uses(helpers, tmp_path):
    proc = distfl(helpers, tmp_path, "keys")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    keys = key_lines(proc.stdout)
    assert keys["run.rounds"] == ["300", "preset", "default", "an", "integer"]
    assert keys["algorithm.name"][:3] == ['"fedgwc"', "preset", "default"]
    assert keys["algorithm.epsilon"][:3] == ["0.0001", "built-in", "default"]
    assert keys["algorithm.reference_draws"][:3] == ["15", "built-in", "default"]
    assert keys["algorithm.beta"][:3] == ["0.5", "built-in", "default"]
    assert "mnist5k" in " ".join(keys["data.dataset"]).replace(",", " ").split()
    assert proc.stdout.splitlines()[-1] == "presets: " + ", ".join(PRESETS)
    # the values are those of a plain run: one round of it, then its stored config
    out = tmp_path / "plain.h5"
    run = distfl(helpers, tmp_path, "run", "--set", "run.rounds=1", "--set",
                 'run.progress="none"', "--out", str(out))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    with h5py.File(out, "r") as f:
        stored = json.loads(f.attrs["config"])
    for key, (value, *_) in keys.items():
        if key in ("run.rounds", "run.out", "run.progress"):  # set on the command line above
            continue
        section, name = key.split(".")
        shown, used = tomllib.loads(f"v = {value}")["v"], stored[section][name]
        if key == "data.groups":  # shown with the keys each group sets
            used = [{k: g[k] for k in s} for s, g in zip(shown, used, strict=True)]
        assert shown == used, key


def test_keys_preset_digits(helpers, tmp_path):
    proc = distfl(helpers, tmp_path, "keys", "--preset", "digits")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "values of `distfl run --preset digits`"
    keys = key_lines(proc.stdout)
    assert keys["run.rounds"] == ["40", "built-in", "default", "an", "integer"]
    assert keys["algorithm.name"][:3] == ['"none"', "built-in", "default"]
    assert not [k for k in keys if k.startswith("algorithm.") and k != "algorithm.name"]
    # FedGWC's keys follow among the other algorithms', at their defaults
    i = lines.index('with algorithm.name = "fedgwc":')
    assert lines[i + 2].split()[:4] == ["algorithm.epsilon", "0.0001", "built-in", "default"]


def test_keys_unknown_preset_exits_2(helpers, tmp_path):
    proc = distfl(helpers, tmp_path, "keys", "--preset", "nope")
    assert_one_line_error(proc, "'nope'", *PRESETS)
    assert proc.stdout == ""


# -- gather ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, helpers):
    """Two small FedAvg run files (seeds 0 and 1)."""
    tmp = tmp_path_factory.mktemp("keys_gather")
    paths = [tmp / f"seed{s}.h5" for s in (0, 1)]
    for s, p in enumerate(paths):  # in this process: helpers.run_alone, the code of distfl run
        helpers.run_alone(tmp, *SMALL, "--set", f"run.seed={s}", "--out", str(p))
    return paths


def bad_files(d, good):
    """A truncated copy of a run file and a text file named x.h5, in ``d``."""
    data = good.read_bytes()
    (d / "cut.h5").write_bytes(data[: len(data) // 2])
    (d / "x.h5").write_text("not a run file\n")
    return [d / "cut.h5", d / "x.h5"]


def test_gather_skips_bad_files_and_exits_1(helpers, two_runs, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    good = []
    for p in two_runs:
        (d / p.name).write_bytes(p.read_bytes())
        good.append(d / p.name)
    bad = bad_files(d, two_runs[0])
    out = tmp_path / "out.csv"
    proc = distfl(helpers, tmp_path, "gather", str(d), "--csv", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == list(COLUMNS)
    assert [line.split()[0] for line in lines[1:]] == [str(p) for p in good]
    err = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    assert len(err) == 3, proc.stderr
    for line, path in zip(err[:2], bad, strict=True):
        assert line.startswith(f"distfl gather: skipped {path}: "), line
        assert len(line) > len(f"distfl gather: skipped {path}: "), line  # a reason
    assert err[2] == "distfl gather: 2 of 4 run files skipped, 2 gathered"
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["file"] for r in rows] == [str(p) for p in good]
    assert [int(r["seed"]) for r in rows] == [0, 1]
    assert [int(r["rounds_done"]) for r in rows] == [2, 2]
    assert not list(tmp_path.glob("*.tmp"))


def test_gather_only_bad_files_exits_2(helpers, two_runs, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    bad = bad_files(d, two_runs[0])
    out = tmp_path / "out.csv"
    proc = distfl(helpers, tmp_path, "gather", str(d), "--csv", str(out))
    assert_one_line_error(proc, *(str(p) for p in bad))
    assert proc.stdout == ""
    assert not out.exists()


def test_gather_missing_path_or_unknown_key_exits_2_before_reading(helpers, two_runs, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    bad_files(d, two_runs[0])
    out = tmp_path / "out.csv"
    missing = tmp_path / "missing.h5"
    proc = distfl(helpers, tmp_path, "gather", str(two_runs[0]), str(missing), "--csv", str(out))
    assert_one_line_error(proc, str(missing), "does not exist")
    proc = distfl(helpers, tmp_path, "gather", str(d), "--key", "train.nope", "--csv", str(out))
    assert_one_line_error(proc, "train.nope")  # not a line about the bad files in d
    assert proc.stdout == ""
    assert not out.exists()
