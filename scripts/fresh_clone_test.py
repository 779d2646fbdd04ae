#!/usr/bin/env python3
"""The whole test suite on a fresh clone, and its record: what README.md and
docs/testing.md say of the suite's size and length.

    python3 scripts/fresh_clone_test.py            # clone HEAD, run .ci/run, write the record

clones this repository's HEAD (committed work only) into a temporary directory, runs
``.ci/run`` there under ``/usr/bin/time`` (``./test.sh``: the ``.venv`` set up from
nothing, then pytest), samples the load average every 10 s meanwhile, and writes
docs/records/test-run.json (the date, the commit, the tests collected, passed, failed and
skipped, pytest's seconds, the wall and CPU seconds with the set-up, the load, the machine)
and, between the ``<!-- test-run -->`` markers of README.md and docs/testing.md, the
sentence :func:`summary` makes of it. Commit the three files; tests/unit/test_test_record.py
holds the pages to the record and the record to the number of tests pytest collects.
``--no-write`` prints the record only; ``--keep`` leaves the clone (its ``test-run.log``
holds the suite's output). Exits with the suite's code. Started as
``nohup python3 scripts/fresh_clone_test.py > fresh.log 2>&1 &``, the suite runs under
nohup too (the record's ``started_ignoring`` names SIGHUP).

PYTHONPATH, DISTFL_VENV, DISTFL_TEST_TIME_FACTOR and the suite's own variables are unset for
the run: the clone tests its own code in its own ``.venv``, and measures its own factor.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the record, relative to the repository
RECORD = Path("docs/records/test-run.json")
#: the pages that state the record, between the markers
PAGES = (Path("README.md"), Path("docs/testing.md"))
MARKERS = ("<!-- test-run -->", "<!-- /test-run -->")
#: variables of the calling shell that would make the clone test something else
UNSET = ("PYTHONPATH", "DISTFL_VENV", "DISTFL_TEST_TIME_FACTOR", "DISTFL_TEST_IGNORED_SIGNALS",
         "VIRTUAL_ENV")  # fmt: skip
SAMPLE_S = 10


def summary(record: dict) -> str:
    """The sentence the pages show between the markers, made of the record alone."""
    pytest_s, wall_s = record.get("pytest_s"), record.get("wall_s")
    if pytest_s is None:  # a record of the whole run's length only
        minutes = f"{wall_s / 60:.0f} minutes in all"
    else:
        minutes = f"{pytest_s / 60:.0f} minutes of pytest"
        if wall_s is not None:
            minutes += f" ({wall_s / 60:.0f} with the `.venv` set up)"
    counts = [f"{record[k]:,} {k}" for k in ("passed", "failed", "errors", "skipped")
              if record.get(k)]  # fmt: skip
    tests = f"{record['tests']:,} tests" + (f" ({', '.join(counts)})" if counts else "")
    load = record["load"]
    text = (
        f"a fresh clone's `.ci/run` ran {tests} in {minutes}, at a load average of "
        f"{load['min']:.1f}–{load['max']:.1f} on {record['machine']} "
        f"({record['date']}, commit {record['commit'][:7]}"
    )
    if record.get("provisional"):
        text += f"; provisional: {record['note']}"
    return text + ")"


def replace_marked(text: str, sentence: str) -> str:
    """``text`` with what stands between the markers replaced by ``sentence``."""
    start, end = (re.escape(m) for m in MARKERS)
    new, count = re.subn(f"{start}.*?{end}", lambda _: f"{MARKERS[0]}{sentence}{MARKERS[1]}",
                         text, flags=re.S)  # fmt: skip
    if count != 1:
        raise ValueError(f"{count} pairs of {MARKERS[0]} markers, not one")
    return new


def machine() -> str:
    """``2 CPUs (AMD EPYC 7B13), 8 GiB``: the CPUs this process may use, their model and
    the memory."""
    cpus = len(os.sched_getaffinity(0))
    model = "unknown CPU"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = " ".join(line.split(":", 1)[1].split())
                break
    with open("/proc/meminfo", encoding="utf-8") as f:
        kib = int(f.readline().split()[1])
    return f"{cpus} CPUs ({model}), {kib / 2**20:.0f} GiB"


class LoadSampler:
    """The last minute's load average, every :data:`SAMPLE_S` seconds until stopped."""

    def __init__(self) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        s = self.samples
        mean = round(sum(s) / len(s), 2)
        return {"min": round(min(s), 2), "max": round(max(s), 2), "mean": mean,
                "samples": len(s), "every_s": SAMPLE_S}  # fmt: skip


def run_suite(clone: Path, junit: Path, times: Path, log: Path) -> int:
    """``.ci/run --junitxml=JUNIT`` in ``clone`` under ``/usr/bin/time``, its output on
    this stdout and in ``log``; returns its exit code."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    argv = [".ci/run", f"--junitxml={junit}"]
    if Path("/usr/bin/time").exists():
        argv = ["/usr/bin/time", "-o", str(times), "-f", "%e %U %S", *argv]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv, cwd=clone, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
        return proc.wait()


def record_of(junit: Path, times: Path, wall_s: float, code: int) -> dict:
    """The counts and pytest's seconds from the JUnit XML; wall and CPU seconds from
    /usr/bin/time's file (the wall measured here where it is missing)."""
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    cpu_s = None
    if times.exists():
        wall, user, system = (float(x) for x in times.read_text().split()[-3:])
        wall_s, cpu_s = wall, round(user + system, 1)
    return {
        "tests": n["tests"],
        "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"],
        "failed": n["failures"],
        "errors": n["errors"],
        "skipped": n["skipped"],
        "pytest_s": round(float(suite.get("time")), 1),
        "wall_s": round(wall_s, 1),
        "cpu_s": cpu_s,
        "exit_code": code,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the repository to clone")
    parser.add_argument("--no-write", action="store_true", help="print the record only")
    parser.add_argument("--keep", action="store_true", help="leave the clone")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    if not args.no_write:  # before the suite's half hour, not after it
        for page in PAGES:
            try:
                replace_marked((repo / page).read_text(encoding="utf-8"), "")
            except (OSError, ValueError) as e:
                parser.error(f"{page}: {e}")
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="distfl-fresh-clone-"))
    clone = tmp / "distfl"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(repo), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "--detach", commit],
                   check=True)  # fmt: skip
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    sampler = LoadSampler()
    t0 = time.monotonic()
    code = run_suite(clone, tmp / "junit.xml", tmp / "time.txt", tmp / "test-run.log")
    wall_s = time.monotonic() - t0
    load = sampler.stop()
    if not (tmp / "junit.xml").exists():
        print(f"no JUnit XML: the suite ended before its report (exit {code}); see {tmp}")
        return code or 1
    command = ("CI=1 " if os.environ.get("CI") else "") + ".ci/run"
    # as nohup or a shell's background job leave them, for the suite and all it starts
    ignored = [s.name for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
               if signal.getsignal(s) == signal.SIG_IGN]  # fmt: skip
    record = {"date": date, "commit": commit, "command": command,
              "workers": os.environ.get("DISTFL_TEST_WORKERS", "3"), "machine": machine(),
              **record_of(tmp / "junit.xml", tmp / "time.txt", wall_s, code),
              "load": load, "started_ignoring": ignored, "provisional": False}  # fmt: skip
    text = json.dumps(record, indent=2) + "\n"
    print(text, end="")
    if not args.no_write:
        (repo / RECORD).parent.mkdir(parents=True, exist_ok=True)
        (repo / RECORD).write_text(text, encoding="utf-8")
        for page in PAGES:
            path = repo / page
            path.write_text(replace_marked(path.read_text(encoding="utf-8"), summary(record)),
                            encoding="utf-8")  # fmt: skip
        print(f"wrote {RECORD} and the sentence in {', '.join(map(str, PAGES))}: commit them")
    if args.keep:
        print(f"the clone and its test-run.log: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
