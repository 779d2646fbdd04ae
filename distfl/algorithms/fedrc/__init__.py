"""FedRC (Guo, Tang, Lin, "FedRC: Tackling Diverse Distribution Shifts Challenge in Federated
Learning by Robust Clustering", ICML 2024): FedEM's mixture with a robust E-step that divides
out each cluster's label distribution.

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (its E-step, on the
workers; the mixture's evaluation is FedEM's).
"""

from __future__ import annotations

from distfl.algorithms.fedrc.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.fedrc.algorithm import __all__ as __all__
