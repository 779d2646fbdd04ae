"""Rank 0's progress line: the round's mean training loss, the latest evaluated accuracy
carried forward with the round that measured it, the rate and the time left; a line every
tenth of the run, at each evaluation and at the end (``lines``); a long evaluation's own
line; and ``run.export``'s names and paths."""

from __future__ import annotations

import io
import math
import re

import pytest

from distfl.errors import ConfigError
from distfl.progress import Progress, duration
from distfl.runtime.export import export_paths


@pytest.fixture(autouse=True)
def no_columns(monkeypatch):
    """No COLUMNS from the process (a library imported by another test module of the same
    worker may set it): a test about the terminal's width sets its own."""
    monkeypatch.delenv("COLUMNS", raising=False)


def test_the_accuracy_is_carried_forward_with_its_round():
    p = Progress(40, "lines", io.StringIO())
    first = p.line(4, clusters=1, accuracy=math.nan, rounds_per_s=10.0, loss=2.5)
    assert first == "round  4/40 | clusters 1 | loss 2.5000 | acc   -   | 10.00 rounds/s | ETA 4 s"
    assert "acc 0.812 |" in p.line(10, clusters=2, accuracy=0.8123, rounds_per_s=10.0, loss=1.0)
    later = p.line(12, clusters=2, accuracy=math.nan, rounds_per_s=2.0, loss=0.75)
    assert "| loss 0.7500 | acc 0.812 (round 10) |" in later and later.endswith("ETA 14 s")


def test_lines_every_tenth_at_each_evaluation_and_at_the_end():
    stream = io.StringIO()
    p = Progress(20, "lines", stream)
    for t in range(1, 21):
        p.update(t, clusters=1, accuracy=0.5 if t == 5 else math.nan, rounds_per_s=1.0, loss=1.0)
    rounds = [int(line.split()[1].split("/")[0]) for line in stream.getvalue().splitlines()]
    assert rounds == [2, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20]


def test_the_bar_is_redrawn_in_place_and_ends_with_a_newline():
    stream = io.StringIO()
    p = Progress(2, "bar", stream)
    p.update(1, clusters=1, accuracy=math.nan, rounds_per_s=1.0, loss=1.0)
    p.update(2, clusters=1, accuracy=0.9, rounds_per_s=1.0, loss=1.0)
    text = stream.getvalue()
    assert text.count("\r[") == 2 and text.endswith("\x1b[K\n") and "#" * 24 in text


def test_a_long_evaluation_shows_its_progress_after_a_second_then_every_ten():
    stream = io.StringIO()
    p = Progress(20, "lines", stream)
    for done, seconds in [(100, 0.5), (300, 1.5), (900, 4.0), (2000, 11.0), (2400, 13.0),
                          (4000, 20.0)]:  # fmt: skip
        p.evaluation(20, done, 4000, seconds)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "round 20/20 | evaluating 300/4,000 clients | 200 clients/s | ETA 18 s",
        "round 20/20 | evaluating 2,400/4,000 clients | 185 clients/s | ETA 9 s",
    ]
    bar, quiet = io.StringIO(), io.StringIO()
    Progress(20, "bar", bar).evaluation(3, 50, 100, 2.0)
    Progress(20, "none", quiet).evaluation(3, 50, 100, 2.0)
    assert (
        bar.getvalue() == "\rround  3/20 | evaluating 50/100 clients | 25 clients/s | ETA 2 s\x1b[K"
    )
    assert quiet.getvalue() == ""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.2, "0 s"), (42.4, "42 s"), (185, "3m05s"), (7620, "2h07m"), (math.nan, "-"), (-1, "-")],
)
def test_durations_for_a_person(seconds, text):
    assert duration(seconds) == text


def test_the_exports_lie_beside_the_run_file():
    assert {k: str(p) for k, p in export_paths("runs/a.h5").items()} == {
        "jsonl": "runs/a.jsonl", "tensorboard": "runs/a-tb", "mlflow": "runs/mlruns",
        "wandb": "runs/a-wandb",
    }  # fmt: skip
    assert [str(p) for p in export_paths("run").values()] == [
        "run.jsonl", "run-tb", "mlruns", "run-wandb",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "needle"),
    [('["jsonl", "csv"]',
      "run.export: 'csv' is no export; allowed: jsonl, tensorboard, mlflow, wandb"),
     ('["jsonl", "jsonl"]', "an export is named twice"),
     ('["jsnl"]', "'jsnl' (did you mean 'jsonl'?) is no export")],
)  # fmt: skip
def test_run_export_names_what_it_allows(value, needle):
    import re

    from distfl.config import load

    with pytest.raises(ConfigError, match=re.escape(needle)):
        load(overrides=[f"run.export={value}"])


def frames(stream: io.StringIO) -> list[str]:
    """The frames a bar drew, without their carriage returns and erase sequences."""
    return [f.removesuffix("\x1b[K").rstrip("\n").removesuffix("\x1b[K")
            for f in stream.getvalue().split("\r") if f]  # fmt: skip


def draw_bar(columns: int, monkeypatch, *, rounds: int = 200) -> list[str]:
    """Every frame of a bar on a terminal ``columns`` wide (COLUMNS), the accuracy carried
    forward between evaluations and the longest numbers a run shows."""
    monkeypatch.setenv("COLUMNS", str(columns))
    stream = io.StringIO()
    p = Progress(rounds, "bar", stream)
    for t in (1, 10, 11, 150, rounds):
        acc = 0.8123 if t == 10 else math.nan
        p.update(t, clusters=12, accuracy=acc, rounds_per_s=123.45, loss=12.3456)
    p.evaluation(rounds, 2_400, 4_000_000, 13.0)
    return frames(stream)


@pytest.mark.parametrize("columns", [200, 120, 100, 80, 60, 40, 30, 20])
def test_the_bar_fits_the_terminal_giving_up_whole_fields(columns, monkeypatch):
    """Each frame fits in one line of the terminal, short of its last column; a narrower
    terminal drops whole fields (least important first), never cuts one, and the round
    is always shown (a terminal narrower than the round alone aside)."""
    wide = draw_bar(1000, monkeypatch)
    shown = draw_bar(columns, monkeypatch)
    assert len(shown) == len(wide) == 6
    for frame, full in zip(shown, wide, strict=True):
        assert len(frame) <= columns - 1, (columns, frame)
        text = frame.split("] ", 1)[-1] if frame.startswith("[") else frame
        assert text.startswith("round ")
        whole = full.split("] ", 1)[-1].split(" | ")
        carried = re.sub(r" \(round \d+\)", "", full.split("] ", 1)[-1]).split(" | ")
        assert set(text.split(" | ")) <= {*whole, *carried}, (frame, full)  # whole fields
    if columns >= 100:  # room for every field of a round's frame, the bar narrower at most
        for frame, full in list(zip(shown, wide, strict=True))[:-1]:
            assert len(frame.split(" | ")) == len(full.split(" | ")), frame


def test_the_order_in_which_a_narrowing_bar_gives_up_its_fields(monkeypatch):
    """First the bar narrows, then the round of a carried-forward accuracy goes, then the
    rate, the bar, the loss, the clusters; the time left stays longest."""
    seen = []
    for columns in range(130, 10, -1):
        frame = draw_bar(columns, monkeypatch)[2]  # round 11: accuracy of round 10
        if not seen or seen[-1] != frame:
            seen.append(frame)
    assert seen[0] == (
        "[#.......................] round  11/200 | clusters 12 | loss 12.3456 | "
        "acc 0.812 (round 10) | 123.45 rounds/s | ETA 2 s"
    )
    assert seen[1:7] == [
        "[#.........] round  11/200 | clusters 12 | loss 12.3456 | acc 0.812 (round 10) | "
        "123.45 rounds/s | ETA 2 s",
        "[#.........] round  11/200 | clusters 12 | loss 12.3456 | acc 0.812 | "
        "123.45 rounds/s | ETA 2 s",
        "[#.........] round  11/200 | clusters 12 | loss 12.3456 | acc 0.812 | ETA 2 s",
        "round  11/200 | clusters 12 | loss 12.3456 | acc 0.812 | ETA 2 s",
        "round  11/200 | clusters 12 | acc 0.812 | ETA 2 s",
        "round  11/200 | acc 0.812 | ETA 2 s",
    ]
    assert seen[7:9] == ["round  11/200 | ETA 2 s", "round  11/200"]


def test_a_bar_where_the_width_is_not_known_is_not_cut(monkeypatch):
    """No COLUMNS and a stream that is no terminal (a file): the frame is the whole line."""
    monkeypatch.delenv("COLUMNS", raising=False)
    stream = io.StringIO()
    Progress(200, "bar", stream).update(11, clusters=12, accuracy=0.5, rounds_per_s=1.0, loss=1.0)
    assert frames(stream) == [
        "[#.......................] round  11/200 | clusters 12 | loss 1.0000 | acc 0.500 | "
        "1.00 rounds/s | ETA 3m09s"
    ]


def test_the_eighty_column_bar_the_watching_page_shows(monkeypatch):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "watching.md").read_text("utf-8")
    monkeypatch.setenv("COLUMNS", "80")
    stream = io.StringIO()
    p = Progress(300, "bar", stream)
    p.update(250, clusters=2, accuracy=0.955, rounds_per_s=54.35, loss=0.1070)
    (frame,) = frames(stream)
    assert f"on 80\ncolumns: `{frame}`" in page, frame


@pytest.mark.parametrize("kind", ["tensorboard", "mlflow", "wandb"])
def test_an_export_whose_package_is_missing_is_refused_in_one_line(kind, monkeypatch):
    """Where the export's package is not importable (find_spec answers None), the config
    is refused before any work, naming the extra that installs it."""
    import importlib.util

    from distfl.config import load

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == kind else real(name, *a)
    )
    line = (
        f"run.export names {kind}, which needs the {kind} package: "
        f"pip install distfl[{kind}], or leave it out of run.export"
    )
    with pytest.raises(ConfigError) as caught:
        load(overrides=[f'run.export=["jsonl", "{kind}"]'])
    assert str(caught.value) == line
    load(overrides=['run.export=["jsonl"]'])  # the others need nothing
