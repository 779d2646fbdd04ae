"""docs/privacy.md's list of the algorithms a run with noise refuses is the code's: every
registered algorithm whose ``privacy_refusal`` at its default settings gives a reason, with
that reason, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from distfl.algorithms import algorithm_class, algorithm_names

PAGE = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
BLOCK = re.compile(r"<!-- privacy-refused -->\n(.*?)<!-- /privacy-refused -->", re.S)


def refused_lines() -> list[str]:
    out = []
    for name in algorithm_names():
        cls = algorithm_class(name)
        why = cls.privacy_refusal(cls.Params())
        if why:
            out.append(f"- `{name}`: {why}")
    return out


def test_the_page_lists_every_refused_algorithm_with_the_codes_reason():
    (block,) = BLOCK.findall(PAGE.read_text())
    assert block.strip().splitlines() == refused_lines()
    assert len(refused_lines()) >= 7  # the built-ins that mix clients' individual models
