"""The suite's closing line counts the runs it kept from before (finished already, not run
again) apart from those it ran now, and times only the latter."""

from __future__ import annotations

from pathlib import Path

import pytest

from distfl.tools.suite import Outcome, summary_line

OUT = Path("out")


def outcomes(*actions: str, failed: int = 0) -> list[Outcome]:
    """One outcome per action (``run``, ``resume``, ``keep``); the first ``failed`` of
    those run now failed."""
    out, left = [], failed
    for action in actions:
        bad = action != "keep" and left > 0
        left -= bad
        out.append(Outcome(None, action, 1 if bad else 0, 0.0 if action == "keep" else 5.0))
    return out


@pytest.mark.parametrize(
    ("actions", "failed", "line"),
    [(("keep",) * 4, 0, "4 runs kept from before (finished already), 0 run now"),
     (("keep",), 0, "1 run kept from before (finished already), 0 run now"),
     (("run",) * 4, 0, "4 of 4 runs finished in 23.2 s"),
     (("run", "run", "resume"), 1, "2 of 3 runs finished in 23.2 s"),
     (("keep", "keep", "run", "resume"), 0,
      "2 runs kept from before (finished already), 2 run now: 2 of 2 finished in 23.2 s"),
     (("keep", "run", "run"), 1,
      "1 run kept from before (finished already), 2 run now: 1 of 2 finished in 23.2 s")],
)  # fmt: skip
def test_kept_runs_are_reported_as_kept(actions, failed, line):
    text = summary_line(outcomes(*actions, failed=failed), 23.24, OUT)
    assert text == f"{line}; table also in {OUT / 'suite.csv'}\n"


def test_a_suite_whose_runs_were_all_kept_says_so(tmp_path, monkeypatch):
    """``suite`` on a finished run file of the job's config keeps it and says so."""
    import io
    from dataclasses import replace

    from distfl.runfile.run import read
    from distfl.tools import suite as suite_module
    from distfl.tools.suite_plan import Job

    path = Path(__file__).resolve().parents[1] / "data" / "runfiles-v0.1.0" / "none.h5"
    stored = read(path).config
    config = replace(stored, run=replace(stored.run, out=str(path)))
    job = Job("old", ("--config", "old.toml"), "none", 0, path, (), config)
    monkeypatch.setattr(suite_module, "plan_jobs", lambda *a, **k: [job])
    stream = io.StringIO()
    _, done = suite_module.suite(["old"], algorithms=["none"], seeds=[0], out=tmp_path,
                                 stream=stream)  # fmt: skip
    assert [o.action for o in done] == ["keep"]
    assert stream.getvalue().endswith(
        f"\n1 run kept from before (finished already), 0 run now; table also in "
        f"{tmp_path / 'suite.csv'}\n"
    )
