"""Every numeric key at the edges of what a number can be: each value is refused with one
line naming the key (a ConfigError) or accepted, and an accepted one goes through the
arithmetic a run does before any work (the size check, which draws the clients' sample
counts) without an exception or a numeric warning. The keys come from the schema itself:
its sections, a group's keys, and every registered algorithm's, dataset's and model's own
keys, so that a key added later is covered too."""

from __future__ import annotations

import math
import warnings
from typing import Any, get_args, get_origin, get_type_hints

import numpy as np
import pytest

from distfl.config import Config, GroupSpec, load
from distfl.config.parse import INT_OR_WORD
from distfl.data.partition import sample_counts
from distfl.errors import ConfigError
from distfl.plugins import ALGORITHMS, DATASETS, MODELS
from distfl.runtime.capacity import size_terms

#: a small federation every value is tried in (clients_per_round within num_clients)
TINY = ["data.num_clients=4", "data.samples_per_client=20", "server.clients_per_round=2"]
#: the values tried, as TOML: beyond 64 bits and at its edge, -1, 0, beyond float32 and at
#: float64's edges, the infinities, NaN and a subnormal
EXTREMES = ["1" + "0" * 400, str(2**63), str(2**63 - 1), "-1", "0", "1e308", "-1e308",
            "inf", "-inf", "nan", "1e-320"]  # fmt: skip


def _numeric(tp: Any) -> bool:
    if get_origin(tp) is tuple:
        return get_args(tp)[0] in (int, float)
    return tp in (int, float, INT_OR_WORD)


def numeric_keys() -> list[tuple[str, Any, tuple[str, ...]]]:
    """(key as ``--set`` names it, its type, the ``--set`` items that select its owner):
    every numeric key of the schema's sections, of a group (``groups.<key>``), and of each
    registered algorithm, dataset and model."""
    out = []
    for section, cls in get_type_hints(Config).items():
        if section not in ("algorithm", "model"):
            out += [(f"{section}.{k}", tp, ()) for k, tp in get_type_hints(cls).items()
                    if _numeric(tp)]  # fmt: skip
    out += [(f"groups.{k}", tp, ()) for k, tp in get_type_hints(GroupSpec).items() if _numeric(tp)]
    owners = [("algorithm", "algorithm.name", name, cls.Params) for name, cls in ALGORITHMS.items()]
    owners += [("data", "data.dataset", s.name, s.Params) for s in DATASETS.classes()]
    owners += [("model", "model.name", s.name, s.Params) for s in MODELS.classes()]
    roots = {s.name for s in DATASETS.classes() if s.needs_root}
    for section, selector, name, params in owners:
        pick = (f'{selector}="{name}"',)
        if section == "data" and name in roots:  # (a dataset that reads no file takes none)
            pick += ('data.root="/data"',)
        out += [(f"{section}.{k}", tp, pick) for k, tp in get_type_hints(params).items()
                if _numeric(tp)]  # fmt: skip
    return out


def _item(key: str, tp: Any, value: str) -> tuple[str, str]:
    """The ``--set`` item giving ``key`` the TOML ``value``, and the name its error gives."""
    if key.startswith("groups."):
        name = key.split(".")[1]
        group = {"count": "4", "alpha": "1.0", name: f"[{value}]" if get_origin(tp) else value}
        inner = ", ".join(f"{k} = {v}" for k, v in group.items())
        return f"data.groups=[{{{inner}}}]", "data.groups"
    return (f"{key}=[{value}]" if get_origin(tp) is tuple else f"{key}={value}"), key


KEYS = numeric_keys()


def test_the_keys_come_from_every_part_of_the_schema():
    names = {key for key, _, _ in KEYS}
    for key in ("run.rounds", "data.quantity_skew", "participation.deadline", "groups.noise",
                "algorithm.lam", "data.dim", "model.hidden", "eval.clients"):  # fmt: skip
        assert key in names
    assert len(KEYS) > 100


@pytest.mark.parametrize(("key", "tp", "pick"), KEYS, ids=[f"{k}-{p[:1]}" for k, _, p in KEYS])
def test_every_numeric_key_takes_or_refuses_every_extreme(key, tp, pick):
    accepted = []
    for value in EXTREMES:
        item, name = _item(key, tp, value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                config = load(preset="digits", overrides=[*TINY, *pick, item])
            except ConfigError as exc:
                line = str(exc)
                assert name in line and "\n" not in line and len(line) < 400, (item, line)
                continue
            with np.errstate(over="raise", divide="raise", invalid="raise"):
                size_terms(config)  # the clients' sample counts and every size, before work
        accepted.append(value)
    # what a run cannot hold is refused whatever the key: no integer beyond 64 bits and no
    # number that is not finite
    for value in ("1" + "0" * 400, "inf", "-inf", "nan"):
        assert value not in accepted, (key, value)


@pytest.mark.parametrize("sigma", [10.0, 5.0, 1e-320])
def test_quantity_skew_counts_stay_in_range_up_to_its_bound(sigma):
    """Up to the bound (10), the sample counts of even the largest clients stay in [2, 2³¹ − 1]
    without an overflow."""
    groups = (GroupSpec(count=5000, alpha=1.0, samples_per_client=2**31 - 1),)
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        counts = sample_counts(groups, samples_per_client=80, quantity_skew=sigma, seed=3)
    assert counts.dtype == np.int64
    assert counts.min() >= 2 and counts.max() <= 2**31 - 1


def test_quantity_skew_beyond_its_bound_is_refused_naming_it():
    from distfl.config.checks import MAX_QUANTITY_SKEW

    assert MAX_QUANTITY_SKEW == 10.0
    for value in (10.1, 1e308):
        with pytest.raises(ConfigError, match=r"data\.quantity_skew = .*from 0 \(no skew\) to 10"):
            load(preset="digits", overrides=[f"data.quantity_skew={value!r}"])
    assert math.isclose(
        load(preset="digits", overrides=["data.quantity_skew=10"]).data.quantity_skew, 10.0
    )


# -- where an accepted value reaches arithmetic: at each bound it computes, beyond it is refused


def refused(*items: str, naming: str) -> str:
    """The one line refusing the ``--set`` ``items`` (on the digits preset), naming ``naming``."""
    with pytest.raises(ConfigError) as info:
        load(preset="digits", overrides=[*TINY, *items])
    line = str(info.value)
    assert naming in line and "\n" not in line, line
    return line


@pytest.mark.parametrize("name", ["noise", "shift"])
def test_noise_and_shift_stay_finite_in_float32_up_to_their_bound(name):
    from distfl.data.transforms import feature_shift, gaussian_noise

    x = np.ones((50, 8), dtype=np.float32)
    with np.errstate(over="raise", invalid="raise"):
        if name == "noise":
            out = gaussian_noise(x, 1e30, seed=0, client=3)
        else:
            out = feature_shift(x, 1e30, seed=0, group=1)
    assert out.dtype == np.float32 and np.isfinite(out).all() and np.abs(out).max() > 1e25
    refused(f"data.groups=[{{count=4, alpha=1.0, {name}=1.1e30}}]",
            naming=f"data.groups[0].{name} = 1.1e+30: must be from 0 to 1e+30")  # fmt: skip


def test_the_virtual_clock_stays_finite_at_the_resources_bounds():
    from distfl.participation.model import training_seconds

    with np.errstate(over="raise", divide="raise", invalid="raise"):
        slow = training_seconds(1e-6 * 1e-6, 1e-6 * 1e-6, num_params=10**9,
                                local_steps=10**6, samples=2**31)  # fmt: skip
        fast = training_seconds(1e15 * 1e6, 1e15 * 1e6, num_params=1, local_steps=1, samples=1)
    assert all(np.isfinite(t) and t > 0 for t in (*slow, *fast))
    sets = ['participation.resources="loguniform"']
    refused(*sets, "participation.speed_min=1e-7", naming="participation.speed_min = 1e-07")
    refused(*sets, "participation.bandwidth_max=2e15", naming="participation.bandwidth_max")
    for name, value in (("speed_scale", "1e7"), ("bandwidth_scale", "1e-7")):
        refused(*sets, f"data.groups=[{{count=4, alpha=1.0, {name}={value}}}]",
                naming=f"data.groups[0].{name}")  # fmt: skip


def test_the_collaboration_graphs_rows_at_their_bounds():
    """FedSaC's λ1, λ2 up to 1e12 and pFedGraph's α down to 1e-12: every row is still a
    point of the simplex (the projection keeps its precision); beyond, refused."""
    from distfl.algorithms.common.graph import graph_rows
    from distfl.algorithms.fedsac.graph import sac_row

    rng = np.random.default_rng(5)
    p = rng.random(6)
    p /= p.sum()
    c, s = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6)
    rows = [sac_row(p, c, s, 1e12, 1e12),
            *graph_rows(rng.random(6) + 0.1, rng.uniform(-1, 1, (6, 6)), 1e-12)]  # fmt: skip
    for row in rows:
        assert row.min() >= 0 and math.isclose(row.sum(), 1.0, rel_tol=1e-9)
    sac = 'algorithm.name="fedsac"'
    refused(sac, "algorithm.lambda1=1.1e12",
            naming="algorithm.lambda1 = 1100000000000.0: must be from 0 to 1e+12")  # fmt: skip
    refused(sac, "algorithm.lambda2=1e308", naming="algorithm.lambda2")
    refused(sac, "algorithm.components=1025", naming="algorithm.components = 1025")
    refused('algorithm.name="pfedgraph"', "algorithm.alpha=1e-13", naming="algorithm.alpha")


@pytest.mark.parametrize("algorithm", ["fedsac", "pfedgraph", "fedsoft"])
def test_a_local_terms_lambda_is_at_most_the_largest_float32(algorithm):
    name = f'algorithm.name="{algorithm}"'
    assert load(preset="digits", overrides=[*TINY, name, "algorithm.lam=3.4e38"])
    refused(name, "algorithm.lam=3.5e38", naming="algorithm.lam = 3.5e+38")


def test_fine_tuning_steps_are_bounded_and_counted_by_the_size_check():
    from distfl.runtime.capacity import check_sizes

    ft = 'algorithm.name="fedavg_ft"'
    refused(ft, "algorithm.finetune_steps=1000001", naming="algorithm.finetune_steps = 1000001")
    cifar = ['data.dataset="cifar10"', 'data.root="/data"', 'model.name="cnn"']
    config = load(
        preset="digits", overrides=[*TINY, *cifar, ft, "algorithm.finetune_steps=1000000"]
    )
    with pytest.raises(ConfigError) as info:  # the batched trainer holds every step's batch
        check_sizes(config, 8 * 2**30)
    line = str(info.value)
    assert line.startswith("algorithm.finetune_steps = 1000000: the trainer's")
    assert "its 1,000,000 local steps" in line and "local steps fit" in line
