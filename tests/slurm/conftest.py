"""Private Slurm clusters for the template tests (see slurm_cluster.py and README.md
beside this file): ``slurm``, one node on this host; ``slurm2``, two nodes, each slurmd on
its own host of network namespaces. Both are started once per session and stopped at its
end.

Where the daemons are missing: in CI (``CI`` set) as root with apt, the Debian packages are
installed; elsewhere every test here is skipped with the reason.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import h5py
import pytest
from runfile import fedgwc_toml
from slurm_cluster import PrivateSlurm, install, local_run, missing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: netns.py

import netns  # noqa: E402


def _need_slurm() -> None:
    if missing():
        why = install()
        if why is not None:
            pytest.skip(f"{why}; missing: {', '.join(missing())}")
        if missing():
            pytest.skip(f"Slurm packages installed but still missing {missing()}")
    if os.geteuid() != 0:
        pytest.skip("the private Slurm runs its daemons as root (SlurmUser=root)")


def _cluster(tmp_path_factory, nodes: int):
    _need_slurm()
    if nodes > 1 and (why := netns.why_not()) is not None:
        pytest.skip(f"a Slurm of {nodes} nodes needs hosts of namespaces: {why}")
    cluster = PrivateSlurm(tmp_path_factory.mktemp(f"slurm{nodes}"), nodes=nodes)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    yield from _cluster(tmp_path_factory, 1)


@pytest.fixture(scope="session")
def slurm2(tmp_path_factory):
    yield from _cluster(tmp_path_factory, 2)


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    """The bin/ of the Python that runs the tests: distfl, torchrun and mpiexec live there."""
    return Path(sys.executable).parent


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """A FedGWC config of 40 rounds that splits, and its run alone (once per session: every
    template in both test modules is compared with it)."""
    tmp = tmp_path_factory.mktemp("reference")
    config = tmp / "fedgwc.toml"
    config.write_text(fedgwc_toml(40))
    out = local_run(tmp, config, tmp / "local.h5")
    with h5py.File(out, "r") as f:
        assert f["metrics/num_clusters"][-1] > 1  # the hierarchy to compare is not trivial
    return config, out


@pytest.fixture(scope="module")
def work(tmp_path_factory, venv_bin, reference):
    """Per test module: a directory to submit from, the reference config and its run alone,
    and the environment a job needs (PYTHON, PATH)."""
    tmp = tmp_path_factory.mktemp("jobs")
    env = {"PYTHON": sys.executable, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    config, out = reference
    return tmp, config, env, out
