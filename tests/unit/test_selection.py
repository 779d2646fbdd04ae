"""How a selection strategy decides within an algorithm's own draw: the uniform selection
returns it as it is, FedCS schedules its available clients (a client's several trainings
counted), FedPNS draws in its place by its probabilities times the algorithm's weights; a
plan naming a client the strategy did not choose is refused; a plan's clients count as
FedPNS's selected; and which strategies each algorithm refuses, against the docs' table."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from distfl import config as C
from distfl.algorithms import RoundPlan, algorithm_names
from distfl.errors import ConfigError
from distfl.participation.model import EVERYONE, Participation
from distfl.plugins import ALGORITHMS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "participation.md"
CLOCK = ('participation.resources="loguniform"', "participation.deadline=1.5",
         "train.local_steps=3")  # fmt: skip


def participation(*sets: str, num_clients: int = 20, num_params: int = 1000) -> Participation:
    cfg = C.load(preset="digits", overrides=[f"data.num_clients={num_clients}", *sets])
    return Participation(cfg, client_group=np.zeros(num_clients, dtype=np.int64),
                         num_train=np.full(num_clients, 30), num_params=num_params)  # fmt: skip


def test_the_uniform_selection_returns_the_algorithms_own_draw():
    own = np.array([17, 3, 8])
    for p in (EVERYONE, participation('participation.availability="fraction"',
                                      "participation.fraction=0.1")):  # fmt: skip
        rng = np.random.default_rng(0)
        assert p.draw(rng, 20, 3, own=lambda: own).tolist() == [17, 3, 8]
        # no number drawn: the generator is where the algorithm's own draw left it
        assert rng.random() == np.random.default_rng(0).random()


def test_fedcs_schedules_the_available_clients_of_the_algorithms_draw():
    from distfl.participation.fedcs import fedcs_select

    sets = (*CLOCK, 'participation.availability="fraction"', "participation.fraction=0.6")
    fedcs = participation(*sets, 'participation.selection="fedcs"')
    fedcs.begin(3)
    own = np.arange(20)[::-1]
    here = own[fedcs.available(own)]
    assert 0 < len(here) < 20
    chosen = fedcs.draw(np.random.default_rng(0), 20, 20, own=lambda: own)
    _, compute, up = fedcs.times(here)
    _, bandwidth = fedcs.resources(here)
    expected = here[fedcs_select(compute, up, bandwidth * 1e6 / 8, model_bytes=4000,
                                 round_s=1.5)]  # fmt: skip
    assert np.array_equal(chosen, expected) and 0 < len(chosen) < len(here)


def test_fedcs_counts_each_model_a_client_trains():
    """A client training 3 models downloads, trains and uploads 3 times: FedCS keeps fewer,
    and each it keeps meets the deadline on the clock with its 3 trainings."""
    fedcs = participation(*CLOCK, 'participation.selection="fedcs"')
    one = fedcs.draw(np.random.default_rng(4), 20, 12)
    three = fedcs.draw(np.random.default_rng(4), 20, 12, trainings=3)
    assert 0 < len(three) < len(one)
    assert set(three.tolist()) <= set(one.tolist())
    assert np.all(sum(fedcs.times(three, 3)) < 1.5)
    assert np.any(sum(fedcs.times(one, 3)) > 1.5)  # one training's schedule would be late


def test_fedpns_draws_by_its_probabilities_times_the_algorithms_priority():
    """Pool {2, 5, 9, 11}; FedPNS has lowered client 5's probability; the algorithm weighs
    the four 1, 1, 3, 0: one client drawn 4,000 times follows p_k·w_k normalised, and the
    client of weight 0 is never drawn."""
    p = participation('participation.selection="fedpns"')
    probs = p.selection.probabilities
    probs.penalise([5], [0.1])  # p_5 falls by p·(0.1 + 0.7)² = 64%
    pool = np.array([2, 5, 9, 11])
    weights = {2: 1.0, 5: 1.0, 9: 3.0, 11: 0.0}

    def priority(ids):
        return np.array([weights[int(k)] for k in ids])

    rng = np.random.default_rng(2)
    counts = dict.fromkeys(weights, 0)
    n = 4000
    for _ in range(n):
        (k,) = p.draw(rng, pool, 1, priority=priority).tolist()
        counts[k] += 1
    w = probs.prob(pool) * np.array([weights[int(k)] for k in pool])
    expected = w / w.sum()
    assert counts[11] == 0
    for k, e in zip(pool.tolist(), expected.tolist(), strict=True):
        assert abs(counts[k] - n * e) <= 5 * math.sqrt(n * e * (1 - e)) + 1, (k, counts, e)


def test_fedpns_with_no_client_labeled_is_the_algorithms_weighted_draw():
    """FedGWC's priority draw and FedPNS's from equal probabilities times the same weights
    pick the same clients from the same generator."""
    from distfl.algorithms.fedgwc.reference import priority_sample, priority_weights

    p = participation('participation.selection="fedpns"')
    members = np.array([1, 4, 6, 7, 10, 13, 15])
    counts = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 1, 0, 2, 0, 0, 0, 0])
    chosen = p.draw(np.random.default_rng(7), members, 3,
                    priority=lambda ids: priority_weights(counts[ids]))  # fmt: skip
    own = members[priority_sample(counts[members], 3, np.random.default_rng(7))]
    assert sorted(chosen.tolist()) == own.tolist()


@pytest.mark.parametrize("selection", ["fedcs", "fedpns"])
def test_a_plan_naming_a_client_the_strategy_did_not_choose_fails(selection):
    sets = CLOCK if selection == "fedcs" else ()
    p = participation(*sets, f'participation.selection="{selection}"')
    p.begin(4)
    chosen = p.draw(np.random.default_rng(1), 20, 5)
    p.admit(RoundPlan(round=4, train={int(k): "0" for k in chosen}))
    other = int(np.setdiff1d(np.arange(20), chosen)[0])
    with pytest.raises(RuntimeError, match=rf"round 4's plan trains 1 client.* \({other}\)"):
        p.admit(RoundPlan(round=4, train={int(chosen[0]): "0", other: "0"}))
    p.begin(5)  # a new round: last round's choice is not this one's
    with pytest.raises(RuntimeError, match="did not choose"):
        p.admit(RoundPlan(round=5, train={int(chosen[0]): "0"}))
    # the uniform selection admits any plan (a plan of every member)
    uniform = participation(*sets)
    uniform.begin(4)
    uniform.admit(RoundPlan(round=4, train=dict.fromkeys(range(20), "0")))


def test_fedpns_counts_the_clients_a_plan_names_not_every_draw():
    """A draw the algorithm leaves out of its plan (IFCA's cohort in its seeding round) is
    not a selection; each client of an admitted plan counts once."""
    p = participation('participation.selection="fedpns"')
    p.begin(1)
    drawn = p.draw(np.random.default_rng(0), 20, 6)
    seeding = p.draw(np.random.default_rng(1), 20, 20)
    p.admit(RoundPlan(round=1, train={int(k): "0" for k in seeding}))
    selected, _ = p.selection.probabilities.counts(np.arange(20))
    assert selected.tolist() == [1] * 20 and len(drawn) == 6


def documented_refusals() -> dict[tuple[str, str], bool]:
    """The table of docs/participation.md: (algorithm, strategy) -> whether it says refused."""
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \|$", DOCS.read_text(), re.MULTILINE)
    table = {}
    for name, fedcs, fedpns in rows:
        for selection, cell in (("fedcs", fedcs), ("fedpns", fedpns)):
            table[name, selection] = cell.startswith("refused")
    return table


def test_every_algorithm_refuses_what_the_docs_say_and_only_that():
    table = documented_refusals()
    # the built-in algorithms (another test may have registered one of its own)
    names = [n for n in algorithm_names()
             if ALGORITHMS.get(n).__module__.startswith("distfl.algorithms.")]  # fmt: skip
    assert sorted({a for a, _ in table}) == sorted(names)
    for name in names:
        cls = ALGORITHMS.get(name)
        assert cls.selection_refusal("uniform") is None
        for selection in ("fedcs", "fedpns"):
            assert bool(cls.selection_refusal(selection)) == table[name, selection], (
                name, selection)  # fmt: skip


@pytest.mark.parametrize(("algorithm", "selection", "needle"), [
    ("cfl", "fedcs", "plans every member of its clusters"),
    ("flcl", "fedpns", "plans every member of its clusters"),
    ("fedem", "fedpns", "soft membership"),
    ("local", "fedpns", "every client is its own cluster"),
])  # fmt: skip
def test_a_refused_strategy_is_a_config_error_naming_both(algorithm, selection, needle):
    """The run's checks before any work refuse it; the config itself reads (a file written
    with it before the refusal existed is still read)."""
    from distfl.runtime.participation import check_selection

    sets = [f'algorithm.name="{algorithm}"', f'participation.selection="{selection}"',
            'participation.resources="loguniform"', "participation.deadline=5"]  # fmt: skip
    config = C.load(preset="digits", overrides=sets)
    stored = C.from_json(config.to_json(), plugins=False)  # what a reader of the file does
    assert stored.participation.selection == selection
    with pytest.raises(ConfigError) as info:
        check_selection(config)
    line = str(info.value)
    assert f"participation.selection = {selection!r}" in line
    assert f"algorithm.name = {algorithm!r}" in line and needle in line and "\n" not in line


@pytest.mark.parametrize("own", [[3, 3], [25], [-1], [[1, 2]], [1.5]])
def test_an_algorithms_own_draw_must_be_distinct_clients_of_its_pool(own):
    p = participation('participation.availability="fraction"')
    with pytest.raises(ValueError, match="own draw must be"):
        p.draw(np.random.default_rng(0), 20, 2, own=lambda: np.array(own))
    with pytest.raises(ValueError, match="own draw must be"):
        p.draw(np.random.default_rng(0), np.arange(5, 15), 2, own=lambda: np.array([4]))


def test_a_priority_must_be_a_finite_weight_for_each_client():
    p = participation('participation.selection="fedpns"')
    for bad in (lambda ids: np.full(len(ids), np.nan), lambda ids: -np.ones(len(ids)),
                lambda ids: np.ones(len(ids) + 1)):  # fmt: skip
        with pytest.raises(ValueError, match="priority must be a finite weight"):
            p.draw(np.random.default_rng(0), np.arange(20), 3, priority=bad)
