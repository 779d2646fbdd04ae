"""Plug-ins by kind and name: the one registry mechanism behind algorithms, datasets,
models, aggregators and selection strategies.

A :class:`Registry` holds the classes of one kind by name. The modules of its package (or
the one module it names) are found and imported the first time a name is looked up (by
name, with importlib: nothing here imports a plug-in, so the config, beneath every
plug-in, can look one up); a plug-in defined elsewhere registers when its module is
imported, e.g. through ``run.plugins`` (:func:`load_plugins`), which every rank reads from
the config before it is checked.

What a class of each kind must declare is checked by that kind's own ``register``
(:mod:`distfl.algorithms.api.registry`, :mod:`distfl.datasets.registry`,
:mod:`distfl.model_specs`, :mod:`distfl.aggregators`,
:mod:`distfl.participation.selection.base`), which then adds it here.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from distfl.errors import ConfigError, Interrupted, did_you_mean
from distfl.text import exception_line

#: a plug-in's name (and a table's column's): lower-case letters, digits and _
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def origin(cls: type) -> tuple[str, str]:
    """(the file defining ``cls``, or its module's name; its qualified name): one file
    imported twice under two module names (a test file, also named in run.plugins)
    defines the same class."""
    module = sys.modules.get(cls.__module__)
    where = getattr(module, "__file__", None)
    return (str(Path(where).resolve()) if where else cls.__module__, cls.__qualname__)


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class Registry:
    """The classes of one kind (``kind``: "algorithm", "dataset", "model") by name: the
    config key ``key`` names one of them; ``package``'s modules are imported on the first
    lookup, except those ``skip`` names (the interface's modules); a ``package`` that is a
    plain module is imported alone."""

    def __init__(self, kind: str, key: str, package: str, skip: Callable[[str], bool]):
        self.kind, self.key, self.package, self.skip = kind, key, package, skip
        self._classes: dict[str, type] = {}
        self._discovered = False

    def add(self, cls: type) -> type:
        """Register ``cls`` under ``cls.name`` (checked by the kind's own ``register``);
        the same class re-imported (a reloaded module, or one file under two names)
        replaces itself, another class of a taken name is a ValueError."""
        name = cls.name
        previous = self._classes.get(name)
        if previous is not None and origin(previous) != origin(cls):
            raise ValueError(
                f"{self.kind} name {name!r} is taken by {qualname(previous)}; "
                f"{qualname(cls)} needs another name"
            )
        self._classes[name] = cls
        return cls

    def check_class(self, cls: type, base: type) -> None:
        """What every kind's ``register`` asks first: ``cls`` subclasses ``base`` (TypeError
        otherwise) and its ``name`` is lower-case letters, digits and _ (ValueError)."""
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"{cls!r} is not a {base.__name__} subclass")
        name = getattr(cls, "name", "")
        if not isinstance(name, str) or not NAME.match(name):
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ValueError(
                f"{cls.__name__}.name = {name!r}: {article} {self.kind} needs a lower-case name "
                "(letters, digits, _)"
            )

    def remove(self, name: str) -> None:
        """Forget ``name`` (a plug-in of a test that must not outlive it)."""
        self._classes.pop(name, None)

    def __contains__(self, name: str) -> bool:
        """Whether ``name`` is registered now (without importing the package's modules)."""
        return name in self._classes

    def discover(self) -> None:
        """Import the package's modules once (each registers what it defines)."""
        if self._discovered:
            return
        self._discovered = True
        package = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(getattr(package, "__path__", ())):
            if not (self.skip(info.name) or info.name.startswith("_")):
                importlib.import_module(f"{self.package}.{info.name}")

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self.discover()
        return sorted(self._classes)

    def get(self, name: str) -> type:
        """The class registered as ``name``; ConfigError naming the registered ones
        otherwise (never a default)."""
        self.discover()
        cls = self._classes.get(name)
        if cls is None:
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ConfigError(
                f"{self.key} = {name!r}{did_you_mean(name, self._classes)}: allowed values "
                f"are {', '.join(self.names())} "
                f"({article} {self.kind} of your own registers when its module is imported: "
                "run.plugins)"
            )
        return cls

    def items(self) -> list[tuple[str, type]]:
        """(name, class) of every registered class, by name."""
        self.discover()
        return sorted(self._classes.items())

    def classes(self) -> list[type]:
        """Every registered class, by name."""
        return [cls for _, cls in self.items()]

    def first_then_by_name(self, first: str | None) -> list[str]:
        """The registered names: ``first`` (when registered), then the others by name."""
        names = self.names()
        if first in self._classes:
            names.remove(first)
            names.insert(0, first)
        return names


#: the packages of distfl/algorithms that hold the interface (api) and what algorithms
#: share (common), not an algorithm
INTERFACE = ("api", "common")
#: the clustering algorithms (``algorithm.name``): one module of distfl/algorithms each;
#: the client halves (``*_client``) are left to the workers
ALGORITHMS = Registry(
    "algorithm", "algorithm.name", "distfl.algorithms",
    skip=lambda module: module in INTERFACE or module.endswith("_client"),
)  # fmt: skip
#: the datasets (``data.dataset``): one module of distfl/datasets each
DATASETS = Registry(
    "dataset", "data.dataset", "distfl.datasets", skip=lambda module: module in ("base", "registry")
)

#: the models (``model.name``): the built-in ones are declared in distfl/model_specs.py,
#: which imports no torch (a config naming one is read without it)
MODELS = Registry("model", "model.name", "distfl.model_specs", skip=lambda module: False)
#: the server's aggregators (``server.aggregator``): the built-in ones in distfl/aggregators.py
AGGREGATORS = Registry(
    "aggregator", "server.aggregator", "distfl.aggregators", skip=lambda module: False
)
#: the selection strategies (``participation.selection``): one module of
#: distfl/participation/selection each
SELECTIONS = Registry(
    "selection strategy", "participation.selection", "distfl.participation.selection",
    skip=lambda module: module == "base",
)  # fmt: skip

_LOADED: dict[str, str] = {}  # a module name, or a file's resolved path -> module name


def load_plugins(specs: Iterable[str]) -> None:
    """Import each module of ``specs`` (a module name, or the path of a ``.py`` file) once,
    so that the algorithms and datasets it defines register. A spec that cannot be
    imported is a ConfigError naming ``run.plugins`` and the reason.

    A file's directory, and for a module name the current directory, goes first on
    ``sys.path`` (where it is not on it already) and stays there, as for the script that
    ``python FILE`` runs and the module of ``python -m MODULE``: the plug-in imports the
    modules beside it as it loads and later (its client half named ``"module:Class"``,
    imported by the workers). Every rank loads the plug-ins, so every rank finds them."""
    for spec in specs:
        is_file = spec.endswith(".py") or "/" in spec or "\\" in spec
        path = Path(spec).expanduser().resolve() if is_file else None
        key = str(path) if path is not None else spec
        if key in _LOADED:
            continue
        if path is not None:
            shown = Path(spec).expanduser()
            if not path.is_file():
                raise ConfigError(f"run.plugins: {shown} does not exist; expected a Python file")
            _searchable(path.parent)
            module = _import_file(path, shown, spec)
        else:
            _searchable(Path.cwd())
            module = _imported(spec, lambda spec=spec: importlib.import_module(spec).__name__)
        _LOADED[key] = module


def _imported(spec: str, load: Callable[[], str]) -> str:
    """``load()``, the import of the plug-in ``spec``: whatever it raises, an error of its
    own (a distfl error too) or its ``sys.exit``, is one line naming it (a Ctrl-C is an
    interruption, exit code 130)."""
    try:
        return load()
    except KeyboardInterrupt:  # a Ctrl-C while it loads, or one it raised
        raise Interrupted(
            f"interrupted while run.plugins imported {spec!r}; nothing was run"
        ) from None
    except BaseException as exc:
        raise ConfigError(f"run.plugins: {spec!r} cannot be imported ({raised(exc)})") from None


def raised(exc: BaseException) -> str:
    """What ``exc`` says, in one line: its type and its message's first line
    (:func:`~distfl.text.exception_line`), ``SystemExit: sys.exit(0)`` for an exit;
    never an error of its own (a plug-in's exception whose ``__str__`` raises)."""
    if isinstance(exc, SystemExit):
        code = repr(exc.code)
        return f"SystemExit: sys.exit({code if len(code) <= 60 else code[:57] + '...'})"
    try:
        return exception_line(exc)
    except Exception:
        return type(exc).__name__


def defined_in(cls: type) -> str:
    """Where a plug-in's class is defined, as a message names it: its module's file, or its
    module's name."""
    module = sys.modules.get(cls.__module__)
    return str(getattr(module, "__file__", None) or cls.__module__)


def _searchable(directory: Path) -> None:
    """Put ``directory`` first on ``sys.path`` unless it is on it already (``""``, the
    current directory, counts as the directory it is now)."""
    here = Path.cwd()
    on_path = set()
    for entry in sys.path:
        try:
            on_path.add((here / entry).resolve())
        except (OSError, RuntimeError, ValueError):  # an entry that is no path
            continue
    if directory.resolve() not in on_path:
        sys.path.insert(0, str(directory))
        importlib.invalidate_caches()


def _import_file(resolved: Path, shown: Path, spec: str) -> str:
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    name = f"distfl_plugin_{re.sub(r'[^0-9a-zA-Z_]', '_', resolved.stem)}_{digest}"
    if name in sys.modules:
        return name
    loader_spec = importlib.util.spec_from_file_location(name, resolved)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"run.plugins: {shown} is not an importable Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        _imported(spec, lambda: loader_spec.loader.exec_module(module) or name)
    except BaseException:
        del sys.modules[name]
        raise
    return name


__all__ = ["ALGORITHMS", "DATASETS", "MODELS", "Registry", "defined_in", "load_plugins", "origin",
           "qualname", "raised"]  # fmt: skip
