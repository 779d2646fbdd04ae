"""pFedGraph (Ye, Ni, Wu, Wang, Chen, Wang, "Personalized Federated Learning with Inferred
Collaboration Graphs", ICML 2023): a model per client, aggregated with per-client weights
the server infers from the clients' model similarity and data sizes.

The module :mod:`~.algorithm` names it; its round is :mod:`distfl.algorithms.common.graph_model`
(the graph and the aggregation) over :mod:`distfl.algorithms.common.graph` (the per-row
optimisation, a projection onto the simplex), which FedSaC shares.
"""

from __future__ import annotations

from distfl.algorithms.pfedgraph.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.pfedgraph.algorithm import __all__ as __all__
