"""What an algorithm's author implements and receives: the interface
(:mod:`~distfl.algorithms.api.base`: the server half, its plans, reports and updates,
:mod:`~distfl.algorithms.api.client_side`: the client half, and
:mod:`~distfl.algorithms.api.declarations`: its tables, statistics and figures), the
server's pool of workers (:mod:`~distfl.algorithms.api.pool`) and the registry
(:mod:`~distfl.algorithms.api.registry`). An algorithm imports only this and
:mod:`distfl.algorithms.common`."""
