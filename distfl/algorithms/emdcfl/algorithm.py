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
its members as the oracle does (:func:`distfl.algorithms.common.sampling.sample_sizes`).

Where the computation runs: the worker hosting client c computes row c (every d_cc'),
evaluating ω_c on the samples of every c' (in this emulator every rank holds the dataset,
so the worker materialises c''s samples itself): that is the client half,
:mod:`distfl.algorithms.emdcfl.client`, answering the probe ``"distances"``. Only the K×K
distances travel to the server, as a float64 row per client; ω_c never leaves its worker.
In a real federation, c and c' would exchange ω_c and ω_c' and send projected embeddings to
the server (the paper's protocol, whose traffic :func:`protocol_bytes` counts); the
distances are the same.

The one-shot round is quadratic by design: K(K − 1) distances, each an optimal transport
between up to ``samples`` embedded samples a side. Before anything runs, the config alone
gives an estimate of that round's time on one core (:func:`config_cost`, at the speeds
measured on a 2-core machine: docs, Population scale); above ``algorithm.max_hours`` the
run refuses with one line that says how many clients fit and how many anchors would
(:func:`refusal`). With ``algorithm.anchors = L`` the round runs an approximation on L
anchor clients drawn from the algorithm's seed (:func:`draw_anchors`): each client's
distances to the anchors and the anchors' to it, 2·L·(K − 1) of them, the all-pairs round's
own numbers; clients with identical mutual-ε neighbourhoods among the anchors form a cluster
(:func:`anchor_adjacency`, which with every client an anchor is :func:`mutual_adjacency`).
A group that holds no anchor has no neighbour among them: its clients share one cluster
with every other such client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.sampling import sample_sizes
from distfl.datasets import dataset_spec
from distfl.errors import ConfigError
from distfl.settings import Condition

ROOT = "0"

# -- pure math -------------------------------------------------------------------------

#: the most local steps a client trains ω_c for (the memory check, which bounds
#: train.local_steps through the loss rows it keeps, has nothing of ω_c's to weigh)
MAX_LOCAL_STEPS = 1_000_000


def projected_dim(dim: int, ratio: float) -> int:
    """Columns of a pair's projection: max(1, ⌊ratio·dim⌋)."""
    return max(1, int(np.floor(ratio * dim)))


def embed_size(num_train, samples: int):
    """Samples per side of a client's W1 (and of its validation set): min(samples, ⌊n/2⌋),
    at least 1; elementwise for an array of train sizes."""
    return np.maximum(1, np.minimum(samples, np.asarray(num_train) // 2))


def protocol_bytes(
    num_train: np.ndarray,
    *,
    num_params: int,
    embed_dim: int,
    samples: int,
    ratio: float,
    anchors: np.ndarray | None = None,
) -> int:
    """What the paper's protocol moves for the one-shot step among n clients: each client
    downloads the initial model, each pair swaps its two models, and the server receives
    each client's τ and, per ordered pair (c, c'), the two sets Z_c|c R and Z_c'|c R. With
    ``anchors``, the pairs are those of a client and an anchor, both ways."""
    n = len(num_train)
    m = embed_size(num_train, samples)
    if anchors is None:
        models = n * 4 * num_params + n * (n - 1) * 4 * num_params
        embeddings = int(2 * (n - 1) * m.sum()) * projected_dim(embed_dim, ratio) * 4
        return models + embeddings + 8 * n
    is_anchor = np.zeros(n, dtype=bool)
    is_anchor[np.asarray(anchors, dtype=np.int64)] = True
    L = int(is_anchor.sum())
    # ordered pairs (c, c') with c or c' an anchor: c's own samples go out once per pair
    partners = np.where(is_anchor, n - 1, L)
    models = n * 4 * num_params + int(partners.sum()) * 4 * num_params
    embeddings = int(2 * (partners * m).sum()) * projected_dim(embed_dim, ratio) * 4
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


def draw_anchors(num_clients: int, anchors: int, seed: int) -> np.ndarray:
    """The ``anchors`` anchor clients, ascending: a uniform draw without replacement from the
    algorithm's seed, ``run.sampling_seed`` or ``run.seed`` (the same on every rank: the
    server's algorithm and every worker's client half draw them alike)."""
    if not 1 <= anchors <= num_clients:
        raise ValueError(f"anchors must be in 1..{num_clients}, not {anchors}")
    rng = np.random.default_rng([seed, 0xA4C0])
    return np.sort(rng.choice(num_clients, size=anchors, replace=False)).astype(np.int64)


def anchor_adjacency(
    to_anchors: np.ndarray, from_anchors: np.ndarray, anchors: np.ndarray, epsilon: float
) -> np.ndarray:
    """M [K, L]: M[c, i] = d_c,a_i < ε and d_a_i,c < ε, the mutual adjacency of every client
    to each anchor a_i (``to_anchors[c, i]`` = d_c,a_i, ``from_anchors[c, i]`` = d_a_i,c);
    an anchor is adjacent to itself. With every client an anchor (``anchors`` = 0..K−1) it
    is :func:`mutual_adjacency` of the K × K distances."""
    to_a = np.asarray(to_anchors, dtype=np.float64)
    from_a = np.asarray(from_anchors, dtype=np.float64)
    anchors = np.asarray(anchors, dtype=np.int64)
    if to_a.shape != from_a.shape or to_a.ndim != 2 or to_a.shape[1] != len(anchors):
        raise ValueError(
            f"distances to and from the anchors must be [K, {len(anchors)}], not "
            f"{to_a.shape} and {from_a.shape}"
        )
    m = (to_a < epsilon) & (from_a < epsilon)
    m[anchors, np.arange(len(anchors))] = True
    return m


# -- what the one-shot round costs --------------------------------------------------------

#: seconds per ordered pair whatever its size (the pair's projection, the cost matrix, the
#: solver's call), and per entry m_c·m_c' of its cost matrix, for ``ot.emd2`` and
#: ``ot.sinkhorn2`` (reg 0.05): measured on a 2-core machine, one thread per process
PAIR_SECONDS = {"exact": 0.8e-3, "sinkhorn": 40e-3}
ENTRY_SECONDS = {"exact": 0.2e-6, "sinkhorn": 0.5e-6}
#: seconds per sample through a convolutional model to its last linear layer, per 1,024
#: input pixels (measured alike); an MLP's are counted from its multiply-adds
CONV_SAMPLE_SECONDS = {"lenet5": 150e-6, "mnist_cnn": 2.5e-3, "cnn": 2.1e-3}
MLP_SAMPLE_SECONDS = 0.5e-6
MLP_MAC_SECONDS = 0.25e-9


def sample_seconds(model: str, shape: tuple[int, ...], num_classes: int, *, hidden=(64,)) -> float:
    """Estimated seconds to embed one sample of ``shape`` (the forward pass to the last
    linear layer): a convolutional model's by its pixels (H × W), an MLP's by its
    multiply-adds over the flattened sample (a model of one's own as an MLP of ``hidden``,
    the default MLP where it has no such key)."""
    if model in CONV_SAMPLE_SECONDS:
        pixels = math.prod(shape[-2:]) if len(shape) >= 2 else math.prod(shape)
        return CONV_SAMPLE_SECONDS[model] * pixels / 1024
    width, macs = math.prod(shape), 0
    for h in (*hidden, num_classes):
        macs, width = macs + width * h, h
    return MLP_SAMPLE_SECONDS + MLP_MAC_SECONDS * macs


def pair_seconds(m_own, m_other, *, solver: str, sample_s: float):
    """Estimated seconds of one ordered pair (c, c'): embedding c''s m_other samples under
    ω_c, and W1 between m_own and m_other samples (elementwise for arrays)."""
    m_own = np.asarray(m_own, dtype=np.float64)
    m_other = np.asarray(m_other, dtype=np.float64)
    return PAIR_SECONDS[solver] + ENTRY_SECONDS[solver] * m_own * m_other + sample_s * m_other


@dataclass(frozen=True)
class OneShotCost:
    """What the one-shot round computes: ``pairs`` ordered pairs (c, c') of ``low`` to
    ``high`` samples a side, in about ``seconds`` of one core (``pair_s`` a pair, on
    average), for ``num_clients`` clients and ``anchors`` anchors (0: every pair)."""

    num_clients: int
    anchors: int
    pairs: int
    low: int
    high: int
    seconds: float
    pair_s: float

    def fitting_clients(self, seconds: float) -> int:
        """The most clients whose K(K − 1) pairs fit in ``seconds`` at this mean pair cost."""
        pairs = seconds / self.pair_s
        return int((1 + np.sqrt(1 + 4 * pairs)) // 2)

    def fitting_anchors(self, seconds: float) -> int:
        """The most anchors whose 2·L·K pairs fit in ``seconds`` (0: not even one)."""
        return int(seconds // (2 * self.num_clients * self.pair_s))


def one_shot_cost(
    counts, num_train, *, samples: int, anchors: int, solver: str, sample_s: float
) -> OneShotCost:
    """The one-shot round's cost for groups of ``counts[g]`` clients holding ``num_train[g]``
    train samples each: every ordered pair (c, c'), c ≠ c' (``anchors`` = 0), or with L
    anchors each client's pairs with every anchor both ways, 2·L·K in all (a pair is
    counted once per direction; an anchor's pair with itself is none)."""
    counts = np.asarray(counts, dtype=np.float64)
    m = embed_size(np.asarray(num_train, dtype=np.int64), samples).astype(np.float64)
    K = int(counts.sum())
    share = counts / K
    cost = pair_seconds(m[:, None], m[None, :], solver=solver, sample_s=sample_s)
    mean = float(share @ cost @ share)
    pairs = K * (K - 1) if anchors == 0 else 2 * anchors * (K - 1)
    return OneShotCost(
        num_clients=K, anchors=anchors, pairs=pairs, low=int(m.min()), high=int(m.max()),
        seconds=pairs * mean, pair_s=mean,
    )  # fmt: skip


def config_cost(params: EMDCFLParams, config) -> OneShotCost:
    """:func:`one_shot_cost` of a run's config, read without loading the data: each group's
    train samples from its ``samples_per_client`` and test share (a natural partition of a
    file dataset, whose clients' sizes are known only once it is read, is counted at
    ``samples`` a side, the most a client can use)."""
    d, spec = config.data, dataset_spec(config.data.dataset)
    counts, train = [], []
    for g in config.groups:
        if spec.natural_partition(config) and not spec.generated:
            n_train = 2 * params.samples
        else:
            n = g.samples_per_client or d.samples_per_client
            fraction = g.test_fraction or d.test_fraction
            n_train = n - min(max(int(np.rint(n * fraction)), 1), n - 1)  # as the partition
        counts.append(g.count)
        train.append(n_train)
    sample_s = sample_seconds(config.model.name, tuple(spec.input_shape(config)),
                              spec.classes(config),
                              hidden=getattr(config.model, "hidden", (64,)))  # fmt: skip
    return one_shot_cost(
        counts, train, samples=params.samples, anchors=params.anchors, solver=params.solver,
        sample_s=sample_s,
    )  # fmt: skip


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:,.0f} days"


def refusal(cost: OneShotCost, max_hours: float) -> str | None:
    """The one line that refuses a one-shot round estimated above ``max_hours`` of one core
    (None when it fits, or ``max_hours`` is 0: no limit)."""
    budget = max_hours * 3600
    if max_hours <= 0 or cost.seconds <= budget:
        return None
    K = cost.num_clients
    side = f"{cost.low}" if cost.low == cost.high else f"{cost.low}–{cost.high}"
    over = (
        f"{side} samples a side, about {_duration(cost.seconds)} of one core, more than "
        f"algorithm.max_hours = {max_hours:g}"
    )
    anchors = cost.fitting_anchors(budget)
    if cost.anchors:
        if anchors > 1:
            fits = f"at most {anchors:,} anchors fit"
        elif anchors == 1:
            fits = "at most 1 anchor fits"
        else:
            fits = "not even one anchor fits"
        return (
            f"algorithm.anchors = {cost.anchors}: EMD-CFL's one-shot round against "
            f"{cost.anchors:,} anchors computes {cost.pairs:,} Wasserstein distances for "
            f"{K:,} clients, {over}; {fits} (or raise algorithm.max_hours)"
        )
    approximation = (
        f"set algorithm.anchors = L ≤ {anchors:,} (each client against L anchor clients "
        "both ways, 2·L·K distances)"
        if anchors
        else "not even one anchor fits (algorithm.anchors)"
    )
    return (
        f"data.num_clients = {K}: EMD-CFL's one-shot round computes the Wasserstein distance "
        f"of every ordered pair of clients, {cost.pairs:,} of {over}; at most about "
        f"{cost.fitting_clients(budget):,} clients fit; or {approximation}, or raise "
        "algorithm.max_hours"
    )


# -- the algorithm ----------------------------------------------------------------------


@dataclass(frozen=True)
class EMDCFLParams(api.Params):
    """EMD-CFL's keys (``emd_epsilon`` etc. in the former flat section); the defaults
    follow the paper where it gives them."""

    epsilon: float = api.setting(
        0.025,
        "float",
        "ε of the mutual adjacency d_cc' < ε and d_c'c < ε (paper 0.025; it depends on the "
        "embedding's scale: 0.15 separates rotated digits under the MLP)",
    )
    steps: int = api.setting(
        100,
        "int ≥ 1",
        "local SGD steps each client trains the initial model for before the distances",
    )
    samples: int = api.setting(
        512,
        "int ≥ 1",
        "samples per side of each W1 (at most half a client's train split; the other half is its "
        "validation set for τ)",
    )
    projection: float = api.setting(
        0.9, "(0, 1]", "kept share of the embedding dimension in the pair's random projection"
    )
    solver: str = api.setting("exact", "`exact`, `sinkhorn`", "`ot.emd2` or `ot.sinkhorn2`")
    reg: float = api.setting(0.05, "> 0", "Sinkhorn's entropic regularisation")
    anchors: int = api.setting(
        0,
        "0..K−1",
        "0: every pair of clients (the paper's K(K − 1) distances); L > 0: the approximation of "
        "L anchor clients, each client's distances to the anchors and theirs to it (2·L·K), and "
        "clusters of identical neighbourhoods among the anchors ([Population scale]"
        "(scale.md#the-other-algorithms-where-the-population-is-far-larger-than-the-cohort))",
    )
    max_hours: float = api.setting(
        1.0,
        "≥ 0",
        "the one-shot round's estimated time on one core above which the run refuses before "
        "round 1, saying how many clients (or anchors) fit; 0: no limit",
    )

    aliases = {f"emd_{k}": k for k in ("epsilon", "steps", "samples", "projection", "solver",
                                        "reg")}  # fmt: skip
    choices = {"solver": ("exact", "sinkhorn")}
    conditions = {
        "reg": Condition(("algorithm.solver",), "algorithm.solver = 'sinkhorn'",
                         lambda c: c.algorithm.solver == "sinkhorn")
    }  # fmt: skip
    #: run files written before the estimate ran every pair, without a limit
    stored_defaults = {"anchors": 0, "max_hours": 0.0}

    def check(self, config) -> None:
        api.require(1 <= self.steps <= MAX_LOCAL_STEPS, "steps", self.steps,
                f"between 1 and {MAX_LOCAL_STEPS:,} local steps")  # fmt: skip
        api.require(self.samples >= 1, "samples", self.samples, "at least 1 per side")
        api.require(0.0 < self.projection <= 1.0, "projection", self.projection,
                "in (0, 1] (kept share of the embedding dimension; paper 0.9)")  # fmt: skip
        api.require(self.reg > 0, "reg", self.reg, "positive")
        K = config.data.num_clients
        api.require(0 <= self.anchors < K, "anchors", self.anchors,
                f"0 (every pair) or 1 to data.num_clients − 1 ({K - 1})")  # fmt: skip
        api.require(self.max_hours >= 0, "max_hours", self.max_hours, "0 (no limit) or positive")
        line = refusal(config_cost(self, config), self.max_hours)
        if line is not None:
            raise ConfigError(line)


@api.register
class EMDCFL(api.ClusteringAlgorithm):
    name = "emdcfl"
    Params = EMDCFLParams
    client_ops = ("distances",)
    #: the one-shot round's probe (local training and a row of W1 per client: minutes with
    #: a CNN) is given up at a stop signal; plan_probe draws nothing
    probe_abandonable = True
    #: the gathered float64 rows and the distance matrix the server keeps
    pair_bytes = 16
    client = "distfl.algorithms.emdcfl.client:EMDCFLClient"
    #: the pairs' distances at the root against ε
    figures = (
        api.ReportFigure(
            api.ReportFigure.WHY,
            "emd-distances.png",
            "distfl.algorithms.emdcfl.figures:emd_distances",
        ),
    )
    split_datasets = (
        (
            "distances",
            "[K, K]",
            "EMD distance minus the reference τ (on the root also when it does not split)",
        ),  # fmt: skip
        ("adjacency", "[K, K]", "mutual adjacency, below ε both ways ([K, L] with anchors)"),
        ("labels", "[K]", "the child of each member"),
        ("anchors", "[L]", "with algorithm.anchors = L: the anchor clients"),
        ("anchor_distances", "[K, 2L]", "with anchors: d_c,a then d_a,c"),
    )
    split_matrices = (
        ("distances", "EMD distance minus the reference τ"),
        ("adjacency", "mutual adjacency (below ε both ways)"),
    )

    def __init__(self, **kwargs):
        # max_hours is checked with the config (EMDCFLParams.check), before round 1
        super().__init__(**kwargs)
        self.rng = np.random.default_rng([self.seed, 0xE3DCF1])
        #: [K, K] the distances d_c,c', or with anchors [K, 2L]: d_c,a then d_a,c
        self.distances: np.ndarray | None = None
        #: the anchor clients (empty: every pair), in place of the setting's count
        count = self.params.anchors
        self.anchors = (
            draw_anchors(self.num_clients, count, self.seed) if count else np.zeros(0, np.int64)
        )

    @classmethod
    def working_pair_bytes(cls, params: api.Params) -> int:
        """16 with every pair (the gathered rows and the matrix kept), none with anchors."""
        return 0 if getattr(params, "anchors", 0) else cls.pair_bytes

    def plan_probe(self, round_index: int) -> api.ProbeRequest | None:
        """Round 1: every client's row of distances, after ``steps`` local steps."""
        if round_index != 1:
            return None
        clients = np.arange(self.num_clients, dtype=np.int64)
        fed = self.federation
        traffic = None
        anchors = self.anchors if len(self.anchors) else None
        if fed.num_train is not None and fed.num_params:
            traffic = protocol_bytes(
                fed.num_train[clients], num_params=fed.num_params, embed_dim=fed.embed_dim,
                samples=self.samples, ratio=self.projection, anchors=anchors,
            )  # fmt: skip
        return api.ProbeRequest(
            clients=clients,
            clusters=[ROOT],
            op="distances",
            width=self.num_clients if anchors is None else 2 * len(anchors),
            args=(self.steps,),
            federation_bytes=traffic,
        )

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        self.distances = np.asarray(rows, dtype=np.float64)

    def plan(self, round_index: int) -> api.RoundPlan:
        leaves = self.tree.leaves()
        ids = list(leaves)
        sizes = sample_sizes(
            np.array([len(leaves[c]) for c in ids]), self.clients_per_round, self.num_clients
        )
        train: dict[int, str] = {}
        for cid, n in zip(ids, sizes, strict=True):
            for k in np.sort(self.sample_clients(leaves[cid], int(n))):
                train[int(k)] = cid
        return api.RoundPlan(round=round_index, train=dict(sorted(train.items())))

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """After round 1: split the root into the clusters of identical neighbourhoods (with
        one such cluster, the root stays whole and keeps the distances it was decided on)."""
        if round_index != 1 or self.distances is None:
            return api.RoundUpdate()
        if len(self.anchors):
            L = len(self.anchors)
            to_a, from_a = self.distances[:, :L], self.distances[:, L:]
            adjacency = anchor_adjacency(to_a, from_a, self.anchors, self.epsilon)
            info = {"anchors": self.anchors.copy(), "anchor_distances": self.distances}
        else:
            adjacency = mutual_adjacency(self.distances, self.epsilon)
            info = {"distances": self.distances}
        labels = neighbourhood_clusters(adjacency)
        info |= {"adjacency": adjacency, "labels": labels}
        if labels.max() == 0:  # no split: the root keeps what it was decided on
            self.tree[ROOT].datasets.update(info)
            return api.RoundUpdate()
        children = {
            f"{ROOT}.{i}": np.flatnonzero(labels == i).astype(np.int64)
            for i in range(int(labels.max()) + 1)
        }
        return api.RoundUpdate(splits=[self.tree.split(ROOT, children, round_index, info)])

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
    "OneShotCost",
    "anchor_adjacency",
    "config_cost",
    "draw_anchors",
    "embed_size",
    "mutual_adjacency",
    "neighbourhood_clusters",
    "one_shot_cost",
    "pair_seconds",
    "projected_dim",
    "projection",
    "protocol_bytes",
    "refusal",
    "sample_seconds",
    "wasserstein1",
]
