"""The trace files of [participation]: device profiles (``resource_trace``) and
availability windows (``trace``), CSV with a header line. A file that is missing, not a
regular file or malformed is refused in one line that names the key, the file and the line
(a :class:`~distfl.errors.ConfigError`: exit code 2), before any work.

A trace is read as a stream, a block of lines at a time, and what a run keeps of it is
what its clients follow: the trace's client ids (the draw of the trace client each run
client follows needs their number and order) and the windows of the trace clients drawn,
or the number of profiles, the fastest of them and the profiles drawn. A block of plain
numbers (digits, commas, a decimal point) is parsed by numpy; any other block line by
line, where a malformed line is named."""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from distfl.errors import ConfigError
from distfl.paths import regular_file

#: the largest trace file read
MAX_TRACE_BYTES = 1 << 30
#: the bytes read at a time, cut after the last whole line (a longer line is refused)
BLOCK_BYTES = 1 << 18
#: the last round a window may name, and the largest trace client id
MAX_ROUND, MAX_CLIENT = 2**40, 2**63 - 1

RESOURCE_HEADER = ("speed", "bandwidth")
WINDOW_HEADER = ("client", "start", "end")

#: which rows of a trace a reader keeps: given the number of trace clients (windows) or of
#: profiles, their positions (what :meth:`Participation._pick
#: <distfl.participation.model.Participation._pick>` draws); None keeps every one
Keep = Callable[[int], np.ndarray] | None


def nothing(count: int) -> np.ndarray:
    """Keep no row: a trace read to be checked (and its counts and fastest profile)."""
    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class _Format:
    """A trace's header and how one of its lines reads: ``row`` gives the line's values,
    or what is wrong with it; ``fine`` whether rows parsed as plain numbers hold."""

    header: tuple[str, ...]
    decimals: bool
    row: Callable[[list[str]], tuple | str]
    fine: Callable[[np.ndarray], bool]


def _window(fields: list[str]) -> tuple | str:
    try:
        client, start, end = (int(f) for f in fields)
    except ValueError:
        return "is not three integers (client,start,end)"
    if not (0 <= client <= MAX_CLIENT and 1 <= start <= end <= MAX_ROUND):
        return "needs client ≥ 0 and 1 ≤ start ≤ end (rounds, inclusive; end ≤ 2^40)"
    return client, start, end


def _profile(fields: list[str]) -> tuple | str:
    try:
        values = tuple(float(f) for f in fields)
    except ValueError:
        values = ()
    if len(values) != 2 or not all(math.isfinite(v) and v > 0 for v in values):
        return "is not two positive numbers (speed in samples/s, bandwidth in Mbit/s)"
    return values


WINDOWS = _Format(WINDOW_HEADER, False, _window,
                  lambda r: bool((r[:, 1] >= 1).all() and (r[:, 2] >= r[:, 1]).all()
                                 and (r[:, 2] <= MAX_ROUND).all()))  # fmt: skip
PROFILES = _Format(RESOURCE_HEADER, True, _profile, lambda r: bool((r > 0).all()))

_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _plain_rows(block: bytes, width: int, decimals: bool) -> np.ndarray | None:
    """The lines of ``block`` as an [n, width] array when each is ``width`` plain numbers
    (digits, with ``decimals`` at most one point, 15 digits at most then, 18 else: exactly
    what ``float`` and ``int`` make of them), else None (the block is read line by line)."""
    if block.translate(None, b"0123456789,.\n" if decimals else b"0123456789,\n"):
        return None
    buf = np.frombuffer(block if block.endswith(b"\n") else block + b"\n", dtype=np.uint8)
    sep = np.flatnonzero((buf == ord(",")) | (buf == ord("\n")))
    n = len(sep) // width
    ends = np.zeros(width, dtype=bool)
    ends[-1] = True
    if not n or len(sep) != n * width or not np.array_equal(buf[sep] == 10, np.tile(ends, n)):
        return None
    first = np.concatenate(([0], sep[:-1] + 1))
    size = sep - first  # each field's characters, right-aligned in `wide` columns
    wide = int(size.max())
    if size.min() < 1 or wide > (16 if decimals else 18):
        return None
    at = sep[:, None] + np.arange(-wide, 0)
    chars = np.where(at >= first[:, None], buf[at], ord("0"))
    weights = _POW10[wide - 1 :: -1]
    if not decimals:
        return ((chars - ord("0")).astype(np.int64) @ weights).reshape(n, width)
    point = chars == ord(".")
    points = point.sum(axis=1)
    if points.max() > 1 or (size - points).min() < 1 or (size - points).max() > 15:
        return None
    # read with the point as a 0, the digits left of it are worth ten times too much
    value = np.where(point, 0, chars - ord("0")).astype(np.int64) @ weights
    shift = np.where(points > 0, wide - 1 - point.argmax(axis=1), 0)  # digits after it
    low = np.where(points > 0, value % _POW10[shift], 0)
    mantissa = np.where(points > 0, (value - low) // 10 + low, value)
    return (mantissa / 10.0**shift).reshape(n, width)  # both exact: correctly rounded


@dataclass
class _Trace:
    """One trace file, open; :meth:`rows` reads it through once (again: from its start)."""

    key: str
    path: str
    form: _Format
    fd: int = -1
    seen: tuple = ()
    lines: int = 0  # the lines read so far

    @property
    def expected(self) -> str:
        return f"a CSV file with the header {','.join(self.form.header)}"

    def refuse(self, what: str) -> ConfigError:
        return ConfigError(f"{self.key}: {self.path} {what}")

    def __enter__(self) -> _Trace:
        if not self.path:
            raise ConfigError(f"{self.key} is empty: name {self.expected}")
        try:
            odd = regular_file(self.path, MAX_TRACE_BYTES)
            if odd is None:  # opened without blocking, and checked again once open
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
                self.seen = self._identity()
                odd = None if stat.S_ISREG(os.fstat(self.fd).st_mode) else "not a regular file"
        except FileNotFoundError:
            raise self.refuse(f"does not exist (expected {self.expected})") from None
        except OSError as exc:
            raise self.refuse(f"cannot be read ({exc.strerror})") from None
        if odd is not None:
            self.__exit__()
            raise self.refuse(f"is {odd}, not {self.expected}")
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _identity(self) -> tuple:
        s = os.fstat(self.fd)
        return (s.st_ino, s.st_size, s.st_mtime_ns)

    def _blocks(self) -> Iterator[bytes]:
        """The file from its start in blocks of whole lines (the last one as it ends)."""
        if self._identity() != self.seen:
            raise self.refuse("changed while it was read")
        os.lseek(self.fd, 0, os.SEEK_SET)
        rest = b""
        while True:
            try:
                more = os.read(self.fd, BLOCK_BYTES)
            except OSError as exc:
                raise self.refuse(f"cannot be read ({exc.strerror})") from None
            if not more:
                break
            rest += more
            cut = rest.rfind(b"\n") + 1 or rest.rfind(b"\r", 0, len(rest) - 1) + 1
            if cut:
                yield rest[:cut]
                rest = rest[cut:]
            elif len(rest) > BLOCK_BYTES:  # not read whole: a line of no end costs O(n²)
                raise self.refuse(f"line {self.lines + 1}: longer than {BLOCK_BYTES >> 10} "
                                  "KiB, not a line of a trace")  # fmt: skip
        if rest:
            yield rest

    def rows(self) -> Iterator[np.ndarray]:
        """Each block's data lines as an [n, width] array, in the file's order, the header
        and every line checked."""
        form, width = self.form, len(self.form.header)
        self.lines, header, data = 0, False, False
        for block in self._blocks():
            rows = _plain_rows(block, width, form.decimals) if header else None
            if rows is not None and form.fine(rows):
                self.lines += len(rows)
            else:
                rows, header = self._line_by_line(block, header)
            data = data or len(rows) > 0
            yield rows
        if not header:
            raise self.refuse(f"is empty (expected {self.expected})")
        if not data:
            raise self.refuse("has a header and no line after it")

    def _line_by_line(self, block: bytes, header: bool) -> tuple[np.ndarray, bool]:
        form, width = self.form, len(self.form.header)
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            raise self.refuse(f"is not UTF-8 text (expected {self.expected})") from None
        out = []
        for line in text.splitlines():
            self.lines += 1
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not header:
                if tuple(f.strip().lower() for f in line.split(",")) != form.header:
                    raise self.refuse(f"line {self.lines}: the header is {line!r}, expected "
                                      f"{','.join(form.header)}")  # fmt: skip
                header = True
                continue
            fields = [f.strip() for f in line.split(",")]
            if len(fields) != width:
                raise self.refuse(f"line {self.lines}: {len(fields)} fields, expected {width} "
                                  f"({','.join(form.header)})")  # fmt: skip
            row = form.row(fields)
            if isinstance(row, str):
                raise self.refuse(f"line {self.lines}: {','.join(fields)!r} {row}")
            out.append(row)
        dtype = np.float64 if form.decimals else np.int64
        return np.array(out, dtype=dtype).reshape(len(out), width), header


def _wanted(keep: Keep, count: int) -> np.ndarray | None:
    return None if keep is None else _distinct(np.asarray(keep(count), dtype=np.int64))


@dataclass(frozen=True)
class Profiles:
    """The device profiles of a resource trace: ``len()`` its lines, ``fastest`` the
    largest speed and the largest bandwidth of any line, and the lines read (``rows``,
    ascending, holding ``values``): ``profiles[rows, column]`` reads them as an [n, 2]
    array of every line would, and refuses a line that was not kept."""

    count: int
    fastest: tuple[float, float]
    rows: np.ndarray  # [m] the lines kept, ascending (0: the first line after the header)
    values: np.ndarray  # [m, 2] their speed (samples/s) and bandwidth (Mbit/s)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: tuple) -> np.ndarray:
        rows, column = index
        rows = np.asarray(rows, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.rows, rows), max(len(self.rows) - 1, 0))
        if rows.size and (not len(self.rows) or not np.array_equal(self.rows[at], rows)):
            raise IndexError("a profile that was not kept when the trace was read")
        return self.values[at, column]


def read_profiles(key: str, path: str, *, keep: Keep = None) -> Profiles:
    """Each line's compute speed (samples/s) and bandwidth (Mbit/s), both positive and
    finite; of the lines ``keep`` names (every one by default) their values, of the
    others only their number and the fastest."""
    count, top, held = 0, np.zeros(2), []
    with _Trace(key, path, PROFILES) as trace:
        for rows in trace.rows():
            count += len(rows)
            top = np.maximum(top, rows.max(axis=0, initial=0.0))
            if keep is None:
                held.append(rows)
        wanted = _wanted(keep, count)
        if wanted is None:
            wanted = np.arange(count)
        elif len(wanted):
            offset = 0
            for rows in trace.rows():
                mine = wanted[(wanted >= offset) & (wanted < offset + len(rows))]
                held.append(rows[mine - offset])
                offset += len(rows)
    values = np.concatenate(held) if held else np.zeros((0, 2))
    return Profiles(count=count, fastest=(float(top[0]), float(top[1])), rows=wanted,
                    values=values)  # fmt: skip


@dataclass(frozen=True)
class Windows:
    """Availability windows by trace client, merged and sorted: client ``ids[i]`` is
    available at round t when some window [start, end] of it holds t. ``kept``: the trace
    clients whose windows are held (None: every one)."""

    ids: np.ndarray  # [c] the trace's client ids, ascending
    client: np.ndarray  # [w] each window's trace client, ascending with start
    start: np.ndarray  # [w]
    end: np.ndarray  # [w]
    kept: np.ndarray | None = None

    @cached_property
    def _keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the clients with windows, the distinct starts, each window's key: its client's
        rank among them and its start's, together; ascending, and far from int64's end)."""
        owners, starts = np.unique(self.client), np.unique(self.start)
        rank = np.searchsorted(owners, self.client)
        keys = rank * (len(starts) + 1) + np.searchsorted(starts, self.start, side="right")
        return owners, starts, keys

    def holds(self, trace_ids: np.ndarray, round_index: int) -> np.ndarray:
        """Whether round ``round_index`` lies in a window of each trace client."""
        trace_ids = np.asarray(trace_ids, dtype=np.int64)
        if self.kept is not None and not np.isin(trace_ids, self.kept).all():
            raise ValueError("a trace client whose windows were not kept when it was read")
        owners, starts, keys = self._keys
        if not len(owners):
            return np.zeros(len(trace_ids), dtype=bool)
        rank = np.minimum(np.searchsorted(owners, trace_ids), len(owners) - 1)
        t = int(round_index)
        query = rank * (len(starts) + 1) + np.searchsorted(starts, t, side="right")
        pos = np.searchsorted(keys, query, side="right") - 1
        ok = pos >= 0
        pos = np.maximum(pos, 0)
        return ok & (self.client[pos] == trace_ids) & (self.end[pos] >= t)


def read_windows(key: str, path: str, *, keep: Keep = None) -> Windows:
    """The windows of ``path`` (``client,start,end``: integers, client ≥ 0, 1 ≤ start ≤
    end ≤ 2^40), overlapping or adjacent ones of a client merged; every trace client's id,
    and the windows of those ``keep`` names (their positions among the ids; every one by
    default)."""
    ids, pending, held = np.zeros(0, dtype=np.int64), [], []
    with _Trace(key, path, WINDOWS) as trace:
        for rows in trace.rows():
            pending.append(_distinct(rows[:, 0]))
            if sum(map(len, pending)) > len(ids):  # merged as they double: O(c log c)
                ids, pending = _distinct(np.concatenate([ids, *pending])), []
            if keep is None:
                held.append(rows)
        ids = _distinct(np.concatenate([ids, *pending]))
        wanted = _wanted(keep, len(ids))
        kept = None if wanted is None else ids[wanted]
        if kept is not None and len(kept):
            held = [rows[np.isin(rows[:, 0], kept)] for rows in trace.rows()]
    client, start, end = _merged(np.concatenate(held) if held else np.zeros((0, 3), np.int64))
    return Windows(ids=ids, client=client, start=start, end=end, kept=kept)


def _distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending (by a sort: numpy's hashed ``unique`` took
    seconds for the ids of a trace of millions of clients)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def _merged(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(client, start, end) of the windows of ``rows`` with those of a client that overlap
    or touch merged, by (client, start): each window is +1 at its start and -1 after its
    end; a client's count starts and ends at 0, and a merged window runs from where it
    leaves 0 to where it comes back (a start before an end at the same round: touching
    windows merge)."""
    n = len(rows)
    client = np.concatenate([rows[:, 0], rows[:, 0]])
    at = np.concatenate([rows[:, 1], rows[:, 2] + 1])
    step = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((-step, at, client))
    client, at, step = client[order], at[order], step[order]
    level = np.cumsum(step)
    opens = (step == 1) & (level == 1)
    closes = (step == -1) & (level == 0)
    return client[opens], at[opens], at[closes] - 1


__all__ = ["MAX_TRACE_BYTES", "Profiles", "Windows", "nothing", "read_profiles",
           "read_windows"]  # fmt: skip
