"""distfl: a cluster-scale emulator for clustered federated learning.

One rank is the federation's server; every other rank hosts a group of simulated
clients. See README.md for launching and configuration.

From Python (:mod:`distfl.api`; docs/python-api.md walks through it)::

    import distfl

    run = distfl.open("distfl-run.h5")   # a run file, read-only
    run = distfl.run(out="run.h5")       # a one-process run in this process
    table = distfl.suite(["rotated"], out="suite")

``import distfl`` imports nothing else: the API is loaded at its first use, and torch only
when a run starts.
"""

__version__ = "0.1.0"

#: what ``distfl.X`` gives, loaded from :mod:`distfl.api` at first use (not by
#: ``from distfl import *``, which would hide the built-in ``open``)
_API = ("open", "run", "suite", "Run")


def __getattr__(name: str):
    if name in _API:
        from distfl import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'distfl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
