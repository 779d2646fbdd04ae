"""The stop flag's answer to a second Ctrl-C (the handler called as the signal would call
it): raised at once, after a write of the run file, or not at all while the last completed
round is being kept as the run ends."""

from __future__ import annotations

import signal

import pytest

from distfl.runtime.stopping import StopFlag, StopNow


def ctrl_c(flag: StopFlag) -> None:
    flag(signal.SIGINT, None)


def test_a_first_ctrl_c_records_and_a_second_raises():
    flag = StopFlag()
    ctrl_c(flag)
    assert flag.name == "SIGINT"
    with pytest.raises(KeyboardInterrupt):
        ctrl_c(flag)


def test_a_first_ctrl_c_in_abandonable_work_gives_it_up():
    flag = StopFlag()
    with pytest.raises(StopNow), flag.abandonable():
        ctrl_c(flag)
    assert flag.name == "SIGINT"


def test_a_second_ctrl_c_during_a_write_is_raised_as_the_write_ends():
    flag = StopFlag()
    ctrl_c(flag)
    written = False
    with pytest.raises(KeyboardInterrupt), flag.writing():
        ctrl_c(flag)  # deferred
        written = True
    assert written


def test_ctrl_cs_while_the_last_round_is_kept_are_ignored():
    flag = StopFlag()
    ctrl_c(flag)
    with flag.keeping():
        ctrl_c(flag)
        with flag.writing():  # the write inside it does not raise either
            ctrl_c(flag)
        ctrl_c(flag)
    with pytest.raises(KeyboardInterrupt):  # after it, a Ctrl-C is a second one again
        ctrl_c(flag)
