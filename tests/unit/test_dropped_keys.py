"""Every key a run read nowhere, found by reading where each key is read (and checked by
runs: tests/integration/test_keys_take_effect.py): each is now refused in one line naming
the key, the settings that leave it without effect and where it would take effect, and
is taken where it does."""

from __future__ import annotations

import pytest

from distfl import config as C
from distfl.errors import ConfigError

FEMNIST = ('data.dataset="femnist"', 'data.root="/srv/femnist"', 'data.partition="natural"')
GROUPS = "data.groups=[{count=10, alpha=0.5}, {count=10, %s}]"

#: every key that a run read nowhere, with a config that set it; each ran before
#: (distfl 7850ae6) as if it were not there
DROPPED = [
    (["server.lr=0.5"], "server.lr"),
    (["server.momentum=0.5"], "server.momentum"),
    (['server.aggregator="fairavg"', "server.momentum=0.5"], "server.momentum"),
    (['server.aggregator="fedprox"', "train.prox_mu=0.01", "server.lr=2.0"], "server.lr"),
    (['comm.backend="local"', "comm.timeout_s=60"], "comm.timeout_s"),
    (['comm.backend="local"', 'server.placement="static"'], "server.placement"),
    (['train.trainer="sequential"', "train.chunk_mb=64"], "train.chunk_mb"),
    (['data.root="/data"'], "data.root"),
    (['data.dataset="gaussian"', 'data.root="/data"'], "data.root"),
    (['data.dataset="gaussian"', 'data.partition="natural"'], "data.partition"),
    ([*FEMNIST, "data.samples_per_client=50"], "data.samples_per_client"),
    ([*FEMNIST, "data.quantity_skew=0.5"], "data.quantity_skew"),
    (["participation.fraction=0.5"], "participation.fraction"),
    (["participation.diurnal=0.3"], "participation.diurnal"),
    (['participation.availability="fraction"', "participation.period=12"],
     "participation.period"),
    (["participation.speed_min=10"], "participation.speed_min"),
    (['participation.resources="trace"', 'participation.resource_trace="r.csv"',
      "participation.speed_max=100"], "participation.speed_max"),
    (["participation.bandwidth_min=0.5"], "participation.bandwidth_min"),
    (["participation.bandwidth_max=10"], "participation.bandwidth_max"),
    (["participation.pns_alpha=1.0"], "participation.pns_alpha"),
    (['participation.selection="uniform"', "participation.pns_beta=0.5"],
     "participation.pns_beta"),
    (["participation.pns_kept=0.5"], "participation.pns_kept"),
    ([GROUPS % 'partition="shards", shards_per_client=2, alpha=0.3'], "data.groups[1].alpha"),
    ([GROUPS % 'alpha=1.0, class_choice="deterministic"'], "data.groups[1].class_choice"),
    (['data.dataset="gaussian"', "data.groups=[{count=10}, {count=10, classes=[0]}]"],
     "data.groups[1].classes"),
    ([*FEMNIST, "data.groups=[{count=10}, {count=10, samples_per_client=30}]"],
     "data.groups[1].samples_per_client"),
    ([GROUPS % "alpha=1.0, availability=0.5"], "data.groups[1].availability"),
    ([GROUPS % "alpha=1.0, speed_scale=2.0"], "data.groups[1].speed_scale"),
    ([GROUPS % "alpha=1.0, bandwidth_scale=2.0"], "data.groups[1].bandwidth_scale"),
    (['model.name="cnn"', "model.hidden=[128]"], "model.hidden"),
    (['model.name="lenet5"', "model.hidden=[16, 16]"], "model.hidden"),
    (['algorithm.name="ifca"', 'algorithm.init="random"', "algorithm.fedavg_rounds=3"],
     "algorithm.fedavg_rounds"),
    (['algorithm.name="fesem"', 'algorithm.init="random"', "algorithm.fedavg_rounds=3"],
     "algorithm.fedavg_rounds"),
    (['algorithm.name="emdcfl"', "algorithm.reg=0.1"], "algorithm.reg"),
    (['algorithm.name="fedgwc"', "algorithm.alpha=0.5", "algorithm.min_alpha=0.2"],
     "algorithm.min_alpha"),
    (['algorithm.name="fedgwc"', "algorithm.reference_draws=0",
      "algorithm.reference_ratio=0.3"], "algorithm.reference_ratio"),
    (['algorithm.name="fedclust"', "algorithm.num_clusters=2", "algorithm.threshold=3.0"],
     "algorithm.threshold"),
    (['algorithm.name="pacfl"', "algorithm.num_clusters=2", "algorithm.threshold=5.0"],
     "algorithm.threshold"),
    (['algorithm.name="pfedgraph"', "algorithm.lam=0", 'algorithm.sign="code"'],
     "algorithm.sign"),
    (['algorithm.name="fedsac"', "algorithm.lam=0", 'algorithm.sign="code"'],
     "algorithm.sign"),
]  # fmt: skip


@pytest.mark.parametrize(("sets", "key"), DROPPED, ids=[f"{k}-{i}" for i, (_, k) in
                                                         enumerate(DROPPED)])  # fmt: skip
def test_a_key_a_run_would_drop_is_refused_in_one_line(sets, key):
    with pytest.raises(ConfigError) as err:
        C.load(overrides=["data.num_clients=20", *sets])
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"{key} = ") and " has no effect with " in line, line
    assert "it takes effect only with " in line, line


def test_the_same_keys_are_taken_where_they_take_effect():
    """Each key of :data:`DROPPED` with the setting that reads it is accepted."""
    for sets in (
        ['server.aggregator="fedavgm"', "server.lr=0.5", "server.momentum=0.5"],
        ['comm.backend="torch"', "comm.timeout_s=60", 'server.placement="static"'],
        ['train.trainer="vectorised"', "train.chunk_mb=64"],
        ['data.dataset="femnist"', 'data.root="/srv"', 'data.draw="sequential"',
         "data.samples_per_client=50", "data.quantity_skew=0.5"],
        ['data.dataset="gaussian"', "data.samples_per_client=50", "data.quantity_skew=0.5"],
        ['data.dataset="gaussian"', "data.groups=[{count=12}, {count=8, rotation=90.0}]"],
        [*FEMNIST, "data.groups=[{count=10}, {count=10, name='b'}]"],
        ['participation.availability="fraction"', "participation.fraction=0.5",
         "participation.diurnal=0.3", "participation.period=12"],
        ['participation.resources="loguniform"', "participation.speed_min=10",
         "participation.bandwidth_max=10", GROUPS % "alpha=1.0, speed_scale=2.0"],
        ['participation.selection="fedpns"', "participation.pns_alpha=1.0"],
        ['algorithm.name="ifca"', "algorithm.fedavg_rounds=3"],
        ['algorithm.name="fedgwc"', "algorithm.min_alpha=0.2", "algorithm.reference_ratio=0.3"],
        ['algorithm.name="pfedgraph"', 'algorithm.sign="code"'],
        ['model.name="mlp"', "model.hidden=[128]"],
    ):  # fmt: skip
        C.load(overrides=["data.num_clients=20", *sets])


@pytest.mark.parametrize(
    ("sets", "key"),
    [([*FEMNIST, "data.groups=[{count=10}, {count=10, alpha=1.0}]"], "data.groups[1].alpha"),
     (['data.dataset="gaussian"', "data.groups=[{count=20, alpha=0.5}]"],
      "data.groups[0].alpha")],
)  # fmt: skip
def test_a_natural_partitions_group_alpha_is_warned_of(sets, key):
    """A dirichlet group had to give alpha whatever the partition (distfl 7850ae6 refused
    one without it, and a natural partition dropped it silently): it now needs none there,
    and one given is warned of in one line, not refused (the configs written before)."""
    from distfl.config.effects import warning_lines

    (line,) = warning_lines(C.load(overrides=["data.num_clients=20", *sets]))
    assert line.startswith(f"{key} = ") and " has no effect with " in line, line
    assert "drawn from the pooled dataset" in line and "\n" not in line


def test_a_pooled_dirichlet_group_without_alpha_is_refused():
    with pytest.raises(ConfigError, match=r"data.groups\[0\].alpha is missing"):
        C.load(overrides=["data.num_clients=20", "data.groups=[{count=20}]"])
