"""An algorithm's client half: what it computes on the workers beyond plain training (a
probe, a preparation of its client's training, an evaluation of its own), a
:class:`ClientHalf` subclass named by :attr:`ClusteringAlgorithm.client
<distfl.algorithms.api.base.ClusteringAlgorithm.client>`, given a :class:`ClientContext` by
its worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from distfl.settings import Params

if TYPE_CHECKING:  # the client half runs on workers, where torch is loaded anyway
    import torch


class ClientContext(Protocol):
    """What a worker offers a client half."""

    #: the run's config
    config: Any
    #: where the worker's clients train
    device: torch.device
    #: a model of the run's architecture on ``device``, free to load any flat state into
    model: torch.nn.Module

    def data(self, client: int) -> Any:
        """Client ``client``'s data (:class:`distfl.data.ClientData`), whichever worker
        hosts it: every rank holds the dataset."""

    def stopping(self) -> bool:
        """Whether a stop signal came while the algorithm's probe may be given up
        (``probe_abandonable``): long work in a row (local training) checks it between
        steps and raises :class:`ProbeAbandoned`, and the worker leaves the row."""


class ProbeAbandoned(Exception):
    """Raised inside a client half's row when :meth:`ClientContext.stopping` says so: the
    worker leaves the row, and the run stops after the previous round."""


@dataclass
class Prepared:
    """A client's preparation of its trainings (:meth:`ClientHalf.prepare`): the row that
    goes back to the server, and, if not None, the weight of each of its train samples in
    each of its trainings (float [trainings, n_train], in the order of the models it trains,
    ascending model index): a training then minimises Σ_i w_i ℓ_i / b over each batch of b
    samples instead of the batch's mean loss.

    ``start`` (float32 [P], if not None) is the model the client's training starts from in
    place of its cluster's: the client then trains once, and that one model enters the
    aggregate of each cluster it was planned to train, with its weight there, as the change
    from that cluster's model (FedSoft's personal model). ``pull`` (float32 [P], with
    ``start``) adds (``pull_mu``/2)‖θ − pull‖² to every step's loss (FedSoft's proximal
    term toward the client's mixture of the cluster models)."""

    row: Any
    sample_weights: Any = None
    start: Any = None
    pull: Any = None
    pull_mu: float = 0.0


class ClientHalf:
    """The part of an algorithm that runs on the workers: it answers probes, prepares a
    client's training and, for an algorithm whose evaluation is its own, evaluates a
    client. One instance per worker, built the first time it is needed."""

    def __init__(self, params: Params, context: ClientContext):
        self.params = params
        self.context = context

    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        """Client ``client``'s row for probe ``op`` (float64, the request's width);
        ``models`` [M, P] are the broadcast models of the request's clusters."""
        raise NotImplementedError(f"{type(self).__name__} does not answer probe {op!r}")

    def prepare(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> Prepared | np.ndarray:
        """Client ``client``'s preparation ``op`` (:attr:`RoundPlan.prepare
        <distfl.algorithms.api.base.RoundPlan.prepare>`) before it trains: ``models`` [M, P]
        are the round's broadcast models (every cluster of the plan, sorted), ``state`` the
        client's row of :attr:`RoundPlan.client_state` (float64, empty without one). A
        :class:`Prepared` (its row, and per-sample weights), or the row alone."""
        raise NotImplementedError(f"{type(self).__name__} does not prepare {op!r}")

    def evaluate(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> tuple[float, float, float]:
        """Client ``client``'s (balanced accuracy, accuracy, mean loss) on its test split
        under the algorithm's own evaluation ``op`` (:attr:`ClusteringAlgorithm.evaluation
        <distfl.algorithms.api.base.ClusteringAlgorithm.evaluation>`): ``models`` [M, P] are
        every leaf's model (sorted ids), ``state`` its row of the algorithm's
        :meth:`~distfl.algorithms.api.base.ClusteringAlgorithm.client_rows`."""
        raise NotImplementedError(f"{type(self).__name__} does not evaluate {op!r}")

    def after(self, op: str, client: int, model: torch.Tensor, state: np.ndarray) -> np.ndarray:
        """Client ``client``'s row for op ``op`` after its training (:attr:`RoundPlan.after
        <distfl.algorithms.api.base.RoundPlan.after>`): ``model`` [P] is the model it trained
        (its first training's), ``state`` its row of :attr:`RoundPlan.client_state`
        (float64, empty without one)."""
        raise NotImplementedError(f"{type(self).__name__} answers nothing after training ({op!r})")


__all__ = ["ClientContext", "ClientHalf", "Prepared", "ProbeAbandoned"]
