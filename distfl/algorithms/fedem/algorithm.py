"""FedEM's server half (Marfoq et al., NeurIPS 2021, Algorithm 1 and its public code).

The server keeps M component models ("0".."M-1", each from its own initialisation, as the
paper's learners ensemble) and each client's mixture weights π_k (M values, 1/M until the
client first trains). A round:

1. ``clients_per_round`` clients are drawn uniformly without replacement (the code's
   ``sample_clients``);
2. each receives the M models and its π_k, and runs the E-step on its train split
   (:func:`responsibilities`): q_im ∝ π_km · exp(−ℓ(h_m(x_i), y_i)), then the M-step of its
   weights, π_k ← mean_i q_i (the row it sends back);
3. it trains every component from the broadcast model with each sample's loss weighted by
   q_im (a batch's loss Σ_i q_im ℓ_i / b, the code's ``loss_vec @ weights / len``);
4. each component becomes the aggregator's weighted mean of its trainings, weight n_k.

A client is evaluated on its mixture: p(y | x) = Σ_m π_km softmax(h_m(x)), its loss −log
p(y | x) and its prediction the argmax (the code's ``evaluate_iterator``). Its cluster, for
the tree, the ARI and the per-cluster tables, is its largest weight (ties: the first
component); before it first trains, the first.

Its table ``weights`` holds, every round, each trained client's new π (a row per client
and component); the last row of a client is its weights at any later evaluation (a client
never trained has 1/M). ``distfl report`` draws them, clients by ground-truth group.

Deviations (docs/algorithms.md): with partial participation the code averages every
client's component, the unsampled ones' being the last global model, with weights n_k /
Σ_all n; distfl averages the sampled clients' trainings with weights n_k / Σ_sampled n (the
FedAvg mean of the paper's Algorithm 1); the two agree when every client trains. The
number of local steps, the batch size and the optimiser are the run's ``train`` settings.
"""

from __future__ import annotations

from distfl.algorithms import api
from distfl.algorithms.common.mixture import (
    ESTEP,
    MIXTURE,
    FedEMParams,
    Mixture,
    mixture_weights,
    responsibilities,
    weight_rows,
)


@api.register
class FedEM(Mixture):
    name = "fedem"


__all__ = [
    "ESTEP",
    "MIXTURE",
    "FedEM",
    "FedEMParams",
    "mixture_weights",
    "responsibilities",
    "weight_rows",
]
