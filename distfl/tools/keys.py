"""``distfl keys [--preset NAME]``: every config key with its type or allowed values, the
value a run starts from and where that value comes from.

Without ``--preset`` the values are those of a plain ``distfl run`` (neither ``--config``
nor ``--preset``), which starts from the :data:`PLAIN_RUN_PRESET` preset; with ``--preset
NAME`` those of ``distfl run --preset NAME``. A key the preset sets has the source
``preset NAME``; every other key has the source ``built-in default`` (the config sections'
defaults, and the chosen algorithm's ``Params`` defaults). The own keys of the algorithms
the preset does not choose follow with their defaults: they apply once ``algorithm.name``
names their algorithm. Values are written as ``--set KEY=VALUE`` takes them (TOML). Last,
the run's keys that take no effect in it, with where each would
(:mod:`distfl.config.effects`): set to another value, each is refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from distfl.presets import PRESETS

#: the preset a ``distfl run`` with neither ``--config`` nor ``--preset`` starts from
PLAIN_RUN_PRESET = "default"
#: the source of a value that no preset sets
BUILT_IN = "built-in default"


@dataclass(frozen=True)
class KeyRow:
    """One config key: ``key`` (``section.key``), ``kind`` (its type, or ``one of ...`` for
    a key with a fixed set of values), ``value`` (as in :meth:`Config.to_dict`), ``source``
    (``preset NAME`` or :data:`BUILT_IN`) and ``algorithm``: empty for a key of the run
    shown, else the algorithm (not the run's) whose own key this is, at its default.
    ``unused``: for a key of the run that takes no effect in it, why (where it would), and
    ``refused``: whether another value of it is refused (else warned of)."""

    key: str
    kind: str
    value: Any
    source: str
    algorithm: str = ""
    unused: str = ""
    refused: bool = True

    @property
    def text(self) -> str:
        """The value as ``--set KEY=VALUE`` takes it."""
        return value_text(self.key, self.value)


def value_text(key: str, value: Any) -> str:
    """``value`` of ``key`` in TOML; a group of ``data.groups`` with the keys it sets only
    (``count`` and ``alpha``, and those that differ from their defaults)."""
    from distfl.config import GroupSpec, toml_value

    if key == "data.groups":
        default = dataclasses.asdict(GroupSpec(count=0, alpha=0.0))
        groups = [
            {k: v for k, v in dict(g).items() if k in ("count", "alpha") or v != default.get(k)}
            for g in value
        ]
        return toml_value(groups)
    return toml_value(value)


def _preset_keys(name: str) -> set[str]:
    """The ``section.key`` names the preset ``name`` sets (an ``[algorithm]`` key under its
    current name when the preset gives a former one)."""
    from distfl.algorithms import algorithm_class

    layer = PRESETS[name]
    out = set()
    for section, values in layer.items():
        aliases: dict[str, str] = {}
        if section == "algorithm" and "name" in values:
            aliases = algorithm_class(values["name"]).Params.aliases
        out.update(f"{section}.{aliases.get(key, key)}" for key in values)
    return out


def _kinds() -> dict[str, str]:
    """``section.key`` -> its type or allowed values, for every key but the algorithms'
    own (:func:`_algorithm_kinds`)."""
    from distfl.algorithms import algorithm_names
    from distfl.config import CHOICES, describe_keys
    from distfl.datasets import dataset_names
    from distfl.model_specs import model_names
    from distfl.plugins import AGGREGATORS, SELECTIONS

    kinds = {row[0]: row[1] for row in describe_keys()}
    for dotted, allowed in CHOICES.items():
        kinds[dotted] = "one of " + ", ".join(allowed)
    kinds["algorithm.name"] = "one of " + ", ".join(algorithm_names())
    kinds["data.dataset"] = "one of " + ", ".join(dataset_names())
    kinds["model.name"] = "one of " + ", ".join(model_names())
    kinds["participation.selection"] = "one of " + ", ".join(
        SELECTIONS.first_then_by_name("uniform")
    )
    kinds["server.aggregator"] = "one of " + ", ".join(AGGREGATORS.first_then_by_name("fedavg"))
    return kinds


def _dataset_kinds(name: str) -> dict[str, str]:
    """``data.key`` -> type or allowed values of the dataset ``name``'s own keys."""
    from distfl.config import describe_dataset_keys
    from distfl.datasets import dataset_spec

    kinds = {row[0]: row[1] for row in describe_dataset_keys().get(name, [])}
    for key, allowed in dataset_spec(name).Params.choices.items():
        kinds[f"data.{key}"] = "one of " + ", ".join(allowed)
    return kinds


def _model_kinds(name: str) -> dict[str, str]:
    """``model.key`` -> type or allowed values of the model ``name``'s own keys."""
    from distfl.config import describe_model_keys
    from distfl.model_specs import model_spec

    kinds = {row[0]: row[1] for row in describe_model_keys().get(name, [])}
    for key, allowed in model_spec(name).Params.choices.items():
        kinds[f"model.{key}"] = "one of " + ", ".join(allowed)
    return kinds


def _algorithm_kinds(name: str) -> dict[str, str]:
    """``algorithm.key`` -> type or allowed values of the algorithm ``name``'s own keys."""
    from distfl.algorithms import algorithm_class
    from distfl.config import describe_algorithm_keys

    kinds = {row[0]: row[1] for row in describe_algorithm_keys().get(name, [])}
    for key, allowed in algorithm_class(name).Params.choices.items():
        kinds[f"algorithm.{key}"] = "one of " + ", ".join(allowed)
    return kinds


def key_rows(preset: str | None = None) -> list[KeyRow]:
    """The rows of ``distfl keys``: first every key of a run started from ``preset`` (None:
    a plain ``distfl run``, i.e. :data:`PLAIN_RUN_PRESET`), in the config's order, the
    chosen algorithm's own keys after ``algorithm.name``; then the own keys of every other
    registered algorithm at their defaults. An unknown preset is a ConfigError naming the
    presets."""
    from distfl.algorithms import algorithm_class, algorithm_names
    from distfl.config import load
    from distfl.config.effects import unused_keys

    name = PLAIN_RUN_PRESET if preset is None else preset
    config = load(preset=name)  # the checked config that `distfl run --preset NAME` builds
    given = _preset_keys(name)
    source = f"preset {name}"
    kinds = (_kinds() | _algorithm_kinds(config.algorithm.name)
             | _dataset_kinds(config.data.dataset) | _model_kinds(config.model.name))  # fmt: skip
    unused = {u.key: u for u in unused_keys(config, every=True)}
    rows = []
    for section, values in config.to_dict().items():
        for key, value in ((f"{section}.{k}", v) for k, v in values.items()):
            why = unused.get(key)
            rows.append(KeyRow(key, kinds.get(key, ""), value, source if key in given else BUILT_IN,
                               unused=f"(here {why.given}): {why.why}" if why else "",
                               refused=why.refused if why else True))  # fmt: skip
    for other in algorithm_names():
        if other == config.algorithm.name:
            continue
        params = algorithm_class(other).Params()
        own = _algorithm_kinds(other)
        rows.extend(
            KeyRow(f"algorithm.{k}", own.get(f"algorithm.{k}", ""), v, BUILT_IN, other)
            for k, v in dataclasses.asdict(params).items()
        )
    return rows


def _unused_lines(rows: list[KeyRow]) -> list[str]:
    """The run's keys that take no effect in it, those of one reason on one line."""
    reasons: dict[tuple[str, bool], list[str]] = {}
    for r in rows:
        if r.unused:
            reasons.setdefault((r.unused, r.refused), []).append(r.key)
    if not reasons:
        return []
    out = ["keys without effect in this run (set to another value, each is refused, or warned "
           "of where the algorithm alone leaves it without effect):\n"]  # fmt: skip
    for (why, refused), keys in reasons.items():
        out.append(f"  {', '.join(keys)} {why}{'' if refused else ' (warned of)'}\n")
    return out


#: widest value shown in the value column; a longer one (a preset's ``data.groups``) is
#: shown on the next line, indented, and its cell says :data:`BELOW`
VALUE_WIDTH = 20
BELOW = "(next line)"


def format_keys(rows: list[KeyRow], preset: str | None = None) -> str:
    """The rows as ``distfl keys`` prints them: a line saying which run they describe, a
    header, one aligned line per key (key, value, source, type or allowed values; a value
    longer than :data:`VALUE_WIDTH` on a line of its own below), the other algorithms' own
    keys under one heading each, and the presets."""
    mine = [r for r in rows if not r.algorithm]
    others: dict[str, list[KeyRow]] = {}
    for row in rows:
        if row.algorithm:
            others.setdefault(row.algorithm, []).append(row)
    key_w = max([len("key")] + [len(r.key) for r in mine] + [len(r.key) + 2 for r in rows])
    value_w = max([len(BELOW)] + [len(r.text) for r in rows if len(r.text) <= VALUE_WIDTH])
    source_w = max([len("source")] + [len(r.source) for r in rows])

    def line(key: str, value: str, source: str, kind: str) -> str:
        below = len(value) > VALUE_WIDTH
        cell = (BELOW if below else value).ljust(value_w)
        text = f"{key.ljust(key_w)}  {cell}  {source.ljust(source_w)}  {kind}".rstrip() + "\n"
        return text + (f"    {value}\n" if below else "")

    if preset is None:
        title = (
            "values of a plain `distfl run` (neither --config nor --preset: the preset "
            f"{PLAIN_RUN_PRESET})\n"
        )
    else:
        title = f"values of `distfl run --preset {preset}`\n"
    out = [title, line("key", "value", "source", "type or allowed values")]
    out.extend(line(r.key, r.text, r.source, r.kind) for r in mine)
    out.extend(_unused_lines(mine))
    if others:
        out.append("the other algorithms' own keys, at their defaults:\n")
    for name, own in others.items():
        out.append(f"with algorithm.name = {value_text('algorithm.name', name)}:\n")
        out.extend(line("  " + r.key, r.text, r.source, r.kind) for r in own)
    out.append("presets: " + ", ".join(PRESETS) + "\n")
    return "".join(out)


__all__ = ["BUILT_IN", "PLAIN_RUN_PRESET", "KeyRow", "format_keys", "key_rows", "value_text"]
