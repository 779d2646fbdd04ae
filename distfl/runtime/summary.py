"""What a run did, in numbers, for the components' ``at_end`` and the summary's lines."""

from __future__ import annotations

import time

import numpy as np

from distfl.hierarchy import clusters_found
from distfl.metrics import at_last_evaluation


def run_summary(server, first: int, accuracy: float) -> dict:
    """What the run did, for the components' ``at_end`` (the summary's lines): the
    server's rounds from ``first``, the last evaluated ``accuracy``."""
    wall = server.timing.since_loop(time.perf_counter())
    done = server.state.rounds_done
    ran = done - first + 1
    metrics = server.state.record.metrics
    return {
        "rounds": done,
        "rounds_this_run": ran,
        "accuracy": accuracy,
        # the lowest and the 10th percentile of the clients' accuracies of that evaluation
        **{
            key: at_last_evaluation(metrics["accuracy"], metrics[key])
            for key in ("accuracy_worst", "accuracy_p10")
        },
        "num_clusters": clusters_found(server.tree.assignment()[1]),
        "num_leaves": len(server.state.models),
        "wall_s": wall,
        "client_steps_per_s": server.timing.client_steps / max(wall, 1e-9),
        "bytes_per_round": server.comm.bytes_moved / max(ran, 1),
        "federation_bytes_per_round": (
            float(np.mean(metrics["federation_bytes"][-ran:])) if ran else 0.0
        ),
        "stopped_by": server.stop.name if done < server.config.run.rounds else None,
    }


__all__ = ["run_summary"]
