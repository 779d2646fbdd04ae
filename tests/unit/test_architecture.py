"""The package's import graph keeps its layers: no circle, nothing imports a higher layer,
the runtime, the communicators and the config know no algorithm, and an algorithm knows
neither the communicators nor the runtime.

The graph is read from the source (every ``import`` statement, at module level or inside a
function), module by module; importing ``distfl.a.b`` counts as importing ``distfl.a.b``
(and ``from distfl.a import b`` as importing ``distfl.a.b`` when b is a module)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "distfl"

#: The layers, lower first, as the folder tree shows them: each entry is a package (a
#: folder of distfl/) or a module at the top of distfl/, and names all of it. A module may
#: import its own layer or lower ones only. docs/code.md lists the same layers (a test below
#: holds them together).
LAYERS: list[tuple[str, ...]] = [
    ("distfl", "distfl.errors", "distfl.exact", "distfl.text", "distfl.paths",
     "distfl.progress", "distfl.metrics", "distfl.hierarchy", "distfl.presets",
     "distfl.settings", "distfl.plugins"),
    ("distfl.config",),
    ("distfl.runfile",),
    ("distfl.plot",),
    ("distfl.data", "distfl.models", "distfl.pooling", "distfl.model_specs",
     "distfl.aggregators"),
    ("distfl.datasets",),
    ("distfl.train",),
    ("distfl.participation",),
    ("distfl.algorithms",),
    ("distfl.comm",),
    ("distfl.runtime",),
    ("distfl.tools",),
    ("distfl.report",),
    ("distfl.launch",),
    ("distfl.cli", "distfl.cli_parser", "distfl.__main__", "distfl.api"),
]  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations only,
    never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", "") == "TYPE_CHECKING":
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imports_of(name: str) -> set[str]:
    """The distfl modules ``name`` imports (resolved to modules, relative imports too)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # distfl.x.attr -> distfl.x
                target = target.rpartition(".")[0]
            if target.startswith("distfl") and target != name:
                out.add(target)
    return out


#: the package's lazy attributes (its PEP 562 ``__getattr__``: ``distfl.open``, ``distfl.run``,
#: ``distfl.suite``, ``distfl.Run``) load the API at their first use; ``import distfl`` does
#: not import it (tests/unit/test_python_api.py checks), so these are no import of the package
LAZY = {"distfl": {"distfl.api"}}

GRAPH = {name: imports_of(name) - LAZY.get(name, set()) for name in MODULES}


def is_client_half(name: str) -> bool:
    """An algorithm's client half: ``algorithms/<name>_client.py``, or ``client.py`` in an
    algorithm's folder."""
    return name.startswith("distfl.algorithms.") and name.endswith(("_client", ".client"))


def is_figure_half(name: str) -> bool:
    """An algorithm's figures: ``algorithms/<name>_figures.py``, or ``figures.py`` in an
    algorithm's folder."""
    return name.startswith("distfl.algorithms.") and name.endswith(("_figures", ".figures"))


def is_plugin(name: str) -> bool:
    """A module of an algorithm (its server or client half), not the interface (``api/``)
    or what algorithms share (``common/``)."""
    return name.startswith("distfl.algorithms.") and algorithm_of(name) is not None


def algorithm_of(name: str) -> str | None:
    """The algorithm module ``name`` belongs to (``distfl.algorithms.<x>``: a file, or a
    folder's modules), None for the package, ``api/`` and ``common/``."""
    from distfl.plugins import INTERFACE

    parts = name.split(".")
    if parts[:2] != ["distfl", "algorithms"] or len(parts) < 3 or parts[2] in INTERFACE:
        return None
    return parts[2]


def layer_of(name: str) -> int:
    """The layer of module ``name``: the entry of :data:`LAYERS` that is it or holds it (the
    root package ``distfl`` names its ``__init__`` alone)."""
    for i, members in enumerate(LAYERS):
        for entry in members:
            if name == entry or (entry != "distfl" and name.startswith(entry + ".")):
                return i
    raise AssertionError(f"{name} is in no layer: add its package to LAYERS")


def test_the_graph_is_read():
    # a sanity check of the reader on edges that must be there
    assert "distfl.algorithms.api" in GRAPH["distfl.algorithms.fedgwc.algorithm"]
    assert "distfl.runtime.protocol" in GRAPH["distfl.runtime.worker"]
    assert "distfl.algorithms.fedgwc.spectral" in GRAPH["distfl.algorithms.fedgwc.algorithm"]
    assert len(MODULES) > 40


def package_of(name: str) -> str:
    """The package (a folder of distfl/, or a module at its top) that holds module ``name``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def test_the_layers_are_the_folder_tree():
    """Every entry of LAYERS is a folder of distfl/ or a module at its top, and every folder
    and top module is in exactly one layer: the list is the tree, with nothing left out and
    no entry for a part of a package."""
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    tree = {"distfl"} | {f"distfl.{n}" for n in folders | modules}
    listed = [entry for members in LAYERS for entry in members]
    assert len(listed) == len(set(listed)), "an entry is in two layers"
    missing, extra = sorted(tree - set(listed)), sorted(set(listed) - tree)
    assert not missing and not extra, f"not in LAYERS: {missing}; not in the tree: {extra}"


def test_the_reading_page_lists_these_layers():
    """docs/code.md ("Reading the code") lists the layers in this order, each as the paths
    of its folders and modules."""
    text = (ROOT / "docs" / "code.md").read_text(encoding="utf-8")
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    listed = []
    for line in section.splitlines():
        if re.match(r"^\d+\. `", line):
            paths = re.findall(r"`(distfl/[^`]*)`", line.split(" — ", 1)[0])
            names = [p.removesuffix("/").removesuffix(".py").replace("/", ".") for p in paths]
            listed.append(tuple("distfl" if n == "distfl.__init__" else n for n in names))
    assert listed == [tuple(members) for members in LAYERS]


#: the folders whose every module docs/code.md names: each package of distfl/ and the
#: folders of one that hold modules of several kinds (an algorithm's own folder is said in
#: words: "its rewards, P, perception, ...")
NAMED_FOLDERS = sorted(
    [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    + ["tools/bench", "participation/selection", "algorithms/api", "algorithms/common"]
)


@pytest.mark.parametrize("package", NAMED_FOLDERS)
def test_the_reading_page_names_every_module_of_these_packages(package):
    """docs/code.md's line of the layer names each module of ``package`` (``name.py``,
    ``package/name.py``, or ``sub/name.py`` for a folder within one) and each of its folders
    (``name/``): a file added there is said on the page."""
    text = (ROOT / "docs" / "code.md").read_text(encoding="utf-8")
    top, _, sub = package.partition("/")
    layers = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    (line,) = [ln for ln in layers.splitlines() if re.match(r"^\d+\. `", ln)
               and f"`distfl/{top}/`" in ln.split(" — ", 1)[0]]  # fmt: skip
    folder = PACKAGE / package
    names = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    names += [f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()]
    forms = ("{}", f"{package}/{{}}", f"{sub}/{{}}" if sub else "{}")
    missing = sorted(n for n in names if not any(f"`{f.format(n)}`" in line for f in forms))
    assert not missing, f"docs/code.md does not name, on its {package} line: {missing}"


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``graph`` (each node's successors), first node repeated at its end, or
    None when there is none (depth-first, in sorted order)."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_no_two_packages_import_each_other():
    """At the level of packages (the folders of distfl/ and the modules at its top) the
    imports form no circle, directly or through others."""
    graph: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        here = package_of(name)
        graph.setdefault(here, set()).update(
            package_of(d) for d in deps if package_of(d) not in (here, "distfl")
        )
    found = circle(graph)
    assert found is None, "packages in a circle: " + " -> ".join(found)


def test_no_circle():
    found = circle(GRAPH)
    assert found is None, "import circle: " + " -> ".join(found)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_only_its_own_layer_or_lower(name):
    mine = layer_of(name)
    higher = sorted(dep for dep in GRAPH[name] if layer_of(dep) > mine)
    assert not higher, f"{name} (layer {mine}) imports a higher layer: {higher}"


def test_only_the_entry_point_imports_the_command_line():
    """The library is beneath its command line: ``distfl.run`` and the CLI both launch
    through :mod:`distfl.launch`."""
    importers = sorted(name for name, deps in GRAPH.items() if "distfl.cli" in deps)
    assert importers == ["distfl.__main__"]
    assert "distfl.launch" in GRAPH["distfl.api"] and "distfl.launch" in GRAPH["distfl.cli"]


def imported_modules(name: str) -> set[str]:
    """Every module ``name`` imports at run time by its absolute name, distfl's or not."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_every_reader_of_a_run_file_reads_through_the_one_results_model():
    """``inspect``, ``status``, ``gather``, ``report``, the bench and ``distfl.open`` see a
    run file as :class:`distfl.runfile.run.Run` only: none of them reads the file itself."""
    readers = ["distfl.api", "distfl.tools.inspection", "distfl.tools.gather"]
    readers += ["distfl.tools.bench.scale", "distfl.tools.bench.distfl_rows"]
    readers += [name for name in MODULES if name.startswith("distfl.report")]
    itself = ("distfl.runfile.checkpoint", "distfl.runfile.reader", "distfl.runfile.opened")
    for name in readers:
        assert not set(itself) & GRAPH[name], f"{name} reads run files itself"
        tops = {m.split(".")[0] for m in imported_modules(name)}
        assert "h5py" not in tops, f"{name} opens HDF5 itself"
    for name in ("distfl.api", "distfl.tools.inspection", "distfl.tools.gather",
                 "distfl.runfile.view", "distfl.tools.bench.scale"):  # fmt: skip
        assert "distfl.runfile.run" in GRAPH[name], name


def test_an_algorithm_imports_only_api_and_common():
    """An algorithm (a module of distfl/algorithms/ or a folder's) imports of the package
    only ``api/``, ``common/`` and its own modules; ``common/`` imports only ``api/`` and
    itself, ``api/`` only itself: an algorithm that extends another's round subclasses the
    round in ``common/`` (docs/code.md)."""
    tiers = {"api": {"api"}, "common": {"api", "common"}}
    seen = 0
    for name, deps in GRAPH.items():
        parts = name.split(".")
        if parts[:2] != ["distfl", "algorithms"] or len(parts) < 3:
            continue
        own = algorithm_of(name)
        allowed = tiers.get(parts[2], {"api", "common", own})
        for dep in deps:
            dparts = dep.split(".")
            if dparts[:2] == ["distfl", "algorithms"] and len(dparts) > 2:
                seen += 1
                assert dparts[2] in allowed, f"{name} imports {dep}"
    assert seen > 50, "the scan found too few imports within distfl/algorithms"


def test_runtime_comm_and_config_import_no_algorithm():
    for name, deps in GRAPH.items():
        if name.startswith(("distfl.runtime", "distfl.comm", "distfl.config")):
            plugins = sorted(d for d in deps if is_plugin(d))
            assert not plugins, f"{name} imports the algorithm module(s) {plugins}"


def test_algorithms_import_neither_comm_nor_runtime():
    banned = ("distfl.comm", "distfl.runtime", "distfl.tools", "distfl.cli", "distfl.report")
    for name, deps in GRAPH.items():
        if name.startswith("distfl.algorithms"):
            bad = sorted(d for d in deps if d.startswith(banned))
            assert not bad, f"{name} imports {bad}"


def test_the_data_mechanics_import_no_dataset():
    """distfl/data/ is what the datasets' loaders use (the in-memory form, partitions,
    transforms, the file mechanics): it imports no module of distfl/datasets/ (it looks a
    spec up by name in distfl.plugins.DATASETS), so each dataset lives in its own file."""
    for name, deps in GRAPH.items():
        if name == "distfl.data" or name.startswith("distfl.data."):
            bad = sorted(
                d for d in deps if d == "distfl.datasets" or d.startswith("distfl.datasets.")
            )
            assert not bad, f"{name} imports {bad}"


def test_server_halves_see_arrays_only():
    """An algorithm's server half works on arrays: no torch, no trainer, no model, no data
    (so that building a config, or ``distfl keys``, loads no torch)."""
    for name in MODULES:
        if not name.startswith("distfl.algorithms") or is_client_half(name):
            continue
        if is_figure_half(name):  # drawn by the report, never by a run
            continue
        for mod in imported_modules(name):
            top = mod.split(".")[0]
            assert top != "torch", f"{name} imports {mod}"
            heavy = ("distfl.train", "distfl.models", "distfl.data")
            assert not any(mod == h or mod.startswith(h + ".") for h in heavy), (
                f"{name} imports {mod}"
            )


ALGORITHM_WORDS = re.compile(
    r"emdcfl|fedgwc|ifca|fesem|flcl|cfl|fedem|fedsoft|fedrc|fedce|pfedgraph|fedsac", re.IGNORECASE
)


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *(PACKAGE / "runtime").rglob("*.py"),
            *(PACKAGE / "comm").rglob("*.py"),
            *(PACKAGE / "config").rglob("*.py"),
            *(PACKAGE / "report").rglob("*.py"),
            *(PACKAGE / "runfile").rglob("*.py"),
            PACKAGE / "plot.py",
        ],
    ),  # fmt: skip
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_algorithm_named_outside_comments(path):
    """The runtime, the communicators, the config and the report's page (whose
    algorithm-specific figures the algorithms register) name no algorithm, not even in a
    string: what a line says about one can only be a comment."""
    text = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            continue
        assert not ALGORITHM_WORDS.search(token.string), (
            f"{path.relative_to(ROOT)}:{token.start[0]} names an algorithm: {token.string!r}"
        )


def _dataset_words() -> re.Pattern:
    from distfl.datasets import dataset_names

    names = "|".join(re.escape(n) for n in dataset_names())
    # as a name is written (lower case, a word of its own): "Gaussian noise" is prose
    return re.compile(rf"(?<![A-Za-z0-9_])({names}|cifar)(?![A-Za-z0-9_])")


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *(PACKAGE / "runtime").rglob("*.py"),
            *(PACKAGE / "comm").rglob("*.py"),
            *(PACKAGE / "config").rglob("*.py"),
        ]
    ),  # fmt: skip
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_dataset_named_outside_comments(path):
    """The runtime, the communicators and the config name no dataset, not even in a string:
    what they need of one is its spec's (distfl/datasets/), so a dataset is one file. A
    word like "digits" in prose ("letters, digits, _") is told apart from the name only by
    where it stands, so the prose is allowed where it is not the dataset: those lines are
    listed here, each with what it says."""
    prose = {"(letters, digits, _)", "a pid of up to 7 digits"}
    words = _dataset_words()
    text = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and not any(p in token.string for p in prose):
            continue
        string = token.string
        for p in prose:
            string = string.replace(p, "")
        found = words.search(string)
        assert not found, (
            f"{path.relative_to(ROOT)}:{token.start[0]} names the dataset {found.group(0)!r}: "
            f"{token.string!r}"
        )


def _server_reads(tree: ast.AST) -> set[str]:
    """The attributes read of a name ``server`` in ``tree``."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "server"
    }


def test_components_see_the_server_only_through_its_view():
    """The components read of the server only what ServerView declares, and the server
    provides every member of it (a method, or an attribute its __init__ or restore sets)."""
    from distfl.runtime.components import ServerView
    from distfl.runtime.server import Server

    declared = set(ServerView.__annotations__) | {
        name for name, value in vars(ServerView).items() if callable(value) and name[0] != "_"
    }
    read: set[str] = set()
    for name in ("components.py", "evaluation.py", "export.py"):
        read |= _server_reads(ast.parse((PACKAGE / "runtime" / name).read_text(encoding="utf-8")))
    assert read, "the scan found no read of the server"
    assert read <= declared, f"read beyond ServerView: {sorted(read - declared)}"
    server = ast.parse((PACKAGE / "runtime" / "server.py").read_text(encoding="utf-8"))
    assigned = {
        node.attr
        for node in ast.walk(server)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name) and node.value.id == "self"
    }  # fmt: skip
    provided = assigned | {n for n in dir(Server) if callable(getattr(Server, n))}
    assert declared <= provided, f"ServerView members Server lacks: {sorted(declared - provided)}"
