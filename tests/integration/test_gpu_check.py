"""scripts/gpu_check.sh, the check made for one GPU: on the CPU every part runs at a tiny
size (the default job, the same job again compared bit for bit, two ranks under torchrun
with --comm gloo compared with one process, the bare vmap round against distfl's trainers,
the memory estimate) and writes the summary; a part that fails, raises or runs past its
limit is recorded and the next one runs. The tests marked ``cuda`` run the check on a GPU
and skip elsewhere."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHELL = ROOT / "scripts" / "gpu_check.sh"
SCRIPT = ROOT / "scripts" / "gpu_check.py"
KEYS = ["env", "a", "b", "c", "d", "e", "n"]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["gpu_check"]


def _check(helpers, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        ["bash", str(SHELL), str(out), *args],
        env=helpers.clean_env(PYTHON=sys.executable), capture_output=True, text=True,
        timeout=limit(600), cwd=out.parent,
    )  # fmt: skip
    summary_file = out / "gpu-check.json"
    assert summary_file.is_file(), proc.stdout + proc.stderr
    return proc, json.loads(summary_file.read_text())


def test_every_part_runs_on_the_cpu(tmp_path, helpers):
    out = tmp_path / "check"
    proc, summary = _check(helpers, out, "--device", "cpu")
    parts = {p["key"]: p for p in summary["parts"]}
    statuses = {k: p["status"] for k, p in parts.items()}
    assert statuses == {**dict.fromkeys(KEYS[:-1], "passed"), "n": "skipped"}, "\n".join(
        f"{k}: {p['error']}" for k, p in parts.items()
    )
    assert parts["n"]["error"] == "needs cuda"
    assert proc.returncode == 0, proc.stderr
    assert (summary["device"], summary["size"], summary["finished"], summary["passed"]) == (
        "cpu", "tiny", True, True,
    )  # fmt: skip
    env, a, b, c, d, e = (parts[k]["numbers"] for k in KEYS[:-1])
    assert env["missing"] == [] and env["gloo"] and env["torch"].startswith("2.")
    # the default job, 3 rounds, on the CPU: none of the CUDA settings made
    assert a["rounds"] == 3 and 0 <= a["accuracy"] <= 1 and a["rounds_per_s"] > 0
    assert a["settings"]["deterministic_algorithms"] is False
    assert a["estimate"]["total_bytes"] == sum(a["estimate"]["terms_bytes"].values()) > 0
    # the same job again, and two ranks: distfl compare says the same bits
    same = "distfl compare: the runs hold the same bits in every compared part"
    assert b["compare_exit"] == 0 and b["compare"][-1] == same
    assert (c["world_size"], c["backend"], c["compare_exit"]) == (2, "gloo", 0)
    assert c["compare"][-1] == same
    # the bare vmap round and distfl's trainers: all timed, the same numbers from one batch
    assert d["errors"] == {}
    assert d["agreement_max_abs"] == 0.0 and d["agreement_clients"] == 8
    for key in ("vectorised_trainer", "batched_trainer", "distfl_vectorised_round",
                "distfl_batched_round"):  # fmt: skip
        assert d[f"{key}_vs_bare"] > 0, key
    assert d["distfl_vectorised_trainer_recorded"] == "vectorised"
    assert d["distfl_batched_trainer_recorded"] == "batched"
    assert d["auto_picks"] == "batched"
    (row,) = e["rows"]
    assert row["job"] == "default" and row["peak_allocated_bytes"] is None
    assert e["device_memory_checked"] is False
    # the text summary: a head line, one line per part, the count
    lines = (out / "gpu-check.txt").read_text().splitlines()
    assert len(lines) == len(KEYS) + 2
    assert [line.split()[:2] for line in lines[1:-1]] == [[k, statuses[k]] for k in KEYS]
    assert lines[-1] == "6 of 7 parts passed"
    for name in ("a", "b", "c"):
        assert (out / "runs" / f"{name}.h5").is_file()
    assert (out / "logs" / "c-two-ranks-gloo.log").is_file()


def test_a_part_that_fails_raises_or_overruns_leaves_the_others(tmp_path, monkeypatch, gpu_check):
    monkeypatch.setattr(gpu_check, "MIN_PART_S", 0.5)
    monkeypatch.setattr(gpu_check, "RESERVE_S", 0.0)
    pid_file = tmp_path / "pid"

    def fails(ctx):
        raise gpu_check.PartFailed("did not hold", {"measured": 2})

    def raises(ctx):
        raise ZeroDivisionError("boom")

    def overruns(ctx):  # its child would sleep far past the check's limit below
        code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); " \
               f"time.sleep({4 * limit(30)})"  # fmt: skip
        ctx.child("sleeper", [sys.executable, "-c", code])

    def holds(ctx):
        return {"measured": 1}

    Part = gpu_check.Part
    parts = [Part("p1", "fails", 30, fails), Part("p2", "raises", 30, raises),
             Part("p3", "overruns", 2, overruns), Part("p4", "holds", 30, holds),
             Part("p5", "needs cuda", 30, holds, devices=("cuda",))]  # fmt: skip
    ctx = gpu_check.Context(device="cpu", size="tiny", out=tmp_path / "out", work=tmp_path)
    seen = []
    t0 = time.monotonic()
    records = gpu_check.run_parts(parts, ctx, budget_s=120, on_part=seen.append)
    assert time.monotonic() - t0 < limit(30)  # the overrunning child was not waited for
    assert seen == records
    got = {r["key"]: (r["status"], r["numbers"]) for r in records}
    assert got == {
        "p1": ("failed", {"measured": 2}),
        "p2": ("failed", {}),
        "p3": ("timed out", {}),
        "p4": ("passed", {"measured": 1}),
        "p5": ("skipped", {}),
    }
    assert records[1]["error"] == "ZeroDivisionError: boom"
    assert "ZeroDivisionError" in records[1]["traceback"]
    assert "sleeper still running after 2 s" in records[2]["error"]
    with pytest.raises(ProcessLookupError):  # the overrunning child was ended
        os.kill(int(pid_file.read_text()), 0)
    # a budget spent before a part begins skips it
    late = gpu_check.run_parts(parts[3:4], ctx, budget_s=0.1, on_part=lambda r: None)
    assert late[0]["status"] == "skipped" and "budget" in late[0]["error"]
    # the summary holds every record, and its text one line per part
    summary = {"started": "now", "device": "cpu", "size": "tiny", "distfl": "x",
               "finished": True, "parts": records}  # fmt: skip
    gpu_check.write_summary(tmp_path / "out", summary)
    lines = (tmp_path / "out" / "gpu-check.txt").read_text().splitlines()
    assert [line.split()[:2] for line in lines[1:-1]] == [
        ["p1", "failed"], ["p2", "failed"], ["p3", "timed"], ["p4", "passed"], ["p5", "skipped"]
    ]  # fmt: skip
    assert "[did not hold]" in lines[1]
    assert lines[-1] == "1 of 5 parts passed"
    assert json.loads((tmp_path / "out" / "gpu-check.json").read_text())["parts"] == records


@pytest.mark.cuda
def test_every_part_passes_on_cuda_at_the_tiny_size(tmp_path, helpers):
    """On a GPU: the default job's bits repeat, two ranks sharing the GPU hold one process's
    bits, the trainers agree with the bare vmap round, the peak is within the estimate; NCCL
    with two ranks on one GPU ends (one line, or the same bits) rather than hangs."""
    out = tmp_path / "check"
    proc, summary = _check(helpers, out, "--device", "cuda", "--size", "tiny")
    parts = {p["key"]: p for p in summary["parts"]}
    failed = {k: p["error"] for k, p in parts.items() if p["status"] != "passed"}
    assert failed == {}, (out / "gpu-check.txt").read_text()
    assert parts["a"]["numbers"]["settings"]["deterministic_algorithms"] is True
    assert proc.returncode == 0


def test_a_default_job_that_fails_falls_back_to_the_reference_trainer(
    tmp_path, monkeypatch, gpu_check
):
    """Part a failing with its own trainer still leaves a run file for b, c, e and n: the
    same job with train.trainer = sequential, which the later runs then use too."""
    calls = []

    def run_default(ctx, label, out):
        calls.append((label, gpu_check.default_job_args(ctx, out)))
        if label == "a-default-job":
            raise gpu_check.PartFailed("a-default-job: distfl run exited 1: RuntimeError")
        return None, {"run_file": str(out), "rounds": 3}

    monkeypatch.setattr(gpu_check, "_run_default", run_default)
    ctx = gpu_check.Context(device="cpu", size="tiny", out=tmp_path, work=tmp_path)
    with pytest.raises(gpu_check.PartFailed) as failed:
        gpu_check.part_default_job(ctx)
    assert "with train.trainer = sequential it ran" in str(failed.value)
    assert (
        failed.value.numbers
        == ctx.shared["a"]
        == {"run_file": str(tmp_path / "runs" / "a.h5"), "rounds": 3}
    )
    (first, args), (second, fallback) = calls
    assert (first, second) == ("a-default-job", "a-default-job-sequential")
    assert fallback == [*args, *gpu_check.FALLBACK]
    assert gpu_check.default_job_args(ctx, tmp_path / "b.h5")[-2:] == gpu_check.FALLBACK
