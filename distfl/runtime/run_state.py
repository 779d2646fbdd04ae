"""The run's state: what a round changes, in one place.

:class:`RunState` holds the clusters' models, the record of the run file's tables (whose
length is the metrics' cursor), each client's last balanced accuracy, the clients that have
trained so far, the last completed round and the last exact sums' bytes per parameter, and
it reaches the state of the algorithm (which owns the cluster tree), the aggregator and the
selection strategy through their ``state_dict`` and ``load_state_dict``. What reads or
writes the state whole goes through it: the run file's /state (:meth:`RunState.state_dict`,
written by the checkpoint), a resume (:meth:`RunState.load`), and the copy of the last
completed round taken before each round (:meth:`RunState.snapshot`,
:meth:`RunState.put_back`; :mod:`distfl.runtime.snapshots`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from distfl.runfile.writer import storable

if TYPE_CHECKING:
    from distfl.algorithms import ClusteringAlgorithm
    from distfl.hierarchy import ClusterTree
    from distfl.participation.model import Participation
    from distfl.runfile.reader import RunFile
    from distfl.runfile.tables import Record
    from distfl.runtime.aggregation import ClusterAggregation


@dataclass
class RunState:
    algorithm: ClusteringAlgorithm
    aggregation: ClusterAggregation
    #: the selection strategy's state is the participation's (FedPNS's; none otherwise)
    participation: Participation
    models: dict[str, torch.Tensor]
    #: the per-row tables of the run file (distfl.runfile.layout.TABLES)
    record: Record
    client_accuracy: np.ndarray
    #: whether :attr:`trained_ids` is kept in /state (``eval.coverage``)
    coverage: bool = False
    #: the clients that have trained so far, ascending (``eval.coverage`` only)
    trained_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rounds_done: int = 0
    #: bytes per model parameter of the last exact sums reduce (each rank's share)
    sum_bytes_per_param: float = 0.0
    #: the round this state holds completed, its record too (None while a round changes
    #: it, or before the loop begins): what a failure may write as it is
    complete_round: int | None = None

    def begin_round(self) -> None:
        """A round starts changing the state: it holds no completed round until
        :meth:`complete` (or :meth:`put_back`)."""
        self.complete_round = None

    def complete(self, round_index: int) -> None:
        """The state holds round ``round_index`` completed, its record too."""
        self.complete_round = round_index

    @property
    def tree(self) -> ClusterTree:
        """The cluster tree, the algorithm's: read here, never copied."""
        return self.algorithm.tree

    @property
    def selects(self) -> bool:
        """Whether the selection strategy keeps a state in the run file (FedPNS's)."""
        return self.participation.selection.keeps_state

    def state_dict(self) -> dict:
        """The run file's /state."""
        ids = sorted(self.models)
        return {
            "round": self.rounds_done,
            "model_ids": ids,
            "models": torch.stack([self.models[c] for c in ids]).numpy(),
            "client_accuracy": self.client_accuracy.copy(),
            **({"trained_ids": self.trained_ids.copy()} if self.coverage else {}),
            "algorithm": storable(self.algorithm.state_dict()),
            "aggregator": storable(self.aggregation.state_dict()),
            **({"selection": storable(self.participation.state_dict())} if self.selects else {}),
        }

    def load(self, saved: RunFile) -> None:
        """Continue from a run file's /state and hierarchy (its tables are the record's:
        the server builds that from them)."""
        st = saved.state
        self.rounds_done = int(st["round"])
        ids = [str(i) for i in st["model_ids"]]
        self.models = {
            cid: torch.from_numpy(np.array(st["models"][i])) for i, cid in enumerate(ids)
        }
        self.tree.restore(saved.hierarchy)
        self.algorithm.load_state_dict(st["algorithm"])
        self.client_accuracy = np.array(st["client_accuracy"], dtype=np.float64)
        if self.coverage:
            self.trained_ids = np.asarray(st["trained_ids"], dtype=np.int64).reshape(-1)
        self.aggregation.load_state_dict(st.get("aggregator", {}))
        if self.selects:
            self.participation.load_state_dict(st["selection"])
        self.sum_bytes_per_param = saved.sum_bytes_per_param

    def snapshot(self) -> dict:
        """A copy of everything a round changes, for :meth:`put_back`."""
        return {
            "round": self.rounds_done,
            "models": {c: m.clone() for c, m in self.models.items()},
            "algorithm": copy.deepcopy(self.algorithm.state_dict()),
            "aggregator": copy.deepcopy(self.aggregation.state_dict()),
            "selection": copy.deepcopy(self.participation.state_dict()),
            "client_accuracy": self.client_accuracy.copy(),
            "trained_ids": self.trained_ids,  # (replaced, never changed in place)
            "hierarchy": copy.deepcopy(self.tree.to_nodes()),
            "record": self.record.mark(),
            "sum_bytes_per_param": self.sum_bytes_per_param,
        }

    def put_back(self, saved: dict) -> None:
        """The state as :meth:`snapshot` copied it: that round completed."""
        self.rounds_done = saved["round"]
        self.models = saved["models"]
        self.algorithm.load_state_dict(saved["algorithm"])
        self.aggregation.load_state_dict(saved["aggregator"])
        self.participation.load_state_dict(saved["selection"])
        self.client_accuracy = saved["client_accuracy"]
        self.trained_ids = saved["trained_ids"]
        self.tree.restore(saved["hierarchy"])
        self.record.rollback(saved["record"])
        self.sum_bytes_per_param = saved["sum_bytes_per_param"]
        self.complete_round = saved["round"]  # (only once every part is back)


__all__ = ["RunState"]
