"""Makes tests/runfile.py importable from every test directory, and keeps each test module
on one worker when the suite runs in parallel (``./test.sh`` runs pytest-xdist with
``--dist loadgroup``): a module's fixtures are built once, and the Slurm modules, which
share the host's munged and clean MPICH's shared memory at the end, run on the same
worker, one after the other."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = Path(str(item.path)).resolve().relative_to(HERE)
        group = "slurm" if where.parts[0] == "slurm" else where.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
