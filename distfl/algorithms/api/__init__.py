"""What an algorithm's author implements and receives, as one namespace: an algorithm module
writes ``from distfl.algorithms import api`` and reads ``api.ClusteringAlgorithm``,
``api.RoundPlan``, ``@api.register``.

The parts: the interface (:mod:`~distfl.algorithms.api.base`: the server half, its plans,
reports and updates; :mod:`~distfl.algorithms.api.client_side`: the client half;
:mod:`~distfl.algorithms.api.declarations`: its tables, statistics and figures), the
server's pool of workers (:mod:`~distfl.algorithms.api.pool`) and the registry
(:mod:`~distfl.algorithms.api.registry`). An algorithm imports only this and
:mod:`distfl.algorithms.common` (an architecture test holds it to that)."""

from __future__ import annotations

from distfl.algorithms.api import base
from distfl.algorithms.api.base import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.api.declarations import SOFT_WEIGHTS_FIGURE, soft_weights_table
from distfl.algorithms.api.registry import register

__all__ = [*base.__all__, "SOFT_WEIGHTS_FIGURE", "register", "soft_weights_table"]
