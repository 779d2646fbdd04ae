"""The mixture of M shared components that FedEM keeps (its round:
:mod:`distfl.algorithms.fedem`) and FedRC extends (its E-step:
:mod:`distfl.algorithms.fedrc`): the E-step's responsibilities, the M-step of a client's
weights, the table of weights, and :class:`Mixture`, the round, which registers under no
name (an algorithm subclasses it and names itself)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import EMDCFL_GIVES, check_cluster_count, cluster_count_setting
from distfl.algorithms.common.models_of_own import ModelsOfOwn

#: the client half's ops: the E-step before training, the mixture's evaluation, a
#: newcomer's weights
ESTEP, MIXTURE, NEWCOMER = "estep", "mixture", "newcomer_weights"
#: a newcomer's EM on its weights alone (accelerated) stops once no weight moves by more
#: than NEWCOMER_TOL, or after NEWCOMER_CYCLES cycles of three EM steps
NEWCOMER_CYCLES, NEWCOMER_TOL = 1000, 1e-10


def responsibilities(weights: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """FedEM's E-step: q [M, n] with q_im = π_m e^(−ℓ_mi) / Σ_j π_j e^(−ℓ_ji), from the
    mixture weights π [M] and the losses ℓ [M, n] of each component on each sample (the
    code's ``softmax(log π − ℓ)``). A NaN loss counts as +∞ (that component explains
    nothing of the sample); a sample no component explains (every term 0) gets the weights
    π themselves, and π = 0 everywhere gives 1/M."""
    pi = np.asarray(weights, dtype=np.float64).reshape(-1)
    ell = np.asarray(losses, dtype=np.float64)
    M = len(pi)
    if ell.ndim != 2 or ell.shape[0] != M:
        raise ValueError(f"losses must be [{M}, n], got shape {ell.shape}")
    ell = np.where(np.isnan(ell), np.inf, ell)
    with np.errstate(divide="ignore"):
        logits = np.log(np.clip(pi, 0.0, None))[:, None] - ell
    top = logits.max(axis=0)
    dead = ~np.isfinite(top)  # no component has a finite term for the sample
    shifted = np.exp(logits - np.where(dead, 0.0, top))
    q = shifted / np.where(dead, 1.0, shifted.sum(axis=0))
    if dead.any():
        fallback = pi / pi.sum() if pi.sum() > 0 else np.full(M, 1.0 / M)
        q[:, dead] = fallback[:, None]
    return q


def weight_rows(clients: np.ndarray, ids: list[str], weights: np.ndarray) -> dict:
    """The rows of a table of weights (per client and cluster): each client's weight of
    each cluster, clients in the given order, clusters in ``ids`` order."""
    M = len(ids)
    return {
        "client": np.repeat(np.asarray(clients, dtype=np.int64), M),
        "cluster": np.tile(np.array(ids, dtype=object), len(clients)),
        "weight": np.asarray(weights, dtype=np.float64).reshape(-1),
    }


def mixture_weights(q: np.ndarray) -> np.ndarray:
    """FedEM's M-step of a client's weights: π_m = mean_i q_im ([M]; 1/M without samples)."""
    q = np.asarray(q, dtype=np.float64)
    if q.shape[1] == 0:
        return np.full(q.shape[0], 1.0 / q.shape[0])
    return q.mean(axis=1)


def log_likelihood(weights: np.ndarray, losses: np.ndarray) -> float:
    """Σ_i log Σ_m π_m e^(−ℓ_mi) over the samples some component explains (a NaN loss
    counts as +∞), from π [M] and the losses ℓ [M, n]."""
    z = -np.where(np.isnan(losses), np.inf, np.asarray(losses, dtype=np.float64))
    top = z.max(axis=0)
    keep = np.isfinite(top)
    with np.errstate(divide="ignore"):
        mix = np.asarray(weights, dtype=np.float64) @ np.exp(z[:, keep] - top[keep])
        return float(np.sum(np.log(mix) + top[keep]))


def newcomer_weights(losses: np.ndarray, cycles: int = NEWCOMER_CYCLES,
                     tol: float = NEWCOMER_TOL) -> np.ndarray:  # fmt: skip
    """A newcomer's mixture weights π [M] with the components fixed: the maximum of the
    likelihood Σ_i log Σ_m π_m e^(−ℓ_mi) of its train samples (``losses`` [M, n]: each
    component's loss on each sample), by EM on π alone from π = 1/M, π ← F(π) = mean_i q_i(π)
    (:func:`responsibilities`, :func:`mixture_weights`), accelerated by SQUAREM (Varadhan
    and Roland 2008, its SqS3 step): each cycle takes two EM steps from π, extrapolates
    along them, and one EM step from there, keeping the two steps' point instead where the
    extrapolation leaves the simplex or its likelihood is the lower. It stops once no weight
    moves by more than ``tol``, or after ``cycles`` cycles. Plain EM needs thousands of
    steps where two components explain a client nearly alike."""
    losses = np.asarray(losses, dtype=np.float64)
    pi = np.full(losses.shape[0], 1.0 / losses.shape[0])

    def step(p: np.ndarray) -> np.ndarray:
        return mixture_weights(responsibilities(p, losses))

    for _ in range(cycles):
        p1 = step(pi)
        p2 = step(p1)
        r, v = p1 - pi, p2 - 2 * p1 + pi
        if float(np.max(np.abs(p2 - pi))) <= tol or not np.any(v):
            return p2
        alpha = min(-float(np.sqrt(r @ r / (v @ v))), -1.0)
        far = pi - 2 * alpha * r + alpha * alpha * v
        new = p2
        if np.all(far >= 0) and far.sum() > 0:
            candidate = step(far / far.sum())
            if log_likelihood(candidate, losses) >= log_likelihood(p2, losses):
                new = candidate
        moved = float(np.max(np.abs(new - pi)))
        pi = new
        if moved <= tol:
            break
    return pi


@dataclass(frozen=True)
class FedEMParams(api.Params):
    num_clusters: int = cluster_count_setting(
        3, "M, the mixture's components (the paper's default 3)", EMDCFL_GIVES
    )

    def check(self, config) -> None:
        check_cluster_count(self, config)


class Mixture(ModelsOfOwn):
    """FedEM's round (:mod:`distfl.algorithms.fedem` says what it does)."""

    salt = 0xFE0E
    Params = FedEMParams
    client_ops = (ESTEP, MIXTURE, NEWCOMER)
    client = "distfl.algorithms.common.mixture_client:FedEMClient"
    evaluation = MIXTURE
    membership = "largest weight"
    newcomers = (
        "its mixture weights learnt on its train split with the components "
        "fixed (EM on the weights alone), then its mixture, as every client's"
    )
    tables = (
        api.soft_weights_table(
            "π_km, the client's weight of the component after the round's E-step",
            "each trained client's mixture weights, a row per component, every round",
        ),
    )
    figures = (api.SOFT_WEIGHTS_FIGURE,)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        #: [K, M] every client's mixture weights π_k
        M = len(self.ids)
        self.pi = np.full((self.num_clients, M), 1.0 / M)

    @classmethod
    def state_bytes(cls, params, *, num_clients: int, **sizes) -> int:
        """π: M float64 values a client."""
        return 8 * num_clients * max(int(params.num_clusters), 1)

    def plan(self, round_index: int) -> api.RoundPlan:
        clients = self.draw(trainings=len(self.ids)).tolist()  # each trains every model
        every = dict.fromkeys(self.ids, 1.0)
        return api.RoundPlan(
            round=round_index,
            train={int(k): dict(every) for k in clients},
            prepare=ESTEP,
            prepare_width=len(self.ids),
            client_state={int(k): self.pi[k].copy() for k in clients},
        )

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """Keep each trained client's new weights (its E-step's M-step) and put it in the
        tree under its largest."""
        clients = np.array(sorted(plan.train), dtype=np.int64)
        rows = np.asarray(reports.rows, dtype=np.float64)
        if rows.shape != (len(clients), len(self.ids)):
            raise ValueError(
                f"round {round_index}: mixture weights of shape {rows.shape}, expected "
                f"{(len(clients), len(self.ids))}"
            )
        self.pi[clients] = rows
        self.tree.reassign(clients, [self.ids[j] for j in np.argmax(rows, axis=1)])
        return api.RoundUpdate(rows={"weights": weight_rows(clients, self.ids, rows)})

    def newcomer_probe(self, clients: np.ndarray) -> api.ProbeRequest:
        """Each newcomer's mixture weights under the components (:func:`newcomer_weights`)."""
        return api.ProbeRequest(clients=np.asarray(clients, dtype=np.int64),
                                clusters=list(self.ids), op=NEWCOMER)  # fmt: skip

    def place_newcomers(self, clients, groups, rows) -> api.NewcomerModels:
        """Each newcomer under its largest weight (ties: the first component), its weights
        the row of its mixture's evaluation."""
        pi = np.asarray(rows, dtype=np.float64).reshape(len(clients), len(self.ids))
        return api.NewcomerModels([self.ids[j] for j in np.argmax(pi, axis=1)], rows=pi)

    def client_rows(self, clients: np.ndarray) -> np.ndarray:
        """The clients' mixture weights, for the mixture's evaluation."""
        return self.pi[np.asarray(clients, dtype=np.int64)]

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "pi": self.pi.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        pi = np.asarray(state["pi"], dtype=np.float64)
        if pi.shape != self.pi.shape:
            raise ValueError(f"FedEM's stored weights have shape {pi.shape}, not {self.pi.shape}")
        self.pi = pi.copy()


__all__ = [
    "ESTEP",
    "MIXTURE",
    "NEWCOMER",
    "FedEMParams",
    "Mixture",
    "log_likelihood",
    "mixture_weights",
    "newcomer_weights",
    "responsibilities",
    "weight_rows",
]
