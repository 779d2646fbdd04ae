"""Hosts made of Linux network namespaces, for tests that need several machines.

Each host is a network namespace with one interface (``eth0``, one end of a veth pair)
on a private bridge, its own IPv4 address, and, for the commands run on it, its own host
name (a UTS namespace) and its own ``/etc/hosts`` (a mount namespace in which a file of
its own is bound over it). What the host names resolve to is chosen per set of hosts:
``"all"`` (every host's name to its address, as on a cluster with working DNS),
``"loopback"`` (a host's own name to 127.0.1.1, as Debian's installer writes it in
/etc/hosts, the other hosts' names to their addresses) or ``"none"`` (no name resolves,
as in many containers). The bridge itself holds the ``.254`` address of the subnet, so
that daemons in the root namespace (a Slurm controller) can be reached from the hosts
and reach them. Only these namespaces and this bridge are created and addressed, and
:meth:`Hosts.remove` deletes them again.

Every name carries a tag ending in the creating process's pid (``dfl<tag>br``,
``dfl<tag>n<i>``, ``dfl<tag>v<i>``). A set left behind by a process that was killed
before it could remove it is deleted by the next :func:`free_subnet` (its pid is no
longer alive); its subnet would otherwise hold a second route beside ours, and replies
to our hosts could leave by the dead bridge. :func:`free_subnet` then picks a
subnet that no route of this host covers.

Needs root, iproute2's ``ip`` and util-linux's ``nsenter`` and ``unshare``; elsewhere
:func:`why_not` says what is missing.

A command runs "on" host i as ``hosts.on(i, *argv)``, the argument list of::

    nsenter --net=/run/netns/<ns> unshare --uts --mount sh -c \
        'mount --bind <hosts file> /etc/hosts && hostname <name> && exec "$@"' sh argv...

(``ip netns exec`` is not used: it remounts /sys, which hides /sys/fs/cgroup from slurmd.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

TOOLS = ("ip", "nsenter", "unshare", "mount")


def why_not() -> str | None:
    """Why hosts of namespaces cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "building hosts of network namespaces needs root"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"building hosts of network namespaces needs {', '.join(missing)}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def tag(letter: str) -> str:
    """A tag for this process's hosts: ``letter`` and the pid (at most 8 characters)."""
    return f"{letter}{os.getpid()}"


_OURS = re.compile(r"^dfl([a-z])(\d+)(br|n\d+|v\d+)$")


def remove_stale() -> list[str]:
    """Delete the bridges, veths and namespaces whose creating process is gone; return
    their names."""
    names = [
        line.split()[0].split("@")[0]
        for line in _ip("-br", "link", check=False).stdout.splitlines()
        if line.strip()
    ]
    names += [
        line.split()[0]
        for line in _ip("netns", "list", check=False).stdout.splitlines()
        if line.strip()
    ]
    removed = []
    for name in names:
        m = _OURS.match(name)
        if m is None or os.path.exists(f"/proc/{m.group(2)}"):
            continue
        if m.group(3).startswith("n"):
            _ip("netns", "del", name, check=False)
        else:
            _ip("link", "del", name, check=False)
        removed.append(name)
    return removed


def free_subnet(first: int, last: int, prefix: str = "10.231") -> str:
    """The first ``{prefix}.{x}`` (x in first..last) whose /24 no route of this host
    covers, e.g. ``"10.231.1"`` (stale sets are removed first: :func:`remove_stale`)."""
    remove_stale()
    taken = set()
    for line in _ip("-4", "route", check=False).stdout.splitlines():
        m = re.match(rf"^{re.escape(prefix)}\.(\d+)\.0/24\b", line)
        if m:
            taken.add(int(m.group(1)))
    for x in range(first, last + 1):
        if x not in taken:
            return f"{prefix}.{x}"
    raise RuntimeError(f"every subnet {prefix}.{first}-{last}.0/24 is routed already")


class Hosts:
    """``count`` hosts named ``names[i]`` at ``{subnet}.{i + 1}`` (subnet: the first three
    octets, e.g. ``"10.231.1"``), their /etc/hosts written in ``workdir``."""

    def __init__(
        self, names: list[str], *, subnet: str, tag: str, workdir: Path, resolve: str = "all"
    ) -> None:
        if resolve not in ("all", "loopback", "none"):
            raise ValueError(f"resolve must be all, loopback or none, not {resolve!r}")
        if len(tag) > 8:
            raise ValueError("tag must be at most 8 characters (interface names hold 15)")
        self.names = list(names)
        self.addresses = [f"{subnet}.{i + 1}" for i in range(len(names))]
        self.gateway = f"{subnet}.254"
        self.bridge = f"dfl{tag}br"
        self.spaces = [f"dfl{tag}n{i + 1}" for i in range(len(names))]
        self.veths = [f"dfl{tag}v{i + 1}" for i in range(len(names))]
        self.resolve = resolve
        self.hosts_files = [Path(workdir) / f"hosts.{n}" for n in self.names]
        self._made: list[tuple[str, str]] = []  # what to delete: ("netns"|"link", name)

    def build(self) -> Hosts:
        for name, path in zip(self.names, self.hosts_files, strict=True):
            lines = ["127.0.0.1 localhost"]
            for other, addr in zip(self.names, self.addresses, strict=True):
                if self.resolve == "all" or (self.resolve == "loopback" and other != name):
                    lines.append(f"{addr} {other}")
                elif self.resolve == "loopback":
                    lines.append(f"127.0.1.1 {name}")
            path.write_text("\n".join(lines) + "\n")
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for ns, veth, addr in zip(self.spaces, self.veths, self.addresses, strict=True):
                _ip("netns", "add", ns)
                self._made.append(("netns", ns))
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                self._made.append(("link", veth))
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except Exception:
            self.remove()
            raise
        return self

    def on(self, i: int, *argv: str) -> list[str]:
        """The argument list that runs ``argv`` on host ``i``."""
        hosts, name = self.hosts_files[i], self.names[i]
        script = f'mount --bind {hosts} /etc/hosts && hostname {name} && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{self.spaces[i]}", "unshare", "--uts",
                "--mount", "sh", "-c", script, "sh", *argv]  # fmt: skip

    def pids(self, i: int) -> list[int]:
        """Every process in host ``i``'s network namespace."""
        out = _ip("netns", "pids", self.spaces[i], check=False).stdout
        return [int(p) for p in out.split()]

    def unplug(self, i: int) -> None:
        """Cut host ``i`` off the network, as a dead node is: packets to it go unanswered
        (no reset, no close), so peers learn of it only through their timeouts."""
        _ip("link", "set", self.veths[i], "down")

    def plug(self, i: int) -> None:
        _ip("link", "set", self.veths[i], "up")

    def remove(self) -> None:
        for kind, name in reversed(self._made):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()
