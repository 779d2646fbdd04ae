"""Absurd sizes: the real CLI exits with code 2 and one line naming the key and what is
allowed, at W=1, before the data or the model is allocated (its peak memory is that of a
bare start)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cliproc import assert_one_line_error
from timing import limit

pytestmark = pytest.mark.integration

#: peak resident KiB of a run refused before it allocates: a bare start (torch imported);
#: allocating what these configs ask for would take terabytes
MAX_RSS_KIB = 1024 * 1024

# (test id, --set override, what the one line must contain: the key, then what is allowed)
CASES = [
    # an integral float, as typed on a command line
    ("samples-float", "data.samples_per_client=1e9", ["data.samples_per_client = 1000000000"]),
    ("samples", "data.samples_per_client=1000000000",
     ["data.samples_per_client = 1000000000", "available", "samples per client fit"]),
    ("hidden-float", "model.hidden=[1e9]", ["model.hidden"]),
    ("hidden", "model.hidden=[1000000000]",
     ["model.hidden = [1000000000]", "75,000,000,010 parameters", "available",
      "units in model.hidden[0] fit"]),
    ("local-steps-float", "train.local_steps=1e9", ["train.local_steps"]),
    ("local-steps", "train.local_steps=1000000000",
     ["train.local_steps = 1000000000", "available", "local steps fit"]),
    ("threads", "run.threads=100000", ["run.threads = 100000", "between 1 and 1024"]),
    ("lr", "train.lr=1e39", ["train.lr = 1e+39", "positive and at most 3.403e+38"]),
]  # fmt: skip

#: runs the command after it and reports its peak resident KiB on stdout
WRAPPER = (
    "import resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "sys.stderr.write(p.stderr)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(p.returncode)\n"
)


@pytest.mark.parametrize(("override", "needles"), [pytest.param(o, n, id=i) for i, o, n in CASES])
def test_an_absurd_size_is_refused_with_one_line(helpers, tmp_path, override, needles):
    out = tmp_path / "run.h5"
    cmd = [sys.executable, "-c", WRAPPER, *helpers.distfl_cmd("--preset", "digits")]
    proc = subprocess.run(
        [*cmd, "--set", override, "--out", str(out)],
        cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=limit(120),
    )  # fmt: skip
    assert_one_line_error(proc, *needles)
    assert int(proc.stdout) < MAX_RSS_KIB, f"peak {proc.stdout.strip()} KiB: it allocated"
    assert not out.exists()
