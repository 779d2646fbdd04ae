"""The configuration reference is generated from the schema (distfl.tools.reference): every
key of the config, of a group and of each built-in algorithm has a meaning and its allowed
values, and the tables list exactly the declared keys with their declared defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from distfl.algorithms.api.base import setting
from distfl.algorithms.api.registry import algorithm_class
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
    assert sorted(per_algorithm) == sorted(reference.own_algorithm_names())
    assert {"fedgwc", "none", "ifca"} <= set(per_algorithm)
    for name, docs in per_algorithm.items():
        assert [d.key for d in docs] == list(algorithm_class(name).Params.keys())


def test_every_allowed_value_of_a_choice_is_listed():
    rows = {d.key: d for d in reference.config_keys()}
    for key, values in CHOICES.items():
        for v in values:
            assert f"`{v}`" in rows[key].allowed, (key, v)
    assert "`mnist5k`" in rows["data.dataset"].allowed
    for name in reference.own_algorithm_names():
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
LAYOUT_MARKER = "<!-- distfl:run-file-layout -->"
NEWCOMERS_MARKER = "<!-- distfl:newcomer-rules -->"


def test_the_page_holds_each_marker_once_and_fill_replaces_them():
    page = PAGE.read_text(encoding="utf-8")
    for marker in reference.MARKERS:
        other_pages = (DATASETS_MARKER, MODELS_MARKER, RECORDS_MARKER, LAYOUT_MARKER,
                       NEWCOMERS_MARKER)  # fmt: skip
        if marker not in other_pages:
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


PAGES = sorted({p for p in PAGE.parent.glob("*.md") for m in reference.MARKERS
                if m in p.read_text(encoding="utf-8")})  # fmt: skip


def test_the_pages_hold_the_generated_parts_the_code_makes_now():
    """Each page read in the repository shows its tables (between a marker and its end),
    and they are what the code generates today: a key added without the pages written
    again fails here, naming the command that writes them."""
    stale = [str(p.relative_to(PAGE.parents[1])) for p in reference.stale_pages()]
    assert not stale, (
        f"the generated parts of {', '.join(stale)} differ from the code: run "
        f"{reference.WRITE_DOCS}"
    )
    assert {p.name for p in PAGES} >= {"configuration.md", "datasets.md", "run-file.md"}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for marker, make in reference.MARKERS.items():
            if marker in text:
                end = reference.end_marker(marker)
                assert text.count(marker) == text.count(end) == 1, (page.name, marker)
                assert f"{marker}\n{make().rstrip()}\n{end}" in text, (page.name, marker)


def test_the_site_shows_each_generated_part_once_without_its_markers():
    """What the site's hook makes of a page: each part once, no marker left."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        site = reference.fill(text)
        for marker, make in reference.MARKERS.items():
            assert marker not in site and reference.end_marker(marker) not in site
            if marker in text:
                assert site.count(make().rstrip()) == 1, (page.name, marker)
        assert reference.fill(site) == site


def test_the_command_finds_and_writes_a_stale_page(tmp_path, monkeypatch, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "configuration.md"
    fresh = PAGE.read_text(encoding="utf-8")
    page.write_text(fresh.replace("| `run.rounds` |", "| `run.rouns` |"), encoding="utf-8")
    (docs / "plain.md").write_text("# no generated part\n", encoding="utf-8")
    monkeypatch.setattr(reference, "DOCS", docs)
    assert reference.main(["--check"]) == 1
    assert capsys.readouterr().out == (
        f"{page}: its generated parts differ from the code; run {reference.WRITE_DOCS}\n"
    )
    assert reference.main(["--write-docs"]) == 0
    assert capsys.readouterr().out == f"wrote {page}\n"
    assert page.read_text(encoding="utf-8") == fresh
    assert reference.main(["--check"]) == 0


def test_a_marker_without_its_part_is_filled_too():
    """A page that has only the marker (as a new page starts) gets the part written."""
    marker = "<!-- distfl:group-keys -->"
    text = f"# Groups\n\n{marker}\n\nmore\n"
    written = reference.regenerate(text)
    assert written == (
        f"# Groups\n\n{marker}\n{reference.group_table().rstrip()}\n"
        f"{reference.end_marker(marker)}\n\nmore\n"
    )
    assert reference.regenerate(written) == written
    assert reference.fill(text) == reference.fill(written)


def test_the_newcomers_page_lists_each_algorithms_rule():
    from distfl.algorithms import algorithm_class

    page = (PAGE.parent / "newcomers.md").read_text(encoding="utf-8")
    assert page.count(NEWCOMERS_MARKER) == 1
    filled = reference.fill(page)
    for name in reference.own_algorithm_names():  # (not a plug-in another test registered)
        rule = algorithm_class(name).newcomers or "none: `data.held_out` is refused"
        assert f"| `{name}` | {rule} |" in filled, name
