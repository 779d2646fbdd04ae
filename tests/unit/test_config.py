"""Run configuration: defaults, TOML files, --set overrides, validation."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from datafiles import built_in_specs
from runfile import docs_example

from distfl import config as C
from distfl.config import Config, GroupSpec, check_world, from_json, load, parse_set
from distfl.errors import ConfigError, UserError

EXAMPLE_TOML = docs_example()


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --------------------------------------------------------------------------- defaults


def test_defaults_build():
    c = load()
    assert c == Config()
    # the defaults themselves may be tuned; check that they are a valid, built config
    C.validate(c)
    assert isinstance(c.run.rounds, int) and c.run.rounds >= 1
    assert isinstance(c.train.lr, float) and c.train.lr > 0
    assert 1 <= c.server.clients_per_round <= c.data.num_clients
    assert c.data.groups == ()
    # no groups: one near-IID group of every client
    assert c.groups == (GroupSpec(count=c.data.num_clients, alpha=1000.0, name="all"),)


def test_config_is_frozen():
    c = load()
    with pytest.raises(AttributeError):
        c.run.seed = 3  # type: ignore[misc]


# --------------------------------------------------------------------------- TOML


def test_example_toml_loads(tmp_path):
    c = load(path=write(tmp_path, EXAMPLE_TOML))
    assert c.run.seed == 7
    assert c.run.rounds == 20
    assert c.data.num_clients == 12
    assert c.data.samples_per_client == 60
    assert c.data.groups == (GroupSpec(count=8, alpha=1000.0), GroupSpec(count=4, alpha=0.0))
    assert isinstance(c.data.groups[1].alpha, float)
    assert c.groups == c.data.groups
    assert c.train.local_steps == 4
    assert c.train.batch_size == 16
    assert c.train.lr == 0.05
    assert c.server.clients_per_round == 6
    assert c.eval.every == 10
    # untouched keys keep their defaults
    assert c.run.out == "distfl-run.h5"
    assert c.train.momentum == 0.0


def test_example_toml_equals_preset(tmp_path):
    assert load(path=write(tmp_path, EXAMPLE_TOML)) == load(preset="digits-mixed")


def test_layering_order(tmp_path):
    """Defaults, then preset, then file, then --set."""
    p = write(tmp_path, "[run]\nrounds = 11\nseed = 3\n")
    c = load(preset="digits-mixed", path=p, overrides=["run.rounds=12"])
    assert c.run.rounds == 12  # --set wins over the file
    assert c.run.seed == 3  # file wins over the preset (7)
    assert c.data.num_clients == 12  # from the preset
    assert c.train.batch_size == 16


def test_int_is_accepted_for_float_and_converted(tmp_path):
    c = load(path=write(tmp_path, "[train]\nlr = 1\n"))
    assert c.train.lr == 1.0 and isinstance(c.train.lr, float)


def test_hidden_list(tmp_path):
    c = load(path=write(tmp_path, "[model]\nhidden = [32, 16]\n"))
    assert c.model.hidden == (32, 16)


# --------------------------------------------------------------------------- --set


def test_parse_set_integer():
    assert parse_set("run.rounds=5") == ("run", "rounds", 5)


def test_parse_set_types():
    assert parse_set("train.lr=0.1") == ("train", "lr", 0.1)
    assert parse_set("eval.weighted=true") == ("eval", "weighted", True)
    assert parse_set('model.name="cnn"') == ("model", "name", "cnn")
    assert parse_set("model.hidden=[8, 4]") == ("model", "hidden", [8, 4])


def test_parse_set_bare_strings():
    assert parse_set("model.name=cnn") == ("model", "name", "cnn")
    assert parse_set("run.out=out/run.h5") == ("run", "out", "out/run.h5")
    # only the first '=' splits
    assert parse_set("run.out=a=b") == ("run", "out", "a=b")
    # spaces around the key are ignored
    assert parse_set(" run.rounds =7") == ("run", "rounds", 7)


def test_parse_set_inline_tables():
    item = "data.groups=[{count = 3, alpha = 0.5}, {count = 1, alpha = 0}]"
    section, key, value = parse_set(item)
    assert (section, key) == ("data", "groups")
    assert value == [{"count": 3, "alpha": 0.5}, {"count": 1, "alpha": 0}]
    c = load(
        overrides=[
            "data.num_clients=4",
            "server.clients_per_round=2",
            'data.groups=[{count = 3, alpha = 0.5, name = "a"}, {count = 1, alpha = 0}]',
        ]
    )
    assert c.data.groups == (GroupSpec(3, 0.5, "a"), GroupSpec(1, 0.0))


@pytest.mark.parametrize("item", ["run.rounds", "rounds=5", "a.b.c=1", "=5"])
def test_parse_set_malformed(item):
    with pytest.raises(ConfigError):
        parse_set(item)


def test_load_with_overrides():
    c = load(overrides=["run.rounds=5", "model.name=lenet5", "train.lr=0.2"])
    assert (c.run.rounds, c.model.name, c.train.lr) == (5, "lenet5", 0.2)


# --------------------------------------------------------------------------- errors


def raises_naming(key: str, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(**kwargs)
    assert key in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    return info.value


def test_config_error_is_a_user_error():
    assert issubclass(ConfigError, UserError)
    assert ConfigError.exit_code == 2


def test_unknown_section(tmp_path):
    err = raises_naming("bogus", path=write(tmp_path, "[bogus]\nx = 1\n"))
    assert "unknown section" in str(err)
    raises_naming("bogus", overrides=["bogus.x=1"])


def test_unknown_key(tmp_path):
    err = raises_naming("run.roundz", path=write(tmp_path, "[run]\nroundz = 5\n"))
    assert "rounds" in str(err)  # lists the allowed keys
    raises_naming("train.steps", overrides=["train.steps=3"])


def test_unknown_group_key():
    raises_naming(
        "data.groups[0].size",
        overrides=[
            "data.num_clients=4",
            "server.clients_per_round=2",
            "data.groups=[{count = 4, alpha = 0.5, size = 2}]",
        ],
    )


def test_group_missing_alpha():
    raises_naming(
        "data.groups[0].alpha",
        overrides=[
            "data.num_clients=4",
            "server.clients_per_round=2",
            "data.groups=[{count = 4}]",
        ],
    )


@pytest.mark.parametrize(
    "override, key",
    [
        ('run.rounds="five"', "run.rounds"),  # string for int
        ("run.rounds=five", "run.rounds"),  # bare string for int
        ("run.rounds=true", "run.rounds"),  # bool for int
        ("run.rounds=5.0", "run.rounds"),  # float for int
        ("train.lr=true", "train.lr"),  # bool for float
        ("train.lr=fast", "train.lr"),  # string for float
        ("eval.weighted=1", "eval.weighted"),  # int for bool
        ("model.name=3", "model.name"),  # int for string
        ("model.hidden=64", "model.hidden"),  # scalar for list
        ("model.hidden=[64, 1.5]", "model.hidden[1]"),  # float in an int list
        ("data.groups={count = 20, alpha = 1.0}", "data.groups"),  # table, not a list
        ("data.groups=[5]", "data.groups[0]"),  # list item not a table
        ("data.groups=[{count = 20.0, alpha = 1.0}]", "data.groups[0].count"),
    ],
)
def test_wrong_type(override, key):
    raises_naming(key, overrides=[override])


def test_wrong_type_in_file(tmp_path):
    err = raises_naming("run.seed", path=write(tmp_path, '[run]\nseed = "7"\n'))
    assert "integer" in str(err)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["server.clients_per_round=21"], "server.clients_per_round"),
        (["data.num_clients=5", "server.clients_per_round=6"], "server.clients_per_round"),
        (["server.clients_per_round=0"], "server.clients_per_round"),
        (["train.local_steps=0"], "train.local_steps"),
        (["train.local_steps=-3"], "train.local_steps"),
        (["train.batch_size=0"], "train.batch_size"),
        (["train.lr=0"], "train.lr"),
        (["train.lr=-0.1"], "train.lr"),
        (["train.momentum=1.0"], "train.momentum"),
        (["train.weight_decay=-1e-4"], "train.weight_decay"),
        (["run.rounds=0"], "run.rounds"),
        (["run.seed=-1"], "run.seed"),
        (["run.data_seed=-2"], "run.data_seed"),
        (["run.init_seed=-2"], "run.init_seed"),
        (["run.sampling_seed=-2"], "run.sampling_seed"),
        (['run.sampling_seed="7"'], "run.sampling_seed"),
        (["run.threads=0"], "run.threads"),
        (['run.out=""'], "run.out"),
        (["run.device=tpu"], "run.device"),
        (["run.progress=fancy"], "run.progress"),
        (["data.num_clients=0"], "data.num_clients"),
        (["data.samples_per_client=1"], "data.samples_per_client"),
        (["data.test_fraction=0"], "data.test_fraction"),
        (["data.test_fraction=1.0"], "data.test_fraction"),
        (["data.samples_per_client=4", "data.test_fraction=0.1"], "data.test_fraction"),
        (["data.dataset=mnist"], "data.dataset"),
        (["model.name=resnet"], "model.name"),
        (["model.hidden=[64, 0]"], "model.hidden[1]"),
        (["train.trainer=parallel"], "train.trainer"),
        (["server.aggregator=median"], "server.aggregator"),
        (["algorithm.name=kmeans"], "algorithm.name"),
        (["comm.backend=nccl"], "comm.backend"),
        (["comm.timeout_s=0"], "comm.timeout_s"),
        (["eval.every=0"], "eval.every"),
        (["checkpoint.every=-1"], "checkpoint.every"),
        (["checkpoint.seconds=-1.0"], "checkpoint.seconds"),
        (["checkpoint.seconds=nan"], "checkpoint.seconds"),
        (["data.groups=[{count = 20, alpha = -1.0}]"], "data.groups[0].alpha"),
        (
            ["data.groups=[{count = 10, alpha = 1.0}, {count = 10, alpha = -0.5}]"],
            "data.groups[1].alpha",
        ),
        (
            ["data.groups=[{count = 0, alpha = 1.0}, {count = 20, alpha = 1.0}]"],
            "data.groups[0].count",
        ),
        (["data.groups=[{count = 8, alpha = 1.0}, {count = 4, alpha = 0.0}]"], "data.groups"),
    ],
)
def test_impossible_values(overrides, key):
    raises_naming(key, overrides=overrides)


def test_a_dirichlet_alpha_beyond_iid_is_refused_with_its_range():
    """1e308 overflowed the gamma draws' sum and failed in round 1 (IndexError)."""
    for alpha in ("1e308", "1e7"):
        error = raises_naming(
            "data.groups[0].alpha", overrides=[f"data.groups=[{{count = 20, alpha = {alpha}}}]"]
        )
        assert "from 0 (one class per client) to 1e+06" in str(error)
    c = load(overrides=["data.groups=[{count = 20, alpha = 1e6}]"])
    assert c.data.groups[0].alpha == C.MAX_ALPHA


DEEPLY = "[" * 100_000 + "]" * 100_000


def test_a_config_nested_100000_deep_is_one_line(tmp_path):
    """TOML and JSON parsers recurse: a config nested beyond any real one is refused with
    one line, not a RecursionError."""
    deep = tmp_path / "deep.toml"
    deep.write_text(f"[run]\nexport = {DEEPLY}\n")
    with pytest.raises(ConfigError, match="deep.toml: it nests tables and arrays deeper than"):
        load(path=deep)
    shallow_enough = tmp_path / "forty.toml"  # no RecursionError, still beyond any config
    shallow_enough.write_text("[run]\nexport = " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(ConfigError, match="deeper than 16 levels"):
        load(path=shallow_enough)
    with pytest.raises(ConfigError, match="--set run.export: the value nests"):
        parse_set(f"run.export={DEEPLY}")
    with pytest.raises(ConfigError, match="the stored config nests tables and arrays deeper"):
        from_json('{"run": {"export": ' + DEEPLY + "}}")


def test_groups_count_mismatch_message():
    err = raises_naming(
        "data.num_clients",
        overrides=[
            "data.groups=[{count = 8, alpha = 1.0}, {count = 4, alpha = 0.0}]",
        ],
    )
    assert "12" in str(err) and "20" in str(err)


def test_unknown_model_names_allowed_values():
    err = raises_naming("model.name", overrides=["model.name=resnet"])
    for name in ("mlp", "cnn", "lenet5"):
        assert name in str(err)


def test_unknown_preset():
    err = raises_naming("nosuch", preset="nosuch")
    assert "digits-mixed" in str(err)


def test_presets_build():
    for name in C.PRESETS:
        load(preset=name)


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.toml"
    raises_naming("nope.toml", path=missing)


def test_config_path_is_a_directory(tmp_path):
    raises_naming(str(tmp_path), path=tmp_path)


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0, reason="permissions are not enforced"
)
def test_unreadable_config_file(tmp_path):
    p = write(tmp_path, EXAMPLE_TOML, "secret.toml")
    p.chmod(0)
    try:
        raises_naming("secret.toml", path=p)
    finally:
        p.chmod(0o600)


def test_non_utf8_config_file(tmp_path):
    p = tmp_path / "latin.toml"
    p.write_bytes(b'[run]\nout = "\xe9t\xe9.h5"\n')
    raises_naming("latin.toml", path=p)


@pytest.mark.parametrize(
    "text",
    [
        "[run\nrounds = 5\n",
        "[run]\nrounds = \n",
        "[run]\nrounds 5\n",
        "[run]\nrounds = 1\nrounds = 2\n",
    ],
)
def test_invalid_toml(tmp_path, text):
    err = raises_naming("bad.toml", path=write(tmp_path, text, "bad.toml"))
    assert "TOML" in str(err)


def test_section_that_is_not_a_table(tmp_path):
    raises_naming("run", path=write(tmp_path, "run = 5\n"))


# --------------------------------------------------------------------------- check_world


def test_check_world():
    c = load(overrides=["data.num_clients=4", "server.clients_per_round=2"])
    check_world(c, 1)  # one process: the server hosts every client
    check_world(c, 2)
    check_world(c, 5)  # 4 workers for 4 clients
    with pytest.raises(ConfigError) as info:
        check_world(c, 6)  # 5 workers for 4 clients
    assert "data.num_clients" in str(info.value)
    assert "5" in str(info.value)


# --------------------------------------------------------------------------- JSON


def test_json_round_trip_defaults():
    c = load()
    assert from_json(c.to_json()) == c


def test_json_round_trip_full(tmp_path):
    c = load(
        path=write(tmp_path, EXAMPLE_TOML),
        overrides=[
            "model.hidden=[32, 16]",
            "train.momentum=0.9",
            "eval.weighted=true",
            "run.seed=9223372036854775807",
            'data.groups=[{count = 8, alpha = 1000.0, name = "iid"}, '
            '{count = 4, alpha = 0.0, name = "skew"}]',
        ],
    )
    back = from_json(c.to_json())
    assert back == c
    assert back.model.hidden == (32, 16)
    assert back.data.groups[0].name == "iid"
    assert back.run.seed == 2**63 - 1


def test_describe_keys_lists_every_key():
    keys = {k for k, _, _ in C.describe_keys()}
    assert "run.rounds" in keys and "data.groups" in keys and "checkpoint.every" in keys
    rows = {k: (t, d) for k, t, d in C.describe_keys()}
    assert rows["run.rounds"] == ("an integer", str(C.RunSection().rounds))
    assert "model.hidden" not in rows  # the built-in models' own key: describe_model_keys
    assert C.describe_model_keys()["mlp"] == [("model.hidden", "a list of integers", "[64]")]
    assert rows["data.groups"] == ("a list of tables like {count = 8, alpha = 0.5}", "[]")
    assert rows["eval.weighted"] == ("true or false", "false")


# --------------------------------------------------------------------------- known gaps


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.momentum=nan", "train.momentum"),
        ("train.weight_decay=nan", "train.weight_decay"),
        ("data.groups=[{count = 20, alpha = nan}]", "data.groups[0].alpha"),
    ],
)
def test_nan_is_rejected(override, key):
    raises_naming(key, overrides=[override])


def test_infinite_alpha_is_rejected():
    raises_naming("data.groups[0].alpha", overrides=["data.groups=[{count = 20, alpha = inf}]"])


# --------------------------------------------------------------------------- data keys


def one_group(**keys) -> list[str]:
    """Overrides for a single group of all 20 clients with ``keys`` added to it."""
    extra = "".join(f", {k} = {v}" for k, v in keys.items())
    return [f"data.groups=[{{count = 20, alpha = 1.0{extra}}}]"]


@pytest.mark.parametrize("dataset", [s.name for s in built_in_specs() if s.needs_root])
def test_file_datasets_need_a_root(dataset):
    err = raises_naming("data.root", overrides=[f"data.dataset={dataset}"])
    assert dataset in str(err)
    assert err.exit_code == 2
    # with a root the config is valid (the files are read later, by the run)
    assert load(overrides=[f"data.dataset={dataset}", "data.root=/data"]).data.root == "/data"


@pytest.mark.parametrize(
    "overrides, key",
    [
        (['data.root=""', "data.dataset=cifar10"], "data.root"),
        (["data.partition=natural"], "data.partition"),  # digits has no owners
        (["data.partition=natural", "data.dataset=mnist", "data.root=/d"], "data.partition"),
        (["data.partition=random"], "data.partition"),
        (["data.quantity_skew=-0.5"], "data.quantity_skew"),
        (["data.quantity_skew=nan"], "data.quantity_skew"),
        (["data.dim=1"], "data.dim"),
        (["data.dim=0"], "data.dim"),
        (one_group(samples_per_client=1), "data.groups[0].samples_per_client"),
        (one_group(samples_per_client=-4), "data.groups[0].samples_per_client"),
        (one_group(test_fraction=1.5), "data.groups[0].test_fraction"),
        (one_group(test_fraction=1.0), "data.groups[0].test_fraction"),
        (one_group(test_fraction=-0.2), "data.groups[0].test_fraction"),
        # 4 samples, 0.1 of them: round(0.4) = 0 test samples
        (one_group(samples_per_client=4, test_fraction=0.1), "data.groups[0]"),
        (one_group(classes="[1, 2, 1]"), "data.groups[0].classes"),
        (one_group(classes="[3, -1]"), "data.groups[0].classes[1]"),
        (one_group(classes="[0.5]"), "data.groups[0].classes[0]"),
        (one_group(blur=2), "data.groups[0].blur"),
        (one_group(blur=4), "data.groups[0].blur"),
        (one_group(blur=1), "data.groups[0].blur"),
        (one_group(blur=-3), "data.groups[0].blur"),
        (one_group(patch=-1), "data.groups[0].patch"),
        (one_group(shift=-0.5), "data.groups[0].shift"),
        (one_group(noise=-0.1), "data.groups[0].noise"),
        (one_group(noise="inf"), "data.groups[0].noise"),
        (one_group(rotation="nan"), "data.groups[0].rotation"),
        (one_group(permute_labels=1), "data.groups[0].permute_labels"),
        (
            [
                "data.groups=[{count = 10, alpha = 1.0}, "
                "{count = 10, alpha = 1.0, blur = 3, noise = -1.0}]"
            ],
            "data.groups[1].noise",
        ),
    ],
)
def test_new_data_keys_impossible_values(overrides, key):
    err = raises_naming(key, overrides=overrides)
    assert err.exit_code == 2


@pytest.mark.parametrize(
    "keys",
    [
        {"blur": 3},
        {"blur": 0},
        {"blur": 7},
        {"patch": 0},
        {"patch": 3},
        {"samples_per_client": 2, "test_fraction": 0.5},
        {"samples_per_client": 0, "test_fraction": 0},
        {"classes": "[9, 0]"},
        {"shift": 0},
        {"noise": 0.0},
    ],
)
def test_new_group_keys_boundary_values_are_valid(keys):
    load(overrides=one_group(**keys))


def test_every_new_key_parses(tmp_path):
    text = """\
[data]
dataset = "femnist"
root = "/srv/leaf/femnist"
partition = "dirichlet"
num_clients = 10
samples_per_client = 50
test_fraction = 0.2
quantity_skew = 0.75
[[data.groups]]
count = 6
alpha = 0.5
name = "clean"
[[data.groups]]
count = 4
alpha = 2
name = "odd"
samples_per_client = 30
test_fraction = 0.3
classes = [5, 1, 61]
rotation = 90
blur = 5
patch = 2
noise = 0.25
shift = 1.5
permute_labels = true
[server]
clients_per_round = 5
"""
    c = load(path=write(tmp_path, text))
    assert c.data.dataset == "femnist" and c.data.root == "/srv/leaf/femnist"
    assert c.data.partition == "dirichlet"  # "natural" takes no sizes (test_unused_keys.py)
    assert c.data.quantity_skew == 0.75 and not c.data.params.keys()
    assert c.data.groups[0] == GroupSpec(count=6, alpha=0.5, name="clean")
    odd = c.data.groups[1]
    assert odd == GroupSpec(
        count=4,
        alpha=2.0,
        name="odd",
        samples_per_client=30,
        test_fraction=0.3,
        classes=(5, 1, 61),
        rotation=90.0,
        blur=5,
        patch=2,
        noise=0.25,
        shift=1.5,
        permute_labels=True,
    )
    assert isinstance(odd.rotation, float) and isinstance(odd.alpha, float)
    assert isinstance(odd.classes, tuple)
    assert from_json(c.to_json()) == c


@pytest.mark.parametrize("name", list(C.PRESETS))
def test_each_preset_builds(name):
    c = load(preset=name)
    if c.data.groups:
        assert sum(g.count for g in c.data.groups) == c.data.num_clients
    assert from_json(c.to_json()) == c
    if c.data.dataset in ("digits", "gaussian"):  # no files needed: partition it too
        from distfl.data import load_dataset, make_partition

        p = make_partition(c, load_dataset(c))
        assert p.num_clients == c.data.num_clients
        expected = [g.samples_per_client or c.data.samples_per_client for g in c.groups]
        counts = [g.count for g in c.groups]
        if c.data.quantity_skew == 0:
            assert (p.num_train() + p.num_test()).tolist() == np.repeat(expected, counts).tolist()


@pytest.mark.parametrize(
    ("overrides", "guess"),
    [
        (["run.roundz=3"], "unknown key run.roundz in --set (did you mean 'rounds'?); allowed"),
        (["rn.rounds=3"], "unknown section [rn] in --set (did you mean 'run'?); allowed"),
        (['algorithm.name="fedgcw"'], "'fedgcw' (did you mean 'fedgwc'?): allowed values"),
        (['algorithm.name="fedgwc"', "algorithm.epsilom=1"],
         "algorithm.epsilom for algorithm.name = 'fedgwc' (did you mean 'epsilon'?) (its keys"),
        (['data.dataset="digit"'], "'digit' (did you mean 'digits'?): allowed values"),
        (['run.progress="bars"'], "run.progress = 'bars' (did you mean 'bar'?): allowed"),
        (['algorithm.name="fedgwc"', 'algorithm.sampling="prioriti"'],
         "'prioriti' (did you mean 'priority'?): allowed values are priority, uniform"),
    ],
)  # fmt: skip
def test_a_mistyped_name_or_key_gets_the_closest_allowed_one(overrides, guess):
    from distfl.config import load

    with pytest.raises(ConfigError) as info:
        load(overrides=overrides)
    assert guess in str(info.value) and "\n" not in str(info.value)


def test_did_you_mean_only_for_a_close_name():
    from distfl.errors import did_you_mean

    assert did_you_mean("fedgcw", ["fedgwc", "cfl"]) == " (did you mean 'fedgwc'?)"
    assert did_you_mean("xyz", ["fedgwc", "cfl"]) == ""
    assert did_you_mean(3, ["fedgwc"]) == ""
    with pytest.raises(ConfigError, match=r"--preset 'digts' is unknown \(did you mean 'digits'"):
        from distfl.config import load

        load(preset="digts")
