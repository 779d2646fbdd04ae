"""EMD-CFL (Zhang, Williams, Toni): one-shot clustering by Wasserstein distances between
clients' data in the embedding space of each client's locally trained model.

In round 1 every client trains the common initial model locally (``algorithm.emd_steps``
SGD steps) into ω_c. For each pair (c, c') both sides embed with ω_c (the penultimate
layer: the input of the model's last linear layer) and project with a Gaussian matrix
R_cc' [d, ⌊ρd⌋] private to the pair (ρ = ``algorithm.emd_projection``, paper 0.9):

    d_cc' = W1(Z_c|c R, Z_c'|c R) − τ_c,   τ_c = W1(Z_c|c, Z_c|c^val)   (Algorithm 1)

W1 under the Euclidean ground cost, computed by POT (``ot.emd2``, exact, or
``ot.sinkhorn2``), on at most ``algorithm.emd_samples`` samples per side (paper
min(10%, 512)). Clients c, c' are adjacent when d_cc' < ε and d_c'c < ε (mutual);
clients with identical neighbourhoods form a cluster. The root then splits into those
clusters after round 1, each cluster trains its own model by FedAvg from then on, sampling
its members as the oracle does (:func:`distfl.algorithms.oracle.sample_sizes`).

Where the computation runs: the worker hosting client c computes row c (every d_cc'),
evaluating ω_c on the samples of every c' (in this emulator every rank holds the dataset,
so the worker materialises c''s samples itself). Only the K×K distances travel to the
server, as a gathered float64 row per client; ω_c never leaves its worker. In a real
federation, c and c' would exchange ω_c and ω_c' and send projected embeddings to the
server (the paper's protocol); the distances are the same.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distfl.algorithms.base import (
    ClientReports,
    ClusteringAlgorithm,
    ProbeRequest,
    RoundPlan,
    Split,
)
from distfl.models import last_linear

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


# -- worker side ------------------------------------------------------------------------


def last_linear_inputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The penultimate-layer embedding: the input of the model's last nn.Linear."""
    last = last_linear(model)
    seen: list[torch.Tensor] = []
    handle = last.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0]))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0].reshape(len(x), -1)


def embed_sets(num_train: int, samples: int, *, seed: int, client: int) -> tuple[np.ndarray, ...]:
    """Disjoint (embedding, validation) index sets into a client's train split, each of
    min(samples, ⌊n/2⌋) samples (at least 1), drawn from (seed, client)."""
    m = int(embed_size(num_train, samples))
    perm = np.random.default_rng([seed, 0xE3D5, client]).permutation(num_train)
    return np.sort(perm[:m]), np.sort(perm[m : 2 * m] if num_train > 1 else perm[:m])


def emd_row(
    model: nn.Module,
    own: int,
    features: dict[int, torch.Tensor],
    validation: torch.Tensor,
    *,
    ratio: float,
    seed: int,
    solver: str,
    reg: float,
) -> np.ndarray:
    """[K] the row d_own,· with ``model`` = ω_own loaded: ``features[c]`` are client c's
    embedding samples (inputs), ``validation`` own's validation samples."""
    model.eval()
    z_own = last_linear_inputs(model, features[own]).double().cpu().numpy()
    z_val = last_linear_inputs(model, validation).double().cpu().numpy()
    tau = wasserstein1(z_own, z_val, solver=solver, reg=reg)
    out = np.empty(len(features), dtype=np.float64)
    for c in sorted(features):
        if c == own:
            out[c] = 0.0 - tau
            continue
        r = projection(z_own.shape[1], ratio, seed=seed, a=own, b=c)
        z_c = last_linear_inputs(model, features[c]).double().cpu().numpy()
        out[c] = wasserstein1(z_own @ r, z_c @ r, solver=solver, reg=reg) - tau
    return out


# -- the algorithm ----------------------------------------------------------------------


class EMDCFL(ClusteringAlgorithm):
    name = "emdcfl"

    def __init__(
        self,
        *,
        num_clients: int,
        clients_per_round: int,
        seed: int,
        epsilon: float = 0.025,
        steps: int = 100,
    ):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.epsilon = epsilon
        self.steps = steps
        self.rng = np.random.default_rng([seed, 0xE3DCF1])
        self.members: dict[str, np.ndarray] = {ROOT: np.arange(num_clients, dtype=np.int64)}
        self.distances: np.ndarray | None = None

    def clusters(self) -> dict[str, np.ndarray]:
        return dict(sorted(self.members.items()))

    def probe(self, round_index: int) -> ProbeRequest | None:
        if round_index != 1:
            return None
        clients = np.arange(self.num_clients, dtype=np.int64)
        return ProbeRequest(clients=clients, clusters=[ROOT], kind="emd", steps=self.steps)

    def probe_result(self, round_index: int, request: ProbeRequest, losses: np.ndarray) -> None:
        self.distances = np.asarray(losses, dtype=np.float64)

    def plan_round(self, round_index: int) -> RoundPlan:
        from distfl.algorithms.oracle import sample_sizes

        ids = sorted(self.members)
        sizes = sample_sizes(
            np.array([len(self.members[c]) for c in ids]), self.clients_per_round, self.num_clients
        )
        train: dict[int, str] = {}
        for cid, n in zip(ids, sizes, strict=True):
            for k in np.sort(self.rng.choice(self.members[cid], size=int(n), replace=False)):
                train[int(k)] = cid
        return RoundPlan(round=round_index, train=dict(sorted(train.items())))

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> list[Split]:
        if round_index != 1 or self.distances is None:
            return []
        adjacency = mutual_adjacency(self.distances, self.epsilon)
        labels = neighbourhood_clusters(adjacency)
        if labels.max() == 0:
            return []
        children = {
            f"{ROOT}.{i}": np.flatnonzero(labels == i).astype(np.int64)
            for i in range(int(labels.max()) + 1)
        }
        self.members = children
        info = {"distances": self.distances, "adjacency": adjacency, "labels": labels}
        return [Split(parent=ROOT, children=children, info=info)]

    def state_dict(self) -> dict:
        ids = sorted(self.members)
        return {
            "rng": self.rng.bit_generator.state,
            "ids": ids,
            "members": {str(i): self.members[c] for i, c in enumerate(ids)},
            "distances": self.distances if self.distances is not None else np.zeros((0, 0)),
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        ids = [str(i) for i in state["ids"]]
        self.members = {
            c: np.asarray(state["members"][str(i)], dtype=np.int64) for i, c in enumerate(ids)
        }
        d = np.asarray(state["distances"], dtype=np.float64)
        self.distances = d if d.size else None
