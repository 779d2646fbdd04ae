"""Datasets are registered specs: the built-in ones each in a file of their own, an
unknown name is an error naming the registered ones (never a default), a malformed spec
is refused when it registers, and the config checks read the spec, not the name."""

from __future__ import annotations

from pathlib import Path

import pytest
from datafiles import built_in_specs

import distfl.datasets
from distfl import config as C
from distfl.datasets import DEFAULT_DATASET, DatasetSpec, dataset_names, dataset_spec, register
from distfl.errors import ConfigError
from distfl.plugins import DATASETS


def test_the_built_in_datasets_are_registered_one_file_each():
    """Every module the registry finds in distfl/datasets/ registers one dataset, named as
    its file."""
    here = Path(distfl.datasets.__file__).parent
    files = sorted(
        p.stem for p in here.glob("*.py") if not (p.stem.startswith("_") or DATASETS.skip(p.stem))
    )
    names = [spec.name for spec in built_in_specs()]
    assert names == files
    for name in names:
        module = dataset_spec(name).__module__
        assert module == f"distfl.datasets.{name}", (name, module)
        assert Path(__import__(module, fromlist=["x"]).__file__).stem == name
    assert DEFAULT_DATASET in names and C.DataSection().dataset == DEFAULT_DATASET


def test_an_unknown_name_is_an_error_naming_the_registered_ones():
    with pytest.raises(ConfigError) as err:
        dataset_spec("imagenet")
    text = str(err.value)
    assert text.startswith(
        f"data.dataset = 'imagenet': allowed values are {', '.join(dataset_names())} ("
    )
    assert all(spec.name in text for spec in built_in_specs())
    assert "run.plugins" in text
    with pytest.raises(ConfigError, match="data.dataset = 'imagenet': allowed values"):
        C.load(preset="digits", overrides=['data.dataset="imagenet"'])


def _spec(**attrs):
    def load(cls, config):
        return None

    body = {"name": "toy", "num_classes": 3, "sample_shape": (4,), "load": classmethod(load)}
    body.update(attrs)
    return type("Toy", (DatasetSpec,), body)


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        ({"name": "Toy"}, ValueError, "lower-case name"),
        ({"name": ""}, ValueError, "lower-case name"),
        ({"num_classes": 1}, ValueError, "at least 2"),
        ({"natural": "sometimes"}, ValueError, "natural"),
        ({"sample_shape": ()}, ValueError, "sample_shape"),
        ({"sample_shape": (0, 4)}, ValueError, "sample_shape"),
        ({"load": DatasetSpec.__dict__["load"]}, TypeError, "no loader"),
    ],
)
def test_a_malformed_spec_is_refused_when_it_registers(attrs, error, match):
    with pytest.raises(error, match=match):
        register(_spec(**attrs))
    assert "toy" not in DATASETS


def test_a_taken_name_is_refused_and_the_same_class_may_register_again():
    with pytest.raises(ValueError, match="'digits' is taken by distfl.datasets.digits.Digits"):
        register(_spec(name="digits"))
    again = dataset_spec("digits")
    assert register(again) is again


def test_what_the_config_checks_comes_from_the_spec():
    natural = ", ".join(s.name for s in built_in_specs() if s.natural != "never")
    binary = ", ".join(s.name for s in built_in_specs() if s.num_classes == 2)
    with pytest.raises(ConfigError, match="data.root is empty: data.dataset = 'mnist'"):
        C.load(preset="digits", overrides=['data.dataset="mnist"'])
    with pytest.raises(ConfigError) as err:
        C.load(preset="digits", overrides=['data.partition="natural"'])
    assert str(err.value) == (
        "data.partition = 'natural': data.dataset = 'digits' has no natural owners (the "
        f"datasets that have them: {natural})"
    )
    with pytest.raises(ConfigError) as err:
        C.load(preset="digits", overrides=['train.loss="hinge"'])
    assert str(err.value) == (
        "train.loss = 'hinge' needs a binary problem: data.dataset = 'digits' has 10 classes "
        f"(the binary datasets: {binary})"
    )
    # the same keys on the datasets that take them
    C.load(preset="digits", overrides=['data.dataset="gaussian"', 'train.loss="hinge"'])
    C.load(preset="digits", overrides=['data.dataset="femnist"', 'data.root="/x"',
                                       'data.partition="natural"'])  # fmt: skip


def test_a_stored_config_of_an_unimported_dataset_is_kept_unchecked():
    """A run file's config names a plug-in's dataset: read without its plug-ins (reading
    never runs code), the name is kept and the checks that need the spec are skipped."""
    import json

    stored = json.loads(C.load(preset="digits").to_json())
    stored["data"]["dataset"] = "my_sensor_data"
    config = C.from_json(json.dumps(stored))
    assert config.data.dataset == "my_sensor_data"
    with pytest.raises(ConfigError, match="'my_sensor_data': allowed values"):
        C.from_json(json.dumps(stored), plugins=True)


def test_natural_partition_follows_the_spec():
    digits = C.load(preset="digits")
    gaussian = C.load(preset="digits", overrides=['data.dataset="gaussian"'])
    femnist = C.load(preset="digits", overrides=['data.dataset="femnist"', 'data.root="/x"'])
    natural = C.load(preset="digits", overrides=['data.dataset="femnist"', 'data.root="/x"',
                                                 'data.partition="natural"'])  # fmt: skip
    assert not dataset_spec("digits").natural_partition(digits)
    assert dataset_spec("gaussian").natural_partition(gaussian)  # always, whatever partition
    assert not dataset_spec("femnist").natural_partition(femnist)
    assert dataset_spec("femnist").natural_partition(natural)


def test_a_datasets_own_key_belongs_to_it():
    """``data.dim`` is gaussian's: given for another dataset it is an error saying whose it
    is (the line docs/configuration.md shows), checked by gaussian's own rules, and
    dropped by naming another dataset in a later layer."""
    with pytest.raises(ConfigError) as err:
        C.load(preset="digits", overrides=["data.dim=5"])
    assert str(err.value) == (
        "data.dim: not a key of [data] for data.dataset = 'digits' (it has no keys of its "
        "own); it is a key of data.dataset = 'gaussian'"
    )
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert " ".join(f"({str(err.value)})".split()) in " ".join(page.split()).replace("`", "")
    with pytest.raises(ConfigError, match=r"^data.dim = 1: must be at least 2"):
        C.load(preset="digits", overrides=['data.dataset="gaussian"', "data.dim=1"])
    g = C.load(preset="digits", overrides=['data.dataset="gaussian"', "data.dim=5"])
    assert g.data.dim == 5 and g.to_dict()["data"]["dim"] == 5
    assert "dim" not in C.load(preset="digits").to_dict()["data"]
    # a layer that names another dataset starts from that dataset's keys
    base = {"data": {"dataset": "gaussian", "dim": 7}}
    with_file = C.load(base=C.build(base), overrides=['data.dataset="digits"'])
    assert with_file.data.dataset == "digits" and not with_file.data.params.keys()


def test_a_file_written_when_dim_was_every_datasets_key_loads():
    """Run files before the datasets' own keys hold ``data.dim`` whatever their dataset:
    a dataset that does not take it drops it; gaussian keeps its value."""
    import json

    for dataset, dim, kept in [("digits", 2, ()), ("gaussian", 3, ("dim", "rotation_span"))]:
        stored = json.loads(C.load(preset="digits").to_json())
        stored["data"].update(dataset=dataset, dim=dim)
        config = C.from_json(json.dumps(stored))
        assert config.data.params.keys() == kept
        if kept:
            assert config.data.dim == dim


def test_a_registered_datasets_own_keys_are_taken_and_checked(monkeypatch):
    """A spec's Params are its [data] keys: taken for it, refused for another dataset with
    the name of the one that takes them."""
    from dataclasses import dataclass

    from distfl.algorithms.api.base import Params, setting

    @dataclass(frozen=True)
    class ToyParams(Params):
        scale: float = setting(1.0, "float > 0", "how far apart the toy's classes lie")

    monkeypatch.setitem(DATASETS._classes, "toy", _spec(Params=ToyParams))
    toy = C.load(preset="digits", overrides=['data.dataset="toy"', "data.scale=2.5"])
    assert toy.data.scale == 2.5 and toy.to_dict()["data"]["scale"] == 2.5
    with pytest.raises(ConfigError, match="it is a key of data.dataset = 'toy'"):
        C.load(preset="digits", overrides=["data.scale=2.5"])
    with pytest.raises(
        ConfigError,
        match=r"^unknown key data.scal in --set \(did you mean 'scale'\?\); allowed in \[data\]",
    ):
        C.load(preset="digits", overrides=['data.dataset="toy"', "data.scal=2.5"])
