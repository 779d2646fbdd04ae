"""FedGWC's settings (``[algorithm]`` keys), what its ``auto`` keys resolve to, and the
constants of its split test."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.settings import Condition

# -- the algorithm -----------------------------------------------------------------


@dataclass(frozen=True)
class FedGWCParams(api.Params):
    """FedGWC's keys; the defaults follow the paper."""

    beta: float = api.setting(0.5, "> 0", "β of the RBF affinity (paper grid {0.1, 0.5, 1, 2, 4})")
    epsilon: float = api.setting(
        1e-4,
        "> 0",
        "a cluster is tested for a split when the MSE between consecutive interaction matrices is "
        "below ε for `patience` rounds (paper: 1e-5 CIFAR, 1e-4 Landmarks, 1e-2 iNaturalist)",
    )
    n_max: int = api.setting(5, "int ≥ 2", "spectral clustering is tried for n = 2..n_max clusters")
    alpha: float = api.setting(
        0.0,
        "[0, 1)",
        "α of the Gaussian weights and interaction matrix; 0 means the participation rate "
        "`clients_per_round / num_clients`, at least `min_alpha` (the paper's choices)",
    )
    min_alpha: float = api.setting(
        0.1,
        "[0, 1)",
        "the smallest α that `alpha = 0` gives: the paper uses the participation rate in its "
        "100-client runs and 0.1 in its large ones (10 of 823 and of 2,714 clients a round)",
    )
    interaction: str = api.setting(
        "auto",
        "`auto`, `dense`, `observed`",
        "`dense`: the paper's K×K P, MSE over all K² entries, missing entries 0; `observed`: P "
        "holds only the pairs sampled together (memory that follows the rounds, not K²), its "
        "MSE is over those entries, and the split test reads a missing entry as the row's mean "
        "of observed ones (see [Population scale](scale.md#fedgwc-on-observed-entries)); "
        "`auto`: `observed` where the population is far larger than the cohort "
        "(`clients_per_round` at most 5% of `num_clients`), else `dense`",
    )
    reward: str = api.setting(
        "auto",
        "`auto`, `steps`, `round`",
        "`steps`: eq. 1 at every local step, averaged over the S steps (the paper's); `round`: "
        "eq. 1 on each client's loss averaged over the round's S steps, one reward per client "
        "and round; `auto`: `round` where the population is far larger than the cohort (as "
        "`interaction`), else `steps` (see [FedGWC where the population is far larger than "
        "the cohort](algorithms.md#fedgwc-where-the-population-is-far-larger-than-the-cohort))",
    )
    min_observations: int = api.setting(
        3,
        "int ≥ 0",
        "a cluster is tested only when each of its members has been sampled at least this many "
        "times (0: no such condition, the paper's)",
    )
    patience: int = api.setting(
        10,
        "int ≥ 1",
        "consecutive rounds below ε before a test; after a test that does not split, the count "
        "starts again",
    )
    min_clients: int = api.setting(
        3,
        "int ≥ 1",
        "clients sampled per cluster and round at least (the paper's privacy floor, ρ_n = max(ρ, "
        "3/|C_n|)); also the smallest cluster a split may create",
    )
    sampling: str = api.setting(
        "priority",
        "`priority`, `uniform`",
        "per-cluster sampling; `priority` favours rarely sampled clients (weight 1 / (1 + times "
        "sampled − fewest))",
    )
    db_threshold: float = api.setting(
        1.0, "> 0", "split only when the best Davies–Bouldin score is below this (the paper: 1)"
    )
    stable_tests: int = api.setting(
        2,
        "int ≥ 1",
        "split only when this many consecutive split tests of the cluster propose the same "
        "partition (1: the paper's, each test decides alone); see [the calibrated split "
        "test](algorithms.md#the-calibrated-split-test)",
    )
    reference_draws: int = api.setting(
        15,
        "int ≥ 0",
        "Gaussian references drawn for a split test (0: none, the paper's test); with B ≥ 1 "
        "a split also needs the best Davies–Bouldin score below `reference_ratio` times the "
        "median of the B references' (the same test on a Gaussian cloud with the rows' mean "
        "and covariance of P: one group, no clusters)",
    )
    reference_ratio: float = api.setting(
        0.5,
        "(0, 1]",
        "how far below the Gaussian references' median Davies–Bouldin score a split's must be",
    )
    reassign: str = api.setting(
        "loss",
        "`loss`, `none`",
        "`loss`: once there are two clusters or more, each round's sampled clients report "
        "their train loss under every cluster's model before training (IFCA's probe), and a "
        "client that another cluster's model fits `1 / reassign_ratio` times better, whose "
        "own cluster's other sampled members that model fits as many times worse, and whose "
        "loss is above `reassign_outlier` times their median, moves there (a cluster keeps "
        "`min_clients` members at least): a split that put a client on the wrong side is "
        "mended (see [Giving a member back](algorithms.md#giving-a-member-back)); `none`: a "
        "client stays in the cluster a split gave it (the paper's)",
    )
    reassign_ratio: float = api.setting(
        0.1,
        "(0, 1)",
        "a client moves only where another cluster's model gives it less than this share of "
        "its own cluster's loss, and its own cluster's other sampled members at least 1 / "
        "this times theirs (models alike, as after a split, move nobody)",
    )
    reassign_outlier: float = api.setting(
        10.0,
        "> 1",
        "a client moves only where its own cluster's loss is above this many times the "
        "median of the other sampled members' of its cluster",
    )
    reassign_every: int = api.setting(
        1,
        "int ≥ 1",
        "the probe runs every this many rounds (its cost: each sampled client evaluates every "
        "cluster's model on its train split)",
    )

    choices = {
        "sampling": ("priority", "uniform"),
        "interaction": ("auto", "dense", "observed"),
        "reward": ("auto", "steps", "round"),
        "reassign": ("loss", "none"),
    }
    conditions = {
        "min_alpha": Condition(("algorithm.alpha",), "algorithm.alpha = 0 (the participation "
                               "rate, at least min_alpha)", lambda c: c.algorithm.alpha == 0),
        "reference_ratio": Condition(("algorithm.reference_draws",),
                                     "algorithm.reference_draws ≥ 1",
                                     lambda c: c.algorithm.reference_draws >= 1),
        **dict.fromkeys(("reassign_ratio", "reassign_outlier", "reassign_every"), Condition(
            ("algorithm.reassign",), 'algorithm.reassign = "loss"',
            lambda c: c.algorithm.reassign == "loss")),
    }  # fmt: skip
    #: what a run file written before these keys (or before their defaults changed) did
    stored_defaults = {
        "stable_tests": 1,
        "reference_draws": 0,
        "interaction": "dense",
        "reward": "steps",
        "min_observations": 0,
        "min_alpha": 0.0,
        "reassign": "none",
        "reassign_ratio": 0.2,
        "reassign_outlier": 4.0,
        "reassign_every": 1,
    }

    def check(self, config) -> None:
        api.require(self.beta > 0, "beta", self.beta, "positive")
        api.require(self.epsilon > 0, "epsilon", self.epsilon, "positive")
        api.require(self.n_max >= 2, "n_max", self.n_max, "at least 2")
        api.require(0.0 <= self.alpha <= 0.999999, "alpha", self.alpha,
                "in [0, 1) (0: the participation rate)")  # fmt: skip
        api.require(self.patience >= 1, "patience", self.patience, "at least 1")
        api.require(0.0 <= self.min_alpha <= 0.999999, "min_alpha", self.min_alpha, "in [0, 1)")
        api.require(self.min_observations >= 0, "min_observations", self.min_observations,
                "at least 0")  # fmt: skip
        api.require(self.db_threshold > 0, "db_threshold", self.db_threshold, "positive (paper: 1)")
        api.require(self.min_clients >= 1, "min_clients", self.min_clients, "at least 1")
        api.require(self.stable_tests >= 1, "stable_tests", self.stable_tests, "at least 1")
        api.require(0 <= self.reference_draws <= MAX_REFERENCE_DRAWS, "reference_draws",
                self.reference_draws, f"between 0 and {MAX_REFERENCE_DRAWS}")  # fmt: skip
        api.require(0.0 < self.reference_ratio <= 1.0, "reference_ratio", self.reference_ratio,
                "in (0, 1]")  # fmt: skip
        api.require(0.0 < self.reassign_ratio < 1.0, "reassign_ratio", self.reassign_ratio,
                "in (0, 1)")  # fmt: skip
        api.require(1.0 < self.reassign_outlier < 1e300, "reassign_outlier", self.reassign_outlier,
                "above 1")  # fmt: skip
        api.require(1 <= self.reassign_every <= 2**31, "reassign_every", self.reassign_every,
                "at least 1")  # fmt: skip


#: the population is far larger than the cohort where at most this share of it is sampled
#: a round: each client then comes back a few times in a run, not dozens (``auto`` keys)
SPARSE_RATE = 0.05


def sparse_federation(num_clients: int, clients_per_round: int) -> bool:
    """Whether ``clients_per_round`` is at most :data:`SPARSE_RATE` of ``num_clients``."""
    return clients_per_round <= SPARSE_RATE * num_clients


#: what each ``auto`` key becomes: (where the population is far larger than the cohort,
#: elsewhere)
AUTO = {"interaction": ("observed", "dense"), "reward": ("round", "steps")}


def resolved(key: str, value: str, num_clients: int, clients_per_round: int) -> str:
    """Key ``key``'s value for this federation: an ``auto`` one as :data:`AUTO` says, any
    other value as it is."""
    if value != "auto":
        return value
    sparse, dense = AUTO[key]
    return sparse if sparse_federation(num_clients, clients_per_round) else dense


#: consecutive proposals count as the same partition when at most one client in this many
#: changed side (none below this many clients): a partition of thousands of clients,
#: whose rows gain observations between tests, never repeats to the client
STABLE_SHARE = 200
#: with observed entries, the test where at least this share of the cluster's pairs were
#: sampled together is the Gaussian reference's; below, the valley test's
DENSE_SHARE = 0.5

#: what a split test that cannot be computed raises (recorded as ``test_failed``, no proposal)
NUMERICAL_FAILURES = (np.linalg.LinAlgError, ArithmeticError, ValueError, RuntimeError)

#: the most Gaussian references a split test may draw (each costs a spectral clustering)
MAX_REFERENCE_DRAWS = 999
