"""The command line's inputs at the door: ``--set``, ``--out`` and ``--comm`` are applied in
their command-line order (of two for one key the later wins; ``--resume``'s file is
written unless one of them names another), an option that takes one value is refused when
given twice, and what a run could not use (an item of two keys, an integer past any key's
range, a number its arithmetic overflows on, a NUL, a path the kernel would not take, a
config file that is not UTF-8 TOML) is refused before any work: exit code 2 and one line,
no traceback. The cases run ``distfl.cli.main`` in the test's process."""

from __future__ import annotations

from pathlib import Path

import pytest
from cliproc import assert_one_line_error
from timing import limit

import distfl

pytestmark = pytest.mark.integration

CLI_TIMEOUT = limit(120)  # a refusal ends in a fraction of a second, a tiny run in seconds
#: a run of one round of 4 clients: what a case that runs costs, on the branch or not
SETS = ["data.num_clients=4", "data.samples_per_client=20", "server.clients_per_round=2",
        "train.local_steps=1", "model.hidden=[8]", "run.rounds=1",
        'run.progress="none"']  # fmt: skip
TINY = ["--preset", "digits", *(arg for item in SETS for arg in ("--set", item))]


def run(helpers, tmp_path: Path, *args: str):
    """``distfl run TINY ARGS`` in this process, from ``tmp_path``."""
    return helpers.cli(tmp_path, "run", *TINY, *args, timeout=CLI_TIMEOUT)


def stored(path: Path):
    """The config a run file holds."""
    return distfl.open(path).config


def test_out_after_a_set_of_run_out_wins(helpers, tmp_path):
    proc = run(helpers, tmp_path, "--set", "run.out=5", "--out", "wanted.h5")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "wanted.h5").is_file() and not (tmp_path / "5").exists()


def test_a_set_of_run_out_after_out_wins(helpers, tmp_path):
    proc = run(helpers, tmp_path, "--out", "first.h5", "--set", "run.out=5")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "5").is_file() and not (tmp_path / "first.h5").exists()


def test_comm_and_set_of_comm_backend_in_their_order(helpers, tmp_path):
    for order, backend in (
        (["--comm", "local", "--set", 'comm.backend="auto"'], "auto"),
        (["--set", 'comm.backend="auto"', "--comm", "local"], "local"),
    ):
        out = tmp_path / f"{backend}.h5"
        proc = run(helpers, tmp_path, *order, "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        assert stored(out).comm.backend == backend


def test_the_later_of_two_sets_for_a_string_key_wins(helpers, tmp_path):
    # (data.root would be refused here: digits reads no file; run.out is a string key too)
    proc = run(helpers, tmp_path, "--set", "run.out=1", "--set", 'run.out="r.h5"')
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "1").exists()
    assert stored(tmp_path / "r.h5").run.out == "r.h5"


def test_a_resumed_run_is_written_where_a_set_of_run_out_says(helpers, tmp_path):
    assert run(helpers, tmp_path, "--out", "a.h5").returncode == 0
    before = (tmp_path / "a.h5").read_bytes()
    proc = helpers.cli(tmp_path, "run", "--resume", "a.h5", "--set", "run.rounds=2",
                       "--set", "run.out=b.h5", timeout=CLI_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.h5").read_bytes() == before, "the resumed file was written over"
    assert stored(tmp_path / "b.h5").run.rounds == 2


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--set", "run.rounds=3\nrun.seed=4"], ["--set run.rounds", "one key per --set"]),
        (["--set", "data.root=/a\n/b"], ["--set data.root", "more than one line"]),
        (["--set", "run.rounds=" + "9" * 5000], ["--set run.rounds", "more than 4,300 characters"]),
        (["--set", f"run.seed={2**64}"], ["run.seed = 18446744073709551616: ", "64 bits"]),
        (["--set", "data.quantity_skew=1e308"], ["data.quantity_skew = 1e+308", "to 10"]),
        (["--set", "train.lr=" + "1" + "0" * 400], ["train.lr = an integer of", "finite"]),
        (["--set", "=3"], ["--set '=3'", "section.key"]),
        (["--set", ""], ["--set ''", "section.key=value"]),
        (["--set", "run.rounds"], ["--set 'run.rounds'", "section.key=value"]),
        (["--set", ".rounds=3"], ["section.key"]),
        (["--set", 'run.rounds="3"'], ["run.rounds = '3'", "expected an integer"]),
        (["--set", "run.rounds=[1]"], ["run.rounds = [1]", "expected an integer"]),
        (["--set", 'run.out="a\\u0000b.h5"'], ["run.out = 'a\\x00b.h5'", "NUL"]),
        (["--set", 'data.root="/srv\\u0000x"'], ["data.root = '/srv\\x00x'", "NUL"]),
        (["--out", "d/" * 2100 + "r.h5"], ["run.out is a path of 4,204 bytes"]),
        (["--set", "data.dataset=mnist", "--set", "data.root=" + "d" * 5000],
         ["data.root is a path of 5,000 bytes"]),
        (["--set", "run.device=" + "x" * 100_000], ["run.device = 'xxx", "(100,002 characters)"]),
        (["--preset", "default"], ["--preset is given twice", "'digits' and 'default'"]),
    ],
    ids=["two-keys", "two-lines", "4300-digits", "64-bits", "quantity-skew", "beyond-float",
         "empty-key", "empty", "no-value", "no-section", "wrong-type", "list-for-int",
         "nul-out", "nul-root", "long-out", "long-root", "long-value", "preset-twice"],
)  # fmt: skip
def test_an_input_a_run_cannot_use_is_one_line(helpers, tmp_path, args, needles):
    proc = run(helpers, tmp_path, *args)
    line = assert_one_line_error(proc, *needles)
    assert len(line) < 400, line
    assert not list(tmp_path.iterdir()), "refused before any file is written"


def test_a_second_resume_is_refused(helpers, tmp_path):
    proc = helpers.cli(tmp_path, "run", "--resume", "a.h5", "--resume", "b.h5",
                       timeout=CLI_TIMEOUT)  # fmt: skip
    assert_one_line_error(proc, "--resume is given twice", "'a.h5' and 'b.h5'")


def test_a_second_config_file_is_refused(helpers, tmp_path):
    for name in ("a.toml", "b.toml"):
        (tmp_path / name).write_text("[run]\nrounds = 1\n", encoding="utf-8")
    proc = helpers.cli(tmp_path, "run", "--config", "a.toml", "--config", "b.toml",
                       timeout=CLI_TIMEOUT)  # fmt: skip
    assert_one_line_error(proc, "--config is given twice", "'a.toml' and 'b.toml'")


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (b"[run]\nrounds = 3\nrounds = 4\n", ["c.toml is not valid TOML", "overwrite"]),
        (b'[run]\nout = "caf\xe9.h5"\n', ["c.toml cannot be read (UnicodeDecodeError)"]),
        (
            b"[run]\nrounds = " + b"9" * 5000 + b"\n",
            ["c.toml: it holds an integer written with more than 4,300"],
        ),
        (b"[data]\nquantity_skew = 1e308\n", ["data.quantity_skew = 1e+308"]),
        (b'[run]\nout = "x\\u0000.h5"\n', ["run.out = 'x\\x00.h5'", "NUL"]),
    ],
    ids=["key-twice", "not-utf8", "4300-digits", "quantity-skew", "nul"],
)
def test_a_config_file_a_run_cannot_use_is_one_line(helpers, tmp_path, text, needles):
    (tmp_path / "c.toml").write_bytes(text)
    proc = helpers.cli(tmp_path, "run", "--config", "c.toml", timeout=CLI_TIMEOUT)
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "distfl-run.h5").exists()


def test_odd_characters_in_run_out_name_the_file_as_given(helpers, tmp_path):
    """A line break, a right-to-left override and a byte that is not UTF-8 are a file name's
    characters: the run writes that file (the lines that show it escape them)."""
    name = "a\nb\u202ec\udcff.h5"
    proc = run(helpers, tmp_path, "--out", name)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / name).is_file()


def test_quantity_skew_at_its_bound_runs(helpers, tmp_path):
    proc = run(helpers, tmp_path, "--set", "data.quantity_skew=10", "--out", "r.h5")
    assert proc.returncode == 0, proc.stderr
    assert stored(tmp_path / "r.h5").data.quantity_skew == 10.0
