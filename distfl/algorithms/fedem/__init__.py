"""FedEM (Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a
Mixture of Distributions", NeurIPS 2021): every client's data is a mixture of M shared
components; the server keeps M models and every client its mixture weights.

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (the E-step and the
mixture's evaluation, on the workers).
"""

from __future__ import annotations

from distfl.algorithms.fedem.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.fedem.algorithm import __all__ as __all__
