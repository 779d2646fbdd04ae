"""No clustering: one global model trained by FedAvg (McMahan et al., AISTATS 2017).

Each round ``server.clients_per_round`` clients are drawn uniformly without replacement.
"""

from __future__ import annotations

from distfl.algorithms import api
from distfl.algorithms.common.plain import ROOT, GlobalModel


@api.register
class NoClustering(GlobalModel):
    name = "none"


__all__ = ["NoClustering", "ROOT"]
