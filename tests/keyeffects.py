"""The configs the tests of the keys that take no effect work on (tests/unit/test_unused_keys.py,
tests/integration/test_keys_take_effect.py): a tiny federation, each algorithm on it, and
the settings under which other keys take effect or not; and, for a key, another valid value
than its default."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from distfl import config as C
from distfl.algorithms import algorithm_names
from distfl.config.effects import Conditional, conditional_keys

#: a federation small enough to run every algorithm in a fraction of a second: two groups
#: (a concept shift) of three clients
BASE = (
    "run.rounds=3", "data.num_clients=6", "server.clients_per_round=3", "eval.every=2",
    "data.samples_per_client=40", "train.local_steps=2", 'run.progress="none"',
    'data.groups=[{count=3, alpha=1000.0, name="a"}, '
    '{count=3, alpha=1000.0, name="b", permute_labels=true}]',
)  # fmt: skip
#: what CFL needs to test a split within three rounds
OWN_BASE = {"cfl": ("algorithm.warmup=1",)}

#: settings under which other keys of the sections take effect, or not (on the one global
#: model); ``files``: a context whose run reads a file the tests do not write
SECTION_CONTEXTS: dict[str, tuple[str, ...]] = {
    "sequential": ('train.trainer="sequential"',),
    "adam": ('train.optimizer="adam"',),
    "fedavgm": ('server.aggregator="fedavgm"',),
    "one process": ('comm.backend="local"',),
    "gaussian": ('data.dataset="gaussian"',),
    "cnn": ('model.name="cnn"',),
    "shards": (
        'data.groups=[{count=3, partition="shards", shards_per_client=2}, {count=3, alpha=1000.0}]',
    ),
    "classes per client": (
        'data.groups=[{count=3, partition="classes_per_client", classes_per_client=2}, '
        "{count=3, alpha=1000.0}]",
    ),
    "fraction": ('participation.availability="fraction"', "participation.fraction=0.8"),
    "diurnal": (
        'participation.availability="fraction"',
        "participation.fraction=0.8",
        "participation.diurnal=0.3",
    ),  # fmt: skip
    "clock": ('participation.resources="loguniform"',),
    "fedpns": ('participation.selection="fedpns"',),
    "noised": ("privacy.clip=0.5", "privacy.noise=1.0"),
}
#: contexts whose run reads files (enumerated, not run)
FILE_CONTEXTS: dict[str, tuple[str, ...]] = {
    # the writers' own sizes: data.samples_per_client back at its default
    "femnist writers": (
        'data.dataset="femnist"',
        'data.root="/nonexistent"',
        'data.partition="natural"',
        "data.samples_per_client=80",
    ),  # fmt: skip
    "availability trace": ('participation.availability="trace"', 'participation.trace="t.csv"'),
    "resource trace": ('participation.resources="trace"', 'participation.resource_trace="r.csv"'),
}
#: an algorithm's own settings under which others of its keys take effect, or not
OWN_CONTEXTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ifca random": ("ifca", ('algorithm.init="random"',)),
    "fesem random": ("fesem", ('algorithm.init="random"',)),
    "emdcfl sinkhorn": ("emdcfl", ('algorithm.solver="sinkhorn"',)),
    "fedgwc alpha": ("fedgwc", ("algorithm.alpha=0.5",)),
    "fedgwc no references": ("fedgwc", ("algorithm.reference_draws=0",)),
    "fedgwc paper's members": ("fedgwc", ('algorithm.reassign="none"',)),
    "fedclust two": ("fedclust", ("algorithm.num_clusters=2",)),
    "pacfl two": ("pacfl", ("algorithm.num_clusters=2",)),
    "pfedgraph no term": ("pfedgraph", ("algorithm.lam=0",)),
    "fedsac no term": ("fedsac", ("algorithm.lam=0",)),
}


def items(algorithm: str, *more: str) -> list[str]:
    """The ``--set`` items of ``algorithm`` on :data:`BASE`, then ``more``."""
    return [*BASE, f'algorithm.name="{algorithm}"', *OWN_BASE.get(algorithm, ()), *more]


def contexts(*, files: bool = True) -> list[tuple[str, str, list[str]]]:
    """(name, algorithm, items) of every context: each algorithm on the base federation,
    the sections' contexts on the one global model, the algorithms' own (``files``: with
    the contexts whose run reads a file)."""
    out = [(f"{a}", a, items(a)) for a in algorithm_names()]
    sections = SECTION_CONTEXTS | (FILE_CONTEXTS if files else {})
    out += [(name, "none", items("none", *more)) for name, more in sections.items()]
    out += [(name, a, items(a, *more)) for name, (a, more) in OWN_CONTEXTS.items()]
    return out


#: a valid value other than the default of the keys whose default does not give one by
#: :func:`another_value`'s rule (a string, a list, a value of a range that halving leaves)
OTHER_VALUES: dict[str, Any] = {
    "server.placement": "static",
    "data.root": "/data",
    "data.partition": "natural",
    "data.draw": "sequential",
    "participation.trace": "t.csv",
    "participation.resource_trace": "r.csv",
    "model.hidden": (32,),
    "algorithm.sign": "code",
    "group.classes": (0, 1),
    "group.class_choice": "deterministic",
    "group.classes_per_client": 2,
    "group.shards_per_client": 2,
    "group.samples_per_client": 30,
    "group.availability": 0.5,
    "privacy.accountant": "prv",
}


def another_value(entry: Conditional) -> Any:
    """A valid value of ``entry``'s key other than its default: :data:`OTHER_VALUES`', else
    the other boolean, an int one above, a float half of it (0.5 for 0)."""
    name = entry.key if entry.group is None else "group." + entry.key.rpartition(".")[2]
    if name in OTHER_VALUES:
        return OTHER_VALUES[name]
    d = entry.default
    if isinstance(d, bool):
        return not d
    if isinstance(d, int):
        return d + 1
    if isinstance(d, float):
        return d / 2 if d else 0.5
    raise AssertionError(f"no other value of {entry.key} (default {d!r}): add one to OTHER_VALUES")


def raw_with(config: C.Config, entry: Conditional, value: Any) -> dict[str, Any]:
    """``config`` as a table of sections, with ``entry``'s key at ``value``."""
    raw = copy.deepcopy(config.to_dict())
    raw["data"]["groups"] = [dict(g) for g in raw["data"]["groups"]]
    if entry.group is not None:
        raw["data"]["groups"][entry.group][entry.key.rpartition(".")[2]] = value
    else:
        section, key = entry.key.split(".")
        raw[section][key] = value
    return raw


def with_values(config: C.Config, changes: dict[str, Any]) -> C.Config:
    """``config`` with each key of ``changes`` (``section.key``, ``data.groups[i].key``, an
    own key as ``algorithm.key``) at its value, unchecked: what a run of such a config
    computes, where the config's check would refuse it."""
    for key, value in changes.items():
        if key.startswith("data.groups["):
            index, _, name = key.removeprefix("data.groups[").partition("].")
            groups = list(config.data.groups)
            groups[int(index)] = dataclasses.replace(groups[int(index)], **{name: value})
            section = dataclasses.replace(config.data, groups=tuple(groups))
            config = dataclasses.replace(config, data=section)
            continue
        name, _, key = key.partition(".")
        section = getattr(config, name)
        if key in {f.name for f in dataclasses.fields(section)}:
            section = dataclasses.replace(section, **{key: value})
        else:  # a key of the algorithm's, the dataset's or the model's own
            section = dataclasses.replace(
                section, params=dataclasses.replace(section.params, **{key: value})
            )
        config = dataclasses.replace(config, **{name: section})
    return config


def entries(config: C.Config) -> dict[str, Conditional]:
    """The conditional keys of ``config`` by name."""
    return {e.key: e for e in conditional_keys(config)}


__all__ = [
    "BASE",
    "FILE_CONTEXTS",
    "OTHER_VALUES",
    "OWN_CONTEXTS",
    "SECTION_CONTEXTS",
    "another_value",
    "contexts",
    "entries",
    "items",
    "raw_with",
    "with_values",
]
