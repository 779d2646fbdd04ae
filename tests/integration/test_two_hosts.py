"""torchrun across two hosts: two Linux network namespaces on a private bridge
(10.231.0.1 and 10.231.0.2), each with its own host name that resolves to nothing, one
torchrun agent in each (``--nnodes 2``, c10d rendezvous at the first host). gloo must
connect over the namespaces' interface, not 127.0.0.1 (what it tries when the host name
does not resolve), and the run must equal the same config at W=1 bit for bit.

Needs root, iproute2 and util-linux's unshare (as in CI); elsewhere it skips, saying so.
Only the test's own namespaces and bridge are created and addressed, and removed after."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from runfile import assert_same_run

pytestmark = pytest.mark.integration

CONFIG = """
[run]
rounds = 3
threads = 1
progress = "none"
[data]
num_clients = 8
[server]
clients_per_round = 8
[algorithm]
name = "none"
"""


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        pytest.skip("needs root, iproute2's ip and unshare to build two hosts of namespaces")
    tag = f"{os.getpid() % 100000}"
    bridge, spaces = f"dflbr{tag}", [f"dfl{tag}h{i}" for i in (1, 2)]
    try:
        _sh("ip", "link", "add", bridge, "type", "bridge")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a bridge here: {exc.stderr.strip()}")
    try:
        _sh("ip", "link", "set", bridge, "up")
        for i, ns in enumerate(spaces, start=1):
            veth = f"dfl{tag}v{i}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", veth, "master", bridge)
            _sh("ip", "link", "set", veth, "up")
            _sh("ip", "-n", ns, "addr", "add", f"10.231.0.{i}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield spaces
    finally:
        for ns in spaces:
            _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "link", "del", bridge, check=False)


def test_torchrun_across_two_hosts_equals_w1(helpers, tmp_path, two_hosts):
    config = tmp_path / "two.toml"
    config.write_text(CONFIG)
    env = helpers.clean_env()
    env.pop("GLOO_SOCKET_IFNAME", None)
    torchrun = helpers.venv_tool("torchrun")
    procs = []
    for node, ns in enumerate(two_hosts):
        agent = (
            f"hostname node{node + 1} && exec {torchrun} --nnodes 2 --node-rank {node} "
            f"--nproc-per-node 2 --master-addr 10.231.0.1 --master-port 29555 "
            f"-m distfl run --config {config} --out {tmp_path / f'node{node}.h5'} "
            "--set comm.timeout_s=60"
        )
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", agent],
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
        )
    try:
        outs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert "127.0.0.1" not in outs[0] + outs[1]  # no gloo pair tried loopback
    one = tmp_path / "one.h5"
    w1 = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--config", str(config), "--out", str(one)],
        cwd=tmp_path, env=helpers.clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert w1.returncode == 0, w1.stderr
    assert_same_run(one, tmp_path / "node0.h5")
