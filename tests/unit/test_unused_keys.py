"""A key that takes no effect in a run is refused in one line (or, where the algorithm
alone leaves it without effect, warned of), never silently dropped: every declared key ×
every algorithm (distfl/config/effects.py); the keys found dropped are
tests/unit/test_dropped_keys.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from keyeffects import (
    BASE,
    FILE_CONTEXTS,
    OWN_CONTEXTS,
    SECTION_CONTEXTS,
    another_value,
    contexts,
    entries,
    raw_with,
)

from distfl import config as C
from distfl.aggregators import AGGREGATORS
from distfl.algorithms import algorithm_class, algorithm_names
from distfl.config.effects import (
    GROUP_RULES,
    RULES,
    carried_over,
    ignored_by,
    shown,
    unused_keys,
)
from distfl.datasets import dataset_specs
from distfl.errors import ConfigError
from distfl.model_specs import model_specs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("algorithm", ["cfl", "flcl"])
def test_a_key_the_algorithm_alone_leaves_is_warned_of_not_refused(algorithm):
    """CFL and FLCL train every member each round and draw nothing: a scenario meant for
    every algorithm may set the cohort and the sampling seed, and the run goes on."""
    config = C.load(overrides=[f'algorithm.name="{algorithm}"', "server.clients_per_round=5",
                               "run.sampling_seed=3"])  # fmt: skip
    found = {u.key: u for u in unused_keys(config)}
    assert set(found) == {"server.clients_per_round", "run.sampling_seed"}
    assert not any(u.refused for u in found.values())
    assert found["server.clients_per_round"].line == (
        f"server.clients_per_round = 5 has no effect with algorithm.name = '{algorithm}': "
        "every member of a cluster trains and reports every round, whatever the cohort size"
    )
    other = C.load(overrides=['algorithm.name="ifca"', "server.clients_per_round=5",
                              "run.sampling_seed=3"])  # fmt: skip
    assert unused_keys(other) == []


# -- every declared key × every algorithm -------------------------------------------------


@pytest.mark.parametrize(("name", "algorithm", "sets"), contexts(),
                         ids=[c[0] for c in contexts()])  # fmt: skip
def test_every_key_without_effect_is_refused_or_warned_of(name, algorithm, sets):
    """In each context (each algorithm on the base federation, and the settings that turn
    keys off), every key declared without effect, set to a valid other value, is refused
    in one line naming it, or, where the algorithm alone leaves it, warned of."""
    config = C.load(overrides=sets)
    assert not any(u.refused for u in unused_keys(config)), "a context is itself accepted"
    by_key = entries(config)
    without = unused_keys(config, every=True)
    assert without, "every context leaves some key without effect"
    for u in without:
        entry = by_key.get(u.key)
        if entry is None:  # a section key the algorithm alone leaves: warned of
            section, key = u.key.split(".")
            value = 4 if u.key == "server.clients_per_round" else 7
            warned = C.load(overrides=[*sets, f"{section}.{key}={value}"])
            (again,) = [w for w in unused_keys(warned) if w.key == u.key]
            assert not again.refused and again.line.startswith(f"{u.key} = {value} has no")
            continue
        value = another_value(entry)
        if value == entry.stored:  # what older run files hold: warned of
            (again,) = [w for w in unused_keys(C.build(raw_with(config, entry, value)))
                        if w.key == u.key]  # fmt: skip
            assert not again.refused, u.key
            continue
        with pytest.raises(ConfigError) as err:
            C.build(raw_with(config, entry, value))
        line = str(err.value)
        assert "\n" not in line and line.startswith(f"{u.key} = {shown(value)}"), (u.key, line)


def _off(config, entry) -> bool:
    return not entry.holds(config)


def test_every_declared_key_is_off_in_some_context():
    """Each declared condition fails in at least one context, so that the test above
    enumerates every key it declares (a new one needs a context that turns it off)."""
    off: set[tuple[str, str]] = set()
    for _, algorithm, sets in contexts():
        config = C.load(overrides=sets)
        for e in entries(config).values():
            if _off(config, e):
                where = e.key.split("].")[-1] if e.group is not None else e.key
                off.add((algorithm if e.key.startswith("algorithm.") else "", where))
    declared = {("", k) for k in RULES} | {("", k) for k in GROUP_RULES}
    for a in algorithm_names():
        declared |= {(a, f"algorithm.{k}") for k in algorithm_class(a).Params.conditions}
    for spec in dataset_specs():
        declared |= {("", f"data.{k}") for k in spec.Params.conditions}
    for spec in model_specs():
        declared |= {("", f"model.{k}") for k in spec.Params.conditions}
    assert declared - off == set()


def test_every_context_names_a_known_setting():
    assert set(SECTION_CONTEXTS).isdisjoint(FILE_CONTEXTS)
    assert {a for a, _ in OWN_CONTEXTS.values()} <= set(algorithm_names())
    assert {"cfl", "flcl"} == {a for a in algorithm_names() if ignored_by(algorithm_class(a))}


def test_each_aggregator_reads_the_server_keys_the_config_says():
    """An aggregator is given the [server] keys it declares (its ``keys``), and the config
    refuses the others set: the two lists are one."""
    for name, cls in AGGREGATORS.items():
        config = C.load(overrides=[f'server.aggregator="{name}"', *(
            ["train.prox_mu=0.01"] if name == "fedprox" else [])])  # fmt: skip
        taken = {k.removeprefix("server.") for k in ("server.lr", "server.momentum")
                 if RULES[k].holds(config)}  # fmt: skip
        assert set(cls.keys) == taken, name


# -- a stored config, a resumed run, the presets ------------------------------------------


def _with_momentum(config):
    raw = json.loads(config.to_json())
    raw["server"]["momentum"] = 0.5
    return json.dumps(raw)


def test_the_value_of_older_run_files_is_warned_of_not_refused():
    """A run file written before data.draw holds 0.1.0's sequential draw, which a natural
    partition does not read: its config, written out as TOML and run again, is warned of
    (FedGWC's min_alpha, stored at 0 with alpha > 0, likewise)."""
    stored = json.loads(C.load(preset="flcl-fig1").to_json())
    del stored["data"]["draw"]
    config = C.from_json(json.dumps(stored))
    assert config.data.draw == "sequential"
    again = C.load(overrides=[f"data.draw={json.dumps(config.data.draw)}"],
                   preset="flcl-fig1")  # fmt: skip
    (u,) = [u for u in unused_keys(again) if u.key == "data.draw"]
    assert not u.refused and u.line.startswith("data.draw = 'sequential' has no effect with ")
    fedgwc = C.load(overrides=['algorithm.name="fedgwc"', "algorithm.alpha=0.5",
                               "algorithm.min_alpha=0.0"])  # fmt: skip
    assert [(u.key, u.refused) for u in unused_keys(fedgwc)] == [("algorithm.min_alpha", False)]


def test_a_stored_config_reads_as_written():
    """A run file's config (written before such keys were refused) is never refused."""
    stored = C.from_json(_with_momentum(C.load(preset="digits")))
    assert stored.server.momentum == 0.5


def test_a_resumed_config_keeps_its_stored_keys_and_refuses_new_ones():
    from distfl.launch import run_config

    stored = C.from_json(_with_momentum(C.load(preset="digits")))
    config = run_config(base=stored, overrides=["run.rounds=50"])
    assert [u.key for u in unused_keys(config)] == ["server.momentum"]  # the run warns of it
    with pytest.raises(ConfigError, match=r"^server.lr = 0.5 has no effect"):
        run_config(base=stored, overrides=["server.lr=0.5"])
    with carried_over(None), pytest.raises(ConfigError, match=r"^server.momentum = 0.5 has no"):
        C.load(base=stored)


def test_every_preset_with_every_algorithm_is_refused_nothing_new():
    """``distfl suite`` runs every scenario with every algorithm: no preset sets a key that
    any algorithm's run refuses (what a preset sets that an algorithm alone leaves without
    effect, a smaller cohort for CFL, is warned of)."""
    from distfl.presets import PRESETS

    for preset in PRESETS:
        for algorithm in algorithm_names():
            try:
                config = C.load(preset=preset, overrides=[f'algorithm.name="{algorithm}"'])
            except ConfigError as err:
                assert " has no effect with " not in str(err), (preset, algorithm)
                continue
            assert all(not u.refused for u in unused_keys(config)), (preset, algorithm)


# -- what the docs and distfl keys say ------------------------------------------------------


def test_the_configuration_pages_example_lines_are_the_codes():
    text = " ".join((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").split())
    with pytest.raises(ConfigError) as err:
        C.load(overrides=["server.momentum=0.5"])
    assert f"`distfl: error: {err.value}`" in text
    cfl = C.load(overrides=[*BASE, 'algorithm.name="cfl"', "server.clients_per_round=5"])
    (warning,) = unused_keys(cfl)
    assert f"`distfl: warning: {warning.line}`" in text


def test_distfl_keys_ends_the_runs_keys_with_those_without_effect():
    from distfl.tools.keys import format_keys, key_rows

    text = format_keys(key_rows("flcl-fig1"), "flcl-fig1")
    head, _, rest = text.partition("keys without effect in this run")
    tail = rest.split("the other algorithms' own keys", 1)[0]
    assert "server.lr                " in head  # the run's keys first
    assert ("\n  server.lr, server.momentum (here server.aggregator = 'fedavg'): it takes "
            "effect only with server.aggregator = 'fedavgm' (or an aggregator of one's own "
            "that reads it)\n") in tail  # fmt: skip
    assert "\n  server.clients_per_round (here algorithm.name = 'flcl'): every member" in tail
    assert tail.count("(warned of)") == 2  # the cohort and the sampling seed
    shown_keys = {k for line in tail.splitlines()[1:] for k in
                  line.strip().split(" (here")[0].split(", ")}  # fmt: skip
    config = C.load(preset="flcl-fig1")
    assert shown_keys == {u.key for u in unused_keys(config, every=True) if "[" not in u.key}


# -- a plug-in's declarations ---------------------------------------------------------------


def _plugin(name: str, conditions: dict, ignored: dict | None = None):
    """An algorithm class of one key ``x`` declaring ``conditions`` and ``ignored``."""
    from dataclasses import dataclass

    from distfl.algorithms import ClusteringAlgorithm, Params
    from distfl.settings import setting

    @dataclass(frozen=True)
    class P(Params):
        x: float = setting(0.0, "≥ 0", "a key")

    P.conditions = conditions

    class Toy(ClusteringAlgorithm):
        Params = P
        ignored_keys = ignored or {}

        def plan(self, round_index):
            raise NotImplementedError

    Toy.name = name
    return Toy


def test_a_plugins_declarations_are_checked_when_it_registers():
    from distfl.algorithms import register
    from distfl.settings import Condition

    never = Condition(("algorithm.x",), "never", lambda c: False)
    with pytest.raises(ValueError, match=r"Toy.Params.conditions\['y'\]: each entry is a key"):
        register(_plugin("toy_bad_condition", {"y": never}))
    with pytest.raises(ValueError, match=r"Toy.Params.conditions\['x'\]"):
        register(_plugin("toy_bad_condition", {"x": "never"}))
    with pytest.raises(ValueError, match=r"Toy.ignored_keys\['server.nope'\]"):
        register(_plugin("toy_bad_ignored", {}, {"server.nope": "why"}))
    with pytest.raises(ValueError, match=r"Toy.ignored_keys\['algorithm.x'\]"):
        register(_plugin("toy_bad_ignored", {}, {"algorithm.x": "why"}))
    assert not {"toy_bad_condition", "toy_bad_ignored"} & set(algorithm_names())


def test_a_plugins_condition_that_cannot_be_evaluated_is_one_line():
    from distfl.algorithms import register
    from distfl.plugins import ALGORITHMS
    from distfl.settings import Condition

    broken = Condition(("algorithm.z",), "algorithm.z > 0", lambda c: c.algorithm.z > 0)
    register(_plugin("toy_broken_condition", {"x": broken}))
    try:
        with pytest.raises(ConfigError) as err:
            C.load(overrides=['algorithm.name="toy_broken_condition"', "algorithm.x=1.0"])
    finally:
        ALGORITHMS.remove("toy_broken_condition")
    assert str(err.value).startswith(
        "the condition of algorithm.x (algorithm.z > 0) cannot be evaluated: AttributeError: "
    )
    assert "\n" not in str(err.value)


def test_a_dataset_and_a_model_declare_their_conditions_alike():
    from dataclasses import dataclass

    from distfl.datasets import DatasetSpec
    from distfl.datasets import register as register_dataset
    from distfl.model_specs import ModelSpec
    from distfl.model_specs import register as register_model
    from distfl.settings import Condition, Params, setting

    @dataclass(frozen=True)
    class P(Params):
        x: int = setting(1, "int ≥ 1", "a key")

    P.conditions = {"w": Condition(("data.dataset",), "never", lambda c: False)}

    class Data(DatasetSpec):
        name, num_classes, sample_shape, Params = "toy_bad_data", 2, (3,), P

        @classmethod
        def load(cls, config):
            raise NotImplementedError

    class Model(ModelSpec):
        name, Params = "toy_bad_model", P

        @classmethod
        def build(cls, input_shape, num_classes, params):
            raise NotImplementedError

    with pytest.raises(ValueError, match=r"Data.Params.conditions\['w'\]"):
        register_dataset(Data)
    with pytest.raises(ValueError, match=r"Model.Params.conditions\['w'\]"):
        register_model(Model)
