"""Inputs that are not files of the kind asked for never block or grow: a FIFO (named
pipe) or a device as a config file or as a run file, a directory as a config, a config
far over any real one's size. Each is refused before it is opened, with exit code 2 and
one line saying what the path is; a FIFO is never opened (opening one blocks until a
writer comes, which here is never)."""

from __future__ import annotations

import os

import pytest
from cliproc import assert_one_line_error
from timing import limit

pytestmark = pytest.mark.integration


@pytest.fixture
def distfl(helpers):
    """``distfl ARGS`` from ``cwd``, the command's code in this process (a FIFO it opened
    would block it: the call's limit ends that as a hang)."""

    def command(*args: str, cwd):
        return helpers.cli(cwd, *args, timeout=limit(120))

    return command


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    "command",
    [("run", "--config"), ("run", "--resume"), ("inspect",), ("status",), ("report",),
     ("gather",)],
)  # fmt: skip
def test_a_fifo_is_refused_not_waited_on(distfl, tmp_path, fifo, command):
    proc = distfl(*command, fifo, cwd=tmp_path)
    assert_one_line_error(proc, fifo, "a FIFO (named pipe)")


@pytest.mark.parametrize(
    ("path", "what"), [("/dev/zero", "a character device"), (".", "a directory")]
)
def test_a_device_or_a_directory_is_no_config(distfl, tmp_path, path, what):
    proc = distfl("run", "--config", path, cwd=tmp_path)
    assert_one_line_error(proc, f"config file {path} is {what}")
    assert not list(tmp_path.iterdir())  # no run file, nothing else


def test_a_config_over_a_mebibyte_is_refused(distfl, tmp_path):
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of comments: valid TOML, not a config
    proc = distfl("run", "--config", str(big), cwd=tmp_path)
    assert_one_line_error(proc, "over 1 MiB")


def test_a_device_is_no_run_file(distfl, tmp_path):
    proc = distfl("inspect", "/dev/null", cwd=tmp_path)
    assert_one_line_error(proc, "/dev/null is a character device")
