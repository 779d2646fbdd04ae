"""Which keys take effect in a config: a key set to a value other than its default where
nothing reads it is refused, never silently dropped (:func:`check_unused`, called by
:func:`~distfl.config.checks.validate` before any work).

Where a key takes effect is declared once, by what reads it:

- the sections' keys that take effect only with certain values of others (FedAvgM's
  ``server.momentum``, Adam's ``train.beta1``, the availability keys of ``fraction``, ...)
  and those a dataset's spec leaves without effect (``data.root`` of a dataset that reads
  no file; the draw and the sizes of a natural partition), in :data:`RULES` and
  :data:`GROUP_RULES` (a group of ``data.groups``);
- an algorithm's, a dataset's and a model's own keys that take effect only with certain
  values of others, in their ``Params.conditions`` (:class:`~distfl.settings.Condition`);
- the sections' keys an algorithm leaves without effect whatever else the config says, in
  the algorithm's ``ignored_keys`` (and ``server.clients_per_round`` where every member of
  a cluster trains each round: ``every_member_trains``).

The last kind is a warning, not a refusal: a scenario (a preset, a config file, a suite's
``--set`` items) is meant for every algorithm it is compared across, so a key the
algorithm alone leaves without effect does not stop the run (rank 0 says it in one line
when the run starts). So is a key carried over, at its stored value, from a run file whose
run goes on (:func:`carried_over`), and one at the value a run file written before the key
existed holds (:data:`STORED_DEFAULTS`, a Params' ``stored_defaults``), so that such a
file's config, written out (``Config.to_toml``), runs again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from distfl.config.groups import ALPHA_NOT_GIVEN, GroupSpec
from distfl.config.schema import Config
from distfl.errors import ConfigError
from distfl.plugins import AGGREGATORS, ALGORITHMS, DATASETS
from distfl.settings import Condition, Params
from distfl.text import exception_line


def _is(key: str, *values: str) -> Condition:
    """The condition ``key`` holds one of ``values``."""
    section, name = key.split(".")
    where = f"{key} = " + " or ".join(repr(v) for v in values)
    return Condition((key,), where, lambda c: getattr(getattr(c, section), name) in values)


def _aggregator_reads(name: str) -> Condition:
    """The condition that ``server.aggregator`` reads ``server.<name>`` (its ``keys``:
    FedAvgM's ``lr`` and ``momentum``, or an aggregator of one's own)."""

    def holds(c: Config) -> bool:
        try:
            return name in AGGREGATORS.get(c.server.aggregator).keys
        except ConfigError:  # a stored config's aggregator of a plug-in not imported
            return True

    where = "server.aggregator = 'fedavgm' (or an aggregator of one's own that reads it)"
    return Condition(("server.aggregator",), where, holds)


def _spec(c: Config):
    """The spec of ``data.dataset``; None for one that is not registered."""
    try:
        return DATASETS.get(c.data.dataset)
    except ConfigError:  # a stored config's dataset of a plug-in not imported
        return None


def _pooled(c: Config) -> bool:
    """Whether the clients' samples are drawn from the pooled dataset (no natural owners)."""
    spec = _spec(c)
    return spec is None or not spec.natural_partition(c)


def _sized(c: Config) -> bool:
    """Whether the clients' sizes come from the config (pooled, or generated owners)."""
    spec = _spec(c)
    return spec is None or spec.generated or not spec.natural_partition(c)


#: a pooled dataset's draw (a natural partition has none)
POOLED = Condition(
    ("data.dataset", "data.partition"),
    "a partition drawn from the pooled dataset (data.partition = 'dirichlet' of a dataset "
    "whose clients are not its natural owners)",
    _pooled,
)
#: the clients' sizes from the config
SIZED = Condition(
    ("data.dataset", "data.partition"),
    "clients whose sizes the config gives: a pooled partition, or a generated dataset",
    _sized,
)
#: the client's availability drawn from a share of rounds
FRACTION = _is("participation.availability", "fraction")
#: the virtual clock's resources
CLOCK = Condition(
    ("participation.resources",),
    "participation.resources = 'loguniform' or 'trace'",
    lambda c: c.participation.resources != "off",
)
#: more than one process: a collective to time out, workers to place tasks on
COLLECTIVES = Condition(
    ("comm.backend",),
    "comm.backend other than 'local' (several processes)",
    lambda c: c.comm.backend != "local",
)


#: client-level DP: updates clipped, the only case their noise is drawn
CLIPPED = Condition(("privacy.clip",), "privacy.clip > 0", lambda c: c.privacy.clip > 0)
#: noise with its bound, the only case an accountant reports ε
NOISED = Condition(
    ("privacy.clip", "privacy.noise", "privacy.epsilon", "privacy.sample_clip",
     "privacy.sample_noise"),
    "noise with its bound: privacy.clip > 0 and privacy.noise > 0 or privacy.epsilon > 0, or "
    "privacy.sample_clip > 0 and privacy.sample_noise > 0",
    lambda c: c.privacy.noised or c.privacy.sample_noised,
)  # fmt: skip

#: the sections' keys that take effect only where their condition holds
RULES: dict[str, Condition] = {
    "server.lr": _aggregator_reads("lr"),
    "server.momentum": _aggregator_reads("momentum"),
    "server.placement": COLLECTIVES,
    "comm.timeout_s": COLLECTIVES,
    "train.momentum": _is("train.optimizer", "sgd"),
    "train.beta1": _is("train.optimizer", "adam", "adamw"),
    "train.beta2": _is("train.optimizer", "adam", "adamw"),
    "train.eps": _is("train.optimizer", "adam", "adamw"),
    "train.chunk_mb": _is("train.trainer", "auto", "batched", "vectorised"),
    "data.root": Condition(
        ("data.dataset",),
        "a dataset read from files under it (the datasets' table, docs/datasets.md)",
        lambda c: _spec(c) is None or _spec(c).needs_root,
    ),
    "data.partition": Condition(
        ("data.dataset",),
        "a dataset whose clients may be its natural owners or not (its spec's natural = "
        "'optional')",
        lambda c: _spec(c) is None or _spec(c).natural == "optional",
    ),
    "data.draw": POOLED,
    "data.samples_per_client": SIZED,
    "data.quantity_skew": SIZED,
    "data.held_out": POOLED,
    "participation.fraction": FRACTION,
    "participation.diurnal": FRACTION,
    "participation.period": Condition(
        ("participation.availability", "participation.diurnal"),
        "participation.availability = 'fraction' and participation.diurnal > 0",
        lambda c: c.participation.availability == "fraction" and c.participation.diurnal > 0,
    ),
    "participation.trace": _is("participation.availability", "trace"),
    "privacy.noise": CLIPPED,
    "privacy.epsilon": CLIPPED,
    "privacy.sample_noise": Condition(
        ("privacy.sample_clip",), "privacy.sample_clip > 0", lambda c: c.privacy.sample_clip > 0
    ),
    "privacy.delta": NOISED,
    "privacy.accountant": NOISED,
    "participation.resource_trace": _is("participation.resources", "trace"),
    "participation.speed_min": _is("participation.resources", "loguniform"),
    "participation.speed_max": _is("participation.resources", "loguniform"),
    "participation.bandwidth_min": _is("participation.resources", "loguniform"),
    "participation.bandwidth_max": _is("participation.resources", "loguniform"),
    "participation.pns_alpha": _is("participation.selection", "fedpns"),
    "participation.pns_beta": _is("participation.selection", "fedpns"),
    "participation.pns_kept": _is("participation.selection", "fedpns"),
}


@dataclass(frozen=True)
class GroupCondition:
    """Where a key of a group of ``data.groups`` takes effect: ``holds(config, group)``,
    said as ``where``; ``keys``: the keys that decide, a group's own by its name
    (``partition``) and the others as ``section.key``."""

    keys: tuple[str, ...]
    where: str
    holds: Any
    #: where it takes no effect, whether it is warned of, not refused (``warned(config,
    #: group)``): a value configs were required to give before the key could be left out
    #: (a dirichlet group's alpha of a natural partition); None: refused
    warned: Any = None
    #: where it is warned of, said (the key reference's table)
    warned_where: str = ""


def _partition(*values: str) -> GroupCondition:
    where = "a group of partition = " + " or ".join(repr(v) for v in values)
    return GroupCondition(("partition",), where, lambda c, g: g.partition in values)


#: the keys of a group that take effect only where their condition holds
GROUP_RULES: dict[str, GroupCondition] = {
    # (a group that gives none holds 0, or ALPHA_NOT_GIVEN where its partition is dirichlet;
    # every dirichlet group had to give one before a natural partition could leave it out:
    # there it is warned of)
    "alpha": GroupCondition(
        ("partition", *POOLED.keys),
        "a group of partition = 'dirichlet' drawn from the pooled dataset",
        lambda c, g: g.partition == "dirichlet" and _pooled(c),
        warned=lambda c, g: g.partition == "dirichlet",
        warned_where="a dirichlet group's of a natural partition",
    ),  # fmt: skip
    "classes": GroupCondition(POOLED.keys, POOLED.where, lambda c, g: _pooled(c)),
    "classes_per_client": _partition("classes_per_client"),
    "class_choice": _partition("classes_per_client"),
    "shards_per_client": _partition("shards"),
    "samples_per_client": GroupCondition(SIZED.keys, SIZED.where, lambda c, g: _sized(c)),
    "availability": GroupCondition(FRACTION.keys, FRACTION.where, lambda c, g: FRACTION.holds(c)),
    "speed_scale": GroupCondition(CLOCK.keys, CLOCK.where, lambda c, g: CLOCK.holds(c)),
    "bandwidth_scale": GroupCondition(CLOCK.keys, CLOCK.where, lambda c, g: CLOCK.holds(c)),
}


@dataclass(frozen=True)
class Unused:
    """A key set to ``value``, other than its default, that takes no effect: ``given`` the
    settings that leave it without effect (``server.aggregator = 'fedavg'``), ``why`` where
    it would take effect. ``refused``: False where the algorithm alone leaves it without
    effect, or where it holds the value that run files written before the key existed hold
    (a warning, not a refusal)."""

    key: str
    value: Any
    given: str
    why: str
    refused: bool = True

    @property
    def line(self) -> str:
        """The refusal's or the warning's one line."""
        return f"{self.key} = {shown(self.value)} has no effect with {self.given}: {self.why}"


@dataclass(frozen=True)
class Conditional:
    """A key of a config that takes effect only where ``condition`` holds: ``key`` as the
    refusal names it, its ``value`` and its ``default``; ``group``: the index of the group
    of ``data.groups`` it is a key of (None: a section's, or a plug-in's own)."""

    key: str
    value: Any
    default: Any
    condition: Condition | GroupCondition
    group: int | None = None
    #: the value a run file written before the key existed holds (:data:`STORED_DEFAULTS`,
    #: a Params' ``stored_defaults``): its config, written out and run again, is warned of
    #: at it, not refused
    stored: Any = None

    def warned(self, c: Config) -> bool:
        """Whether, without effect in ``c``, the key is warned of rather than refused
        (:attr:`GroupCondition.warned`)."""
        warned = getattr(self.condition, "warned", None)
        return (
            self.group is not None and warned is not None and warned(c, c.data.groups[self.group])
        )

    def holds(self, c: Config) -> bool:
        """Whether the key takes effect in ``c``; a condition that cannot be evaluated (a
        plug-in's that reads a key ``c`` lacks) is a ConfigError naming the key."""
        try:
            if self.group is None:
                return bool(self.condition.holds(c))
            return bool(self.condition.holds(c, c.data.groups[self.group]))
        except Exception as exc:  # the declaring plug-in's code: whatever it raises
            raise ConfigError(
                f"the condition of {self.key} ({self.condition.where}) cannot be evaluated: "
                f"{exception_line(exc)}"
            ) from None

    def given(self, c: Config) -> str:
        """``key = value, ...`` of the keys that decide (a group's own within its group)."""
        parts = []
        for k in self.condition.keys:
            if "." in k:
                parts.append(f"{k} = {shown(_value(c, k))}")
            else:
                g = c.data.groups[self.group]
                parts.append(f"data.groups[{self.group}].{k} = {shown(getattr(g, k))}")
        return ", ".join(parts)


def shown(value: Any) -> str:
    """``value`` as the refusals write it (``repr``, a tuple as a list)."""
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def _value(c: Config, dotted: str) -> Any:
    section, key = dotted.split(".", 1)
    return getattr(getattr(c, section), key)


def _field_defaults(cls: type) -> dict[str, Any]:
    """Each field of the dataclass ``cls`` with a default, by name."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


#: a group's ``alpha`` where the group does not give it (a partition that ignores it)
GROUP_DEFAULTS = {"alpha": 0.0}
#: the sections' keys a stored config gives a value other than their default where its
#: run file was written before the key existed (distfl.config.parse, ``_data``): 0.1.0's
#: sequential draw
STORED_DEFAULTS = {"data.draw": "sequential"}


def conditional_keys(c: Config) -> list[Conditional]:
    """Every key of ``c`` that takes effect only where a condition holds: the sections'
    (:data:`RULES`), each group's (:data:`GROUP_RULES`) and the algorithm's, the
    dataset's and the model's own (their ``Params.conditions``)."""
    out = []
    for dotted, condition in RULES.items():
        section, key = dotted.split(".")
        default = _field_defaults(type(getattr(c, section)))[key]
        out.append(Conditional(dotted, _value(c, dotted), default, condition,
                               stored=STORED_DEFAULTS.get(dotted)))  # fmt: skip
    for i, g in enumerate(c.data.groups):
        group_defaults = _field_defaults(GroupSpec) | GROUP_DEFAULTS
        if g.partition == "dirichlet":
            group_defaults["alpha"] = ALPHA_NOT_GIVEN
        for key, condition in GROUP_RULES.items():
            out.append(Conditional(f"data.groups[{i}].{key}", getattr(g, key),
                                   group_defaults[key], condition, i))  # fmt: skip
    for section in ("algorithm", "data", "model"):
        params = getattr(c, section).params
        if not isinstance(params, Params):  # a stored plug-in's keys, not looked up
            continue
        defaults = _field_defaults(type(params))
        stored = type(params).stored_defaults
        for key, condition in type(params).conditions.items():
            out.append(Conditional(f"{section}.{key}", getattr(params, key), defaults[key],
                                   condition, stored=stored.get(key)))  # fmt: skip
    return out


def ignored_by(cls: type) -> dict[str, str]:
    """The sections' keys that the algorithm ``cls`` leaves without effect, each with why:
    its ``ignored_keys``, and ``server.clients_per_round`` where every member trains."""
    out = {}
    if cls.every_member_trains:
        out["server.clients_per_round"] = (
            "every member of a cluster trains and reports every round, whatever the cohort size"
        )
    return out | dict(cls.ignored_keys)


def algorithm_ignores(c: Config) -> dict[str, str]:
    """:func:`ignored_by` of the config's algorithm; none for a stored config's algorithm
    that is not registered."""
    if not isinstance(c.algorithm.params, Params):  # StoredParams: not looked up
        return {}
    return ignored_by(ALGORITHMS.get(c.algorithm.name))


def unused_keys(c: Config, *, every: bool = False) -> list[Unused]:
    """The keys of ``c`` that take no effect and hold a value other than their default
    (``every``: at their default too, as ``distfl keys`` lists them)."""
    out = []
    for entry in conditional_keys(c):
        if (entry.value != entry.default or every) and not entry.holds(c):
            why = f"it takes effect only with {entry.condition.where}"
            refused = (entry.stored is None or entry.value != entry.stored) and not entry.warned(c)
            out.append(Unused(entry.key, entry.value, entry.given(c), why, refused))
    for key, why in algorithm_ignores(c).items():
        section, name = key.split(".")
        value = _value(c, key)
        if value != _field_defaults(type(getattr(c, section)))[name] or every:
            given = f"algorithm.name = {shown(c.algorithm.name)}"
            out.append(Unused(key, value, given, why, refused=False))
    return out


#: a config whose keys at their stored values are not refused (:func:`carried_over`)
_CARRIED: contextvars.ContextVar[Config | None] = contextvars.ContextVar("carried", default=None)


@contextlib.contextmanager
def carried_over(base: Config | None) -> Iterator[None]:
    """Within the block, a key without effect that holds ``base``'s value (a run file's
    stored config, whose run goes on) is not refused: the run says it, as a warning."""
    token = _CARRIED.set(base)
    try:
        yield
    finally:
        _CARRIED.reset(token)


def check_unused(c: Config) -> None:
    """Refuse (ConfigError, one line) the first key of ``c`` set to a value other than its
    default that takes no effect, unless the algorithm alone leaves it without effect or
    it is carried over at a stored value (:func:`carried_over`): those the run warns of
    when it starts (:func:`warning_lines`)."""
    base = _CARRIED.get()
    for unused in unused_keys(c):
        if unused.refused and not (base is not None and _carried(base, unused.key, unused.value)):
            raise ConfigError(unused.line)


def _carried(base: Config, key: str, value: Any) -> bool:
    """Whether ``base`` holds ``key`` at ``value``."""
    try:
        if key.startswith("data.groups["):
            index, _, name = key.removeprefix("data.groups[").partition("].")
            return getattr(base.data.groups[int(index)], name) == value
        return _value(base, key) == value
    except (AttributeError, IndexError):
        return False


def warning_lines(c: Config) -> list[str]:
    """The lines a run starts with: every key of ``c`` set to a value other than its
    default that takes no effect and was not refused."""
    return [u.line for u in unused_keys(c)]


__all__ = [
    "GROUP_RULES",
    "RULES",
    "STORED_DEFAULTS",
    "Conditional",
    "GroupCondition",
    "Unused",
    "algorithm_ignores",
    "ignored_by",
    "carried_over",
    "check_unused",
    "conditional_keys",
    "shown",
    "unused_keys",
    "warning_lines",
]
