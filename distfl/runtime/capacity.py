"""Whether a population fits in memory, decided before any rank allocates it.

Every rank holds a description of every client (a few numbers per client and class: see
:class:`~distfl.data.Population`) and rank 0 keeps per-client arrays (accuracies, sample
counts, the cluster assignment, the algorithm's per-client state); an algorithm that keeps
K×K matrices adds its ``pair_bytes`` per pair of clients. A population
whose estimate exceeds the memory the machine has available is refused with one line
that says how many clients fit.
"""

from __future__ import annotations

import math
import os

from distfl.algorithms import algorithm_class
from distfl.config import Config
from distfl.errors import ConfigError

#: classes of each dataset (the population's description is [K, C])
NUM_CLASSES = {
    "digits": 10, "mnist5k": 10, "mnist": 10, "cifar10": 10, "cifar100": 100, "femnist": 62,
    "gaussian": 2,
}  # fmt: skip
#: rank 0's per-client arrays and bookkeeping (evaluation maps, assignments, algorithm
#: state), a generous estimate
BYTES_PER_CLIENT = 320
#: per client and class: the population's quota and pool start (int32 each), and the
#: class counts the run file records (int64)
BYTES_PER_CLASS = 16


def population_bytes(config: Config) -> tuple[int, int, int]:
    """(bytes estimated for ``data.num_clients`` clients on the busiest rank, bytes per
    client, bytes per pair of clients)."""
    K = config.data.num_clients
    per_client = BYTES_PER_CLIENT + BYTES_PER_CLASS * NUM_CLASSES.get(config.data.dataset, 10)
    per_pair = algorithm_class(config.algorithm.name).pair_bytes
    return K * per_client + K * K * per_pair, per_client, per_pair


def available_bytes() -> int | None:
    """Memory available to new allocations now (Linux: MemAvailable), else the physical
    memory; None when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def fitting_clients(budget: int, per_client: int, per_pair: int) -> int:
    """The largest K with K·per_client + K²·per_pair <= budget."""
    if per_pair == 0:
        return budget // per_client
    a, b = per_pair, per_client
    return int((-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a))


def check_population(config: Config, available: int | None) -> None:
    """Refuse (ConfigError, exit 2) a population that cannot fit in ``available`` bytes."""
    if available is None:
        return
    need, per_client, per_pair = population_bytes(config)
    if need <= available:
        return
    K = config.data.num_clients
    fits = fitting_clients(available, per_client, per_pair)
    if per_pair and K * K * per_pair > K * per_client:
        why = (
            f"algorithm {config.algorithm.name} keeps K×K matrices ({per_pair} bytes per pair "
            f"of clients), {_gib(need)} for {K:,} clients"
        )
    else:
        why = (
            f"the population's per-client state (about {per_client} bytes per client on "
            f"every rank) needs {_gib(need)}"
        )
    raise ConfigError(
        f"data.num_clients = {K}: {why}, more than the {_gib(available)} this machine has "
        f"available; at most about {fits:,} clients fit"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


__all__ = ["available_bytes", "check_population", "fitting_clients", "population_bytes"]
