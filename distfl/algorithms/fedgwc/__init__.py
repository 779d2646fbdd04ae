"""FedGWC: Federated Gaussian Weighting Clustering (Licciardi, Leo, Fanì, Caputo, Ciccone,
ICML 2025).

Each sampled client reports its loss process (the loss of each of its S local steps). The
server turns the loss processes of a cluster's sampled clients into Gaussian rewards
(eq. 1), tracks them in Gaussian weights (eq. 2) and in an interaction matrix P (eq. 3);
when P has converged (MSE between consecutive updates below ε) it builds the affinity W
from the unbiased perception vectors (eq. 4), runs spectral clustering for n = 2..n_max
and splits the cluster if the best Davies–Bouldin score is below 1 (Algorithm 1). Every
cluster keeps its own model, P sub-block and MSE, and splits again on its own
(Algorithm 2).

The calibrated split test (``stable_tests``, ``reference_draws``; off by default, on in the
presets) adds two conditions to Algorithm 1's: the same partition proposed by consecutive
tests, and a score well below that of Gaussian references of P's rows (one cloud with P's
mean and covariance, SigClust's null): clients that differ along a continuum, such as
how hard their data are, give a Davies–Bouldin score near 0.5 whatever the dataset, and
only groups score far below their reference.

``interaction = "observed"`` keeps P as the entries of the pairs sampled together and reads
a missing entry as the row's mean (:mod:`distfl.algorithms.fedgwc.interaction`); where most of a
cluster's pairs never met, a split also needs its clusters separated by a valley.

Numerics: above 512 members the spectral embedding's eigenvectors come from ARPACK (as in
scikit-learn's spectral clustering, which the reference code calls), below from a dense
eigensolver (:data:`~.spectral.DENSE_EIGEN_UP_TO`); above 512 rows a Gaussian
reference's affinity is float32 (:data:`REFERENCE_FLOAT32_ABOVE`), the real test's W is
float64 up to 2,048 members (:data:`~.spectral.SMALL_K`).

The modules: :mod:`~.rewards` (eqs. 1–3), :mod:`~.interaction` (P as observed entries),
:mod:`~.perception` (eq. 4 and the affinity W), :mod:`~.spectral` (the spectral
clustering and its Davies–Bouldin choice), :mod:`~.reference` (the split test's Gaussian
references), :mod:`~.params` (the settings), :mod:`~.algorithm` (:class:`FedGWC`, with
the per-cluster state) and :mod:`~.figures` (its figures in ``distfl report``).
"""

from __future__ import annotations

from distfl.algorithms.fedgwc.algorithm import (
    ClusterState,
    FedGWC,
)
from distfl.algorithms.fedgwc.params import (
    AUTO,
    DENSE_SHARE,
    MAX_REFERENCE_DRAWS,
    NUMERICAL_FAILURES,
    SPARSE_RATE,
    STABLE_SHARE,
    FedGWCParams,
    resolved,
    sparse_federation,
)
from distfl.algorithms.fedgwc.perception import (
    DIAGNOSE_W_UP_TO,
    affinity,
    block_contrast,
    perception_distances,
)
from distfl.algorithms.fedgwc.reference import (
    REFERENCE_FLOAT32_ABOVE,
    best_split_score,
    coordinates_piece,
    coordinates_reference,
    coordinates_split,
    gaussian_reference,
    lowest_score,
    participants,
    priority_sample,
    reference_piece,
    reference_score,
    reference_states,
    rng_at,
    rng_state,
)
from distfl.algorithms.fedgwc.rewards import (
    FULL_MSE_MAX,
    gaussian_rewards,
    interaction_mse,
    round_rewards,
    update_interaction,
)

__all__ = [
    "AUTO",
    "ClusterState",
    "DENSE_SHARE",
    "DIAGNOSE_W_UP_TO",
    "FULL_MSE_MAX",
    "FedGWC",
    "FedGWCParams",
    "MAX_REFERENCE_DRAWS",
    "NUMERICAL_FAILURES",
    "REFERENCE_FLOAT32_ABOVE",
    "SPARSE_RATE",
    "STABLE_SHARE",
    "affinity",
    "best_split_score",
    "block_contrast",
    "coordinates_piece",
    "coordinates_reference",
    "coordinates_split",
    "gaussian_reference",
    "gaussian_rewards",
    "interaction_mse",
    "lowest_score",
    "participants",
    "perception_distances",
    "priority_sample",
    "reference_piece",
    "reference_score",
    "reference_states",
    "resolved",
    "rng_at",
    "rng_state",
    "round_rewards",
    "sparse_federation",
    "update_interaction",
]
