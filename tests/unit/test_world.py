"""distfl.comm.world: one rank's description survives its fixed-size row, a host name too
long for the row is cut (never the JSON), and a one-process world describes itself."""

from __future__ import annotations

import os
import socket

import h5py
import numpy as np

from distfl.comm.env import LaunchInfo
from distfl.comm.local import LocalCommunicator
from distfl.comm.world import ROW_BYTES, _decode, _encode, describe_world
from distfl.runfile.reader import _read_world
from distfl.tools.inspection import world_line


def test_row_round_trip():
    row = {"host": "gpu-a17.cluster", "local_rank": 3, "address": "10.0.4.17"}
    encoded = _encode(row)
    assert encoded.shape == (1, ROW_BYTES)
    assert _decode(encoded.numpy()[0]) == row


def test_long_host_name_is_cut_to_fit():
    row = {"host": "h" * 400, "local_rank": 1, "address": "10.0.0.1"}
    back = _decode(_encode(row).numpy()[0])
    assert back["local_rank"] == 1 and back["address"] == "10.0.0.1"
    assert 0 < len(back["host"]) < 400 and row["host"].startswith(back["host"])


def test_one_process_world():
    info = LaunchInfo(launcher="single", rank=0, world_size=1, local_rank=0)
    world = describe_world(LocalCommunicator(), info)
    assert world == {
        "host": [socket.gethostname()], "local_rank": [0], "address": [""],
        "pid": [os.getpid()], "launcher": "single", "backend": "local", "rendezvous": "",
        "rendezvous_ip": "",
    }  # fmt: skip


def test_world_line_groups_consecutive_ranks(tmp_path):
    with h5py.File(tmp_path / "w.h5", "w") as f:
        g = f.create_group("world")
        hosts = ["a", "a", "b", "a", "c", "c", "c"]
        g.create_dataset("host", data=np.array(hosts, dtype=h5py.string_dtype()))
        g.attrs.update(launcher="slurm", backend="gloo", rendezvous="a:15001",
                       rendezvous_ip="10.1.0.1")  # fmt: skip
        line = world_line(_read_world(g))  # as a RunFile holds it
    want = "a ranks 0-1, b rank 2, a rank 3, c ranks 4-6; slurm, gloo, rendezvous a:15001"
    assert line == want + " = 10.1.0.1"
