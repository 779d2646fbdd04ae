"""Time limits in the tests: each one catches a hang, none measures speed.

A limit is written as the seconds it needs on an idle core of the machine the suite is
developed on, with room to spare, and :func:`limit` multiplies it by the session's factor
(at least 1): how much slower this machine is now. The first pytest process measures the
factor once (:func:`factor`) and leaves it in ``DISTFL_TEST_TIME_FACTOR``, which its xdist
workers and every process they start inherit; set that variable to choose the factor
yourself. A limit taken when the load average per CPU is above the factor is scaled by
that load instead: a machine that became busier after the measurement."""

from __future__ import annotations

import os
import statistics
import time

#: the variable that holds the session's factor (set it to override the measurement)
VARIABLE = "DISTFL_TEST_TIME_FACTOR"

#: the probe's median seconds on one idle core of the 2-core development machine
REFERENCE_S = 0.065

#: how the factor was found: "measured ..." or "from DISTFL_TEST_TIME_FACTOR"
how = ""


def probe_seconds(*, repeats: int = 5) -> float:
    """The median time of a fixed piece of work, interpreted Python and numpy on one core
    (no BLAS threads): what the tests' processes spend their time on besides waiting."""
    import numpy as np

    data = np.random.default_rng(0).random(100_000)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(500_000):
            total += i * i
        for _ in range(10):
            np.sort(data)
            np.cumsum(np.sqrt(data))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure() -> tuple[float, str]:
    """The factor of this machine now and how it was found: the larger of the probe's time
    over :data:`REFERENCE_S` and the last minute's load average per CPU, at least 1."""
    speed = probe_seconds() / REFERENCE_S
    load = load_per_cpu()
    value = round(max(1.0, speed, load), 2)
    return value, f"measured: probe {speed:.2f}x the reference, load {load:.2f} per CPU"


def load_per_cpu() -> float:
    """The last minute's load average per CPU this process may run on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return os.getloadavg()[0] / max(1, cpus or 1)


def factor() -> float:
    """The session's factor: ``DISTFL_TEST_TIME_FACTOR`` when set (a number, at least 1),
    otherwise measured once and stored there."""
    global how
    text = os.environ.get(VARIABLE)
    if text is None:
        value, how = measure()
        os.environ[VARIABLE] = repr(value)
        return value
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 1.0 or value == float("inf"):
        raise ValueError(f"{VARIABLE}={text!r}: a number of at least 1 is allowed")
    how = how or f"from {VARIABLE}"
    return value


def limit(seconds: float) -> float:
    """``seconds`` (what an idle core needs, with room) scaled by the session's factor, or
    by the load average per CPU now when that is higher (other work that began after the
    factor was measured, the suite's own processes among it): the limit after which a test
    takes a process or a wait to have hung."""
    return seconds * max(factor(), load_per_cpu())
