"""gloo's interface choice (distfl.comm.iface) on this host's own loopback."""

from __future__ import annotations

import os

from distfl.comm.iface import gloo_interface, interface_of, route_source


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
