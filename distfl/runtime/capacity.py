"""Whether a population fits in memory, decided before any rank allocates it.

Every rank holds a description of every client (a few numbers per client and class: see
:class:`~distfl.data.Population`) and rank 0 keeps per-client arrays (accuracies, sample
counts, the cluster assignment, the algorithm's per-client state); an algorithm that keeps
K×K matrices adds its ``pair_bytes`` per pair of clients. A population
whose estimate exceeds the memory the machine has available is refused with one line
that says how many clients fit.

Every other size a config sets is estimated the same way (:func:`size_terms`, checked by
:func:`check_sizes`): the clients' samples (the round's clients held at once, one client
being materialised, the cache, what the dataset holds on every rank: its spec's
``memory_terms``), the model's parameters and activations (a built-in model's counted from
its name, the input shape and classes of the dataset and ``model.hidden`` without building
it; another model's declared by its spec or measured on torch's meta device:
:func:`~distfl.runtime.model_size.model_counts`) and their copies, the batched trainer's
batches of every local step, and the per-round loss rows. The estimate is of one process
that is both server and worker (W=1); ranks sharing one machine at W>1 split the round's
work between them. A config whose estimate exceeds the memory available is refused with
one line that names the key whose value grew it most and says how large it may be.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable

import numpy as np

from distfl.algorithms import algorithm_class
from distfl.config import Config, DataSection, ServerSection, TrainSection
from distfl.config.schema import AUTO_EVAL_SAMPLE
from distfl.data.partition import sample_counts
from distfl.datasets import DatasetSpec, dataset_spec
from distfl.errors import ConfigError
from distfl.model_specs import MLPParams
from distfl.runtime.model_size import (
    activations_per_sample,
    cuda_workspace_bytes,
    model_counts,
    parameter_count,
    workspace_config,
)
from distfl.train.optim import state_copies
from distfl.train.sequential import clients_per_chunk

#: rank 0's per-client arrays and bookkeeping (evaluation maps, assignments, algorithm
#: state), a generous estimate
BYTES_PER_CLIENT = 320
#: per client and class: the population's quota and pool start (int32 each), and the
#: class counts the run file records (int64)
BYTES_PER_CLASS = 16


def population_bytes(config: Config) -> tuple[int, int, int]:
    """(bytes estimated for ``data.num_clients`` clients on the busiest rank, bytes per
    client, bytes per pair of clients)."""
    K = config.data.num_clients
    per_client = BYTES_PER_CLIENT + BYTES_PER_CLASS * _spec(config).classes(config)
    pairs = _pair_memory(config)
    per_pair = algorithm_class(config.algorithm.name).working_pair_bytes(algorithm_params(config))
    return K * per_client + pairs, per_client, per_pair


def algorithm_params(config: Config):
    """The algorithm's params as its run will have them: a number of clusters of 0 (its
    ``clusters_key``) is the config's number of ground-truth groups, as the algorithm
    resolves it when it starts (:func:`~distfl.algorithms.common.kmeans.with_group_count`)."""
    params = config.algorithm.params
    key = getattr(algorithm_class(config.algorithm.name), "clusters_key", None)
    if key and getattr(params, key, None) == 0 and config.groups:
        return dataclasses.replace(params, **{key: len(config.groups)})
    return params


def _pair_memory(config: Config) -> int:
    """The algorithm's per-pair state at its peak (see ClusteringAlgorithm.pair_memory)."""
    return algorithm_class(config.algorithm.name).pair_memory(
        algorithm_params(config),
        num_clients=config.data.num_clients,
        clients_per_round=config.server.clients_per_round,
        rounds=config.run.rounds,
    )


def available_bytes() -> int | None:
    """Memory available to new allocations now (Linux: MemAvailable), else the physical
    memory; None when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def fitting_clients(budget: int, per_client: int, per_pair: int) -> int:
    """The largest K with K·per_client + K²·per_pair <= budget."""
    if per_pair == 0:
        return budget // per_client
    a, b = per_pair, per_client
    return int((-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a))


def check_population(config: Config, available: int | None) -> None:
    """Refuse (ConfigError, exit 2) a population that cannot fit in ``available`` bytes."""
    if available is None:
        return
    need, per_client, per_pair = population_bytes(config)
    if need <= available:
        return
    K = config.data.num_clients
    fits = fitting_clients(available, per_client, per_pair)
    if per_pair and need - K * per_client > K * per_client:
        why = (
            f"algorithm {config.algorithm.name} keeps K×K matrices ({per_pair} bytes per pair "
            f"of clients), {_gib(need)} for {K:,} clients"
        )
    else:
        why = (
            f"the population's per-client state (about {per_client} bytes per client on "
            f"every rank) needs {_gib(need)}"
        )
    raise ConfigError(
        f"data.num_clients = {K}: {why}, more than the {_gib(available)} this machine has "
        f"available; at most about {fits:,} clients fit"
    )


# -- every other size ------------------------------------------------------------------

#: float32 copies of a client's features while it is materialised (gathered from the
#: dataset, scaled to float, transformed, made tensors)
FEATURE_COPIES = 4
#: bytes per sample of a client being materialised besides its features: its index (drawn,
#: permuted, split, sorted: int64 each) and its label
INDEX_BYTES = 48
#: float32 copies of the model besides the round's clients' updates: the run's model, its
#: gradients and optimiser state, the server's cluster models, the aggregator's state, the
#: exact sums (int64, in limbs)
MODEL_COPIES = 16
#: copies of the round's loss rows [clients, local steps] (float64): the trainer's, the
#: worker's rows, the gathered rows and their copy sorted by client
LOSS_ROW_COPIES = 4
#: what the client cache costs per byte it holds: the C heap keeps the pages of evicted
#: clients between the cached ones (a worker with a 256 MiB cache measured about 0.6 GiB
#: above one with none; see :func:`distfl.data.release_free_heap`)
CACHE_OVERHEAD = 3
#: float32 copies of each cluster model an algorithm holds beyond the handful of
#: MODEL_COPIES (ClusteringAlgorithm.held_models: ``local``'s model per client): the
#: server's, the pre-round snapshot's, /state's and /final's stacks when the file is
#: written, and an aggregator's state (FedAvgM's velocity)
HELD_MODEL_COPIES = 5
#: bytes per held cluster model besides its values: its tensor and leaf of the tree (a node,
#: its members), its rows of the per-cluster tables and its group in /hierarchy
HELD_MODEL_BYTES = 4096
#: samples of a client of a natural partition of a file dataset (a writer, whose samples are
#: the files' and not data.samples_per_client): a generous allowance
NATURAL_SAMPLES = 2000


def _spec(config: Config):
    """The registered spec of ``data.dataset`` (a ConfigError names the registered ones)."""
    return dataset_spec(config.data.dataset)


def input_shape(config: Config) -> tuple[int, ...]:
    """The shape of one sample of ``data.dataset``, without loading it."""
    return tuple(_spec(config).input_shape(config))


def client_samples(config: Config) -> tuple[list[tuple[int, int]], int]:
    """(runs of clients by size, largest first: (samples a client holds, how many clients
    hold that many), the samples of all clients), from the groups' and the federation's
    ``samples_per_client`` and ``data.quantity_skew`` as the partition draws them; a natural
    partition of a file dataset counts :data:`NATURAL_SAMPLES` a client."""
    d, spec = config.data, _spec(config)
    if spec.natural_partition(config) and not spec.generated:
        runs = [(NATURAL_SAMPLES, d.num_clients)]
    elif d.quantity_skew == 0:
        runs = [(g.samples_per_client or d.samples_per_client, g.count) for g in config.groups]
    else:
        sizes = sample_counts(
            config.groups,
            samples_per_client=d.samples_per_client,
            quantity_skew=d.quantity_skew,
            seed=config.run.effective_data_seed(),
        )
        values, counts = np.unique(sizes, return_counts=True)
        runs = list(zip(values.tolist(), counts.tolist(), strict=True))
    runs.sort(key=lambda run: -run[0])
    return runs, sum(n * count for n, count in runs)


def largest_clients(runs: list[tuple[int, int]], m: int) -> int:
    """The samples of the ``m`` largest clients together (``runs`` from
    :func:`client_samples`)."""
    out = 0
    for n, count in runs:
        take = min(m, count)
        out += n * take
        m -= take
        if m <= 0:
            break
    return out


def size_terms(config: Config) -> dict[str, tuple[int, str]]:
    """What a run holds at its largest, term by term: name -> (bytes, what it is)."""
    terms, spec, P, total = _every_run_terms(config)
    _add_some_runs_terms(terms, config, spec, P, total)
    return terms


def _every_run_terms(
    config: Config,
) -> tuple[dict[str, tuple[int, str]], type[DatasetSpec], int, int]:
    """The terms of every run (population, clients, models, trainer, losses, evaluation);
    with the dataset's spec, the model's parameters and the population's samples."""
    d, t = config.data, config.train
    shape = input_shape(config)
    features = math.prod(shape)
    spec = _spec(config)
    classes = spec.classes(config)
    model = config.model.name
    P, act = model_counts(model, shape, classes, config.model.params)
    runs, total = client_samples(config)
    n = runs[0][0]  # the largest client
    N, S = config.server.clients_per_round, t.local_steps
    tune = algorithm_class(config.algorithm.name).evaluation_finetune(  # before evaluations
        algorithm_params(config), local_steps=S)  # fmt: skip
    B = min(t.batch_size, n)
    sample = features * 4 + 8  # a materialised sample: float32 features, int64 label
    state = state_copies(t)  # per client: parameters, gradients, anchor, optimiser state
    chunk = min(N, clients_per_chunk(P, B, features, t.chunk_mb, copies=state))
    # the batched trainer (auto's pick for the built-in models) draws every step's batch at
    # once; the sequential and vectorised ones draw each step's batch when they take it
    steps_held = 1 if t.trainer in ("sequential", "vectorised") else max(S, tune)
    of = f"{features:,} float32 features"
    held = largest_clients(runs, N)
    # an algorithm may take more client models in a round than the cohort (CFL and FLCL:
    # every member; IFCA's and FeSEM's seeding round)
    M = max(N, algorithm_class(config.algorithm.name).round_models(
        algorithm_params(config), num_clients=d.num_clients, clients_per_round=N, num_params=P
    ))  # fmt: skip
    copies = MODEL_COPIES + 2 * M
    terms = {
        "population": (
            population_bytes(config)[0],
            f"the population's per-client state of {d.num_clients:,} clients",
        ),
        "clients": (
            held * sample,
            f"the round's {N:,} clients held at once (up to {held:,} samples of {of})",
        ),
        "client": (
            n * (features * 4 * FEATURE_COPIES + INDEX_BYTES + 4 * act),
            f"materialising and evaluating one client of {n:,} samples of {of}",
        ),
        "cache": (
            CACHE_OVERHEAD * min(d.cache_mb * 2**20, total * sample),
            f"the client cache (data.cache_mb = {d.cache_mb:,}) over {total:,} samples",
        ),
        "model": (
            P * 4 * copies,
            f"the {model} of {P:,} parameters in {copies:,} float32 copies (two for each of "
            f"the round's {M:,} client models)",
        ),
        "trainer": (
            chunk * (4 * state * P + steps_held * B * (features * 4 + 16) + 4 * B * act)
            + largest_clients(runs, chunk) * sample,
            f"the trainer's {chunk:,} clients at once, each with {state} copies of the model "
            f"({t.optimizer}'s state included) and the batches of "
            + (f"its {steps_held:,} local steps" if steps_held > 1 else "one local step")
            + f" of {B:,} samples of {features:,} features",
        ),
        "losses": (
            N * (S + 1) * 8 * LOSS_ROW_COPIES,
            f"the round's loss rows [{N:,}, {S:,}] float64 ({LOSS_ROW_COPIES} copies)",
        ),
        "evaluation": (
            config.eval.evaluated(d.num_clients) * EVAL_BYTES_PER_CLIENT,
            f"an evaluation's rows of {config.eval.evaluated(d.num_clients):,} clients",
        ),
    }
    return terms, spec, P, total


def _add_some_runs_terms(
    terms: dict[str, tuple[int, str]],
    config: Config,
    spec: type[DatasetSpec],
    P: int,
    total: int,
) -> None:
    """Add the terms only some runs have: the algorithm's held cluster models, cuBLAS's
    workspace, the dataset's own terms and the sample indices of a file dataset."""
    d = config.data
    held = algorithm_class(config.algorithm.name).held_models(
        algorithm_params(config), num_clients=d.num_clients
    )
    if held:
        terms["held_models"] = (
            held * (P * 4 * HELD_MODEL_COPIES + HELD_MODEL_BYTES),
            f"the server's {held:,} cluster models of {P:,} parameters in "
            f"{HELD_MODEL_COPIES} float32 copies, and a leaf of the tree each",
        )
    state = algorithm_class(config.algorithm.name).state_bytes(
        algorithm_params(config), num_clients=d.num_clients,
        clients_per_round=config.server.clients_per_round, rounds=config.run.rounds,
        num_params=P, num_classes=spec.classes(config),
    )  # fmt: skip
    if state:  # what it keeps per client (FedEM's π), live, in the snapshot and the checkpoint
        terms["algorithm_state"] = (3 * state, f"the algorithm's state ({_size(state)}), 3 copies")
    workspace = cuda_workspace_bytes(config)
    if workspace:
        terms["cuda_workspace"] = (
            workspace,
            f"cuBLAS's fixed workspace on the CUDA device ({workspace_config()}), which "
            "makes its results repeat",
        )
    terms.update(spec.memory_terms(config))
    if not spec.generated and (spec.natural_partition(config) or d.draw == "sequential"):
        terms["indices"] = (total * 16, f"every client's sample indices ({total:,} samples)")


def size_bytes(config: Config) -> int:
    """The estimate of :func:`size_terms`, in all."""
    return sum(b for b, _ in size_terms(config).values())


@dataclasses.dataclass(frozen=True)
class Knob:
    """A key whose value grows the estimate: its value, the least value it may take, its
    default (the estimate with it is the one it is compared with) and the config with
    another value."""

    key: str
    value: int
    low: int
    default: int
    unit: str
    with_value: Callable[[int], Config]
    shown: str = ""


def knobs(config: Config) -> list[Knob]:
    """The keys :func:`size_terms` grows with, but data.num_clients."""
    d, t = config.data, config.train

    def data(**kw) -> Config:
        return dataclasses.replace(config, data=dataclasses.replace(d, **kw))

    def train(**kw) -> Config:
        return dataclasses.replace(config, train=dataclasses.replace(t, **kw))

    out = []
    spec = _spec(config)
    if not spec.natural_partition(config) or spec.generated:
        if any(not g.samples_per_client for g in config.groups):
            out.append(Knob("data.samples_per_client", d.samples_per_client, 2,
                            DataSection.samples_per_client, "samples per client",
                            lambda v: data(samples_per_client=v)))  # fmt: skip
        for i, g in enumerate(d.groups):
            if g.samples_per_client:

                def group(v: int, i: int = i) -> Config:
                    spec = dataclasses.replace(d.groups[i], samples_per_client=v)
                    return data(groups=(*d.groups[:i], spec, *d.groups[i + 1 :]))

                out.append(Knob(f"data.groups[{i}].samples_per_client", g.samples_per_client,
                                2, DataSection.samples_per_client,
                                "samples per client of the group", group))  # fmt: skip
    own = {f.name: f.default for f in dataclasses.fields(d.params)}

    def data_own(v: int, key: str) -> Config:
        return data(params=dataclasses.replace(d.params, **{key: v}))

    for key, (low, unit) in spec.size_keys().items():
        out.append(Knob(f"data.{key}", getattr(d.params, key), low, own[key], unit,
                        lambda v, key=key: data_own(v, key)))  # fmt: skip
    a, tune = config.algorithm, getattr(algorithm_class(config.algorithm.name), "finetune_key", "")
    if tune:  # the local steps an algorithm fine-tunes before its evaluations
        out.append(Knob(f"algorithm.{tune}", getattr(a.params, tune), 0, 0, "local steps",
                        lambda v: dataclasses.replace(config, algorithm=dataclasses.replace(
                            a, params=dataclasses.replace(a.params, **{tune: v})))))  # fmt: skip
    hidden = config.model.hidden if config.model.name == "mlp" else ()
    if hidden:
        i = max(range(len(hidden)), key=lambda j: hidden[j])

        def widen(v: int, i: int = i) -> Config:
            widths = (*hidden[:i], v, *hidden[i + 1 :])
            own = dataclasses.replace(config.model.params, hidden=widths)
            return dataclasses.replace(config, model=dataclasses.replace(config.model, params=own))

        out.append(Knob("model.hidden", hidden[i], 1, max(MLPParams.hidden),
                        f"units in model.hidden[{i}]", widen, str(list(hidden))))  # fmt: skip
    out += [
        Knob("train.local_steps", t.local_steps, 1, TrainSection.local_steps, "local steps",
             lambda v: train(local_steps=v)),
        Knob("train.batch_size", t.batch_size, 1, TrainSection.batch_size, "samples per batch",
             lambda v: train(batch_size=v)),
        Knob("train.chunk_mb", t.chunk_mb, 1, TrainSection.chunk_mb, "MiB per chunk",
             lambda v: train(chunk_mb=v)),
        Knob("server.clients_per_round", config.server.clients_per_round, 1,
             ServerSection.clients_per_round, "clients per round",
             lambda v: dataclasses.replace(
                 config, server=dataclasses.replace(config.server, clients_per_round=v))),
        Knob("data.cache_mb", d.cache_mb, 0, DataSection.cache_mb, "MiB of cache",
             lambda v: data(cache_mb=v)),
        Knob("eval.clients", config.eval.evaluated(d.num_clients), 1,
             min(d.num_clients, AUTO_EVAL_SAMPLE), "clients per evaluation",
             lambda v: dataclasses.replace(
                 config, eval=dataclasses.replace(config.eval, clients=v)),
             str(config.eval.clients)),
    ]  # fmt: skip
    return out


def largest_fitting(knob: Knob, available: int) -> int | None:
    """The largest value of ``knob`` (from its ``low`` to its value) whose estimate fits in
    ``available`` bytes, the other keys as they are; None when not even ``low`` fits."""
    if size_bytes(knob.with_value(knob.low)) > available:
        return None
    lo, hi = knob.low, knob.value  # the estimate at lo fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size_bytes(knob.with_value(mid)) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_sizes(config: Config, available: int | None) -> None:
    """Refuse (ConfigError, exit 2) a config whose :func:`size_terms` exceed ``available``
    bytes, naming the key set above its default whose value grew the estimate most (or
    data.num_clients when none did) and the largest value of it that fits."""
    if available is None:
        return
    terms = size_terms(config)
    need = sum(b for b, _ in terms.values())
    if need <= available:
        return
    best: tuple[int, Knob, dict[str, tuple[int, str]]] | None = None
    for knob in knobs(config):
        if knob.value <= knob.default:
            continue
        lower = size_terms(knob.with_value(knob.default))
        saved = need - sum(b for b, _ in lower.values())
        if saved > 0 and (best is None or saved > best[0]):
            best = (saved, knob, lower)
    if best is None:  # the number of clients grew it: the terms that scale with it
        K = config.data.num_clients
        grows = ["population", "indices", "held_models", "algorithm_state"]
        # the cache and a sampled evaluation stop growing at their caps: held there, they
        # are as large at fewer clients at most (so the count said to fit does fit)
        if terms["cache"][0] < CACHE_OVERHEAD * config.data.cache_mb * 2**20:
            grows.append("cache")
        if config.eval.evaluated(K) >= K:
            grows.append("evaluation")
        scaled = sum(terms[t][0] for t in grows if t in terms)
        fixed = need - scaled
        fits = max(0, K * (available - fixed) // scaled) if available > fixed else 0
        name = max(terms, key=lambda t: terms[t][0])
        raise ConfigError(
            f"data.num_clients = {K}: {terms[name][1]} would take {_size(terms[name][0])} "
            f"(about {_size(need)} in all), more than the {_size(available)} this machine "
            f"has available; at most about {fits:,} clients fit"
        )
    _, knob, lower = best
    grown = max(terms, key=lambda t: terms[t][0] - lower[t][0])
    fits = largest_fitting(knob, available)
    allowed = (
        f"at most {fits:,} {knob.unit} fit"
        if fits is not None
        else f"not even {knob.low:,} {knob.unit} fit with the other keys as they are"
    )
    raise ConfigError(
        f"{knob.key} = {knob.shown or knob.value}: {terms[grown][1]} would take "
        f"{_size(terms[grown][0])} (about {_size(need)} in all), more than the "
        f"{_size(available)} this machine has available; {allowed}"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _size(n: int) -> str:
    """``n`` bytes in GiB (thousands separated), or in MiB below one GiB."""
    if n < 2**30:
        return f"{n / 2**20:,.1f} MiB"
    return f"{n / 2**30:,.1f} GiB"


__all__ = [
    "algorithm_params",
    "activations_per_sample",
    "available_bytes",
    "check_population",
    "check_sizes",
    "client_samples",
    "cuda_workspace_bytes",
    "largest_clients",
    "fitting_clients",
    "input_shape",
    "workspace_config",
    "largest_fitting",
    "parameter_count",
    "population_bytes",
    "size_bytes",
    "size_terms",
]


#: rank 0's bytes per evaluated client: its evaluation row (5 float64, gathered and kept),
#: its id and cluster, and the step's task row
EVAL_BYTES_PER_CLIENT = 160
#: an evaluation's work per client besides its test samples (materialising the client and
#: its balanced accuracy, one client at a time), in samples' forward passes, where a
#: training step (batched over the cohort) counts three per sample: measured on gaussian,
#: 0.72 ms per evaluated client and 0.75 ms per trained client of 8 steps of 16 samples
EVAL_CLIENT_COST = 350


def evaluation_note(config: Config) -> str | None:
    """One line, before any work, when the evaluations a config asks for explicitly
    (``eval.clients`` other than "auto") will cost more than all of its training: how much
    more, and how to change it. None otherwise. An algorithm that fine-tunes before its
    evaluations (``evaluation_finetune``) adds its steps to each evaluated client's cost."""
    if config.eval.clients == "auto":
        return None
    K, t = config.data.num_clients, config.train
    n = config.eval.evaluated(K)
    runs, total = client_samples(config)
    per_client = total / max(K, 1)
    test = per_client * config.data.test_fraction
    train = per_client - test
    R, every = config.run.rounds, config.eval.every
    evaluations = R // every + (1 if R % every else 0)
    algorithm = algorithm_class(config.algorithm.name)
    tune = algorithm.evaluation_finetune(algorithm_params(config), local_steps=t.local_steps)
    # fine-tuning before the measure: steps of min(B, n) samples, three passes each
    finetune = 3 * tune * min(t.batch_size, train)
    eval_work = evaluations * n * (EVAL_CLIENT_COST + test + finetune)
    cohort = min(config.server.clients_per_round, K)
    train_work = R * cohort * 3 * t.local_steps * min(t.batch_size, train)
    if eval_work <= train_work:
        return None
    what = "every client" if n >= K else f"a sample of {n:,} clients"
    return (
        f"note: the {evaluations:,} evaluation{'s' if evaluations > 1 else ''} of {what} of "
        f"{K:,} (eval.clients = {config.eval.clients!r}) will cost about "
        f"{eval_work / train_work:,.0f} times the training of all {R:,} rounds; "
        f'eval.clients = "auto" evaluates a sample of {min(K, AUTO_EVAL_SAMPLE):,}, '
        "eval.clients = N a sample of N"
    )


#: bytes of the per-round tables (/metrics, /timing) per round and cluster, generously
ROUND_RECORD_BYTES = 512


def run_file_bytes(config: Config) -> int:
    """A generous estimate of the run file's size (checked against the free disk before
    the first round): every cluster's model twice (/final and /state; a cluster per
    ground-truth group, at least two), the per-client arrays, the K×K matrices an
    algorithm keeps (stored again at a split), what else its state keeps
    (``state_bytes``: e.g. gradient profiles), the per-round tables, and HDF5's own structures
    (about 4 KiB a column)."""
    K = config.data.num_clients
    classes = _spec(config).classes(config)
    params = model_counts(config.model.name, input_shape(config), classes, config.model.params)[0]
    cls = algorithm_class(config.algorithm.name)
    resolved = algorithm_params(config)
    clusters = max(
        2, len(config.groups), int(getattr(resolved, "num_clusters", 0)),
        cls.held_models(resolved, num_clients=K),
    )  # fmt: skip
    per_pair = cls.pair_bytes
    working = max(cls.working_pair_bytes(resolved), 1)
    stored = _pair_memory(config) * per_pair // working
    models = 2 * 4 * params * clusters
    clients = K * (classes + 8) * 8
    rounds = config.run.rounds * clusters * ROUND_RECORD_BYTES
    state = cls.state_bytes(resolved, num_clients=K,
                            clients_per_round=config.server.clients_per_round,
                            rounds=config.run.rounds, num_params=params,
                            num_classes=classes)  # fmt: skip
    return (1 << 20) + models + clients + 2 * stored + rounds + state
