"""docs/python-api.md is a walk-through whose Python blocks a reader runs in order in a
notebook: here they run so, in a fresh Python in an empty directory of the environment
``./run.sh`` makes (no pandas: its block that needs pandas is left out), and what each
block prints is what the page shows after it, but for times and rates (:mod:`docpage`).
The page's blocks print through NumPy, so that they print the same with pandas."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from docpage import NEEDS_PANDAS, blocks, differences, run_page

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


@pytest.mark.skipif(
    importlib.util.find_spec("pandas") is not None,
    reason="pandas is importable here, unlike in the environment ./run.sh makes",
)
def test_every_shown_output_of_the_python_api_page_is_what_its_block_prints(tmp_path, helpers):
    shown = [s for _, s in blocks(PAGE) if s is not None]
    assert len(shown) >= 12  # the page shows what most of its blocks print
    assert NEEDS_PANDAS in PAGE.read_text(encoding="utf-8")
    env = {k: v for k, v in helpers.clean_env().items() if k != "PYTHONPATH"}
    printed = run_page(PAGE, tmp_path, env)
    problems = differences(PAGE, printed, of_a_run=True)
    assert not problems, "\n\n".join(problems)
    assert (tmp_path / "accuracy.png").is_file() and (tmp_path / "split.png").is_file()
