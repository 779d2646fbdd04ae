"""Sizes refused before any rank allocates: the static bounds of :func:`distfl.config.validate`
and the memory estimate of :mod:`distfl.runtime.capacity` (parameters counted without
building the model, bytes per term, the largest value that fits)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from datafiles import built_in_specs

from distfl import config as C
from distfl.data.partition import sample_counts
from distfl.datasets import dataset_spec, dataset_specs
from distfl.errors import ConfigError
from distfl.models import build_model, num_params
from distfl.presets import PRESETS
from distfl.runtime.capacity import (
    activations_per_sample,
    check_sizes,
    client_samples,
    knobs,
    largest_clients,
    largest_fitting,
    parameter_count,
    size_bytes,
    size_terms,
)

GiB = 2**30


def digits(*overrides: str) -> C.Config:
    return C.load(preset="digits", overrides=list(overrides))


def refusal(cfg: C.Config, available: int) -> str:
    with pytest.raises(ConfigError) as err:
        check_sizes(cfg, available)
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_cuda_run_counts_cublas_fixed_workspace(monkeypatch):
    """cuBLAS's deterministic workspace is allocated on the device by torch's caching
    allocator (32 MiB for ``:4096:8``: 8 buffers of 4,096 KiB; measured on an H200 as the
    default job's peak less its other terms); the estimate of a CUDA run counts it, a CPU
    run's does not. The config need not find a GPU: the estimate is of the run it asks for."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    cpu, cuda = digits('run.device="cpu"'), digits('run.device="cuda"')
    assert "cuda_workspace" not in size_terms(cpu)
    assert size_terms(cuda)["cuda_workspace"][0] == 8 * 4096 * 1024
    assert size_bytes(cuda) == size_bytes(cpu) + 8 * 4096 * 1024
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the other deterministic one
    assert size_terms(cuda)["cuda_workspace"][0] == 8 * 16 * 1024
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")  # not deterministic: replaced
    assert size_terms(cuda)["cuda_workspace"][0] == 8 * 4096 * 1024


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("hidden", [(), (5,), (32, 16), (7, 3, 2), (1000,)])
@pytest.mark.parametrize("shape", [(1, 8, 8), (2,), (3, 32, 32)])
def test_mlp_parameters_are_those_of_the_built_model(shape, hidden):
    model = build_model("mlp", shape, 10, hidden=hidden)
    assert parameter_count("mlp", shape, 10, hidden) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["cnn", "lenet5", "mnist_cnn"])
@pytest.mark.parametrize("dataset", [s.name for s in built_in_specs() if len(s.sample_shape) == 3])
def test_image_model_parameters_are_those_of_the_built_model(name, dataset):
    spec = dataset_spec(dataset)
    shape, classes = spec.sample_shape, spec.num_classes
    assert parameter_count(name, shape, classes) == num_params(build_model(name, shape, classes))


def test_mlp_parameters_by_hand():
    # 64 -> 4 -> 10: 64·4 + 4 weights and biases, then 4·10 + 10
    assert parameter_count("mlp", (1, 8, 8), 10, (4,)) == 260 + 50
    # the hidden width the CLI would be handed as model.hidden=[1e9]
    assert parameter_count("mlp", (1, 8, 8), 10, (10**9,)) == 64 * 10**9 + 10**9 + 10**10 + 10


def test_activations_by_hand():
    # a 3-wide layer (Linear and ReLU outputs) and 2 logits
    assert activations_per_sample("mlp", (4,), 2, (3,)) == 2 * 3 + 2
    # LeNet-5 on 8x8: 6·8·8 twice, 6·4·4, 16·4·4 twice, 16·2·2, dense 120 and 84 twice, 10
    assert activations_per_sample("lenet5", (1, 8, 8), 10) == (
        2 * 384 + 96 + 2 * 256 + 64 + 2 * (120 + 84) + 10
    )


# --------------------------------------------------------------------------- samples


def test_client_samples_without_skew_are_the_groups():
    cfg = digits(
        "data.num_clients=5",
        "server.clients_per_round=2",
        "data.samples_per_client=10",
        "data.groups=[{count=3, alpha=1.0}, {count=2, alpha=1.0, samples_per_client=50}]",
    )
    runs, total = client_samples(cfg)
    assert runs == [(50, 2), (10, 3)] and total == 3 * 10 + 2 * 50
    assert largest_clients(runs, 1) == 50
    assert largest_clients(runs, 3) == 50 + 50 + 10
    assert largest_clients(runs, 99) == total


def test_client_samples_with_skew_are_the_partitions_draw():
    cfg = digits("data.num_clients=300", "data.quantity_skew=1.2", "run.seed=5")
    sizes = sample_counts(cfg.groups, samples_per_client=80, quantity_skew=1.2, seed=5)
    runs, total = client_samples(cfg)
    assert total == int(sizes.sum()) and runs[0][0] == int(sizes.max())
    assert largest_clients(runs, 10) == int(np.sort(sizes)[-10:].sum())


# --------------------------------------------------------------------------- bytes


def test_the_byte_estimate_by_hand():
    """2 clients of 10 digits (64 float32 features), an MLP 64-4-10 (310 parameters), one
    client a round, 3 local steps of batches of 4, no cache, on the CPU."""
    cfg = digits(
        'run.device="cpu"', "data.num_clients=2", "data.samples_per_client=10", "model.hidden=[4]",
        "server.clients_per_round=1", "train.local_steps=3", "train.batch_size=4",
        "data.cache_mb=0",
    )  # fmt: skip
    terms = {name: b for name, (b, _) in size_terms(cfg).items()}
    P, act, sample = 310, 2 * 4 + 10, 64 * 4 + 8
    assert terms == {
        "population": 2 * (320 + 16 * 10),
        "clients": 10 * sample,
        "client": 10 * (64 * 4 * 4 + 48 + 4 * act),
        "cache": 0,
        "model": P * 4 * (16 + 2 * 1),
        "trainer": 16 * P + 3 * 4 * (64 * 4 + 16) + 4 * 4 * act + 10 * sample,
        "losses": 1 * (3 + 1) * 8 * 4,
        "evaluation": 2 * 160,  # both clients' rows (eval.clients = "auto": all of 2)
        # what the digits spec holds on every rank: 1,797 samples of float32 pixels and
        # an int64 label
        "dataset": 1797 * (64 * 4 + 8),
    }
    assert size_bytes(cfg) == sum(terms.values()) == 48640 + 474408 + 320
    check_sizes(cfg, 523368)  # exactly enough: no error
    check_sizes(cfg, None)  # memory unknown: no check
    # one byte short, and no key above its default: the clients are named; of the 523,368
    # bytes 1,280 scale with them (the population and the evaluation's rows) and 522,088 do
    # not, which leaves 1,279 bytes of the 523,367: room for one client
    text = refusal(cfg, 523367)
    assert text.startswith("data.num_clients = 2: ")
    assert text.endswith("at most about 1 clients fit")


@pytest.mark.parametrize("trainer", ["sequential", "vectorised"])
def test_a_trainer_that_draws_each_steps_batch_holds_one_steps_batch(trainer):
    """The batched trainer holds every local step's batch at once; the sequential and
    vectorised ones one step's (so a million local steps fit with them)."""
    args = ("data.num_clients=2", "data.samples_per_client=10", "model.hidden=[4]",
            "server.clients_per_round=1", "train.local_steps=3", "train.batch_size=4")  # fmt: skip
    batched = size_terms(digits(*args, 'train.trainer="batched"'))["trainer"][0]
    other = size_terms(digits(*args, f'train.trainer="{trainer}"'))["trainer"]
    assert batched - other[0] == (3 - 1) * 4 * (64 * 4 + 16)
    assert "one local step" in other[1]
    many = digits(*args[:-2], "train.local_steps=1000000", "train.batch_size=4",
                  f'train.trainer="{trainer}"')  # fmt: skip
    assert size_terms(many)["trainer"][0] == other[0]


def test_at_most_n_fit_is_the_largest_value_that_fits():
    cfg = digits("data.samples_per_client=1000000000")
    knob = next(k for k in knobs(cfg) if k.key == "data.samples_per_client")
    fits = largest_fitting(knob, 16 * GiB)
    assert size_bytes(knob.with_value(fits)) <= 16 * GiB < size_bytes(knob.with_value(fits + 1))
    text = refusal(cfg, 16 * GiB)
    assert text.startswith("data.samples_per_client = 1000000000: the round's 10 clients")
    assert "16.0 GiB this machine has available" in text
    assert text.endswith(f"at most {fits:,} samples per client fit")
    # 10 clients of 10^9 samples of 64 float32 features and a label: 2,458.7 GiB
    assert f"{10 * 10**9 * 264 / GiB:,.1f} GiB" in text


@pytest.mark.parametrize(
    "override, start, unit",
    [
        ("model.hidden=[1000000000]", "model.hidden = [1000000000]: the mlp of 75,000,000,010",
         "units in model.hidden[0]"),
        ("train.local_steps=1000000000", "train.local_steps = 1000000000: the trainer's",
         "local steps"),
        ("data.samples_per_client=1000000000", "data.samples_per_client = 1000000000: ",
         "samples per client"),
        ("server.clients_per_round=100000", "server.clients_per_round = 100000: ",
         "clients per round"),
    ],
)  # fmt: skip
def test_the_key_that_grew_the_estimate_is_named(override, start, unit):
    extra = ["data.num_clients=100000", "data.samples_per_client=50000"]
    cfg = digits(override, *(extra if "clients_per_round" in override else []))
    text = refusal(cfg, 16 * GiB)
    assert text.startswith(start), text
    n = int(text.rsplit("at most ", 1)[1].split()[0].replace(",", ""))
    assert text.endswith(f"at most {n:,} {unit} fit") and n >= 1


def test_a_key_whose_smallest_value_does_not_fit_says_so():
    cfg = digits("data.samples_per_client=100000000", "train.local_steps=100000000")
    text = refusal(cfg, 16 * GiB)
    assert text.startswith("train.local_steps = 100000000: ")
    assert "not even 1 local steps fit with the other keys as they are" in text


def test_a_gaussian_federation_holds_none_of_its_samples():
    """The gaussian dataset makes a client's samples when the client is used: 10,000,000
    clients, 1,000 a round in 16 dimensions, fit in 16 GiB (the estimate once counted the
    whole dataset on every rank, 39.8 GiB); the clients' own state is what grows."""
    gaussian = ['data.dataset="gaussian"', "server.clients_per_round=1000", "data.dim=16"]
    cfg = digits(*gaussian, "data.num_clients=10000000")
    terms = size_terms(cfg)
    assert "dataset" not in terms and "indices" not in terms
    assert max(terms, key=lambda t: terms[t][0]) == "population"
    check_sizes(cfg, 16 * GiB)
    many = digits('data.dataset="gaussian"', "data.num_clients=100000000")
    text = refusal(many, 16 * GiB)
    assert text.startswith("data.num_clients = 100000000: the population's per-client state")
    fits = int(text.rsplit("at most about ", 1)[1].split()[0].replace(",", ""))
    assert 10_000_000 < fits < 100_000_000


def test_every_dataset_is_estimated_by_its_spec():
    """Each registered dataset's classes and sample shape drive the estimate; a held
    dataset's bytes are its spec's."""
    for spec in dataset_specs():
        overrides = [f'data.dataset="{spec.name}"']
        if spec.needs_root:
            overrides.append('data.root="/nonexistent"')  # checked when it is read
        cfg = digits(*overrides)
        terms = size_terms(cfg)
        shape = spec.input_shape(cfg)
        assert parameter_count("mlp", shape, spec.classes(cfg), cfg.model.hidden) == num_params(
            build_model("mlp", shape, spec.classes(cfg), hidden=cfg.model.hidden)
        )
        held = terms.get("dataset", (0, ""))[0]
        assert held == spec.num_samples * spec.sample_bytes, spec.name


def project_configs() -> list[tuple[str, C.Config]]:
    """The presets (on digits and on the image datasets and models the project runs), the
    scale benchmark's rows (up to K = 100,000) and a gaussian federation."""
    from distfl.tools.bench.scale_grid import scale_cases

    out = [(name, C.load(preset=name)) for name in PRESETS]
    for name in ("default", "rotated", "table3-mixed"):
        for dataset, model in (("mnist5k", "lenet5"), ("cifar10", "cnn"), ("mnist", "mnist_cnn")):
            root = ["data.root=/d"] if dataset_spec(dataset).needs_root else []
            over = [f"data.dataset={dataset}", f"model.name={model}", *root,
                    "data.samples_per_client=500"]  # fmt: skip
            out.append((f"{name}-{dataset}-{model}", C.load(preset=name, overrides=over)))
    out += [(case.key, C.build(case.config())) for case in scale_cases()
            if case.clients <= 100_000]  # fmt: skip
    over = ["data.dataset=gaussian", "data.num_clients=1000", "data.dim=60"]
    out.append(("gaussian", C.load(preset="digits", overrides=over)))
    return out


def test_the_projects_configurations_are_never_refused():
    """Each fits a machine with 4 GiB available (the largest, FedGWC's 10,000 clients with
    their K×K matrices, is estimated at about 2.3 GiB)."""
    for name, cfg in project_configs():
        assert size_bytes(cfg) < 4 * GiB, name
        check_sizes(cfg, 4 * GiB)


# --------------------------------------------------------------------------- static bounds


def raises_naming(key: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        digits(*overrides)
    text = str(err.value)
    assert text.startswith(f"{key} = "), text
    return text


def test_threads_are_bounded():
    assert digits(f"run.threads={C.MAX_THREADS}").run.threads == C.MAX_THREADS
    text = raises_naming("run.threads", "run.threads=100000")
    assert f"between 1 and {C.MAX_THREADS}" in text
    raises_naming("run.threads", f"run.threads={C.MAX_THREADS + 1}")
    raises_naming("run.threads", "run.threads=0")


@pytest.mark.parametrize("key", ["train.lr", "server.lr"])
def test_learning_rates_are_positive_float32_numbers(key):
    # the largest float32 is a rate training may take (and diverge with); server.lr is
    # FedAvgM's
    reads = ['server.aggregator="fedavgm"'] if key == "server.lr" else []
    assert digits(*reads, f"{key}=3.4e38") is not None
    text = raises_naming(key, *reads, f"{key}=1e39")
    assert "positive and at most 3.403e+38" in text and "float32" in text
    raises_naming(key, *reads, f"{key}=0")
    raises_naming(key, *reads, f"{key}=-0.1")
    assert C.MAX_FLOAT32 == float(np.finfo(np.float32).max)


@pytest.mark.parametrize("key", ["train.weight_decay", "train.prox_mu"])
def test_penalties_are_non_negative_float32_numbers(key):
    assert digits(f"{key}=0", f"{key}=3.4e38") is not None
    text = raises_naming(key, f"{key}=1e39")
    assert "non-negative and at most 3.403e+38" in text
    raises_naming(key, f"{key}=-1e-3")


def test_samples_per_client_fit_in_int32():
    top = 2**31 - 1
    assert digits(f"data.samples_per_client={top}").data.samples_per_client == top
    text = raises_naming("data.samples_per_client", f"data.samples_per_client={top + 1}")
    assert f"between 2 and {top:,}" in text
    group = f"data.groups=[{{count=20, alpha=1.0, samples_per_client={top + 1}}}]"
    raises_naming("data.groups[0].samples_per_client", group)


def test_blur_kernels_are_bounded():
    ok = f"data.groups=[{{count=20, alpha=1.0, blur={C.MAX_BLUR}}}]"
    assert digits(ok).data.groups[0].blur == C.MAX_BLUR
    bad = f"data.groups=[{{count=20, alpha=1.0, blur={C.MAX_BLUR + 2}}}]"
    assert f"from 3 to {C.MAX_BLUR}" in raises_naming("data.groups[0].blur", bad)


def test_collective_timeout_is_bounded():
    assert digits(f"comm.timeout_s={C.MAX_TIMEOUT_S}").comm.timeout_s == C.MAX_TIMEOUT_S
    assert "at most 1e+09 seconds" in raises_naming("comm.timeout_s", "comm.timeout_s=1e39")
    raises_naming("comm.timeout_s", "comm.timeout_s=0")


def test_the_bounds_are_finite_numbers():
    for value in (C.MAX_THREADS, C.MAX_FLOAT32, C.MAX_SAMPLES_PER_CLIENT, C.MAX_BLUR):
        assert math.isfinite(value)
