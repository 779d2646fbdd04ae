"""The key mechanism beneath every configurable part: :func:`setting` declares a config key
(its default, the values it allows and what it means, from which the configuration
reference is generated), :class:`Params` is the frozen dataclass of an algorithm's or a
dataset's own keys, :func:`require` refuses an impossible value with one line.

The config's schema, the datasets and the algorithms all declare their keys with these, so
this module sits beneath all three.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from distfl.errors import ConfigError


def setting(default: Any = dataclasses.MISSING, allowed: str = "", doc: str = "") -> Any:
    """A config key of the schema: its default (none: the key is required), the values it
    allows as the configuration reference prints them, and what it means (Markdown; links
    relative to the reference's page). The reference (``distfl keys``, the docs site) is
    generated from these, and a test fails on a key without ``doc``."""
    return field(default=default, metadata={"allowed": allowed, "doc": doc})


@dataclass(frozen=True)
class Condition:
    """Where a key takes effect: in a config for which ``holds(config)`` is true, which
    ``where`` says as the refusal and the docs write it (``algorithm.init = "kmeans++"``);
    ``keys``: the other keys whose values decide (``section.key``), named with their values
    in the refusal. A key set to a value other than its default in a config where the
    condition fails is refused in one line (:mod:`distfl.config.effects`)."""

    keys: tuple[str, ...]
    where: str
    holds: Callable[[Any], bool]


@dataclass(frozen=True)
class Params:
    """An algorithm's settings: a frozen dataclass whose fields are the keys
    ``algorithm.<field>`` (bool, int, float or str, each with a default).

    ``aliases`` maps a former key of the flat ``[algorithm]`` section (``emd_epsilon``) to
    its field (``epsilon``): it keeps working in config files and ``--set``. ``choices``
    lists the allowed values of a string field. ``stored_defaults`` gives a key added after
    run files were written the value that keeps an older file's run what it was when it is
    resumed (the key's default may differ). ``conditions`` gives a key that takes effect
    only with certain values of others (IFCA's ``fedavg_rounds``, only with ``init =
    "kmeans++"``) its :class:`Condition`: set elsewhere, it is refused. :meth:`check`
    refuses impossible values with one line naming the key (exit code 2)."""

    aliases: ClassVar[dict[str, str]] = {}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    stored_defaults: ClassVar[dict[str, Any]] = {}
    conditions: ClassVar[dict[str, Condition]] = {}

    def check(self, config: Any) -> None:
        """Raise :class:`~distfl.errors.ConfigError` for an impossible value; ``config`` is
        the whole run config (for relations such as ``num_clusters <= data.num_clients``)."""

    @classmethod
    def check_declarations(cls, owner: str) -> None:
        """ValueError naming ``owner`` (the class that declares these keys) unless each of
        ``conditions`` names one of the keys and holds a :class:`Condition` (checked when
        its owner registers)."""
        for key, condition in cls.conditions.items():
            if key not in cls.keys() or not isinstance(condition, Condition):
                raise ValueError(
                    f"{owner}.Params.conditions[{key!r}]: each entry is a key of its Params "
                    f"({', '.join(cls.keys()) or 'none'}) with a distfl.settings.Condition"
                )

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The key names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_kwargs(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.keys()}

    @classmethod
    def made(cls, params: Params | None = None, settings: dict[str, Any] | None = None) -> Params:
        """``params`` (by default the declared defaults) with ``settings`` by key in place of
        its values; a key that is no field is a TypeError naming the fields."""
        settings = settings or {}
        unknown = sorted(set(settings) - set(cls.keys()))
        if unknown:
            raise TypeError(
                f"{cls.__name__} has no setting {unknown[0]!r}; its settings: "
                f"{', '.join(cls.keys()) or 'none'}"
            )
        if params is not None and not isinstance(params, cls):
            raise TypeError(f"expected {cls.__name__}, not {type(params).__name__}")
        base = cls() if params is None else params
        return dataclasses.replace(base, **settings) if settings else base


def require(ok: bool, key: str, value: Any, what: str) -> None:
    """``ConfigError("algorithm.<key> = <value>: must be <what>")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"algorithm.{key} = {value!r}: must be {what}")


__all__ = ["Condition", "Params", "require", "setting"]
