"""Errors that are the user's to fix: the CLI prints one line and exits with code 2."""

import difflib
from collections.abc import Iterable


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the allowed name closest to a mistyped ``word``
    (difflib's ratio at least 0.6), else ``""``: the tail of a one-line error."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class UserError(Exception):
    """Bad input (config, data file, checkpoint). Printed as one line, exit code 2."""

    exit_code = 2


class ConfigError(UserError):
    """A config key or value that is not allowed."""


class DataError(UserError):
    """A data file that is missing or malformed."""


class CheckpointError(UserError):
    """A checkpoint that cannot be resumed: missing, corrupt, or from another config."""


class CommError(Exception):
    """A collective failed: a peer rank died, or a collective timed out."""

    exit_code = 3


class DivergedError(FloatingPointError):
    """Training diverged: a client update is NaN or Inf, or beyond the exact sums' range.
    Every rank learns it from the same all-reduced bounds and stops alike; printed as one
    line, exit code 4."""

    exit_code = 4


class RoundFailed(Exception):
    """A round raised on the server, or on a worker that told the server: the run file holds
    the last completed round (or the last checkpoint), the full traceback is in a file
    beside it. Printed as one line, exit code 1 (its ``exit_code``: a UserError's own where
    the round raised one)."""

    exit_code = 1


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt (a second Ctrl-C, or one raised by a plug-in) ended the run: its
    message says what the run file holds. Printed as one line, exit code 130."""

    exit_code = 130


class LoaderFailed(Exception):
    """A dataset's loader raised (a plug-in's, or a built-in one's for a reason that is no
    bad data file): nothing was run or written but the traceback, in a file beside the
    run file. Every rank meets it alike; rank 0 prints one line, exit code 1."""

    exit_code = 1


class RanksFailed(Exception):
    """A rank of a run launched from Python on several processes (``distfl.run(...,
    world_size=N)``) failed, and the others were stopped: the message is its one-line
    error (what ``distfl run`` prints after ``distfl: error:``, or the last line it wrote),
    ``rank`` which rank, ``exit_code`` its exit code (2: bad input, such as a data file;
    negative: ended by that signal), ``output`` every rank's standard error, each line
    after its rank's ``[rank R]``."""

    def __init__(self, message: str, *, rank: int, exit_code: int, output: str = "") -> None:
        super().__init__(message)
        self.rank, self.exit_code, self.output = rank, exit_code, output


class UnverifiedRunFile(UserWarning):
    """A run file read without an integrity record (distfl 0.1.0 wrote none): only its
    /state's SHA-256 was checked, the rest of what it holds is unverified."""
