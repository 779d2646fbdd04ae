"""gloo's interface choice (distfl.comm.iface) on this host's own loopback."""

from __future__ import annotations

import os

from distfl.comm.iface import gloo_interface, interface_of, outward_interface, route_source


def test_loopback_route_and_interface():
    assert route_source("127.0.0.1", 29500) == "127.0.0.1"
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("203.0.113.77") is None  # an address no interface here holds


def test_nothing_is_chosen_for_a_local_rendezvous_or_a_users_choice(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert gloo_interface("127.0.0.1", 29500) is None  # one host: gloo's default works
    assert "GLOO_SOCKET_IFNAME" not in os.environ
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert gloo_interface("10.231.0.1", 29500) is None
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"  # the user's choice stands
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    assert gloo_interface("no-such-host.invalid", 29500) is None


def test_outward_interface_follows_the_default_route(tmp_path):
    table = tmp_path / "route"
    table.write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
        "lo\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n"  # not a default route
        "lo\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\n"  # the default (here: lo)
    )
    assert outward_interface(str(table)) == ("lo", "127.0.0.1")


def test_outward_interface_without_a_default_route(tmp_path):
    empty = tmp_path / "route"
    empty.write_text("Iface\tDestination\tGateway\tFlags\n")
    chosen = outward_interface(str(empty))
    if chosen is not None:  # the one interface that is up, not loopback, with an address
        name, address = chosen
        assert name != "lo" and interface_of(address) == name


def test_a_world_of_several_hosts_never_binds_gloo_to_loopback(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    outward = outward_interface()
    # the rendezvous name resolves to loopback here (the head node's own name on
    # Debian's 127.0.1.1 line), but the launcher says the world spans two hosts
    assert gloo_interface("127.0.0.1", 29500, num_hosts=2) == outward
    if outward is not None:
        assert os.environ["GLOO_SOCKET_IFNAME"] == outward[0]
        assert not outward[1].startswith("127.")
