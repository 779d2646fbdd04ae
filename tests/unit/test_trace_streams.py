"""The trace files of [participation] are read as a stream: a 40 MB availability trace and
a 40 MB resource trace for a run of 8 clients are read in a child process with a few MiB of
Python and numpy memory (the whole file was held, 1.7 GB), and what each client follows is
what a brute-force reading of the same lines gives; the windows kept for the run's clients
answer as every window does; a line the reader cannot hold (an id beyond int64, a line of
no end) is refused naming it, and a malformed line deep in a file is named by its number."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from timing import limit

from distfl.errors import ConfigError
from distfl.participation import draws
from distfl.participation.traces import read_profiles, read_windows

#: Python and numpy memory a reader may hold for a 40 MB trace and a run of 8 clients
BOUND = 32 * 2**20
SEED = 7


def write_lines(path, header: str, columns: list[np.ndarray], fmt: str, copies: int) -> None:
    """``path``: ``header``, then one line of ``fmt`` per row of ``columns``, ``copies``
    times over."""
    rows = zip(*(c.tolist() for c in columns), strict=True)
    text = "".join(fmt.format(*r) for r in rows)
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n")
        for _ in range(copies):
            f.write(text)


def in_a_child(code: str, cwd, *args: str) -> dict:
    """``code`` run by a Python of its own in ``cwd`` (where no ``distfl`` folder shadows
    the one of PYTHONPATH), within the limit that catches a hang; its output, one JSON
    line."""
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=limit(120))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


PARTICIPATION = """
import json, sys, tracemalloc
import numpy as np
from distfl import config as C
from distfl.participation.model import Participation

key, path = sys.argv[1], sys.argv[2]
cfg = C.load(preset="digits", overrides=[
    "data.num_clients=8", "server.clients_per_round=4", "run.seed=7",
    f"participation.{key}={path!r}", *sys.argv[3:]])
tracemalloc.start()
p = Participation(cfg, client_group=np.zeros(8, np.int64), num_train=np.full(8, 30),
                  num_params=1000)
out = {"peak": tracemalloc.get_traced_memory()[1]}
ids = np.arange(8)
if p.windows is not None:
    out["available"] = []
    for t in range(1, 101):
        p.begin(t)
        out["available"].append(p.available(ids).tolist())
if p.profiles is not None:
    out["resources"] = [x.tolist() for x in p.resources(ids)]
print(json.dumps(out))
"""


def followed(n: int, clients: int = 8) -> np.ndarray:
    """The row of ``n`` each run client follows (docs/participation.md: drawn uniformly
    from (seed, client))."""
    u = draws.uniforms(SEED, draws.TRACE_CLIENT, np.arange(clients))
    return np.minimum((u * n).astype(np.int64), n - 1)


def test_a_40_mb_availability_trace_is_read_as_a_stream(tmp_path):
    rng = np.random.default_rng(0)
    lines = 100_000  # written 35 times over
    client = rng.integers(0, 20_000, lines) * 3  # ids with gaps: 20,000 trace clients
    start = rng.integers(1, 100, lines)
    end = start + rng.integers(0, 3, lines)
    path = tmp_path / "windows.csv"
    write_lines(path, "client,start,end", [client, start, end], "{},{},{}\n", 35)
    assert path.stat().st_size > 40e6
    out = in_a_child(PARTICIPATION, tmp_path, "trace", str(path),
                     'participation.availability="trace"')  # fmt: skip
    assert out["peak"] < BOUND, f"{out['peak'] / 2**20:.0f} MiB for a 40 MB trace"
    ids = np.unique(client)
    windows = [(start[client == c], end[client == c]) for c in ids[followed(len(ids))]]
    for t, got in enumerate(out["available"], start=1):
        assert got == [bool(((s <= t) & (e >= t)).any()) for s, e in windows], t
    assert any(any(row) for row in out["available"])
    assert not all(all(row) for row in out["available"])


def test_a_40_mb_resource_trace_is_read_as_a_stream(tmp_path):
    rng = np.random.default_rng(1)
    lines = 100_000  # written 34 times over
    speed = np.tile(rng.integers(100, 99_999, lines), 34)  # hundredths: "123.45"
    bandwidth = np.tile(rng.integers(1, 9_999, lines), 34)
    path = tmp_path / "profiles.csv"
    write_lines(path, "speed,bandwidth", [speed[:lines] // 100, speed[:lines] % 100,
                bandwidth[:lines]], "{}.{:02d},{}\n", 34)  # fmt: skip
    assert path.stat().st_size > 40e6
    out = in_a_child(PARTICIPATION, tmp_path, "resource_trace", str(path),
                     'participation.resources="trace"')  # fmt: skip
    assert out["peak"] < BOUND, f"{out['peak'] / 2**20:.0f} MiB for a 40 MB trace"
    u = draws.uniforms(SEED, draws.PROFILE, np.arange(8))
    rows = np.minimum((u * len(speed)).astype(np.int64), len(speed) - 1)
    want_speed = [float(f"{s // 100}.{s % 100:02d}") for s in speed[rows].tolist()]
    assert out["resources"] == [want_speed, bandwidth[rows].astype(float).tolist()]


@pytest.mark.parametrize("seed", range(6))
def test_the_windows_kept_answer_as_every_window_does(tmp_path, seed):
    """Random small traces (comments, blank lines, spaces, CRLF, overlapping and touching
    windows), read in blocks of 64 bytes: the windows kept for a few trace clients answer as
    the windows of the whole file, and both as the lines themselves."""
    import distfl.participation.traces as traces

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    client, start = rng.integers(0, 30, n), rng.integers(1, 60, n)
    end = start + rng.integers(0, 6, n)
    text = ["# a comment", "client, start ,end", ""]
    for c, s, e in zip(client.tolist(), start.tolist(), end.tolist(), strict=True):
        text.append(f" {c} , {s},{e}" if rng.random() < 0.1 else f"{c},{s},{e}")
    path = tmp_path / "w.csv"
    path.write_bytes(("\r\n" if seed % 2 else "\n").join(text).encode())
    with pytest.MonkeyPatch.context() as m:
        m.setattr(traces, "BLOCK_BYTES", 64)
        whole = read_windows("participation.trace", str(path))
        rows = rng.choice(len(whole.ids), size=min(4, len(whole.ids)), replace=False)
        kept = read_windows("participation.trace", str(path), keep=lambda count: rows)
    assert np.array_equal(whole.ids, np.unique(client)) and np.array_equal(kept.ids, whole.ids)
    asked = whole.ids[rows]
    for t in range(0, 70):
        want = [bool(((client == c) & (start <= t) & (end >= t)).any()) for c in asked]
        assert kept.holds(asked, t).tolist() == want == whole.holds(asked, t).tolist(), t
    with pytest.raises(ValueError, match="not kept"):
        kept.holds(np.array([10**6]), 1)  # a client of no window, or one not kept


def test_the_profiles_kept_read_as_every_profile_does(tmp_path):
    import distfl.participation.traces as traces

    rng = np.random.default_rng(3)
    values = rng.integers(1, 10**6, (500, 2)) / 1000
    path = tmp_path / "p.csv"
    path.write_text(
        "speed,bandwidth\n# a comment\n" + "".join(f"{a!r},{b!r}\n" for a, b in values.tolist())
    )
    with pytest.MonkeyPatch.context() as m:
        m.setattr(traces, "BLOCK_BYTES", 100)
        whole = read_profiles("participation.resource_trace", str(path))
        rows = np.array([499, 3, 3, 250])
        kept = read_profiles("participation.resource_trace", str(path), keep=lambda n: rows)
        counted = read_profiles("participation.resource_trace", str(path), keep=traces.nothing)
    assert whole.values.tobytes() == values.tobytes() and len(whole) == len(kept) == 500
    for column in (0, 1):
        assert np.array_equal(kept[rows, column], values[rows, column])
    assert whole.fastest == kept.fastest == counted.fastest == tuple(values.max(axis=0))
    with pytest.raises(IndexError, match="not kept"):
        kept[np.array([4]), 0]


def test_a_line_the_reader_cannot_hold_is_refused_naming_it(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("client,start,end\n1,1,2\n99999999999999999999,1,2\n")
    with pytest.raises(ConfigError) as info:
        read_windows("participation.trace", str(path))
    assert str(info.value) == (
        f"participation.trace: {path} line 3: '99999999999999999999,1,2' needs client ≥ 0 "
        "and 1 ≤ start ≤ end (rounds, inclusive; end ≤ 2^40)"
    )
    path.write_bytes(b"client,start,end\n1,1,2\n" + b"7" * 2**20)
    with pytest.raises(ConfigError, match=r"line 3: longer than 256 KiB, not a line of a trace"):
        read_windows("participation.trace", str(path))


def test_a_malformed_line_deep_in_a_file_is_named_by_its_number(tmp_path):
    good = "".join(f"{i % 97},{i % 50 + 1},{i % 50 + 3}\n" for i in range(200_000))
    path = tmp_path / "w.csv"
    path.write_text("client,start,end\n" + good + "5,x,6\n" + good)
    with pytest.raises(ConfigError, match=r"line 200002: '5,x,6' is not three integers"):
        read_windows("participation.trace", str(path))
    path.write_bytes(b"client,start,end\n" + good.encode() + b"5,\xff,6\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        read_windows("participation.trace", str(path))
    profiles = "".join(f"{i % 90 + 1}.5,{i % 7 + 1}\n" for i in range(200_000))
    path.write_text("speed,bandwidth\n" + profiles + "1.5,0\n")
    with pytest.raises(ConfigError, match=r"line 200002: '1.5,0' is not two positive numbers"):
        read_profiles("participation.resource_trace", str(path))
