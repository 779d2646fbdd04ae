"""CFL: Clustered Federated Learning (Sattler, Müller, Samek, IEEE TNNLS 2020).

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.figures` (its
figures in ``distfl report``).
"""

from __future__ import annotations

from distfl.algorithms.cfl.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.cfl.algorithm import __all__ as __all__
