"""``./run.sh`` forwards every subcommand of ``distfl`` (README: "./run.sh also forwards any
subcommand"); anything else is taken as arguments of ``distfl run``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from distfl.cli import _parser

ROOT = Path(__file__).resolve().parents[2]


def subcommands() -> set[str]:
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("distfl's parser has no subcommands")


def test_run_sh_forwards_every_subcommand():
    text = (ROOT / "run.sh").read_text(encoding="utf-8")
    forwarded = re.search(r"^\s*([a-z|\-]+)\)\s*exec distfl \"\$@\"", text, re.M)
    assert forwarded, "run.sh has no line that forwards subcommands"
    words = set(forwarded.group(1).split("|"))
    missing = sorted(subcommands() - words)
    assert not missing, f"run.sh does not forward: {', '.join(missing)}"
    assert {"-h", "--help", "--version"} <= words
