"""The config's schema: one frozen dataclass per section (its keys, their defaults,
the values each allows and what each means, declared once with ``setting``), the whole
:class:`Config`, and the keys of a fixed set of values (:data:`CHOICES`)."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from distfl.config.groups import GroupSpec
from distfl.config.participation import ParticipationSection
from distfl.config.privacy import ACCOUNTANTS, PrivacySection
from distfl.config.seeds import RunSeeds
from distfl.config.toml import toml_value
from distfl.plugins import ALGORITHMS, DATASETS, MODELS
from distfl.presets import DEFAULT_DATASET
from distfl.settings import Params, setting


@dataclass(frozen=True)
class RunSection(RunSeeds):
    seed: int = setting(
        0,
        "int ≥ 0",
        "seed of every client's batches and of the evaluation sample; of the data, the model's "
        "initialisation and the server's sampling where the three keys below are unset",
    )
    data_seed: int = setting(
        -1, "-1 or int ≥ 0", "seed of the data: the partition, the samples of a generated "
        "dataset and the transforms drawn per group or client (-1: `run.seed`)",
    )  # fmt: skip
    init_seed: int = setting(
        -1, "-1 or int ≥ 0", "seed of the model's initialisation: the initial model and the own "
        "start of every cluster that has one (-1: `run.seed`)",
    )  # fmt: skip
    sampling_seed: int = setting(
        -1, "-1 or int ≥ 0", "seed of the server's sampling: the algorithm's seed, which draws "
        "the round's clients and its other draws on the server (probe samples, anchors, ...); "
        "the clients' batches stay on `run.seed` (-1: `run.seed`)",
    )  # fmt: skip
    rounds: int = setting(40, "int ≥ 1", "communication rounds")
    out: str = setting("distfl-run.h5", "string", "HDF5 run file (also `--out`)")
    threads: int = setting(
        1, "1..1024",
        "threads per process, torch's and the BLAS's of numpy and scipy (fixed, so results "
        "do not depend on the machine)",
    )  # fmt: skip
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
        "list of `jsonl`, `tensorboard`, `mlflow`, `wandb`",
        "live export while the run goes, by rank 0 beside the run file, offline: `jsonl` every "
        "row of the run file's tables as JSON lines in `<out>.jsonl` (no dependency); "
        "`tensorboard` the per-round metrics as TensorBoard events in `<out>-tb/`; `mlflow` "
        "as an MLflow run in the file store `mlruns/` beside the run file; `wandb` as a W&B "
        "offline run in `<out>-wandb/` (each needs its package: "
        "`pip install distfl[tensorboard]`, `distfl[mlflow]`, `distfl[wandb]`); flushed at "
        "each evaluation and at the end ([Watching a run](watching.md))",
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
        "0 to 10",
        "σ of a log-normal factor on each client's sample count (mean preserved, at least 2 "
        "samples); 0: every client of a group holds the same count",
    )
    held_out: float = setting(
        0.0,
        "0, a share in (0, 1), or a whole count ≥ 1",
        "newcomers: clients of each group drawn as its others and kept out of training, given "
        "a model at every evaluation by the algorithm's rule for a client that never trained "
        "([Newcomers](newcomers.md)): a share s holds out round(s × count) more clients of "
        "each group, a count n holds out n more of each; the trained clients and their data "
        "stay those of `num_clients` without it",
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
            object.__setattr__(self, "params", DATASETS.get(self.dataset).Params())

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


class _Named:
    """A section that names a registered plug-in (``name``, looked up in ``_registry``)
    and holds its own keys (``params``): ``section.<key>`` reads one of them."""

    _registry: Any
    _owner: str  # how an error names the choice ("model.name 'mlp' has no key ...")

    def __post_init__(self) -> None:
        if self.params is None:
            object.__setattr__(self, "params", self._registry.get(self.name).Params())

    def __getattr__(self, key: str) -> Any:
        return _own_key(self, key, ("name", "params"), lambda: f"{self._owner} {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., <key>: <value>, ...}``: the table, its name then its own keys."""
        own = (self.params.to_dict() if isinstance(self.params, StoredParams)
               else dataclasses.asdict(self.params))  # fmt: skip
        return {"name": self.name, **own}


@dataclass(frozen=True)
class ModelSection(_Named):
    """``model.name`` and that model's own keys (``params``, its spec's ``Params``):
    ``config.model.hidden`` reads the key ``hidden`` of the params."""

    name: str = setting(
        "mlp",
        "a registered model",
        "the network every client trains: see [Models](datasets.md#models) for the built-in "
        "ones and the paper each follows; a model of your own registers through `run.plugins` "
        "([Adding a model](adding-a-model.md)). The other keys of `[model]` are that model's "
        "own (below)",
    )
    #: the model's own keys (its spec's ``Params``; ``StoredParams`` for a stored config's
    #: model that is not registered)
    params: Any = None

    _registry = MODELS
    _owner = "model.name"


@dataclass(frozen=True)
class TrainSection:
    local_steps: int = setting(
        8, "int ≥ 1", "S, local steps per client per round (the loss of each is recorded)"
    )
    batch_size: int = setting(16, "int ≥ 1", "minibatch size (capped at the client's train size)")
    optimizer: str = setting(
        "sgd",
        "`sgd`, `adam`, `adamw`",
        "local optimiser ([Local optimisers](rounds.md#local-optimisers)): `sgd` with `momentum`; "
        "`adam` (Kingma and Ba 2015, torch.optim.Adam) and `adamw` (Loshchilov and Hutter 2019, "
        "torch.optim.AdamW) with `beta1`, `beta2` and `eps`. Every client's optimiser starts "
        "fresh each time it trains (each round)",
    )
    lr: float = setting(0.1, "> 0, finite in float32", "local learning rate (of every optimiser)")
    momentum: float = setting(
        0.0,
        "[0, 1); 0 with `adam`, `adamw`",
        "local SGD momentum (`sgd` only; the optimiser starts fresh each round)",
    )
    weight_decay: float = setting(
        0.0,
        "≥ 0",
        "local weight decay λ: `sgd` and `adam` add λw to the gradient (L2), `adamw` decays the "
        "weights apart from the gradient, w ← w(1 − lr·λ), before its step",
    )
    beta1: float = setting(
        0.9, "[0, 1); `adam`, `adamw` only", "Adam's β₁: decay of the gradient's running mean"
    )
    beta2: float = setting(
        0.999, "[0, 1); `adam`, `adamw` only", "Adam's β₂: decay of the squared gradient's mean"
    )
    eps: float = setting(
        1e-8,
        "> 0, finite in float32; `adam`, `adamw` only",
        "Adam's ε, added to the root of the squared gradient's mean",
    )
    prox_mu: float = setting(
        0.0,
        "≥ 0",
        "FedProx's μ: adds μ(w − w_start) to every local gradient, whatever the optimiser (0: off)",
    )
    trainer: str = setting(
        "auto",
        "`auto`, `batched`, `vectorised`, `sequential`",
        "local trainer ([Each round](rounds.md)): `batched` trains the clients of one cluster "
        "model together with batched kernels (one autograd graph; the MLP's backward written "
        "out); `vectorised` with `torch.func` (`vmap` of `grad` over stacked parameters); "
        "`sequential` one after another (the reference); `auto` picks, per model and device, the "
        "trainer `distfl bench` measured fastest: `batched` for the three built-in models on CPU "
        "(on CUDA not measured yet; `batched` too), `vectorised` for another model where "
        "`torch.func` can train it, else `sequential` with a one-line note saying why "
        "([Adding a model](adding-a-model.md#how-it-trains)). A stored config without "
        "`comm.sums` (written before `batched` existed) keeps `auto` meaning `vectorised`",
    )
    batches: str = setting(
        "stream",
        "`stream`, `counter`",
        "how a client's minibatches are drawn (one permutation of its train samples a pass, "
        "cut into batches, in both): `stream` by a generator of the client's seed, one client "
        "at a time on the host; `counter` by a counter-based hash of the client's seed, the "
        "pass and the sample, a whole chunk of clients at once on the device that trains them "
        "(no host work a client; the same bits on CPU and GPU, whatever the ranks). The two "
        "draw different batches",
    )
    chunk_mb: int = setting(
        256,
        "int ≥ 1",
        "memory budget of one batched or vectorised chunk of clients (parameters, gradients, "
        "the optimiser's state, activations); at least two clients per chunk",
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
class AlgorithmSection(_Named):
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

    _registry = ALGORITHMS
    _owner = "algorithm"


class StoredParams:
    """The [algorithm] keys of a stored config whose algorithm is not registered (an
    algorithm of one's own, read from a run file without importing its ``run.plugins``), or
    the [data] or [model] keys of a dataset or a model that is not:
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
        "auto",
        "`auto`, `local`, `torch`, `gloo`, `mpi`",
        "communicator (also `--comm`): `torch` is torch.distributed with NCCL where CUDA is "
        "present and gloo elsewhere; `gloo` is torch.distributed with gloo for every "
        "collective while the clients train on `run.device` (several ranks can then share one "
        "GPU, which NCCL does not support)",
    )
    timeout_s: float = setting(300.0, "(0, 10⁹]", "timeout of a collective (torch.distributed)")
    sums: str = setting(
        "scaled",
        "`scaled`, `limbs`",
        "the exact sums' format ([same bits](launching.md#the-same-bits-on-any-world-size)): one "
        "int64 per value on a grid agreed each round, or 0.1.0's three int64 limbs per value on a "
        "fixed 2^-64 grid",
    )


#: ``eval.clients = "auto"`` (the default) evaluates every client of a population up to
#: this size, and a sample of this many clients (drawn from the seed and the round) above it
AUTO_EVAL_SAMPLE = 10_000


@dataclass(frozen=True)
class EvalSection:
    every: int = setting(
        10,
        "int ≥ 1",
        "every this many rounds (and after the last) each client evaluates its cluster's model on "
        "its local test split",
    )
    weighted: bool = setting(
        False,
        "bool",
        "weight the federation mean by test-split size (the worst client's accuracy and the "
        "10th percentile stay unweighted)",
    )
    clients: int | str = setting(
        "auto",
        "`auto`, `all`, 0..K",
        f"clients evaluated per evaluation: `auto` every client of a population up to "
        f"{AUTO_EVAL_SAMPLE:,} and a sample of {AUTO_EVAL_SAMPLE:,} above; `all` (or 0) every "
        "client; N a uniform sample of N. A sample is drawn from (seed, round), so every world "
        "size and a resumed run evaluate the same clients",
    )
    coverage: bool = setting(
        False,
        "bool",
        "also record, at each evaluation, the mean test loss of the evaluated clients that "
        "have trained so far (in-sample) and of those that never have (out-of-sample): "
        "/metrics `loss_in_sample`, `loss_out_of_sample` (the run keeps the ids of the "
        "clients that trained)",
    )
    loss_target: float = setting(
        0.0,
        "≥ 0",
        "a test loss to reach: `inspect`, `gather` and `report` say in how many rounds, "
        "federation bytes and simulated seconds the run's mean test loss (and each cluster's) "
        "first reached it (0: none; it changes nothing a run computes)",
    )

    def evaluated(self, num_clients: int) -> int:
        """How many of ``num_clients`` clients an evaluation evaluates."""
        n = self.clients
        if n == "auto":
            return min(num_clients, AUTO_EVAL_SAMPLE)
        if n == "all" or n == 0:
            return num_clients
        return min(int(n), num_clients)


@dataclass(frozen=True)
class CheckpointSection:
    every: int = setting(
        0, "int ≥ 0", "also write the run file every this many rounds (0: only at the end)"
    )
    seconds: float = setting(
        300.0, "float ≥ 0",
        "also write the run file after the first round of a run (and of each resume), then "
        "after a round once this many seconds passed since the last write, and at least 20 "
        "times as long as that write took (0: neither); what a kill that no signal announces "
        "(SIGKILL, an out-of-memory kill, a power cut) can lose",
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
    participation: ParticipationSection = field(default_factory=ParticipationSection)
    privacy: PrivacySection = field(default_factory=PrivacySection)

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
                if f.name in ("algorithm", "data", "model")
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
            groups = values.pop("groups", []) if section == "data" else []
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


# Allowed values of the enumerated keys. algorithm.name's are the registered algorithms
# (algorithm_names), their own keys' are in their Params; data.dataset's are the registered
# datasets (dataset_names); model.name's the registered models (model_names).
#: what run.export may name
EXPORTS = ("jsonl", "tensorboard", "mlflow", "wandb")
#: the package each export imports (its extra: ``pip install distfl[<export>]``)
EXPORT_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
CHOICES: dict[str, tuple[str, ...]] = {
    "run.device": ("auto", "cpu", "cuda"),
    "run.progress": ("auto", "bar", "lines", "none"),
    "data.partition": ("dirichlet", "natural"),
    "data.draw": ("per_client", "sequential"),
    "server.placement": ("balanced", "static"),
    "train.trainer": ("auto", "batched", "vectorised", "sequential"),
    "train.batches": ("stream", "counter"),
    "train.loss": ("cross_entropy", "hinge"),
    "train.optimizer": ("sgd", "adam", "adamw"),
    "comm.backend": ("auto", "local", "torch", "gloo", "mpi"),
    "comm.sums": ("scaled", "limbs"),
    "participation.availability": ("always", "fraction", "trace"),
    "participation.resources": ("off", "loguniform", "trace"),
    "privacy.accountant": ACCOUNTANTS,
}
