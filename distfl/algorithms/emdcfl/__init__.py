"""EMD-CFL (Zhang, Williams, Toni): one-shot clustering by Wasserstein distances between
clients' data in the embedding space of each client's locally trained model.

The modules: :mod:`~.algorithm` (the server half), :mod:`~.client` (what the workers
compute: the embeddings and the distances) and :mod:`~.figures` (its figures in
``distfl report``).
"""

from __future__ import annotations

from distfl.algorithms.emdcfl.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.emdcfl.algorithm import __all__ as __all__
