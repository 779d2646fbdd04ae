"""EMD-CFL (Zhang, Williams, Toni): one-shot clustering by Wasserstein distances between
clients' data in the embedding space of each client's locally trained model.

In round 1 every client trains the common initial model locally (``algorithm.steps``
SGD steps) into ω_c. For each pair (c, c') both sides embed with ω_c (the penultimate
layer: the input of the model's last linear layer) and project with a Gaussian matrix
R_cc' [d, ⌊ρd⌋] private to the pair (ρ = ``algorithm.projection``, paper 0.9):

    d_cc' = W1(Z_c|c R, Z_c'|c R) − τ_c,   τ_c = W1(Z_c|c, Z_c|c^val)   (Algorithm 1)

W1 under the Euclidean ground cost, computed by POT (``ot.emd2``, exact, or
``ot.sinkhorn2``), on at most ``algorithm.samples`` samples per side (paper
min(10%, 512)). Clients c, c' are adjacent when d_cc' < ε and d_c'c < ε (mutual);
clients with identical neighbourhoods form a cluster. The root then splits into those
clusters after round 1, each cluster trains its own model by FedAvg from then on, sampling
its members as the oracle does (:func:`distfl.algorithms.oracle.sample_sizes`).

Where the computation runs: the worker hosting client c computes row c (every d_cc'),
evaluating ω_c on the samples of every c' (in this emulator every rank holds the dataset,
so the worker materialises c''s samples itself): that is the client half,
:mod:`distfl.algorithms.emdcfl_client`, answering the probe ``"distances"``. Only the K×K
distances travel to the server, as a float64 row per client; ω_c never leaves its worker.
In a real federation, c and c' would exchange ω_c and ω_c' and send projected embeddings to
the server (the paper's protocol, whose traffic :func:`protocol_bytes` counts); the
distances are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms.base import (
    ClientReports,
    ClusteringAlgorithm,
    Params,
    ProbeRequest,
    ReportFigure,
    RoundPlan,
    RoundUpdate,
    require,
    setting,
)
from distfl.algorithms.oracle import sample_sizes
from distfl.algorithms.registry import register

ROOT = "0"

# -- pure math -------------------------------------------------------------------------


def projected_dim(dim: int, ratio: float) -> int:
    """Columns of a pair's projection: max(1, ⌊ratio·dim⌋)."""
    return max(1, int(np.floor(ratio * dim)))


def embed_size(num_train, samples: int):
    """Samples per side of a client's W1 (and of its validation set): min(samples, ⌊n/2⌋),
    at least 1; elementwise for an array of train sizes."""
    return np.maximum(1, np.minimum(samples, np.asarray(num_train) // 2))


def protocol_bytes(
    num_train: np.ndarray, *, num_params: int, embed_dim: int, samples: int, ratio: float
) -> int:
    """What the paper's protocol moves for the one-shot step among n clients: each client
    downloads the initial model, each pair swaps its two models, and the server receives
    each client's τ and, per ordered pair (c, c'), the two sets Z_c|c R and Z_c'|c R."""
    n = len(num_train)
    m = embed_size(num_train, samples)
    models = n * 4 * num_params + n * (n - 1) * 4 * num_params
    embeddings = int(2 * (n - 1) * m.sum()) * projected_dim(embed_dim, ratio) * 4
    return models + embeddings + 8 * n


def projection(dim: int, ratio: float, *, seed: int, a: int, b: int) -> np.ndarray:
    """R [dim, max(1, ⌊ratio·dim⌋)], Gaussian with variance 1/columns, the same for the pair
    (a, b) and (b, a) and private to it (drawn from the run's seed and the two ids)."""
    cols = projected_dim(dim, ratio)
    lo, hi = min(a, b), max(a, b)
    rng = np.random.default_rng([seed, 0xE3D, lo, hi])
    return rng.standard_normal((dim, cols)) / np.sqrt(cols)


def wasserstein1(
    x: np.ndarray, y: np.ndarray, *, solver: str = "exact", reg: float = 0.05
) -> float:
    """W1 between the uniform empirical measures on the rows of x and y (Euclidean cost)."""
    import ot
    from scipy.spatial.distance import cdist

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    a = np.full(len(x), 1.0 / len(x))
    b = np.full(len(y), 1.0 / len(y))
    cost = cdist(x, y, metric="euclidean")  # no BLAS call: cheap and deterministic
    if solver == "sinkhorn":
        return float(ot.sinkhorn2(a, b, cost, reg))
    return float(ot.emd2(a, b, cost))


def mutual_adjacency(distances: np.ndarray, epsilon: float) -> np.ndarray:
    """M[c, c'] = d_cc' < ε and d_c'c < ε; every client is adjacent to itself."""
    d = np.asarray(distances, dtype=np.float64)
    m = (d < epsilon) & (d.T < epsilon)
    np.fill_diagonal(m, True)
    return m


def neighbourhood_clusters(adjacency: np.ndarray) -> np.ndarray:
    """Labels [K]: clients with identical rows of the adjacency share a cluster, numbered in
    order of their first client."""
    rows = [tuple(np.flatnonzero(r)) for r in np.asarray(adjacency, dtype=bool)]
    index: dict[tuple, int] = {}
    return np.array([index.setdefault(r, len(index)) for r in rows], dtype=np.int64)


# -- the algorithm ----------------------------------------------------------------------


@dataclass(frozen=True)
class EMDCFLParams(Params):
    """EMD-CFL's keys (``emd_epsilon`` etc. in the former flat section); the defaults
    follow the paper where it gives them."""

    epsilon: float = setting(
        0.025,
        "float",
        "ε of the mutual adjacency d_cc' < ε and d_c'c < ε (paper 0.025; it depends on the "
        "embedding's scale: 0.15 separates rotated digits under the MLP)",
    )
    steps: int = setting(
        100,
        "int ≥ 1",
        "local SGD steps each client trains the initial model for before the distances",
    )
    samples: int = setting(
        512,
        "int ≥ 1",
        "samples per side of each W1 (at most half a client's train split; the other half is its "
        "validation set for τ)",
    )
    projection: float = setting(
        0.9, "(0, 1]", "kept share of the embedding dimension in the pair's random projection"
    )
    solver: str = setting("exact", "`exact`, `sinkhorn`", "`ot.emd2` or `ot.sinkhorn2`")
    reg: float = setting(0.05, "> 0", "Sinkhorn's entropic regularisation")

    aliases = {f"emd_{k}": k for k in ("epsilon", "steps", "samples", "projection", "solver",
                                        "reg")}  # fmt: skip
    choices = {"solver": ("exact", "sinkhorn")}

    def check(self, config) -> None:
        require(self.steps >= 1, "steps", self.steps, "at least 1 local step")
        require(self.samples >= 1, "samples", self.samples, "at least 1 per side")
        require(0.0 < self.projection <= 1.0, "projection", self.projection,
                "in (0, 1] (kept share of the embedding dimension; paper 0.9)")  # fmt: skip
        require(self.reg > 0, "reg", self.reg, "positive")


@register
class EMDCFL(ClusteringAlgorithm):
    name = "emdcfl"
    Params = EMDCFLParams
    client_ops = ("distances",)
    #: the one-shot round's probe (local training and a row of W1 per client: minutes with
    #: a CNN) is given up at a stop signal; plan_probe draws nothing
    probe_abandonable = True
    #: the gathered float64 rows and the distance matrix the server keeps
    pair_bytes = 16
    client = "distfl.algorithms.emdcfl_client:EMDCFLClient"
    #: the pairs' distances at the root against ε
    figures = (
        ReportFigure(ReportFigure.WHY, "emd-distances.png", "distfl.report.figures:emd_distances"),
    )

    def __init__(
        self,
        *,
        num_clients: int,
        clients_per_round: int,
        seed: int,
        epsilon: float = 0.025,
        steps: int = 100,
        samples: int = 512,
        projection: float = 0.9,
        solver: str = "exact",
        reg: float = 0.05,
    ):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.epsilon = epsilon
        self.steps = steps
        self.samples = samples
        self.projection = projection
        self.rng = np.random.default_rng([seed, 0xE3DCF1])
        self.distances: np.ndarray | None = None

    def plan_probe(self, round_index: int) -> ProbeRequest | None:
        """Round 1: every client's row of distances, after ``steps`` local steps."""
        if round_index != 1:
            return None
        clients = np.arange(self.num_clients, dtype=np.int64)
        fed = self.federation
        traffic = None
        if fed.num_train is not None and fed.num_params:
            traffic = protocol_bytes(
                fed.num_train[clients], num_params=fed.num_params, embed_dim=fed.embed_dim,
                samples=self.samples, ratio=self.projection,
            )  # fmt: skip
        return ProbeRequest(
            clients=clients,
            clusters=[ROOT],
            op="distances",
            width=self.num_clients,
            args=(self.steps,),
            federation_bytes=traffic,
        )

    def update_probe(self, round_index: int, request: ProbeRequest, rows: np.ndarray) -> None:
        self.distances = np.asarray(rows, dtype=np.float64)

    def plan(self, round_index: int) -> RoundPlan:
        leaves = self.tree.leaves()
        ids = list(leaves)
        sizes = sample_sizes(
            np.array([len(leaves[c]) for c in ids]), self.clients_per_round, self.num_clients
        )
        train: dict[int, str] = {}
        for cid, n in zip(ids, sizes, strict=True):
            for k in np.sort(self.rng.choice(leaves[cid], size=int(n), replace=False)):
                train[int(k)] = cid
        return RoundPlan(round=round_index, train=dict(sorted(train.items())))

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> RoundUpdate:
        """After round 1: split the root into the clusters of identical neighbourhoods (with
        one such cluster, the root stays whole and keeps the distances it was decided on)."""
        if round_index != 1 or self.distances is None:
            return RoundUpdate()
        adjacency = mutual_adjacency(self.distances, self.epsilon)
        labels = neighbourhood_clusters(adjacency)
        info = {"distances": self.distances, "adjacency": adjacency, "labels": labels}
        if labels.max() == 0:  # no split: the root keeps what it was decided on
            self.tree[ROOT].datasets.update(info)
            return RoundUpdate()
        children = {
            f"{ROOT}.{i}": np.flatnonzero(labels == i).astype(np.int64)
            for i in range(int(labels.max()) + 1)
        }
        return RoundUpdate(splits=[self.tree.split(ROOT, children, round_index, info)])

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "distances": self.distances if self.distances is not None else np.zeros((0, 0)),
        }

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the members also stored them here.)"""
        self.rng.bit_generator.state = state["rng"]
        d = np.asarray(state["distances"], dtype=np.float64)
        self.distances = d if d.size else None


__all__ = [
    "EMDCFL",
    "EMDCFLParams",
    "embed_size",
    "mutual_adjacency",
    "neighbourhood_clusters",
    "projected_dim",
    "projection",
    "protocol_bytes",
    "wasserstein1",
]
