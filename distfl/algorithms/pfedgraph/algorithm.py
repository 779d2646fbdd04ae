"""pFedGraph's server half (Ye et al., ICML 2023; its public code MediaBrain-SJTU/pFedGraph,
``pytorch/pfedgraph_cosine.py`` and ``utils.py``, and EMD-CFL's port of it, ``fit_pfedgraph``).

Every client is a cluster of its own (a leaf "k", as ``local``'s): its model is its
personalised aggregate θ̄_k, the run's initial model θ⁰ until it first trains. A round:

1. ``clients_per_round`` clients S are drawn uniformly without replacement (the code trains
   every client by default);
2. each trains from its θ̄_k with the local loss ℓ − λ·cos(θ, θ̄_k) (``lam`` = 0.01; the
   paper's sign, a pull toward its aggregate; ``sign = "code"`` adds the term, as the
   public code does, pushing away) and sends its model θ_k;
3. the server computes d_ij = −cos(θ_i − θ⁰, θ_j − θ⁰) over S (the change of each model
   since the initial model; a cosine above 0.9 counts as 1) and, for each i, the weights
   a_i minimising α‖a − p‖² + Σ_j a_j d_ij over the simplex on S (p the clients' shares of
   S's samples; ``alpha`` = 0.8): the projection of p − d_i / (2α) onto the simplex, what
   the code's cvxpy problem solves;
4. each client's model becomes θ̄_i = Σ_j a_ij θ_j, where its next training starts and with
   which it is evaluated.

Each client's row of the graph and its aggregate are independent pieces, spread over the
ranks in a run of several (:meth:`ServerPool.map`), with the bits one process computes.

The round's graph is recorded in the table ``graph`` (a row per pair of S, the weight a_ij).
There are no clusters to score: ``membership = "none"`` (the table's "–").

Deviations (docs/algorithms.md): the local term is the cosine to the start of the training,
θ̄_k, as EMD-CFL's port and the code's ``pfedgraph_approx`` have it; the code's default
variant uses Σ_j a_ij cos(θ, θ_j) with the last round's trained models, which would keep P
more values for every client. The term applies from the first round (the code's from the
second, where θ̄ is θ⁰ in the first). Local work is the run's ``train`` settings (the
code: 200–400 steps of SGD, lr 0.01, momentum 0.9).
"""

from __future__ import annotations

from distfl.algorithms import api
from distfl.algorithms.common.graph_model import GraphModels, PFedGraphParams


@api.register
class PFedGraph(GraphModels):
    name = "pfedgraph"


__all__ = ["PFedGraph", "PFedGraphParams"]
