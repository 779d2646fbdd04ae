"""The configuration reference is generated from the schema (distfl.tools.reference): every
key of the config, of a group and of each built-in algorithm has a meaning and its allowed
values, and the tables list exactly the declared keys with their declared defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from distfl.algorithms.base import setting
from distfl.algorithms.registry import algorithm_class, algorithm_names
from distfl.config import CHOICES, Config, GroupSpec, describe_keys
from distfl.tools import reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_key_has_a_meaning_and_its_allowed_values():
    assert reference.missing_docs() == []


def test_a_key_declared_without_a_meaning_is_found():
    @dataclasses.dataclass(frozen=True)
    class Bare:
        plain: int = 3
        told: int = setting(4, "int ≥ 0", "something")

    bare, told = (reference._doc(f, f.name, None) for f in dataclasses.fields(Bare))
    assert (bare.doc, bare.allowed, bare.default) == ("", "", "`3`")
    assert (told.doc, told.allowed, told.default) == ("something", "int ≥ 0", "`4`")


def test_the_keys_are_the_schemas():
    keys = [d.key for d in reference.config_keys()]
    assert keys == [k for k, _, _ in describe_keys()]
    defaults = Config()
    for d in reference.config_keys():
        section, name = d.key.split(".")
        value = getattr(getattr(defaults, section), name)
        assert d.default == f"`{reference._value(value)}`", d.key
    assert [d.key for d in reference.group_keys()] == [
        f.name for f in dataclasses.fields(GroupSpec)
    ]
    assert [d.default for d in reference.group_keys()][:2] == ["required", "required"]
    per_algorithm = reference.algorithm_keys()
    assert sorted(per_algorithm) == sorted(algorithm_names())
    for name, docs in per_algorithm.items():
        assert [d.key for d in docs] == list(algorithm_class(name).Params.keys())


def test_every_allowed_value_of_a_choice_is_listed():
    rows = {d.key: d for d in reference.config_keys()}
    for key, values in CHOICES.items():
        for v in values:
            assert f"`{v}`" in rows[key].allowed, (key, v)
    assert "`mnist5k`" in rows["data.dataset"].allowed
    for name in algorithm_names():
        assert f"`{name}`" in rows["algorithm.name"].allowed
    for name, docs in reference.algorithm_keys().items():
        choices = algorithm_class(name).Params.choices
        for d in docs:
            for v in choices.get(d.key, ()):
                assert f"`{v}`" in d.allowed, (name, d.key, v)


#: the pages whose markers fill fills: the configuration page's tables, the datasets'
DATASETS_MARKER = "<!-- distfl:datasets -->"
MODELS_MARKER = "<!-- distfl:models -->"
RECORDS_MARKER = "<!-- distfl:algorithm-records -->"


def test_the_page_holds_each_marker_once_and_fill_replaces_them():
    page = PAGE.read_text(encoding="utf-8")
    for marker in reference.MARKERS:
        if marker not in (DATASETS_MARKER, MODELS_MARKER, RECORDS_MARKER):  # other pages'
            assert page.count(marker) == 1, marker
    filled = reference.fill(page)
    assert not any(marker in filled for marker in reference.MARKERS)
    for d in reference.config_keys():
        assert f"| `{d.key}` |" in filled, d.key
    assert "| `fedgwc` | `db_threshold` |" in filled
    # a | inside a cell is escaped, so that the row keeps its columns
    assert all(line.count(" | ") >= 3 for line in filled.splitlines() if line.startswith("| `"))


def test_the_run_file_page_lists_what_each_algorithm_declares_it_records():
    from distfl.algorithms import algorithm_class, algorithm_names

    page = (PAGE.parent / "run-file.md").read_text(encoding="utf-8")
    assert page.count(RECORDS_MARKER) == 1
    filled = reference.fill(page)
    assert RECORDS_MARKER not in filled
    declared = 0
    for name in algorithm_names():
        cls = algorithm_class(name)
        for stat in cls.statistics:
            every = " (every run)" if stat.every_run else ""
            assert f"| `{name}` | `{stat.name}` | `/metrics/clusters`{every} |" in filled
            declared += 1
        for dataset, shape, _ in cls.split_datasets:
            assert f"| `{name}` | `{dataset}` {shape} | `/hierarchy/<id>` |" in filled
            declared += 1
    assert declared >= 20  # FedGWC's, CFL's, EMD-CFL's and FLCL's


def test_the_datasets_page_is_the_registered_specs():
    """docs/datasets.md's table is made from the specs: a row per registered dataset, with
    its shape and classes as the spec declares them."""
    from distfl.datasets import dataset_specs

    page = (PAGE.parent / "datasets.md").read_text(encoding="utf-8")
    assert page.count(DATASETS_MARKER) == 1
    filled = reference.fill(page)
    assert DATASETS_MARKER not in filled
    table = reference.dataset_table()
    assert table.rstrip("\n") in filled
    rows = table.splitlines()[2:]  # below the header and its rule
    assert [row.split(" | ")[0] for row in rows] == [f"| `{s.name}`" for s in dataset_specs()]
    for spec, row in zip(dataset_specs(), rows, strict=True):
        assert f" | {spec.shape_text()}, {spec.classes_text or spec.num_classes} | " in row
    # and its model table the registered models' specs, the built-in ones first
    from distfl.model_specs import BUILT_IN, model_spec

    assert page.count(MODELS_MARKER) == 1 and MODELS_MARKER not in filled
    assert reference.model_table().rstrip("\n") in filled
    for name in BUILT_IN:
        assert f"| `{name}` | {model_spec(name).network} | {model_spec(name).source} |" in filled
