"""A private Slurm: one node on this host, or several nodes each in its own network
namespace with its own address and host name (see tests/netns.py and README.md beside
this file). slurm.conf, state, spool and logs live in one directory; munged, slurmctld
and the slurmds run as children of the process that starts them and stop with it.

Also a command, to bring a cluster up by hand (root, Debian's slurmctld, slurmd,
slurm-client and munge installed) and keep it until Ctrl-C:

    python3 tests/slurm/slurm_cluster.py --nodes 2 /tmp/two-nodes
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: netns.py, runfile.py

from netns import Hosts, free_subnet, tag  # noqa: E402
from runfile import fedgwc_toml  # noqa: E402
from timing import limit  # noqa: E402

#: the templates under test
TEMPLATES = Path(__file__).resolve().parents[2] / "slurm"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "sinfo", "munged")
SHM = "/dev/shm"
#: the subnets the namespaced nodes may take (the first one free): node i is 10.231.X.i,
#: the controller 10.231.X.254
SUBNETS = (100, 199)

CONF = """\
ClusterName=distfl-test
# job ids of their own: MPICH names its shared-memory segments after the step (job id),
# and two private clusters (or two test sessions) counting from 1 would share names
FirstJobId={first_job_id}
SlurmctldHost=localhost({ctld_addr})
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
# a requeued job waits cred_expire + 1 s before it may start again (default 120 s); its old
# credential stays revoked until then, so releasing it earlier fails it
AuthInfo=cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
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
# a node that stops answering is DOWN after 10 s (default 300 s), and its jobs requeued;
# scaled by the tests' time factor (PrivateSlurm.slurmd_timeout), from which a job's
# collective timeout is set, so that on a loaded machine too a dead node's partners meet
# their own timeout before Slurm cancels them
SlurmdTimeout={slurmd_timeout}
{nodes}
# LLN: each job (each array task) goes to the least loaded node, so a sweep spreads
PartitionName=test Nodes={node_list} Default=YES MaxTime=INFINITE State=UP LLN=YES
"""
NODE = "NodeName={name} NodeAddr={addr} CPUs=8 RealMemory=8000 State=UNKNOWN"


def missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def install() -> str | None:
    """Install the Debian packages in CI; return why not, or None when installed."""
    if not os.environ.get("CI"):
        return "no Slurm daemons here (CI installs Debian's slurmctld, slurmd, munge)"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "no Slurm daemons, and not root with apt-get to install them"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit(600))
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return None


def _mapped_shm() -> set[str]:
    """The names of the /dev/shm files some live process has mapped now, or has just made
    (in the last minute: about to be mapped)."""
    names: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if f"{SHM}/" in line:
                        names.add(line.rsplit(f"{SHM}/", 1)[1].split()[0])
        except OSError:
            continue
    now = time.time()
    for name in os.listdir(SHM):
        try:
            if now - os.stat(os.path.join(SHM, name)).st_mtime < 60:
                names.add(name)
        except OSError:
            continue
    return names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateSlurm:
    """``nodes = 1``: one node, ``localhost``, on this host. ``nodes > 1``: nodes
    ``node1..nodeN``, each slurmd on its own namespaced host (10.231.X.i, host name
    nodei, an /etc/hosts naming every node), the controller on this host at 10.231.X.254
    (X: the first of :data:`SUBNETS` that no route of this host covers).
    """

    def __init__(self, root: Path, nodes: int = 1) -> None:
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.ctld: subprocess.Popen | None = None
        self.slurmds: dict[int, subprocess.Popen] = {}
        self.started_munged = False
        self._shm_before: set[str] = set()
        self.hosts: Hosts | None = None
        if nodes > 1:
            self.node_names = [f"node{i + 1}" for i in range(nodes)]
            self.hosts = Hosts(self.node_names, subnet=free_subnet(*SUBNETS), tag=tag("s"),
                               workdir=self.root)  # fmt: skip
        else:
            self.node_names = ["localhost"]
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for key in list(self.env):  # an outer job's variables must not leak into ours
            if key.startswith(("SLURM_", "SBATCH_", "SRUN_")) and key != "SLURM_CONF":
                del self.env[key]

    # -- daemons --------------------------------------------------------------------------

    def start(self) -> None:
        self._shm_before = set(os.listdir(SHM)) if os.path.isdir(SHM) else set()
        (self.root / "state").mkdir(parents=True, exist_ok=True)
        for name in self.node_names:
            (self.root / "spool" / name).mkdir(parents=True, exist_ok=True)
        if self.hosts is not None:
            self.hosts.build()
            addrs, ctld_addr = self.hosts.addresses, self.hosts.gateway
        else:
            addrs, ctld_addr = ["127.0.0.1"], "127.0.0.1"
        nodes = "\n".join(
            NODE.format(name=n, addr=a) for n, a in zip(self.node_names, addrs, strict=True)
        )
        node_list = ",".join(self.node_names)
        #: how long a silent node stays up for Slurm, scaled as the tests' limits are when
        #: the cluster starts (a job's collective timeout is set from it, not from a limit
        #: taken later under another load)
        self.slurmd_timeout = round(limit(10))
        self.conf.write_text(
            CONF.format(root=self.root, ctld_addr=ctld_addr, ctld_port=_free_port(),
                        d_port=_free_port(), nodes=nodes, node_list=node_list,
                        first_job_id=random.randrange(1000, 60_000_000),
                        slurmd_timeout=self.slurmd_timeout)
        )  # fmt: skip
        self._start_munge()
        self.ctld = subprocess.Popen(
            ["slurmctld", "-D", "-i"], env=self.env, stdout=subprocess.DEVNULL,
            stderr=open(self.root / "slurmctld.err", "w"),
        )  # fmt: skip
        for i in range(len(self.node_names)):
            self.start_node(i)
        self.wait_nodes("idle")

    def start_node(self, i: int) -> None:
        """Start node ``i``'s slurmd (again, after :meth:`kill_node`)."""
        name = self.node_names[i]
        argv = ["slurmd", "-D", "-N", name]
        if self.hosts is not None:
            argv = self.hosts.on(i, *argv)
        self.slurmds[i] = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.DEVNULL,
            stderr=open(self.root / f"slurmd-{name}.err", "a"),
        )  # fmt: skip

    def kill_node(self, i: int) -> None:
        """Node ``i`` dies as a machine does when its power goes: first it drops off the
        network (nothing it held is closed or reset for its peers), then every process on
        it ends at once (slurmd, the job steps, the ranks). Needs namespaced nodes."""
        assert self.hosts is not None, "only a cluster of namespaced nodes can lose a node"
        self.hosts.unplug(i)
        for pid in self.hosts.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.slurmds[i].wait(timeout=limit(30))

    def revive_node(self, i: int) -> None:
        """Node ``i`` boots again: back on the network, its slurmd started."""
        assert self.hosts is not None
        self.hosts.plug(i)
        self.start_node(i)

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split("\n")
        return dict(line.split(None, 1) for line in out if line.strip())

    def wait_nodes(self, state: str, timeout: float | None = None, nodes: list[str] | None = None):
        """Until every node of ``nodes`` (default: all) is in ``state`` (``idle`` also
        accepts ``mixed`` and ``allocated``: up and in service), for at most ``timeout``
        seconds (default ``limit(60)``)."""
        accept = {"idle", "mixed", "allocated"} if state == "idle" else {state}
        nodes = nodes or self.node_names
        timeout = limit(60) if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.node_states()
            if all(states.get(n, "").rstrip("*~#!%$@^-") in accept for n in nodes):
                return
            if self.ctld.poll() is not None:
                break
            time.sleep(0.3)
        states = self.node_states()
        raise RuntimeError(
            f"nodes {nodes} not {state} after {timeout:.0f} s ({states}):\n{self.logs()}"
        )

    def _start_munge(self) -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
            return
        run_dir = Path("/run/munge")
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(run_dir, "munge", "munge")
        if not Path("/etc/munge/munge.key").exists():
            subprocess.run(["mungekey", "--create"], check=True)
            shutil.chown("/etc/munge/munge.key", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True, timeout=limit(30))
        self.started_munged = True

    def stop(self) -> None:
        procs = [p for p in (self.ctld, *self.slurmds.values()) if p is not None]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=limit(15))
            except subprocess.TimeoutExpired:
                p.kill()
        if self.hosts is not None:
            for i in range(len(self.node_names)):  # job steps a slurmd left behind
                for pid in self.hosts.pids(i):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.hosts.remove()
        self._remove_shm_left()
        pid_file = Path("/run/munge/munged.pid")
        if self.started_munged and pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                pass

    def _remove_shm_left(self) -> None:
        """MPICH's shared-memory segments that this cluster's jobs left in /dev/shm (a
        step ended by a signal, or MPICH across namespaced nodes, leaves them behind)."""
        if not os.path.isdir(SHM):
            return
        live = _mapped_shm()  # another test's MPI job, running beside (pytest-xdist)
        for name in set(os.listdir(SHM)) - self._shm_before:
            if name.startswith("mpich_shm_") and name not in live:
                try:
                    os.unlink(os.path.join(SHM, name))
                except OSError:
                    pass

    # -- clients ----------------------------------------------------------------------------

    def run(
        self, *cmd: str, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        """``cmd`` with the cluster's environment, for at most ``timeout`` seconds (default
        ``limit(60)``)."""
        timeout = limit(60) if timeout is None else timeout
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {proc.stdout}{proc.stderr}")
        return proc

    def sbatch(self, script: Path, *args: str, cwd: Path, env: dict | None = None) -> str:
        """Submit; return the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *args, str(script)], cwd=cwd, env={**self.env, **(env or {})},
            capture_output=True, text=True, timeout=limit(60),
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

    def job_field(self, job: str, key: str) -> str:
        """One ``Key=value`` of ``scontrol show job`` (the first, for an array)."""
        for part in self.run("scontrol", "show", "job", job, check=False).stdout.split():
            if part.startswith(f"{key}="):
                return part.split("=", 1)[1]
        return ""

    def wait(self, job: str, timeout: float | None = None) -> str:
        """Poll until the job (every array task) has left the queue, for at most ``timeout``
        seconds (default ``limit(300)``); its final state."""
        timeout = limit(300) if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.split()
            if not pending:
                return self.state(job)
            time.sleep(0.5)
        logs = self.logs()
        self.run("scancel", job, check=False)  # a stuck job must not hold the next test's nodes
        raise TimeoutError(f"job {job} still queued after {timeout:.0f} s (cancelled):\n{logs}")

    def slurmd_log(self) -> str:
        """Every node's slurmd log, concatenated."""
        paths = [self.root / f"slurmd-{n}.log" for n in self.node_names]
        return "".join(p.read_text() for p in paths if p.exists())

    def logs(self) -> str:
        out = []
        names = ["slurmctld.log", "slurmctld.err"]
        for n in self.node_names:
            names += [f"slurmd-{n}.log", f"slurmd-{n}.err"]
        for name in names:
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-30:]))
        return "\n".join(out)


def local_run(tmp: Path, config: Path, out: Path, *args: str) -> Path:
    """``distfl run`` of ``config`` in one process, outside any job: the reference."""
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--config", str(config), "--out", str(out), *args],
        cwd=tmp, capture_output=True, text=True, timeout=limit(600),
        env={k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_"))},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def job_output(tmp: Path, job: str) -> str:
    """Every ``*<job id>*.out`` log in ``tmp`` (an array job's tasks too), concatenated."""
    return "\n".join(p.read_text() for p in sorted(tmp.glob(f"*{job}*.out")))


def submit_sweep(cluster: PrivateSlurm, tmp: Path, env: dict) -> tuple[str, Path, Path]:
    """``sweep.sbatch --array=0-3`` over algorithm.beta 0.5, 2 × seed 3, 4 of a FedGWC run of
    12 rounds; (array job id, its config, its OUTDIR)."""
    config = tmp / "sweep.toml"
    config.write_text(fedgwc_toml(12))
    outdir = tmp / "sweep"
    job = cluster.sbatch(
        TEMPLATES / "sweep.sbatch", "--array=0-3", cwd=tmp,
        env={**env, "CONFIG": str(config), "OUTDIR": str(outdir), "BETAS": "0.5 2",
             "SEEDS": "3 4"},
    )  # fmt: skip
    return job, config, outdir


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="directory for slurm.conf, state and logs")
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args(argv)
    if missing():
        print(f"missing: {', '.join(missing())} (apt-get install {' '.join(PACKAGES)})")
        return 2
    args.root.mkdir(parents=True, exist_ok=True)
    cluster = PrivateSlurm(args.root.resolve(), nodes=args.nodes)
    try:
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
        print(cluster.run("sinfo").stdout, end="", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
