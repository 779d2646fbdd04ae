"""The algorithm itself: its state per cluster and the rounds (plan, update, split tests)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.fedgwc import spectral
from distfl.algorithms.fedgwc.interaction import (
    BLOCKS_ABOVE,
    COORDINATES_ABOVE,
    ENTRY_BYTES,
    BlockStore,
    PairStore,
    imputed_coordinates,
    same_partition,
    store_from_state,
    stored_bytes,
    valley_test,
)
from distfl.algorithms.fedgwc.params import (
    DENSE_SHARE,
    NUMERICAL_FAILURES,
    STABLE_SHARE,
    FedGWCParams,
    resolved,
)
from distfl.algorithms.fedgwc.perception import (
    DIAGNOSE_W_UP_TO,
    affinity,
    block_contrast,
)
from distfl.algorithms.fedgwc.reassign import moves
from distfl.algorithms.fedgwc.reference import (
    coordinates_reference,
    coordinates_split,
    lowest_score,
    participants,
    priority_sample,
    priority_weights,
    reference_score,
)
from distfl.algorithms.fedgwc.rewards import (
    gaussian_rewards,
    interaction_mse,
    round_rewards,
)
from distfl.algorithms.fedgwc.spectral import (
    DegenerateAffinity,
    choose_split,
    finite,
)
from distfl.hierarchy import Split

#: the re-assignment's probe (:mod:`distfl.algorithms.common.losses_client`'s op; that module
#: imports torch, which a server half does not)
LOSSES = "losses"


@dataclass
class ClusterState:
    """FedGWC's own state of one cluster (its members are the tree's)."""

    #: [|C|, |C|] interaction sub-block, rows in the order of the members (``dense``), or its
    #: observed entries (``observed``)
    P: np.ndarray | PairStore | BlockStore
    mse: float = 1.0
    quiet: int = 0  # consecutive rounds with mse < ε
    last_sampled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: the partition the last split tests proposed (labels, None: no proposal) and how many
    #: consecutive tests proposed it
    proposal: np.ndarray | None = None
    repeats: int = 0


@api.register
class FedGWC(api.ClusteringAlgorithm):
    name = "fedgwc"
    Params = FedGWCParams
    #: P (float64), the affinity and the Gram product (float32) of a split test
    pair_bytes = 16
    #: the re-assignment's probe: each sampled client's train loss under every cluster's model
    client_ops = (LOSSES,)
    client = "distfl.algorithms.common.losses_client:LossesClient"

    @classmethod
    def working_pair_bytes(cls, params: api.Params) -> int:
        """With Gaussian references, a split test also holds, beside its own P and W, a
        reference's rows (float64) and either the centred rows they are drawn from (float64)
        or their affinity and its Gram product (float32 above SMALL_K). With observed
        entries, each costs :data:`~distfl.algorithms.fedgwc.interaction.ENTRY_BYTES`."""
        if getattr(params, "interaction", "dense") == "observed":
            return ENTRY_BYTES
        return cls.pair_bytes + (16 if getattr(params, "reference_draws", 0) else 0)

    @classmethod
    def pair_memory(cls, params: api.Params, *, num_clients: int, clients_per_round: int,
                    rounds: int) -> int:  # fmt: skip
        """``dense``: K² pairs. ``observed`` (``auto`` resolved for this federation): what the
        rounds can add (:func:`~distfl.algorithms.fedgwc.interaction.stored_bytes`: entries up to
        BLOCKS_ABOVE clients, above, the rounds and the pairs sampled together more than
        once) and the largest dense matrices: the imputed P and W of a cluster of up to
        DIAGNOSE_W_UP_TO clients (its diagnostics), their Gram product, and a reference's
        twice that in a split test of up to COORDINATES_ABOVE clients; above, the test works
        on low-rank coordinates of the rows (a few hundred bytes a client)."""
        interaction = resolved("interaction", getattr(params, "interaction", "dense"),
                               num_clients, clients_per_round)  # fmt: skip
        if interaction != "observed":
            return super().pair_memory(
                params, num_clients=num_clients, clients_per_round=clients_per_round, rounds=rounds
            )
        stored = stored_bytes(num_clients, clients_per_round, rounds,
                              params.min_clients, params.n_max)  # fmt: skip
        dense = min(num_clients, max(DIAGNOSE_W_UP_TO, COORDINATES_ABOVE)) ** 2 * 32
        return stored + dense + num_clients * 512

    #: each cluster's MSE of P against ε, the block contrast of its P and W by group, and
    #: the scores of its split tests
    figures = (
        api.ReportFigure(
            api.ReportFigure.TRAINING,
            "mse.png",
            "distfl.algorithms.fedgwc.figures:mse",
            stats=("mse",),
        ),
        api.ReportFigure(
            api.ReportFigure.WHY,
            "contrast.png",
            "distfl.algorithms.fedgwc.figures:contrast",
            stats=("p_within", "p_cross", "p_spread", "w_within", "w_cross", "w_spread"),
        ),
        api.ReportFigure(
            api.ReportFigure.WHY,
            "db-tests.png",
            "distfl.algorithms.fedgwc.figures:db_tests",
            stats=("db", "db_reference"),
        ),
        # at each split: the members in the spectral embedding of W, the DB score of each n
        api.ReportFigure(
            api.ReportFigure.WHY,
            "embedding.png",
            "distfl.algorithms.fedgwc.figures:split_embedding",
            per_split=True,
        ),
        api.ReportFigure(
            api.ReportFigure.WHY,
            "db.png",
            "distfl.algorithms.fedgwc.figures:split_db",
            per_split=True,
        ),
    )
    split_matrices = (("interaction", "interaction matrix P"), ("affinity", "affinity W"))
    split_datasets = (
        ("db_scores", "[n_max - 1]", "Davies-Bouldin score for n = 2..n_max (inf: not possible)"),
        ("interaction", "[n, n]", "P (float32 above 2,048 members)"),
        ("affinity", "[n, n]", "W (float32 above 2,048 members)"),
        ("labels", "[n]", "the child of each member"),
        (
            "coordinates",
            "[n, n_max - 1]",
            "with observed entries above 2,048 members: the "
            "spectral coordinates, in place of P and W",
        ),  # fmt: skip
    )
    statistics = (
        api.Statistic("mse", "MSE of the cluster's interaction matrix P between rounds", True),
        api.Statistic("p_within", "mean of P over same-group pairs", True),
        api.Statistic("p_cross", "mean of P over cross-group pairs", True),
        api.Statistic("p_spread", "mean spread of a row's same-group entries of P", True),
        api.Statistic(
            "w_within", "the same of W (every round up to 512 members, else at split tests)", True
        ),  # fmt: skip
        api.Statistic("w_cross", "the same of W", True),
        api.Statistic("w_spread", "the same of W", True),
        api.Statistic("db", "the best Davies-Bouldin score of a split test"),
        api.Statistic(
            "db_reference", "the Gaussian references' median score (the calibrated split test)"
        ),
        api.Statistic("test_failed", "1 where a split test could not be computed (no proposal)"),
        api.Statistic(
            "valley",
            "with observed entries: the valley between the proposed clusters in P's coordinates",
        ),
        api.Statistic("valley_reference", "the same of uniform references"),
        api.Statistic(
            "joined",
            "members the re-assignment moved into the cluster this round (recorded where any "
            "moved)",
        ),
        api.Statistic("left", "members the re-assignment moved out of the cluster this round"),
    )

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        K, cohort = self.num_clients, self.clients_per_round
        self.rate = cohort / K
        # α = 0 means the participation rate, at least min_alpha; the auto keys resolved
        self.alpha = self.alpha if self.alpha > 0 else max(self.rate, self.min_alpha)
        self.interaction = resolved("interaction", self.interaction, K, cohort)
        self.observed = self.interaction == "observed"
        self.reward = resolved("reward", self.reward, K, cohort)
        self._rewards = round_rewards if self.reward == "round" else gaussian_rewards
        self.rng = np.random.default_rng([self.seed, 0xF6C])
        self.gamma = np.zeros(K)  # Gaussian weights, eq. 2
        self.times_sampled = np.zeros(K, dtype=np.int64)
        self.state: dict[str, ClusterState] = {"0": ClusterState(P=self._empty_p(K))}
        self.split_tests = 0
        #: this round's cohort of each cluster (ascending ids), drawn by :meth:`plan_probe`
        self._cohorts: dict[str, np.ndarray] = {}
        self._drawn_round: int | None = None
        #: the re-assignment's moves this round: cluster -> (joined, left)
        self._moved: dict[str, list[int]] = {}

    def _empty_p(self, n: int) -> np.ndarray | PairStore | BlockStore:
        """P⁰ = 0: dense, or observed entries (above BLOCKS_ABOVE clients, where neither the
        split test nor the diagnostics need them one by one, kept as the rounds that wrote
        them)."""
        if not self.observed:
            return np.zeros((n, n))
        return BlockStore(n) if n > BLOCKS_ABOVE else PairStore(n)

    def _dense_p(self, st: ClusterState, up_to: int | None = None) -> np.ndarray | None:
        """The cluster's P as an array (observed: missing entries the row's mean), None where
        the test works on coordinates instead (observed, more than COORDINATES_ABOVE members,
        or ``up_to``)."""
        if not self.observed:
            return st.P
        return st.P.dense() if st.P.n <= (COORDINATES_ABOVE if up_to is None else up_to) else None

    def _draw(self, round_index: int) -> None:
        """Each cluster's cohort of the round (section 4.1's sampling, through the run's
        selection), in the order of the cluster ids."""
        self._cohorts, self._moved = {}, {}
        for cid in sorted(self.state):
            members = self.tree.members(cid)
            n = participants(len(members), self.rate, self.min_clients)
            if self.sampling == "priority":  # its own draw; the selection decides
                chosen = self.sample_clients(members, n, own=partial(self._priority, members, n),
                                             priority=self._weights)  # fmt: skip
            else:
                chosen = self.sample_clients(members, n)
            self._cohorts[cid] = np.sort(np.asarray(chosen, dtype=np.int64))
        self._drawn_round = round_index

    def plan_probe(self, round_index: int) -> api.ProbeRequest | None:
        """The round's cohorts; with ``reassign = "loss"``, two clusters or more and every
        ``reassign_every`` rounds, their train losses under every cluster's model."""
        self._draw(round_index)
        leaves = sorted(self.state)
        if self.reassign != "loss" or len(leaves) < 2 or round_index % self.reassign_every:
            return None
        clients = np.sort(np.concatenate([self._cohorts[c] for c in leaves]))
        if not len(clients):
            return None
        # each client downloads the other clusters' models (its own it trains, counted
        # there) and uploads a loss each
        other = len(clients) * ((len(leaves) - 1) * 4 * self.federation.num_params
                                + 8 * len(leaves))  # fmt: skip
        return api.ProbeRequest(clients=clients, clusters=leaves, op=LOSSES, federation_bytes=other)

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        """The probed clients that another cluster's model fits far better move there
        (:func:`~distfl.algorithms.fedgwc.reassign.moves`, :meth:`_reassign`); a mover
        trains in its new cluster this round."""
        leaves = list(request.clusters)
        if leaves != sorted(self.state):
            raise ValueError(f"round {round_index}: a probe over clusters {leaves}")
        own = {int(k): cid for cid in leaves for k in self._cohorts[cid]}
        clients = np.asarray(request.clients, dtype=np.int64)
        sizes = {cid: len(self.tree.members(cid)) for cid in leaves}
        moved = moves(clients, [own[int(k)] for k in clients], leaves, rows, sizes,
                      ratio=self.reassign_ratio, outlier=self.reassign_outlier,
                      min_clients=self.min_clients)  # fmt: skip
        if not moved:
            return
        for k, b in moved.items():
            self._moved.setdefault(own[k], [0, 0])[1] += 1
            self._moved.setdefault(b, [0, 0])[0] += 1
        self._reassign(np.asarray(list(moved), dtype=np.int64), list(moved.values()))
        own.update(moved)
        for cid in leaves:
            self._cohorts[cid] = np.asarray(sorted(k for k, c in own.items() if c == cid),
                                            dtype=np.int64)  # fmt: skip

    def _reassign(self, movers: np.ndarray, targets: list[str]) -> None:
        """Move ``movers`` to the clusters ``targets``. Each cluster that changed starts its
        P afresh (P⁰ = 0, its MSE 1, as a new cluster's): the rewards its members earned
        beside a client that did not belong (or without one that did) are not those of its
        members now, and a split test on them finds that past, not a group."""
        self.tree.reassign(movers, targets)
        for cid in self._moved:
            self.state[cid] = ClusterState(P=self._empty_p(len(self.tree.members(cid))))

    def plan(self, round_index: int) -> api.RoundPlan:
        if self._drawn_round != round_index:  # a plan without its probe: draw here
            self._draw(round_index)
        train: dict[int, str] = {}
        for cid, st in sorted(self.state.items()):
            members = self.tree.members(cid)
            chosen = self._cohorts.get(cid, np.zeros(0, dtype=np.int64))
            pos = np.searchsorted(members, chosen)
            st.last_sampled = pos
            for k in members[pos]:
                train[int(k)] = cid
        return api.RoundPlan(round=round_index, train=train)

    def _priority(self, members: np.ndarray, n: int) -> np.ndarray:
        """Its priority sampling of n of ``members`` among those available this round
        (section 4.1), ascending ids."""
        here = np.flatnonzero(self.participation.available(members))
        size = min(n, len(here))
        pos = here[priority_sample(self.times_sampled[members[here]], size, self.rng)] \
            if size else here  # fmt: skip
        return members[pos]

    def _weights(self, ids: np.ndarray) -> np.ndarray:
        """The priority sampling's weight of each of ``ids`` (clients of one draw)."""
        return priority_weights(self.times_sampled[ids])

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """Eq. 1-3 on each cluster's sampled clients; the split test where P has converged.
        ``stats``: the MSE of each cluster that trained (split parents included), and the
        block contrast of its P and W by ground-truth group (:meth:`_diagnose`)."""
        row_of = {int(k): i for i, k in enumerate(reports.clients)}
        out = api.RoundUpdate()
        for cid, (joined, left) in self._moved.items():  # even where none of it reported
            out.stats[cid] = {"joined": float(joined), "left": float(left)}
        for cid in sorted(self.state):
            st = self.state[cid]
            members = self.tree.members(cid)
            pos = st.last_sampled  # those that reported (a dropout or the deadline loses some)
            pos = pos[np.isin(members[pos], reports.clients)]
            ids = members[pos]
            if len(ids) == 0:
                continue
            losses = reports.losses[[row_of[int(k)] for k in ids]]
            omega = self._rewards(losses)
            self.gamma[ids] = (1.0 - self.alpha) * self.gamma[ids] + self.alpha * omega
            self.times_sampled[ids] += 1
            # eq. 3 in place: only the sampled block changes
            if self.observed:  # the MSE over the entries observed so far
                st.mse = st.P.update(pos, omega, self.alpha) / len(st.P)
            else:
                block = np.ix_(pos, pos)
                old = st.P[block]
                new = (1.0 - self.alpha) * old + self.alpha * omega[:, None]
                st.mse = interaction_mse(new - old, block, st.P.shape)
                st.P[block] = new
            out.stats.setdefault(cid, {})["mse"] = st.mse
            st.quiet = st.quiet + 1 if st.mse < self.epsilon else 0
            testing = (
                st.quiet >= self.patience
                and len(members) >= 2 * self.min_clients
                and int(self.times_sampled[members].min()) >= self.min_observations
            )
            # observed entries are made dense for the diagnostics up to DIAGNOSE_W_UP_TO
            # members (and for a test up to COORDINATES_ABOVE, no more than that)
            P = self._dense_p(st, DIAGNOSE_W_UP_TO)
            dense_test = testing and (not self.observed or len(members) <= COORDINATES_ABOVE)
            W = self._diagnose(out.stats[cid], P, members, dense_test)
            if testing:
                split = self._try_split(cid, st, round_index, W, out.stats[cid])
                if split is not None:
                    out.splits.append(split)
                else:
                    st.quiet = 0  # wait another `patience` quiet rounds before retesting
        for split in out.splits:
            del self.state[split.parent]
        return out

    def _diagnose(
        self, stats: dict[str, float], P: np.ndarray, members: np.ndarray, testing: bool
    ) -> np.ndarray | None:
        """The block contrast of P and W by ground-truth group (:func:`block_contrast`) into
        ``stats`` (p_within, p_cross, p_spread, w_within, w_cross, w_spread), when the
        federation's groups are known; returns W where it was computed (every round up to
        :data:`DIAGNOSE_W_UP_TO` members, and for a split test)."""
        groups = self.federation.groups
        W = None
        if P is None:
            return None
        if testing or (groups is not None and len(members) <= DIAGNOSE_W_UP_TO):
            if not finite(P):
                return None  # the split test records it
            W = affinity(P, self.beta)
        if groups is None:
            return W
        g = groups[members]
        for name, M in (("p", P), ("w", W)):
            if M is None:
                continue
            within, cross, spread = block_contrast(M, g)
            stats.update({f"{name}_within": within, f"{name}_cross": cross,
                          f"{name}_spread": spread})  # fmt: skip
        return W

    def _try_split(
        self,
        cid: str,
        st: ClusterState,
        round_index: int,
        W: np.ndarray | None = None,
        stats: dict[str, float] | None = None,
    ) -> Split | None:
        """Algorithm 1 on the cluster's W: a partition is proposed when the best
        Davies–Bouldin score is below ``db_threshold``, and made when ``stable_tests``
        consecutive tests proposed it and (with ``reference_draws``) the score is below
        ``reference_ratio`` times the Gaussian references' (:meth:`_beats_reference`).
        ``stats`` gets ``db``, the best score, and ``db_reference``, the references'."""
        self.split_tests += 1
        try:
            P, W, Y, (n, labels, scores) = self._split_candidates(st, round_index, W)
        except NUMERICAL_FAILURES:
            # a test that cannot be computed is recorded as its outcome and proposes nothing
            if stats is not None:
                stats["test_failed"] = 1.0
            st.proposal, st.repeats = None, 0
            return None
        best = lowest_score(scores)
        if stats is not None and math.isfinite(best):
            stats["db"] = best
        if n == 1:
            st.proposal, st.repeats = None, 0
            return None
        same = st.proposal is not None and same_partition(
            st.proposal, labels, tolerance=len(labels) // STABLE_SHARE
        )
        st.proposal, st.repeats = labels, (st.repeats + 1 if same else 1)
        if st.repeats < self.stable_tests:
            return None
        try:
            if self.observed and self._sparse(st):
                beats = self._separated(st, round_index, labels, stats, Y)
            else:
                beats = self._beats_reference(st, round_index, best, stats, P, Y)
        except NUMERICAL_FAILURES:
            if stats is not None:
                stats["test_failed"] = 1.0
            return None
        if not beats:
            return None
        members = self.tree.members(cid)
        children = {}
        for c in range(n):
            pos = np.flatnonzero(labels == c)
            children[f"{cid}.{c}"] = members[pos]
            sub = st.P.subset(pos) if self.observed else st.P[np.ix_(pos, pos)].copy()
            self.state[f"{cid}.{c}"] = ClusterState(P=sub)
        info: dict[str, np.ndarray] = {"db_scores": scores, "labels": labels}
        if P is not None:
            # above SMALL_K clients the run file keeps the matrices in float32 (W already is)
            info["interaction"] = P if len(members) <= spectral.SMALL_K else P.astype(np.float32)
            info["affinity"] = W
        else:  # the coordinates the test clustered (there is no W)
            info["coordinates"] = Y
        return self.tree.split(cid, children, round_index, info)

    @staticmethod
    def _sparse(st: ClusterState) -> bool:
        """Whether fewer than :data:`DENSE_SHARE` of the cluster's pairs of clients were
        ever sampled together (observed entries): most of each row is then imputed."""
        n = st.P.n
        if n < 2:
            return False
        return st.P.off_diagonal() < DENSE_SHARE * n * (n - 1)

    def _separated(
        self,
        st: ClusterState,
        round_index: int,
        labels: np.ndarray,
        stats: dict[str, float] | None,
        Y: np.ndarray | None,
    ) -> bool:
        """Where most of P is imputed, whether the proposed clusters are separated by a
        valley in the coordinates of P's rows (:func:`~distfl.algorithms.fedgwc.interaction.
        valley_test` against ``reference_draws`` uniform samples); True without references.
        ``stats`` gets ``valley`` and ``valley_reference``."""
        if not self.reference_draws:
            return True
        if Y is None:
            Y = imputed_coordinates(st.P, max(self.n_max - 1, 1), self.seed + round_index)
        rng = np.random.default_rng([self.seed, 0x5D, round_index, self.split_tests])
        gap, reference = valley_test(Y, labels, draws=self.reference_draws, rng=rng)
        if stats is not None:
            stats["valley"], stats["valley_reference"] = gap, reference
        return gap > reference

    def _split_candidates(self, st: ClusterState, round_index: int, W: np.ndarray | None):
        """(P, W, Y, choose_split's triple) of a split test: P the dense (imputed) matrix and
        W its affinity, or, above COORDINATES_ABOVE observed members, Y the coordinates of P's
        rows (P and W None). Raises DegenerateAffinity for a P or W that holds NaN or inf."""
        seed = self.seed + round_index
        P = self._dense_p(st)
        if P is None:
            if not st.P.finite():
                raise DegenerateAffinity("P holds NaN or infinite entries")
            Y = imputed_coordinates(st.P, max(self.n_max - 1, 1), seed)
            scale = st.P.scale()
            if math.sqrt(float(Y.var(axis=0).sum())) <= 1e-9 * max(scale, 1e-300):
                # every row alike: rounding noise, whose neighbour graph is arbitrary
                return None, None, Y, (1, np.zeros(st.P.n, dtype=np.int64), np.full(
                    max(self.n_max - 1, 0), np.inf))  # fmt: skip
            split = coordinates_split(
                Y, n_max=self.n_max, seed=seed, min_size=self.min_clients,
                threshold=self.db_threshold,
            )  # fmt: skip
            return None, None, Y, split
        if W is None:
            if not finite(P):
                raise DegenerateAffinity("P holds NaN or infinite entries")
            W = affinity(P, self.beta)
        split = choose_split(W, self.n_max, seed, min_size=self.min_clients,
                             threshold=self.db_threshold)  # fmt: skip
        return P, W, None, split

    def _beats_reference(
        self,
        st: ClusterState,
        round_index: int,
        best: float,
        stats: dict[str, float] | None,
        P: np.ndarray | None = None,
        Y: np.ndarray | None = None,
    ) -> bool:
        """Whether ``best`` is below ``reference_ratio`` times the median best score of
        ``reference_draws`` Gaussian references of the cluster's P (:func:`reference_score`)
        or, on the coordinates path, of its rows' coordinates (:func:`coordinates_reference`,
        which compares a subsample of at most REFERENCE_ROWS rows with references of as many);
        True without references (the paper's test)."""
        if not self.reference_draws:
            return True
        kw = dict(
            beta=self.beta,
            n_max=self.n_max,
            seed=self.seed + round_index,
            min_size=self.min_clients,
            draws=self.reference_draws,
            rng=np.random.default_rng([self.seed, 0x5C, round_index, self.split_tests]),
            pool=self.pool,
        )
        if Y is not None:
            del kw["beta"]  # the coordinates are clustered without an affinity
            best, reference = coordinates_reference(Y, **kw)
        else:
            reference = reference_score(st.P if P is None else P, **kw)
        if stats is not None:
            stats["db_reference"] = reference
        return best < self.reference_ratio * reference

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "gamma": self.gamma.copy(),
            "times_sampled": self.times_sampled.copy(),
            "split_tests": self.split_tests,
            "clusters": {cid: self._cluster_state(st) for cid, st in self.state.items()},
        }

    @staticmethod
    def _cluster_state(st: ClusterState) -> dict:
        P = {"P": st.P} if isinstance(st.P, np.ndarray) else st.P.state()
        out = {**P, "mse": st.mse, "quiet": st.quiet}
        if st.proposal is not None:  # (a file without it has no proposal pending)
            out["proposal"] = st.proposal
            out["repeats"] = st.repeats
        return out

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the members also stored them here.)"""
        self.rng.bit_generator.state = state["rng"]
        self.gamma = np.asarray(state["gamma"], dtype=np.float64).copy()
        self.times_sampled = np.asarray(state["times_sampled"], dtype=np.int64).copy()
        self.split_tests = int(state["split_tests"])
        self.state = {
            cid: ClusterState(
                P=(store_from_state(c) if "P_size" in c else np.asarray(c["P"], dtype=np.float64)),
                mse=float(c["mse"]),
                quiet=int(c["quiet"]),
                proposal=np.asarray(c["proposal"], dtype=np.int64) if "proposal" in c else None,
                repeats=int(c.get("repeats", 0)),
            )
            for cid, c in state["clusters"].items()
        }


__all__ = ["ClusterState", "FedGWC"]
