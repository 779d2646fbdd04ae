"""A private single-node Slurm for the template tests: slurm.conf, state, spool and logs in a
temporary directory, munged, slurmctld and slurmd started in the foreground as children of
the test session and stopped at its end.

Where the daemons are missing: in CI (``CI`` set) as root with apt, the Debian packages are
installed; elsewhere every test here is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "sinfo", "munged")

CONF = """\
ClusterName=distfl-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
# a requeued job waits cred_expire + 1 s before it may start again (default 120 s); its old
# credential stays revoked until then, so releasing it earlier fails it
AuthInfo=cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=600
InactiveLimit=0
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=8000 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def _missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _install() -> str | None:
    """Install the Debian packages in CI; return why not, or None when installed."""
    if not os.environ.get("CI"):
        return "no Slurm daemons here (CI installs Debian's slurmctld, slurmd, munge)"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "no Slurm daemons, and not root with apt-get to install them"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateSlurm:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.started_munged = False
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for key in list(self.env):  # an outer job's variables must not leak into ours
            if key.startswith(("SLURM_", "SBATCH_", "SRUN_")) and key != "SLURM_CONF":
                del self.env[key]

    def start(self) -> None:
        for sub in ("state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            CONF.format(root=self.root, ctld_port=_free_port(), d_port=_free_port())
        )
        self._start_munge()
        self.procs.append(
            subprocess.Popen(["slurmctld", "-D", "-i"], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=open(self.root / "slurmctld.err", "w"))
        )  # fmt: skip
        self.procs.append(
            subprocess.Popen(["slurmd", "-D", "-N", "localhost"], env=self.env,
                             stdout=subprocess.DEVNULL, stderr=open(self.root / "slurmd.err", "w"))
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip()
            if out in ("idle", "mixed", "allocated"):
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.3)
        raise RuntimeError(f"the private Slurm did not come up:\n{self.logs()}")

    def _start_munge(self) -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
            return
        run_dir = Path("/run/munge")
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(run_dir, "munge", "munge")
        if not Path("/etc/munge/munge.key").exists():
            subprocess.run(["mungekey", "--create"], check=True)
            shutil.chown("/etc/munge/munge.key", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True, timeout=30)
        self.started_munged = True

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {proc.stdout}{proc.stderr}")
        return proc

    def sbatch(self, script: Path, *args: str, cwd: Path, env: dict | None = None) -> str:
        """Submit; return the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *args, str(script)], cwd=cwd, env={**self.env, **(env or {})},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {script}: {proc.stdout}{proc.stderr}")
        return proc.stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        """The job's state (array jobs: every task's, space separated), '' once it is gone."""
        out = self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.split()
        if out:
            return " ".join(out)
        out = self.run("scontrol", "show", "job", job, check=False).stdout
        for part in out.split():
            if part.startswith("JobState="):
                return part.split("=", 1)[1]
        return ""

    def wait(self, job: str, timeout: float = 300) -> str:
        """Poll until the job (every array task) has left the queue; its final state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.split()
            if not pending:
                return self.state(job)
            time.sleep(0.5)
        raise TimeoutError(f"job {job} still queued after {timeout} s:\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.err", "slurmd.err"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-30:]))
        return "\n".join(out)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        pid_file = Path("/run/munge/munged.pid")
        if self.started_munged and pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().strip()), 15)
            except (ValueError, ProcessLookupError):
                pass


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    missing = _missing()
    if missing:
        why = _install()
        if why is not None:
            pytest.skip(f"{why}; missing: {', '.join(missing)}")
        if _missing():
            pytest.skip(f"Slurm packages installed but still missing {_missing()}")
    if os.geteuid() != 0:
        pytest.skip("the private Slurm runs its daemons as root (SlurmUser=root)")
    cluster = PrivateSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    """The bin/ of the Python that runs the tests: distfl, torchrun and mpiexec live there."""
    return Path(sys.executable).parent
