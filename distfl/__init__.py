"""distfl: a cluster-scale emulator for clustered federated learning.

One rank is the federation's server; every other rank hosts a group of simulated
clients. See README.md for launching and configuration.
"""

__version__ = "0.1.0"
