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

The pure math is in module-level functions; :class:`FedGWC` holds the per-cluster state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distfl.algorithms.base import ClientReports, ClusteringAlgorithm, RoundPlan, Split

# -- pure functions --------------------------------------------------------------------


def gaussian_rewards(losses: np.ndarray) -> np.ndarray:
    """Rewards ω_k of the n clients sampled in one cluster and round (eq. 1).

    ``losses`` is [n, S]. For each step s, m_s and σ_s² are the mean and the unbiased
    variance of the n losses; r_k^s = exp(-(l_k^s - m_s)² / (2 σ_s²)), 1 where σ_s² = 0
    (and where n < 2, when no variance is defined); ω_k = mean over s of r_k^s."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2:
        raise ValueError(f"losses must be [n, S], not shape {losses.shape}")
    n = losses.shape[0]
    if n < 2:
        return np.ones(n)
    mean = losses.mean(axis=0)
    var = losses.var(axis=0, ddof=1)
    dev2 = (losses - mean) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(var > 0, np.exp(-dev2 / (2.0 * np.where(var > 0, var, 1.0))), 1.0)
    return r.mean(axis=1)


def update_interaction(
    P: np.ndarray, sampled: np.ndarray, rewards: np.ndarray, alpha: float
) -> np.ndarray:
    """Eq. 3: P[k, j] ← (1-α) P[k, j] + α ω_k for every k, j in ``sampled``; a new array.

    ``sampled`` indexes rows/columns of P (positions within the cluster)."""
    out = np.array(P, dtype=np.float64, copy=True)
    idx = np.asarray(sampled, dtype=np.int64)
    w = np.asarray(rewards, dtype=np.float64)
    block = np.ix_(idx, idx)
    out[block] = (1.0 - alpha) * out[block] + alpha * w[:, None]
    return out


def perception_distances(P: np.ndarray, *, block_rows: int = 2048) -> np.ndarray:
    """D[k, j] = ||v_k^j - v_j^k||², v_k^j = row k of P without entries k and j.

    Uses ||v_k^j - v_j^k||² = ||P_k - P_j||² - (P_kk - P_jk)² - (P_kj - P_jj)², so D comes
    from one Gram matrix, computed in row blocks to bound temporaries (O(K²) memory)."""
    P = np.asarray(P, dtype=np.float64)
    K = P.shape[0]
    if P.shape != (K, K):
        raise ValueError(f"P must be square, not {P.shape}")
    sq = np.einsum("ij,ij->i", P, P)
    d = np.diag(P).copy()
    D = np.empty((K, K), dtype=np.float64)
    for lo in range(0, K, block_rows):
        hi = min(lo + block_rows, K)
        rows = P[lo:hi]
        blk = sq[lo:hi, None] + sq[None, :] - 2.0 * (rows @ P.T)
        blk -= (d[lo:hi, None] - P.T[lo:hi]) ** 2  # (P_kk - P_jk)²
        blk -= (rows - d[None, :]) ** 2  # (P_kj - P_jj)²
        np.maximum(blk, 0.0, out=blk)  # rounding can leave tiny negatives
        D[lo:hi] = blk
    np.fill_diagonal(D, 0.0)
    return D


def affinity(P: np.ndarray, beta: float) -> np.ndarray:
    """Eq. 4: W[k, j] = exp(-β ||v_k^j - v_j^k||²), symmetric, ones on the diagonal."""
    D = perception_distances(P)
    D *= -beta
    np.exp(D, out=D)
    return D


def choose_split(
    W: np.ndarray, n_max: int, seed: int, *, min_size: int = 1, threshold: float = 1.0
) -> tuple[int, np.ndarray, np.ndarray]:
    """Algorithm 1: spectral clustering of the precomputed affinity W for n = 2..n_max, the
    Davies–Bouldin score of each labelling on the rows of W; split into argmin_n DB_n
    clusters if that score is below 1.

    Returns ``(n_clusters, labels, scores)``; ``scores[i]`` is DB for n = i + 2 (inf where
    n is not possible: too few points, or a cluster smaller than ``min_size``). With no
    score below ``threshold`` (the paper: 1), ``n_clusters = 1`` and all labels are 0.

    The spectral embedding (Ng, Jordan & Weiss 2001, as scikit-learn computes it) is built
    once with n_max components; each n runs k-means on its first n components."""
    from sklearn.cluster import KMeans
    from sklearn.manifold import spectral_embedding
    from sklearn.metrics import davies_bouldin_score

    W = np.asarray(W, dtype=np.float64)
    K = W.shape[0]
    n_hi = min(n_max, K - 1)
    scores = np.full(max(n_max - 1, 0), np.inf)
    labels_by_n: dict[int, np.ndarray] = {}
    if n_hi >= 2:
        maps = spectral_embedding(
            W, n_components=n_hi, drop_first=False, random_state=seed, norm_laplacian=True
        )
        for n in range(2, n_hi + 1):
            km = KMeans(n_clusters=n, n_init=10, random_state=seed)
            labels = km.fit_predict(maps[:, :n])
            sizes = np.bincount(labels, minlength=n)
            if len(np.unique(labels)) < 2 or sizes.min() < min_size:
                continue
            labels_by_n[n] = _canonical(labels)
            scores[n - 2] = davies_bouldin_score(W, labels)
    if not np.isfinite(scores).any() or scores.min() >= threshold:
        return 1, np.zeros(K, dtype=np.int64), scores
    best = int(np.argmin(scores)) + 2
    return best, labels_by_n[best], scores


def _canonical(labels: np.ndarray) -> np.ndarray:
    """Relabel so that cluster ids appear in order of their first member (0, 1, ...)."""
    mapping: dict[int, int] = {}
    for v in labels:
        mapping.setdefault(int(v), len(mapping))
    return np.array([mapping[int(v)] for v in labels], dtype=np.int64)


def participants(size: int, rate: float, min_clients: int) -> int:
    """Clients a cluster samples per round: max(ρ|C|, 3) (Theorem A.5), at most |C|."""
    return min(size, max(min_clients, int(round(rate * size))))


def priority_sample(counts: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sample n of len(counts) positions without replacement, uniformly but with priority
    for rarely sampled clients (FedGWC section 4.1): a client's weight is
    1 / (1 + its count - the smallest count)."""
    counts = np.asarray(counts, dtype=np.float64)
    w = 1.0 / (1.0 + counts - counts.min())
    return np.sort(rng.choice(len(counts), size=n, replace=False, p=w / w.sum()))


# -- the algorithm -----------------------------------------------------------------


@dataclass
class ClusterState:
    members: np.ndarray  # global client ids, ascending
    P: np.ndarray  # [|C|, |C|] interaction sub-block
    mse: float = 1.0
    quiet: int = 0  # consecutive rounds with mse < ε
    last_sampled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class FedGWC(ClusteringAlgorithm):
    name = "fedgwc"

    def __init__(
        self,
        *,
        num_clients: int,
        clients_per_round: int,
        seed: int,
        beta: float = 0.5,
        epsilon: float = 1e-5,
        n_max: int = 5,
        alpha: float = 0.0,
        patience: int = 1,
        min_clients: int = 3,
        sampling: str = "priority",
        db_threshold: float = 1.0,
    ):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)
        self.rate = clients_per_round / num_clients
        self.alpha = alpha if alpha > 0 else self.rate
        self.beta = beta
        self.epsilon = epsilon
        self.n_max = n_max
        self.patience = patience
        self.min_clients = min_clients
        self.sampling = sampling
        self.db_threshold = db_threshold
        self.rng = np.random.default_rng([seed, 0xF6C])
        self.gamma = np.zeros(num_clients)  # Gaussian weights, eq. 2
        self.times_sampled = np.zeros(num_clients, dtype=np.int64)
        self.state: dict[str, ClusterState] = {
            "0": ClusterState(
                members=np.arange(num_clients, dtype=np.int64),
                P=np.zeros((num_clients, num_clients)),
            )
        }
        self.split_tests = 0
        self._round_stats: dict[str, dict[str, float]] = {}

    def clusters(self) -> dict[str, np.ndarray]:
        return {cid: st.members for cid, st in sorted(self.state.items())}

    def cluster_stats(self) -> dict[str, dict[str, float]]:
        """MSE of each cluster that trained in the last round (split parents included)."""
        return self._round_stats

    def plan_round(self, round_index: int) -> RoundPlan:
        train: dict[int, str] = {}
        for cid, st in sorted(self.state.items()):
            n = participants(len(st.members), self.rate, self.min_clients)
            if self.sampling == "priority":
                pos = priority_sample(self.times_sampled[st.members], n, self.rng)
            else:
                pos = np.sort(self.rng.choice(len(st.members), size=n, replace=False))
            st.last_sampled = pos
            for k in st.members[pos]:
                train[int(k)] = cid
        return RoundPlan(round=round_index, train=train)

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> list[Split]:
        row_of = {int(k): i for i, k in enumerate(reports.clients)}
        splits: list[Split] = []
        self._round_stats = {}
        for cid in sorted(self.state):
            st = self.state[cid]
            pos = st.last_sampled
            ids = st.members[pos]
            if len(ids) == 0:
                continue
            losses = reports.losses[[row_of[int(k)] for k in ids]]
            omega = gaussian_rewards(losses)
            self.gamma[ids] = (1.0 - self.alpha) * self.gamma[ids] + self.alpha * omega
            self.times_sampled[ids] += 1
            P_new = update_interaction(st.P, pos, omega, self.alpha)
            st.mse = float(np.mean((P_new - st.P) ** 2))
            st.P = P_new
            self._round_stats[cid] = {"mse": st.mse}
            st.quiet = st.quiet + 1 if st.mse < self.epsilon else 0
            if st.quiet >= self.patience and len(st.members) >= 2 * self.min_clients:
                split = self._try_split(cid, st, round_index)
                if split is not None:
                    splits.append(split)
                else:
                    st.quiet = 0  # wait another `patience` quiet rounds before retesting
        for split in splits:
            del self.state[split.parent]
        return splits

    def _try_split(self, cid: str, st: ClusterState, round_index: int) -> Split | None:
        self.split_tests += 1
        W = affinity(st.P, self.beta)
        n, labels, scores = choose_split(
            W,
            self.n_max,
            self.seed + round_index,
            min_size=self.min_clients,
            threshold=self.db_threshold,
        )
        if n == 1:
            return None
        children = {}
        for c in range(n):
            pos = np.flatnonzero(labels == c)
            child_id = f"{cid}.{c}"
            children[child_id] = st.members[pos]
            self.state[child_id] = ClusterState(
                members=st.members[pos], P=st.P[np.ix_(pos, pos)].copy()
            )
        info = {"db_scores": scores, "interaction": st.P, "affinity": W, "labels": labels}
        return Split(parent=cid, children=children, info=info)

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "gamma": self.gamma.copy(),
            "times_sampled": self.times_sampled.copy(),
            "split_tests": self.split_tests,
            "clusters": {
                cid: {"members": st.members, "P": st.P, "mse": st.mse, "quiet": st.quiet}
                for cid, st in self.state.items()
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.gamma = np.asarray(state["gamma"], dtype=np.float64).copy()
        self.times_sampled = np.asarray(state["times_sampled"], dtype=np.int64).copy()
        self.split_tests = int(state["split_tests"])
        self.state = {
            cid: ClusterState(
                members=np.asarray(c["members"], dtype=np.int64),
                P=np.asarray(c["P"], dtype=np.float64),
                mse=float(c["mse"]),
                quiet=int(c["quiet"]),
            )
            for cid, c in state["clusters"].items()
        }


__all__ = [
    "FedGWC",
    "affinity",
    "choose_split",
    "gaussian_rewards",
    "participants",
    "perception_distances",
    "priority_sample",
    "update_interaction",
]
