"""Every selection strategy takes effect or is refused before any work. For every registered
algorithm, FedCS and FedPNS either choose its cohorts (FedCS: none of them reports after the
deadline, where the uniform draw's do; FedPNS: every client a plan names was drawn from its
probabilities and counted selected, and the cohorts are not uniform's) or the run is refused
in one line, exit code 2, naming the algorithm, the selection and why, and no file is
written. Then the default job (FedGWC and its priority sampling) with each strategy.

Tiny in-process runs: 12 clients, 6 a round, 3 rounds."""

from __future__ import annotations

import numpy as np
import pytest
from cliproc import assert_one_line_error

from distfl.algorithms import algorithm_names, key_owners
from distfl.plugins import ALGORITHMS
from distfl.runfile.reader import read_run_file

pytestmark = pytest.mark.integration

FEDERATION = [
    "run.rounds=3", "eval.every=3", 'run.progress="none"', "data.num_clients=12",
    "data.samples_per_client=40", "server.clients_per_round=6",
    "data.groups=[{count = 6, alpha = 1000.0}, {count = 6, alpha = 1000.0, rotation = 180.0}]",
    'participation.resources="loguniform"',
]  # fmt: skip
#: each strategy's own keys: FedCS's deadline (3 s: some of the clients the resources allow
#: miss it, most meet it), given to the uniform run it is compared with too; FedPNS without
#: one (a cohort whole for its optimal aggregation), keeping at least half (a key the uniform
#: run would refuse: it takes no effect there)
STRATEGY = {"fedcs": ("participation.deadline=3",), "fedpns": ("participation.pns_kept=0.5",)}
#: those of a strategy's keys its uniform comparison takes too
SHARED = {"fedcs": STRATEGY["fedcs"], "fedpns": ()}
#: keys that make an algorithm's rounds fit 3 (given to those that take them)
SHORTER = ("algorithm.warmup=1", "algorithm.emd_steps=4", "algorithm.emd_samples=8",
           "algorithm.min_clients=2")  # fmt: skip
#: what a round's cohort leaves in the run file
COHORT = ("num_participants", "dropped", "late", "unavailable", "train_loss_first",
          "sim_round_s")  # fmt: skip


def args(algorithm: str, selection: str, out: str, *more: str) -> list[str]:
    """The run of ``algorithm`` with ``selection`` (the uniform one: give the keys of the
    strategy it is compared with in ``more``)."""
    sets = [*FEDERATION, f'algorithm.name="{algorithm}"', f'participation.selection="{selection}"',
            *(s for s in SHORTER if algorithm in key_owners(s.split("=")[0].split(".")[1])),
            *more]  # fmt: skip
    return [a for s in sets for a in ("--set", s)] + ["--out", out]


def cohorts(metrics: dict) -> list[tuple]:
    return [tuple(float(metrics[c][t]) for c in COHORT) for t in range(len(metrics["round"]))]


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    return np.array_equal(np.array(a), np.array(b), equal_nan=True)


@pytest.fixture(scope="module")
def uniform(tmp_path_factory):
    """Each algorithm's run with the uniform selection and a strategy's keys, read once."""
    folder = tmp_path_factory.mktemp("uniform")
    runs: dict[tuple[str, str], dict] = {}

    def get(helpers, algorithm: str, strategy: str) -> dict:
        if (algorithm, strategy) not in runs:
            out = f"{algorithm}-{strategy}.h5"
            helpers.run_alone(folder, *args(algorithm, "uniform", out, *SHARED[strategy]))
            runs[algorithm, strategy] = read_run_file(folder / out).tables["metrics"]
        return runs[algorithm, strategy]

    return get


#: the built-in algorithms (a test may have registered one of its own)
BUILT_IN = [n for n in algorithm_names()
            if ALGORITHMS.get(n).__module__.startswith("distfl.algorithms.")]  # fmt: skip


@pytest.mark.parametrize("selection", ["fedcs", "fedpns"])
@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_a_strategy_chooses_every_cohort_or_is_refused(helpers, uniform, tmp_path, algorithm,
                                                       selection):  # fmt: skip
    # what the algorithm declares (nothing: the strategy must act)
    declared = getattr(ALGORITHMS.get(algorithm), "selection_refusal", lambda _: None)
    why = declared(selection)
    if why:
        proc = helpers.cli(tmp_path, "run", *args(algorithm, selection, "r.h5",
                                                  *STRATEGY[selection]))  # fmt: skip
        assert_one_line_error(proc, f"participation.selection = {selection!r}",
                              f"algorithm.name = {algorithm!r}", why)  # fmt: skip
        assert not (tmp_path / "r.h5").exists()
        return
    helpers.run_alone(tmp_path, *args(algorithm, selection, "r.h5", *STRATEGY[selection]))
    run = read_run_file(tmp_path / "r.h5")
    m, base = run.tables["metrics"], uniform(helpers, algorithm, selection)
    assert not same_rows(cohorts(m), cohorts(base))
    planned = m["num_participants"] + m["dropped"] + m["late"] + m["unavailable"]
    if selection == "fedcs":
        # its schedule never admits a report after the deadline, where the uniform draw's
        # cohorts had some
        assert m["late"].sum() == 0 and base["late"].sum() > 0
        assert m["num_participants"].sum() > 0
    else:
        # every client a plan named was drawn from its probabilities and counted selected
        selected = run.state["selection"]["times_selected"]
        assert selected.sum() == planned.sum() > 0
        # and its optimal aggregation had a cluster's reports to compare, so that it can
        # lower a probability
        assert run.tables["clusters"]["sampled"].max() >= 2


def default_job(helpers, folder, out: str, *sets: str) -> dict:
    """The default job (FedGWC on digits, priority sampling), 8 rounds, under ``sets``."""
    more = ["run.rounds=8", "eval.every=8", 'run.progress="none"', *sets]
    helpers.run_alone(folder, *[a for s in more for a in ("--set", s)], "--out", out)
    return read_run_file(folder / out)


def test_fedcs_and_fedpns_choose_fedgwcs_priority_cohorts(helpers, tmp_path):
    """FedCS under FedGWC with a 4 s deadline: no late report, where the uniform selection
    has some; FedPNS: its probabilities draw every cohort (times selected), it labels
    clients, and the cohorts are not uniform's."""
    clock = ['participation.resources="loguniform"', "participation.deadline=4"]
    plain = default_job(helpers, tmp_path, "uniform.h5", *clock).tables["metrics"]
    fedcs = default_job(helpers, tmp_path, "fedcs.h5", *clock, 'participation.selection="fedcs"')
    assert plain["late"].sum() > 0
    assert fedcs.tables["metrics"]["late"].sum() == 0
    assert not same_rows(cohorts(fedcs.tables["metrics"]), cohorts(plain))
    pns = default_job(helpers, tmp_path, "fedpns.h5", 'participation.resources="loguniform"',
                      'participation.selection="fedpns"')  # fmt: skip
    m = pns.tables["metrics"]
    selected = pns.state["selection"]["times_selected"]
    assert selected.sum() == m["num_participants"].sum() > 0
    assert m["rejected"].sum() > 0  # it labeled clients, whose probabilities fell
    free = default_job(helpers, tmp_path, "free.h5", 'participation.resources="loguniform"')
    assert not same_rows(cohorts(m), cohorts(free.tables["metrics"]))


def test_fedpns_under_fedgwc_same_bits_at_every_world_size_and_resumed(helpers, tmp_path):
    """FedGWC's priority sampling through FedPNS, with availability, dropouts and the clock:
    one process, torchrun with 3 ranks and a run stopped after round 2 and resumed hold the
    same bits (FedPNS's probabilities and counts, FedGWC's counts and generator)."""
    from runfile import assert_same_run

    def run_args(rounds):
        sets = ["data.num_clients=16", "data.samples_per_client=40", "server.clients_per_round=8",
                "data.groups=[{count = 11, alpha = 1000.0}, "
                "{count = 5, alpha = 1000.0, permute_labels = true, availability = 0.5}]",
                'participation.availability="fraction"', "participation.fraction=0.8",
                "participation.dropout=0.1", 'participation.resources="loguniform"',
                'participation.selection="fedpns"', "participation.pns_kept=0.5",
                "train.local_steps=3", "eval.every=2", 'run.progress="none"',
                f"run.rounds={rounds}"]  # fmt: skip
        return tuple(a for s in sets for a in ("--set", s))

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, run_args, rounds=6)
    for other in (multi, resumed):
        assert_same_run(single, other)
    run = read_run_file(single)
    m = run.tables["metrics"]
    assert m["dropped"].sum() > 0 and m["rejected"].sum() > 0
    planned = m["num_participants"] + m["dropped"]
    assert run.state["selection"]["times_selected"].sum() == planned.sum()
