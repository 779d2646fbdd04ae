"""Reads back a Weights & Biases offline run (``run-<id>.wandb``), for the export tests:
the file is W&B's 7-byte header (``:W&B``, the magic 0xBEE1, version 0) and then a LevelDB
log (32 KiB blocks of records, each a CRC-32, a length, a type: full, first, middle, last)
whose records are ``wandb_internal_pb2.Record`` messages. wandb itself keeps no reader in
Python; this one is written from the format and checks every record's CRC."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7  # a record's: crc32 (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    """The records' payloads of the W&B log ``path``, in order."""
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, hex(magic), version)
    out, parts, pos = [], [], 7
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # the block's tail is padding
            pos += room
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:
            pos += room  # zeros to the end of the block
            continue
        payload = data[pos + HEADER : pos + HEADER + length]
        assert zlib.crc32(bytes([kind]) + payload) & 0xFFFFFFFF == crc, f"bad CRC at {pos}"
        pos += HEADER + length
        if kind == FULL:
            out.append(payload)
        elif kind == FIRST:
            parts = [payload]
        elif kind == MIDDLE:
            parts.append(payload)
        elif kind == LAST:
            out.append(b"".join(parts + [payload]))
    return out


def history(path: Path) -> tuple[dict, list[dict]]:
    """(the run's config, its history rows: ``{"_step": t, name: value, ...}``) of the W&B
    offline run file ``path``."""
    from wandb.proto import wandb_internal_pb2 as pb

    config: dict = {}
    rows: list[dict] = []
    for payload in records(path):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        items = None
        if kind == "run":
            items = record.run.config.update
        elif kind == "config":
            items = record.config.update
        if items is not None:
            for item in items:
                key = item.key or "/".join(item.nested_key)
                config[key] = json.loads(item.value_json)
        elif kind == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    return config, rows
