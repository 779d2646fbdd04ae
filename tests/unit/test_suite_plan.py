"""``distfl suite`` planning: a suite-wide ``--set algorithm.KEY=V`` reaches only the jobs of
the listed algorithms that take KEY, a scenario's own algorithm keys stay with its
algorithm, and a KEY that none of the listed algorithms takes is refused before any job is
planned (ConfigError: exit 2, one line naming the key and the algorithms that take it)."""

from __future__ import annotations

import pytest

from distfl.errors import ConfigError
from distfl.tools.suite import algorithm_overrides, plan_jobs


def by_algorithm(jobs):
    return {job.algorithm: job for job in jobs}


def test_a_key_goes_only_to_the_algorithms_that_take_it(tmp_path):
    items = ["algorithm.db_threshold=1", "train.lr=0.2"]
    jobs = by_algorithm(plan_jobs(["digits-mixed"], ["fedgwc", "none"], [0], tmp_path, items))
    fedgwc, none = jobs["fedgwc"].config, jobs["none"].config
    assert fedgwc.algorithm.db_threshold == 1.0
    assert none.to_dict()["algorithm"] == {"name": "none"}
    with pytest.raises(AttributeError):
        _ = none.algorithm.db_threshold
    assert "algorithm.db_threshold=1" in jobs["fedgwc"].overrides
    assert "algorithm.db_threshold=1" not in jobs["none"].overrides
    assert fedgwc.train.lr == none.train.lr == 0.2  # the other items go to every job
    assert not any(tmp_path.iterdir())  # planning writes nothing


def test_a_key_of_two_algorithms_and_a_scenarios_own_keys(tmp_path):
    # the default preset names FedGWC with its own epsilon, patience and db_threshold
    algorithms = ["fedgwc", "emdcfl", "none"]
    jobs = by_algorithm(
        plan_jobs(["default"], algorithms, [0], tmp_path, ["algorithm.epsilon=0.5"])
    )
    fedgwc, emdcfl = jobs["fedgwc"].config.algorithm, jobs["emdcfl"].config.algorithm
    assert (fedgwc.epsilon, fedgwc.patience, fedgwc.db_threshold) == (0.5, 10, 0.5)
    assert emdcfl.epsilon == 0.5 and "patience" not in emdcfl.to_dict()
    assert jobs["none"].config.algorithm.to_dict() == {"name": "none"}


def test_a_former_key_name_goes_to_its_algorithm():
    shared = algorithm_overrides(["algorithm.emd_epsilon=0.1"], ["emdcfl", "fedgwc"])
    assert shared == {"emdcfl": ("algorithm.emd_epsilon=0.1",), "fedgwc": ()}


@pytest.mark.parametrize(
    "algorithms, key, owners",
    [(["none"], "eps1", "cfl"), (["none", "fedgwc"], "nope", "no algorithm takes it")],
)
def test_a_key_no_listed_algorithm_takes_is_refused(tmp_path, algorithms, key, owners):
    with pytest.raises(ConfigError) as exc:
        plan_jobs(["digits-mixed"], algorithms, [0], tmp_path, [f"algorithm.{key}=0.3"])
    message = str(exc.value)
    assert f"algorithm.{key}" in message and owners in message, message
    assert ", ".join(algorithms) in message and "\n" not in message
