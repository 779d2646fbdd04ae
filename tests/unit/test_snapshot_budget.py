"""The server's copy of the state before each round (what a round that raises falls back
to) stops only after RoundSnapshots.STRIKES rounds in a row cost more than the budget: one
copy that the OS paused on a busy machine does not give up the safety net."""

from distfl.runtime.snapshots import RoundSnapshots


def weigh(copies_s: list[float], round_s: float = 1.0) -> list[bool]:
    """``enabled`` after each round whose copy took ``copies_s[i]`` seconds."""
    snapshots = RoundSnapshots()
    after = []
    for s in copies_s:
        snapshots.copy_s = s
        snapshots.weigh(round_s)
        after.append(snapshots.enabled)
    return after


def test_a_cheap_copy_always_goes_on():
    assert weigh([0.001] * 10) == [True] * 10
    # 10 ms are allowed however short the round
    assert weigh([0.009] * 5, round_s=0.001) == [True] * 5


def test_lone_slow_copies_do_not_stop_it():
    # over 5% of a 1 s round, twice, each time followed by a cheap one
    assert weigh([0.2, 0.2, 0.001, 0.2, 0.001, 0.2, 0.2, 0.001]) == [True] * 8


def test_three_slow_copies_in_a_row_stop_it_for_good():
    assert RoundSnapshots.STRIKES == 3
    assert weigh([0.001, 0.2, 0.2, 0.2, 0.001, 0.001]) == [True, True, True, False, False, False]
