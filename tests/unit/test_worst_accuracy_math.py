"""The worst client's and the 10th-percentile balanced accuracy of an evaluation
(:func:`distfl.metrics.low_tail`): hand-computed values on small sets, and Python's own
``statistics.quantiles`` (method "inclusive", the same definition, computed another way)
on random ones; a client without test samples (NaN) counts for neither."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from distfl.metrics import (
    LOW_PERCENTILE,
    at_last_evaluation,
    balanced_accuracy,
    federation_mean,
    low_tail,
)


def inclusive_p10(values) -> float:
    """The 10th percentile by Python's standard library (n >= 2)."""
    return statistics.quantiles(values, n=100 // LOW_PERCENTILE, method="inclusive")[0]


def test_the_percentile_is_the_tenth():
    assert LOW_PERCENTILE == 10


def test_five_clients_by_hand():
    # sorted 0.2 0.4 0.5 0.7 0.9; position 0.1 * 4 = 0.4 between 0.2 and 0.4
    worst, p10 = low_tail(np.array([0.9, 0.2, 0.5, 0.7, 0.4]))
    assert worst == 0.2
    assert p10 == pytest.approx(0.2 + 0.4 * (0.4 - 0.2), abs=1e-15)
    assert p10 == pytest.approx(0.28, abs=1e-15)


def test_one_client_is_its_own_worst_and_percentile():
    assert low_tail(np.array([0.37])) == (0.37, 0.37)


def test_ties():
    # sorted 0.5 0.5 0.5 0.8: position 0.3 between two equal values
    assert low_tail(np.array([0.8, 0.5, 0.5, 0.5])) == (0.5, 0.5)
    # every client alike
    assert low_tail(np.full(7, 0.25)) == (0.25, 0.25)
    # two clients at the bottom tied, position 0.1 * 10 = 1: the second value itself
    values = np.array([0.0, 1.0, 0.0, 0.6, 0.9, 0.3, 0.7, 0.8, 0.65, 0.95, 1.0])
    assert low_tail(values) == (0.0, 0.0)


def test_a_whole_position_takes_the_value_itself():
    # 11 clients: position 0.1 * 10 = 1 exactly, the second lowest with no interpolation
    values = np.linspace(0.0, 1.0, 11)[::-1]
    worst, p10 = low_tail(values)
    assert (worst, p10) == (0.0, float(np.sort(values)[1]))


def test_a_client_without_test_samples_counts_for_neither():
    no_tests = balanced_accuracy(np.array([], dtype=int), np.array([], dtype=int))
    assert math.isnan(no_tests)
    # as the mean does: over the clients that have a value (0.3 and 0.6: position 0.1)
    values = np.array([no_tests, 0.6, 0.3])
    worst, p10 = low_tail(values)
    assert worst == 0.3
    assert p10 == pytest.approx(0.3 + 0.1 * (0.6 - 0.3), abs=1e-15)
    assert federation_mean(values) == pytest.approx(0.45)


def test_no_client_with_a_value_is_no_result():
    for values in (np.array([]), np.array([math.nan]), np.array([math.nan, math.nan])):
        worst, p10 = low_tail(values)
        assert math.isnan(worst) and math.isnan(p10)


@pytest.mark.parametrize("n", [2, 3, 4, 9, 10, 11, 12, 19, 31, 40, 97, 1000])
def test_random_sets_against_the_standard_library(n):
    rng = np.random.default_rng(n)
    values = rng.random(n)
    values[rng.random(n) < 0.3] = np.round(values[0], 1)  # ties
    worst, p10 = low_tail(values)
    assert worst == min(values.tolist())
    assert p10 == pytest.approx(inclusive_p10(values.tolist()), rel=1e-12, abs=1e-15)
    assert worst <= p10 <= float(np.median(values))
    # the order of the clients does not matter, to the bit
    assert low_tail(values[rng.permutation(n)]) == (worst, p10)


def test_the_value_at_the_last_evaluation():
    accuracy = [math.nan, 0.5, math.nan, 0.7, math.nan]
    worst = [math.nan, 0.1, math.nan, 0.2, math.nan]
    assert at_last_evaluation(accuracy, worst) == 0.2
    # the last evaluation's value even when it is NaN (a file written before the column)
    assert math.isnan(at_last_evaluation(accuracy, [math.nan, 0.1, math.nan, math.nan, 0.3]))
    assert math.isnan(at_last_evaluation([math.nan, math.nan], [0.1, 0.2]))  # no evaluation
    assert math.isnan(at_last_evaluation([0.5], []))  # no such column
