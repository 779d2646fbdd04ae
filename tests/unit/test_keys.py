"""The rows of ``distfl keys`` (:mod:`distfl.tools.keys`): each key's value and source are
checked against :data:`distfl.presets.PRESETS` and the config dataclasses' own defaults,
read here independently; the values are those a plain ``distfl run`` builds; every allowed
value of a key with a fixed set of values is listed, and every listed one is accepted by
the code that acts on it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from distfl import cli
from distfl.algorithms import algorithm_class, algorithm_names
from distfl.config import (
    CHOICES,
    AlgorithmSection,
    Config,
    DataSection,
    GroupSpec,
    ModelSection,
    RunSection,
)
from distfl.datasets import dataset_names, dataset_spec
from distfl.errors import ConfigError
from distfl.model_specs import model_names, model_spec
from distfl.presets import PRESETS
from distfl.tools.keys import BUILT_IN, PLAIN_RUN_PRESET, format_keys, key_rows

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def plain(value):
    """``value`` with tuples as lists (as JSON and TOML read it back)."""
    return json.loads(json.dumps(value))


def field_default(f: dataclasses.Field):
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def expected_rows(preset: str) -> dict[str, tuple[object, str]]:
    """``section.key`` -> (value, source) of a run started from ``preset``, from the preset's
    mapping and the dataclasses' field defaults alone."""
    layer = PRESETS[preset]
    out: dict[str, tuple[object, str]] = {}
    for section_field in dataclasses.fields(Config):
        section = section_field.name
        given = layer.get(section, {})
        if section == "algorithm":
            name = given.get("name", AlgorithmSection.name)
            fields = [("name", AlgorithmSection.name)] + [
                (f.name, field_default(f)) for f in dataclasses.fields(algorithm_class(name).Params)
            ]
        elif section == "model":  # its name, then the named model's own keys
            name = given.get("name", ModelSection.name)
            fields = [("name", ModelSection.name)] + [
                (f.name, field_default(f)) for f in dataclasses.fields(model_spec(name).Params)
            ]
        elif section == "data":  # the shared keys, then the named dataset's own
            name = given.get("dataset", DataSection.dataset)
            fields = [(f.name, field_default(f)) for f in dataclasses.fields(DataSection)
                      if f.name != "params"]  # fmt: skip
            fields += [(f.name, field_default(f))
                       for f in dataclasses.fields(dataset_spec(name).Params)]  # fmt: skip
        else:
            cls = type(field_default(section_field))
            fields = [(f.name, field_default(f)) for f in dataclasses.fields(cls)]
        for key, default in fields:
            if key in given:
                value = given[key]
                if key == "groups":  # a preset gives each group's keys that differ
                    base = dataclasses.asdict(GroupSpec(count=0, alpha=0.0))
                    value = [base | _alpha(g) | g for g in value]
                out[f"{section}.{key}"] = (plain(value), f"preset {preset}")
            else:
                out[f"{section}.{key}"] = (plain(default), BUILT_IN)
    return out


def _alpha(group: dict) -> dict:
    """A group's alpha where it gives none: ALPHA_NOT_GIVEN for a dirichlet one (which a
    natural partition takes without), 0 for another partition."""
    from distfl.config.groups import ALPHA_NOT_GIVEN

    dirichlet = group.get("partition", "dirichlet") == "dirichlet"
    return {"alpha": ALPHA_NOT_GIVEN if dirichlet else 0.0}


def run_rows(rows):
    return {r.key: r for r in rows if not r.algorithm}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_values_and_sources_follow_the_preset_and_the_defaults(preset):
    rows = key_rows(preset)
    mine = run_rows(rows)
    want = expected_rows(preset)
    assert list(mine) == list(want)  # every key once, in the config's order
    for key, (value, source) in want.items():
        assert (plain(mine[key].value), mine[key].source) == (value, source), key


def test_plain_run_is_the_default_preset():
    """``distfl keys`` shows the ``default`` preset: run.rounds 300 from it, not the
    dataclass's 40; FedGWC named by the preset, its keys (the calibrated split test) built
    in, the same for a config file that names only fedgwc."""
    assert PLAIN_RUN_PRESET == "default"
    mine = run_rows(key_rows())
    assert (mine["run.rounds"].value, mine["run.rounds"].source) == (300, "preset default")
    assert RunSection().rounds == 40  # the built-in default it replaces
    assert (mine["algorithm.name"].value, mine["algorithm.name"].source) == (
        "fedgwc",
        "preset default",
    )
    assert (mine["algorithm.epsilon"].value, mine["algorithm.epsilon"].source) == (
        1e-4,
        "built-in default",
    )
    assert mine["algorithm.db_threshold"].value == 1.0
    assert (mine["algorithm.reference_draws"].value, mine["algorithm.reference_draws"].source) == (
        15,
        "built-in default",
    )
    assert (mine["algorithm.stable_tests"].value, mine["algorithm.stable_tests"].source) == (
        2,
        "built-in default",
    )
    assert (mine["algorithm.beta"].value, mine["algorithm.beta"].source) == (0.5, BUILT_IN)
    assert (mine["data.dataset"].value, mine["data.dataset"].source) == ("digits", BUILT_IN)
    assert (mine["eval.every"].value, mine["eval.every"].source) == (50, "preset default")


def test_rows_are_what_a_plain_run_builds():
    """The values equal the config that ``distfl run`` with no argument builds
    (``_config_from_args``), and ``--preset digits``'s those of ``distfl run --preset
    digits``."""
    for argv, preset in ((["run"], None), (["run", "--preset", "digits"], "digits")):
        config = cli._config_from_args(cli._parser().parse_args(argv)).to_dict()
        built = {f"{s}.{k}": v for s, table in config.items() for k, v in table.items()}
        mine = run_rows(key_rows(preset))
        assert {k: plain(r.value) for k, r in mine.items()} == plain(built)


def test_digits_preset_runs_no_algorithm():
    mine = run_rows(key_rows("digits"))
    assert (mine["run.rounds"].value, mine["run.rounds"].source) == (40, BUILT_IN)
    assert (mine["algorithm.name"].value, mine["algorithm.name"].source) == ("none", BUILT_IN)
    assert all(r.source == BUILT_IN for r in mine.values())  # the preset sets nothing


@pytest.mark.parametrize("preset", ["default", "digits"])
def test_other_algorithms_keys_at_their_defaults(preset):
    rows = key_rows(preset)
    chosen = run_rows(rows)["algorithm.name"].value
    others = [r for r in rows if r.algorithm]
    assert sorted({r.algorithm for r in others}) == sorted(
        n
        for n in algorithm_names()
        if n != chosen and dataclasses.fields(algorithm_class(n).Params)
    )
    for r in others:
        fields = {
            f.name: f.default for f in dataclasses.fields(algorithm_class(r.algorithm).Params)
        }
        assert r.value == fields[r.key.removeprefix("algorithm.")], r
        assert r.source == BUILT_IN and r.kind
    if preset == "default":  # FedGWC is the run's: its keys are not among the others
        assert not [r for r in others if r.algorithm == "fedgwc"]
        emd = {r.key: r.value for r in others if r.algorithm == "emdcfl"}
        assert emd["algorithm.epsilon"] == 0.025


def test_every_allowed_value_is_listed():
    rows = key_rows()
    kinds = {(r.algorithm, r.key): r.kind for r in rows}
    for dotted, allowed in CHOICES.items():
        assert kinds[("", dotted)] == "one of " + ", ".join(allowed), dotted
    assert kinds[("", "data.dataset")] == "one of " + ", ".join(dataset_names())
    assert "mnist5k" in kinds[("", "data.dataset")]
    assert kinds[("", "algorithm.name")] == "one of " + ", ".join(algorithm_names())
    assert kinds[("", "model.name")] == "one of " + ", ".join(model_names())
    for r in rows:
        name = r.algorithm or run_rows(rows)["algorithm.name"].value
        if r.key.startswith("algorithm.") and r.key != "algorithm.name":
            allowed = algorithm_class(name).Params.choices.get(r.key.removeprefix("algorithm."))
            if allowed:
                assert r.kind == "one of " + ", ".join(allowed), r
    assert all(r.kind for r in rows)


def test_every_listed_value_is_accepted(tmp_path):
    """The allowed values of the enumerated keys are those the code acts on: the datasets
    whose specs read files look for them under data.root, the models build_model builds,
    the aggregators, losses and placements registered."""
    from datafiles import load_files

    from distfl.datasets import dataset_specs
    from distfl.errors import DataError
    from distfl.models import build_model
    from distfl.plugins import AGGREGATORS
    from distfl.runtime.placement import PLACEMENTS
    from distfl.train.sequential import LOSSES

    for spec in dataset_specs():
        if not spec.needs_root:
            continue
        with pytest.raises(DataError) as err:
            load_files(spec.name, str(tmp_path))  # an empty directory: the files are missing
        assert str(tmp_path) in str(err.value), spec.name
    for name in model_names():
        assert build_model(name, (1, 28, 28), 10) is not None
    assert set(AGGREGATORS.names()) == {"fedavg", "fedavgm", "fedprox", "fairavg"}
    assert set(CHOICES["train.loss"]) == set(LOSSES)
    assert set(CHOICES["server.placement"]) == set(PLACEMENTS)


def test_value_texts_read_back_as_toml():
    """Each value is shown as ``--set KEY=VALUE`` takes it; a preset's groups with the keys
    it sets only."""
    for preset in ("default", "backdoor"):
        for r in key_rows(preset):
            back = tomllib.loads(f"v = {r.text}")["v"]
            if r.key == "data.groups":
                assert back == PRESETS[preset]["data"].get("groups", [])
            else:
                assert back == plain(r.value), r


def test_unknown_preset_names_the_presets():
    with pytest.raises(ConfigError) as err:
        key_rows("nope")
    assert "'nope'" in str(err.value)
    assert all(name in str(err.value) for name in PRESETS)


def test_format():
    text = format_keys(key_rows())
    lines = text.splitlines()
    assert lines[0].startswith("values of a plain `distfl run`")
    assert lines[1].split()[:3] == ["key", "value", "source"]
    by_key = {line.split()[0]: line for line in lines[2:] if line and not line[0].isspace()}
    assert by_key["run.rounds"].split() == ["run.rounds", "300", "preset", "default", "an",
                                            "integer"]  # fmt: skip
    assert by_key["algorithm.epsilon"].split()[:4] == ["algorithm.epsilon", "0.0001", "built-in",
                                                       "default"]  # fmt: skip
    # a long value (the preset's groups) is on the next line
    i = lines.index(by_key["data.groups"])
    assert "(next line)" in lines[i]
    assert tomllib.loads("v = " + lines[i + 1].strip())["v"] == PRESETS["default"]["data"]["groups"]
    assert 'with algorithm.name = "emdcfl":' in lines
    assert lines[-1] == "presets: " + ", ".join(PRESETS)
    digits = format_keys(key_rows("digits"), "digits").splitlines()
    assert digits[0] == "values of `distfl run --preset digits`"
    assert 'with algorithm.name = "fedgwc":' in digits
