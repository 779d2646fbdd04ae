"""Communication complexity from a run's tables: the first round whose loss reaches a
target, the federation bytes summed through it and the virtual clock at its end, per run
and per cluster; and the FLCL paper's Fig. 1 pool (rotations within [0, π/2))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distfl.datasets.gaussian import client_parameters
from distfl.metrics.complexity import clusters_to_target, first_reaching, to_target

NAN = math.nan


def test_the_first_round_at_or_below_the_target():
    rounds = [1, 2, 3, 4, 5, 6]
    losses = [NAN, 0.9, NAN, 0.3, 0.2, 0.35]
    assert first_reaching(rounds, losses, 0.3) == 4  # at the target counts
    assert first_reaching(rounds, losses, 0.25) == 5
    assert first_reaching(rounds, losses, 0.1) is None
    assert first_reaching(rounds, [NAN] * 6, 1.0) is None


def test_rounds_bytes_and_simulated_seconds_to_the_target():
    metrics = {
        "round": np.array([1, 2, 3, 4]),
        "test_loss": np.array([NAN, 0.5, NAN, 0.25]),
        "federation_bytes": np.array([100, 200, 300, 400]),
        "sim_elapsed_s": np.array([1.5, 3.0, 4.0, 7.5]),
    }
    assert to_target(metrics, 0.3) == {"rounds": 4, "bytes": 1000, "sim_s": 7.5}
    assert to_target(metrics, 0.5) == {"rounds": 2, "bytes": 300, "sim_s": 3.0}
    never = {"rounds": None, "bytes": None, "sim_s": None}
    assert to_target(metrics, 0.1) == never and to_target(metrics, 0.0) == never
    no_clock = {**metrics, "sim_elapsed_s": np.full(4, NAN)}
    assert to_target(no_clock, 0.3) == {"rounds": 4, "bytes": 1000, "sim_s": None}


def test_each_cluster_to_the_target():
    evaluation = {
        "round": np.array([2, 2, 4, 4, 4]),
        "cluster": np.array(["0", "1", "0", "1", "2"], dtype=object),
        "test_loss": np.array([0.4, 0.2, 0.3, 0.1, 0.9]),
    }
    assert clusters_to_target(evaluation, 0.3) == {"0": 4, "1": 2, "2": None}
    assert clusters_to_target(evaluation, 0.0) == {}


def test_the_fig1_pool_has_no_pair_of_means_at_a_right_angle_or_more():
    """rotation_span ½: every pair of clients' means has a positive inner product; the
    paper's span 1 has pairs at more than π/2 (the Fig. 2 pool); the rest of a client's
    parameters (σ², the radius) is the same whatever the span."""
    unit = lambda span: np.array(  # noqa: E731
        [client_parameters(k, 3, 4, span)[0] for k in range(400)]
    )
    for span, positive in ((0.5, True), (1.0, False)):
        m = unit(span)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        assert ((m @ m.T).min() > 0) == positive
    half, whole = client_parameters(7, 3, 4, 0.5), client_parameters(7, 3, 4, 1.0)
    assert half[1] == whole[1]
    assert np.linalg.norm(half[0]) == pytest.approx(np.linalg.norm(whole[0]), rel=1e-12)
    assert np.array_equal(client_parameters(7, 3, 4)[0], whole[0])  # the default is span 1
