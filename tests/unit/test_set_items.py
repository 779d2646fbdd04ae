"""The ``--set`` items and the values of a config at the door: one key per item, applied in
their order (of two for one key the later wins, whatever the key's type), and what no key
can hold (an integer beyond 64 bits or beyond Python's int-to-text limit, a NUL in a
string, a path the kernel would not take) refused with one short line naming the key."""

from __future__ import annotations

import json

import pytest

from distfl.config import from_json, load, parse_set, read_toml
from distfl.errors import ConfigError


def refusal(**kwargs) -> str:
    """The one line :func:`load` refuses ``kwargs`` with (on the digits preset)."""
    with pytest.raises(ConfigError) as info:
        load(preset="digits", **kwargs)
    line = str(info.value)
    assert "\n" not in line and len(line) < 400, line
    return line


@pytest.mark.parametrize(
    ("items", "root"),
    [
        (["data.root=1", 'data.root="/tmp"'], "/tmp"),
        (['data.root="/tmp"', "data.root=1"], "1"),
        (["data.root=2.5", "data.root=/srv/x", "data.root=true"], "true"),
    ],
)
def test_the_later_of_two_items_for_a_string_key_wins(items, root):
    # (a dataset read from files under data.root: digits reads none, and refuses the key)
    files = ['data.dataset="cifar10"', 'model.name="cnn"']
    assert load(preset="digits", overrides=[*files, *items]).data.root == root


def test_items_apply_in_order_for_every_kind_of_key():
    c = load(
        preset="digits",
        overrides=["run.out=5", "run.rounds=3", 'run.out="b.h5"', "run.rounds=7", "run.out=c.h5"],
    )
    assert (c.run.out, c.run.rounds) == ("c.h5", 7)
    # the item that names the algorithm may come after its keys: they are its keys
    c = load(preset="digits", overrides=["algorithm.epsilon=0.5", 'algorithm.name="emdcfl"'])
    assert c.algorithm.epsilon == 0.5


@pytest.mark.parametrize(
    "item",
    [
        "run.rounds=3\nrun.seed=4",
        "run.rounds=3\r\nrun.seed=4",
        "data.root=/a\n/b",
        "data.root=/a\rrun.seed=4",
        "run.rounds=3\n[run]\nseed=4",
    ],
)
def test_an_item_of_more_than_one_line_is_refused(item):
    with pytest.raises(ConfigError, match="one key per --set") as info:
        parse_set(item)
    assert "\n" not in str(info.value)


def test_a_quoted_string_may_hold_a_line_break():
    assert load(preset="digits", overrides=['run.out="a\\nb.h5"']).run.out == "a\nb.h5"
    assert parse_set("model.hidden=[8,\n4]") == ("model", "hidden", [8, 4])


@pytest.mark.parametrize("item", ["", "=3", ".rounds=3", "run.=3", "run", "run.rounds", "a.b.c=1"])
def test_an_item_without_one_section_and_key_is_refused(item):
    with pytest.raises(ConfigError, match="section.key"):
        parse_set(item)


def test_an_integer_beyond_the_int_to_text_limit_is_refused(tmp_path):
    digits = "9" * 5000
    with pytest.raises(ConfigError, match=r"^--set run\.rounds: the value holds an integer wr"):
        parse_set(f"run.rounds={digits}")
    path = tmp_path / "big.toml"
    path.write_text(f"[run]\nrounds = {digits}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="big.toml: it holds an integer written with more than"):
        read_toml(path)
    with pytest.raises(
        ConfigError, match="the stored config holds an integer written with more than"
    ):
        from_json(f'{{"run": {{"rounds": {digits}}}}}')


@pytest.mark.parametrize(
    ("item", "key"),
    [
        (f"run.rounds={2**63}", "run.rounds"),
        (f"run.seed={-(2**63) - 1}", "run.seed"),
        ("run.rounds=0x" + "f" * 4000, "run.rounds"),  # past the text limit once in decimal
        (f"model.hidden=[8, {10**30}]", "model.hidden[1]"),
        (f"data.groups=[{{count={2**64}, alpha=1.0}}]", "data.groups[0].count"),
        (f"eval.clients={2**63}", "eval.clients"),
    ],
)
def test_an_integer_beyond_64_bits_is_refused_naming_the_key(item, key):
    line = refusal(overrides=[item])
    assert line.startswith(f"{key} = ") and "64 bits" in line


def test_an_integer_beyond_a_float_is_refused_for_a_number_key():
    assert refusal(overrides=[f"train.lr={10**400}"]).startswith("train.lr = an integer of ")
    assert load(preset="digits", overrides=[f"train.lr={2**70}"]).train.lr == float(2**70)


@pytest.mark.parametrize(
    ("item", "key"),
    [
        ('run.out="a\\u0000b.h5"', "run.out"),
        ('data.root="/srv\\u0000"', "data.root"),
        ('run.plugins=["a\\u0000"]', "run.plugins[0]"),
        ('data.groups=[{count=20, alpha=1.0, name="g\\u0000"}]', "data.groups[0].name"),
    ],
)
def test_a_nul_in_a_string_is_refused(item, key):
    assert refusal(overrides=[item]).startswith(f"{key} = ")


def test_a_long_value_is_shown_cut_in_the_line():
    line = refusal(overrides=["run.device=" + "x" * 100_000])
    assert line.startswith("run.device = 'xxx") and "(100,002 characters)" in line
    assert "100,002 characters" in refusal(overrides=['run.rounds="' + "9" * 100_000 + '"'])


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("data.root=" + "d/" * 2100, "data.root is a path of 4,200 bytes; at most 4,095"),
        ("data.root=/srv/" + "n" * 256, "data.root holds a name of 256 bytes"),
        ("run.out=" + "d/" * 2100 + "r.h5", "run.out is a path of 4,204 bytes; at most 4,074"),
        ("run.out=" + "n" * 256 + "/r.h5", "run.out holds a name of 256 bytes"),
    ],
)
def test_a_path_the_kernel_would_not_take_is_refused(item, needle):
    assert needle in refusal(overrides=[item])


def test_a_stored_config_with_an_integer_beyond_64_bits_is_refused():
    stored = json.loads(load(preset="digits").to_json())
    stored["run"]["rounds"] = 2**64
    with pytest.raises(ConfigError, match=r"^run\.rounds = .*64 bits"):
        from_json(json.dumps(stored))
