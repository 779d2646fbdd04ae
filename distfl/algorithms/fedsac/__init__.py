"""FedSaC (Yan, Wang, Ye et al., "Balancing Similarity and Complementarity for Federated
Learning", ICML 2024): pFedGraph's personalised aggregation with a second term in the
collaboration graph, the overlap of the clients' feature subspaces, so that a client
collaborates with those whose models are similar and whose features complement its own.

The modules: :mod:`~.algorithm` (the server half), :mod:`~.graph` (the complementarity and
the graph rows) and :mod:`~.client` (each trained model's feature basis, on the workers).
"""

from __future__ import annotations

from distfl.algorithms.fedsac.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.fedsac.algorithm import __all__ as __all__
