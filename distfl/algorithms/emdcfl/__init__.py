"""EMD-CFL (Zhang, Williams, Toni): one-shot clustering by Wasserstein distances between
clients' data in the embedding space of each client's locally trained model.

The modules: :mod:`~.algorithm` (the server half), :mod:`~.client` (what the workers
compute: the embeddings and the distances) and :mod:`~.figures` (its figures in
``distfl report``).
"""

from __future__ import annotations

from distfl.algorithms.emdcfl.algorithm import (
    CONV_SAMPLE_SECONDS,
    EMDCFL,
    ENTRY_SECONDS,
    MAX_LOCAL_STEPS,
    MLP_MAC_SECONDS,
    MLP_SAMPLE_SECONDS,
    PAIR_SECONDS,
    ROOT,
    EMDCFLParams,
    OneShotCost,
    anchor_adjacency,
    config_cost,
    draw_anchors,
    embed_size,
    mutual_adjacency,
    neighbourhood_clusters,
    one_shot_cost,
    pair_seconds,
    projected_dim,
    projection,
    protocol_bytes,
    refusal,
    sample_seconds,
    wasserstein1,
)

__all__ = [
    "CONV_SAMPLE_SECONDS",
    "EMDCFL",
    "EMDCFLParams",
    "ENTRY_SECONDS",
    "MAX_LOCAL_STEPS",
    "MLP_MAC_SECONDS",
    "MLP_SAMPLE_SECONDS",
    "OneShotCost",
    "PAIR_SECONDS",
    "ROOT",
    "anchor_adjacency",
    "config_cost",
    "draw_anchors",
    "embed_size",
    "mutual_adjacency",
    "neighbourhood_clusters",
    "one_shot_cost",
    "pair_seconds",
    "projected_dim",
    "projection",
    "protocol_bytes",
    "refusal",
    "sample_seconds",
    "wasserstein1",
]
