"""What a clustering algorithm is: a plug-in that plans rounds and reads their results.

An algorithm never sees a communicator, a worker or a tensor on the server: it sees plans,
reports and its :class:`~distfl.hierarchy.ClusterTree`, as arrays. The runtime never knows
which algorithm runs. One round, from the server's side::

    request = algorithm.plan_probe(t)            # optional: ask clients something first
    if request is not None:
        rows = <each client in request.clients runs the probe on its worker>
        algorithm.update_probe(t, request, rows)
    plan = algorithm.plan(t)                     # who trains from which cluster's model
    reports = <the clients train; the aggregator makes each cluster's new model>
    update = algorithm.update(t, plan, reports)  # splits, replaced models, statistics

The two pairs (plan_probe → update_probe, plan → update) are the whole per-round
interface, in the spirit of Flower's configure/aggregate pairs. The algorithm owns the
cluster tree (``self.tree``) and changes it itself: splits (:meth:`ClusterTree.split`) and
moves of clients (:meth:`ClusterTree.reassign`); the server reads it to evaluate each client
on its cluster's model and to save ``/hierarchy``, and gives the children of a split their
parent's model.

Writing one (see docs/adding-an-algorithm.md): subclass :class:`ClusteringAlgorithm`, give
it a ``name`` and, if it has settings, a ``Params`` dataclass (its keys under
``[algorithm]``), and decorate it with :func:`distfl.algorithms.register`. A module in
``distfl/algorithms/`` is found by itself; one elsewhere is named in ``run.plugins``. What
its clients compute beyond training (a probe) is its *client half*: a
:class:`ClientHalf` subclass, named by :attr:`ClusteringAlgorithm.client` (the class, or
``"module:Class"`` for one in a second module, imported only on the workers). The statistics
it records each round (:attr:`RoundUpdate.stats`) are columns of the run file whatever their
names; figures of its own for ``distfl report`` are :attr:`ClusteringAlgorithm.figures`.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from distfl.algorithms.api.client_side import ClientContext, ClientHalf, Prepared, ProbeAbandoned
from distfl.algorithms.api.declarations import RecordTable, ReportFigure, Statistic
from distfl.algorithms.api.pool import LOCAL_POOL, PooledTaskFailed, ServerPool, pooled
from distfl.hierarchy import ClusterTree, Split
from distfl.participation.model import EVERYONE
from distfl.runfile.layout import FIXED_CLUSTER_COLUMNS
from distfl.settings import Params, require, setting

if TYPE_CHECKING:  # the client half runs on workers, where torch is loaded anyway
    pass


# -- what the runtime tells an algorithm and asks of it -------------------------------------


@dataclass(frozen=True, eq=False)
class Federation:
    """Facts about the federation an algorithm may use (arrays are per client)."""

    num_clients: int
    clients_per_round: int
    seed: int
    local_steps: int = 1
    #: each client's ground-truth group (what the oracle clusters by)
    groups: np.ndarray | None = None
    #: each client's train samples
    num_train: np.ndarray | None = None
    #: parameters of the model
    num_params: int = 0
    #: width of the model's penultimate layer (the input of its last linear layer)
    embed_dim: int = 0
    #: values of one input sample, flattened (the rows of a client's data matrix)
    input_dim: int = 0
    #: where the last linear layer's weight and bias lie in the flat model, [start, stop)
    #: ((0, 0): unknown)
    last_layer: tuple[int, int] = (0, 0)
    #: the model's classes (the outputs of its last linear layer; 0: unknown)
    num_classes: int = 0
    #: the run's initial model (flat float32 [P]: every cluster's start unless the algorithm
    #: asks for models of their own; None: unknown)
    initial_model: np.ndarray | None = None


@dataclass
class RoundPlan:
    """One round: ``train[k] = c`` means client k trains from the model of cluster ``c``,
    and its update enters ``c``'s aggregate with the aggregator's weight w_k (its sample
    count, or 1). Soft membership: ``train[k] = {c: γ, ...}`` means client k trains a copy
    of each listed cluster's model (in ascending cluster order), each update entering its
    own cluster's aggregate with weight γ·w_k (γ > 0, held to 2^-20)."""

    round: int
    train: dict[int, str | Mapping[str, float]]
    #: clients whose updated model must travel to the server this round (one per training)
    return_models: frozenset[int] = frozenset()
    #: an op of its client half (one of ``client_ops``) each trained client runs first, on
    #: the broadcast models (every cluster of :meth:`clusters`, in that order) and its row
    #: of ``client_state``: it answers a row of ``prepare_width`` values
    #: (:attr:`ClientReports.rows`) and may weigh each train sample in each of the client's
    #: trainings (:class:`~distfl.algorithms.api.client_side.Prepared`)
    prepare: str | None = None
    prepare_width: int = 0
    #: each trained client's state row for its client half (float64, one width; a client
    #: left out gets zeros): what persists between a client's rounds and travels with it
    client_state: dict[int, Any] = field(default_factory=dict)
    #: an op of its client half (one of ``client_ops``) each trained client runs after its
    #: training, on the model it trained (its first training's) and its row of
    #: ``client_state``: it answers a row of ``after_width`` values (:attr:`ClientReports.rows`;
    #: FedSaC's feature bases). A plan has ``prepare`` or ``after``, not both
    after: str | None = None
    after_width: int = 0
    #: whether each client's ``prepare`` gives the model it starts from
    #: (:attr:`Prepared.start <distfl.algorithms.api.client_side.Prepared.start>`): it then trains
    #: once, and that model enters the aggregate of each of its clusters (FedSoft)
    one_training: bool = False

    def targets(self, client: int) -> list[tuple[str, float]]:
        """Client ``client``'s trainings as (cluster id, weight γ), ascending cluster."""
        target = self.train[client]
        if isinstance(target, str):
            return [(target, 1.0)]
        return sorted((str(c), float(g)) for c, g in target.items())

    def clusters(self) -> list[str]:
        """The cluster ids the plan needs, in a fixed (sorted) order."""
        return sorted({c for k in self.train for c, _ in self.targets(k)})

    def soft(self) -> bool:
        """Whether a client trains more than one model or with a weight other than 1."""
        return any(not isinstance(v, str) for v in self.train.values())


@dataclass
class ProbeRequest:
    """Something to ask of ``clients`` before a round's plan, answered as one row each by
    the algorithm's client half (``op`` is one of its ``client_ops``), with the models of
    ``clusters`` broadcast to them in that order. The runtime carries the rows without
    reading them.

    ``width`` is the row length (default: one value per model); ``args`` a few integers the
    client half receives; ``federation_bytes`` what the probe would move in a real
    deployment (default: each client downloads the models and uploads its row)."""

    clients: np.ndarray  # [n] int64, ascending
    clusters: list[str]
    op: str
    width: int | None = None
    args: tuple[int, ...] = ()
    federation_bytes: int | None = None

    def row_width(self) -> int:
        return len(self.clusters) if self.width is None else int(self.width)


@dataclass
class ClientReports:
    """What the sampled clients sent back, one row per training in ascending client id (a
    client that trained several models, soft membership, has one row per model, in
    ascending cluster order: ``clusters`` and ``weights`` say which)."""

    clients: np.ndarray  # [n] int64
    losses: np.ndarray  # [n, S] the loss of every local step
    num_samples: np.ndarray  # [n] int64
    models: np.ndarray | None = None  # [n, P] float32, only for clients in return_models
    #: each cluster's model after the aggregator ran (float32 [P]); read-only
    cluster_models: dict[str, np.ndarray] = field(default_factory=dict)
    #: the cluster each row trained (a soft plan's; None for a plan of one model a client)
    clusters: list[str] | None = None
    #: [n] the weight γ of each row's update in its cluster's aggregate (a soft plan's)
    weights: np.ndarray | None = None
    #: [clients, width] the rows the plan's ``prepare`` (or ``after``) op answered, one
    #: per trained client, ascending (None without one)
    rows: np.ndarray | None = None

    @classmethod
    def none(cls, cluster_models: dict[str, np.ndarray], local_steps: int) -> ClientReports:
        """The reports of a round in which no client reported (participation lost them)."""
        return cls(
            clients=np.zeros(0, dtype=np.int64), losses=np.zeros((0, local_steps)),
            num_samples=np.zeros(0, dtype=np.int64), cluster_models=cluster_models,
        )  # fmt: skip


@dataclass
class RoundUpdate:
    """What :meth:`ClusteringAlgorithm.update` changed."""

    #: cluster models to replace after the aggregator (FeSEM's centres, FLCL's Σ λ_i θ_i)
    models: dict[str, np.ndarray] = field(default_factory=dict)
    #: splits made this round (already in the tree); their children start from the parent's
    #: model, after ``models`` were applied
    splits: list[Split] = field(default_factory=list)
    #: per-cluster numbers recorded this round, {cluster id: {name: value}} (``mse``,
    #: ``mean_norm``, ``max_norm``, ... or names of its own): each name is a float64 column of
    #: /metrics/clusters, NaN in the rows of clusters and rounds without it. A name may not be
    #: one of FIXED_CLUSTER_COLUMNS (the run refuses it)
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    #: rows of its own tables this round, {table name: {column: values}}: every column its
    #: :class:`RecordTable` declares, the key columns (cluster; client; client and other)
    #: included and ``round`` left out (the runtime fills it), all of one length, as lists or
    #: 1-D arrays (a table without rows this round is left out)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class NewcomerModels:
    """What :meth:`ClusteringAlgorithm.place_newcomers` gives the newcomers it is asked of:
    ``clusters[i]`` the leaf newcomer i joins (under soft membership its largest weight's),
    whose model it is evaluated on, and where the algorithm evaluates on its own
    (:attr:`ClusteringAlgorithm.evaluation`) ``rows`` [n, D] float64, each newcomer's row for
    that op (what :meth:`ClusteringAlgorithm.client_rows` is for a trained client)."""

    clusters: list[str]
    rows: np.ndarray | None = None


# the columns of /metrics/clusters the runtime fills itself (no statistic takes their
# names) are declared with the run file's layout: FIXED_CLUSTER_COLUMNS


# -- the server half -----------------------------------------------------------------------


def _takes_params(cls: type) -> bool:
    """Whether ``cls(...)`` takes ``params=`` (its ``__init__`` names it or passes keywords
    on to the base class's)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return any(p.name == "params" or p.kind is p.VAR_KEYWORD for p in parameters)


class ClusteringAlgorithm(ABC):
    """Base class of the clustering algorithms; one instance lives on the server."""

    #: the value of ``algorithm.name``
    name: ClassVar[str] = ""
    #: its settings under ``[algorithm]``
    Params: ClassVar[type[Params]] = Params
    #: the keys of the config's sections (``section.key``) it leaves without effect whatever
    #: the rest of the config, each with why in a few words (CFL's ``run.sampling_seed``: it
    #: draws nothing); ``server.clients_per_round`` goes without saying where
    #: :attr:`every_member_trains`. Set to another value than its default, such a key is
    #: not refused (a scenario is meant for every algorithm) but warned of in one line
    ignored_keys: ClassVar[Mapping[str, str]] = {}
    #: the probes its client half answers (ProbeRequest.op)
    client_ops: ClassVar[tuple[str, ...]] = ()
    #: its client half: a ClientHalf subclass, or "module:Class" to import on the workers
    #: (a server half loads no torch)
    client: ClassVar[type[ClientHalf] | str | None] = None
    #: whether a round may be given up while its probe runs, when a stop signal (SIGTERM,
    #: SIGUSR1, Ctrl-C) reaches a worker: the workers leave the rows not yet computed, and
    #: the run stops at the end of the previous round and resumes from there. Only for an
    #: algorithm whose ``plan_probe`` changes nothing that its state holds (a long probe,
    #: such as EMD-CFL's one-shot round, is then no longer waited for)
    probe_abandonable: ClassVar[bool] = False
    #: bytes it keeps per pair of clients (K×K matrices), 0 when it keeps none: the
    #: runtime refuses, before anything is allocated, a population whose pairs cannot fit
    pair_bytes: ClassVar[int] = 0
    #: bytes per pair at its peak within a round or a split, where that is more than what
    #: it keeps (0: :attr:`pair_bytes`)
    working_bytes: ClassVar[int] = 0
    #: whether every member of a cluster trains and returns its model every round, whatever
    #: ``server.clients_per_round`` (CFL and FLCL, as their papers run them)
    every_member_trains: ClassVar[bool] = False
    #: the selection strategies (``participation.selection``) that cannot act on its
    #: rounds beyond those :meth:`selection_refusal` derives, each with why in a few words
    refused_selections: ClassVar[Mapping[str, str]] = {}
    #: why the cluster models it makes are not the aggregates of the clients' updates alone
    #: (it mixes or averages the clients' individual models on the server), in a few words;
    #: "" where they are. Client-level DP's noise (``privacy.noise``) goes on the aggregates,
    #: so the config refuses it for such an algorithm (:meth:`privacy_refusal`)
    models_from_clients: ClassVar[str] = ""
    #: the key of its :attr:`Params` that sets how many clusters it forms (IFCA's
    #: ``num_clusters``), or None for an algorithm that finds the number itself: ``distfl
    #: suite --true-clusters`` sets this key to each scenario's number of data groups (the
    #: protocol of the papers that give their rivals the true number)
    clusters_key: ClassVar[str | None] = None
    #: its own figures in ``distfl report`` (:class:`ReportFigure`); any statistic it records
    #: that none of them draws is plotted per cluster over rounds by the report itself
    figures: ClassVar[tuple[ReportFigure, ...]] = ()
    #: the square per-member matrices it stores at a split (:class:`Split` ``datasets``), as
    #: (dataset, title): the report draws them side by side at each split, in this order,
    #: with these titles (one it does not declare is drawn under its own name)
    split_matrices: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: the per-cluster statistics it records (:class:`Statistic`), for the docs and, for
    #: the built-in algorithms' first ones, the layout of every run file
    statistics: ClassVar[tuple[Statistic, ...]] = ()
    #: its own tables in the run file (:class:`RecordTable`: rows per cluster, client or
    #: pair of clients), which it fills through :attr:`RoundUpdate.rows`
    tables: ClassVar[tuple[RecordTable, ...]] = ()
    #: what it stores at a split (:class:`Split` ``datasets``, ``/hierarchy/<id>/<name>``),
    #: as (name, shape, what it is), for the docs
    split_datasets: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    #: whether ``/metrics/clusters`` (and ``/metrics/membership``) has a row each round for
    #: every leaf, those that sampled no client and recorded no statistic too (the default);
    #: False for an algorithm with a cluster per client (``local``), so that the tables grow
    #: with the clients trained, not with the population
    record_idle_clusters: ClassVar[bool] = True
    #: what its clusters say of a client, for the ARI and the Rand index against the true
    #: groups: ``"hard"`` (each client is in one cluster: the default), ``"largest weight"``
    #: (soft membership: the tree holds each client under its largest weight, and the scores
    #: say so) or ``"none"`` (no clusters to score: personalised aggregation; "–")
    membership: ClassVar[str] = "hard"
    #: an op of its client half that evaluates a client (:meth:`ClientHalf.evaluate`), on
    #: every leaf's model and its row of :meth:`client_rows`, in place of the client's own
    #: leaf's model (FedEM's mixture); None: the leaf's model (the default)
    evaluation: ClassVar[str | None] = None
    #: its rule for a newcomer (a client that never trained: ``data.held_out``), the one its
    #: paper gives, in a few words; "" where its paper gives none (the config refuses
    #: ``data.held_out``). At every evaluation :meth:`newcomer_probe` and
    #: :meth:`place_newcomers` apply it to every newcomer
    newcomers: ClassVar[str] = ""
    #: where :meth:`update` may spread independent pieces of its work (:meth:`ServerPool.map`);
    #: :func:`~distfl.algorithms.build_algorithm` gives the ranks' pool in a run over several
    pool: ServerPool = LOCAL_POOL
    #: who may take part in a round (:class:`~distfl.participation.model.Participation`:
    #: availability and the selection strategy, [participation]);
    #: :func:`~distfl.algorithms.build_algorithm` gives the run's. By default every client
    #: is always available and a draw is uniform
    participation: Any = EVERYONE

    def __init__(
        self,
        *,
        num_clients: int,
        clients_per_round: int,
        seed: int,
        roots: dict[str, Any] | None = None,
        params: Params | None = None,
        **settings: Any,
    ):
        #: its settings (:attr:`Params`, declared there once): ``params``, by default the
        #: declared defaults, with ``settings`` by key in place of their values; each is
        #: also an attribute of the same name (``self.epsilon``)
        self.params = self.Params.made(params, settings)
        for key in self.params.keys():
            setattr(self, key, getattr(self.params, key))
        self.num_clients = num_clients
        self.clients_per_round = clients_per_round
        self.seed = seed
        self.federation = Federation(num_clients, clients_per_round, seed)
        if roots is None:
            roots = {"0": np.arange(num_clients, dtype=np.int64)}
        #: the one owner of cluster membership and of the hierarchy
        self.tree = ClusterTree(roots, num_clients=num_clients)

    @classmethod
    def working_pair_bytes(cls, params: Params) -> int:
        """Bytes per pair of clients it needs at its peak with these settings (what the
        runtime checks the memory against): :attr:`pair_bytes`, or :attr:`working_bytes`
        where larger, unless a setting needs more."""
        return max(cls.pair_bytes, cls.working_bytes)

    @classmethod
    def pair_memory(cls, params: Params, *, num_clients: int, clients_per_round: int,
                    rounds: int) -> int:  # fmt: skip
        """Bytes its per-pair state needs at its peak in a run of ``rounds`` rounds: K² times
        :meth:`working_pair_bytes` unless it keeps only the pairs it observed."""
        return num_clients * num_clients * cls.working_pair_bytes(params)

    @classmethod
    def round_models(
        cls, params: Params, *, num_clients: int, clients_per_round: int, num_params: int
    ) -> int:
        """Client models the server holds at once in a round at most (the rows of
        :attr:`ClientReports.models`, float32 [n, P]) with these settings, for a model of
        ``num_params`` parameters: what the runtime's memory check counts as the round's
        models. ``clients_per_round`` unless the algorithm asks more clients for their
        models (every member, or a seeding round)."""
        return num_clients if cls.every_member_trains else clients_per_round

    @classmethod
    def held_models(cls, params: Params, *, num_clients: int) -> int:
        """Cluster models the server holds at once beyond the handful its model copies
        count: 0 for an algorithm with a few clusters (the default); one per client for an
        algorithm whose every client is a cluster (``local``). The runtime's memory check
        counts them (the models, their copies in the snapshot and the checkpoint, and a
        leaf of the tree each) and refuses, before any work, a run they do not fit."""
        return 0

    @classmethod
    def state_bytes(cls, params: Params, *, num_clients: int, clients_per_round: int,
                    rounds: int, num_params: int, num_classes: int = 0) -> int:  # fmt: skip
        """Bytes the algorithm's checkpointed state (:meth:`state_dict`) can reach in a run of
        ``rounds`` rounds, beyond its K×K matrices (:meth:`pair_memory`) and its cluster
        models (``num_classes``: the dataset's classes): 0 for none (the default). The run
        file's size check and the memory check (three copies: live, in the snapshot a
        round may fall back to, and written) count it before the first round."""
        return 0

    @classmethod
    def evaluation_finetune(cls, params: Params, *, local_steps: int) -> int:
        """Local steps each evaluated client takes from its cluster's model, on its own train
        split and with the run's optimiser settings, before it is measured on its test split
        (the cluster's model itself is not changed): 0, none, by default. ``local_steps`` is
        ``train.local_steps``. The workers, the evaluation's placement and the capacity's
        cost estimate read it."""
        return 0

    @classmethod
    def start_cosine(cls, params: Params) -> float:
        """c of a term −c·cos(θ, θ_start) in every local training's loss, θ the client's
        model (all its parameters as one vector) and θ_start the model it started from
        (pFedGraph's pull toward its personalised model; a negative c pushes away): 0, none,
        by default. The workers' trainers read it."""
        return 0.0

    @classmethod
    def from_config(cls, federation: Federation, params: Params) -> ClusteringAlgorithm:
        """The algorithm for a run: by default ``cls(num_clients=..., clients_per_round=...,
        seed=..., params=params)``, with :attr:`federation` set to the run's facts."""
        facts = {"num_clients": federation.num_clients, "seed": federation.seed,
                 "clients_per_round": federation.clients_per_round}  # fmt: skip
        if _takes_params(cls):
            algorithm = cls(**facts, params=params)
        else:  # an __init__ that names its settings as keywords, the form before params
            algorithm = cls(**facts, **params.as_kwargs())
            algorithm.params = params
        algorithm.federation = federation
        return algorithm

    # -- the round ---------------------------------------------------------------------

    def plan_probe(self, round_index: int) -> ProbeRequest | None:
        """A probe to run before :meth:`plan`; none by default."""
        return None

    def update_probe(self, round_index: int, request: ProbeRequest, rows: np.ndarray) -> None:
        """The probe's answers: ``rows[i]`` is client ``request.clients[i]``'s row."""
        return None

    @abstractmethod
    def plan(self, round_index: int) -> RoundPlan:
        """Which clients train this round, from which cluster's model."""

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> RoundUpdate:
        """Take the round's reports (and the aggregated cluster models); return what changed."""
        return RoundUpdate()

    def every_member_plan(self, round_index: int) -> RoundPlan:
        """The plan of an algorithm whose :attr:`every_member_trains`: every member of every
        leaf trains from its leaf's model and returns its model (CFL's, FLCL's)."""
        train = {int(k): cid for cid, members in self.tree.leaves().items() for k in members}
        return RoundPlan(round=round_index, train=train, return_models=frozenset(train))

    def sample_clients(self, pool, size: int, rng: np.random.Generator | None = None, *,
                       own=None, priority=None, trainings: int = 1) -> np.ndarray:  # fmt: skip
        """``size`` distinct clients of ``pool`` (an int K: clients 0..K-1; or an array of
        client ids) for this round, in the order drawn, from ``rng`` (default ``self.rng``):
        chosen by the run's selection among the clients available this round, so fewer when
        fewer are available. Without [participation] it is ``rng.choice(pool, size,
        replace=False)``. Every cohort an algorithm samples goes through it: a selection
        strategy other than ``uniform`` refuses a plan that trains a client it did not
        choose.

        The algorithm states what it prefers, the selection decides
        (docs/participation.md): ``own`` is its own draw where that is not the
        uniform one (a callable of no argument giving client ids of ``pool``: FedGWC's
        priority sampling, a seeding round's every client), which the uniform selection
        returns as it is and FedCS schedules into the deadline; ``priority`` its weight of
        each client (a callable of an array of ids of ``pool``, giving weights of at least
        0), by which FedPNS multiplies its probabilities; ``trainings`` the models each
        client drawn trains (a soft plan's clusters), which FedCS's schedule counts."""
        return self.participation.draw(self.rng if rng is None else rng, pool, size, own=own,
                                       priority=priority, trainings=trainings)  # fmt: skip

    @classmethod
    def selection_refusal(cls, selection: str) -> str | None:
        """Why the selection strategy ``selection`` (``participation.selection``) cannot
        choose this algorithm's cohorts, in a few words (None: it can). The config refuses
        such a run before any work. By default: every strategy but ``uniform`` for an
        algorithm whose every member trains (no draw to choose in), FedPNS for soft
        membership (its optimal aggregation compares one model a client), and what
        :attr:`refused_selections` declares."""
        if selection == "uniform":
            return None
        if cls.every_member_trains:
            return ("it plans every member of its clusters every round: there is no draw "
                    "for the selection to choose in")  # fmt: skip
        if selection == "fedpns" and cls.membership == "largest weight":
            return ("its clients train several clusters' models (soft membership), and "
                    "FedPNS's optimal aggregation compares one model a client")  # fmt: skip
        return cls.refused_selections.get(selection)

    @classmethod
    def privacy_refusal(cls, params: Params) -> str | None:
        """Why client-level DP's noise, added to each cluster's aggregate, would not cover
        the models this algorithm makes with ``params`` (None: it does). By default what
        :attr:`models_from_clients` declares."""
        return cls.models_from_clients or None

    # -- newcomers ----------------------------------------------------------------------

    def newcomer_probe(self, clients: np.ndarray) -> ProbeRequest | None:
        """What the newcomers ``clients`` (ids K, K + 1, ... beyond the trained clients) are
        asked at an evaluation before :meth:`place_newcomers`: a probe of its client half
        (their train splits under models of its clusters), or None (the default)."""
        return None

    def place_newcomers(
        self, clients: np.ndarray, groups: np.ndarray, rows: np.ndarray | None
    ) -> NewcomerModels:
        """The model each newcomer of ``clients`` is evaluated on, by :attr:`newcomers`'
        rule, from the answers ``rows`` to :meth:`newcomer_probe` (None without one).
        ``groups`` are their ground-truth groups, for the oracle alone. It changes nothing
        of the algorithm's state: a newcomer is placed again at every evaluation."""
        raise NotImplementedError(f"{self.name} gives a newcomer no model")

    # -- the rest ----------------------------------------------------------------------

    def client_rows(self, clients: np.ndarray) -> np.ndarray | None:
        """[n, D] float64: the state rows of ``clients`` that its client half's
        :attr:`evaluation` op reads (None: none)."""
        return None

    def initial_models(self) -> dict[str, int]:
        """Which initialisation each starting cluster's model takes: 0 is the run's model
        (the same for every cluster, the default); another integer a model initialised
        from its own seed (IFCA's and FeSEM's distinct cluster models)."""
        return dict.fromkeys(self.tree.leaf_ids(), 0)

    def clusters(self) -> dict[str, np.ndarray]:
        """The leaf clusters: id -> member client ids (ascending), read from the tree."""
        return self.tree.leaves()

    def assignment(self) -> tuple[list[str], np.ndarray]:
        """(leaf ids, index of each client's leaf)."""
        return self.tree.assignment()

    def state_dict(self) -> dict:
        """What exact resumption needs besides the tree (arrays, numbers, nested dicts)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output; the tree is restored before this call."""
        return None


__all__ = [
    "ClientContext",
    "ProbeAbandoned",
    "ClientHalf",
    "Prepared",
    "ClientReports",
    "ClusteringAlgorithm",
    "FIXED_CLUSTER_COLUMNS",
    "Federation",
    "LOCAL_POOL",
    "NewcomerModels",
    "Params",
    "PooledTaskFailed",
    "ProbeRequest",
    "RecordTable",
    "ReportFigure",
    "Statistic",
    "RoundPlan",
    "RoundUpdate",
    "ServerPool",
    "Split",
    "pooled",
    "require",
    "setting",
]
