"""``distfl report`` over an earlier report's directory removes and replaces only the
earlier report's own files: a PNG or PDF of the user's, a symbolic link at a figure's
name, or anything of the user's under ``runs/`` is refused in one line (exit code 2)
before anything is removed or written, and left as it was; other files beside a report are
left alone; the earlier report's figures, marked as the report's or shown by its pages
(a report written before the marks), are replaced.

The commands run in this process (``helpers.cli``) on a run file made in it
(``helpers.run_alone``)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from cliproc import assert_one_line_error
from PIL import Image

pytestmark = pytest.mark.integration

RUN = "tiny--fedavg--s0.h5"


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory, helpers) -> Path:
    """A suite's directory of one run file (digits, 6 clients, 2 rounds)."""
    directory = tmp_path_factory.mktemp("reportfiles") / "suite"
    directory.mkdir()
    helpers.run_alone(directory, "--preset", "digits", "--set", "run.rounds=2", "--set",
                      "data.num_clients=6", "--set", "server.clients_per_round=3", "--set",
                      'run.progress="none"', "--out", RUN)  # fmt: skip
    return directory


def report(helpers, cwd: Path, target: Path, out: str = "rep"):
    return helpers.cli(cwd, "report", str(target), "--out", out)


def listing(directory: Path) -> dict[str, bytes | str]:
    """Every entry under ``directory``: a file's bytes, a link's target."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(directory))
            if path.is_symlink():
                out[rel] = os.readlink(path)
            elif path.is_file():
                out[rel] = path.read_bytes()
    return out


@pytest.mark.parametrize("kind", ["run", "suite"])
def test_a_figure_of_the_users_beside_an_earlier_report_is_refused_and_kept(
    helpers, suite_dir, tmp_path, kind
):
    target = suite_dir / RUN if kind == "run" else suite_dir
    first = report(helpers, tmp_path, target)
    assert first.returncode == 0, first.stdout + first.stderr
    rep = tmp_path / "rep"
    (rep / "mine.png").write_bytes(b"\x89PNG\r\n\x1a\n my own figure")
    before = listing(rep)
    again = report(helpers, tmp_path, target)
    assert_one_line_error(again, "rep/mine.png", "no distfl report wrote")
    assert listing(rep) == before  # nothing removed, nothing written


@pytest.mark.parametrize("name", ["runs/notes.txt", f"runs/{Path(RUN).stem}/mine.pdf"])
def test_a_file_of_the_users_under_runs_is_refused_and_kept(helpers, suite_dir, tmp_path, name):
    first = report(helpers, tmp_path, suite_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    rep = tmp_path / "rep"
    (rep / name).write_text("mine\n")
    before = listing(rep)
    again = report(helpers, tmp_path, suite_dir)
    assert_one_line_error(again, f"rep/{name}", "no distfl report wrote")
    assert listing(rep) == before


def test_a_link_at_a_figures_name_is_refused_and_kept(helpers, suite_dir, tmp_path):
    first = report(helpers, tmp_path, suite_dir / RUN)
    assert first.returncode == 0, first.stdout + first.stderr
    rep = tmp_path / "rep"
    precious = tmp_path / "precious.png"
    precious.write_bytes(b"keep me")
    (rep / "extra.png").symlink_to(precious)
    (rep / "accuracy.png").unlink()
    (rep / "accuracy.png").symlink_to(precious)
    before = listing(rep)
    again = report(helpers, tmp_path, suite_dir / RUN)
    assert_one_line_error(again, "symbolic link", "no distfl report wrote")
    assert listing(rep) == before
    assert precious.read_bytes() == b"keep me"


def test_other_files_beside_a_report_are_left_alone(helpers, suite_dir, tmp_path):
    first = report(helpers, tmp_path, suite_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    rep = tmp_path / "rep"
    (rep / "notes.txt").write_text("my notes\n")
    (rep / "drafts").mkdir()
    (rep / "drafts" / "figure.png").write_bytes(b"mine")
    again = report(helpers, tmp_path, suite_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (rep / "notes.txt").read_text() == "my notes\n"
    assert (rep / "drafts" / "figure.png").read_bytes() == b"mine"


def test_an_earlier_reports_figures_are_replaced_marked_or_shown(helpers, suite_dir, tmp_path):
    """A figure of a report written before the marks (shown by its page, unmarked) and a
    figure of a report that stopped before its page (marked, shown by no page) are the
    report's own: removed, and the report written afresh."""
    first = report(helpers, tmp_path, suite_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    rep = tmp_path / "rep"
    figures = sorted(rep.glob("*.png")) + sorted(rep.glob("runs/*/*.png"))
    for path in figures:
        with Image.open(path) as im:
            assert im.text.get("Software") == "distfl report", path
    unmarked = rep / "suite-ari.png"
    with Image.open(unmarked) as im:
        buffer = io.BytesIO()
        im.save(buffer, format="PNG")  # no text: as distfl wrote it before the marks
    unmarked.write_bytes(buffer.getvalue())
    left = rep / "runs" / Path(RUN).stem / "split-9-matrices.png"
    shutil.copy(rep / "suite-rand.png", left)  # marked, and on no page
    again = report(helpers, tmp_path, suite_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not left.exists()
    with Image.open(unmarked) as im:
        assert im.text.get("Software") == "distfl report"
