"""The trace files of [participation]: device profiles (``resource_trace``) and
availability windows (``trace``), CSV with a header line. A file that is missing, not a
regular file or malformed is refused in one line that names the key, the file and the line
(a :class:`~distfl.errors.ConfigError`: exit code 2), before any work."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distfl.errors import ConfigError
from distfl.paths import regular_file

#: the largest trace file read (the whole file is held in memory)
MAX_TRACE_BYTES = 1 << 30

RESOURCE_HEADER = ("speed", "bandwidth")
WINDOW_HEADER = ("client", "start", "end")


def _lines(key: str, path: str, header: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    """The data lines of ``path`` as (line number, fields), its header checked."""
    expected = f"a CSV file with the header {','.join(header)}"
    if not path:
        raise ConfigError(f"{key} is empty: name {expected}")
    p = Path(path)
    try:
        odd = regular_file(p, MAX_TRACE_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path} does not exist (expected {expected})") from None
    except OSError as exc:
        raise ConfigError(f"{key}: {path} cannot be read ({exc.strerror})") from None
    if odd is not None:
        raise ConfigError(f"{key}: {path} is {odd}, not {expected}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {path} is not UTF-8 text (expected {expected})") from None
    except OSError as exc:
        raise ConfigError(f"{key}: {path} cannot be read ({exc.strerror})") from None
    rows = [(i, line.strip()) for i, line in enumerate(text.splitlines(), start=1)]
    rows = [(i, line) for i, line in rows if line and not line.startswith("#")]
    if not rows:
        raise ConfigError(f"{key}: {path} is empty (expected {expected})")
    first, head = rows[0]
    if tuple(f.strip().lower() for f in head.split(",")) != header:
        raise ConfigError(
            f"{key}: {path} line {first}: the header is {head!r}, expected {','.join(header)}"
        )
    out = [(i, [f.strip() for f in line.split(",")]) for i, line in rows[1:]]
    if not out:
        raise ConfigError(f"{key}: {path} has a header and no line after it")
    for i, fields in out:
        if len(fields) != len(header):
            raise ConfigError(
                f"{key}: {path} line {i}: {len(fields)} fields, expected {len(header)} "
                f"({','.join(header)})"
            )
    return out


def read_profiles(key: str, path: str) -> np.ndarray:
    """[n, 2] float64: each line's compute speed (samples/s) and bandwidth (Mbit/s), both
    positive and finite."""
    rows = []
    for i, fields in _lines(key, path, RESOURCE_HEADER):
        try:
            values = [float(f) for f in fields]
        except ValueError:
            values = []
        if len(values) != 2 or not all(math.isfinite(v) and v > 0 for v in values):
            raise ConfigError(
                f"{key}: {path} line {i}: {','.join(fields)!r} is not two positive numbers "
                "(speed in samples/s, bandwidth in Mbit/s)"
            )
        rows.append(values)
    return np.array(rows, dtype=np.float64)


@dataclass(frozen=True)
class Windows:
    """Availability windows by trace client, merged and sorted: client ``ids[i]`` is
    available at round t when some window [start, end] of it holds t."""

    ids: np.ndarray  # [c] the trace's client ids, ascending
    client: np.ndarray  # [w] each window's trace client, ascending with start
    start: np.ndarray  # [w]
    end: np.ndarray  # [w]

    def holds(self, trace_ids: np.ndarray, round_index: int) -> np.ndarray:
        """Whether round ``round_index`` lies in a window of each trace client."""
        span = int(self.end.max()) + 2
        t = min(int(round_index), span - 1)
        keys = self.client * span + self.start
        query = np.asarray(trace_ids, dtype=np.int64) * span + t
        pos = np.searchsorted(keys, query, side="right") - 1
        ok = pos >= 0
        pos = np.maximum(pos, 0)
        return ok & (self.client[pos] == trace_ids) & (self.end[pos] >= t)


def read_windows(key: str, path: str) -> Windows:
    """The windows of ``path`` (``client,start,end``: integers, client ≥ 0, 1 ≤ start ≤
    end), overlapping ones of a client merged."""
    rows = []
    for i, fields in _lines(key, path, WINDOW_HEADER):
        try:
            client, start, end = (int(f) for f in fields)
        except ValueError:
            raise ConfigError(
                f"{key}: {path} line {i}: {','.join(fields)!r} is not three integers "
                "(client,start,end)"
            ) from None
        if client < 0 or start < 1 or end < start or end > 2**40:
            raise ConfigError(
                f"{key}: {path} line {i}: {','.join(fields)!r} needs client ≥ 0 and "
                "1 ≤ start ≤ end (rounds, inclusive)"
            )
        rows.append((client, start, end))
    a = np.array(sorted(rows), dtype=np.int64)
    merged: list[list[int]] = []
    for client, start, end in a.tolist():
        if merged and merged[-1][0] == client and start <= merged[-1][2] + 1:
            merged[-1][2] = max(merged[-1][2], end)
        else:
            merged.append([client, start, end])
    m = np.array(merged, dtype=np.int64)
    return Windows(ids=np.unique(m[:, 0]), client=m[:, 0], start=m[:, 1], end=m[:, 2])


__all__ = ["MAX_TRACE_BYTES", "Windows", "read_profiles", "read_windows"]
