"""Makes tests/runfile.py importable from every test directory, and keeps each test module
on one worker when the suite runs in parallel (``./test.sh`` runs pytest-xdist with
``--dist loadfile``): a module's fixtures are built once, and the Slurm modules, which
share the host's munged and clean MPICH's shared memory at the end, run on the same
worker, one after the other."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the Slurm modules as one scope."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/slurm" if path.startswith("tests/slurm/") else path

    return ModuleScheduling(config, log)
