"""What PACFL and FedClust share: a one-shot round that clusters the clients by one row each,
then FedAvg per cluster, and clients first seen later joining the nearest cluster.

Round 1 probes the clients of the one-shot round (every client, as both papers do, or with
``probe_clients`` = n a uniform sample of n drawn from the run's seed); the algorithm turns
their rows into an n × n distance matrix (spread over the ranks with the server's pool), and
:mod:`distfl.algorithms.common.agglomerative` clusters it (``num_clusters`` ≥ 1 clusters, which wins
over ``threshold``; 0 is one cluster per ground-truth group, as IFCA's key). After round 1's
training the root splits into those clusters (children ``0.0``, ``0.1``, ... in order of
their first client); with one cluster the root stays whole, every client in it. Clients
outside the one-shot round wait in one more child, the last (``0.k`` after k clusters),
which no client trains from: its model stays the root's after round 1, on which they are
evaluated. Each round samples ``clients_per_round`` clients uniformly from the whole
population (both papers' sampling), probes those still waiting and moves each into the
cluster nearest by the linkage's distance to its members' rows, before it trains. The rows
of the one-shot round's clients are kept (and saved with the run) only while a client
waits.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.agglomerative import agglomerate, nearest_cluster
from distfl.algorithms.common.kmeans import with_group_count
from distfl.settings import Condition

ROOT = "0"
#: rows of the one-shot round's distance matrix a pooled piece computes
BLOCK = 64
#: the one-shot round's distance matrix is stored at the split up to this many clients
STORED_CLIENTS = 4096


def probe_set(num_clients: int, probe_clients: int, seed: int, tag: int) -> np.ndarray:
    """The clients of the one-shot round, ascending: every client (``probe_clients`` 0), or a
    uniform draw of that many without replacement from (seed, tag)."""
    if probe_clients <= 0 or probe_clients >= num_clients:
        return np.arange(num_clients, dtype=np.int64)
    rng = np.random.default_rng([seed, tag, 0x5E7])
    chosen = rng.choice(num_clients, size=probe_clients, replace=False)
    return np.sort(chosen).astype(np.int64)


def leaf_ids(count: int) -> list[str]:
    """The leaves of the one-shot clusters: none before the split, the root for one
    cluster, else its children ``0.0``, ``0.1``, ..."""
    if count <= 1:
        return [ROOT] * count
    return [f"{ROOT}.{i}" for i in range(count)]


def cluster_cut_setting():
    """The ``num_clusters`` key of a one-shot algorithm (FedClust's, PACFL's)."""
    return api.setting(
        -1,
        "−1, 0..n",
        "−1: cut the hierarchy at `threshold` (the paper's); n ≥ 1: into n clusters; 0: one per "
        "ground-truth data group (as IFCA's key). At most the one-shot round's clients",
    )


def probe_clients_setting():
    """The ``probe_clients`` key of a one-shot algorithm."""
    return api.setting(
        0,
        "0..K",
        "clients of the one-shot round: 0 every client (the paper's); n a uniform sample of n, "
        "the others joining the nearest cluster when first sampled",
    )


def one_shot_datasets(distances: str, *extra: tuple[str, str, str]) -> tuple:
    """A one-shot algorithm's ``split_datasets``: the probed clients, their ``distances``
    (what the n × n matrix holds), their clusters, then the algorithm's ``extra``."""
    return (
        ("clients", "[n]", "the clients of the one-shot round"),
        ("distances", "[n, n]", distances),
        ("labels", "[n]", "the cluster of each client of the one-shot round"),
        *extra,
    )


def blocks(n: int) -> int:
    """Pooled pieces of an n-row distance matrix: ⌈n / BLOCK⌉."""
    return max(1, -(-n // BLOCK))


def block_rows(distances_of, rows: np.ndarray, task: int, extra: dict) -> np.ndarray:
    """Piece ``task`` of the distance matrix of ``rows``: its BLOCK rows (the last piece
    padded with NaN), flattened: what a pooled function returns."""
    n = len(rows)
    lo, hi = task * BLOCK, min(n, (task + 1) * BLOCK)
    out = np.full((BLOCK, n), np.nan)
    out[: hi - lo] = distances_of(rows[lo:hi], rows, extra)
    return out.reshape(-1)


class OneShotParams(api.Params):
    """What a one-shot algorithm's settings share (its dataclass subclasses this): the
    ``threshold`` takes effect only for the cut (``num_clusters`` −1), and
    :meth:`check_cut` checks ``probe_clients`` and ``num_clusters``."""

    conditions = {
        "threshold": Condition(("algorithm.num_clusters",), "algorithm.num_clusters = -1 "
                               "(the cut at the threshold)", lambda c: c.algorithm.num_clusters < 0)
    }  # fmt: skip

    def check_cut(self, config) -> None:
        K = config.data.num_clients
        api.require(0 <= self.probe_clients <= K, "probe_clients", self.probe_clients,
                    f"0 (every client) or 1 to data.num_clients ({K})")  # fmt: skip
        n = self.probe_clients or K
        api.require(self.num_clusters == -1 or 0 <= self.num_clusters <= n, "num_clusters",
                    self.num_clusters, f"-1 (the threshold), 0 (the number of data groups) or "
                    f"1 to the one-shot round's {n} clients")  # fmt: skip


class OneShotClustering(api.ClusteringAlgorithm):
    """The shared server half; a subclass names its probe (its one ``client_ops`` entry,
    ``row_width``, ``probe_args``) and its distances (``pairwise``: the one-shot matrix,
    ``cross``: from newcomers to the clustered clients)."""

    #: its Params' number of clusters (``distfl suite --true-clusters``)
    clusters_key = "num_clusters"
    #: the row-kind tag of the subclass's random streams
    tag: ClassVar[int] = 0
    #: the n × n distances the server keeps, the pooled pieces and scipy's condensed copy
    pair_bytes = 8
    working_bytes = 24

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng([self.seed, self.tag])
        #: the clients of the one-shot round
        self.first = probe_set(self.num_clients, self.probe_clients, self.seed, self.tag)
        #: the one-shot round's rows and each one's cluster index, kept while newcomers may
        #: come (None once every client has a cluster, or before the one-shot round)
        self.rows: np.ndarray | None = None
        self.labels: np.ndarray | None = None
        #: the leaf of each cluster index, once split
        self.leaf_of: list[str] = []
        self._sampled = np.zeros(0, dtype=np.int64)
        self._sampled_round = 0
        self._pending: dict[str, np.ndarray] | None = None

    @classmethod
    def from_config(cls, federation, params):
        return super().from_config(federation, with_group_count(params, federation))

    @classmethod
    def pair_memory(cls, params: api.Params, *, num_clients: int, clients_per_round: int,
                    rounds: int) -> int:  # fmt: skip
        """The one-shot round's n × n matrices: n the clients it probes."""
        n = num_clients if params.probe_clients <= 0 else min(params.probe_clients, num_clients)
        return n * n * cls.working_pair_bytes(params)

    # -- what a subclass gives -------------------------------------------------------

    @property
    def op(self) -> str:
        """Its probe's op: the one op of its ``client_ops``."""
        return self.client_ops[0]

    def row_width(self) -> int:
        raise NotImplementedError

    def probe_args(self) -> tuple[int, ...]:
        return ()

    def pairwise(self, rows: np.ndarray) -> np.ndarray:
        """[n, n] distances between the one-shot round's rows."""
        raise NotImplementedError

    def pooled_pairwise(self, block, payload: dict) -> np.ndarray:
        """[n, n]: the pieces of ``block`` (a pooled function of ``payload``, whose ``rows``
        are the n rows, made with :func:`block_rows`) over the run's pool, put together."""
        n = len(payload["rows"])
        return self.pool.map(block, payload, blocks(n), BLOCK * n).reshape(-1, n)[:n]

    def cross(self, rows: np.ndarray, clustered: np.ndarray) -> np.ndarray:
        """[m, n] distances from newcomers' rows to the clustered clients' rows."""
        raise NotImplementedError

    def split_info(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """What the subclass stores at the split besides the shared datasets."""
        return {}

    # -- a round ---------------------------------------------------------------------

    def probe_bytes(self, num_probed: int) -> int | None:
        """What the probe moves in a real deployment (None: each client downloads a model
        and uploads its row, the runtime's count)."""
        return None

    def _request(self, clients: np.ndarray) -> api.ProbeRequest:
        leaf = self.tree.leaf_ids()[0]
        return api.ProbeRequest(clients=clients, clusters=[leaf], op=self.op,
                            width=self.row_width(), args=self.probe_args(),
                            federation_bytes=self.probe_bytes(len(clients)))  # fmt: skip

    def plan_probe(self, round_index: int) -> api.ProbeRequest | None:
        """Sample the round's clients; round 1 probes the one-shot round's clients, later
        rounds the sampled clients not yet in a cluster."""
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        self._sampled = np.sort(chosen).astype(np.int64)
        self._sampled_round = round_index
        if round_index == 1:
            return self._request(self.first.copy())
        newcomers = np.intersect1d(self._sampled, self.waiting())
        return self._request(newcomers) if len(newcomers) else None

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.float64)
        clients = np.asarray(request.clients, dtype=np.int64)
        if round_index == 1:
            distances = self.pairwise(rows)
            labels = agglomerate(distances, linkage=self.linkage, threshold=self.threshold,
                                 num_clusters=self.num_clusters)  # fmt: skip
            info = {"clients": clients, "labels": labels} | self.split_info(rows)
            if len(clients) <= STORED_CLIENTS:
                info["distances"] = distances
            self._pending = info
            self.rows, self.labels = rows, labels
            return
        if self.rows is None or self.labels is None:
            raise RuntimeError(f"{self.name}: round {round_index} probed newcomers before "
                               "the one-shot round")  # fmt: skip
        join = nearest_cluster(self.cross(rows, self.rows), self.labels, linkage=self.linkage)
        self.tree.reassign(clients, [self.leaf_of[int(j)] for j in join])
        self._drop_rows_when_all_placed()

    def plan(self, round_index: int) -> api.RoundPlan:
        if self._sampled_round != round_index:
            raise RuntimeError(f"{self.name}: round {round_index} planned without its probe")
        leaves, assign = self.tree.assignment()
        missing = np.intersect1d(self._sampled, self.waiting())
        if missing.size or (assign[self._sampled] < 0).any():
            raise RuntimeError(f"{self.name}: round {round_index}: clients {missing} have no "
                               "cluster")  # fmt: skip
        train = {int(k): leaves[int(assign[k])] for k in self._sampled}
        return api.RoundPlan(round=round_index, train=train)

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """After round 1: split the root into the one-shot clusters (with one cluster the root
        stays whole, every client in it, and keeps what it was decided on)."""
        if round_index != 1 or self._pending is None:
            return api.RoundUpdate()
        info, self._pending = self._pending, None
        labels = info["labels"]
        clients = info["clients"]
        if labels.max(initial=0) == 0:
            self.tree[ROOT].datasets.update(info)
            self.leaf_of = leaf_ids(1)
            self.rows = self.labels = None  # every client is in the root
            return api.RoundUpdate()
        self.leaf_of = leaf_ids(int(labels.max()) + 1)
        children = {cid: clients[labels == i] for i, cid in enumerate(self.leaf_of)}
        rest = np.setdiff1d(np.arange(self.num_clients), clients)
        if len(rest):
            children[self.waiting_id()] = rest
        split = self.tree.split(ROOT, children, round_index, info)
        self._drop_rows_when_all_placed()
        return api.RoundUpdate(splits=[split])

    def waiting_id(self) -> str:
        """The leaf of the clients not yet placed: the child after the clusters."""
        return f"{ROOT}.{len(self.leaf_of)}"

    def waiting(self) -> np.ndarray:
        """The clients not yet placed in a cluster, ascending (none before the split)."""
        cid = self.waiting_id()
        if len(self.leaf_of) < 2 or cid not in self.tree:
            return np.zeros(0, dtype=np.int64)
        return self.tree.members(cid)

    def _drop_rows_when_all_placed(self) -> None:
        if not len(self.waiting()):
            self.rows = self.labels = None

    # -- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "sampled": self._sampled.copy(),
            "sampled_round": self._sampled_round,
            "rows": self.rows if self.rows is not None else np.zeros((0, 0)),
            "labels": self.labels if self.labels is not None else np.zeros(0, np.int64),
            "leaf_count": len(self.leaf_of),
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._sampled = np.asarray(state["sampled"], dtype=np.int64).reshape(-1).copy()
        self._sampled_round = int(state["sampled_round"])
        rows = np.asarray(state["rows"], dtype=np.float64)
        self.rows = rows if rows.size else None
        labels = np.asarray(state["labels"], dtype=np.int64).reshape(-1)
        self.labels = labels if self.rows is not None else None
        self.leaf_of = leaf_ids(int(state["leaf_count"]))


__all__ = ["BLOCK", "OneShotClustering", "STORED_CLIENTS", "block_rows", "blocks", "probe_set"]
