"""What a failed round exits with: 1, a UserError with its own code (2), never 0 (a
plug-in's SystemExit(0) fails the run all the same)."""

from __future__ import annotations

import pytest

from distfl.errors import ConfigError, DataError, UserError
from distfl.runtime.protocol import failure_exit_code


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
