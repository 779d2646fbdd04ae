"""torchrun across two hosts without a scheduler: two hosts of network namespaces on a
private bridge (10.231.0.1 and 10.231.0.2, tests/netns.py), ``launch/torchrun_multinode.sh``
run on each (``NNODES=2``, ``NODE_RANK`` 0 and 1). gloo must connect over the hosts'
interface, not over the address the host name resolves to, in two set-ups that break it:
each host's own name on a loopback line (Debian's default /etc/hosts: 127.0.1.1), the
other's name resolving to its address, and ``MASTER_ADDR=host1`` (a name, which is then
loopback on host1 itself and 10.231.0.1 on host2); and names that resolve to nothing, with
``MASTER_ADDR=10.231.0.1`` (gloo would try 127.0.0.1). The run must equal the same
config at W=1 bit for bit, and its ``/world`` must show where every rank ran.

Needs root, iproute2 and util-linux (as in CI); elsewhere it skips, saying so. Only the
test's own namespaces and bridge are created and addressed, and removed after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import netns
import pytest
from runfile import assert_same_run
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture(params=["loopback", "none"])
def two_hosts(request, tmp_path):
    if (why := netns.why_not()) is not None:
        pytest.skip(why)
    hosts = netns.Hosts(["host1", "host2"], subnet=netns.free_subnet(0, 99), tag=netns.tag("t"),
                        workdir=tmp_path, resolve=request.param)  # fmt: skip
    try:
        hosts.build()
    except RuntimeError as exc:
        if "Operation not permitted" not in str(exc):
            raise
        pytest.skip(f"cannot build hosts of namespaces here: {exc}")
    try:
        yield hosts
    finally:
        hosts.remove()


def test_torchrun_multinode_script_across_two_hosts_equals_w1(helpers, tmp_path, two_hosts):
    config = tmp_path / "two.toml"
    config.write_text(CONFIG)
    env = helpers.clean_env(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        NNODES="2", MASTER_PORT="29555", NPROC="2",
        MASTER_ADDR="host1" if two_hosts.resolve == "loopback" else two_hosts.addresses[0],
        CONFIG=str(config),
    )  # fmt: skip
    env.pop("GLOO_SOCKET_IFNAME", None)
    procs = []
    for node in range(2):
        procs.append(
            subprocess.Popen(
                two_hosts.on(
                    node,
                    str(ROOT / "launch" / "torchrun_multinode.sh"),
                    "--set",
                    "comm.timeout_s=60",
                ),
                cwd=tmp_path,
                env={**env, "NODE_RANK": str(node), "OUT": str(tmp_path / f"node{node}.h5")},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )  # fmt: skip
        )
    try:
        outs = [p.communicate(timeout=limit(180))[0] for p in procs]
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert "127.0.0.1" not in outs[0] + outs[1]  # no gloo pair tried loopback
    assert "world size 4 (torch) on 2 hosts (host1, host2)" in outs[0], outs[0]
    assert not (tmp_path / "node1.h5").exists()  # rank 0, on node 0, alone writes
    with h5py.File(tmp_path / "node0.h5", "r") as f:
        world = {k: [v.decode() if isinstance(v, bytes) else int(v) for v in f["world"][k][()]]
                 for k in ("host", "local_rank", "address")}  # fmt: skip
        rendezvous = f["world"].attrs["rendezvous"]
        rendezvous_ip = f["world"].attrs["rendezvous_ip"]
    assert world == {
        "host": ["host1", "host1", "host2", "host2"],
        "local_rank": [0, 1, 0, 1],
        "address": ["10.231.0.1", "10.231.0.1", "10.231.0.2", "10.231.0.2"],
    }
    if two_hosts.resolve == "loopback":  # host1's own view of its name
        assert rendezvous == "host1:29555" and rendezvous_ip == "127.0.1.1"
    else:
        assert rendezvous == "10.231.0.1:29555" and rendezvous_ip == "10.231.0.1"
    one = tmp_path / "one.h5"
    w1 = helpers.cli(tmp_path, "run", "--config", str(config), "--out", str(one))
    assert w1.returncode == 0, w1.stderr
    assert_same_run(one, tmp_path / "node0.h5")
