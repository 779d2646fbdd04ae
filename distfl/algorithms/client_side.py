"""An algorithm's client half: what it computes on the workers beyond training (a probe),
a :class:`ClientHalf` subclass named by :attr:`ClusteringAlgorithm.client
<distfl.algorithms.base.ClusteringAlgorithm.client>`, given a :class:`ClientContext` by
its worker."""

from __future__ import annotations

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


class ClientHalf:
    """The part of an algorithm that runs on the workers: it answers probes. One instance
    per worker, built the first time the algorithm probes."""

    def __init__(self, params: Params, context: ClientContext):
        self.params = params
        self.context = context

    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        """Client ``client``'s row for probe ``op`` (float64, the request's width);
        ``models`` [M, P] are the broadcast models of the request's clusters."""
        raise NotImplementedError(f"{type(self).__name__} does not answer probe {op!r}")


__all__ = ["ClientContext", "ClientHalf", "ProbeAbandoned"]
