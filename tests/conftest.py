"""Makes tests/runfile.py importable from every test directory, and keeps each test module
on one worker when the suite runs in parallel (``./test.sh`` runs pytest-xdist with
``--dist loadfile``): a module's fixtures are built once, and the Slurm modules, which
share the host's munged and clean MPICH's shared memory at the end, run on the same
worker, one after the other. The longest modules are handed out first (FIRST), so that
the suite does not end with one worker running a long module while the others wait. A
test marked ``cuda`` skips with the reason "no CUDA device" where torch sees none. The
signals the session was started ignoring stay ignored here and reach the programs the
tests start with their default action (tests/dispositions.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import dispositions  # noqa: E402
import timing  # noqa: E402

# before any test starts a program: the signals this process was started ignoring (nohup,
# a shell's background job) become handlers that do nothing, which the programs the tests
# start do not inherit (see tests/dispositions.py)
IGNORED_AT_START = dispositions.keep_ignoring_here()

#: the modules that take longest (measured: minutes of a module alone on the 2-core machine,
#: and the CI's slowest tests), longest first; every other module keeps its place after them
FIRST = (
    "tests/slurm/",
    "tests/integration/test_stop_in_every_phase.py",
    "tests/integration/test_fidelity_table.py",
    "tests/integration/test_large_population.py",
    "tests/integration/test_faults.py",
    "tests/integration/test_plugin.py",
    "tests/integration/test_pacfl_fedclust_rotated.py",
    "tests/integration/test_emdcfl_signal.py",
    "tests/integration/test_docs_python_api.py",
    "tests/integration/test_resume.py",
    "tests/integration/test_fedgwc_split.py",
    "tests/integration/test_suite.py",
    "tests/integration/test_equivalence.py",
    "tests/integration/test_local_finetune.py",
    "tests/integration/test_report.py",
    "tests/integration/test_dead_rank.py",
    "tests/integration/test_tampering.py",
    "tests/integration/test_sparse_fedgwc.py",
    "tests/integration/test_api.py",
    "tests/integration/test_population.py",
    "tests/integration/test_cflgp_rotated.py",
    "tests/integration/test_stop_in_training.py",
    "tests/integration/test_emdcfl_rotated.py",
    "tests/integration/test_bench.py",
    "tests/integration/test_worst_accuracy.py",
    "tests/integration/test_two_hosts.py",
    "tests/integration/test_flexcfl_rotated.py",
    "tests/integration/test_paper_table.py",
    "tests/integration/test_old_runfiles.py",
    "tests/integration/test_bench_scale.py",
    "tests/integration/test_compare.py",
)


def pytest_configure(config):
    """The time factor, measured here once: the xdist workers, started later, inherit it."""
    try:
        timing.factor()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_report_header(config):
    lines = [f"time limits x {timing.factor()} ({timing.how})"]
    if IGNORED_AT_START:
        lines.append(f"started with {', '.join(IGNORED_AT_START)} ignored: kept ignored by "
                     "pytest, the default in every program a test starts")  # fmt: skip
    return lines


def _rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(FIRST) if nodeid.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(config, items):
    """The longest modules first (a stable sort: a module's tests keep their order)."""
    items.sort(key=lambda item: _rank(item.nodeid))


def pytest_runtest_setup(item):
    """A test marked ``cuda`` skips where torch sees no CUDA device."""
    if item.get_closest_marker("cuda") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the Slurm modules as one scope."""
    if config.getvalue("dist") != "loadfile":
        return None
    # xdist would otherwise hand out the modules with the most tests first (the unit tests'
    # parametrised ones), whatever their length, and the long modules would end the suite
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/slurm" if path.startswith("tests/slurm/") else path

    return ModuleScheduling(config, log)
