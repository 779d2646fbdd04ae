"""The configuration reference, generated from the schema: every key of :class:`Config`'s
sections, of a group in ``data.groups`` and of each registered algorithm's, dataset's and
model's ``Params``, with the values it allows, its default and what it means, all read from
the keys' declarations (:func:`distfl.settings.setting`). The docs site inserts these tables
where its pages say one of the markers of :data:`MARKERS` (``scripts/docs_hooks.py``), so
they cannot drift from the code; ``python -m distfl.tools.reference`` prints them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_type_hints

from distfl.algorithms.registry import algorithm_class, algorithm_names
from distfl.config import CHOICES, Config, GroupSpec
from distfl.datasets import dataset_names, dataset_spec
from distfl.model_specs import BUILT_IN, model_names, model_spec


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One key of the reference."""

    key: str
    allowed: str
    default: str
    doc: str


def _value(value: Any) -> str:
    """A default as a config file writes it (TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def _choices(values: tuple[str, ...]) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _doc(f: dataclasses.Field, key: str, choices: tuple[str, ...] | None) -> KeyDoc:
    meta = f.metadata
    if f.default is not dataclasses.MISSING:
        default = f"`{_value(f.default)}`"
    elif f.default_factory is not dataclasses.MISSING:
        default = f"`{_value(f.default_factory())}`"
    else:
        default = "required"
    allowed = _choices(choices) if choices else meta.get("allowed", "")
    return KeyDoc(key, allowed, default, meta.get("doc", ""))


def config_keys() -> list[KeyDoc]:
    """Every key of the config's sections but the algorithms' own, in declaration order;
    ``algorithm.name`` lists the algorithms registered now."""
    rows = []
    for section, cls in get_type_hints(Config).items():
        for f in dataclasses.fields(cls):
            if f.name == "params":
                continue
            key = f"{section}.{f.name}"
            doc = _doc(f, key, CHOICES.get(key))
            if key == "algorithm.name":
                doc = dataclasses.replace(doc, allowed=_choices(tuple(algorithm_names())))
            if key == "data.dataset":
                doc = dataclasses.replace(doc, allowed=_choices(tuple(dataset_names())))
            if key == "model.name":
                doc = dataclasses.replace(doc, allowed=_choices(_models_in_order()))
            rows.append(doc)
    return rows


def group_keys() -> list[KeyDoc]:
    """The keys of one group of ``data.groups``."""
    return [_doc(f, f.name, None) for f in dataclasses.fields(GroupSpec)]


def algorithm_keys() -> dict[str, list[KeyDoc]]:
    """Per registered algorithm, its own keys (``algorithm.<key>``)."""
    out = {}
    for name in algorithm_names():
        params = algorithm_class(name).Params
        out[name] = [
            _doc(f, f.name, params.choices.get(f.name)) for f in dataclasses.fields(params)
        ]
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def config_table() -> str:
    return _table(
        ("key", "allowed", "default", "meaning"),
        [(f"`{d.key}`", d.allowed, d.default, d.doc) for d in config_keys()],
    )


def group_table() -> str:
    return _table(
        ("group key", "allowed", "default", "meaning"),
        [(f"`{d.key}`", d.allowed, d.default, d.doc) for d in group_keys()],
    )


def dataset_keys() -> dict[str, list[KeyDoc]]:
    """Per registered dataset that has keys of its own, those keys (``data.<key>``)."""
    from distfl.datasets import dataset_specs

    out = {}
    for spec in dataset_specs():
        docs = [_doc(f, f"data.{f.name}", spec.Params.choices.get(f.name))
                for f in dataclasses.fields(spec.Params)]  # fmt: skip
        if docs:
            out[spec.name] = docs
    return out


def _models_in_order() -> tuple[str, ...]:
    """The registered models: the built-in ones in the docs' order, then the others."""
    return (*BUILT_IN, *(n for n in model_names() if n not in BUILT_IN))


def model_keys() -> dict[str, list[KeyDoc]]:
    """Per registered model that has keys of its own, those keys (``model.<key>``)."""
    out = {}
    for name in _models_in_order():
        params = model_spec(name).Params
        docs = [_doc(f, f"model.{f.name}", params.choices.get(f.name))
                for f in dataclasses.fields(params)]  # fmt: skip
        if docs:
            out[name] = docs
    return out


def model_keys_table() -> str:
    rows = [
        (f"`{name}`", f"`{d.key}`", d.allowed, d.default, d.doc)
        for name, docs in model_keys().items()
        for d in docs
    ]
    return _table(("model", "key", "allowed", "default", "meaning"), rows)


def model_table() -> str:
    """The registered models, each as its spec declares it."""
    rows = [(f"`{n}`", model_spec(n).network, model_spec(n).source) for n in _models_in_order()]
    return _table(("`model.name`", "network", "from"), rows)


def dataset_keys_table() -> str:
    rows = [
        (f"`{name}`", f"`{d.key}`", d.allowed, d.default, d.doc)
        for name, docs in dataset_keys().items()
        for d in docs
    ]
    return _table(("dataset", "key", "allowed", "default", "meaning"), rows)


def algorithm_table() -> str:
    rows = [
        (f"`{name}`", f"`{d.key}`", d.allowed, d.default, d.doc)
        for name, docs in algorithm_keys().items()
        for d in docs
    ]
    return _table(("algorithm", "key", "allowed", "default", "meaning"), rows)


def dataset_table() -> str:
    """The registered datasets, each as its spec declares it."""
    from distfl.datasets import dataset_specs

    rows = []
    for spec in dataset_specs():
        classes = spec.classes_text or str(spec.num_classes)
        rows.append((f"`{spec.name}`", spec.source, f"{spec.shape_text()}, {classes}",
                     spec.files))  # fmt: skip
    return _table(("`data.dataset`", "from", "shape, classes", "files under `data.root`"), rows)


def records_table() -> str:
    """What each registered algorithm records in a run file, as it declares it: its
    per-cluster statistics (``/metrics/clusters``; "every run": a column of every run's
    file) and what it stores at a split (``/hierarchy/<id>``)."""
    from distfl.algorithms import algorithm_class, algorithm_names

    rows = []
    for name in algorithm_names():
        cls = algorithm_class(name)
        for stat in cls.statistics:
            where = "`/metrics/clusters`" + (" (every run)" if stat.every_run else "")
            rows.append((f"`{name}`", f"`{stat.name}`", where, stat.doc))
        for dataset, shape, doc in cls.split_datasets:
            rows.append((f"`{name}`", f"`{dataset}` {shape}", "`/hierarchy/<id>`", doc))
    return _table(("algorithm", "name", "where", "what it is"), rows)


#: the markers of the docs' pages and what replaces each
MARKERS = {
    "<!-- distfl:config-keys -->": config_table,
    "<!-- distfl:group-keys -->": group_table,
    "<!-- distfl:algorithm-keys -->": algorithm_table,
    "<!-- distfl:datasets -->": dataset_table,
    "<!-- distfl:dataset-keys -->": dataset_keys_table,
    "<!-- distfl:models -->": model_table,
    "<!-- distfl:model-keys -->": model_keys_table,
    "<!-- distfl:algorithm-records -->": records_table,
}


def fill(markdown: str) -> str:
    """``markdown`` with every marker of :data:`MARKERS` replaced by its table."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make().rstrip("\n"))
    return markdown


def missing_docs() -> list[str]:
    """Keys of distfl's own declared without a meaning (``doc``) or allowed values: each is
    a defect (a plug-in's keys, registered from elsewhere, are the plug-in's business)."""
    every = [*config_keys(), *group_keys()]
    every += [
        d
        for name, docs in dataset_keys().items()
        if dataset_spec(name).__module__.startswith("distfl.")
        for d in docs
    ]
    every += [
        d
        for name, docs in model_keys().items()
        if model_spec(name).__module__.startswith("distfl.")
        for d in docs
    ]
    every += [
        d
        for name, docs in algorithm_keys().items()
        if algorithm_class(name).__module__.startswith("distfl.")
        for d in docs
    ]
    return [d.key for d in every if not d.doc.strip() or not d.allowed.strip()]


if __name__ == "__main__":
    print(config_table())
    print(group_table())
    print(algorithm_table())
    print(dataset_table())
    print(model_table())
    print(model_keys_table())
