"""FedClust (Islam, Javaherian, Xu, Yuan, Chen, Tzeng, "FedClust: Optimizing Federated
Learning on Non-IID Data through Weight-Driven Client Clustering", arXiv:2403.04144, 2024):
one-shot clustering by the distances between the clients' final-layer weights after local
training from a common initialisation.

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (what the workers
compute for its probe).
"""

from __future__ import annotations

from distfl.algorithms.fedclust.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.fedclust.algorithm import __all__ as __all__
