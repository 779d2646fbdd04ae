"""A run's participation: which clients are available at a round, which of a draw take
part (the selection strategy), which drop out, which report after the deadline, and how
long each round takes on the virtual clock. Everything about a client is drawn from (seed,
client, round) alone (:mod:`distfl.participation.draws`): nothing is held per client, a
round costs what its draws and its cohort cost, and any world size gives the same bits.

With every key of [participation] at its default, :meth:`Participation.draw` is the
``rng.choice(pool, size, replace=False)`` every algorithm made before, and
:meth:`Participation.admit` returns the plan as it is: a run computes what it computed
before the section existed."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from distfl.participation import draws
from distfl.participation.traces import Profiles, Windows, nothing, read_profiles, read_windows
from distfl.plugins import SELECTIONS

#: bytes of one float32 parameter on the wire
PARAM_BYTES = 4


@dataclass(frozen=True)
class RoundParticipation:
    """What participation did to one round's plan."""

    #: clients the plan named that were not available (an algorithm whose plan names
    #: clients without a draw: every member of a cluster)
    unavailable: int = 0
    #: clients that dropped out before reporting
    dropped: int = 0
    #: clients whose report arrived after the deadline (discarded)
    late: int = 0
    #: the round's simulated seconds (NaN: no clock)
    round_s: float = math.nan
    #: trainings whose download happened but whose update never entered an aggregate
    lost_trainings: int = 0
    #: reports the selection left out of the aggregates (FedPNS's optimal aggregation)
    rejected: int = 0

    @property
    def removed(self) -> int:
        return self.unavailable + self.dropped + self.late


OFF = RoundParticipation()


class Participation:
    """The run's participation, on the server. ``groups``: the config's client groups;
    ``client_group``: each client's group (int64 [K]); ``num_train``: each client's train
    samples ([K]); ``num_params``: the model's parameters."""

    def __init__(self, config, *, client_group: np.ndarray, num_train: np.ndarray,
                 num_params: int) -> None:  # fmt: skip
        p = config.participation
        self.section = p
        self.seed = int(config.run.seed)
        self.client_group = np.asarray(client_group, dtype=np.int64)
        self.num_train = np.asarray(num_train)
        self.num_params = int(num_params)
        self.local_steps = int(config.train.local_steps)
        self.batch_size = int(config.train.batch_size)
        groups = config.groups
        self.fraction = np.array(
            [g.availability if g.availability >= 0 else p.fraction for g in groups]
        )
        self.dropout = np.array([g.dropout if g.dropout >= 0 else p.dropout for g in groups])
        self.speed_scale = np.array([g.speed_scale for g in groups], dtype=np.float64)
        self.bandwidth_scale = np.array([g.bandwidth_scale for g in groups], dtype=np.float64)
        # of a trace, what the run's clients follow (traces.py reads it as a stream)
        everyone = np.arange(len(self.client_group), dtype=np.int64)
        self.windows: Windows | None = None
        if p.availability == "trace":
            self.windows = read_windows("participation.trace", p.trace,
                keep=lambda n: self._pick(draws.TRACE_CLIENT, everyone, n))  # fmt: skip
        self.profiles: Profiles | None = None
        if p.resources == "trace":
            self.profiles = read_profiles("participation.resource_trace", p.resource_trace,
                keep=lambda n: self._pick(draws.PROFILE, everyone, n))  # fmt: skip
        self.round = 0
        #: the selection strategy (distfl.participation.selection): it chooses the clients
        #: of each draw, and keeps what it keeps between rounds
        self.selection = SELECTIONS.get(p.selection)(self, config)
        #: whether a draw is the plain uniform draw among every client (the old draw)
        self.everyone = p.availability == "always" and not self.selection.chooses
        self.clock = p.resources != "off"
        #: whether the plans pass through admit() unchanged
        self.plain = (p.availability == "always" and not self.dropout.any() and not p.deadline
                      and not self.selection.reads_models)  # fmt: skip
        #: the clients the selection chose this round (None where it does not choose): a
        #: strategy that chooses admits no plan naming a client it did not choose
        self.drawn: set[int] | None = set() if self.selection.chooses else None

    def begin(self, round_index: int) -> None:
        """Round ``round_index`` starts: its availability and dropouts apply."""
        self.round = int(round_index)
        if self.drawn is not None:
            self.drawn = set()

    # -- what a client is ----------------------------------------------------------------

    def _groups(self, ids: np.ndarray) -> np.ndarray:
        return self.client_group[ids]

    def _pick(self, what: int, ids: np.ndarray, n: int) -> np.ndarray:
        """A row of n for each client, uniformly, from (seed, what, client): the trace
        client it follows, the device profile it has."""
        u = draws.uniforms(self.seed, what, ids)
        return np.minimum((u * n).astype(np.int64), n - 1)

    def available(self, clients) -> np.ndarray:
        """Whether each of ``clients`` is available at this round."""
        ids = np.asarray(clients, dtype=np.int64)
        p = self.section
        if p.availability == "always":
            return np.ones(len(ids), dtype=bool)
        if p.availability == "trace":
            w = self.windows
            return w.holds(w.ids[self._pick(draws.TRACE_CLIENT, ids, len(w.ids))], self.round)
        prob = self.fraction[self._groups(ids)]
        if p.diurnal:
            phase = draws.uniforms(self.seed, draws.PHASE, ids)
            swing = np.sin(2 * np.pi * (self.round / p.period + phase))
            prob = np.clip(prob * (1.0 + p.diurnal * swing), 0.0, 1.0)
        return draws.uniforms(self.seed, draws.AVAILABLE, ids, self.round) < prob

    def dropped(self, clients) -> np.ndarray:
        """Whether each of ``clients``, selected this round, drops out before it reports."""
        ids = np.asarray(clients, dtype=np.int64)
        rate = self.dropout[self._groups(ids)]
        return draws.uniforms(self.seed, draws.DROPOUT, ids, self.round) < rate

    def resources(self, clients) -> tuple[np.ndarray, np.ndarray]:
        """(compute speed in samples/s, bandwidth in Mbit/s) of each of ``clients``."""
        ids = np.asarray(clients, dtype=np.int64)
        g = self._groups(ids)
        p = self.section
        if p.resources == "trace":
            rows = self._pick(draws.PROFILE, ids, len(self.profiles))
            speed, bandwidth = self.profiles[rows, 0], self.profiles[rows, 1]
        else:
            speed = _log_uniform(draws.uniforms(self.seed, draws.SPEED, ids),
                                 p.speed_min, p.speed_max)  # fmt: skip
            bandwidth = _log_uniform(draws.uniforms(self.seed, draws.BANDWIDTH, ids),
                                     p.bandwidth_min, p.bandwidth_max)  # fmt: skip
        return speed * self.speed_scale[g], bandwidth * self.bandwidth_scale[g]

    def times(self, clients, trainings=1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(download, local training, upload) seconds of each of ``clients`` training
        ``trainings`` models (one each, or an array): a model of 4·P bytes each way (the
        upload also carries the S step losses, 8 bytes each, and the sample count), at the
        client's bandwidth; S local steps of min(B, its train samples) samples at its
        speed."""
        ids = np.asarray(clients, dtype=np.int64)
        return self.client_times(ids, *self.resources(ids), trainings)

    def client_times(self, ids: np.ndarray, speed, bandwidth, trainings=1):
        """:meth:`times` of ``ids`` whose resources are known."""
        samples = np.minimum(self.batch_size, self.num_train[ids]).astype(np.float64)
        return training_seconds(speed, bandwidth, num_params=self.num_params,
                                local_steps=self.local_steps, samples=samples,
                                trainings=np.asarray(trainings, dtype=np.float64))  # fmt: skip

    # -- the round -----------------------------------------------------------------------

    def draw(self, rng: np.random.Generator, pool, size: int, *, own=None, priority=None,
             trainings: int = 1) -> np.ndarray:  # fmt: skip
        """``size`` distinct clients of ``pool`` (an int K: clients 0..K-1; or an array of
        client ids), chosen among those available this round by the run's selection; fewer
        when fewer are available (or when FedCS's deadline fits fewer). In the order drawn
        (callers sort).

        What the algorithm prefers, the selection decides (:meth:`ClusteringAlgorithm.
        sample_clients <distfl.algorithms.api.base.ClusteringAlgorithm.sample_clients>`):
        ``own`` is the algorithm's own draw where it is not the uniform one (a callable
        giving client ids), ``priority`` its weight of each client (a callable of an id
        array), ``trainings`` the models each client trains. ``uniform`` returns ``own()``
        as it is, or the uniform draw; ``fedcs`` schedules the available clients of that
        draw into the deadline; ``fedpns`` draws in its place by its probabilities times
        ``priority``."""
        chosen = self.selection.choose(
            rng, pool, size, own=own, priority=priority, trainings=trainings
        )
        if self.drawn is not None:
            self.drawn.update(int(k) for k in chosen)
        return chosen

    def uniform(self, rng: np.random.Generator, pool, size: int) -> np.ndarray:
        """A uniform draw without replacement among the available clients of ``pool``:
        uniform proposals, each new one kept when available, so that a round costs
        O(size / availability) whatever the pool's size; a small pool (or one whose
        available clients the proposals fail to find) is enumerated."""
        ids = None if isinstance(pool, (int, np.integer)) else np.asarray(pool, dtype=np.int64)
        n = int(pool) if ids is None else len(ids)
        size = min(int(size), n)
        if size <= 0:
            return np.zeros(0, dtype=np.int64)
        if n <= 4 * size + 256:
            every = np.arange(n, dtype=np.int64) if ids is None else ids
            ok = every[self.available(every)]
            return rng.choice(ok, size=min(size, len(ok)), replace=False).astype(np.int64)
        picked: list[int] = []
        seen: set[int] = set()
        budget = 64 * size + 10_000
        while len(picked) < size and budget > 0:
            m = 2 * (size - len(picked)) + 16
            budget -= m
            pos = rng.integers(0, n, size=m)
            first = np.sort(np.unique(pos, return_index=True)[1])
            fresh = [int(x) for x in pos[first] if int(x) not in seen]
            seen.update(fresh)
            cand = np.array(fresh, dtype=np.int64)
            if ids is not None:
                cand = ids[cand]
            for k in cand[self.available(cand)].tolist():
                picked.append(int(k))
                if len(picked) == size:
                    break
        if len(picked) < size:  # few available: the rest from those not yet proposed
            every = np.arange(n, dtype=np.int64)
            rest = np.setdiff1d(every, np.fromiter(seen, dtype=np.int64, count=len(seen)))
            rest = rest if ids is None else ids[rest]
            ok = rest[self.available(rest)]
            more = rng.choice(ok, size=min(size - len(picked), len(ok)), replace=False)
            picked.extend(int(k) for k in more)
        return np.array(picked, dtype=np.int64)

    def admit(self, plan):
        """The plan without the clients that are not available, drop out or report after
        the deadline, and what that did (:class:`RoundParticipation`), with the round's
        simulated seconds: the slowest admitted client's download, training and upload, or
        the deadline when a report was lost to it or to a dropout."""
        if self.drawn is not None:
            self._chosen_only(plan)
        self.selection.selected(plan)
        if self.plain and not self.clock:
            return plan, OFF
        ids = np.array(sorted(plan.train), dtype=np.int64)
        trainings = np.array(
            [1 if plan.one_training else len(plan.targets(int(k))) for k in ids], dtype=np.int64
        )
        absent = ~self.available(ids)
        keep = ~absent
        gone = self.dropped(ids) & keep
        keep &= ~gone
        late = np.zeros(len(ids), dtype=bool)
        round_s = math.nan
        if self.clock:
            down, compute, up = self.times(ids, trainings)
            total = down + compute + up
            deadline = self.section.deadline
            if deadline:
                late = keep & (total > deadline)
                keep &= ~late
            slowest = float(total[keep].max()) if keep.any() else 0.0
            lost = bool(deadline) and bool(late.any() or gone.any())
            round_s = float(deadline) if lost else slowest
        outcome = RoundParticipation(
            unavailable=int(absent.sum()), dropped=int(gone.sum()), late=int(late.sum()),
            round_s=round_s, lost_trainings=int(trainings[gone | late].sum()),
        )  # fmt: skip
        kept = {int(k) for k in ids[keep]}
        back = frozenset(kept) if self.selection.reads_models else frozenset()
        if keep.all() and back <= plan.return_models:
            return plan, outcome
        return dataclasses.replace(
            plan,
            train={k: v for k, v in plan.train.items() if k in kept},
            return_models=frozenset(k for k in plan.return_models if k in kept) | back,
            client_state={k: v for k, v in plan.client_state.items() if k in kept},
        ), outcome  # fmt: skip

    def _chosen_only(self, plan) -> None:
        """Refuse (RuntimeError: the round fails) a plan that trains a client the selection
        did not choose this round: an algorithm that draws its cohort without
        :meth:`~distfl.algorithms.api.base.ClusteringAlgorithm.sample_clients` would run a
        uniform draw in place of the strategy asked for."""
        others = sorted(set(plan.train) - self.drawn)
        if others:
            shown = ", ".join(str(k) for k in others[:5]) + (", ..." if len(others) > 5 else "")
            raise RuntimeError(
                f"participation.selection = {self.section.selection!r}: round {self.round}'s "
                f"plan trains {len(others)} client(s) the selection did not choose ({shown}); "
                "an algorithm draws its cohorts with sample_clients for a strategy to choose them"
            )

    def after_training(self, plan, reports, starts: dict[str, np.ndarray]) -> tuple[dict, int]:
        """The selection's say after the round's training (FedPNS's optimal aggregation):
        the clusters' models it replaces and the reports it left out."""
        return self.selection.after_training(plan, reports, starts)

    def state_dict(self) -> dict:
        """What the selection keeps between rounds (FedPNS's probabilities), or {}."""
        return self.selection.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.selection.load_state_dict(state)


def _log_uniform(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))


def fastest_client_s(config, num_params: int, samples: int) -> float:
    """Seconds the fastest client the resources allow needs for one training of
    ``samples`` samples a step: what a deadline must leave at least."""
    p = config.participation
    steps = config.train.local_steps
    groups = config.groups
    if p.resources == "trace":
        prof = read_profiles("participation.resource_trace", p.resource_trace, keep=nothing)
        speed, bandwidth = prof.fastest
    else:
        speed, bandwidth = p.speed_max, p.bandwidth_max
    speed *= max(g.speed_scale for g in groups)
    bandwidth *= max(g.bandwidth_scale for g in groups)
    return float(sum(training_seconds(speed, bandwidth, num_params=num_params,
                                      local_steps=steps, samples=samples)))  # fmt: skip


def training_seconds(speed, bandwidth, *, num_params: int, local_steps: int, samples,
                     trainings=1.0):  # fmt: skip
    """(download, local training, upload) seconds of ``trainings`` trainings at ``speed``
    samples/s and ``bandwidth`` Mbit/s each way: a model of 4·P bytes down, S local steps
    of ``samples`` samples, and the model, the S step losses (8 bytes each) and the sample
    count up."""
    rate = bandwidth * 1e6 / 8  # bytes/s
    down = trainings * PARAM_BYTES * num_params / rate
    up = trainings * (PARAM_BYTES * num_params + 8 * local_steps + 8) / rate
    compute = trainings * local_steps * samples / speed
    return down, compute, up


class _Everyone:
    """Every client always available, uniform draws: the participation of an algorithm
    outside a run (and of a run without [participation])."""

    everyone = True

    def available(self, clients) -> np.ndarray:
        return np.ones(len(clients), dtype=bool)

    def draw(self, rng: np.random.Generator, pool, size: int, *, own=None, priority=None,
             trainings: int = 1) -> np.ndarray:  # fmt: skip
        """The algorithm's own draw (``own()``), or the uniform one."""
        return np.asarray(own(), dtype=np.int64) if own is not None else rng.choice(
            pool, size=size, replace=False)  # fmt: skip


EVERYONE = _Everyone()


__all__ = ["EVERYONE", "OFF", "Participation", "RoundParticipation", "fastest_client_s"]
