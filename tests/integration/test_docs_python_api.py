"""docs/python-api.md is a walk-through whose Python blocks a reader runs in order in a
notebook: here they run so, in a fresh Python in an empty directory, with pandas (installed
apart from the venv, in ``.venv/extras/pandas``, by scripts/ensure_venv.sh), and what each
block prints is what the page shows after it, but for times and rates
(:mod:`docpage`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from docpage import blocks, differences, run_page

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
PANDAS = Path(sys.prefix) / "extras" / "pandas"


@pytest.mark.skipif(not PANDAS.is_dir(), reason=f"pandas is not installed apart in {PANDAS}")
def test_every_shown_output_of_the_python_api_page_is_what_its_block_prints(tmp_path, helpers):
    shown = [s for _, s in blocks(PAGE) if s is not None]
    assert len(shown) >= 12  # the page shows what most of its blocks print
    printed = run_page(PAGE, tmp_path, helpers.clean_env(PYTHONPATH=str(PANDAS)))
    problems = differences(PAGE, printed)
    assert not problems, "\n\n".join(problems)
    assert (tmp_path / "accuracy.png").is_file() and (tmp_path / "split.png").is_file()
