"""Which network interface gloo uses.

Left alone, gloo binds to the address its host name resolves to. On a node whose host
name resolves to a loopback address, or not at all (a container, a network namespace,
many cluster images), every gloo pair then tries 127.0.0.1 and a world that spans hosts
never connects. :func:`gloo_interface` picks the interface this host uses to reach the
rendezvous address instead, unless the user chose one with ``GLOO_SOCKET_IFNAME``.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def route_source(addr: str, port: int) -> str | None:
    """The local IPv4 address this host would send from to reach ``addr`` (no packet is
    sent: a UDP socket's connect only chooses the route). None if there is no route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, port or 9))
            return s.getsockname()[0]
    except OSError:
        return None


def interface_of(address: str) -> str | None:
    """The name of the interface that holds the IPv4 ``address`` (None if none does)."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                request = struct.pack("256s", name[:15].encode())
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, request)
            except OSError:  # no IPv4 address on it
                continue
        if socket.inet_ntoa(packed[20:24]) == address:
            return name
    return None


def gloo_interface(master_addr: str, master_port: int) -> tuple[str, str] | None:
    """``(interface, local address)`` gloo should use to reach the rendezvous host, set as
    ``GLOO_SOCKET_IFNAME`` for this process; None (nothing set) when the user set it, when
    the rendezvous host is this one through loopback, or when no interface is found."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    try:
        target = socket.gethostbyname(master_addr)
    except OSError:
        return None
    local = route_source(target, master_port)
    if local is None or ipaddress.ip_address(local).is_loopback:
        return None
    name = interface_of(local)
    if name is None:
        return None
    os.environ["GLOO_SOCKET_IFNAME"] = name
    return name, local
