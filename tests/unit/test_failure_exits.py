"""What a failed round exits with: 1, a UserError with its own code (2), never 0 (a
plug-in's SystemExit(0) fails the run all the same); and a worker's failure report carries
that code, the exception's type, first line and traceback to rank 0."""

from __future__ import annotations

import pytest

from distfl.comm.local import LocalCommunicator
from distfl.errors import ConfigError, DataError, UserError
from distfl.runtime.protocol import exchange_reports, failure_exit_code, failure_report


class _OwnCode(UserError):
    exit_code = 0  # a plug-in's UserError claiming success


class _BadCode(UserError):
    exit_code = "2"


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (RuntimeError("x"), 1),
        (SystemExit(0), 1),
        (SystemExit(2), 1),
        (SystemExit(), 1),
        (GeneratorExit(), 1),
        (ConfigError("x"), 2),
        (DataError("x"), 2),
        (_OwnCode("x"), 1),
        (_BadCode("x"), 1),
    ],
)
def test_a_failed_round_never_exits_0(exc, code):
    assert failure_exit_code(exc) == code


def test_a_failure_report_reaches_rank_0():
    try:
        raise ConfigError("the plug-in refuses this round\nand says more")
    except ConfigError as exc:
        report = failure_report(exc)
    got = exchange_reports(LocalCommunicator(), report)
    assert set(got) == {0}
    assert got[0]["code"] == 2 and got[0]["type"] == "ConfigError"
    assert got[0]["line"] == "the plug-in refuses this round"
    assert "Traceback (most recent call last)" in got[0]["traceback"]
    assert "test_a_failure_report_reaches_rank_0" in got[0]["traceback"]


def test_a_long_report_is_cut():
    exc = RuntimeError("x" * 100_000)
    got = exchange_reports(LocalCommunicator(), failure_report(exc))[0]
    assert len(got["line"]) == 1000 and len(got["traceback"]) <= 16384 + 4
    assert got["traceback"].startswith("...\n")


def test_no_report_is_none():
    assert exchange_reports(LocalCommunicator(), None) == {}
