"""Run configuration: frozen dataclasses built from defaults, a preset, a TOML file and
``--set key=value`` overrides, in that order.

Every key is checked: an unknown key, a value of the wrong type or an impossible value
raises :class:`~distfl.errors.ConfigError` with one line naming the key and what is
allowed. The CLI turns that into exit code 2.

``[algorithm]`` holds ``name`` and the named algorithm's own keys, whose types, defaults and
checks are the algorithm's (its ``Params`` dataclass, found through the registry): this
module knows no algorithm. A layer (preset, file, ``--set``) that names another algorithm
than the layers before it starts that algorithm's keys from their defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from distfl.algorithms.base import Params, setting
from distfl.algorithms.registry import algorithm_class, algorithm_names, key_owners, load_plugins
from distfl.datasets import DEFAULT_DATASET
from distfl.datasets.registry import dataset_spec, dataset_specs
from distfl.errors import ConfigError, did_you_mean
from distfl.paths import regular_file
from distfl.presets import PRESETS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class GroupSpec:
    """A group of clients: its size, how its samples are drawn, and the transforms applied
    to its data (in the order listed; see :mod:`distfl.data.transforms`)."""

    count: int = setting(allowed="int ≥ 1", doc="clients in the group")
    alpha: float = setting(
        allowed="≥ 0",
        doc="class proportions of each client ~ Dir(α·1): α = 0 one class per client, "
        "α = 1000 near-IID (ignored by natural partitions)",
    )
    name: str = setting("", "string", "a label for tables and plots")
    samples_per_client: int = setting(
        0, "int ≥ 0", "the group's own sample count (0: `data.samples_per_client`)"
    )
    test_fraction: float = setting(
        0.0, "[0, 1)", "the group's own test share (0: `data.test_fraction`)"
    )
    classes: tuple[int, ...] = setting(
        (), "list of class indices", "the classes the group's samples are drawn from (`[]`: all)"
    )
    rotation: float = setting(
        0.0,
        "degrees",
        "rotate every image by this many degrees counter-clockwise (multiples of 90 exact, others "
        "bilinear); on tabular data the first two features",
    )
    blur: int = setting(
        0,
        "0 or odd, ≤ 99",
        "Gaussian blur with this odd kernel size (σ = 0.3·((k−1)/2 − 1) + 0.8, reflect padding)",
    )
    patch: int = setting(
        0,
        "int ≥ 0",
        "a p×p patch in the top-left corner whose colour encodes the sample's class (a backdoor "
        "feature; one colour table per seed, the same for every group)",
    )
    noise: float = setting(
        0.0, "≥ 0", "add Gaussian noise of this σ to every feature, drawn per client"
    )
    shift: float = setting(
        0.0,
        "≥ 0",
        "add a fixed vector of this norm, drawn per group, to every sample (feature shift, for "
        "tabular data)",
    )
    permute_labels: bool = setting(
        False,
        "bool",
        "pass the group's labels through one fixed permutation that moves every class (a concept "
        "shift; for two classes a label flip)",
    )


@dataclass(frozen=True)
class RunSection:
    seed: int = setting(
        0,
        "int ≥ 0",
        "seed of the partition, the model's initialisation, the server's sampling and every "
        "client's batches",
    )
    rounds: int = setting(40, "int ≥ 1", "communication rounds")
    out: str = setting("distfl-run.h5", "string", "HDF5 run file (also `--out`)")
    threads: int = setting(
        1, "1..1024", "torch threads per process (fixed, so results do not depend on the machine)"
    )
    device: str = setting(
        "auto", "`auto`, `cpu`, `cuda`", "where clients train; `auto` takes CUDA when present"
    )
    progress: str = setting(
        "auto",
        "`auto`, `bar`, `lines`, `none`",
        "rank 0's progress: a redrawn bar on a terminal, lines in a log",
    )
    export: tuple[str, ...] = setting(
        (),
        "list of `jsonl`, `tensorboard`",
        "live export while the run goes, by rank 0 beside the run file: `jsonl` every row of "
        "the run file's tables as JSON lines in `<out>.jsonl` (no dependency); `tensorboard` "
        "the per-round metrics as TensorBoard events in `<out>-tb/` (needs "
        "`pip install distfl[tensorboard]`); both flushed at each evaluation and at the end "
        "([Watching a run](watching.md))",
    )
    plugins: tuple[str, ...] = setting(
        (),
        "list of strings",
        "Python modules (names, or paths of `.py` files) imported on every rank before the config "
        "is checked, so that the algorithms they define register",
    )


def _own_key(section: Any, key: str, fields: tuple[str, ...], owner) -> Any:
    """``section.<key>`` for a key of its ``params`` (an algorithm's or a dataset's own
    keys); AttributeError naming ``owner()`` otherwise."""
    if key.startswith("__") or key in fields:
        raise AttributeError(key)
    try:
        params = object.__getattribute__(section, "params")
    except AttributeError:
        raise AttributeError(key) from None
    if isinstance(params, (Params, StoredParams)) and key in params.keys():
        return getattr(params, key)
    raise AttributeError(f"{owner()} has no key {key!r}")


@dataclass(frozen=True)
class DataSection:
    dataset: str = setting(
        DEFAULT_DATASET,
        "a registered dataset",
        "see [Datasets](datasets.md) for the built-in ones, where each comes from and what it "
        "needs; a dataset of your own registers through `run.plugins` "
        "([Adding a dataset](adding-a-dataset.md))",
    )
    root: str = setting(
        "",
        "string",
        "directory holding the dataset's files (required for the datasets read from files; "
        "nothing is downloaded)",
    )
    partition: str = setting(
        "dirichlet",
        "`dirichlet`, `natural`",
        "`dirichlet`: each client's samples are drawn from the pooled dataset by its group's α; "
        "`natural`: one client per natural owner of a dataset that has them (a writer; "
        "[Datasets](datasets.md))",
    )
    draw: str = setting(
        "per_client",
        "`per_client`, `sequential`",
        "how a Dirichlet partition draws ([Datasets](datasets.md#how-each-partition-draws)): "
        "`per_client` keeps a few numbers per client and draws a client's samples when it is "
        "used; `sequential` is distfl 0.1.0's draw (every client's indices held on every rank), "
        "kept so that run files written by 0.1.0 resume to the same bits",
    )
    cache_mb: int = setting(
        256,
        "int ≥ 0",
        "MiB of materialised clients a worker keeps between steps, least recently used first out "
        "(0: keep none)",
    )
    num_clients: int = setting(20, "int ≥ 1", "K, the number of simulated clients")
    samples_per_client: int = setting(
        80,
        "2..2³¹−1",
        "samples each client holds (train + test); the mean when `quantity_skew` > 0; with the "
        "model widths and local steps, checked against the memory available before any rank "
        "allocates",
    )
    test_fraction: float = setting(
        0.25, "(0, 1)", "share of each client's samples kept as its local test split"
    )
    quantity_skew: float = setting(
        0.0,
        "≥ 0",
        "σ of a log-normal factor on each client's sample count (mean preserved, at least 2 "
        "samples); 0: every client of a group holds the same count",
    )
    groups: tuple[GroupSpec, ...] = setting(
        (),
        "list of tables (below)",
        "groups of clients, each with its count, label skew, sizes and transforms; the counts "
        "must add up to `num_clients`; each client's group is recorded as ground truth",
    )
    #: the dataset's own keys (its spec's ``Params``; ``StoredParams`` for a stored config's
    #: dataset that is not registered): ``config.data.dim`` reads the key ``dim`` of them
    params: Any = None

    def __post_init__(self) -> None:
        if self.params is None:
            object.__setattr__(self, "params", dataset_spec(self.dataset).Params())

    def __getattr__(self, key: str) -> Any:
        return _own_key(self, key, ("params",), lambda: f"data.dataset {self.dataset!r}")

    def to_dict(self) -> dict[str, Any]:
        """The [data] table: the shared keys, then the dataset's own."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "groups":
                out[f.name] = tuple(dataclasses.asdict(g) for g in value)
            elif f.name != "params":
                out[f.name] = copy.deepcopy(value)
        own = (self.params.to_dict() if isinstance(self.params, StoredParams)
               else dataclasses.asdict(self.params))  # fmt: skip
        return out | own


@dataclass(frozen=True)
class ModelSection:
    name: str = setting(
        "mlp",
        "`mlp`, `cnn`, `lenet5`, `mnist_cnn`",
        "`mlp`: an MLP of `model.hidden`; `cnn`: two 5x5 conv blocks of 64 channels, dense "
        "384-192-C; `lenet5`: LeNet-5; `mnist_cnn`: 3x3 convolutions of 64 and 128 channels, dense "
        "128-C (a 128-wide embedding). All take the dataset's input shape and class count; which "
        "paper each follows: [Models](datasets.md#models)",
    )
    hidden: tuple[int, ...] = setting((64,), "list of int ≥ 1", "hidden widths of the MLP")


@dataclass(frozen=True)
class TrainSection:
    local_steps: int = setting(
        8, "int ≥ 1", "S, local SGD steps per client per round (the loss of each is recorded)"
    )
    batch_size: int = setting(16, "int ≥ 1", "minibatch size (capped at the client's train size)")
    lr: float = setting(0.1, "> 0, finite in float32", "local SGD learning rate")
    momentum: float = setting(
        0.0, "[0, 1)", "local SGD momentum (the optimiser starts fresh each round)"
    )
    weight_decay: float = setting(0.0, "≥ 0", "local SGD weight decay")
    prox_mu: float = setting(
        0.0, "≥ 0", "FedProx's μ: adds μ(w − w_start) to every local gradient (0: off)"
    )
    trainer: str = setting(
        "auto",
        "`auto`, `batched`, `vectorised`, `sequential`",
        "local trainer ([Each round](rounds.md)): `batched` trains the clients of one cluster "
        "model together with batched kernels (one autograd graph; the MLP's backward written "
        "out); `vectorised` with `torch.func` (`vmap` of `grad` over stacked parameters); "
        "`sequential` one after another (the reference); `auto` picks, per model and device, the "
        "trainer `distfl bench` measured fastest: `batched` for the three built-in models on CPU "
        "(on CUDA not measured yet; `batched` too), `vectorised` for another model without "
        "buffers, else `sequential`. A stored config without `comm.sums` (written before "
        "`batched` existed) keeps `auto` meaning `vectorised`",
    )
    chunk_mb: int = setting(
        256,
        "int ≥ 1",
        "memory budget of one batched or vectorised chunk of clients (parameters, gradients, "
        "momentum, activations); at least two clients per chunk",
    )
    loss: str = setting(
        "cross_entropy",
        "`cross_entropy`, `hinge`",
        "local and test loss; `hinge` is max(0, 1 − m) on the margin m = (2y − 1)(z₁ − z₀), for "
        "a dataset of two classes",
    )


@dataclass(frozen=True)
class ServerSection:
    clients_per_round: int = setting(
        10, "1..K", "clients sampled (uniformly, without replacement) per round"
    )
    aggregator: str = setting(
        "fedavg",
        "`fedavg`, `fedavgm`, `fedprox`, `fairavg`",
        "how a cluster's model is made from its participants (see "
        "[Aggregators](algorithms.md#aggregators)); works with every algorithm",
    )
    lr: float = setting(1.0, "> 0, finite in float32", "FedAvgM: server learning rate η")
    momentum: float = setting(0.9, "[0, 1)", "FedAvgM: server momentum β")
    placement: str = setting(
        "balanced",
        "`balanced`, `static`",
        "which worker runs each task of a step: `balanced` by predicted cost, a client's home "
        "worker first; `static` always its home worker (contiguous shards of near-equal samples)",
    )


@dataclass(frozen=True)
class AlgorithmSection:
    """``algorithm.name`` and that algorithm's own keys (``params``, its ``Params``
    dataclass). ``config.algorithm.epsilon`` reads the key ``epsilon`` of the params."""

    name: str = setting(
        "none",
        "a registered algorithm (the built-in ones, or one of your own: [Adding an "
        "algorithm](adding-an-algorithm.md))",
        "clustering algorithm ([Algorithms](algorithms.md)); `none` trains one global model. The "
        "other keys of `[algorithm]` are that algorithm's own (below)",
    )
    params: Any = None

    def __post_init__(self) -> None:
        if self.params is None:
            object.__setattr__(self, "params", algorithm_class(self.name).Params())

    def __getattr__(self, key: str) -> Any:
        return _own_key(self, key, ("name", "params"), lambda: f"algorithm {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., <key>: <value>, ...}``, the [algorithm] table."""
        if isinstance(self.params, StoredParams):
            return {"name": self.name, **self.params.to_dict()}
        return {"name": self.name, **dataclasses.asdict(self.params)}


class StoredParams:
    """The [algorithm] keys of a stored config whose algorithm is not registered (an
    algorithm of one's own, read from a run file without importing its ``run.plugins``):
    the stored values as they are, unchecked by the algorithm's own rules. Read-only;
    ``params.<key>`` and :meth:`to_dict` give them, in the stored order."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", copy.deepcopy(dict(values)))

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key == "_values":
            raise AttributeError(key)
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"the stored [algorithm] has no key {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {key!r}")

    def __delattr__(self, key: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {key!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (StoredParams, (self._values,))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredParams):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(json.dumps(self._values, sort_keys=True, default=repr))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"StoredParams({inner})"

    def keys(self) -> tuple[str, ...]:
        """The stored key names."""
        return tuple(self._values)

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._values)

    def as_kwargs(self) -> dict[str, Any]:
        return self.to_dict()


@dataclass(frozen=True)
class CommSection:
    backend: str = setting(
        "auto", "`auto`, `local`, `torch`, `mpi`", "communicator (also `--comm`)"
    )
    timeout_s: float = setting(300.0, "(0, 10⁹]", "timeout of a collective (torch.distributed)")
    sums: str = setting(
        "scaled",
        "`scaled`, `limbs`",
        "the exact sums' format ([same bits](launching.md#the-same-bits-on-any-world-size)): one "
        "int64 per value on a grid agreed each round, or 0.1.0's three int64 limbs per value on a "
        "fixed 2^-64 grid",
    )


@dataclass(frozen=True)
class EvalSection:
    every: int = setting(
        10,
        "int ≥ 1",
        "every this many rounds (and after the last) each client evaluates its cluster's model on "
        "its local test split",
    )
    weighted: bool = setting(False, "bool", "weight the federation mean by test-split size")
    clients: int = setting(
        0,
        "0..K",
        "clients evaluated per evaluation: 0 all of them; N a uniform sample of N drawn from "
        "(seed, round), so every world size and a resumed run evaluate the same ones",
    )


@dataclass(frozen=True)
class CheckpointSection:
    every: int = setting(
        0, "int ≥ 0", "also write the run file every this many rounds (0: only at the end)"
    )
    seconds: float = setting(
        300.0, "float ≥ 0",
        "also write the run file after a round once this many seconds passed since the last "
        "write, and at least 20 times as long as that write took (0: off); what a kill that "
        "no signal announces (SIGKILL, an out-of-memory kill, a power cut) can lose",
    )  # fmt: skip


@dataclass(frozen=True)
class Config:
    run: RunSection = field(default_factory=RunSection)
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    train: TrainSection = field(default_factory=TrainSection)
    server: ServerSection = field(default_factory=ServerSection)
    algorithm: AlgorithmSection = field(default_factory=AlgorithmSection)
    comm: CommSection = field(default_factory=CommSection)
    eval: EvalSection = field(default_factory=EvalSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)

    @property
    def groups(self) -> tuple[GroupSpec, ...]:
        """The client groups; one near-IID group of all clients when none are given."""
        if self.data.groups:
            return self.data.groups
        return (GroupSpec(count=self.data.num_clients, alpha=1000.0, name="all"),)

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            section = getattr(self, f.name)
            out[f.name] = (
                section.to_dict()
                if f.name in ("algorithm", "data")
                else dataclasses.asdict(section)
            )
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_toml(self) -> str:
        """The whole config as a TOML file that ``--config`` reads back to this config."""
        out = []
        default_group = dataclasses.asdict(GroupSpec(count=0, alpha=0.0))
        for section, values in self.to_dict().items():
            groups = values.pop("groups", [])
            out.append(f"[{section}]")
            out.extend(f"{key} = {toml_value(value)}" for key, value in values.items())
            for group in groups:  # each as a table, the keys that differ from the default
                out.append(f"[[{section}.groups]]")
                out.extend(
                    f"{key} = {toml_value(value)}"
                    for key, value in group.items()
                    if key in ("count", "alpha") or value != default_group[key]
                )
            out.append("")
        return "\n".join(out)


def toml_value(value: Any) -> str:
    """``value`` (a config value: bool, string, number, table or list) as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # always finite: validate() refuses inf and nan
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


# Allowed values of the enumerated keys. Modules that add choices (models) are listed here
# so that the check happens before anything is built; algorithm.name's are the registered
# algorithms (algorithm_names), their own keys' are in their Params; data.dataset's are the
# registered datasets (dataset_names).
#: what run.export may name
EXPORTS = ("jsonl", "tensorboard")
CHOICES: dict[str, tuple[str, ...]] = {
    "run.device": ("auto", "cpu", "cuda"),
    "run.progress": ("auto", "bar", "lines", "none"),
    "data.partition": ("dirichlet", "natural"),
    "data.draw": ("per_client", "sequential"),
    "server.placement": ("balanced", "static"),
    "model.name": ("mlp", "cnn", "lenet5", "mnist_cnn"),
    "train.trainer": ("auto", "batched", "vectorised", "sequential"),
    "train.loss": ("cross_entropy", "hinge"),
    "server.aggregator": ("fedavg", "fedavgm", "fedprox", "fairavg"),
    "comm.backend": ("auto", "local", "torch", "mpi"),
    "comm.sums": ("scaled", "limbs"),
}


def _section_types() -> dict[str, type]:
    return get_type_hints(Config)


def _describe(tp: Any) -> str:
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
        return f"a list of {_describe(inner).removeprefix('an ').removeprefix('a ')}s"
    return str(tp)


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the field type ``tp``; return it in canonical form."""
    bad = ConfigError(f"{key} = {value!r}: expected {_describe(tp)}")
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if not math.isfinite(value):
            raise ConfigError(f"{key} = {value!r}: expected a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
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
    for required in ("count", "alpha"):
        if required not in item:
            raise ConfigError(f"{key}.{required} is missing; each group needs count and alpha")
    kwargs = {name: _coerce(f"{key}.{name}", item[name], hints[name]) for name in item}
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
        if section == "data":
            plugins = update.get("run", {}).get("plugins") or base.get("run", {}).get("plugins")
            _merge_data(base.setdefault("data", {}), values, origin, plugins=bool(plugins))
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
    own = {k for spec in dataset_specs() for k in spec.Params.keys()}
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
NAME_MAX = 255
NAME_SUFFIX = 21


def check_out_path(out: str) -> None:
    """Refuse (ConfigError) a run.out that cannot name a run file: empty, a directory (``.``,
    ``/``, a trailing slash), or a file name too long for the files written beside it."""
    if not out:
        raise ConfigError("run.out is empty: give the path of the HDF5 run file")
    name = os.path.basename(out)
    if out.endswith(os.sep) or name in ("", ".", ".."):
        raise ConfigError(
            f"run.out = {out!r} names a directory; give the path of a run file in it, "
            f"such as {os.path.join(out, 'run.h5')!r}"
        )
    size = len(os.fsencode(name))
    if size > NAME_MAX - NAME_SUFFIX:
        raise ConfigError(
            f"run.out's file name is {size} bytes; at most {NAME_MAX - NAME_SUFFIX} (a file "
            f"name takes {NAME_MAX}, and the temporary file beside the run file adds up to "
            f"{NAME_SUFFIX})"
        )


def toml_string(s: str) -> str:
    """``s`` as a TOML basic string, for building ``--set key=value`` items: every
    character as given, a newline or another control character escaped (JSON's escapes
    are TOML's)."""
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def parse_set(item: str) -> tuple[str, str, Any]:
    """Parse one ``--set section.key=value``; the value is read as TOML, else as a string."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    dotted, raw = item.split("=", 1)
    dotted = dotted.strip()
    if dotted.count(".") != 1:
        raise ConfigError(f"--set {item!r}: the key must be section.key, e.g. run.rounds")
    section, key = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key, value


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
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None


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
        if section in ("algorithm", "data"):  # each names what owns its other keys
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
    built["algorithm"] = _algorithm(raw.get("algorithm", {}), stored=stored, unknown=not plugins)
    config = Config(**built)
    validate(config, unknown_dataset=not plugins)
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
        spec = dataset_spec(name)
    except ConfigError:
        if not unknown:
            raise
        return DataSection(**kwargs, params=_stored_params(own, "data"))
    params_cls = spec.Params
    fields = params_cls.keys()
    if stored:
        own = {k: v for k, v in own.items() if k in fields}
    params_hints = get_type_hints(params_cls)
    for key in own:
        if key not in fields:
            owners = [s.name for s in dataset_specs() if key in s.Params.keys()]
            where = (f"; it is a key of data.dataset = {', '.join(map(repr, owners))}"
                     if owners else "")  # fmt: skip
            mine = f"its own keys: {', '.join(fields)}" if fields else "it has no keys of its own"
            raise ConfigError(
                f"data.{key}: not a key of [data] for data.dataset = {name!r} ({mine}){where}"
            )
    params = params_cls(**{k: _coerce(f"data.{k}", v, params_hints[k]) for k, v in own.items()})
    return DataSection(**kwargs, params=params)


def _algorithm(values: dict[str, Any], *, stored: bool, unknown: bool = False) -> AlgorithmSection:
    """The [algorithm] table as the named algorithm's section. ``unknown``: a name that is
    not registered keeps ``values`` as they are (:class:`StoredParams`), not an error."""
    values = dict(values)
    name = _coerce("algorithm.name", values.pop("name", AlgorithmSection.name), str)
    try:
        cls = algorithm_class(name)
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
    """The keys of an algorithm (or a dataset) that is not registered, as stored; each must
    still be a key one can have (a name, and true or false, a finite number or a string)."""
    for key, value in values.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise ConfigError(f"{section}.{key}: not a key name (letters, digits, _)")
        if not isinstance(value, (bool, int, float, str)) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise ConfigError(
                f"{section}.{key} = {value!r}: expected true or false, a finite number or a string"
            )
    return StoredParams(values)


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
    """The ``--set`` items as one layer. A string key whose value reads as another TOML type
    (``--set run.out=1.h5``) keeps the text as given."""
    parsed = [(parse_set(item), item) for item in items]
    layer: dict[str, dict[str, Any]] = {}
    for (section, key, value), _ in parsed:
        layer.setdefault(section, {})[key] = value
    name = layer.get("algorithm", {}).get("name", below.get("algorithm", {}).get("name"))
    for (section, key, value), item in parsed:
        if not isinstance(value, str) and _key_type(section, key, name) is str:
            layer[section][key] = item.split("=", 1)[1].strip()
    return layer


def _key_type(section: str, key: str, algorithm: Any) -> Any:
    """The declared type of ``section.key`` (None when unknown)."""
    if section == "algorithm":
        if key == "name":
            return str
        try:
            params = algorithm_class(str(algorithm or AlgorithmSection.name)).Params
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
    raw: dict[str, Any] = {}
    _merge(raw, stored, "the stored config")
    return build(raw, stored=True, plugins=plugins)


#: most torch threads a rank may ask for (run.threads): far beyond any machine's cores, and
#: below the OpenMP pools of 10,000s of threads that crash the process
MAX_THREADS = 1024
#: the largest float32: learning rates, weight decay and FedProx's mu are applied to float32
#: tensors, and a larger value cannot be converted (a value this large diverges cleanly)
MAX_FLOAT32 = 3.4028234663852886e38
#: most samples a client may hold: the population counts them in int32
MAX_SAMPLES_PER_CLIENT = 2**31 - 1
#: widest Gaussian blur kernel: three times the side of the largest built-in images (32x32);
#: the kernel (that many float64 values) is built for every client materialised
MAX_BLUR = 99
#: longest collective timeout in seconds (about 32 years): torch converts it to a timedelta
#: and to int64 milliseconds
MAX_TIMEOUT_S = 1e9


def _float32_rate(key: str, value: float, what: str, *, positive: bool) -> None:
    """A rate applied to float32 tensors: finite, positive (or non-negative) and at most
    :data:`MAX_FLOAT32`."""
    low_ok = value > 0 if positive else value >= 0
    if not (low_ok and math.isfinite(value) and value <= MAX_FLOAT32):
        sign = "positive" if positive else "non-negative"
        raise ConfigError(
            f"{key} = {value!r}: must be {sign} and at most {MAX_FLOAT32:.4g} (the largest "
            f"float32; it is applied to float32 tensors){what}"
        )


def _range(key: str, value: float, lo: float | None, hi: float | None, what: str) -> None:
    if value != value or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"{key} = {value!r}: must be {what}")


def validate(c: Config, *, unknown_dataset: bool = False) -> None:
    """Check values and the relations between them; raise ConfigError on the first problem.
    ``unknown_dataset``: a ``data.dataset`` that is not registered (a stored config's
    plug-in, not imported) is kept, and the checks that need its spec are skipped."""
    for dotted, allowed in CHOICES.items():
        section, key = dotted.split(".")
        value = getattr(getattr(c, section), key)
        if value not in allowed:
            raise ConfigError(
                f"{dotted} = {value!r}{did_you_mean(value, allowed)}: allowed values are "
                f"{', '.join(allowed)}"
            )
    for kind in c.run.export:
        if kind not in EXPORTS:
            raise ConfigError(
                f"run.export: {kind!r}{did_you_mean(kind, EXPORTS)} is no export; allowed: "
                f"{', '.join(EXPORTS)}"
            )
    if len(set(c.run.export)) != len(c.run.export):
        raise ConfigError(f"run.export = {list(c.run.export)}: an export is named twice")
    if "tensorboard" in c.run.export and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "run.export names tensorboard, which needs the tensorboard package: "
            "pip install distfl[tensorboard], or leave it out of run.export"
        )
    _range("run.seed", c.run.seed, 0, 2**63 - 1, "a non-negative integer")
    _range("run.rounds", c.run.rounds, 1, None, "at least 1")
    _range("run.threads", c.run.threads, 1, MAX_THREADS,
           f"between 1 and {MAX_THREADS} (torch threads of each rank)")  # fmt: skip
    check_out_path(c.run.out)
    _range("data.num_clients", c.data.num_clients, 1, None, "at least 1")
    _range("data.samples_per_client", c.data.samples_per_client, 2, MAX_SAMPLES_PER_CLIENT,
           f"between 2 and {MAX_SAMPLES_PER_CLIENT:,} (counted in int32)")  # fmt: skip
    if not 0.0 < c.data.test_fraction < 1.0:
        raise ConfigError(
            f"data.test_fraction = {c.data.test_fraction!r}: must be strictly between 0 and 1"
        )
    n_test = round(c.data.samples_per_client * c.data.test_fraction)
    if n_test < 1 or n_test >= c.data.samples_per_client:
        raise ConfigError(
            f"data.test_fraction = {c.data.test_fraction!r}: leaves no train or no test sample "
            f"out of data.samples_per_client = {c.data.samples_per_client}"
        )
    _range("data.cache_mb", c.data.cache_mb, 0, None, "0 (keep no client) or more MiB")
    _range("data.quantity_skew", c.data.quantity_skew, 0.0, None, "non-negative (0: no skew)")
    try:
        spec = dataset_spec(c.data.dataset)
    except ConfigError:
        if not unknown_dataset:
            raise
        spec = None  # a stored config's dataset of a plug-in not imported: kept unchecked
    if spec is not None:
        c.data.params.check(c)  # the dataset's own keys
    if spec is not None and spec.needs_root and not c.data.root:
        raise ConfigError(
            f"data.root is empty: data.dataset = {c.data.dataset!r} is read from files under "
            "data.root (nothing is downloaded; see the dataset table of docs/datasets.md)"
        )
    if spec is not None and c.data.partition == "natural" and spec.natural == "never":
        natural = ", ".join(s.name for s in dataset_specs() if s.natural != "never")
        raise ConfigError(
            f"data.partition = 'natural': data.dataset = {c.data.dataset!r} has no natural "
            f"owners (the datasets that have them: {natural})"
        )
    for i, g in enumerate(c.data.groups):
        key = f"data.groups[{i}]"
        _range(f"{key}.count", g.count, 1, None, "at least 1")
        _range(f"{key}.alpha", g.alpha, 0.0, None, "non-negative (0 = one class per client)")
        if g.samples_per_client:
            _range(f"{key}.samples_per_client", g.samples_per_client, 2, MAX_SAMPLES_PER_CLIENT,
                   f"0 or between 2 and {MAX_SAMPLES_PER_CLIENT:,} (counted in int32)")  # fmt: skip
        if g.test_fraction and not 0.0 < g.test_fraction < 1.0:
            raise ConfigError(
                f"{key}.test_fraction = {g.test_fraction!r}: must be 0 (data.test_fraction) "
                "or strictly between 0 and 1"
            )
        n = g.samples_per_client or c.data.samples_per_client
        frac = g.test_fraction or c.data.test_fraction
        if not 1 <= round(n * frac) < n:
            raise ConfigError(
                f"{key}: test fraction {frac!r} of {n} samples per client leaves no train or "
                "no test sample"
            )
        for j, cls in enumerate(g.classes):
            _range(f"{key}.classes[{j}]", cls, 0, None, "a class index (0 or more)")
        if len(set(g.classes)) != len(g.classes):
            raise ConfigError(f"{key}.classes = {list(g.classes)}: a class is listed twice")
        _range(f"{key}.patch", g.patch, 0, None, "0 (off) or a patch side in pixels")
        if g.blur and (g.blur < 3 or g.blur % 2 == 0):
            raise ConfigError(f"{key}.blur = {g.blur}: must be 0 (off) or an odd kernel size >= 3")
        if g.blur > MAX_BLUR:
            raise ConfigError(
                f"{key}.blur = {g.blur}: must be 0 (off) or an odd kernel size from 3 to "
                f"{MAX_BLUR} (three times the side of the largest images)"
            )
        _range(f"{key}.noise", g.noise, 0.0, None, "non-negative (std of the noise)")
        _range(f"{key}.shift", g.shift, 0.0, None, "non-negative (norm of the feature shift)")
    if c.data.groups and sum(g.count for g in c.data.groups) != c.data.num_clients:
        total = sum(g.count for g in c.data.groups)
        raise ConfigError(
            f"data.groups: the counts add up to {total}, but data.num_clients = "
            f"{c.data.num_clients}; they must be equal"
        )
    for i, h in enumerate(c.model.hidden):
        _range(f"model.hidden[{i}]", h, 1, None, "at least 1")
    _range("train.local_steps", c.train.local_steps, 1, None, "at least 1")
    _range("train.batch_size", c.train.batch_size, 1, None, "at least 1")
    _float32_rate("train.lr", c.train.lr, "", positive=True)
    _range("train.momentum", c.train.momentum, 0.0, 0.999999, "in [0, 1)")
    _float32_rate("train.weight_decay", c.train.weight_decay, "", positive=False)
    _float32_rate("train.prox_mu", c.train.prox_mu, " (FedProx's mu; 0: off)", positive=False)
    _range("train.chunk_mb", c.train.chunk_mb, 1, None, "at least 1 (MiB per chunk of clients)")
    if spec is not None and c.train.loss == "hinge" and spec.classes(c) != 2:
        binary = ", ".join(s.name for s in dataset_specs() if s.num_classes == 2)
        raise ConfigError(
            f"train.loss = 'hinge' needs a binary problem: data.dataset = {c.data.dataset!r} "
            f"has {spec.classes(c)} classes (the binary datasets: {binary})"
        )
    _range(
        "server.clients_per_round",
        c.server.clients_per_round,
        1,
        c.data.num_clients,
        f"between 1 and data.num_clients ({c.data.num_clients})",
    )
    _float32_rate("server.lr", c.server.lr, " (FedAvgM's η)", positive=True)
    _range("server.momentum", c.server.momentum, 0.0, 0.999999, "in [0, 1) (FedAvgM's β)")
    if c.server.aggregator == "fedprox" and not c.train.prox_mu > 0:
        raise ConfigError(
            "server.aggregator = 'fedprox' needs train.prox_mu > 0 (the proximal term μ, "
            "e.g. --set train.prox_mu=0.01)"
        )
    _validate_algorithm(c)
    if not 0 < c.comm.timeout_s <= MAX_TIMEOUT_S:
        raise ConfigError(
            f"comm.timeout_s = {c.comm.timeout_s!r}: must be positive and at most "
            f"{MAX_TIMEOUT_S:.0e} seconds"
        )
    _range("eval.every", c.eval.every, 1, None, "at least 1 (the last round is always evaluated)")
    _range(
        "eval.clients",
        c.eval.clients,
        0,
        c.data.num_clients,
        f"0 (all) or a sample size up to data.num_clients ({c.data.num_clients})",
    )
    _range("checkpoint.every", c.checkpoint.every, 0, None, "0 (only at the end) or more")
    _range("checkpoint.seconds", c.checkpoint.seconds, 0.0, None, "0 (off) or more")


def _validate_algorithm(c: Config) -> None:
    """The named algorithm's keys, by its own rules (:meth:`Params.check`); none for a
    stored algorithm that is not registered (its plug-in was not imported)."""
    if isinstance(c.algorithm.params, StoredParams):
        return
    cls = algorithm_class(c.algorithm.name)
    params = c.algorithm.params
    if type(params) is not cls.Params or not isinstance(params, Params):
        raise ConfigError(
            f"algorithm.name = {c.algorithm.name!r} takes {cls.Params.__name__}, "
            f"not {type(params).__name__}"
        )
    for key, allowed in cls.Params.choices.items():
        value = getattr(params, key)
        if value not in allowed:
            raise ConfigError(
                f"algorithm.{key} = {value!r}{did_you_mean(value, allowed)}: allowed values "
                f"are {', '.join(allowed)}"
            )
    params.check(c)


def check_world(c: Config, world_size: int) -> None:
    """Relations between the config and the launched world, checked before any collective."""
    num_workers = max(world_size - 1, 1)
    if num_workers > c.data.num_clients:
        raise ConfigError(
            f"data.num_clients = {c.data.num_clients}: fewer clients than the {num_workers} "
            f"worker ranks of this world of {world_size}; launch at most "
            f"{c.data.num_clients + 1} ranks or raise data.num_clients"
        )


def describe_keys() -> list[tuple[str, str, str]]:
    """(key, type, default) of every config key but the algorithms' own, for ``distfl keys``
    (those are in :func:`describe_algorithm_keys`)."""
    rows = []
    for section, cls in get_type_hints(Config).items():
        if section == "algorithm":
            names = ", ".join(algorithm_names())
            rows.append(("algorithm.name", f"one of {names}", json.dumps(AlgorithmSection.name)))
            continue
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name == "params":  # a dataset's own keys: describe_dataset_keys
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            rows.append((f"{section}.{f.name}", _describe(hints[f.name]), json.dumps(default)))
    return rows


def describe_dataset_keys() -> dict[str, list[tuple[str, str, str]]]:
    """Per dataset name: (key, type, default) of each of its own keys (under [data])."""
    out = {}
    for spec in dataset_specs():
        hints = get_type_hints(spec.Params)
        out[spec.name] = [
            (f"data.{f.name}", _describe(hints[f.name]), json.dumps(f.default))
            for f in dataclasses.fields(spec.Params)
        ]
    return out


def describe_algorithm_keys() -> dict[str, list[tuple[str, str, str]]]:
    """Per algorithm name: (key, type, default) of each of its own keys."""
    out = {}
    for name in algorithm_names():
        params = algorithm_class(name).Params
        hints = get_type_hints(params)
        out[name] = [
            (f"algorithm.{f.name}", _describe(hints[f.name]), json.dumps(f.default))
            for f in dataclasses.fields(params)
        ]
    return out
