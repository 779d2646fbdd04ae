"""CFL-GP, clustered federated learning via gradient-based partitioning (Kim, Kim, de Veciana,
"Clustered Federated Learning via Gradient-based Partitioning", ICML 2024, PMLR 235:
24137-24193; reference code github.com/Heasung-Kim/clustered-federated-learning-via-
gradient-based-partitioning).

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (what the workers
compute for its probe).
"""

from __future__ import annotations

from distfl.algorithms.cflgp.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.cflgp.algorithm import __all__ as __all__
