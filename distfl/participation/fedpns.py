"""FedPNS (Wu and Wang, "Node Selection Toward Faster Convergence for Federated Learning on
Non-IID Data", IEEE TNSE 2022): after a round, the optimal aggregation drops from the cohort
the clients whose gradients pull against the others', and each client dropped ("labeled")
loses selection probability to the clients not labeled, so that the next cohorts, drawn from
these probabilities, hold fewer of them. What follows is what the public code does (its
``Feddel``, ``node_deleting``, ``get_relation`` and ``probabilistic_selection``).

- :func:`optimal_aggregation`: the expectation of a set S of gradients is
  ``E(S) = sum_{i in S} <g_i, mean_S(g)>``; while more than ``min_kept`` remain, the client
  whose removal raises E the most is removed, if its removal raises E at all.
- :class:`PnsProbabilities`: every client's selection probability, initially 1/K; a labeled
  client i loses ``p_i * min((ratio_i + beta)^alpha, 1)`` (ratio_i: the times it was labeled
  over the times it was selected), and the total lost is spread equally over every client
  not labeled that round; the next cohort is drawn from the probabilities without
  replacement. It holds O(clients ever labeled), not O(K): populations reach 10⁷ clients.

numpy only: this runs on the server.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["expectation", "expectations_without_each", "optimal_aggregation", "PnsProbabilities"]

#: the code's defaults: alpha is its ``--prob_ratio`` (2.0), beta its constant 0.7
ALPHA = 2.0
BETA = 0.7


def expectation(grads: np.ndarray) -> float:
    """E(S) of the rows of ``grads`` by its definition, ``sum_i <g_i, mean(g)>`` (0 for no
    rows)."""
    grads = np.asarray(grads, dtype=np.float64)
    if grads.shape[0] == 0:
        return 0.0
    return float(np.sum(grads @ grads.mean(axis=0)))


def expectations_without_each(gram: np.ndarray, members: np.ndarray) -> np.ndarray:
    """E(S∖{i}) for every i of S (``members``, a boolean mask over the rows of the Gram
    matrix ``gram = g gᵀ``, with at least two members) at once, from
    ``E(S∖{i}) = (sum_S G - 2 sum_{j in S} G_ij + G_ii) / (|S| - 1)``; -inf where i is not in
    S."""
    s = int(np.count_nonzero(members))
    if s < 2:
        raise ValueError(f"S needs at least two members, has {s}")
    mask = members.astype(np.float64)
    row = gram @ mask  # sum_{j in S} G_ij, for every i
    total = float(mask @ row)  # sum_{i, j in S} G_ij
    without = (total - 2.0 * row + np.diagonal(gram)) / (s - 1)
    return np.where(members, without, -np.inf)


def optimal_aggregation(grads: np.ndarray, *, min_kept: int) -> tuple[np.ndarray, list[int]]:
    """The code's optimal aggregation (``Feddel``) of the round's cohort, one row of
    ``grads`` (float64 [n, P]) per client: ``g_i = (θ_global - θ_i) / (n_i E lr / B)``,
    scaled by the caller. Returns the positions kept (ascending, int64) and the positions
    labeled, in the order they were removed.

    S starts as the whole cohort; while ``|S| > min_kept`` (the code keeps 8 of its 10:
    ``while len(w_locals) > 8``): the key is the argmax over i in S of E(S∖{i}) (ties: the
    lowest position); if ``E(S∖{key}) <= E(S)`` the removals stop, otherwise the key is
    labeled and removed, and E(S) becomes E(S∖{key}) (the code carries it over, as here).
    E(S) of the whole cohort is ``sum_{i,j} G_ij / n`` from the Gram matrix ``G = g gᵀ``,
    and every E(S∖{i}) comes from it (:func:`expectations_without_each`).

    Left out from the code: its check, for each key, of the validation loss of the aggregate
    with and without the key on test data held by the server (a key whose removal raises
    that loss is labeled but kept, and the removals stop); distfl's server holds no data.
    The code also rounds each inner product to 2 decimals and each E to 3; here E is exact
    float64.
    """
    grads = np.asarray(grads, dtype=np.float64)
    if grads.ndim != 2:
        raise ValueError(f"grads must be [n, P], got shape {grads.shape}")
    if not np.all(np.isfinite(grads)):
        raise ValueError("grads must be finite")
    if int(min_kept) != min_kept or min_kept < 1:
        raise ValueError(f"min_kept must be an integer of at least 1, got {min_kept}")
    n = grads.shape[0]
    members = np.ones(n, dtype=bool)
    labeled: list[int] = []
    if n > min_kept:
        gram = grads @ grads.T
        e_s = float(gram.sum()) / n
        while n - len(labeled) > min_kept:
            without = expectations_without_each(gram, members)
            key = int(np.argmax(without))  # the first of equal maxima: the lowest position
            if without[key] <= e_s:
                break
            labeled.append(key)
            members[key] = False
            e_s = float(without[key])
    return np.flatnonzero(members).astype(np.int64), labeled


def _ids(ids, num_clients: int) -> np.ndarray:
    """``ids`` as an int64 vector of clients of the population, checked."""
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"client ids must be a vector, got shape {ids.shape}")
    if ids.size == 0:
        return ids.astype(np.int64)
    if ids.dtype.kind not in "iu":
        raise ValueError(f"client ids must be integers, got {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.min() < 0 or ids.max() >= num_clients:
        raise ValueError(f"client ids must be in [0, {num_clients})")
    return ids


class PnsProbabilities:
    """FedPNS's selection probabilities over ``num_clients`` clients, the code's
    ``probabilistic_selection``, kept lazily: ``p_k = shift + q_k`` with ``q_k = 0`` for
    every client never labeled, so a round costs O(cohort + clients ever labeled), never
    O(K).

    ``shift`` starts at 1/K and each round's spread is added to it. For the clients ever
    labeled, their p itself is kept (``q_k = p_k - shift``) and each spread is added to it,
    as the code adds it to its array of K probabilities: every probability is the code's to
    the last bit (a q held apart from the shift would differ by roundings, and a penalty
    with ``(ratio + beta)^alpha`` near 1 magnifies those). q stays at most 0 (a labeled
    client loses mass and gets no share of that round's spread), so ``p_k <= shift`` for
    every client, which :meth:`draw`'s rejection uses.

    The counters of the times each client was selected and labeled are kept for the
    clients ever counted only.
    """

    def __init__(self, num_clients: int):
        if int(num_clients) != num_clients or num_clients < 1:
            raise ValueError(f"num_clients must be an integer of at least 1, got {num_clients}")
        self.num_clients = int(num_clients)
        self._shift = 1.0 / self.num_clients
        self._ids = np.zeros(0, dtype=np.int64)  # the clients ever labeled, ascending
        self._p = np.zeros(0)  # their probabilities
        self._selected: dict[int, int] = {}
        self._labeled: dict[int, int] = {}

    @property
    def shift(self) -> float:
        """The probability of every client never labeled."""
        return self._shift

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``ids`` were ever labeled (a mask) and their places in ``_ids``."""
        pos = np.searchsorted(self._ids, ids)
        hit = pos < self._ids.size
        hit[hit] = self._ids[pos[hit]] == ids[hit]
        return hit, pos[hit]

    def prob(self, ids) -> np.ndarray:
        """The selection probabilities (float64) of the clients ``ids``."""
        ids = _ids(ids, self.num_clients)
        p = np.full(ids.shape, self._shift)
        if self._ids.size and ids.size:
            hit, pos = self._find(ids)
            p[hit] = self._p[pos]
        return p

    def penalise(self, labeled_ids, ratios, *, alpha: float = ALPHA, beta: float = BETA) -> None:
        """One round's update for the clients ``labeled_ids`` (distinct), ``ratios`` theirs
        (times labeled / times selected, this round's included, as the code counts them):
        ``change_i = p_i * min((ratio_i + beta)^alpha, 1)``, ``p_i -= change_i``, and the
        total of the changes (summed in the order given, as the code does) spread equally
        over the ``K - len(labeled_ids)`` clients not labeled."""
        ids = _ids(labeled_ids, self.num_clients)
        ratios = np.asarray(ratios, dtype=np.float64)
        if ratios.shape != ids.shape:
            raise ValueError(f"ratios must match labeled_ids: {ratios.shape} vs {ids.shape}")
        if not np.all(np.isfinite(ratios) & (ratios >= 0.0)):
            raise ValueError("ratios must be finite and at least 0")
        if np.unique(ids).size != ids.size:
            raise ValueError("labeled_ids must be distinct")
        if ids.size == 0:
            return
        rest = self.num_clients - ids.size
        if rest == 0:
            raise ValueError("every client is labeled: none is left to take the mass")
        # on Python floats, as the code (numpy's vectorised power may differ in the last bit)
        p = self.prob(ids).tolist()
        alpha, beta = float(alpha), float(beta)
        change = [
            pi * min((r + beta) ** alpha, 1.0) for pi, r in zip(p, ratios.tolist(), strict=True)
        ]
        weight = 0.0
        for c in change:
            weight += c
        spread = weight / rest
        self._shift = self._shift + spread
        # the clients labeled before and not now get the spread; then this round's join
        keep = ~np.isin(self._ids, ids)
        merged = np.concatenate([self._ids[keep], ids])
        order = np.argsort(merged, kind="stable")
        self._ids = merged[order]
        after = np.subtract(p, change)
        self._p = np.concatenate([self._p[keep] + spread, after])[order]

    def draw(
        self,
        rng: np.random.Generator,
        n: int,
        accept: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> np.ndarray:
        """``n`` distinct clients (int64, in the order picked) drawn by successive sampling
        from the probabilities (each pick from p restricted to the clients not yet picked,
        renormalised: numpy's ``choice(K, n, replace=False, p=p)``), among those that
        ``accept`` (ids -> bool array; availability, say) accepts.

        By rejection: a proposal k is uniform in [0, K) (``rng.integers``), accepted with
        probability ``p_k / shift`` (one ``rng.random()`` a proposal); one already picked,
        or refused by ``accept``, is skipped. Proposals come in batches; after
        ``1000 n + 10000`` of them a RuntimeError says the clients left cannot be drawn
        (their probabilities are 0, or ``accept`` refuses them).
        """
        if int(n) != n or not 0 <= n <= self.num_clients:
            raise ValueError(f"n must be an integer in [0, {self.num_clients}], got {n}")
        n = int(n)
        limit = 1000 * n + 10_000 if n else 0
        picked: list[int] = []
        seen: set[int] = set()
        proposals = 0
        while len(picked) < n:
            if proposals >= limit:
                raise RuntimeError(
                    f"drew {len(picked)} of {n} clients in {proposals} proposals: the clients "
                    "left have probability 0 or are not accepted"
                )
            size = min(max(64, 2 * (n - len(picked))), limit - proposals)
            proposals += size
            ks = rng.integers(0, self.num_clients, size=size, dtype=np.int64)
            us = rng.random(size)
            ks = ks[us < self.prob(ks) / self._shift]
            if accept is not None and ks.size:
                ok = np.asarray(accept(ks), dtype=bool)
                if ok.shape != ks.shape:
                    raise ValueError(f"accept returned shape {ok.shape} for {ks.shape} ids")
                ks = ks[ok]
            for k in ks.tolist():
                if k not in seen:
                    seen.add(k)
                    picked.append(k)
                    if len(picked) == n:
                        break
        return np.asarray(picked, dtype=np.int64)

    def record_selected(self, ids) -> None:
        """One more time selected (in a cohort) for each of ``ids``."""
        for k in _ids(ids, self.num_clients).tolist():
            self._selected[k] = self._selected.get(k, 0) + 1

    def record_labeled(self, ids) -> None:
        """One more time labeled for each of ``ids``."""
        for k in _ids(ids, self.num_clients).tolist():
            self._labeled[k] = self._labeled.get(k, 0) + 1

    def counts(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """The times selected and the times labeled (int64) of the clients ``ids``."""
        ids = _ids(ids, self.num_clients).tolist()
        selected = np.array([self._selected.get(k, 0) for k in ids], dtype=np.int64)
        labeled = np.array([self._labeled.get(k, 0) for k in ids], dtype=np.int64)
        return selected, labeled

    def state_dict(self) -> dict:
        """The state, plain numpy arrays and floats: the shift, the clients ever labeled with
        their probabilities, and the counters of the clients ever counted."""
        counted = np.array(sorted(self._selected.keys() | self._labeled.keys()), dtype=np.int64)
        selected, labeled = self.counts(counted)
        return {
            "num_clients": self.num_clients,
            "shift": self._shift,
            "labeled_ids": self._ids.copy(),
            "labeled_prob": self._p.copy(),
            "counted_ids": counted,
            "times_selected": selected,
            "times_labeled": labeled,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores what :meth:`state_dict` gave, for the same number of clients."""
        if int(state["num_clients"]) != self.num_clients:
            raise ValueError(
                f"the state is of {int(state['num_clients'])} clients, not {self.num_clients}"
            )
        ids = _ids(state["labeled_ids"], self.num_clients)
        p = np.asarray(state["labeled_prob"], dtype=np.float64)
        if p.shape != ids.shape or np.any(np.diff(ids) <= 0):
            raise ValueError("labeled_ids must ascend and match labeled_prob")
        counted = _ids(state["counted_ids"], self.num_clients).tolist()
        selected = np.asarray(state["times_selected"], dtype=np.int64).tolist()
        labeled = np.asarray(state["times_labeled"], dtype=np.int64).tolist()
        if not len(counted) == len(selected) == len(labeled):
            raise ValueError("counted_ids must match times_selected and times_labeled")
        self._shift = float(state["shift"])
        self._ids, self._p = ids, p.copy()
        self._selected = {k: c for k, c in zip(counted, selected, strict=True) if c}
        self._labeled = {k: c for k, c in zip(counted, labeled, strict=True) if c}
