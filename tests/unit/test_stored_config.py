"""A config read back from a run file imports none of the code it names: ``from_json``
leaves ``run.plugins`` alone unless asked, and an algorithm that is not registered keeps
its stored [algorithm] keys as they are (:class:`~distfl.config.StoredParams`)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from distfl.algorithms import algorithm_names
from distfl.algorithms.fedgwc import FedGWCParams
from distfl.config import StoredParams, build, from_json, load
from distfl.errors import ConfigError
from distfl.tools.gather import config_value

MARKING_PLUGIN = """
from dataclasses import dataclass
from pathlib import Path

from distfl.algorithms import ClusteringAlgorithm, Params, RoundPlan, register

Path({marker!r}).write_text("imported")


@dataclass(frozen=True)
class MarkParams(Params):
    at_round: int = 10
    mode: str = "low"


@register
class Mark(ClusteringAlgorithm):
    name = {name!r}
    Params = MarkParams

    def plan(self, round_index):
        return RoundPlan(round_index, {{int(k): "0" for k in self.tree.members("0")}})
"""


def stored_text(plugin: str, name: str, **keys) -> str:
    """The JSON a run file stores for a run of ``name`` loaded through ``plugin``."""
    raw = json.loads(load(preset="digits").to_json())
    raw["run"]["plugins"] = [plugin]
    raw["algorithm"] = {"name": name, **keys}
    return json.dumps(raw, sort_keys=True)


@pytest.fixture
def plugin(tmp_path):
    """(the path of a plug-in file that writes a marker when imported, the marker)."""
    marker = tmp_path / "imported.txt"
    path = tmp_path / "mark.py"
    return path, marker


def write_plugin(path, marker, name: str) -> None:
    path.write_text(MARKING_PLUGIN.format(marker=str(marker), name=name))


def test_an_unregistered_algorithm_reads_without_importing_its_plugin(plugin):
    path, marker = plugin
    write_plugin(path, marker, "stored_mark_a")
    c = from_json(stored_text(str(path), "stored_mark_a", at_round=3, mode="high"))
    assert not marker.exists()
    assert "stored_mark_a" not in algorithm_names()
    assert c.run.plugins == (str(path),)
    assert c.algorithm.name == "stored_mark_a"
    params = c.algorithm.params
    assert isinstance(params, StoredParams)
    assert params.at_round == 3 and params.mode == "high"
    assert c.algorithm.at_round == 3
    assert getattr(params, "epsilon", None) is None
    assert params.keys() == ("at_round", "mode")
    assert c.to_dict()["algorithm"] == {"name": "stored_mark_a", "at_round": 3, "mode": "high"}
    assert c.data == load(preset="digits").data  # the other sections read as ever


def test_a_stored_config_of_an_unregistered_algorithm_writes_back_alike(plugin):
    path, marker = plugin
    c = from_json(stored_text(str(path), "stored_mark_b", at_round=3, eps=0.25, on=True))
    assert from_json(c.to_json()) == c
    assert json.loads(c.to_json())["algorithm"] == {
        "name": "stored_mark_b",
        "at_round": 3,
        "eps": 0.25,
        "on": True,
    }
    assert build(tomllib.loads(c.to_toml()), plugins=False) == c
    assert copy.deepcopy(c) == c and pickle.loads(pickle.dumps(c)) == c
    assert hash(c.algorithm) == hash(copy.deepcopy(c.algorithm))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.algorithm.params.at_round = 4
    assert not marker.exists()


def test_config_value_of_an_unregistered_algorithm(plugin):
    path, _ = plugin
    c = from_json(stored_text(str(path), "stored_mark_c", at_round=3))
    assert config_value(c, "algorithm.at_round") == 3
    assert config_value(c, "algorithm.epsilon") is None
    assert config_value(c, "algorithm.emd_epsilon") is None
    assert config_value(c, "run.rounds") == c.run.rounds


def test_plugins_true_imports_the_stored_plugins(plugin):
    path, marker = plugin
    write_plugin(path, marker, "stored_mark_d")
    text = stored_text(str(path), "stored_mark_d", at_round=3)
    c = from_json(text, plugins=True)
    assert marker.read_text() == "imported"
    assert type(c.algorithm.params).__name__ == "MarkParams"
    assert c.algorithm.at_round == 3 and c.algorithm.mode == "low"  # checked, defaulted
    # registered now: read as a registered algorithm, with its Params, without importing
    marker.unlink()
    assert from_json(text) == c
    assert not marker.exists()


def test_plugins_true_checks_what_the_plugin_defines(plugin):
    path, marker = plugin
    write_plugin(path, marker, "stored_mark_e")
    with pytest.raises(ConfigError, match="algorithm.at_round = 'x': expected an integer"):
        from_json(stored_text(str(path), "stored_mark_e", at_round="x"), plugins=True)
    assert marker.exists()
    with pytest.raises(ConfigError, match="stored_mark_missing"):
        from_json(stored_text(str(path), "stored_mark_missing"), plugins=True)


def test_built_in_algorithms_read_as_before():
    c = load(preset="rotated", overrides=['algorithm.name="fedgwc"', "algorithm.beta=0.25"])
    back = from_json(c.to_json())
    assert back == c and type(back.algorithm.params) is FedGWCParams
    with pytest.raises(ConfigError, match="algorithm.beta = -1.0"):
        raw = json.loads(c.to_json())
        raw["algorithm"]["beta"] = -1.0
        from_json(json.dumps(raw))


def test_the_other_sections_are_still_checked(plugin):
    path, _ = plugin
    raw = json.loads(stored_text(str(path), "stored_mark_f", at_round=3))
    raw["run"]["rounds"] = 0
    with pytest.raises(ConfigError, match="run.rounds = 0"):
        from_json(json.dumps(raw))


@pytest.mark.parametrize(
    "value, needle",
    [
        ([1, 2], "algorithm.at_round = [1, 2]: expected true or false"),
        ({"a": 1}, "algorithm.at_round = {'a': 1}"),
        (None, "algorithm.at_round = None"),
        (float("nan"), "algorithm.at_round = nan"),
    ],
)
def test_stored_keys_must_be_values_an_algorithm_can_have(plugin, value, needle):
    path, _ = plugin
    text = stored_text(str(path), "stored_mark_g", at_round=value)
    with pytest.raises(ConfigError) as info:
        from_json(text)
    assert needle in str(info.value) and "\n" not in str(info.value)


#: the refusal of the unregistered name (the closest registered one, if any, is guessed:
#: which depends on the plug-ins this process registered before)
MARK_H_UNKNOWN = r"algorithm.name = 'stored_mark_h'( \(did you mean '\w+'\?\))?: allowed values"


def test_a_config_the_user_gives_still_needs_a_registered_algorithm(plugin):
    path, _ = plugin
    raw = json.loads(stored_text(str(path), "stored_mark_h"))
    raw["run"]["plugins"] = []
    with pytest.raises(ConfigError, match=MARK_H_UNKNOWN):
        build(raw)
    with pytest.raises(ConfigError, match=MARK_H_UNKNOWN):
        load(overrides=['algorithm.name="stored_mark_h"'])
