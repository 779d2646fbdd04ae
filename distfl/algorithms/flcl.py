"""FLCL: clustering-based federated learning by regret minimisation (Sinha, Kibilda, Saad,
"On the Tradeoff Between Heterogeneity and Communication Complexity in Federated Learning").

Every cluster keeps a row-stochastic preference matrix Λ over its members: Λ(i, j) is how
much client i wants to combine with client j. Each round every member of every cluster
trains from the cluster's model θ_a and returns its model θ_i and two losses. From them
the server estimates the cross losses l̂_i(θ_j) (Algorithm 1, RegEXT), multiplies W(i, j)
by 1 − η l̂_i(θ_j) (multiplicative weights) and row-normalises W into Λ. The combination
vector λ is the stationary distribution of Λ (λΛ = λ, eq. 19, the swap-regret reduction of
section III-B) and the cluster's model becomes θ_a = Σ λ_i θ_i (eq. 9), not the
sample-weighted mean. Every ``period`` rounds (the K FL rounds of one clustering step of
Algorithm 2) a cluster compares its members' external regret over the period (eq. 12,
l_i(θ_a^k) − l_i(θ_i^k) summed over the K rounds) with the bound δ f(Kt); while the regret
stays at or above it, DecompCL (Algorithm 3) expels one more client into the expelled set
E, and once it is below it the cluster splits into the clients that remain and E.

Where this follows the paper and where it has to choose:

- Losses. Clients report the loss of every local SGD step: l_i(θ_a) is the loss of the
  start model on the first minibatch (``losses[:, 0]``) and l_i(θ_i) the loss of the last
  step (``losses[:, -1]``, on the last minibatch, before the last update); both are
  minibatch estimates of the expected losses of the paper. ``train.local_steps`` must be
  at least 2, or the two coincide.
- Participation. The paper replaces client sampling by clustering: every member of every
  cluster trains every round and returns its model (``server.clients_per_round`` is not
  used).
- Initial weights. Algorithm 2 writes W = I, Λ = I/N at every clustering step; under
  multiplicative updates zero weights stay zero, so Λ would never leave the identity. W
  starts uniform here (Λ = 1/N), the usual start of multiplicative weights, and is carried
  across clustering steps; a decomposition gives each child the sub-block of its members,
  row-normalised (Algorithm 3's Λ^{ν(t+1)} = Λ^{ν(t)} restricted).
- Keeping weights positive. Losses are non-negative and the paper lowers W(i, j) only where
  l̂_i(θ_j) ≥ 0, so a negative linear estimate counts as 0; the factor 1 − η l̂ is clipped
  below at :data:`FACTOR_FLOOR`, so no weight is zeroed or made negative however large
  η l̂ is. After normalisation every entry of Λ is raised to at least
  :data:`LAMBDA_FLOOR` (a tiny uniform exploration), which keeps the chain irreducible, its
  stationary distribution unique (Perron–Frobenius) and the weights from underflowing.
- λ. Eq. 19 and section III-B make λ the invariant vector of Λ; Algorithm 2's line 9 takes
  one power-iteration step λ ← λΛ per round towards it. The exact invariant vector is used
  (state reduction, by blocks of states above 512 members: :func:`stationary_distribution`).
- The gradient estimate follows Algorithm 1 as written,
  ∇̂l_i = (l_i(θ_i) − l_i(θ_a)) / ‖θ_i − θ_a^{k−1}‖ · (θ_i − θ_a^{k−1}): the loss change
  times the unit direction of the local update. It needs the model the client started
  from, θ_a^{k−1}, which the algorithm keeps (the model it returned the round before). In a
  run's first round there is none: Λ stays uniform and θ_a is the plain mean.
- f, δ and R. The paper leaves f open; section II-B defines the desired communication
  complexity as a rate O(f(k)) of the loss gap, and f(n) = 1/√n (the rate of subgradient
  methods on convex losses) is used, with Kt the rounds run so far: the bound tightens
  with time, so a cluster whose members keep losing by combining is decomposed. The paper
  sums the regret over the members; here R is the mean over the members that remain and
  over the K rounds, so that one δ serves clusters of any size and any period. A
  cluster's first period is a warm-up without a check: its model is new (random at the
  start, or a child leaving its parent's model) and every member's regret is then large.
- DecompCL. Algorithm 2's loop body ends in ``return``: one DecompCL per clustering step.
  Each check at or above the bound expels one client w (Algorithm 3: λ_w = 0, E ← E ∪ w);
  w trains from the cluster's model but no longer counts in it, and the next period
  measures the regret of the clients that remain under their own combination. At the
  first check below the bound (or when one client remains) the cluster splits into
  ``<id>.0``, the clients that remain, and ``<id>.1``, the set E: the accumulated E of
  Algorithm 3 as one child, which fits the hierarchical ids (splits only, never merges).
  Each child runs RegEXT on its own and may decompose again (the "hierarchical
  decomposition" of Algorithm 3's title). ``expel = "preference"`` (the default) takes
  w = the client the others least prefer, argmin_j Σ_{i≠j} Λ(i, j) (section IV-B's "least
  preference from the other clients j ≠ w"; Algorithm 3's line 1 includes i = w, but then
  every column of a Λ settled into blocks sums to about 1 and the rule cannot tell a small
  group from a large one). ``expel = "regret"`` takes the client with the largest external
  regret over the period (section IV-A: "removing the clients ... with high external
  regret"); on the label-flip experiment it is the more robust of the two.
- A child's first model. The runtime copies the parent's model to both children, so a
  child trains its first round from the parent's θ_a (E's members have done so since
  their expulsion) and has its own Σ λ_i θ_i from that round on.
- Defaults (η = 0.9, δ = 3, K = 5, ``preference``) were measured on the paper's
  label-flip experiment (20 ``gaussian`` clients, 6 of them label-flipped, a linear model,
  the hinge loss, 100 rounds; tests/integration/test_flcl.py): the final test loss beats
  FedAvg's for seeds 0–7 (0.10–0.23 against 0.53–0.85), and for seeds 0–7 in the
  neighbourhood δ ∈ [2.5, 4], K ∈ [4, 6]; η = 0.8 or 0.95 loses one seed of eight, while
  ``expel = "regret"`` wins all eight throughout. Where a cluster does not decompose, the
  combination by λ is no better than the sample-weighted mean: on a federation without
  flipped clients FLCL's loss is above FedAvg's (0.13–0.35 against 0.08–0.19).

The pure math is in module-level functions; :class:`FLCL` holds the per-cluster state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.errors import ConfigError
from distfl.hierarchy import Split

#: The smallest multiplicative factor 1 − η l̂ applied to a weight in one round.
FACTOR_FLOOR = 1e-3

#: The smallest entry of a preference matrix Λ after normalisation.
LAMBDA_FLOOR = 1e-12

#: Λ of up to this many members is reduced one state at a time (:func:`stationary_distribution`);
#: a larger one by blocks of STATE_BLOCK states
SEQUENTIAL_STATES = 512
STATE_BLOCK = 64

#: DecompCL's choice of the client to expel: the least preferred by the others (Algorithm 3)
#: or the one with the largest external regret over the period (section IV-A).
EXPEL_RULES = ("preference", "regret")

# -- pure functions --------------------------------------------------------------------


def estimated_cross_losses(
    loss_own: np.ndarray, loss_agg: np.ndarray, models: np.ndarray, prev_agg: np.ndarray
) -> np.ndarray:
    """[n, n] estimated losses l̂_i(θ_j) of client i under client j's model (Algorithm 1).

    ``loss_own[i]`` is l_i(θ_i), the loss of client i's trained model (the last local
    step's minibatch loss, ``losses[:, -1]``); ``loss_agg[i]`` is l_i(θ_a), the loss of the
    model it started from (the first step's minibatch loss, ``losses[:, 0]``); ``models``
    [n, P] are the trained models θ_i and ``prev_agg`` [P] the start model θ_a^{k−1}. With
    d_i = θ_i − θ_a^{k−1} and ∇̂l_i = (l_i(θ_i) − l_i(θ_a)) / ‖d_i‖ · d_i,
    l̂_i(θ_j) = l_i(θ_i) + ⟨∇̂l_i, θ_j − θ_i⟩ = l_i(θ_i) + ⟨∇̂l_i, d_j − d_i⟩. A client that
    did not move (d_i = 0) has no gradient estimate: its row is l_i(θ_i) throughout."""
    own = np.asarray(loss_own, dtype=np.float64)
    agg = np.asarray(loss_agg, dtype=np.float64)
    D = np.asarray(models, dtype=np.float64) - np.asarray(prev_agg, dtype=np.float64)[None, :]
    if D.ndim != 2 or own.shape != (D.shape[0],) or agg.shape != own.shape:
        raise ValueError(
            f"shapes: loss_own {own.shape}, loss_agg {agg.shape}, models {np.shape(models)}, "
            f"prev_agg {np.shape(prev_agg)}; expected [n], [n], [n, P], [P]"
        )
    G = D @ D.T  # G[i, j] = <d_i, d_j>
    norm = np.sqrt(np.maximum(np.diag(G), 0.0))
    coef = np.divide(own - agg, norm, out=np.zeros_like(own), where=norm > 0)
    return own[:, None] + coef[:, None] * (G - np.diag(G)[:, None])


def multiplicative_weights(
    W: np.ndarray, cross_losses: np.ndarray, eta: float, floor: float = FACTOR_FLOOR
) -> np.ndarray:
    """W(i, j) ← W(i, j) (1 − η l̂_i(θ_j)) (Algorithm 1, line 6); a new array.

    Losses are non-negative and the paper lowers a weight only where l̂ ≥ 0, so a negative
    estimate counts as 0 (factor 1); the factor is clipped below at ``floor`` > 0, so every
    weight stays positive however large η l̂ is."""
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"floor = {floor!r}: must be in (0, 1]")
    factor = np.maximum(1.0 - eta * np.maximum(np.asarray(cross_losses, np.float64), 0.0), floor)
    return np.asarray(W, dtype=np.float64) * factor


def row_normalise(W: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Λ(i, j) = W(i, j) / Σ_j W(i, j) (Algorithm 1, line 7). With ``floor`` > 0 every entry
    is then raised to at least ``floor`` and the rows normalised again."""
    W = np.asarray(W, dtype=np.float64)
    L = W / W.sum(axis=1, keepdims=True)
    if floor > 0.0:
        L = np.maximum(L, floor)
        L = L / L.sum(axis=1, keepdims=True)
    return L


def stationary_distribution(Lambda: np.ndarray, *, block: int | None = None) -> np.ndarray:
    """λ with λΛ = λ, Σ λ = 1 (eq. 19) of the row-stochastic Λ.

    Computed by state reduction (the Grassmann–Taksar–Heyman algorithm), which uses only
    the off-diagonal entries and never subtracts, so it stays accurate when the chain is
    nearly decomposable (preferences that have settled into blocks, with cross entries
    down at :data:`LAMBDA_FLOOR`). A chain whose reduction meets a state that cannot reach
    the others is solved as the least-squares solution of [Λᵀ − I; 1ᵀ] λ = [0; 1].

    Up to :data:`SEQUENTIAL_STATES` states, one state is reduced at a time (n rank-one
    updates of the leading block: O(n³) in n Python steps, 28 s at n = 2,714); above, the
    states are reduced ``block`` (:data:`STATE_BLOCK`) at a time
    (:func:`_reduce_blocked`): the same sums of non-negative terms in another order, so as
    accurate, in one matrix product per block (about 1 s at n = 2,714)."""
    L = np.asarray(Lambda, dtype=np.float64)
    if L.ndim != 2 or L.shape[0] != L.shape[1] or L.shape[0] == 0:
        raise ValueError(f"Lambda must be a non-empty square matrix, not shape {L.shape}")
    n = L.shape[0]
    if block is None:
        block = n if n <= SEQUENTIAL_STATES else STATE_BLOCK
    A = _reduce_states(L) if block >= n else _reduce_blocked(L, block)
    if A is None:
        return _stationary_lstsq(L)
    lam = np.zeros(n)
    lam[0] = 1.0
    for k in range(1, n):
        lam[k] = lam[:k] @ A[:k, k]
    return lam / lam.sum()


def _reduce_states(L: np.ndarray) -> np.ndarray | None:
    """GTH's reduction of states n−1, ..., 1, one at a time: A[:k, k] the scaled column of
    state k; None if a state cannot reach the ones before it."""
    n = L.shape[0]
    A = L.copy()
    product = np.empty_like(A)  # the rank-one update, written in place of np.outer's array
    for k in range(n - 1, 0, -1):
        s = A[k, :k].sum()
        if not s > 0.0:
            return None
        A[:k, k] /= s
        np.multiply.outer(A[:k, k], A[k, :k], out=product[:k, :k])
        A[:k, :k] += product[:k, :k]
    return A


def _reduce_blocked(L: np.ndarray, block: int) -> np.ndarray | None:
    """:func:`_reduce_states` by blocks of ``block`` states [m, e), from the last: within the
    block, one state at a time, on copies of the block's rows left of it (R = A[m:e, :m])
    and of its columns (C = A[:e, m:e]ᵀ); then the leading block takes all of the block's
    rank-one updates at once, A[:m, :m] += A[:m, m:e] A[m:e, :m]. Entry for entry this is
    the sequential reduction's sum, of the same non-negative terms in another order."""
    n = L.shape[0]
    A = L.copy()
    e = n
    while e > 1:
        m = max(1, e - block)
        R = A[m:e, :m].copy()  # R[k - m, j] = A[k, j], j < m
        C = A[:e, m:e].T.copy()  # C[k - m, i] = A[i, k]
        for k in range(e - 1, m - 1, -1):
            r = k - m
            s = R[r].sum() + C[:r, k].sum()  # A[k, :k]: left of the block, then within it
            if not s > 0.0:
                return None
            C[r, :k] /= s
            C[:r, :k] += np.multiply.outer(C[:r, k], C[r, :k])
            R[:r] += np.multiply.outer(C[r, m:k], R[r])
        A[m:e, :m] = R
        A[:e, m:e] = C.T
        A[:m, :m] += C[:, :m].T @ R
        e = m
    return A


def _stationary_lstsq(L: np.ndarray) -> np.ndarray:
    n = L.shape[0]
    A = np.vstack([L.T - np.eye(n), np.ones((1, n))])
    b = np.zeros(n + 1)
    b[-1] = 1.0
    lam = np.maximum(np.linalg.lstsq(A, b, rcond=None)[0], 0.0)
    return lam / lam.sum()


def external_regret(loss_agg: np.ndarray, loss_own: np.ndarray) -> np.ndarray:
    """[n] one round's external regret of each client (eq. 12's summand):
    l_i(θ_a) − l_i(θ_i), what combining cost client i against keeping its own model."""
    return np.asarray(loss_agg, dtype=np.float64) - np.asarray(loss_own, dtype=np.float64)


def least_preferred(Lambda: np.ndarray, *, include_self: bool = False) -> int:
    """DecompCL's choice: the client w the others least want to combine with,
    w = argmin_j Σ_{i ≠ j} Λ(i, j) (section IV-B: "the least preference Λ_{j,w} from the
    other clients j ≠ w"); the first such on ties. ``include_self`` adds the diagonal, as
    Algorithm 3's line 1 writes the sum: then every column of a Λ that has settled into
    blocks sums to about 1 and the rule no longer tells a small group from a large one."""
    L = np.asarray(Lambda, dtype=np.float64)
    sums = L.sum(axis=0) if include_self else L.sum(axis=0) - np.diag(L)
    return int(np.argmin(sums))


def regret_bound(delta: float, rounds: int) -> float:
    """δ f(Kt) with f(n) = 1/√n, the O(1/√k) rate of (sub)gradient methods on convex losses
    (section II-B's desired rate O(f(k)) of the loss gap); ``rounds`` is Kt, the rounds run
    so far."""
    return delta / math.sqrt(rounds)


def combination(Lambda: np.ndarray, active: np.ndarray) -> np.ndarray:
    """[n] the combination vector when only the ``active`` members (a boolean mask) count:
    the stationary distribution of Λ restricted to them (rows renormalised), 0 for the
    others (Algorithm 3: λ_w = 0 for an expelled client w)."""
    active = np.asarray(active, dtype=bool)
    idx = np.flatnonzero(active)
    lam = np.zeros(len(active))
    lam[idx] = stationary_distribution(row_normalise(np.asarray(Lambda)[np.ix_(idx, idx)]))
    return lam


# -- the algorithm -------------------------------------------------------------------


@dataclass(frozen=True)
class FLCLParams(api.Params):
    """FLCL's keys (``flcl_eta`` etc. in the former flat section)."""

    eta: float = api.setting(0.9, "(0, 1)", "η of the multiplicative weights")
    delta: float = api.setting(3.0, "> 0", "δ of the regret bound δ/√(rounds so far)")
    period: int = api.setting(
        5,
        "int ≥ 1",
        "rounds per clustering step (the K of Algorithm 2); needs `train.local_steps` ≥ 2",
    )
    expel: str = api.setting("preference", "`preference`, `regret`", "which client DecompCL expels")

    aliases = {"flcl_eta": "eta", "flcl_delta": "delta", "flcl_period": "period",
               "flcl_expel": "expel"}  # fmt: skip
    choices = {"expel": EXPEL_RULES}

    def check(self, config) -> None:
        api.require(0.0 < self.eta < 1.0, "eta", self.eta, "in (0, 1) (RegEXT's η)")
        api.require(self.delta > 0, "delta", self.delta, "positive")
        api.require(self.period >= 1, "period", self.period, "at least 1 round")
        if config.train.local_steps < 2:
            raise ConfigError(
                "train.local_steps = 1: FLCL needs at least 2 (the first and last step's losses)"
            )


@dataclass
class ClusterState:
    """FLCL's own state of one cluster (its members are the tree's)."""

    Lambda: np.ndarray  # [n, n] row-stochastic preferences
    regret: np.ndarray  # [n] external regret of each member summed since the last check
    expelled_at: np.ndarray  # [n] round a member was expelled into E (λ = 0); -1: remains
    age: int = 0  # rounds since the last check (or since the cluster was created)
    warm: bool = False  # the first period (the warm-up) is over
    prev: np.ndarray | None = None  # [P] float32: the model the members start from


@api.register
class FLCL(api.ClusteringAlgorithm):
    name = "flcl"
    models_from_clients = "RegEXT combines the clients' individual models (θ_a = Σ λ_i θ_i)"
    Params = FLCLParams
    statistics = (
        api.Statistic("regret", "the cluster's mean regret of its members' preferences"),
        api.Statistic("bound", "the regret bound the cluster's split test compares it with"),
    )
    #: Λ (float64) of every cluster: n² entries per cluster of n members, K² at most
    pair_bytes = 8
    #: at its peak in a round: Λ, the estimated cross losses and the Gram matrix they come
    #: from, the updated weights and their normalisation, and the reduction's copy of Λ
    #: (about 40 bytes per pair measured at n = 1,000), and a split's copy of Λ
    working_bytes = 48
    #: every member trains and returns its model every round: all K at the root
    every_member_trains = True
    #: with every member planned, nothing is drawn from the algorithm's seed
    ignored_keys = {"run.sampling_seed": "it draws nothing: every member of a cluster "
                    "trains every round"}  # fmt: skip

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        eta, delta, period, expel = self.eta, self.delta, self.period, self.expel
        if not 0.0 < eta < 1.0:
            raise ValueError(f"eta = {eta!r}: must be in (0, 1) (Algorithm 1's decay parameter)")
        if not delta > 0.0:
            raise ValueError(f"delta = {delta!r}: must be positive")
        if period < 1:
            raise ValueError(f"period = {period!r}: must be at least 1 round")
        if expel not in EXPEL_RULES:
            raise ValueError(f"expel = {expel!r}: allowed values are {', '.join(EXPEL_RULES)}")
        self.state: dict[str, ClusterState] = {"0": _new_cluster(self.num_clients)}
        self.decompositions = 0

    def plan(self, round_index: int) -> api.RoundPlan:
        return self.every_member_plan(round_index)

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """RegEXT and the combination (:meth:`_combine`, the new cluster models), then the
        regret check (:meth:`_check`, the decompositions); ``stats``: the mean regret and
        the bound of each cluster checked this round."""
        models = self._combine(reports)
        splits, stats = self._check(round_index, reports)
        return api.RoundUpdate(models=models, splits=splits, stats=stats)

    def _combine(self, reports: api.ClientReports) -> dict[str, np.ndarray]:
        """RegEXT on each cluster's reports (Algorithm 1), then θ_a = Σ λ_i θ_i with λ the
        stationary distribution of the updated Λ over the members not expelled."""
        if reports.losses.shape[1] < 2:
            raise ValueError(
                "FLCL needs train.local_steps >= 2: l_i(θ_a) is the first local step's loss "
                "and l_i(θ_i) the last one's"
            )
        if reports.models is None or len(reports.models) != len(reports.clients):
            raise ValueError("FLCL needs the trained model of every client (return_models)")
        row_of = {int(k): i for i, k in enumerate(reports.clients)}
        out: dict[str, np.ndarray] = {}
        for cid, st in sorted(self.state.items()):
            # the members that reported (every one, as the paper runs it, unless
            # [participation] lost some): the rows of Λ of the others stay, and the
            # combination is over those that reported
            here, rows = _reported(self.tree.members(cid), row_of)
            counted = here & (st.expelled_at < 0)
            if not counted.any():
                continue  # no model this round: the cluster keeps its own
            idx = np.flatnonzero(here)
            thetas = reports.models[rows]
            if st.prev is not None:
                cross = estimated_cross_losses(
                    reports.losses[rows, -1], reports.losses[rows, 0], thetas, st.prev
                )
                W = np.array(st.Lambda, dtype=np.float64)
                block = np.ix_(idx, idx)
                W[block] = multiplicative_weights(W[block], cross, self.eta)
                W[idx] = row_normalise(W[idx], LAMBDA_FLOOR)
                st.Lambda = W
            lam = combination(st.Lambda, counted)
            st.prev = (lam[idx] @ thetas.astype(np.float64)).astype(np.float32)
            out[cid] = st.prev
        return out

    def _check(
        self, round_index: int, reports: api.ClientReports
    ) -> tuple[list[Split], dict[str, dict[str, float]]]:
        """Add the round's external regrets; at the end of each period after a cluster's
        first, compare the remaining members' mean regret per round with δ/√(rounds so
        far): at or above it DecompCL expels one more client into E, below it a cluster
        with a non-empty E splits into (remaining, E)."""
        row_of = {int(k): i for i, k in enumerate(reports.clients)}
        splits: list[Split] = []
        stats: dict[str, dict[str, float]] = {}
        bound = regret_bound(self.delta, round_index)
        for cid in sorted(self.state):
            st = self.state[cid]
            here, rows = _reported(self.tree.members(cid), row_of)
            regret = np.zeros(len(here))
            regret[here] = external_regret(reports.losses[rows, 0], reports.losses[rows, -1])
            st.regret = st.regret + regret
            st.age += 1
            if st.age < self.period:
                continue
            if not st.warm:  # the first period: a new model moving away from its start
                st.warm = True
                _restart_period(st)
                continue
            active = np.flatnonzero(st.expelled_at < 0)
            mean = float(st.regret[active].mean() / st.age)
            stats[cid] = {"regret": mean, "bound": bound}
            if mean >= bound and len(active) > 1:
                if self.expel == "preference":
                    w = least_preferred(row_normalise(st.Lambda[np.ix_(active, active)]))
                else:
                    w = int(np.argmax(st.regret[active]))
                st.expelled_at[active[w]] = round_index
                if len(active) > 2:
                    _restart_period(st)
                    continue
            if (st.expelled_at >= 0).any():
                splits.append(self._split(cid, st, round_index, mean, bound))
            else:
                _restart_period(st)
        for split in splits:
            del self.state[split.parent]
        return splits, stats

    def _split(self, cid: str, st: ClusterState, round_index: int, mean: float, bound: float):
        """Children ``<cid>.0`` (the clients that remain) and ``<cid>.1`` (the expelled set
        E), each with its sub-block of Λ and the model the parent's members start from."""
        self.decompositions += 1
        expelled = st.expelled_at >= 0
        members = self.tree.members(cid)
        children = {}
        for c, pos in enumerate((np.flatnonzero(~expelled), np.flatnonzero(expelled))):
            children[f"{cid}.{c}"] = members[pos]
            self.state[f"{cid}.{c}"] = _new_cluster(
                len(pos), st.Lambda[np.ix_(pos, pos)], prev=st.prev
            )
        info = {
            "labels": expelled.astype(np.int64),
            "expelled_at": st.expelled_at.copy(),
            "preferences": st.Lambda.copy(),
            "combination": combination(st.Lambda, ~expelled),
            "regret": st.regret.copy(),
            "mean_regret": np.array([mean]),
            "regret_bound": np.array([bound]),
        }
        return self.tree.split(cid, children, round_index, info)

    def state_dict(self) -> dict:
        return {
            "decompositions": self.decompositions,
            "clusters": {
                cid: {
                    "Lambda": st.Lambda,
                    "regret": st.regret,
                    "expelled_at": st.expelled_at,
                    "age": st.age,
                    "warm": st.warm,
                    "has_prev": st.prev is not None,
                    "prev": st.prev if st.prev is not None else np.zeros(1, dtype=np.float32),
                }
                for cid, st in self.state.items()
            },
        }

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the members also stored them here.)"""
        self.decompositions = int(state["decompositions"])
        self.state = {
            cid: ClusterState(
                Lambda=np.array(c["Lambda"], dtype=np.float64),
                regret=np.array(c["regret"], dtype=np.float64),
                expelled_at=np.array(c["expelled_at"], dtype=np.int64),
                age=int(c["age"]),
                warm=bool(c["warm"]),
                prev=np.array(c["prev"], dtype=np.float32) if c["has_prev"] else None,
            )
            for cid, c in state["clusters"].items()
        }


def _reported(members: np.ndarray, row_of: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(whether each member reported this round, the report rows of those that did)."""
    here = np.array([int(k) in row_of for k in members], dtype=bool)
    rows = np.array([row_of[int(k)] for k in members[here]], dtype=np.int64)
    return here, rows


def _new_cluster(
    n: int, Lambda: np.ndarray | None = None, prev: np.ndarray | None = None
) -> ClusterState:
    """A cluster of n members with uniform preferences, or the given ones row-normalised."""
    if Lambda is None:
        Lambda = np.full((n, n), 1.0 / n)
    return ClusterState(
        Lambda=row_normalise(Lambda, LAMBDA_FLOOR),
        regret=np.zeros(n),
        expelled_at=np.full(n, -1, dtype=np.int64),
        prev=prev,
    )


def _restart_period(st: ClusterState) -> None:
    st.regret = np.zeros(len(st.regret))
    st.age = 0


__all__ = [
    "EXPEL_RULES",
    "FACTOR_FLOOR",
    "FLCL",
    "FLCLParams",
    "LAMBDA_FLOOR",
    "combination",
    "estimated_cross_losses",
    "external_regret",
    "least_preferred",
    "multiplicative_weights",
    "regret_bound",
    "row_normalise",
    "stationary_distribution",
]
