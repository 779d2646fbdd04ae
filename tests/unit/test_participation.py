"""Participation's pure parts: the draws from (seed, client, round), the virtual clock
against a hand computation, dropouts and availability against their models (binomial
bounds), the trace files and their refusals, the uniform draw among the available clients,
and the config's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distfl import config as C
from distfl.algorithms import RoundPlan
from distfl.errors import ConfigError
from distfl.participation import draws
from distfl.participation.model import Participation
from distfl.participation.traces import read_profiles, read_windows

TWO_GROUPS = "data.groups=[{count = 10, alpha = 1000.0}, {count = 10, alpha = 1000.0}]"


def config(*sets: str, groups: str = TWO_GROUPS):
    return C.load(preset="digits", overrides=["data.num_clients=20", groups, *sets])


def participation(cfg, *, num_clients=20, num_train=None, num_params=1000, groups=None):
    g = np.zeros(num_clients, dtype=np.int64) if groups is None else np.asarray(groups)
    n = np.full(num_clients, 30) if num_train is None else np.asarray(num_train)
    return Participation(cfg, client_group=g, num_train=n, num_params=num_params)


def binomial_ok(hits: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(hits - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


# -- the draws ---------------------------------------------------------------------------


def test_a_clients_draw_depends_on_seed_what_client_and_round_alone():
    ids = np.arange(1000)
    u = draws.uniforms(7, draws.DROPOUT, ids, 3)
    # any subset, in any order, gives each client its own number
    pick = np.array([999, 5, 17, 5])
    assert np.array_equal(draws.uniforms(7, draws.DROPOUT, pick, 3), u[pick])
    for other in (draws.uniforms(8, draws.DROPOUT, ids, 3), draws.uniforms(7, draws.SPEED, ids, 3),
                  draws.uniforms(7, draws.DROPOUT, ids, 4)):  # fmt: skip
        assert np.mean(other == u) < 0.01
    assert u.min() >= 0 and u.max() < 1
    big = draws.uniforms(0, draws.AVAILABLE, np.arange(200_000), 1)
    assert abs(big.mean() - 0.5) < 0.005 and abs(big.var() - 1 / 12) < 0.002


# -- the virtual clock -------------------------------------------------------------------


def test_the_clock_against_a_hand_computation():
    """speed 50 samples/s, 8 Mbit/s (10^6 bytes/s) each way, P = 1000 float32 parameters,
    S = 5 local steps of min(B = 10, n_k) samples:
    download 4000 B / 10^6 B/s = 0.004 s; upload (4000 + 8·5 + 8) B = 0.004048 s;
    compute 5·10/50 = 1 s for n_k ≥ 10, 5·4/50 = 0.4 s for n_k = 4."""
    cfg = config('participation.resources="loguniform"', "participation.speed_min=50",
                 "participation.speed_max=50", "participation.bandwidth_min=8",
                 "participation.bandwidth_max=8", "train.local_steps=5",
                 "train.batch_size=10")  # fmt: skip
    num_train = np.full(20, 30)
    num_train[3] = 4
    p = participation(cfg, num_train=num_train)
    down, compute, up = p.times([0, 3])
    assert np.allclose(down, 0.004) and np.allclose(up, 0.004048)
    assert np.allclose(compute, [1.0, 0.4])
    # two models (soft membership) take twice each part
    assert np.allclose(sum(p.times([0], 2)), 2 * (0.004 + 1.0 + 0.004048))
    p.begin(1)
    plan = RoundPlan(round=1, train={0: "0", 3: "0"})
    admitted, took_part = p.admit(plan)
    assert admitted.train == plan.train
    assert took_part.round_s == pytest.approx(0.004 + 1.0 + 0.004048)
    assert (took_part.dropped, took_part.late, took_part.unavailable) == (0, 0, 0)


def test_a_deadline_discards_the_late_reports_and_the_round_lasts_until_it():
    """With a deadline of 0.5 s only client 3 (0.408048 s) reports; the round lasts 0.5 s.
    Group 1 computes twice as fast (speed_scale 2): client 15 takes 0.508048 s, still late."""
    groups = ("data.groups=[{count = 10, alpha = 1000.0}, "
              "{count = 10, alpha = 1000.0, speed_scale = 2.0}]")  # fmt: skip
    cfg = config('participation.resources="loguniform"', "participation.speed_min=50",
                 "participation.speed_max=50", "participation.bandwidth_min=8",
                 "participation.bandwidth_max=8", "train.local_steps=5", "train.batch_size=10",
                 "participation.deadline=0.5", groups=groups)  # fmt: skip
    num_train = np.full(20, 30)
    num_train[3] = 4
    p = participation(cfg, num_train=num_train, groups=np.repeat([0, 1], 10))
    assert p.times([15])[1][0] == pytest.approx(0.5)
    p.begin(1)
    plan = RoundPlan(round=1, train={0: "0", 3: "0", 15: "0"}, return_models=frozenset({0, 3}),
                     client_state={0: np.ones(2), 3: np.zeros(2)})  # fmt: skip
    admitted, took_part = p.admit(plan)
    assert admitted.train == {3: "0"}
    assert admitted.return_models == frozenset({3})
    assert list(admitted.client_state) == [3]
    assert took_part.late == 2 and took_part.round_s == 0.5 and took_part.lost_trainings == 2


def test_without_participation_a_plan_passes_unchanged():
    p = participation(config())
    plan = RoundPlan(round=1, train={1: "0", 2: "0"})
    admitted, took_part = p.admit(plan)
    assert admitted is plan and math.isnan(took_part.round_s) and took_part.removed == 0


# -- dropouts and availability -------------------------------------------------------------


def test_the_dropout_rate_of_each_group_within_a_binomial_bound():
    groups = ("data.groups=[{count = 10, alpha = 1000.0}, "
              "{count = 10, alpha = 1000.0, dropout = 0.6}]")  # fmt: skip
    cfg = config("participation.dropout=0.1", groups=groups)
    K = 100_000
    g = np.repeat([0, 1], K // 2)
    p = participation(cfg, num_clients=K, groups=g)
    total = np.zeros(2, dtype=np.int64)
    for t in (1, 2, 3):
        p.begin(t)
        gone = p.dropped(np.arange(K))
        total += np.bincount(g[gone], minlength=2)
    n = 3 * K // 2
    assert binomial_ok(int(total[0]), n, 0.1) and binomial_ok(int(total[1]), n, 0.6)
    p.begin(4)
    assert not np.array_equal(p.dropped(np.arange(100)), gone[:100])  # a new draw each round


def test_availability_follows_its_share_and_daily_swing():
    """f = 0.5 for group 0 and a quarter of that for group 1; with a diurnal swing a = 0.8
    each client's chance at round t is clip(f·(1 + a·sin(2π(t/P + φ_k))), 0, 1): the
    observed availability over many clients matches the mean of those chances."""
    groups = ("data.groups=[{count = 10, alpha = 1000.0}, "
              "{count = 10, alpha = 1000.0, availability = 0.125}]")  # fmt: skip
    K = 60_000
    g = np.repeat([0, 1], K // 2)
    flat = participation(config('participation.availability="fraction"',
                                "participation.fraction=0.5", groups=groups),
                         num_clients=K, groups=g)  # fmt: skip
    flat.begin(3)
    ok = flat.available(np.arange(K))
    for group, f in ((0, 0.5), (1, 0.125)):
        assert binomial_ok(int(ok[g == group].sum()), K // 2, f)
    cfg = config(
        'participation.availability="fraction"',
        "participation.fraction=0.5",
        "participation.diurnal=0.8",
        "participation.period=6",
        groups=groups,
    )
    swing = participation(cfg, num_clients=K, groups=g)
    ids = np.arange(K)
    phase = draws.uniforms(cfg.run.seed, draws.PHASE, ids)
    for t in (1, 2, 5):
        swing.begin(t)
        f = np.where(g == 0, 0.5, 0.125)
        chance = np.clip(f * (1 + 0.8 * np.sin(2 * np.pi * (t / 6 + phase))), 0, 1)
        hits = swing.available(ids)
        # the sum of independent Bernoullis: mean Σp, variance Σp(1−p)
        assert abs(hits.sum() - chance.sum()) <= 5 * math.sqrt((chance * (1 - chance)).sum())
        # the same client at the same round: the same answer, alone or among others
        assert np.array_equal(swing.available(ids[::7]), hits[::7])


def test_a_trace_says_who_is_available(tmp_path):
    path = tmp_path / "windows.csv"
    path.write_text("client,start,end\n# a comment\n3,1,2\n3,5,5\n3,2,3\n7,4,10\n")
    w = read_windows("participation.trace", str(path))
    assert list(w.ids) == [3, 7]
    assert [(c, s, e) for c, s, e in zip(w.client, w.start, w.end, strict=True)] == [
        (3, 1, 3),
        (3, 5, 5),
        (7, 4, 10),
    ]  # overlapping windows of client 3 merged
    expected = {1: [1, 0], 3: [1, 0], 4: [0, 1], 5: [1, 1], 6: [0, 1], 11: [0, 0]}
    for t, want in expected.items():
        assert w.holds(np.array([3, 7]), t).astype(int).tolist() == want, t
    cfg = config('participation.availability="trace"', f"participation.trace={str(path)!r}")
    p = participation(cfg, num_clients=1000)
    ids = np.arange(1000)
    p.begin(5)
    assert p.available(ids).all()  # both trace clients hold round 5
    p.begin(1)
    on = p.available(ids)
    assert 0.3 < on.mean() < 0.7  # the clients that follow trace client 3
    p.begin(12)
    assert not p.available(ids).any()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "is empty"),
        ("client,begin,end\n1,1,2\n", "line 1: the header is 'client,begin,end'"),
        ("client,start,end\n", "has a header and no line after it"),
        ("client,start,end\n1,2\n", "line 2: 2 fields, expected 3"),
        ("client,start,end\n1,1,2\n1,x,2\n", "line 3: '1,x,2' is not three integers"),
        ("client,start,end\n1,5,2\n", "line 2: '1,5,2' needs client ≥ 0 and 1 ≤ start ≤ end"),
        ("client,start,end\n-1,1,2\n", "line 2"),
    ],
)
def test_a_malformed_window_trace_is_refused_naming_the_line(tmp_path, text, needle):
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_windows("participation.trace", str(path))
    assert needle in str(info.value) and "participation.trace" in str(info.value)


def test_a_profile_trace_and_its_refusals(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("speed,bandwidth\n10,1\n100,50\n")
    profiles = read_profiles("participation.resource_trace", str(path))
    assert profiles.values.tolist() == [[10, 1], [100, 50]] and len(profiles) == 2
    for text, needle in (("speed,bandwidth\n10,0\n", "line 2: '10,0' is not two positive"),
                         ("speed,bandwidth\n10,nan\n", "line 2"),
                         ("speed\n10\n", "expected speed,bandwidth")):  # fmt: skip
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            read_profiles("participation.resource_trace", str(path))
        assert needle in str(info.value)
    with pytest.raises(ConfigError, match="does not exist .expected a CSV file with the header"):
        read_profiles("participation.resource_trace", str(tmp_path / "none.csv"))
    with pytest.raises(ConfigError, match="is a directory"):
        read_profiles("participation.resource_trace", str(tmp_path))
    path.write_text("speed,bandwidth\n10,1\n100,50\n")
    cfg = config('participation.resources="trace"', f"participation.resource_trace={str(path)!r}")
    speed, bandwidth = participation(cfg, num_clients=2000).resources(np.arange(2000))
    assert set(speed.tolist()) == {10.0, 100.0}
    assert np.array_equal(bandwidth, np.where(speed == 10.0, 1.0, 50.0))  # profiles kept whole


# -- the draw ------------------------------------------------------------------------------


def test_without_participation_a_draw_is_the_old_choice():
    p = participation(config(), num_clients=50)
    for pool in (50, np.arange(10, 40)):
        a, b = np.random.default_rng(3), np.random.default_rng(3)
        assert np.array_equal(p.draw(a, pool, 7), b.choice(pool, size=7, replace=False))


@pytest.mark.parametrize("K", [200, 100_000])  # a pool enumerated, one proposed into
def test_a_draw_takes_available_clients_only_and_each_alike(K):
    cfg = config('participation.availability="fraction"', "participation.fraction=0.3")
    p = participation(cfg, num_clients=K)
    p.begin(2)
    on = p.available(np.arange(K))
    rng = np.random.default_rng(0)
    counts = np.zeros(K, dtype=np.int64)
    draws_made = 300 if K == 200 else 20
    for _ in range(draws_made):
        chosen = p.draw(rng, K, 10)
        assert len(chosen) == 10 == len(set(chosen.tolist()))
        assert on[chosen].all()
        counts[chosen] += 1
    if K == 200:  # each available client drawn alike: 300·10/|available| each
        mean = draws_made * 10 / on.sum()
        assert np.abs(counts[on] - mean).max() < 6 * math.sqrt(mean)
    # a pool of member ids, and fewer available than asked for: all of them
    members = np.arange(0, K, max(1, K // 40))
    chosen = p.draw(rng, members, len(members))
    assert set(chosen.tolist()) == set(members[on[members]].tolist())


def test_a_draw_from_a_large_pool_with_few_available_still_finds_them():
    """Availability 0.0005 of 100,000 clients: the proposals give up and the pool is
    enumerated; the draw is every available client when fewer than asked."""
    cfg = config('participation.availability="fraction"', "participation.fraction=0.0005")
    K = 100_000
    p = participation(cfg, num_clients=K)
    p.begin(1)
    on = np.flatnonzero(p.available(np.arange(K)))
    chosen = p.draw(np.random.default_rng(1), K, 200)
    assert sorted(chosen.tolist()) == on.tolist()


# -- the config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["participation.fraction=1.5"], "participation.fraction = 1.5: must be a share"),
        (["participation.dropout=1.0"], "participation.dropout = 1.0: must be a probability"),
        (["participation.diurnal=-0.1"], "participation.diurnal = -0.1"),
        (["participation.period=0"], "participation.period = 0"),
        (["participation.speed_min=0"], "participation.speed_min = 0"),
        (
            ["participation.bandwidth_max=0.5"],
            "participation.bandwidth_max = 0.5: must be at least",
        ),
        (["participation.deadline=5"], "participation.deadline needs the clients' resources"),
        (['participation.selection="fedcs"'], "selection = 'fedcs' schedules"),
        (['participation.availability="trace"'], "needs participation.trace"),
        (['participation.trace="a.csv"'], "only with participation.availability = 'trace'"),
        (['participation.availability="sometimes"'], "participation.availability = 'sometimes'"),
    ],
)
def test_bad_participation_keys_are_refused(sets, needle):
    with pytest.raises(ConfigError) as info:
        config(*sets)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("group", "needle"),
    [
        ("availability = 2.0", "data.groups[1].availability = 2.0: must be -1"),
        ("availability = -0.5", "data.groups[1].availability = -0.5"),
        ("dropout = 1.0", "data.groups[1].dropout = 1.0"),
        ("speed_scale = 0.0", "data.groups[1].speed_scale = 0.0: must be a positive"),
    ],
)
def test_bad_group_participation_keys_are_refused(group, needle):
    groups = f"data.groups=[{{count = 10, alpha = 1000.0}}, {{count = 10, alpha = 1.0, {group}}}]"
    with pytest.raises(ConfigError) as info:
        config(groups=groups)
    assert needle in str(info.value)


# -- the selection strategies in a run -------------------------------------------------------


def test_fedcs_keeps_of_a_uniform_draw_what_its_schedule_fits():
    from distfl.participation.fedcs import fedcs_select

    sets = ('participation.resources="loguniform"', "participation.deadline=1.5",
            "train.local_steps=3")  # fmt: skip
    fedcs = participation(config(*sets, 'participation.selection="fedcs"'), num_clients=20)
    uniform = participation(config(*sets), num_clients=20)
    drawn = uniform.draw(np.random.default_rng(4), 20, 10)
    chosen = fedcs.draw(np.random.default_rng(4), 20, 10)
    down, compute, up = fedcs.times(drawn)
    _, bandwidth = fedcs.resources(drawn)
    expected = drawn[fedcs_select(compute, up, bandwidth * 1e6 / 8, model_bytes=4000,
                                  round_s=1.5)]  # fmt: skip
    assert np.array_equal(chosen, expected) and 0 < len(chosen) < 10
    assert np.all(sum(fedcs.times(chosen)) <= 1.5)  # each fits alone, on the clock too


def test_fedpns_aggregates_the_reports_it_keeps_and_lowers_the_labeled():
    """Four clients of one cluster from a start of zeros; client 9's change opposes the
    others': the optimal aggregation leaves it out (min_kept = ceil(0.5·4) = 2), the
    cluster's model is the sample-weighted mean of the three kept, and client 9's
    probability falls below the others'."""
    from distfl.algorithms import ClientReports

    cfg = config('participation.selection="fedpns"', "participation.pns_kept=0.5")
    p = participation(cfg, num_clients=20, num_params=2)
    clients = np.array([1, 4, 7, 9])
    models = np.array([[1.0, 0.1], [0.9, 0.0], [1.1, -0.1], [-3.0, 0.2]], dtype=np.float32)
    n = np.array([10, 20, 30, 40])
    plan = RoundPlan(round=1, train={int(k): "0" for k in clients})
    reports = ClientReports(clients=clients, losses=np.zeros((4, 2)), num_samples=n,
                            models=models)  # fmt: skip
    p.selection.probabilities.record_selected(clients)
    chosen, rejected = p.after_training(plan, reports, {"0": np.zeros(2, dtype=np.float32)})
    assert rejected == 1
    kept = models[:3].astype(np.float64)
    expected = ((n[:3, None] * kept).sum(axis=0) / n[:3].sum()).astype(np.float32)
    assert np.array_equal(chosen["0"], expected)
    prob = p.selection.probabilities.prob(np.arange(20))
    assert prob[9] < prob[1] == prob[0] and prob.sum() == pytest.approx(1.0)
    # its loss: p·min((1/1 + 0.7)², 1) = all of it
    assert prob[9] == 0.0
