"""Reading a config: the layers (defaults, a preset, a TOML file, ``--set`` items) merged
key by key with their names checked, each value coerced to its key's type, and the
:class:`~distfl.config.schema.Config` built and validated (:func:`build`, :func:`load`,
:func:`from_json` for a run file's stored config)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from distfl.config.checks import shown, validate
from distfl.config.groups import ALPHA_NOT_GIVEN
from distfl.config.schema import (
    AlgorithmSection,
    Config,
    DataSection,
    GroupSpec,
    ModelSection,
    StoredParams,
)
from distfl.errors import ConfigError, did_you_mean
from distfl.paths import regular_file
from distfl.plugins import ALGORITHMS, DATASETS, MODELS, load_plugins
from distfl.presets import PRESETS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _section_types() -> dict[str, type]:
    return get_type_hints(Config)


#: the type of a key that takes a number or a word (``eval.clients``: N, "auto" or "all")
INT_OR_WORD = int | str


def describe_type(tp: Any) -> str:
    if tp == INT_OR_WORD:
        return "an integer or a string"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if get_origin(tp) is tuple:
        (inner, _) = get_args(tp)
        if inner is GroupSpec:
            return "a list of tables like {count = 8, alpha = 0.5}"
        return f"a list of {describe_type(inner).removeprefix('an ').removeprefix('a ')}s"
    return str(tp)


#: the integers a key takes: int64's, which the run file, numpy and torch hold
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the field type ``tp``; return it in canonical form. An
    integer must fit in 64 bits and a number must be finite; a string holds no NUL (a
    path cannot)."""
    bad = ConfigError(f"{key} = {shown(value)}: expected {describe_type(tp)}")
    if tp in (INT_OR_WORD, bool, int, str):
        allowed = {INT_OR_WORD: (int, str), bool: (bool,), int: (int,), str: (str,)}[tp]
        if not isinstance(value, allowed) or (isinstance(value, bool) and tp is not bool):
            raise bad
        if isinstance(value, int) and not isinstance(value, bool) and not _int64(value):
            raise ConfigError(
                f"{key} = {shown(value)}: expected an integer from -2**63 to 2**63 - 1 (64 bits)"
            )
        if isinstance(value, str) and "\x00" in value:
            raise ConfigError(f"{key} = {shown(value)}: a string must not hold a NUL (\\x00)")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float's range
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{key} = {shown(value)}: expected a finite number")
        return number
    if get_origin(tp) is tuple:
        (inner, _) = get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise bad
        if inner is GroupSpec:
            return tuple(_group(f"{key}[{i}]", item) for i, item in enumerate(value))
        return tuple(_coerce(f"{key}[{i}]", item, inner) for i, item in enumerate(value))
    raise ConfigError(f"{key}: unsupported type {tp}")


def _group(key: str, item: Any) -> GroupSpec:
    if not isinstance(item, dict):
        raise ConfigError(f"{key} = {item!r}: expected a table like {{count = 8, alpha = 0.5}}")
    hints = get_type_hints(GroupSpec)
    allowed = [f.name for f in dataclasses.fields(GroupSpec)]
    for name in item:
        if name not in hints:
            raise ConfigError(f"unknown key {key}.{name}; allowed: {', '.join(allowed)}")
    if "count" not in item:
        raise ConfigError(f"{key}.count is missing; each group needs count and alpha")
    kwargs = {name: _coerce(f"{key}.{name}", item[name], hints[name]) for name in item}
    if "alpha" not in kwargs:  # ignored by the group's partition, or not given (the checks
        # refuse a dirichlet group drawn from a pooled dataset without it)
        dirichlet = kwargs.get("partition", "dirichlet") == "dirichlet"
        kwargs["alpha"] = ALPHA_NOT_GIVEN if dirichlet else 0.0
    return GroupSpec(**kwargs)


def _merge(base: dict[str, Any], update: dict[str, Any], origin: str) -> None:
    """Merge a two-level ``{section: {key: value}}`` mapping into ``base``, checking names."""
    sections = _section_types()
    if not isinstance(update, dict):
        raise ConfigError(f"{origin}: expected a table of sections")
    for section, values in update.items():
        if section not in sections:
            raise ConfigError(
                f"unknown section [{section}] in {origin}{did_you_mean(section, sections)}; "
                f"allowed: {', '.join(sorted(sections))}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] in {origin}: expected a table of keys")
        if section == "algorithm":
            _merge_algorithm(base.setdefault("algorithm", {}), values)
            continue
        if section in ("data", "model"):
            plugins = update.get("run", {}).get("plugins") or base.get("run", {}).get("plugins")
            merge = _merge_data if section == "data" else _merge_model
            merge(base.setdefault(section, {}), values, origin, plugins=bool(plugins))
            continue
        known = get_type_hints(sections[section])
        for key, value in values.items():
            if key not in known:
                raise ConfigError(
                    f"unknown key {section}.{key} in {origin}{did_you_mean(key, known)}; "
                    f"allowed in [{section}]: {', '.join(sorted(known))}"
                )
            base.setdefault(section, {})[key] = copy.deepcopy(value)


def _merge_data(
    base: dict[str, Any], values: dict[str, Any], origin: str, *, plugins: bool
) -> None:
    """Merge one layer's [data] table. Its keys besides the shared ones are the named
    dataset's own, checked against it when the config is built; naming another dataset than
    the layers before drops their own keys: they were that dataset's. A key that is no
    registered dataset's is refused here, naming ``origin`` (unless ``plugins``: a plug-in
    not imported yet may declare it)."""
    shared = {f.name for f in dataclasses.fields(DataSection)} - {"params"}
    own = {k for spec in DATASETS.classes() for k in spec.Params.keys()}
    for key in values:
        if key not in shared and key not in own and not plugins:
            raise ConfigError(
                f"unknown key data.{key} in {origin}{did_you_mean(key, shared | own)}; "
                "allowed in [data]: "
                f"{', '.join(sorted(shared))}, and a dataset's own keys "
                f"({', '.join(sorted(own)) or 'none'})"
            )
    if "dataset" in values and values["dataset"] != base.get("dataset", DataSection.dataset):
        for key in [k for k in base if k not in shared]:
            del base[key]
    for key, value in values.items():
        base[key] = copy.deepcopy(value)


def _merge_model(
    base: dict[str, Any], values: dict[str, Any], origin: str, *, plugins: bool
) -> None:
    """Merge one layer's [model] table. Its keys besides ``name`` are the named model's own,
    checked against it when the config is built; naming another model than the layers
    before drops the keys of theirs that it does not take (all of them where it is not
    registered yet: a plug-in's keys start from its defaults). A key that is no registered
    model's is refused here, naming ``origin`` (unless ``plugins``: a plug-in not imported
    yet may declare it)."""
    own = {k for spec in MODELS.classes() for k in spec.Params.keys()}
    for key in values:
        if key != "name" and key not in own and not plugins:
            raise ConfigError(
                f"unknown key model.{key} in {origin}{did_you_mean(key, own | {'name'})}; "
                f"allowed in [model]: name, and a model's own keys ({', '.join(sorted(own))})"
            )
    if "name" in values and values["name"] != base.get("name", ModelSection.name):
        name = values["name"]
        takes = set(MODELS.get(name).Params.keys()) if name in MODELS else set()
        for key in [k for k in base if k != "name" and k not in takes]:
            del base[key]
    for key, value in values.items():
        base[key] = copy.deepcopy(value)


def _merge_algorithm(base: dict[str, Any], values: dict[str, Any]) -> None:
    """Merge one layer's [algorithm] table. Naming another algorithm than the layers
    before drops their keys: they were that algorithm's. The keys themselves are checked
    against the named algorithm when the config is built."""
    if "name" in values and values["name"] != base.get("name", AlgorithmSection.name):
        base.clear()
    for key, value in values.items():
        base[key] = copy.deepcopy(value)


#: the longest file name most file systems take (NAME_MAX), and what the writer's temporary
#: file (``.<pid>.<8 hex>.tmp``, a pid of up to 7 digits) and lock file add to run.out's


def parse_set(item: str) -> tuple[str, str, Any]:
    """Parse one ``--set section.key=value``: one key, its value read as one TOML value,
    else (text that is not TOML, on one line) as a string."""
    if "=" not in item:
        raise ConfigError(f"--set {shown(item)}: expected section.key=value")
    dotted, raw = item.split("=", 1)
    dotted = dotted.strip()
    section, _, key = (part.strip() for part in dotted.partition("."))
    if not section or not key or "." in key:
        raise ConfigError(f"--set {shown(item)}: the key must be section.key, e.g. run.rounds")
    try:
        table = tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        if "\n" in raw or "\r" in raw:  # TOML's line ends; a string of two lines is quoted
            raise ConfigError(
                f"--set {dotted}: the value {shown(raw)} is more than one line; give one key "
                'per --set (a string with a line break is quoted: "a\\nb")'
            ) from None
        return section, key, raw
    except RecursionError:
        raise ConfigError(f"--set {dotted}: {_too_deep('the value')}") from None
    except ValueError:  # an integer longer than Python converts from text
        raise ConfigError(f"--set {dotted}: {_too_long_integer('the value')}") from None
    if list(table) != ["v"]:
        raise ConfigError(
            f"--set {dotted}: the value {shown(raw)} holds more than one key; give one key per "
            "--set (--set run.rounds=3 --set run.seed=4)"
        )
    value = table["v"]
    if nesting(value) > MAX_NESTING:
        raise ConfigError(f"--set {dotted}: {_too_deep('the value')}")
    return section, key, value


def _too_long_integer(what: str) -> str:
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
    return (
        f"{what} holds an integer written with more than {limit:,} characters; an integer key "
        "takes at most 2**63 - 1"
    )


#: the deepest nesting of tables and arrays a config may have (data.groups, a list of
#: tables of lists, is three levels deep)
MAX_NESTING = 16


def nesting(value: Any) -> int:
    """How deeply tables and arrays (dicts and lists) nest in ``value`` (0 for a plain
    value), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _too_deep(what: str) -> str:
    return f"{what} nests tables and arrays deeper than {MAX_NESTING} levels (a config's are 3)"


#: the largest config file read (a config is a few KiB; /dev/zero is not one)
MAX_CONFIG_BYTES = 1 << 20


def read_toml(path: str | Path) -> dict[str, Any]:
    """A config file: a regular file (not a FIFO, a device or a directory, which could block
    or never end) of at most MAX_CONFIG_BYTES, UTF-8 TOML."""
    p = Path(path)
    try:
        kind = regular_file(p, MAX_CONFIG_BYTES)
        if kind:
            raise ConfigError(f"config file {p} is {kind}; expected a TOML file")
        with open(p, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:  # it grew since
            raise ConfigError(f"config file {p} is over 1 MiB; expected a TOML file")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist; expected a TOML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"config file {p} cannot be read ({exc.__class__.__name__}); expected a TOML file"
        ) from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {p}: {_too_deep('it')}") from None
    except ValueError:  # an integer longer than Python converts from text
        raise ConfigError(f"config file {p}: {_too_long_integer('it')}") from None
    if nesting(table) > MAX_NESTING + 1:  # the file's sections are one level more
        raise ConfigError(f"config file {p}: {_too_deep('it')}")
    return table


def build(raw: dict[str, Any], *, stored: bool = False, plugins: bool = True) -> Config:
    """Build and validate a :class:`Config` from a merged ``{section: {key: value}}``.

    ``plugins``: import the modules of ``run.plugins`` first, so that the algorithms they
    define register. Without (``plugins=False``, a config read back from a run file, whose
    plug-ins are code and are not run by reading it), an ``algorithm.name`` that is not
    registered keeps its stored keys as they are, unchecked (:class:`StoredParams`).

    ``stored``: ``raw`` is a config read back from a run file, where files written before
    each algorithm had its own keys hold every algorithm's keys in one flat [algorithm]
    table: keys the named algorithm does not take are dropped, and a key's former name
    (one of its Params ``aliases``) wins over another algorithm's key of the same new
    name, and a key the file lacks takes the algorithm's ``stored_defaults`` value (what it
    did before the key existed). A stored config without ``data.draw`` was written before
    the per-client draw: it keeps drawing as it did (``sequential``); one without
    ``comm.sums`` was written before the one-int64 sums and the batched trainer: it keeps
    the three limbs (``limbs``), and its ``train.trainer = "auto"`` keeps meaning
    ``vectorised``."""
    sections = get_type_hints(Config)
    built = {}
    for section, cls in sections.items():
        values = raw.get(section, {})
        if section in ("algorithm", "data", "model"):  # each names what owns its other keys
            continue
        if stored and section == "comm" and "sums" not in values:
            values = {**values, "sums": "limbs"}  # written before the one-int64 sums
        if stored and section == "train" and "sums" not in raw.get("comm", {}):
            if values.get("trainer", "auto") == "auto":  # auto meant vectorised then
                values = {**values, "trainer": "vectorised"}
        hints = get_type_hints(cls)
        kwargs = {key: _coerce(f"{section}.{key}", v, hints[key]) for key, v in values.items()}
        built[section] = cls(**kwargs)
    if plugins:
        load_plugins(built["run"].plugins)  # algorithms and datasets of one's own register here
    built["data"] = _data(raw.get("data", {}), stored=stored, unknown=not plugins)
    built["model"] = _model(raw.get("model", {}), stored=stored, unknown=not plugins)
    built["algorithm"] = _algorithm(raw.get("algorithm", {}), stored=stored, unknown=not plugins)
    config = Config(**built)
    validate(config, unknown_dataset=not plugins, stored=stored)
    return config


def _data(values: dict[str, Any], *, stored: bool, unknown: bool = False) -> DataSection:
    """The [data] table: the shared keys, and the named dataset's own (its spec's
    ``Params``). ``stored``: a run file's config; one without ``data.draw`` was written
    before the per-client draw and keeps drawing as it did (``sequential``), and a key the
    dataset does not take is dropped (files written before each dataset had its own keys
    hold ``dim`` whatever their dataset). ``unknown``: a dataset that is not registered
    keeps its own keys as stored (:class:`StoredParams`), not an error."""
    values = dict(values)
    if stored and "draw" not in values:
        values["draw"] = "sequential"  # written before the per-client draw
    shared = {f.name for f in dataclasses.fields(DataSection)} - {"params"}
    hints = get_type_hints(DataSection)
    kwargs = {k: _coerce(f"data.{k}", v, hints[k]) for k, v in values.items() if k in shared}
    own = {k: v for k, v in values.items() if k not in shared}
    name = kwargs.get("dataset", DataSection.dataset)
    try:
        spec = DATASETS.get(name)
    except ConfigError:
        if not unknown:
            raise
        return DataSection(**kwargs, params=_stored_params(own, "data"))
    params = _own_params(DATASETS, spec, "data.dataset", name, own, stored=stored)
    return DataSection(**kwargs, params=params)


def _model(values: dict[str, Any], *, stored: bool, unknown: bool = False) -> ModelSection:
    """The [model] table: ``name`` and the named model's own keys (its spec's ``Params``).
    ``stored``: a run file's config, whose keys the model does not take are dropped.
    ``unknown``: a model that is not registered keeps its own keys as stored
    (:class:`StoredParams`), not an error."""
    values = dict(values)
    name = _coerce("model.name", values.pop("name", ModelSection.name), str)
    try:
        spec = MODELS.get(name)
    except ConfigError:
        if not unknown:
            raise
        return ModelSection(name=name, params=_stored_params(values, "model"))
    params = _own_params(MODELS, spec, "model.name", name, values, stored=stored)
    return ModelSection(name=name, params=params)


def _own_params(registry, spec, selector: str, name: str, own: dict[str, Any], *, stored: bool):
    """The keys ``own`` of the dataset or model ``spec``, chosen as ``selector = name``
    (``"model.name"``, ``"mlp"``), as its ``Params``. ``stored``: a run file's config,
    whose keys the spec does not take are dropped; otherwise such a key is an error naming
    the specs of ``registry`` that take it."""
    section = selector.split(".")[0]
    fields = spec.Params.keys()
    if stored:
        own = {k: v for k, v in own.items() if k in fields}
    for key in own:
        if key not in fields:
            owners = [s.name for s in registry.classes() if key in s.Params.keys()]
            where = (f"; it is a key of {selector} = {', '.join(map(repr, owners))}"
                     if owners else "")  # fmt: skip
            mine = f"its own keys: {', '.join(fields)}" if fields else "it has no keys of its own"
            raise ConfigError(
                f"{section}.{key}: not a key of [{section}] for {selector} = {name!r} "
                f"({mine}){where}"
            )
    hints = get_type_hints(spec.Params)
    return spec.Params(**{k: _coerce(f"{section}.{k}", v, hints[k]) for k, v in own.items()})


def _algorithm(values: dict[str, Any], *, stored: bool, unknown: bool = False) -> AlgorithmSection:
    """The [algorithm] table as the named algorithm's section. ``unknown``: a name that is
    not registered keeps ``values`` as they are (:class:`StoredParams`), not an error."""
    values = dict(values)
    name = _coerce("algorithm.name", values.pop("name", AlgorithmSection.name), str)
    try:
        cls = ALGORITHMS.get(name)
    except ConfigError:
        if not unknown:
            raise
        return AlgorithmSection(name=name, params=_stored_params(values))
    params_cls = cls.Params
    fields = params_cls.keys()
    aliases = params_cls.aliases
    if stored:
        former = {aliases[k]: v for k, v in values.items() if k in aliases}
        values = {k: v for k, v in values.items() if k in fields and k not in former} | former
        values = params_cls.stored_defaults | values  # keys added since the file was written
    kwargs: dict[str, Any] = {}
    given: dict[str, str] = {}  # key -> the name it was given by
    for key, value in values.items():
        field_name = aliases.get(key, key)
        if field_name not in fields:
            raise ConfigError(_unknown_algorithm_key(key, name, fields))
        if field_name in given:
            former = key if key in aliases else given[field_name]
            raise ConfigError(
                f"algorithm.{former} and algorithm.{field_name} are the same key of {name} "
                f"({former} is its former name); give only algorithm.{field_name}"
            )
        kwargs[field_name] = value
        given[field_name] = key
    hints = get_type_hints(params_cls)
    kwargs = {k: _coerce(f"algorithm.{k}", v, hints[k]) for k, v in kwargs.items()}
    return AlgorithmSection(name=name, params=params_cls(**kwargs))


def _stored_params(values: dict[str, Any], section: str = "algorithm") -> StoredParams:
    """The keys of an algorithm (or a dataset, or a model) that is not registered, as
    stored; each must still be a key one can have (a name, and true or false, a finite
    number or a string; for a model, a list of them too, as ``model.hidden`` is)."""

    def plain(value: Any) -> bool:
        return isinstance(value, (bool, int, float, str)) and not (
            isinstance(value, float) and not math.isfinite(value)
        )

    for key, value in values.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise ConfigError(f"{section}.{key}: not a key name (letters, digits, _)")
        listed = section == "model" and isinstance(value, list) and all(map(plain, value))
        if not (plain(value) or listed):
            what = "true or false, a finite number or a string"
            raise ConfigError(
                f"{section}.{key} = {value!r}: expected {what}"
                + (" (or a list of them)" if section == "model" else "")
            )
    return StoredParams(values)


def key_owners(key: str) -> list[str]:
    """The algorithms that take ``key`` under ``[algorithm]`` (as a field or an alias)."""
    return [
        name
        for name, cls in ALGORITHMS.items()
        if key in cls.Params.aliases or key in cls.Params.keys()
    ]


def _unknown_algorithm_key(key: str, name: str, fields: tuple[str, ...]) -> str:
    owners = [o for o in key_owners(key) if o != name]
    mine = f"its keys: {', '.join(sorted(fields))}" if fields else "it takes no other key"
    whose = f"; {key} is a key of {', '.join(owners)}" if owners else ""
    guess = "" if owners else did_you_mean(key, fields)
    return f"unknown key algorithm.{key} for algorithm.name = {name!r}{guess} ({mine}){whose}"


def load(
    *,
    path: str | Path | None = None,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    base: Config | None = None,
) -> Config:
    """Defaults (or ``base``, e.g. a run file's stored config), then ``preset``, then the
    TOML file at ``path``, then ``overrides``."""
    raw: dict[str, Any] = {}
    if base is not None:
        _merge(raw, base.to_dict(), "the stored config")
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(
                f"--preset {preset!r} is unknown{did_you_mean(preset, PRESETS)}; allowed: "
                f"{', '.join(PRESETS)}"
            )
        _merge(raw, PRESETS[preset], f"preset {preset!r}")
    if path is not None:
        _merge(raw, read_toml(path), str(path))
    _merge(raw, _set_layer(overrides, raw), "--set")
    return build(raw)


def _set_layer(items: list[str] | tuple[str, ...], below: dict[str, Any]) -> dict[str, Any]:
    """The ``--set`` items as one layer, applied in their order: of two items for one key
    the later wins. A string key whose value reads as another TOML type (``--set
    run.out=5``) keeps the text as given."""
    parsed = [(*parse_set(item), item) for item in items]
    name = below.get("algorithm", {}).get("name")
    for section, key, value, _ in parsed:
        if (section, key) == ("algorithm", "name"):
            name = value  # the algorithm whose keys the layer's are
    layer: dict[str, dict[str, Any]] = {}
    for section, key, value, item in parsed:
        if not isinstance(value, str) and _key_type(section, key, name) is str:
            value = item.split("=", 1)[1].strip()
        layer.setdefault(section, {})[key] = value
    return layer


def _key_type(section: str, key: str, algorithm: Any) -> Any:
    """The declared type of ``section.key`` (None when unknown)."""
    if section == "algorithm":
        if key == "name":
            return str
        try:
            params = ALGORITHMS.get(str(algorithm or AlgorithmSection.name)).Params
        except ConfigError:
            return None
        return get_type_hints(params).get(params.aliases.get(key, key))
    cls = _section_types().get(section)
    return get_type_hints(cls).get(key) if cls is not None else None


def from_json(text: str, *, plugins: bool = False) -> Config:
    """Rebuild a config from :meth:`Config.to_json` (as stored in a run file).

    ``plugins``: import the stored ``run.plugins`` (Python code named by the file). Without,
    nothing is imported, and an algorithm that is not registered keeps its stored keys,
    unchecked (:class:`StoredParams`): enough to read the run's results."""
    try:
        stored = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the stored config is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(_too_deep("the stored config")) from None
    except ValueError:  # an integer longer than Python converts from text
        raise ConfigError(_too_long_integer("the stored config")) from None
    if not isinstance(stored, dict):
        raise ConfigError("the stored config is not a JSON object of sections")
    if nesting(stored) > MAX_NESTING + 1:
        raise ConfigError(_too_deep("the stored config"))
    raw: dict[str, Any] = {}
    _merge(raw, stored, "the stored config")
    return build(raw, stored=True, plugins=plugins)
