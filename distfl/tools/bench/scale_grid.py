"""The grid of ``distfl bench --scale``: its rows (:class:`Case`: an algorithm on K clients,
a cohort a round, at world size W), the config each row runs, and the full and the quick
grids (:func:`scale_cases`). What the rows measure, and how: :mod:`distfl.tools.bench.scale`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distfl.config import toml_value

#: world size of the torchrun rows (server + 2 workers)
SCALE_W = 3
#: ``algorithm`` table of each algorithm the bench names
ALGORITHMS: dict[str, dict[str, Any]] = {
    "fedavg": {"name": "none"},
    # the papers' start: a steady IFCA round is what is measured, not the seeding round
    "ifca": {"name": "ifca", "num_clusters": 4, "init": "random"},
    # the paper's split test, every round from the first (its cost is what is measured)
    "fedgwc": {
        "name": "fedgwc",
        "epsilon": 1.0,
        "patience": 1,
        "min_observations": 0,
        "stable_tests": 1,
        "reference_draws": 0,
    },
    # FedGWC on observed entries (memory that follows the rounds, not K²) with the default
    # Gaussian references of the calibrated test (reference_draws = 15), a test every round
    "fedgwc-observed": {
        "name": "fedgwc",
        "interaction": "observed",
        "epsilon": 1.0,
        "patience": 1,
        "min_observations": 0,
        "stable_tests": 1,
    },
    # the one-shot baselines with their defaults: every client in the one-shot round
    "pacfl": {"name": "pacfl"},
    "fedclust": {"name": "fedclust"},
    # ... or a uniform sample of 2,000 in it, the others placed when first sampled
    "pacfl-sample": {"name": "pacfl", "probe_clients": 2000},
    "fedclust-sample": {"name": "fedclust", "probe_clients": 2000},
    # the personalised baselines: a model per client, and FedAvg fine-tuned before each
    # evaluation (its default: train.local_steps steps)
    "local": {"name": "local"},
    "fedavg_ft": {"name": "fedavg_ft"},
    # FlexCFL with its defaults (80 clients pre-trained for 4 groups), newcomers cold-started
    "flexcfl": {"name": "flexcfl", "num_clusters": 4},
    # CFL-GP with its defaults (4 models, a clustering round every 2 rounds: 1, 3, 5)
    "cflgp": {"name": "cflgp"},
}
#: FedGWC's calibrated split test on a dense P (15 Gaussian references), once per run, in
#: round 2 (``patience = 2``); ``db_threshold`` so high that every test proposes its best
#: partition and draws its references, whose cost is what is measured
ALGORITHMS["fedgwc-test"] = {
    "name": "fedgwc",
    "interaction": "dense",
    "epsilon": 1.0,
    "patience": 2,
    "min_observations": 0,
    "stable_tests": 1,
    "reference_draws": 15,
    "db_threshold": 1e9,
}
#: cluster sizes of the split-test rows: one on each side of spectral.SMALL_K (2,048), where
#: the affinity turns float32 (and, before, the embedding's eigensolver changed)
SPLIT_TEST_SIZES = (2000, 2100)
#: the same test on observed entries: the dense imputed P up to COORDINATES_ABOVE (128)
#: members, the rows' coordinates above
ALGORITHMS["fedgwc-observed-test"] = {**ALGORITHMS["fedgwc-test"], "interaction": "observed"}
#: (K, clients per round) of those rows: every client each round on each side of
#: COORDINATES_ABOVE (every pair observed: the Gaussian references), and 10% a round on
#: each side of spectral.SMALL_K (most pairs never met: the valley test)
OBSERVED_TEST_SIZES = ((128, 128), (129, 129), (2000, 200), (2100, 210))
#: (K, clients per round) of the FedGWC rows on observed entries: the paper's large-scale
#: regime (2,714 clients, 10 a round) and two populations far beyond a dense K×K P
OBSERVED_SIZES = ((2714, 10), (20000, 200), (100000, 1000))
#: the participation of the rows that have it: half the clients available on average with a
#: daily swing, one in ten selected clients dropping out, and the virtual clock
PARTICIPATION = {
    "availability": "fraction",
    "fraction": 0.5,
    "diurnal": 0.5,
    "dropout": 0.1,
    "resources": "loguniform",
}
SAMPLES_PER_CLIENT = 80
LOCAL_STEPS = 8
BATCH = 16
EVAL_CLIENTS = 1000


@dataclass(frozen=True)
class Case:
    """One row: an algorithm on K clients, ``cohort`` of them per round, at world size W."""

    algorithm: str
    clients: int
    cohort: int
    world_size: int
    placement: str = "balanced"
    rounds: int = 6
    model: str = "mlp"
    #: digits (the clients drawn from its pooled samples) or gaussian (each client generated
    #: from (seed, client): the FLCL paper's mixture, a natural partition)
    dataset: str = "digits"
    #: with [participation] on (:data:`PARTICIPATION`: availability with a daily swing,
    #: dropouts and the clients' resources for the clock)
    participation: bool = False

    @property
    def key(self) -> str:
        model = "" if self.model == "mlp" else f"-{self.model}"
        data = "" if self.dataset == "digits" else f"-{self.dataset}"
        part = "-participation" if self.participation else ""
        return (
            f"{self.algorithm}-K{self.clients}-N{self.cohort}-W{self.world_size}-{self.placement}"
            f"{model}{data}{part}"
        )

    @property
    def label(self) -> str:
        data = "" if self.dataset == "digits" else f", {self.dataset}"
        part = ", participation" if self.participation else ""
        return (
            f"{self.algorithm} K={self.clients:,} cohort {self.cohort:,} W={self.world_size} "
            f"({self.placement}, {self.model}{data}{part})"
        )

    def config(self) -> dict[str, dict[str, Any]]:
        """The run's config, ``{section: {key: value}}`` over the key defaults."""
        return {
            "run": {"rounds": self.rounds, "progress": "none", "threads": 1, "device": "cpu"},
            "data": {
                "dataset": self.dataset,
                "num_clients": self.clients,
                "samples_per_client": SAMPLES_PER_CLIENT,
            },
            "model": {"name": self.model},
            "train": {"local_steps": LOCAL_STEPS, "batch_size": BATCH},
            "server": {"clients_per_round": self.cohort, "placement": self.placement},
            "algorithm": dict(ALGORITHMS[self.algorithm]),
            # only the last round evaluates (it always does), on at most 1,000 clients
            "eval": {"every": 1000, "clients": min(EVAL_CLIENTS, self.clients)},
            **({"participation": dict(PARTICIPATION)} if self.participation else {}),
        }


def scale_cases(quick: bool = False) -> list[Case]:
    """The rows of the full grid, or (``quick``) a few rows of tiny sizes for the tests."""
    if quick:
        return [
            Case("fedavg", 400, 50, 1, rounds=3),
            Case("ifca", 200, 50, 1, rounds=3),
            Case("fedgwc", 200, 20, SCALE_W, rounds=3),
            Case("fedgwc-observed", 400, 10, 1, rounds=3),
        ]
    cases = []
    for k in (1000, 10000, 100000):
        for algorithm in ("fedavg", "ifca"):
            cases += [Case(algorithm, k, 1000, w) for w in (1, SCALE_W)]
    for k in (1000, 5000, 10000):
        cases += [Case("fedgwc", k, k // 10, w) for w in (1, SCALE_W)]
    for k in (200, 1000):
        for placement in ("balanced", "static"):
            cases.append(Case("fedavg", k, k // 10, SCALE_W, placement, 20, "cnn"))
    # a dataset whose clients own their data: start-up and memory against K
    for k in (2000, 100000):
        cases.append(Case("fedavg", k, 100, 1, dataset="gaussian"))
    # 10,000,000 clients, a cohort of 1,000, without and with participation: what
    # availability, dropouts and the clock cost a round (O(cohort): nothing per client)
    for part in (False, True):
        cases.append(Case("fedavg", 10_000_000, 1000, 1, dataset="gaussian", participation=part))
    # the server's clustering at scale: a split test in every round
    for k, n in OBSERVED_SIZES:
        cases.append(Case("fedgwc-observed", k, n, 1))
    # one calibrated split test of a cluster on each side of SMALL_K (10% participation)
    for k in SPLIT_TEST_SIZES:
        cases.append(Case("fedgwc-test", k, k // 10, 1, rounds=2))
    # and on observed entries, on each side of the change of representation and of SMALL_K
    for k, n in OBSERVED_TEST_SIZES:
        cases.append(Case("fedgwc-observed-test", k, n, 1, rounds=2))
    # the one-shot baselines: every client clustered at 2,714, a sample of 2,000 at 20,000
    for algorithm in ("pacfl", "fedclust"):
        cases += [Case(algorithm, 2714, 10, 1), Case(f"{algorithm}-sample", 20000, 200, 1)]
    # the personalised baselines at the same two sizes
    for algorithm in ("local", "fedavg_ft"):
        cases += [Case(algorithm, 2714, 10, 1), Case(algorithm, 20000, 200, 1)]
    # FlexCFL: its pre-training round, then cold starts of the clients drawn later
    cases += [Case("flexcfl", 2714, 10, 1), Case("flexcfl", 20000, 200, 1)]
    # CFL-GP's profiles and spectral clustering of the clients sampled in clustering rounds
    cases += [Case("cflgp", 2714, 10, 1), Case("cflgp", 20000, 200, 1)]
    return cases


def config_toml(config: dict[str, dict[str, Any]]) -> str:
    """``config`` as a TOML file."""
    out = []
    for section, values in config.items():
        out.append(f"[{section}]")
        out.extend(f"{key} = {toml_value(v)}" for key, v in values.items())
        out.append("")
    return "\n".join(out)


__all__ = ["ALGORITHMS", "Case", "config_toml", "scale_cases"]
