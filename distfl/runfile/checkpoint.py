"""The run file's writer and reader under the one name earlier code imported them by:
:mod:`~distfl.runfile.writer` writes a run file, :mod:`~distfl.runfile.reader` reads and
verifies one back. New code imports those."""

from __future__ import annotations

from distfl.runfile.digest import RESUMABLE_CHANGES, config_digest, tree_digest
from distfl.runfile.layout import FORMAT
from distfl.runfile.reader import (
    STATE_OWN,
    UNVERIFIED,
    RunFile,
    check_resumable,
    read_hierarchy,
    read_run_file,
)
from distfl.runfile.writer import COMPRESS_ABOVE, storable, write_hierarchy, write_run_file

__all__ = [
    "COMPRESS_ABOVE",
    "FORMAT",
    "RESUMABLE_CHANGES",
    "STATE_OWN",
    "UNVERIFIED",
    "RunFile",
    "check_resumable",
    "config_digest",
    "read_hierarchy",
    "read_run_file",
    "storable",
    "tree_digest",
    "write_hierarchy",
    "write_run_file",
]
