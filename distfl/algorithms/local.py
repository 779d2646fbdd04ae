"""Local training: each client trains alone, its own model, never aggregated (PFLlib's
``Local``, the lower reference every personalised method is compared with).

Every client is a cluster of its own, a root of the tree with the client's id as its id
("0", "1", ..., K - 1); every cluster's model starts as the run's one initial model (offset
0), as PFLlib's clients start from copies of one model. Each round ``clients_per_round``
clients are drawn uniformly without replacement, with the same generator (seed and stream)
as ``none`` (FedAvg), so that a Local run and a FedAvg run of one seed train the same
clients in every round; each trains ``train.local_steps`` steps from its own model, and the
aggregator makes that cluster's new model from its one member's update (with FedAvg the
client's model itself). A client that is never drawn keeps the initial model, and is
evaluated with it.

Where this differs from PFLlib's ``Local``: PFLlib counts local work in epochs
(``local_epochs``), here in steps (``train.local_steps``), as every algorithm of the run
does. The clustering metrics of K singleton clusters are what they are: the adjusted Rand
index against the true groups is 0 (no pair of clients is grouped), the Wasserstein
scores are undefined and recorded as missing.

The server holds K models (``held_models``): the runtime's memory check counts them and
refuses, before any work, a population whose models do not fit. ``/metrics/clusters`` has a
row per client trained in a round (``record_idle_clusters = False``), not one per client of
the run.
"""

from __future__ import annotations

from distfl.algorithms import api
from distfl.algorithms.common.plain import PerClientModels, client_id


@api.register
class Local(PerClientModels):
    name = "local"


__all__ = ["Local", "client_id"]
