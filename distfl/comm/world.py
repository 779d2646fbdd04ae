"""Where each rank runs: its host, its local rank and the address it talks from, gathered
once at start-up by rank 0 and kept in the run file (``/world``), so that a run spread
over nodes shows where every rank was and which rendezvous the world met at."""

from __future__ import annotations

import json
import os
import socket

import numpy as np
import torch

from distfl.comm.base import Communicator
from distfl.comm.env import LaunchInfo
from distfl.comm.iface import route_source

#: bytes of one rank's description (JSON, zero-padded); a longer one is cut at the host name
ROW_BYTES = 256


def rendezvous_ip(info: LaunchInfo) -> str:
    """The IPv4 address ``info.master_addr`` resolves to here ("" if none or no name)."""
    if not info.master_addr:
        return ""
    try:
        return socket.gethostbyname(info.master_addr)
    except OSError:
        return ""


def this_rank(comm: Communicator, info: LaunchInfo) -> dict:
    """This rank's host name, local rank and the local address it reaches the rendezvous
    host from (the gloo interface's address when one was chosen; "" for MPI and W = 1)."""
    address = ""
    interface = getattr(comm, "interface", None)
    if interface is not None:
        address = interface[1]
    elif comm.name == "torch" and (ip := rendezvous_ip(info)):
        address = route_source(ip, info.master_port) or ""
    return {
        "host": socket.gethostname(),
        "local_rank": comm.local_rank,
        "address": address,
        "pid": os.getpid(),
    }


def _encode(row: dict) -> torch.Tensor:
    data = json.dumps(row, separators=(",", ":")).encode()
    if len(data) > ROW_BYTES:
        cut = len(data) - ROW_BYTES
        row = {**row, "host": row["host"][: max(len(row["host"]) - cut, 0)]}
        data = json.dumps(row, separators=(",", ":")).encode()
    out = torch.zeros((1, ROW_BYTES), dtype=torch.uint8)
    out[0, : len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return out


def _decode(row: np.ndarray) -> dict:
    return json.loads(bytes(row).rstrip(b"\0").decode())


def describe_world(comm: Communicator, info: LaunchInfo) -> dict | None:
    """Every rank calls this once (one gather of W × 256 bytes); rank 0 gets the world:
    per rank ``host``, ``local_rank``, ``address`` and ``pid`` (lists in rank order; the
    server keeps the process ids out of the run file), and the launch's
    ``launcher``, ``backend``, ``rendezvous`` ("host:port" or "") and ``rendezvous_ip``."""
    mine = _encode(this_rank(comm, info))
    rows = mine if comm.world_size == 1 else comm.gather_rows(mine, counts=[1] * comm.world_size)
    if rows is None:
        return None
    ranks = [_decode(r) for r in rows.numpy()]
    torch_rdzv = comm.name == "torch" and bool(info.master_addr)
    return {
        "host": [r["host"] for r in ranks],
        "local_rank": [int(r["local_rank"]) for r in ranks],
        "address": [r["address"] for r in ranks],
        "pid": [int(r.get("pid", 0)) for r in ranks],
        "launcher": info.launcher,
        "backend": getattr(comm, "backend", comm.name),
        "rendezvous": f"{info.master_addr}:{info.master_port}" if torch_rdzv else "",
        "rendezvous_ip": rendezvous_ip(info) if torch_rdzv else "",
    }
