"""The templates in slurm/ submitted with sbatch, as they are, to a real (private,
single-node) Slurm; each result must equal the same config run locally, bit for bit.
multi_node.sbatch runs across two nodes in test_multi_node.py."""

from __future__ import annotations

import csv
import subprocess
import sys
import time

import h5py
import pytest
from runfile import assert_same_run, fedgwc_toml
from slurm_cluster import TEMPLATES, job_output, local_run, submit_sweep
from timing import limit


@pytest.mark.parametrize(
    ("template", "args", "world"),
    [
        ("srun_native.sbatch", [], 3),
        ("single_node.sbatch", [], 3),
        ("mpi.sbatch", [], 3),
    ],
)
def test_template_equals_local_run(slurm, work, template, args, world):
    tmp, config, env, reference = work
    out = tmp / f"{template}.h5"
    job = slurm.sbatch(TEMPLATES / template, *args, cwd=tmp,
                       env={**env, "CONFIG": str(config), "OUT": str(out)})  # fmt: skip
    state = slurm.wait(job, timeout=limit(300))
    log = job_output(tmp, job)
    assert state == "COMPLETED", f"{template}: {state}\n{log}\n{slurm.logs()}"
    assert f"world size {world}" in log, log
    assert log.count("final balanced accuracy") == 1, log  # rank 0 alone prints
    with h5py.File(out, "r") as f:
        assert int(f.attrs["world_size"]) == world
    assert_same_run(reference, out)


def test_sweep_array_gathers_one_row_per_task(slurm, work):
    tmp, _, env, _ = work
    job, config, outdir = submit_sweep(slurm, tmp, env)
    # the follow-up job of the template's header, as written there
    table = outdir / "results.csv"
    proc = subprocess.run(
        ["sbatch", "--parsable", f"--dependency=afterany:{job}", "--output=gather-%j.out",
         f"--wrap={sys.executable} -m distfl gather {outdir} --key algorithm.beta --csv {table}"],
        cwd=tmp, env={**slurm.env, **env}, capture_output=True, text=True, timeout=limit(60),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    gather_job = proc.stdout.strip().split(";")[0]
    assert slurm.wait(job, timeout=limit(400)) in ("COMPLETED", ""), job_output(tmp, job)
    state = slurm.wait(gather_job, timeout=limit(120))
    printed = (tmp / f"gather-{gather_job}.out").read_text()
    assert state == "COMPLETED", printed
    files = sorted(p.name for p in outdir.glob("*.h5"))
    assert files == ["beta0.5-seed3.h5", "beta0.5-seed4.h5", "beta2-seed3.h5", "beta2-seed4.h5"]
    with open(table, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4
    grid = sorted((float(r["algorithm.beta"]), int(r["seed"])) for r in rows)
    assert grid == [(0.5, 3), (0.5, 4), (2.0, 3), (2.0, 4)]
    assert all(r["rounds_done"] == "12" and r["algorithm"] == "fedgwc" for r in rows)
    assert len([ln for ln in printed.splitlines() if "beta" in ln and ".h5" in ln]) == 4
    # a grid point equals the same config run locally
    local = local_run(tmp, config, tmp / "sweep-local.h5", "--set", "algorithm.beta=2",
                      "--set", "run.seed=4")  # fmt: skip
    assert_same_run(local, outdir / "beta2-seed4.h5")


def test_preempt_signal_requeue_resume_equals_uninterrupted(slurm, work):
    tmp, _, env, _ = work
    config = tmp / "preempt.toml"
    config.write_text(fedgwc_toml(120))
    out = tmp / "preempt.h5"
    job = slurm.sbatch(TEMPLATES / "preempt.sbatch", cwd=tmp,
                       env={**env, "CONFIG": str(config), "OUT": str(out)})  # fmt: skip
    log = tmp / f"distfl-preempt-{job}.out"
    deadline = time.monotonic() + limit(120)
    while not (log.exists() and "round " in log.read_text()):
        assert time.monotonic() < deadline, f"no progress from the job\n{job_output(tmp, job)}"
        assert slurm.state(job) in ("PENDING", "RUNNING"), job_output(tmp, job)
        time.sleep(0.3)
    # the warning Slurm sends before the time limit (--signal=USR1@...), sent now
    slurm.run("scancel", "--signal=USR1", job)
    # the uninterrupted run, while Slurm holds the requeued job for cred_expire + 1 s before
    # it starts again (releasing it sooner fails it: "Job credential revoked")
    reference = local_run(tmp, config, tmp / "preempt-local.h5")
    state = slurm.wait(job, timeout=limit(300))  # a requeued job stays in the queue
    text = log.read_text()
    assert state in ("COMPLETED", ""), f"{state}\n{text}"
    assert "stopped by SIGUSR1 after round" in text, text
    assert "requeueing job" in text, text
    assert "restart 1 --resume" in text, text
    assert "finished (round 120 of 120)" in text, text
    assert_same_run(reference, out)
