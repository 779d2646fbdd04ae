"""The configuration reference, generated from the schema: every key of :class:`Config`'s
sections, of a group in ``data.groups`` and of each registered algorithm's, dataset's and
model's ``Params``, with the values it allows, its default and what it means, all read from
the keys' declarations (:func:`distfl.settings.setting`), for distfl's own algorithms,
datasets and models (not the plug-ins a process has registered).

The docs' pages hold these tables, and the run file's layout, between a marker and its end
(``<!-- distfl:config-keys -->`` ... ``<!-- /distfl:config-keys -->``, :data:`MARKERS`), so
that a page reads whole in the repository; ``python -m distfl.tools.reference --write-docs``
writes them from the code, ``--check`` says which page differs (a test runs it), and the
docs site fills them again when it is built (``scripts/docs_hooks.py``: :func:`fill`), so
the site cannot drift from the code. Without arguments it prints the tables."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, get_type_hints

from distfl.algorithms.api.registry import algorithm_class, algorithm_names
from distfl.config import CHOICES, Config, GroupSpec
from distfl.datasets import dataset_specs
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


def own_algorithm_names() -> list[str]:
    """The registered algorithms that are distfl's own (a plug-in's, registered in this
    process, is not the reference's)."""
    return [n for n in algorithm_names() if algorithm_class(n).__module__.startswith("distfl.")]


def own_dataset_specs() -> list[Any]:
    """The registered dataset specs that are distfl's own, by name."""
    return [s for s in dataset_specs() if s.__module__.startswith("distfl.")]


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
    ``algorithm.name`` lists distfl's algorithms, ``data.dataset`` its datasets."""
    rows = []
    for section, cls in get_type_hints(Config).items():
        for f in dataclasses.fields(cls):
            if f.name == "params":
                continue
            key = f"{section}.{f.name}"
            doc = _doc(f, key, CHOICES.get(key))
            if key == "algorithm.name":
                doc = dataclasses.replace(doc, allowed=_choices(tuple(own_algorithm_names())))
            if key == "data.dataset":
                names = tuple(spec.name for spec in own_dataset_specs())
                doc = dataclasses.replace(doc, allowed=_choices(names))
            if key == "model.name":
                doc = dataclasses.replace(doc, allowed=_choices(_models_in_order()))
            rows.append(doc)
    return rows


def group_keys() -> list[KeyDoc]:
    """The keys of one group of ``data.groups``."""
    return [_doc(f, f.name, None) for f in dataclasses.fields(GroupSpec)]


def algorithm_keys() -> dict[str, list[KeyDoc]]:
    """Per algorithm of distfl's, its own keys (``algorithm.<key>``)."""
    out = {}
    for name in own_algorithm_names():
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
    """Per dataset of distfl's that has keys of its own, those keys (``data.<key>``)."""
    out = {}
    for spec in own_dataset_specs():
        docs = [_doc(f, f"data.{f.name}", spec.Params.choices.get(f.name))
                for f in dataclasses.fields(spec.Params)]  # fmt: skip
        if docs:
            out[spec.name] = docs
    return out


def _models_in_order() -> tuple[str, ...]:
    """distfl's own registered models: the built-in ones in the docs' order, then the others
    (a plug-in's, registered in this process, is not the reference's)."""
    others = (n for n in model_names() if n not in BUILT_IN)
    return (*BUILT_IN, *(n for n in others if model_spec(n).__module__.startswith("distfl.")))


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


def _own_keys_table(kind: str, keys: dict[str, list[KeyDoc]]) -> str:
    """One row per own key of each plug-in of ``kind`` (``keys``: its keys per name)."""
    rows = [
        (f"`{name}`", f"`{d.key}`", d.allowed, d.default, d.doc)
        for name, docs in keys.items()
        for d in docs
    ]
    return _table((kind, "key", "allowed", "default", "meaning"), rows)


def model_keys_table() -> str:
    return _own_keys_table("model", model_keys())


def model_table() -> str:
    """The registered models, each as its spec declares it."""
    rows = [(f"`{n}`", model_spec(n).network, model_spec(n).source) for n in _models_in_order()]
    return _table(("`model.name`", "network", "from"), rows)


def dataset_keys_table() -> str:
    return _own_keys_table("dataset", dataset_keys())


def algorithm_table() -> str:
    return _own_keys_table("algorithm", algorithm_keys())


def dataset_table() -> str:
    """distfl's datasets, each as its spec declares it."""
    rows = []
    for spec in own_dataset_specs():
        classes = spec.classes_text or str(spec.num_classes)
        rows.append((f"`{spec.name}`", spec.source, f"{spec.shape_text()}, {classes}",
                     spec.files))  # fmt: skip
    return _table(("`data.dataset`", "from", "shape, classes", "files under `data.root`"), rows)


def records_table() -> str:
    """What each of distfl's algorithms records in a run file, as it declares it: its
    per-cluster statistics (``/metrics/clusters``; "every run": a column of every run's
    file) and what it stores at a split (``/hierarchy/<id>``)."""
    rows = []
    for name in own_algorithm_names():
        cls = algorithm_class(name)
        for stat in cls.statistics:
            where = "`/metrics/clusters`" + (" (every run)" if stat.every_run else "")
            rows.append((f"`{name}`", f"`{stat.name}`", where, stat.doc))
        for dataset, shape, doc in cls.split_datasets:
            rows.append((f"`{name}`", f"`{dataset}` {shape}", "`/hierarchy/<id>`", doc))
    return _table(("algorithm", "name", "where", "what it is"), rows)


def newcomer_table() -> str:
    """What each of distfl's algorithms gives a newcomer (``data.held_out``), as it declares
    it (:attr:`~distfl.algorithms.api.base.ClusteringAlgorithm.newcomers`); one without a
    rule refuses ``data.held_out``."""
    rows = []
    for name in own_algorithm_names():
        rule = algorithm_class(name).newcomers
        rows.append((f"`{name}`", rule or "none: `data.held_out` is refused"))
    return _table(("algorithm", "the model a newcomer is evaluated on"), rows)


def conditional_rows() -> list[tuple[str, str, str, str]]:
    """(key, the keys that decide, where it takes effect, what a value other than its
    default gets elsewhere) of every key that takes effect only with certain values of
    others (:mod:`distfl.config.effects`): the sections', a group's, distfl's algorithms',
    datasets' and models' own, and the sections' keys some algorithms leave without
    effect."""
    from distfl.config.effects import GROUP_RULES, RULES, STORED_DEFAULTS, ignored_by

    def row(key: str, c, stored: Any = None) -> tuple[str, str, str, str]:
        said = "refused"
        if stored is not None:
            said += f"; at `{_value(stored)}`, what older run files hold, warned of"
        if getattr(c, "warned_where", ""):
            said += f"; {c.warned_where} warned of"
        return key, ", ".join(f"`{k}`" for k in c.keys), c.where, said

    rows = [row(f"`{key}`", c, STORED_DEFAULTS.get(key)) for key, c in RULES.items()]
    rows += [row(f"`data.groups[].{key}`", c) for key, c in GROUP_RULES.items()]
    owners = [("algorithm", n, algorithm_class(n).Params) for n in own_algorithm_names()]
    owners += [("data", s.name, s.Params) for s in own_dataset_specs()]
    owners += [("model", n, model_spec(n).Params) for n in _models_in_order()]
    for section, name, params in owners:
        for key, c in params.conditions.items():
            rows.append(row(f"`{section}.{key}` of `{name}`", c, params.stored_defaults.get(key)))
    ignored: dict[tuple[str, str], list[str]] = {}
    for name in own_algorithm_names():
        for key, why in ignored_by(algorithm_class(name)).items():
            ignored.setdefault((key, why), []).append(f"`{name}`")
    for (key, why), names in ignored.items():
        rows.append((f"`{key}`", "`algorithm.name`",
                     f"an algorithm other than {', '.join(names)} ({why})",
                     "warned of, once, when the run starts"))  # fmt: skip
    return rows


def conditional_table() -> str:
    header = ("key", "decided by", "takes effect only with", "set elsewhere")
    return _table(header, conditional_rows())


def layout_listing() -> str:
    """The run file's layout (:func:`distfl.runfile.layout.describe`) as a code block."""
    from distfl.runfile.layout import describe

    return "```\n" + describe() + "```\n"


#: the markers of the docs' pages and what each holds; each is closed by its end marker,
#: the same with ``/distfl:`` (:func:`end_marker`)
MARKERS = {
    "<!-- distfl:config-keys -->": config_table,
    "<!-- distfl:group-keys -->": group_table,
    "<!-- distfl:algorithm-keys -->": algorithm_table,
    "<!-- distfl:conditional-keys -->": conditional_table,
    "<!-- distfl:datasets -->": dataset_table,
    "<!-- distfl:dataset-keys -->": dataset_keys_table,
    "<!-- distfl:models -->": model_table,
    "<!-- distfl:model-keys -->": model_keys_table,
    "<!-- distfl:algorithm-records -->": records_table,
    "<!-- distfl:run-file-layout -->": layout_listing,
    "<!-- distfl:newcomer-rules -->": newcomer_table,
}
#: the command that writes the generated parts of the docs' pages
WRITE_DOCS = "python -m distfl.tools.reference --write-docs"
#: the docs' pages, in a checkout of the repository
DOCS = Path(__file__).resolve().parents[2] / "docs"


def end_marker(marker: str) -> str:
    """``<!-- /distfl:NAME -->``, the end of ``<!-- distfl:NAME -->``'s part."""
    return marker.replace("<!-- distfl:", "<!-- /distfl:", 1)


def _generate(markdown: str, keep: bool) -> str:
    for marker, make in MARKERS.items():
        if marker not in markdown:
            continue
        block = re.compile(re.escape(marker) + r"(?:.*?" + re.escape(end_marker(marker)) + ")?",
                           re.DOTALL)  # fmt: skip
        text = make().rstrip("\n")
        part = f"{marker}\n{text}\n{end_marker(marker)}" if keep else text
        markdown = block.sub(part.replace("\\", "\\\\"), markdown)
    return markdown


def fill(markdown: str) -> str:
    """``markdown`` with every marker of :data:`MARKERS` and what it holds, up to its end
    marker, replaced by what the code generates now (the docs site's page)."""
    return _generate(markdown, keep=False)


def regenerate(markdown: str) -> str:
    """``markdown`` with what each marker of :data:`MARKERS` holds written again from the
    code, between the marker and its end marker (the page as the repository keeps it)."""
    return _generate(markdown, keep=True)


def stale_pages(docs: Path | None = None) -> list[Path]:
    """The pages of ``docs`` (default :data:`DOCS`) whose generated parts differ from what
    the code generates now."""
    return [p for p in sorted((docs or DOCS).glob("*.md"))
            if regenerate(text := p.read_text(encoding="utf-8")) != text]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m distfl.tools.reference [--write-docs | --check]``: print the tables;
    write the docs' generated parts; or list the pages whose parts are stale (exit 1)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m distfl.tools.reference")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write-docs", action="store_true",
                      help=f"write the generated parts of the pages in {DOCS}")  # fmt: skip
    what.add_argument("--check", action="store_true",
                      help="exit 1 naming each page whose generated parts are stale")  # fmt: skip
    args = parser.parse_args(argv)
    if not DOCS.is_dir() and (args.write_docs or args.check):
        parser.error(f"{DOCS} does not exist: run it in a checkout of distfl's repository")
    if args.write_docs:
        for page in stale_pages():
            page.write_text(regenerate(page.read_text(encoding="utf-8")), encoding="utf-8")
            print(f"wrote {page}")
        return 0
    if args.check:
        stale = stale_pages()
        for page in stale:
            print(f"{page}: its generated parts differ from the code; run {WRITE_DOCS}")
        return 1 if stale else 0
    for make in (config_table, group_table, algorithm_table, dataset_table, model_table,
                 model_keys_table):  # fmt: skip
        print(make())
    return 0


def missing_docs() -> list[str]:
    """Keys of distfl's own declared without a meaning (``doc``) or allowed values: each is
    a defect (a plug-in's keys, registered from elsewhere, are the plug-in's business)."""
    every = [*config_keys(), *group_keys()]
    every += [d for docs in dataset_keys().values() for d in docs]
    every += [d for docs in model_keys().values() for d in docs]
    every += [d for docs in algorithm_keys().values() for d in docs]
    return [d.key for d in every if not d.doc.strip() or not d.allowed.strip()]


if __name__ == "__main__":
    sys.exit(main())
