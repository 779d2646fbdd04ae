"""Server aggregators: turn the reduced sums of a cluster into its new model.

FedAvg (McMahan et al., AISTATS 2017): the new model is the sample-weighted mean of the
clients' updated models, applied as the weighted mean update added to the old model.
"""

from __future__ import annotations

import torch


def fedavg(model: torch.Tensor, delta_sum: torch.Tensor, weight_sum: int) -> torch.Tensor:
    """model + delta_sum / weight_sum, in float64, returned as float32.

    ``delta_sum`` is Σ_k n_k (θ_k - θ), exact, as float64; with no participant the model
    is returned unchanged."""
    if weight_sum <= 0:
        return model.clone()
    return (model.to(torch.float64) + delta_sum / float(weight_sum)).to(torch.float32)


AGGREGATORS = {"fedavg": fedavg}
