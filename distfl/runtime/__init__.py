"""The round protocol: :mod:`~distfl.runtime.roles` starts a rank in its role, the server
(:mod:`~distfl.runtime.server`, rank 0) plans and aggregates, the workers
(:mod:`~distfl.runtime.worker`) train, and :mod:`~distfl.runtime.protocol` is the step both
sides speak. The runtime never knows which algorithm runs."""

from distfl.runtime.roles import run

__all__ = ["run"]
