"""The server's copy of the state before each round (what a round that raises falls back
to) stops only after SNAPSHOT_STRIKES rounds in a row cost more than the budget: one copy
that the OS paused on a busy machine does not give up the safety net."""

from types import SimpleNamespace

from distfl.runtime.server import Server


def weigh(copies_s: list[float], round_s: float = 1.0) -> list[bool]:
    """``snapshots`` after each round whose copy took ``copies_s[i]`` seconds."""
    server = SimpleNamespace(
        snapshots=True, snapshot_strikes=0, snapshot_s=0.0,
        SNAPSHOT_SHARE=Server.SNAPSHOT_SHARE, SNAPSHOT_FREE_S=Server.SNAPSHOT_FREE_S,
        SNAPSHOT_STRIKES=Server.SNAPSHOT_STRIKES,
    )  # fmt: skip
    after = []
    for s in copies_s:
        server.snapshot_s = s
        Server.weigh_snapshot(server, round_s)
        after.append(server.snapshots)
    return after


def test_a_cheap_copy_always_goes_on():
    assert weigh([0.001] * 10) == [True] * 10
    # 10 ms are allowed however short the round
    assert weigh([0.009] * 5, round_s=0.001) == [True] * 5


def test_lone_slow_copies_do_not_stop_it():
    # over 5% of a 1 s round, twice, each time followed by a cheap one
    assert weigh([0.2, 0.2, 0.001, 0.2, 0.001, 0.2, 0.2, 0.001]) == [True] * 8


def test_three_slow_copies_in_a_row_stop_it_for_good():
    assert Server.SNAPSHOT_STRIKES == 3
    assert weigh([0.001, 0.2, 0.2, 0.2, 0.001, 0.001]) == [True, True, True, False, False, False]
