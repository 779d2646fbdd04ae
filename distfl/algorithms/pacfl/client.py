"""PACFL's client half: a client's row is its data basis (the probe ``"basis"``).

The worker hosting client k takes the truncated SVD of k's data matrix (train samples
flattened, features × samples) and returns the ``num_basis`` leading left singular vectors
as one flattened d × p row (:func:`distfl.algorithms.pacfl.data_basis`); only the row
travels.
"""

from __future__ import annotations

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.pacfl import data_basis


class PACFLClient(api.ClientHalf):
    """Answers ``"basis"``: ``args = (num_basis,)``; the broadcast model is not used."""

    def run(self, op, client, models, args) -> np.ndarray:
        if op != "basis":
            return super().run(op, client, models, args)
        (num_basis,) = args
        x = self.context.data(client).x_train.detach().cpu().double().numpy()
        return data_basis(x, int(num_basis)).reshape(-1)


__all__ = ["PACFLClient"]
