"""Models are registered specs: the four built-in ones build the modules and the bits they
built before and keep their configs as they were stored; a model of one's own declares its
keys under [model], which samples it takes (a one-line error naming the model and the
dataset where not), and is trained vectorised where torch.func can train it, sequentially
with a one-line note where not (batch norm's buffers, dropout), and never by a trainer it
cannot take; the memory check counts it; a stored config naming it is read without it."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
from dataclasses import dataclass

import h5py
import pytest
import torch
from torch import nn

from distfl import config as C
from distfl.cli import main
from distfl.errors import ConfigError
from distfl.model_specs import ModelSpec, Params, model_names, model_spec, register, setting
from distfl.models import LeNet5, MnistCNN, SmallCNN, build_model, flat_params, load_flat
from distfl.plugins import MODELS
from distfl.runtime.capacity import size_terms
from distfl.runtime.model_size import measured_counts, model_counts
from distfl.train import trainer_choice, trainer_kind


@dataclass(frozen=True)
class TinyParams(Params):
    width: int = setting(4, "int ≥ 1", "channels")
    norm: str = setting("group", "`group`, `batch`, `none`", "normalisation")
    dropout: float = setting(0.0, "[0, 1)", "dropout before the classifier")
    groups: int = setting(2, "int ≥ 1 dividing width", "groups of the group norm")
    choices = {"norm": ("group", "batch", "none")}

    def check(self, config):
        if self.width < 1:
            raise ConfigError(f"model.width = {self.width}: must be at least 1")


class TinyNet(nn.Module):
    def __init__(self, channels: int, num_classes: int, p: TinyParams):
        super().__init__()
        norm = {"group": nn.GroupNorm(p.groups, p.width), "batch": nn.BatchNorm2d(p.width),
                "none": nn.Identity()}[p.norm]  # fmt: skip
        self.features = nn.Sequential(nn.Conv2d(channels, p.width, 3, padding=1), norm, nn.ReLU())
        self.drop = nn.Dropout(p.dropout) if p.dropout else nn.Identity()
        self.head = nn.Linear(p.width, num_classes)

    def forward(self, x):
        return self.head(self.drop(self.features(x).mean(dim=(2, 3))))


class Tiny(ModelSpec):
    name = "tiny"
    network = "a convolution, a normalisation, a linear layer"
    source = "tests/unit/test_model_specs.py"
    Params = TinyParams

    @classmethod
    def accepts(cls, input_shape, num_classes, params):
        return "" if len(input_shape) == 3 else "images [C, H, W]"

    @classmethod
    def build(cls, input_shape, num_classes, params):
        return TinyNet(input_shape[0], num_classes, params)


@pytest.fixture
def tiny():
    """``tiny`` registered for one test (the registry is the process's)."""
    register(Tiny)
    try:
        yield Tiny
    finally:
        MODELS.remove("tiny")


DIGITS = ("--preset", "digits", "--set", "data.num_clients=4", "--set",
          "server.clients_per_round=4", "--set", "data.samples_per_client=20", "--set",
          "run.rounds=2", "--set", "eval.every=2", "--set", "train.local_steps=2",
          "--set", 'run.progress="none"')  # fmt: skip


def run_cli(tmp_path, *args: str) -> tuple[int, str]:
    """``distfl run ARGS --out tmp_path/run.h5`` in this process: (exit code, stderr)."""
    err = io.StringIO()
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", *DIGITS, *args, "--out", "run.h5"])
    finally:
        os.chdir(here)
    return code, err.getvalue()


# -- the built-in models ------------------------------------------------------------------


def test_the_built_in_models_are_registered_specs():
    assert model_names() == ["cnn", "lenet5", "mlp", "mnist_cnn"]
    assert {model_spec(n).__module__ for n in model_names()} == {"distfl.model_specs"}
    assert "torch" not in model_spec("cnn").__module__
    assert C.ModelSection().name == "mlp" and C.ModelSection().hidden == (64,)


@pytest.mark.parametrize(("name", "cls"), [("cnn", SmallCNN), ("lenet5", LeNet5),
                                           ("mnist_cnn", MnistCNN)])  # fmt: skip
def test_build_model_gives_the_modules_and_bits_it_gave(name, cls):
    torch.manual_seed(3)
    built = build_model(name, (1, 28, 28), 10)
    torch.manual_seed(3)
    direct = cls((1, 28, 28), 10)
    assert type(built) is cls
    assert torch.equal(flat_params(built), flat_params(direct))
    torch.manual_seed(3)
    mlp = build_model("mlp", (1, 8, 8), 10, hidden=(16, 8))
    assert [p.shape[0] for p in mlp.parameters()] == [16, 16, 8, 8, 10, 10]


def test_the_built_in_models_store_their_config_as_before():
    """Every built-in model's [model] table is {name, hidden}, as before each model had keys
    of its own (a stored config is checked against the digest its state was written with);
    a later layer naming another built-in model keeps model.hidden. The image models read
    no width: another value than the default is refused, but a stored one reads as
    written."""
    for name in ("mlp", "cnn", "lenet5", "mnist_cnn"):
        hidden = (8,) if name == "mlp" else (64,)
        config = C.load(preset="digits", overrides=[f'model.name="{name}"',
                                                    f"model.hidden={list(hidden)}"])  # fmt: skip
        assert config.to_dict()["model"] == {"name": name, "hidden": hidden}
        assert json.loads(config.to_json())["model"] == {"hidden": list(hidden), "name": name}
        assert C.from_json(config.to_json()) == config
    base = C.load(preset="digits", overrides=["model.hidden=[8]"])
    with pytest.raises(ConfigError, match=r"^model.hidden = \[8\] has no effect with model.name"):
        C.load(base=base, overrides=['model.name="lenet5"'])
    stored = json.loads(base.to_json())
    stored["model"]["name"] = "lenet5"
    assert C.from_json(json.dumps(stored)).model.hidden == (8,)


def test_the_model_keys_are_checked_as_before():
    with pytest.raises(ConfigError, match=r"^model.hidden\[1\] = 0: must be at least 1$"):
        C.load(overrides=["model.hidden=[64, 0]"])
    with pytest.raises(ConfigError, match=r"^unknown key model.widht in --set"):
        C.load(overrides=["model.widht=3"])
    with pytest.raises(ConfigError) as err:
        C.load(overrides=['model.name="transformer"'])
    assert str(err.value).startswith(
        "model.name = 'transformer': allowed values are cnn, lenet5, mlp, mnist_cnn ("
    )


def test_a_model_that_does_not_take_the_samples_is_one_line_naming_both(tmp_path):
    code, err = run_cli(tmp_path, "--set", 'data.dataset="gaussian"', "--set",
                        'model.name="cnn"')  # fmt: skip
    assert code == 2
    assert err == (
        "distfl: error: model.name = 'cnn' does not take data.dataset = 'gaussian' (samples "
        "of shape [2]): it needs images [C, H, W] of at least 4x4 pixels (two 2x2 poolings)\n"
    )
    assert not (tmp_path / "run.h5").exists()


# -- a model of one's own -----------------------------------------------------------------


def test_a_malformed_spec_is_refused_when_it_registers():
    with pytest.raises(TypeError, match="not a ModelSpec subclass"):
        register(TinyNet)
    with pytest.raises(ValueError, match="lower-case name"):
        register(type("Bad", (Tiny,), {"name": "Tiny"}))
    with pytest.raises(TypeError, match="has no build"):
        register(type("NoBuild", (ModelSpec,), {"name": "nobuild"}))
    with pytest.raises(ValueError, match="'mlp' is taken by distfl.model_specs.MLPSpec"):
        register(type("Other", (Tiny,), {"name": "mlp"}))
    assert "tiny" not in MODELS and "nobuild" not in MODELS


def test_its_keys_are_its_own(tiny):
    config = C.load(preset="digits", overrides=['model.name="tiny"', "model.width=6"])
    assert config.model.width == 6 and config.model.norm == "group"
    assert config.to_dict()["model"] == {"name": "tiny", "width": 6, "norm": "group",
                                         "dropout": 0.0, "groups": 2}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        C.load(preset="digits", overrides=["model.width=6"])
    assert str(err.value) == (
        "model.width: not a key of [model] for model.name = 'mlp' (its own keys: hidden); it "
        "is a key of model.name = 'tiny'"
    )
    with pytest.raises(ConfigError, match="^model.norm = 'layer': allowed values are group"):
        C.load(preset="digits", overrides=['model.name="tiny"', 'model.norm="layer"'])
    with pytest.raises(ConfigError, match="^model.width = 0: must be at least 1$"):
        C.load(preset="digits", overrides=['model.name="tiny"', "model.width=0"])
    # naming it after a layer that gave model.hidden drops the key it does not take
    base = C.load(preset="digits", overrides=["model.hidden=[8]"])
    assert "hidden" not in C.load(base=base, overrides=['model.name="tiny"']).to_dict()["model"]


def test_its_config_writes_as_toml_and_reads_back(tiny, tmp_path):
    """A key of its own named as a key of another section (``groups``, a list of tables in
    [data]) is written as the model's."""
    config = C.load(preset="digits", overrides=['model.name="tiny"', "model.groups=4"])
    (tmp_path / "c.toml").write_text(config.to_toml())
    assert C.load(path=tmp_path / "c.toml") == config


def test_a_stored_config_naming_it_is_read_without_it(tiny):
    stored = C.load(preset="digits", overrides=['model.name="tiny"', "model.width=6"]).to_dict()
    stored["run"]["plugins"] = ["tiny.py"]
    stored["model"]["widths"] = [2, 3]  # a list key, as a model of one's own may have
    text = json.dumps(stored, default=list)
    MODELS.remove("tiny")
    config = C.from_json(text)
    assert isinstance(config.model.params, C.StoredParams)
    assert (config.model.name, config.model.width, config.model.widths) == ("tiny", 6, [2, 3])
    assert json.loads(config.to_json())["model"] == json.loads(text)["model"]


@pytest.mark.parametrize(
    ("norm", "dropout", "kind", "why"),
    [
        ("group", 0.0, "vectorised", ""),
        ("none", 0.0, "vectorised", ""),
        ("batch", 0.0, "sequential", "it has buffers (features.1.running_mean, "
         "features.1.running_var, features.1.num_batches_tracked), which the vectorised "
         "trainer's torch.func step does not update per client (batch norm's running "
         "statistics are buffers)"),
        ("group", 0.5, "sequential", "torch.func cannot vectorise its training step ("),
    ],
)  # fmt: skip
def test_auto_trains_it_vectorised_where_torch_func_can(norm, dropout, kind, why):
    model = Tiny.build((1, 8, 8), 10, TinyParams(norm=norm, dropout=dropout))
    choice = trainer_choice("auto", model, "cpu", input_shape=(1, 8, 8), name="tiny")
    assert choice.kind == kind
    if not why:
        assert choice.note == ""
        assert trainer_kind("vectorised", model, input_shape=(1, 8, 8)) == "vectorised"
        return
    lead = ("note: model.name = 'tiny' trains with the sequential trainer, one client after "
            "another (train.trainer = 'auto'): ")  # fmt: skip
    assert choice.note.startswith(lead + why) and "\n" not in choice.note
    with pytest.raises(ConfigError) as err:
        trainer_kind("vectorised", model, input_shape=(1, 8, 8), name="tiny")
    assert str(err.value).startswith(
        f"train.trainer = 'vectorised': model.name = 'tiny' cannot train vectorised: {why}"
    )
    assert trainer_kind("sequential", model, input_shape=(1, 8, 8)) == "sequential"


def test_the_trainer_probe_leaves_the_generators_and_the_model_as_they_were():
    model = Tiny.build((1, 8, 8), 10, TinyParams())
    before, state = flat_params(model), torch.random.get_rng_state()
    assert trainer_kind("auto", model, input_shape=(1, 8, 8)) == "vectorised"
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(flat_params(model), before)


def test_the_batched_trainer_is_for_the_built_in_models_only():
    model = Tiny.build((1, 8, 8), 10, TinyParams())
    with pytest.raises(ConfigError, match="^train.trainer = 'batched': the batched trainer's"):
        trainer_kind("batched", model, name="tiny")
    assert trainer_kind("auto", build_model("mnist_cnn", (1, 8, 8), 10)) == "batched"


def test_loading_a_state_puts_the_buffers_back_to_their_initial_values(tiny):
    model = build_model("tiny", (1, 8, 8), 10, params=TinyParams(norm="batch"))
    start = [b.clone() for b in model.buffers()]
    model.train()
    model(torch.randn(5, 1, 8, 8))  # a client's training moves the running statistics
    assert not all(torch.equal(a, b) for a, b in zip(start, model.buffers(), strict=True))
    load_flat(model, flat_params(model))
    assert all(torch.equal(a, b) for a, b in zip(start, model.buffers(), strict=True))


def test_a_batch_norm_model_runs_sequentially_with_one_note(tmp_path, tiny):
    code, err = run_cli(tmp_path, "--set", 'model.name="tiny"', "--set", 'model.norm="batch"')
    assert code == 0, err
    notes = [line for line in err.splitlines() if "sequential trainer" in line]
    assert notes == [
        "distfl: note: model.name = 'tiny' trains with the sequential trainer, one client "
        "after another (train.trainer = 'auto'): it has buffers (features.1.running_mean, "
        "features.1.running_var, features.1.num_batches_tracked), which the vectorised "
        "trainer's torch.func step does not update per client (batch norm's running "
        "statistics are buffers)"
    ]
    with h5py.File(tmp_path / "run.h5", "r") as f:
        assert f["timing"].attrs["trainer"] == "sequential"
    (tmp_path / "run.h5").unlink()
    code, err = run_cli(tmp_path, "--set", 'model.name="tiny"', "--set", 'model.norm="batch"',
                        "--set", 'train.trainer="vectorised"')  # fmt: skip
    assert code == 2
    assert err.startswith(
        "distfl: error: train.trainer = 'vectorised': model.name = 'tiny' cannot train "
        "vectorised: it has buffers"
    )
    assert err.count("\n") == 1 and not (tmp_path / "run.h5").exists()


def test_the_memory_check_counts_its_parameters_and_activations(tiny):
    params = TinyParams(width=4)
    model = Tiny.build((1, 8, 8), 10, params)
    count, act = measured_counts(Tiny, (1, 8, 8), 10, params)
    assert count == sum(p.numel() for p in model.parameters()) == 4 * 9 + 4 + 8 + 40 + 10
    # conv, group norm, ReLU (4 x 8 x 8 each), the mean (4), the linear layer (10)
    assert act == 3 * 4 * 64 + 4 + 10
    assert model_counts("tiny", (1, 8, 8), 10, params) == (count, act)
    config = C.load(preset="digits", overrides=['model.name="tiny"'])
    terms = size_terms(config)
    assert f"the tiny of {count:,} parameters" in terms["model"][1]

    class Declared(Tiny):
        name = "tiny_declared"

        @classmethod
        def parameter_count(cls, input_shape, num_classes, params):
            return 7

    register(Declared)
    try:
        assert model_counts("tiny_declared", (1, 8, 8), 10, params) == (7, act)
    finally:
        MODELS.remove("tiny_declared")


def test_the_reference_lists_the_models_and_their_keys(tiny):
    """The reference (the docs' tables) lists distfl's own models, not a plug-in registered
    in this process; ``distfl keys`` lists the plug-in's keys too."""
    from distfl.tools.keys import key_rows
    from distfl.tools.reference import config_keys, model_keys_table, model_table

    table = model_table()
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == [
        "| `mlp`", "| `cnn`", "| `lenet5`", "| `mnist_cnn`",
    ]  # fmt: skip
    keys = model_keys_table()
    mlp = "| `mlp` | `model.hidden` | list of int ≥ 1 | `[64]` | hidden widths of the MLP |"
    assert mlp in keys
    assert "`tiny`" not in keys
    (name,) = [d for d in config_keys() if d.key == "model.name"]
    assert name.allowed == "`mlp`, `cnn`, `lenet5`, `mnist_cnn`"
    rows = {r.key: r for r in key_rows()}
    assert rows["model.hidden"].kind == "a list of integers"
    assert rows["model.name"].kind == "one of cnn, lenet5, mlp, mnist_cnn, tiny"
    assert dataclasses.asdict(C.load().model.params) == {"hidden": (64,)}
