"""FedSoft (Ruan and Joe-Wong, "FedSoft: Soft Clustered Federated Learning with Proximal
Local Updating", AAAI 2022): the server keeps S cluster models; each client keeps a
personal model, trained with a proximal pull toward its mix of the cluster models, and each
cluster model is the mean of the personal models weighted by the clients' importance for it.

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (the importance
estimate, the start of a client's training and its evaluation, on the workers).
"""

from __future__ import annotations

from distfl.algorithms.fedsoft.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.fedsoft.algorithm import __all__ as __all__
