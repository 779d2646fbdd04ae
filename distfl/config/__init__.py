"""Run configuration: frozen dataclasses built from defaults, a preset, a TOML file and
``--set key=value`` overrides, in that order.

Every key is checked: an unknown key, a value of the wrong type or an impossible value
raises :class:`~distfl.errors.ConfigError` with one line naming the key and what is
allowed. The CLI turns that into exit code 2.

``[algorithm]`` holds ``name`` and the named algorithm's own keys, whose types, defaults and
checks are the algorithm's (its ``Params`` dataclass, found through the registry): this
package knows no algorithm. A layer (preset, file, ``--set``) that names another algorithm
than the layers before it starts that algorithm's keys from their defaults.

The package by concern: :mod:`~distfl.config.schema` (the sections, their keys and the
whole :class:`Config`), :mod:`~distfl.config.parse` (layers merged, values coerced, the
config built), :mod:`~distfl.config.checks` (values and their relations) and
:mod:`~distfl.config.reference` (every key for ``distfl keys`` and the docs). Everything a
caller needs is here.
"""

from distfl.config.checks import (
    MAX_ALPHA,
    MAX_BLUR,
    MAX_FLOAT32,
    MAX_SAMPLES_PER_CLIENT,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    NAME_MAX,
    check_out_path,
    check_world,
    validate,
)
from distfl.config.parse import MAX_CONFIG_BYTES, build, from_json, load, parse_set, read_toml
from distfl.config.reference import (
    describe_algorithm_keys,
    describe_dataset_keys,
    describe_keys,
    describe_model_keys,
)
from distfl.config.schema import (
    CHOICES,
    EXPORTS,
    AlgorithmSection,
    CheckpointSection,
    CommSection,
    Config,
    DataSection,
    EvalSection,
    GroupSpec,
    ModelSection,
    RunSection,
    ServerSection,
    StoredParams,
    TrainSection,
)
from distfl.config.toml import toml_string, toml_value
from distfl.errors import ConfigError
from distfl.presets import PRESETS

__all__ = [
    "CHOICES",
    "EXPORTS",
    "MAX_ALPHA",
    "MAX_BLUR",
    "MAX_CONFIG_BYTES",
    "MAX_FLOAT32",
    "MAX_SAMPLES_PER_CLIENT",
    "MAX_THREADS",
    "MAX_TIMEOUT_S",
    "NAME_MAX",
    "PRESETS",
    "AlgorithmSection",
    "CheckpointSection",
    "CommSection",
    "Config",
    "ConfigError",
    "DataSection",
    "EvalSection",
    "GroupSpec",
    "ModelSection",
    "RunSection",
    "ServerSection",
    "StoredParams",
    "TrainSection",
    "build",
    "check_out_path",
    "check_world",
    "describe_algorithm_keys",
    "describe_dataset_keys",
    "describe_keys",
    "describe_model_keys",
    "from_json",
    "load",
    "parse_set",
    "read_toml",
    "toml_string",
    "toml_value",
    "validate",
]
