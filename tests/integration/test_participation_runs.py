"""Participation in real runs: availability with a daily swing and a minority online less
often, dropouts, the clients' resources and a deadline give the same bits in one process,
under torchrun (3 ranks), under mpiexec (3 ranks) and after a resume; trace files too;
the clock alone changes no model; and what cannot run is refused before any work in one
line, exit code 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cliproc import assert_one_line_error

from distfl.runfile.reader import read_run_file

pytestmark = pytest.mark.integration

FEDERATION = [
    "--set", "data.num_clients=12", "--set", "data.samples_per_client=40",
    "--set", "data.groups=[{count = 8, alpha = 1000.0}, "
    "{count = 4, alpha = 1000.0, permute_labels = true, availability = 0.2, dropout = 0.3}]",
    "--set", "server.clients_per_round=5", "--set", "train.local_steps=3",
    "--set", "eval.every=2", "--set", 'run.progress="none"', "--set", "run.seed=5",
]  # fmt: skip
#: the same federation without the minority's availability, which only
#: participation.availability = "fraction" reads (elsewhere it is refused)
PLAIN = [
    *FEDERATION[:4], "--set", "data.groups=[{count = 8, alpha = 1000.0}, "
    "{count = 4, alpha = 1000.0, permute_labels = true, dropout = 0.3}]", *FEDERATION[6:],
]  # fmt: skip
#: more clients a round, for the selection strategies to choose among
LARGER = [
    "--set", "data.num_clients=24", *FEDERATION[2:4],
    "--set", "data.groups=[{count = 18, alpha = 1000.0}, "
    "{count = 6, alpha = 1000.0, permute_labels = true, availability = 0.2, dropout = 0.3}]",
    *FEDERATION[6:],
]  # fmt: skip
EVERYTHING = [
    "--set", 'participation.availability="fraction"', "--set", "participation.fraction=0.8",
    "--set", "participation.diurnal=0.5", "--set", "participation.period=4",
    "--set", "participation.dropout=0.1", "--set", 'participation.resources="loguniform"',
    "--set", "participation.deadline=0.6",
]  # fmt: skip


def metrics(path: Path) -> dict[str, np.ndarray]:
    return read_run_file(path).tables["metrics"]


@pytest.mark.parametrize("algorithm", ["fedgwc", "flcl", "none:fedcs", "none:fedpns"])
def test_participation_same_bits_at_every_world_size_and_resumed(helpers, tmp_path, algorithm):
    """Every participation feature on; FedGWC (its cohorts drawn among the available
    clients), FLCL (every member planned), and FedAvg with FedCS's and FedPNS's selection."""
    from runfile import assert_same_run

    algorithm, _, selection = algorithm.partition(":")

    def args(rounds):
        more = ("--set", "server.clients_per_round=10") if selection else ()
        if selection == "fedpns":  # (a deadline leaves it too few reports to choose from)
            more += ("--set", "participation.deadline=0")
        federation = LARGER if selection else FEDERATION
        return (*federation, *EVERYTHING, "--set", f'algorithm.name="{algorithm}"',
                "--set", f'participation.selection="{selection or "uniform"}"', *more,
                "--set", f"run.rounds={rounds}")  # fmt: skip

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, rounds=6)
    runs = [multi, resumed]
    if algorithm == "fedgwc":
        mpi = tmp_path / "mpi.h5"
        config = tmp_path / "c.toml"
        config.write_text('[run]\nprogress = "none"\n')
        helpers.launch_script("mpiexec.sh", mpi, config, *args(6))
        runs.append(mpi)
    for other in runs:
        assert_same_run(single, other)
    m = metrics(single)
    # every feature took effect: clients lost each way, a clock that adds up
    assert m["unavailable"].sum() + m["dropped"].sum() > 0 or selection
    # FedGWC draws among the available members (its priority sampling too); FLCL plans
    # every member, and the unavailable ones leave the round
    assert (m["unavailable"].sum() == 0) == (algorithm != "flcl")
    if selection == "fedcs":  # it schedules its clients into the deadline: none late
        assert m["late"].sum() == 0 and m["num_participants"].min() >= 1
    elif selection != "fedpns":
        assert m["late"].sum() > 0
    if selection == "fedpns":
        assert m["rejected"].sum() > 0  # its optimal aggregation left reports out
    assert np.all(m["sim_round_s"] > 0)
    assert np.all(m["sim_round_s"] <= 0.6) or selection == "fedpns"
    assert np.allclose(np.cumsum(m["sim_round_s"]), m["sim_elapsed_s"])
    shown = helpers.cli(tmp_path, "inspect", str(single)).stdout
    assert f"{int(m['dropped'].sum()):,} dropped out, {int(m['late'].sum()):,} late" in shown


def test_trace_files_same_bits_in_one_process_and_under_torchrun(helpers, tmp_path):
    import subprocess

    from runfile import assert_same_run
    from timing import limit

    windows = tmp_path / "windows.csv"
    windows.write_text("client,start,end\n0,1,3\n1,2,6\n2,1,1\n2,4,6\n3,3,5\n")
    profiles = tmp_path / "devices.csv"
    profiles.write_text("speed,bandwidth\n40,2\n400,20\n90,5\n")
    args = (*PLAIN, "--set", 'participation.availability="trace"',
            "--set", f"participation.trace={str(windows)!r}",
            "--set", 'participation.resources="trace"',
            "--set", f"participation.resource_trace={str(profiles)!r}",
            "--set", "run.rounds=6")  # fmt: skip
    helpers.run_alone(tmp_path, *args, "--out", "one.h5")
    cmd = [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3", "-m",
           "distfl", "run", *args, "--out", "three.h5", "--comm", "torch"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=helpers.clean_env(), capture_output=True,
                          text=True, timeout=limit(400))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_same_run(tmp_path / "one.h5", tmp_path / "three.h5")
    m = metrics(tmp_path / "one.h5")
    assert m["num_participants"].min() >= 1 and np.all(m["sim_round_s"] > 0)


def test_the_clock_alone_changes_no_model(helpers, tmp_path):
    """Resources without a deadline, dropouts or availability: the virtual clock runs and
    every model, metric and the tree are those of the run without [participation]."""
    from runfile import assert_same, read_run

    base = (*FEDERATION[:4], "--set", "data.groups=[{count = 8, alpha = 1000.0}, "
            "{count = 4, alpha = 1000.0, permute_labels = true}]", *FEDERATION[6:],
            "--set", "run.rounds=3")  # fmt: skip
    helpers.run_alone(tmp_path, *base, "--out", "plain.h5")
    helpers.run_alone(tmp_path, *base, "--set", 'participation.resources="loguniform"',
                      "--out", "clock.h5")  # fmt: skip
    plain, clock = read_run(tmp_path / "plain.h5"), read_run(tmp_path / "clock.h5")
    clocked = ("metrics/sim_round_s", "metrics/sim_elapsed_s")
    assert all(np.isnan(plain[k]).all() for k in clocked)
    assert all((clock[k] > 0).all() for k in clocked)
    assert_same({k: v for k, v in plain.items() if k not in clocked},
                {k: v for k, v in clock.items() if k not in clocked})  # fmt: skip


@pytest.mark.parametrize(
    ("sets", "needles"),
    [
        (["participation.fraction=1.5"], ["participation.fraction = 1.5"]),
        (
            ["data.groups=[{count = 8, alpha = 1.0}, {count = 4, alpha = 1.0, availability = 4}]"],
            ["data.groups[1].availability = 4"],
        ),
        (
            ['participation.resources="loguniform"', "participation.deadline=0.0001"],
            ["participation.deadline = 0.0001 s: no client can meet it"],
        ),
        (
            ['participation.availability="trace"', 'participation.trace="bad.csv"'],
            ["participation.trace: bad.csv line 3: '2,x,4' is not three integers"],
        ),
        (
            ['participation.resources="trace"', 'participation.resource_trace="none.csv"'],
            ["participation.resource_trace: none.csv does not exist", "speed,bandwidth"],
        ),
    ],
)
def test_what_cannot_run_is_refused_in_one_line(helpers, tmp_path, sets, needles):
    (tmp_path / "bad.csv").write_text("client,start,end\n1,1,2\n2,x,4\n")
    args = [a for s in sets for a in ("--set", s)]
    proc = helpers.cli(tmp_path, "run", *PLAIN, *args, "--out", "r.h5")
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "r.h5").exists()


def test_a_signal_keeps_the_selections_state_and_the_resume_has_the_same_bits(helpers, tmp_path):
    """SIGTERM in the middle of a run with FedPNS's probabilities, availability, dropouts,
    the clock and the coverage's trained ids: the file holds the last completed round, and
    the resumed run has the bits of the uninterrupted one."""
    import signal

    from runfile import assert_same_run
    from timing import limit

    args = ["--set", 'algorithm.name="none"', "--set", 'participation.selection="fedpns"',
            "--set", 'participation.availability="fraction"', "--set",
            "participation.fraction=0.7", "--set", "participation.dropout=0.1", "--set",
            'participation.resources="loguniform"', "--set", "eval.coverage=true",
            "--set", "eval.every=10", "--set", "run.rounds=400",
            "--set", 'run.progress="lines"']  # fmt: skip
    helpers.run_alone(tmp_path, *args, "--out", "full.h5")
    (proc,) = helpers.start_ranks([*args, "--out", "cut.h5"], tmp_path)
    stdout = helpers.signal_after_first_round(proc, signal.SIGTERM, str(tmp_path),
                                              exit_within=limit(60))  # fmt: skip
    assert "stopped by SIGTERM" in stdout
    stopped = read_run_file(tmp_path / "cut.h5", state=False)
    assert 1 <= len(stopped.tables["metrics"]["round"]) < 400
    proc = helpers.cli(tmp_path, "run", "--resume", "cut.h5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_same_run(tmp_path / "full.h5", tmp_path / "cut.h5")
