"""Whether a change to distfl (a restructuring, say) kept every run's bits: run a fixed set of
jobs with one distfl, the same with another, and compare the run files.

    python scripts/identity_check.py write DIR [--repo PATH]
    python scripts/identity_check.py compare DIR_A DIR_B [--repo PATH]

``write`` runs the steps below with the distfl at PATH (default: this script's repository):
each child is ``sys.executable -m distfl ...`` (or ``-m torch.distributed.run ... -m
distfl``) with ``PYTHONPATH=PATH``, cwd DIR and paths relative to DIR (a git worktree of an
older commit runs with the same interpreter; the commands are the same in every DIR), under
a time limit (its process group is killed past it), its output in DIR/logs/STEP.log. It
prints one line per step with its seconds; DIR/manifest.json lists every run file (relative
path) with the command that wrote it, and the steps. DIR must be empty or absent. Exit 0
when every step succeeded.

default         ``distfl run --out default.h5``: the embedded default (FedGWC on digits).
participation   ``distfl run`` of the default job with FedPNS's selection (its state is
                the run's selection state), 60% of the clients available and 20%
                dropping out, 60 rounds: participation.h5.
soft            the default job with FedEM (soft clustering), 40 rounds: soft.h5.
resume          the default job stopped after 120 rounds and resumed from its /state to
                240 (``--resume``): resume.h5.
suite-table1    ``distfl suite --table emdcfl-table1-quick --seeds 0 --workers 2 --out
                suite-table1 --set run.rounds=20 --set eval.every=10``: EMD-CFL's Table 1 in
                its quick form (rotated digits, the MLP, all 40 clients a round) with its
                100 rounds cut to 20, seed 0: one run file per method of the table (21).
suite-fidelity  docs/fidelity.md's "Fidelity on digits" command (SUITES below) on the slice
                its test (tests/integration/test_fidelity_table.py) runs: ``backdoor``, seed
                0, the preset's rounds, its 11 algorithms and variants: 11 run files.
bench           ``distfl bench --scale --scale-quick --json`` > bench/scale-quick.json: the
                quick grid (4 rows, 3 rounds each); every row must be ok. The bench runs its
                rows in a temporary folder and deletes each run file once read (no option
                keeps them), so:
bench-runs      each config of that JSON's ``configs`` (the grid's definition, as the
                measured distfl has it) written to bench/KEY.toml and run as ``distfl run
                --config bench/KEY.toml --out bench/KEY.h5`` (a W=3 row under ``torchrun
                --standalone --nproc-per-node 3 ... --comm torch``), with the bench's
                environment (OMP_NUM_THREADS=1): 4 run files.

40 run files in all. On a 2-core machine beside two CPU-bound runs, two writes took 146 and
127 s (default 5 s, the three single runs 9 s, suite-table1 58 s, suite-fidelity 44 s, bench
15 s, bench-runs 15 s); compare, under 2 minutes.

``compare`` runs ``distfl compare --ignore timing A/f B/f`` (exit 0: the same bits in config,
clients, metrics, tree and state; timing, the wall clock, differs between any two runs and
is the only part left out) for every run file f of A's manifest, with the distfl at --repo
(default: this script's repository), and prints one line per file (``same``, or the first
lines of the difference), a note for each command that differs between the manifests, and
``N of M run files identical``. Exit 0 only when all are identical and both manifests list
the same files; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "manifest.json"
PY = ["python"]  # how commands are written in the manifest (sys.executable runs them)
#: the suites' commands (after ``python -m distfl``), run in DIR
#: single runs, each a list of ``distfl run`` arguments run in turn
RUNS = {
    "participation": [
        "--set participation.selection='fedpns' --set participation.availability='fraction' "
        "--set participation.fraction=0.6 --set participation.dropout=0.2 --set run.rounds=60 "
        "--out participation.h5"
    ],
    "soft": ["--set algorithm.name='fedem' --set run.rounds=40 --out soft.h5"],
    "resume": ["--set run.rounds=120 --out resume.h5", "--resume resume.h5 --set run.rounds=240"],
}

SUITES = {
    "suite-table1": "suite --table emdcfl-table1-quick --seeds 0 --workers 2 --out suite-table1"
    " --set run.rounds=20 --set eval.every=10",
    "suite-fidelity": "suite backdoor --algorithms none,oracle,fedgwc,fedgwc_paper,emdcfl,cfl,"
    "ifca,ifca_random,fesem,fesem_random,flcl --variant fedgwc_paper=fedgwc:db_threshold=1,"
    "epsilon=1e-5,patience=1,stable_tests=1,reference_draws=0 --variant "
    "ifca_random=ifca:init=random --variant fesem_random=fesem:init=random --seeds 0 "
    "--workers 2 --out suite-fidelity --set algorithm.num_clusters=0 "
    "--set algorithm.emd_epsilon=0.15",
}
#: the variables of a launcher (torchrun, mpiexec, srun), left out of every child's environment
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip
LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "HYDRA_", "MPI_LOCAL")


def child_env(repo: Path, **extra: str) -> dict[str, str]:
    """This environment without a launcher's variables, with PYTHONPATH=repo."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)
    }
    env["PYTHONPATH"] = str(repo)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_child(
    argv: list[str], cwd: Path, env: dict, log: Path, timeout_s: float, stdout: Path | None = None
) -> tuple[int, str]:
    """Run ``sys.executable ARGV`` in its own process group, killed past ``timeout_s``;
    stderr (and stdout unless ``stdout``) appended to ``log``. Returns (exit code, status)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as err, open(stdout or log, "a") as out:
        err.write(f"$ {shlex.join(PY + argv)}\n")
        err.flush()
        proc = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=timeout_s)
        except BaseException as exc:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                return 124, f"timed out after {timeout_s:g} s"
            raise
    return rc, "ok" if rc == 0 else f"exit {rc}"


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)  # inf and nan as TOML writes them
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"no TOML for {v!r}")


def config_toml(config: dict) -> str:
    return "".join(
        f"[{s}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in vals.items()) + "\n"
        for s, vals in config.items()
    )


def write(out: Path, repo: Path) -> int:
    repo = repo.resolve()
    if not (repo / "distfl" / "__init__.py").is_file():
        sys.exit(f"identity_check: no distfl package in {repo}")
    if out.exists() and any(out.iterdir()):
        sys.exit(f"identity_check: {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    git = ["git", "--no-optional-locks", "-C", str(repo)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    manifest = {"repo": str(repo), "commit": commit.stdout.strip() or None,
                "dirty": bool(dirty.stdout.strip()), "python": sys.executable,
                "steps": [], "files": {}}  # fmt: skip
    env = child_env(repo)
    logs = out / "logs"

    def step(name: str, body) -> None:
        t0 = time.perf_counter()
        try:
            status, files = body()
        except Exception as exc:  # a failed step is recorded, the others still run
            status, files = f"failed: {type(exc).__name__}: {exc}", {}
        seconds = time.perf_counter() - t0
        manifest["files"].update(files)
        manifest["steps"].append(
            {"name": name, "status": status, "seconds": round(seconds, 1), "run_files": len(files)}
        )
        print(f"{name:<15} {seconds:7.1f} s  {status}  ({len(files)} run files)", flush=True)
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")

    def default():
        argv = ["-m", "distfl", "run", "--out", "default.h5"]
        rc, status = run_child(argv, out, env, logs / "default.log", 600)
        return status, ({"default.h5": shlex.join(PY + argv)} if rc == 0 else {})

    def runs(name: str, *commands: str):
        """``distfl run`` commands in turn (each a string of arguments); the run file is the
        last command's ``--out`` or ``--resume``."""
        for args in commands:
            argv = ["-m", "distfl", "run", *shlex.split(args)]
            rc, status = run_child(argv, out, env, logs / f"{name}.log", 600)
            if rc != 0:
                return status, {}
        flag = "--out" if "--out" in argv else "--resume"
        return status, {argv[argv.index(flag) + 1]: shlex.join(PY + argv)}

    def suite(name: str):
        argv = ["-m", "distfl", *shlex.split(SUITES[name])]
        rc, status = run_child(argv, out, env, logs / f"{name}.log", 900)
        folder = out / argv[argv.index("--out") + 1]
        found = sorted(p.relative_to(out).as_posix() for p in folder.glob("*.h5"))
        return status, {f: shlex.join(PY + argv) for f in found}

    bench_json = out / "bench" / "scale-quick.json"

    def bench():
        argv = ["-m", "distfl", "bench", "--scale", "--scale-quick", "--json"]
        bench_json.parent.mkdir(parents=True, exist_ok=True)
        rc, status = run_child(argv, out, env, logs / "bench.log", 600, stdout=bench_json)
        if rc == 0:
            rows = json.loads(bench_json.read_text())["rows"]
            bad = [r["key"] for r in rows if r["status"] != "ok"]
            status = f"rows not ok: {', '.join(bad)}" if bad else status
        return status, {}

    def bench_runs():
        report = json.loads(bench_json.read_text())
        sizes = {r["key"]: int(r.get("world_size", 1)) for r in report["rows"]}
        files, failed = {}, []
        for key, config in report["configs"].items():
            toml, h5 = f"bench/{key}.toml", f"bench/{key}.h5"
            (out / toml).write_text(config_toml(config))
            argv = ["-m", "distfl", "run", "--config", toml, "--out", h5]
            w = sizes.get(key, 1)
            if w > 1:
                launcher = f"-m torch.distributed.run --standalone --nproc-per-node {w}"
                argv = [*launcher.split(), *argv, "--comm", "torch"]
            rc, status = run_child(
                argv, out, child_env(repo, OMP_NUM_THREADS="1"), logs / "bench-runs.log", 600
            )
            if rc == 0:
                files[h5] = shlex.join(PY + argv)
            else:
                failed.append(f"{key}: {status}")
        return ("ok" if not failed else "failed: " + "; ".join(failed)), files

    dirty = ", uncommitted changes" if manifest["dirty"] else ""
    print(f"distfl at {repo} ({manifest['commit'] or 'no git'}{dirty}) -> {out}", flush=True)
    step("default", default)
    for name, commands in RUNS.items():
        step(name, lambda name=name, commands=commands: runs(name, *commands))
    for name in SUITES:
        step(name, lambda name=name: suite(name))
    step("bench", bench)
    step("bench-runs", bench_runs)
    total = sum(s["seconds"] for s in manifest["steps"])
    ok = all(s["status"] == "ok" for s in manifest["steps"])
    print(f"{len(manifest['files'])} run files in {total:.1f} s; manifest: {out / MANIFEST}")
    return 0 if ok else 1


def compare(a: Path, b: Path, repo: Path) -> int:
    a, b = a.resolve(), b.resolve()
    ma, mb = (json.loads((d / MANIFEST).read_text()) for d in (a, b))
    fa, fb = ma["files"], mb["files"]
    env = child_env(repo.resolve())
    same = 0
    for f, command in fa.items():
        if f not in fb:
            print(f"{f}: not in B's manifest")
            continue
        try:
            argv = [*"-m distfl compare --ignore timing".split(), str(a / f), str(b / f)]
            proc = subprocess.run([sys.executable, *argv], env=env, cwd="/", capture_output=True,
                                  text=True, timeout=300)  # fmt: skip
        except subprocess.TimeoutExpired:
            print(f"{f}: distfl compare timed out after 300 s")
            continue
        if proc.returncode == 0:
            same += 1
            print(f"{f}: same")
        else:
            said = (proc.stdout + proc.stderr).splitlines()
            lines = [ln for ln in said if ln.strip() and not ln.startswith(("A  ", "B  "))]
            lines = [ln for ln in lines if not ln.rstrip().endswith(" same")]
            print(f"{f}: differs (exit {proc.returncode})")
            for ln in lines[:4]:
                print(f"    {ln}")
        if fb[f] != command:
            print(f"    note: the commands differ: A {command!r}, B {fb[f]!r}")
    only_b = sorted(set(fb) - set(fa))
    for f in only_b:
        print(f"{f}: not in A's manifest")
    print(f"{same} of {len(fa)} run files identical")
    return 0 if same == len(fa) and not only_b and set(fa) == set(fb) else 1


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser("identity_check", description=__doc__, formatter_class=raw)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="run every step with one distfl and write DIR's run files")
    w.add_argument("dir", metavar="DIR", type=Path)
    w.add_argument("--repo", type=Path, default=ROOT, help=f"whose distfl runs (default {ROOT})")
    c = sub.add_parser("compare", help="distfl compare every run file of A's manifest with B's")
    c.add_argument("a", metavar="DIR_A", type=Path)
    c.add_argument("b", metavar="DIR_B", type=Path)
    c.add_argument("--repo", type=Path, default=ROOT, help=f"whose distfl compares ({ROOT})")
    args = parser.parse_args(argv)
    if args.command == "write":
        return write(args.dir, args.repo)
    return compare(args.a, args.b, args.repo)


if __name__ == "__main__":
    sys.exit(main())
