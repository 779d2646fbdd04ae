"""PACFL (Vahidian, Morafah, Wang, Kungurtsev, Chen, Shah, Lin, "Efficient Distribution
Similarity Identification in Clustered Federated Learning via Principal Angles Between
Client Data Subspaces", AAAI 2023): one-shot clustering by the principal angles between the
subspaces of the clients' data.

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (what the workers
compute for its probe).
"""

from __future__ import annotations

from distfl.algorithms.pacfl.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.pacfl.algorithm import __all__ as __all__
