"""PACFL (Vahidian, Morafah, Wang, Kungurtsev, Chen, Shah, Lin, "Efficient Distribution
Similarity Identification in Clustered Federated Learning via Principal Angles Between
Client Data Subspaces", AAAI 2023): one-shot clustering by the principal angles between the
subspaces of the clients' data.

Each client of the one-shot round takes the truncated SVD of its data matrix D_k (features
× samples: its train samples, flattened, as the model receives them) and sends the
``num_basis`` = p leading left singular vectors U_p^k, a d × p basis, as one row (the probe
``"basis"``, answered by :mod:`distfl.algorithms.pacfl.client`). The server builds the
proximity matrix A of the principal angles between the clients' subspaces, in degrees:
the smallest angle θ_1 (``proximity = "smallest"``, the paper's A_ij = Θ_1(U_p^i, U_p^j)),
or the sum of the min(p_i, p_j) angles (``"sum"``), and clusters it hierarchically
(:mod:`distfl.algorithms.common.agglomerative`): merging while the least cluster distance is at
most ``threshold`` β, or into ``num_clusters`` clusters, which wins over β (0: one per
ground-truth group, as IFCA's key). Each cluster then trains by FedAvg. A client first
seen later joins the cluster nearest to its subspace (:mod:`distfl.algorithms.common.oneshot`).

The angles come from the singular values σ of U_iᵀ U_j (θ = arccos σ, clipped to [0, 1]),
computed for blocks of 64 rows of A at a time, spread over the ranks by the server's pool.

Defaults and deviations:

- p = 3, β = 3.5 degrees and the linkage ``weighted`` follow the public code
  (github.com/MMorafah/PACFL: ``--n_basis 3`` in its scripts, ``--cluster_alpha`` 3.5 by
  default, ``--linkage average``, whose merged row is the mean of the two merged rows:
  WPGMA, scipy's ``weighted``). β depends on the data; EMD-CFL's comparison used 12 on
  rotated MNIST and CIFAR-10.
- The public code takes one SVD per class of a client's data and stacks the bases
  (p per class); distfl takes the paper's one SVD of the client's whole data matrix.
- The public code's proximity is the smallest arccos of the *entries* of U_iᵀ U_j, which
  depends on the signs the SVD gives the vectors; distfl computes principal angles
  (invariant to them).
- A basis holds only the directions of non-zero singular values (numpy's rank tolerance):
  a client with fewer samples than p, or rank-deficient data, sends fewer vectors
  (zero columns) and its angles are taken over the smaller subspace; a client whose data
  is all zero, or not finite, has no subspace: its angles are missing, farther than every
  measured one and than β (its ``rank`` in the split's datasets is 0); as a newcomer it
  joins the first cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.agglomerative import LINKAGES
from distfl.algorithms.common.oneshot import (
    OneShotClustering,
    OneShotParams,
    block_rows,
    cluster_cut_setting,
    one_shot_datasets,
    probe_clients_setting,
)

# -- pure math -------------------------------------------------------------------------


def data_basis(samples: np.ndarray, num_basis: int) -> np.ndarray:
    """[d, p] the p leading left singular vectors of the data matrix (features × samples) of
    ``samples`` [n, ...]; columns past the matrix's rank (numpy's tolerance) are zero, and
    all are zero for all-zero or non-finite data."""
    x = np.asarray(samples, dtype=np.float64)
    D = x.reshape(len(x), -1).T
    out = np.zeros((D.shape[0], num_basis))
    if D.size == 0 or not np.isfinite(D).all():
        return out
    U, s, _ = np.linalg.svd(D, full_matrices=False)
    if not len(s) or s[0] <= 0:
        return out
    tol = s[0] * max(D.shape) * np.finfo(np.float64).eps
    r = min(num_basis, int(np.count_nonzero(s > tol)))
    out[:, :r] = U[:, :r]
    return out


def basis_ranks(rows: np.ndarray, num_basis: int) -> np.ndarray:
    """[n] the vectors each flattened d × p basis holds (its non-zero columns)."""
    rows = np.asarray(rows, dtype=np.float64)
    bases = rows.reshape(len(rows), -1, num_basis)
    return np.count_nonzero(np.linalg.norm(bases, axis=1) > 0.5, axis=1).astype(np.int64)


def principal_angles(a_rows: np.ndarray, b_rows: np.ndarray, num_basis: int,
                     proximity: str = "smallest") -> np.ndarray:  # fmt: skip
    """[m, n] in degrees between the subspaces of the flattened d × p bases ``a_rows`` [m,
    d·p] and ``b_rows`` [n, d·p]: the smallest principal angle, or (``"sum"``) the sum of
    the min(r_a, r_b) principal angles (r: the vectors a basis holds); NaN where either
    basis is empty."""
    p = int(num_basis)
    A = np.asarray(a_rows, dtype=np.float64)
    B = np.asarray(b_rows, dtype=np.float64)
    m, n = len(A), len(B)
    d = A.shape[1] // p if m else B.shape[1] // p
    At = A.reshape(m, d, p).transpose(0, 2, 1).reshape(m * p, d)
    Bm = B.reshape(n, d, p).transpose(1, 0, 2).reshape(d, n * p)
    G = (At @ Bm).reshape(m, p, n, p).transpose(0, 2, 1, 3)  # [m, n, p, p]: U_aᵀ U_b
    s = np.clip(np.linalg.svd(G, compute_uv=False), 0.0, 1.0)  # descending
    angles = np.degrees(np.arccos(s))  # ascending
    r = np.minimum(basis_ranks(A, p)[:, None], basis_ranks(B, p)[None, :])
    if proximity == "sum":
        out = np.where(np.arange(p) < r[..., None], angles, 0.0).sum(axis=-1)
    else:
        out = angles[..., 0]
    return np.where(r > 0, out, np.nan)


@api.pooled
def angle_block(payload: dict[str, np.ndarray], task: int) -> np.ndarray:
    """Rows [BLOCK · task, BLOCK · (task + 1)) of the proximity matrix, flattened."""
    p = int(payload["num_basis"][0])
    kind = "sum" if bool(payload["sum"][0]) else "smallest"
    return block_rows(lambda a, b, _: principal_angles(a, b, p, kind), payload["rows"], task, {})


def smallest_train_split(config) -> int | None:
    """The fewest train samples a client holds, from the config alone: each group's
    ``samples_per_client`` less its test share, as the partition splits them. None where
    the config does not fix the sizes: a natural partition of a file dataset (known once it
    is read) and ``data.quantity_skew`` > 0 (log-normal sizes, down to 1 train sample)."""
    from distfl.datasets import dataset_spec

    d, spec = config.data, dataset_spec(config.data.dataset)
    if (spec.natural_partition(config) and not spec.generated) or d.quantity_skew > 0:
        return None
    fewest = None
    for g in config.groups:
        n = g.samples_per_client or d.samples_per_client
        fraction = g.test_fraction or d.test_fraction
        train = n - min(max(int(np.rint(n * fraction)), 1), n - 1)
        fewest = train if fewest is None else min(fewest, train)
    return fewest


# -- the algorithm ----------------------------------------------------------------------


@dataclass(frozen=True)
class PACFLParams(OneShotParams):
    num_basis: int = api.setting(
        3, "int ≥ 1", "p, the leading left singular vectors of its data matrix each client sends"
    )
    threshold: float = api.setting(
        3.5,
        "0..90 degrees (0..90·p with `sum`)",
        "β: clusters merge while their proximity is at most β degrees (public code's default "
        "3.5; EMD-CFL used 12 on rotated digits); `num_clusters` ≥ 0 wins over it",
    )
    num_clusters: int = cluster_cut_setting()
    proximity: str = api.setting(
        "smallest",
        "`smallest`, `sum`",
        "A_ij: the smallest principal angle between the two subspaces (the paper's), or the sum "
        "of the principal angles",
    )
    linkage: str = api.setting(
        "weighted",
        "`weighted`, `average`, `complete`, `single`",
        "the hierarchical clustering's linkage (`weighted`: the public code's, WPGMA)",
    )
    probe_clients: int = probe_clients_setting()

    choices = {"proximity": ("smallest", "sum"), "linkage": LINKAGES}

    def check(self, config) -> None:
        from distfl.datasets import dataset_spec

        api.require(self.num_basis >= 1, "num_basis", self.num_basis, "at least 1")
        features = math.prod(dataset_spec(config.data.dataset).input_shape(config))
        api.require(self.num_basis <= features, "num_basis", self.num_basis,
                f"at most the {features} features of a sample")  # fmt: skip
        fewest = smallest_train_split(config)
        api.require(fewest is None or self.num_basis <= fewest, "num_basis", self.num_basis,
                f"at most the {fewest} train samples of the smallest client")  # fmt: skip
        self.check_cut(config)
        top = 90.0 if self.proximity == "smallest" else 90.0 * self.num_basis
        api.require(0.0 <= self.threshold <= top, "threshold", self.threshold,
                f"between 0 and {top:g} degrees")  # fmt: skip


@api.register
class PACFL(OneShotClustering):
    name = "pacfl"
    Params = PACFLParams
    client_ops = ("basis",)
    client = "distfl.algorithms.pacfl.client:PACFLClient"
    tag = 0x9AC1
    split_datasets = one_shot_datasets(
        "principal angles in degrees (up to 4,096 clients)",
        ("rank", "[n]", "the vectors of each client's basis (0: no subspace)"),
    )

    def row_width(self) -> int:
        if self.federation.input_dim <= 0:
            raise RuntimeError("PACFL needs the federation's input_dim")
        return self.federation.input_dim * self.num_basis

    def probe_args(self) -> tuple[int, ...]:
        return (self.num_basis,)

    def probe_bytes(self, num_probed: int) -> int:
        """Each probed client uploads its basis (float64) and downloads nothing."""
        return num_probed * self.row_width() * 8

    def pairwise(self, rows: np.ndarray) -> np.ndarray:
        payload = {
            "rows": rows,
            "num_basis": np.array([self.num_basis]),
            "sum": np.array([self.proximity == "sum"]),
        }
        return self.pooled_pairwise(angle_block, payload)

    def cross(self, rows: np.ndarray, clustered: np.ndarray) -> np.ndarray:
        return principal_angles(rows, clustered, self.num_basis, self.proximity)

    def split_info(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return {"rank": basis_ranks(rows, self.num_basis)}


__all__ = [
    "PACFL",
    "PACFLParams",
    "angle_block",
    "basis_ranks",
    "data_basis",
    "principal_angles",
    "smallest_train_split",
]
