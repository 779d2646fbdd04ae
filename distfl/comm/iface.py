"""Which network interface gloo uses.

Left alone, gloo binds to the address its host name resolves to. On a node whose host
name resolves to a loopback address, or not at all (a container, a network namespace,
many cluster images), every gloo pair then tries 127.0.0.1 and a world that spans hosts
never connects. :func:`gloo_interface` picks the interface this host uses to reach the
rendezvous address instead, unless the user chose one with ``GLOO_SOCKET_IFNAME``.

On the rendezvous host itself that route can be loopback: its own name is often on a
loopback line of /etc/hosts (Debian writes ``127.0.1.1 <host name>``), so MASTER_ADDR,
a node name, resolves to 127.0.1.1 there and to the node's real address everywhere else.
When the launcher says the world spans several hosts, loopback cannot be what the others
reach, and :func:`outward_interface` is used instead.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address
_SIOCGIFFLAGS = 0x8913  # Linux: an interface's flags
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8


def route_source(addr: str, port: int) -> str | None:
    """The local IPv4 address this host would send from to reach ``addr`` (no packet is
    sent: a UDP socket's connect only chooses the route). None if there is no route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, port or 9))
            return s.getsockname()[0]
    except OSError:
        return None


def _ioctl(name: str, request: int) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), request, struct.pack("256s", name[:15].encode()))
        except OSError:  # e.g. no IPv4 address on it
            return None


def address_of(name: str) -> str | None:
    """The IPv4 address of interface ``name`` (None if it has none)."""
    packed = _ioctl(name, _SIOCGIFADDR)
    return None if packed is None else socket.inet_ntoa(packed[20:24])


def interface_of(address: str) -> str | None:
    """The name of the interface that holds the IPv4 ``address`` (None if none does)."""
    for _, name in socket.if_nameindex():
        if address_of(name) == address:
            return name
    return None


def outward_interface(route_table: str = "/proc/net/route") -> tuple[str, str] | None:
    """``(interface, address)`` through which other hosts reach this one, when that is
    clear: the interface of the default route, else the only interface that is up, not
    loopback and holds an IPv4 address. None when there are several and no default route
    (then only the user knows: ``GLOO_SOCKET_IFNAME``)."""
    try:
        with open(route_table) as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        rows = []
    for row in rows:  # Iface Destination Gateway Flags ...; destination 0: the default
        if len(row) > 3 and row[1] == "00000000" and (addr := address_of(row[0])):
            return row[0], addr
    candidates = []
    for _, name in socket.if_nameindex():
        flags = _ioctl(name, _SIOCGIFFLAGS)
        if flags is None:
            continue
        bits = struct.unpack("H", flags[16:18])[0]
        if bits & _IFF_UP and not bits & _IFF_LOOPBACK and (addr := address_of(name)):
            candidates.append((name, addr))
    return candidates[0] if len(candidates) == 1 else None


def gloo_interface(
    master_addr: str, master_port: int, *, num_hosts: int = 1
) -> tuple[str, str] | None:
    """``(interface, local address)`` gloo should use to reach the rendezvous host, set as
    ``GLOO_SOCKET_IFNAME`` for this process; None (nothing set) when the user set it, when
    the rendezvous host is this one through loopback and the world is on this host alone
    (``num_hosts`` 1), or when no interface is found."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    try:
        target = socket.gethostbyname(master_addr)
    except OSError:
        return None
    local = route_source(target, master_port)
    if local is None:
        return None
    if ipaddress.ip_address(local).is_loopback:
        chosen = outward_interface() if num_hosts > 1 else None
    else:
        name = interface_of(local)
        chosen = None if name is None else (name, local)
    if chosen is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = chosen[0]
    return chosen
