"""The values a config may hold and the relations between them (:func:`validate`), the
output path (:func:`check_out_path`) and the world a launch may have
(:func:`check_world`): each refusal a ConfigError with one line naming the key."""

from __future__ import annotations

import importlib.util
import math
import os

from distfl.config.effects import check_unused
from distfl.config.groups import ALPHA_NOT_GIVEN
from distfl.config.held_out import validate_held_out
from distfl.config.privacy import validate_privacy
from distfl.config.schema import CHOICES, EXPORT_PACKAGES, EXPORTS, Config, StoredParams
from distfl.errors import ConfigError, did_you_mean
from distfl.plugins import AGGREGATORS, ALGORITHMS, DATASETS, MODELS, SELECTIONS
from distfl.settings import Params

NAME_MAX = 255
NAME_SUFFIX = 21
#: the longest path the kernel takes (PATH_MAX, its closing NUL included)
PATH_MAX = 4096
#: the longest value an error line shows (a longer one is cut, its length said)
SHOWN_CHARS = 60


def shown(value: object) -> str:
    """``repr(value)`` for an error line: an integer too long to show by its size in bits,
    and a representation longer than :data:`SHOWN_CHARS` cut, saying how long it was."""
    if isinstance(value, int) and value.bit_length() > SHOWN_CHARS * 3:  # 3.3 bits a figure
        return f"an integer of {value.bit_length():,} bits"
    try:
        text = repr(value)
    except ValueError:  # holds an integer beyond Python's int-to-text limit
        return "a value too long to show"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


def check_path(key: str, path: str, *, suffix: int = 0) -> None:
    """Refuse (ConfigError) a path the kernel would not take: longer than :data:`PATH_MAX`
    bytes with the ``suffix`` bytes a name written beside it adds, or with a name between
    its slashes longer than :data:`NAME_MAX`."""
    size = len(os.fsencode(path))
    if size + suffix >= PATH_MAX:
        beside = f", less the {suffix} that a file beside it adds" if suffix else ""
        raise ConfigError(
            f"{key} is a path of {size:,} bytes; at most {PATH_MAX - 1 - suffix:,} (the "
            f"kernel takes {PATH_MAX - 1:,}{beside})"
        )
    longest = max(len(os.fsencode(name)) for name in path.split(os.sep))
    if longest > NAME_MAX:
        raise ConfigError(
            f"{key} holds a name of {longest:,} bytes between its slashes; a file or "
            f"directory name takes at most {NAME_MAX}"
        )


def check_out_path(out: str) -> None:
    """Refuse (ConfigError) a run.out that cannot name a run file: empty, a directory (``.``,
    ``/``, a trailing slash), a file name too long for the files written beside it, or a
    path too long (:func:`check_path`)."""
    if not out:
        raise ConfigError("run.out is empty: give the path of the HDF5 run file")
    name = os.path.basename(out)
    if out.endswith(os.sep) or name in ("", ".", ".."):
        raise ConfigError(
            f"run.out = {shown(out)} names a directory; give the path of a run file in it, "
            f"such as {os.path.join(out, 'run.h5')!r}"
        )
    size = len(os.fsencode(name))
    if size > NAME_MAX - NAME_SUFFIX:
        raise ConfigError(
            f"run.out's file name is {size} bytes; at most {NAME_MAX - NAME_SUFFIX} (a file "
            f"name takes {NAME_MAX}, and the temporary file beside the run file adds up to "
            f"{NAME_SUFFIX})"
        )
    check_path("run.out", out, suffix=NAME_SUFFIX)


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
#: largest Dirichlet concentration of a group (data.groups[i].alpha): already at 10^6 every
#: class proportion is 1/C to within 0.01% (a client's draw is IID), and far larger values
#: overflow the gamma draws' sum (10^307 with 100 classes)
MAX_ALPHA = 1e6
#: the values of a group's ``partition`` and ``class_choice``
GROUP_PARTITIONS = ("dirichlet", "classes_per_client", "shards")
CLASS_CHOICES = ("random", "first_deterministic", "deterministic")
#: longest collective timeout in seconds (about 32 years): torch converts it to a timedelta
#: and to int64 milliseconds
MAX_TIMEOUT_S = 1e9
#: largest σ of the log-normal quantity skew: already at 10 the median client holds e^-50 of
#: the mean (every client but a vanishing share the minimum 2 samples), and far larger
#: values overflow σ²/2
MAX_QUANTITY_SKEW = 10.0
#: largest noise std and feature shift of a group: drawn in float64 and added to float32
#: features, every draw stays far below float32's largest (3.4e38)
MAX_NOISE = 1e30
#: the range of the clients' resources (participation.speed_min .. bandwidth_max) and of a
#: group's factors on them: the virtual clock divides by their products, which stay far
#: from float64's overflow and underflow
MIN_RESOURCE, MAX_RESOURCE = 1e-6, 1e15
MIN_RESOURCE_SCALE, MAX_RESOURCE_SCALE = 1e-6, 1e6


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


#: the words ``eval.clients`` takes besides a number
EVAL_WORDS = ("auto", "all")


def _range(key: str, value: float, lo: float | None, hi: float | None, what: str) -> None:
    if value != value or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"{key} = {value!r}: must be {what}")


def validate(c: Config, *, unknown_dataset: bool = False, stored: bool = False) -> None:
    """Check values and the relations between them; raise ConfigError on the first problem.
    ``unknown_dataset``: a ``data.dataset`` or a ``model.name`` that is not registered (a
    stored config's plug-in, not imported) is kept, and the checks that need its spec are
    skipped. Last, a key set to a value other than its default that takes no effect is
    refused (:func:`~distfl.config.effects.check_unused`), unless ``stored``: a run file's
    config reads as it was written."""
    _validate_choices(c)
    _validate_run(c)
    _validate_data(c)
    spec = _dataset_spec(c, unknown_dataset=unknown_dataset)
    _validate_dataset(c, spec)
    _validate_groups(c, spec)
    _validate_model(c, spec, unknown=unknown_dataset)
    _validate_train(c, spec)
    _validate_server(c, unknown=unknown_dataset)
    _validate_algorithm(c)
    _validate_comm(c)
    _validate_eval(c)
    _validate_checkpoint(c)
    _validate_participation(c, unknown=unknown_dataset)
    validate_privacy(c, unknown=unknown_dataset)
    validate_held_out(c, unknown=unknown_dataset)
    if not stored:
        check_unused(c)


def _validate_choices(c: Config) -> None:
    """The keys of a fixed set of values (:data:`CHOICES`)."""
    for dotted, allowed in CHOICES.items():
        section, key = dotted.split(".")
        value = getattr(getattr(c, section), key)
        if value not in allowed:
            raise ConfigError(
                f"{dotted} = {shown(value)}{did_you_mean(value, allowed)}: allowed values are "
                f"{', '.join(allowed)}"
            )


def missing_export(kind: str) -> str:
    """The line that refuses the export ``kind`` where its package is not importable."""
    package = EXPORT_PACKAGES[kind]
    return (
        f"run.export names {kind}, which needs the {package} package: "
        f"pip install distfl[{kind}], or leave it out of run.export"
    )


def _validate_run(c: Config) -> None:
    """The ``run`` section: exports, seeds, rounds, threads and the output path."""
    for kind in c.run.export:
        if kind not in EXPORTS:
            raise ConfigError(
                f"run.export: {kind!r}{did_you_mean(kind, EXPORTS)} is no export; allowed: "
                f"{', '.join(EXPORTS)}"
            )
    if len(set(c.run.export)) != len(c.run.export):
        raise ConfigError(f"run.export = {list(c.run.export)}: an export is named twice")
    for kind in c.run.export:
        package = EXPORT_PACKAGES.get(kind)
        if package is not None and importlib.util.find_spec(package) is None:
            raise ConfigError(missing_export(kind))
    _range("run.seed", c.run.seed, 0, 2**63 - 1, "a non-negative integer")
    for key in ("data_seed", "init_seed", "sampling_seed"):
        _range(f"run.{key}", getattr(c.run, key), -1, 2**63 - 1,
               "-1 (unset: run.seed) or a non-negative integer")  # fmt: skip
    _range("run.rounds", c.run.rounds, 1, None, "at least 1")
    _range("run.threads", c.run.threads, 1, MAX_THREADS,
           f"between 1 and {MAX_THREADS} (the threads of each rank)")  # fmt: skip
    check_out_path(c.run.out)


def _validate_data(c: Config) -> None:
    """The ``data`` section's numbers: clients, samples, test fraction, cache and skew."""
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
    _range("data.quantity_skew", c.data.quantity_skew, 0.0, MAX_QUANTITY_SKEW,
           f"from 0 (no skew) to {MAX_QUANTITY_SKEW:g} (at 10 the median client already holds "
           "e^-50 of the mean)")  # fmt: skip


def _dataset_spec(c: Config, *, unknown_dataset: bool):
    """The spec of ``data.dataset``; None for an unregistered one when ``unknown_dataset``."""
    try:
        spec = DATASETS.get(c.data.dataset)
    except ConfigError:
        if not unknown_dataset:
            raise
        spec = None  # a stored config's dataset of a plug-in not imported: kept unchecked
    return spec


def _validate_dataset(c: Config, spec) -> None:
    """The dataset's own keys, its files' root and whether it has natural owners."""
    if spec is not None:
        c.data.params.check(c)  # the dataset's own keys
    if c.data.root:
        check_path("data.root", c.data.root)
    if spec is not None and spec.needs_root and not c.data.root:
        raise ConfigError(
            f"data.root is empty: data.dataset = {c.data.dataset!r} is read from files under "
            "data.root (nothing is downloaded; see the dataset table of docs/datasets.md)"
        )
    if spec is not None and c.data.partition == "natural" and spec.natural == "never":
        natural = ", ".join(s.name for s in DATASETS.classes() if s.natural != "never")
        raise ConfigError(
            f"data.partition = 'natural': data.dataset = {c.data.dataset!r} has no natural "
            f"owners (the datasets that have them: {natural})"
        )


def _validate_groups(c: Config, spec) -> None:
    """Each of ``data.groups``, then their counts against ``data.num_clients``."""
    for i, g in enumerate(c.data.groups):
        _validate_group(c, i, g, spec)
    if c.data.groups and sum(g.count for g in c.data.groups) != c.data.num_clients:
        total = sum(g.count for g in c.data.groups)
        raise ConfigError(
            f"data.groups: the counts add up to {total}, but data.num_clients = "
            f"{c.data.num_clients}; they must be equal"
        )


def check_alpha(key: str, alpha: float) -> None:
    """Refuse a group's alpha outside [0, MAX_ALPHA]."""
    _range(key, alpha, 0.0, MAX_ALPHA,
           f"from 0 (one class per client) to {MAX_ALPHA:.0e} (IID already: every "
           "class equally likely to within 0.01%)")  # fmt: skip


def _validate_group(c: Config, i: int, g, spec) -> None:
    """One group of ``data.groups``: its count, classes, partition and transforms."""
    key = f"data.groups[{i}]"
    _range(f"{key}.count", g.count, 1, None, "at least 1")
    if g.alpha == ALPHA_NOT_GIVEN and g.partition == "dirichlet":
        if spec is None or not spec.natural_partition(c):
            raise ConfigError(
                f"{key}.alpha is missing (-1.0, what a group without one holds); a group "
                f"drawn from the pooled dataset needs count and alpha from 0 (one class per "
                f"client) to {MAX_ALPHA:.0e} (a group with partition = 'classes_per_client' "
                "or 'shards', or of a natural partition, needs no alpha)"
            )
    else:
        check_alpha(f"{key}.alpha", g.alpha)
    if g.samples_per_client:
        _range(f"{key}.samples_per_client", g.samples_per_client, 2, MAX_SAMPLES_PER_CLIENT,
               f"0 or between 2 and {MAX_SAMPLES_PER_CLIENT:,} (counted in int32)")  # fmt: skip
    if g.test_fraction and not 0.0 < g.test_fraction < 1.0:
        raise ConfigError(
            f"{key}.test_fraction = {g.test_fraction!r}: must be 0 (data.test_fraction) "
            "or strictly between 0 and 1"
        )
    if g.availability != -1.0:
        _range(f"{key}.availability", g.availability, 0.0, 1.0,
               "-1 (participation.fraction) or a share of rounds in [0, 1]")  # fmt: skip
    if g.dropout != -1.0:
        _range(f"{key}.dropout", g.dropout, 0.0, MAX_DROPOUT,
               "-1 (participation.dropout) or a probability in [0, 1)")  # fmt: skip
    for name in ("speed_scale", "bandwidth_scale"):
        low, high = MIN_RESOURCE_SCALE, MAX_RESOURCE_SCALE
        _range(f"{key}.{name}", getattr(g, name), low, high,
               f"a positive factor from {low:g} to {high:g}")  # fmt: skip
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
    _check_group_partition(c, key, g, spec)
    _range(f"{key}.patch", g.patch, 0, None, "0 (off) or a patch side in pixels")
    if g.blur and (g.blur < 3 or g.blur % 2 == 0):
        raise ConfigError(f"{key}.blur = {g.blur}: must be 0 (off) or an odd kernel size >= 3")
    if g.blur > MAX_BLUR:
        raise ConfigError(
            f"{key}.blur = {g.blur}: must be 0 (off) or an odd kernel size from 3 to "
            f"{MAX_BLUR} (three times the side of the largest images)"
        )
    for name, what in (("noise", "std of the noise"), ("shift", "norm of the feature shift")):
        _range(f"{key}.{name}", getattr(g, name), 0.0, MAX_NOISE,
               f"from 0 to {MAX_NOISE:g} ({what}, added to float32 features)")  # fmt: skip


def _validate_model(c: Config, dataset, *, unknown: bool) -> None:
    """The ``model`` section: the model's own keys, and whether it takes the dataset's
    samples (``dataset``: its spec, None when it is not registered)."""
    if unknown and c.model.name not in MODELS:
        return  # a stored config's model of a plug-in not imported: kept unchecked
    spec = MODELS.get(c.model.name)
    _check_params(c, "model", c.model.name, spec.Params, c.model.params)
    if dataset is None:
        return
    shape = tuple(dataset.input_shape(c))
    needs = spec.accepts(shape, dataset.classes(c), c.model.params)
    if needs:
        raise ConfigError(
            f"model.name = {c.model.name!r} does not take data.dataset = {c.data.dataset!r} "
            f"(samples of shape [{', '.join(map(str, shape))}]): it needs {needs}"
        )


def _validate_train(c: Config, spec) -> None:
    """The ``train`` section, and its loss against the dataset's classes."""
    _range("train.local_steps", c.train.local_steps, 1, None, "at least 1")
    _range("train.batch_size", c.train.batch_size, 1, None, "at least 1")
    _float32_rate("train.lr", c.train.lr, "", positive=True)
    _range("train.momentum", c.train.momentum, 0.0, 0.999999, "in [0, 1)")
    _float32_rate("train.weight_decay", c.train.weight_decay, "", positive=False)
    _float32_rate("train.prox_mu", c.train.prox_mu, " (FedProx's mu; 0: off)", positive=False)
    _validate_optimizer(c)
    _range("train.chunk_mb", c.train.chunk_mb, 1, None, "at least 1 (MiB per chunk of clients)")
    if spec is not None and c.train.loss == "hinge" and spec.classes(c) != 2:
        binary = ", ".join(s.name for s in DATASETS.classes() if s.num_classes == 2)
        raise ConfigError(
            f"train.loss = 'hinge' needs a binary problem: data.dataset = {c.data.dataset!r} "
            f"has {spec.classes(c)} classes (the binary datasets: {binary})"
        )


def _validate_optimizer(c: Config) -> None:
    """Adam's keys in range (an optimiser that does not take them refuses them set:
    :mod:`~distfl.config.effects`)."""
    t = c.train
    for key in ("beta1", "beta2"):
        value = getattr(t, key)
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"train.{key} = {value!r}: must be in [0, 1)")
    _float32_rate("train.eps", t.eps, " (Adam's epsilon)", positive=True)


def _validate_server(c: Config, *, unknown: bool = False) -> None:
    """The ``server`` section, and its aggregator's own refusals (FedProx needs
    ``train.prox_mu``; none for a stored config's aggregator of a plug-in not imported,
    with ``unknown``)."""
    _range(
        "server.clients_per_round",
        c.server.clients_per_round,
        1,
        c.data.num_clients,
        f"between 1 and data.num_clients ({c.data.num_clients})",
    )
    _float32_rate("server.lr", c.server.lr, " (FedAvgM's η)", positive=True)
    _range("server.momentum", c.server.momentum, 0.0, 0.999999, "in [0, 1) (FedAvgM's β)")
    if not (unknown and c.server.aggregator not in AGGREGATORS.names()):  # (a stored plug-in's)
        AGGREGATORS.get(c.server.aggregator).check(c)  # its own refusals (FedProx's μ)


def _validate_comm(c: Config) -> None:
    """The ``comm`` section."""
    if not 0 < c.comm.timeout_s <= MAX_TIMEOUT_S:
        raise ConfigError(
            f"comm.timeout_s = {c.comm.timeout_s!r}: must be positive and at most "
            f"{MAX_TIMEOUT_S:.0e} seconds"
        )


def _validate_eval(c: Config) -> None:
    """The ``eval`` section."""
    _range("eval.every", c.eval.every, 1, None, "at least 1 (the last round is always evaluated)")
    if not (math.isfinite(c.eval.loss_target) and c.eval.loss_target >= 0):
        raise ConfigError(
            f"eval.loss_target = {c.eval.loss_target!r}: must be 0 (none) or a test loss"
        )
    if isinstance(c.eval.clients, str):
        if c.eval.clients not in EVAL_WORDS:
            raise ConfigError(
                f"eval.clients = {c.eval.clients!r}{did_you_mean(c.eval.clients, EVAL_WORDS)}: "
                f"allowed are 'auto', 'all' or a number of clients 0..{c.data.num_clients}"
            )
    else:
        _range(
            "eval.clients",
            c.eval.clients,
            0,
            c.data.num_clients,
            f"'auto', 'all' (or 0) or a sample size up to data.num_clients ({c.data.num_clients})",
        )


def _validate_checkpoint(c: Config) -> None:
    """The ``checkpoint`` section."""
    _range("checkpoint.every", c.checkpoint.every, 0, None, "0 (only at the end) or more")
    _range("checkpoint.seconds", c.checkpoint.seconds, 0.0, None, "0 (off) or more")


#: the largest dropout probability (1 would leave no client ever reporting)
MAX_DROPOUT = 1.0 - 2**-20


def _validate_participation(c: Config, *, unknown: bool = False) -> None:
    """The ``participation`` section: shares and probabilities in range, positive finite
    resources, the keys that need others (a deadline needs resources), and the selection
    strategy's own refusals (FedCS needs a deadline, FedPNS the fedavg aggregator; none for
    a stored config's strategy of a plug-in not imported, with ``unknown``). The trace
    files and whether any client can meet the deadline are checked on rank 0 before any
    work (:func:`distfl.runtime.participation.check_participation`)."""
    p = c.participation
    _range("participation.fraction", p.fraction, 0.0, 1.0, "a share of rounds in [0, 1]")
    _range("participation.diurnal", p.diurnal, 0.0, 1.0, "an amplitude in [0, 1]")
    _range("participation.period", p.period, 1, None, "at least 1 (rounds of one day)")
    _range("participation.dropout", p.dropout, 0.0, MAX_DROPOUT, "a probability in [0, 1)")
    for name in ("speed_min", "speed_max", "bandwidth_min", "bandwidth_max"):
        _range(f"participation.{name}", getattr(p, name), MIN_RESOURCE, MAX_RESOURCE,
               f"a positive number from {MIN_RESOURCE:g} to {MAX_RESOURCE:g}")  # fmt: skip
    for low, high in (("speed_min", "speed_max"), ("bandwidth_min", "bandwidth_max")):
        if getattr(p, high) < getattr(p, low):
            raise ConfigError(
                f"participation.{high} = {getattr(p, high)!r}: must be at least "
                f"participation.{low} ({getattr(p, low)!r})"
            )
    if not (math.isfinite(p.deadline) and p.deadline >= 0):
        raise ConfigError(
            f"participation.deadline = {p.deadline!r}: must be 0 (none) or a number of "
            "simulated seconds"
        )
    _range("participation.pns_alpha", p.pns_alpha, 1e-9, 1e6, "positive (FedPNS's α)")
    _range("participation.pns_beta", p.pns_beta, 0.0, 1e6, "0 or more (FedPNS's β)")
    _range("participation.pns_kept", p.pns_kept, 1e-9, 1.0, "a share in (0, 1]")
    if not (unknown and p.selection not in SELECTIONS.names()):  # (a stored plug-in's)
        SELECTIONS.get(p.selection).check(c)  # its own refusals
    if p.deadline and p.resources == "off":
        raise ConfigError(
            "participation.deadline needs the clients' resources for the virtual clock: set "
            "participation.resources to loguniform or trace"
        )
    for key, name in (("trace", "availability"), ("resource_trace", "resources")):
        if getattr(p, name) == "trace" and not getattr(p, key):
            raise ConfigError(
                f"participation.{name} = 'trace' needs participation.{key}: the CSV file it reads"
            )


def _validate_algorithm(c: Config) -> None:
    """The named algorithm's keys, by its own rules (:meth:`Params.check`); none for a
    stored algorithm that is not registered (its plug-in was not imported)."""
    if isinstance(c.algorithm.params, StoredParams):
        return
    cls = ALGORITHMS.get(c.algorithm.name)
    _check_params(c, "algorithm", c.algorithm.name, cls.Params, c.algorithm.params)


def _check_params(c: Config, section: str, name: str, expected: type, params) -> None:
    """A plug-in's own keys in ``section`` (``name``'s, which declares ``expected``): of
    that class, each key with choices holding one of them, then the class's own rules
    (:meth:`Params.check`)."""
    if type(params) is not expected or not isinstance(params, Params):
        raise ConfigError(
            f"{section}.name = {name!r} takes {expected.__name__}, not {type(params).__name__}"
        )
    for key, allowed in expected.choices.items():
        value = getattr(params, key)
        if value not in allowed:
            raise ConfigError(
                f"{section}.{key} = {shown(value)}{did_you_mean(value, allowed)}: allowed values "
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


def _check_group_partition(c: Config, key: str, g, spec) -> None:
    """Refuse a group's ``partition``, ``classes_per_client``, ``class_choice`` and
    ``shards_per_client`` that cannot draw (what depends on the samples themselves, such as
    more shards than the group's samples make, is refused when the partition is drawn)."""
    if g.partition not in GROUP_PARTITIONS:
        raise ConfigError(
            f"{key}.partition = {g.partition!r}: allowed: {', '.join(GROUP_PARTITIONS)}"
            f"{did_you_mean(str(g.partition), GROUP_PARTITIONS)}"
        )
    if g.class_choice not in CLASS_CHOICES:
        raise ConfigError(
            f"{key}.class_choice = {g.class_choice!r}: allowed: {', '.join(CLASS_CHOICES)}"
            f"{did_you_mean(str(g.class_choice), CLASS_CHOICES)}"
        )
    if g.partition == "dirichlet":
        return
    if spec is not None and spec.natural_partition(c):
        raise ConfigError(
            f"{key}.partition = {g.partition!r}: the clients of data.dataset = "
            f"{c.data.dataset!r} are its natural owners here; only data.partition = "
            "'dirichlet' of a pooled dataset splits samples by class or shard"
        )
    num_classes = spec.classes(c) if spec is not None else None
    if g.partition == "classes_per_client":
        k = g.classes_per_client
        if g.classes:
            most, where = len(g.classes), f"the {len(g.classes)} classes of {key}.classes"
        elif num_classes is not None:
            most, where = num_classes, f"the {num_classes} classes of {c.data.dataset}"
        else:
            most, where = None, ""
        if k < 1 or (most is not None and k > most):
            upto = f" and at most {where}" if most is not None else ""
            raise ConfigError(f"{key}.classes_per_client = {k}: must be at least 1{upto}")
        return
    s = g.shards_per_client
    n = g.samples_per_client or c.data.samples_per_client
    if s < 1 or s > n:
        raise ConfigError(
            f"{key}.shards_per_client = {s}: must be from 1 to the group's {n} samples per client"
        )
    if n % s:
        raise ConfigError(
            f"{key}.shards_per_client = {s}: must divide the group's {n} samples per client "
            "(shards are of equal size)"
        )
