"""What algorithms share: k-means and its start (:mod:`~distfl.algorithms.common.kmeans`),
agglomerative clustering (:mod:`~distfl.algorithms.common.agglomerative`), the one-shot
methods' round (:mod:`~distfl.algorithms.common.oneshot`), models of their own
(:mod:`~distfl.algorithms.common.models_of_own`), one global model and a model per client
(:mod:`~distfl.algorithms.common.plain`), the mixture of FedEM and its variants
(:mod:`~distfl.algorithms.common.mixture`), graph aggregation
(:mod:`~distfl.algorithms.common.graph`) and the client halves' shared steps (the modules
ending in ``_client``). An algorithm imports only this and :mod:`distfl.algorithms.api`;
nothing here imports an algorithm."""
