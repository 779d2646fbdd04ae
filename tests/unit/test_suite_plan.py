"""``distfl suite`` planning: a suite-wide ``--set algorithm.KEY=V`` reaches only the jobs of
the listed algorithms that take KEY, a scenario's own algorithm keys stay with its
algorithm, and a KEY that none of the listed algorithms takes is refused before any job is
planned (ConfigError: exit 2, one line naming the key and the algorithms that take it)."""

from __future__ import annotations

import pytest

from distfl.errors import ConfigError, UserError
from distfl.tools.suite import algorithm_overrides, given_clusters_line, plan_jobs


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
    assert (fedgwc.epsilon, fedgwc.patience, fedgwc.stable_tests) == (0.5, 10, 2)
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


def test_a_variant_is_an_algorithm_with_settings_of_its_own(tmp_path):
    """FedGWC with the tuned settings of the default preset and with the paper's, in one
    suite: the variant's keys come after the suite-wide items, its name names the run file
    and the table's row; EMD-CFL takes the suite-wide epsilon, the variant its own."""
    keys = "db_threshold=1,epsilon=1e-5,patience=1,stable_tests=1,reference_draws=0"
    paper = f"fedgwc_paper=fedgwc:{keys}"
    jobs = by_algorithm(
        plan_jobs(
            ["default"],
            ["fedgwc", "fedgwc_paper", "emdcfl"],
            [0],
            tmp_path,
            ["algorithm.epsilon=0.2"],
            [paper],
        )  # fmt: skip
    )
    tuned, mine, emd = (jobs[a] for a in ("fedgwc", "fedgwc_paper", "emdcfl"))
    assert (tuned.config.algorithm.reference_draws, tuned.config.algorithm.patience) == (15, 10)
    assert tuned.config.algorithm.epsilon == 0.2
    p = mine.config.algorithm
    assert (p.name, p.db_threshold, p.epsilon, p.patience) == ("fedgwc", 1.0, 1e-5, 1)
    assert (p.stable_tests, p.reference_draws) == (1, 0)  # the paper's test alone
    assert emd.config.algorithm.epsilon == 0.2
    assert mine.out.name == "default--fedgwc_paper--s0.h5"
    assert (mine.name, tuned.name) == ("fedgwc_paper", "fedgwc")
    assert mine.label == "default fedgwc_paper seed 0"


@pytest.mark.parametrize(
    "variants, algorithms, needle",
    [
        (["fedgwc_paper"], ["fedgwc_paper"], "expected NAME=ALGORITHM:KEY=VALUE"),
        (["Paper=fedgwc:beta=1"], ["none"], "expected NAME=ALGORITHM"),
        (["p=fedgwc:algorithm.beta=1"], ["p"], "without 'algorithm.'"),
        (["ifca=fedgwc:beta=1"], ["ifca"], "already an algorithm's name"),
        (["p=fedgwc:beta=1", "p=cfl:eps1=1"], ["p"], "already another variant's name"),
        (["p=nosuch:beta=1"], ["p"], "'nosuch' is not an algorithm"),
        (["p=fedgwc:beta=1"], ["none"], "'p' is not listed in --algorithms"),
        (["p=fedgwc:beta=1"], ["q"], "or a --variant's name (p)"),
        (["p=fedgwc:nope=1"], ["p"], "unknown key algorithm.nope"),
    ],
)
def test_bad_variants_are_refused_before_anything_runs(tmp_path, variants, algorithms, needle):
    from distfl.errors import UserError

    with pytest.raises(UserError) as exc:  # ConfigError is a UserError: both exit 2
        plan_jobs(["digits-mixed"], algorithms, [0], tmp_path, [], variants)
    assert needle in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    assert not any(tmp_path.iterdir())


def test_one_global_model_has_one_name_fedavg(tmp_path):
    """``none`` (one global model) is named by its aggregator in the run files as in the
    tables (``fedavg``, or ``fedavgm`` with that aggregator); ``--algorithms fedavg`` is the
    same job; a file a suite wrote before under ``--none--`` is the job's file while no
    ``--fedavg--`` file exists, so that a finished run is kept, not run again."""
    (job,) = plan_jobs(["digits-mixed"], ["none"], [0], tmp_path, [])
    assert job.out.name == "digits-mixed--fedavg--s0.h5" and job.name == "fedavg"
    assert job.config.run.out == str(job.out)
    (alias,) = plan_jobs(["digits-mixed"], ["fedavg"], [0], tmp_path, [])
    assert (alias.algorithm, alias.out, alias.config) == ("none", job.out, job.config)
    (momentum,) = plan_jobs(["digits-mixed"], ["none"], [0], tmp_path,
                            ['server.aggregator="fedavgm"'])  # fmt: skip
    assert momentum.out.name == "digits-mixed--fedavgm--s0.h5"
    (tmp_path / "digits-mixed--none--s0.h5").write_bytes(b"")
    (before,) = plan_jobs(["digits-mixed"], ["none"], [0], tmp_path, [])
    assert before.out.name == "digits-mixed--none--s0.h5"
    assert before.config.run.out == str(before.out)
    with pytest.raises(UserError, match="--algorithms: .none. is listed twice"):
        plan_jobs(["digits-mixed"], ["none", "fedavg"], [0], tmp_path, [])


def test_true_clusters_gives_the_number_of_groups_to_those_that_take_one(tmp_path):
    # rotated has 4 data groups; IFCA and FeSEM declare num_clusters (2 by default),
    # FedGWC and FedAvg find (or need) no number
    algorithms = ["ifca", "fesem", "fedgwc", "none"]
    plain = by_algorithm(plan_jobs(["rotated"], algorithms, [0], tmp_path, []))
    given = by_algorithm(plan_jobs(["rotated"], algorithms, [0], tmp_path, [], true_clusters=True))
    groups = len(given["ifca"].config.groups)
    assert groups != plain["ifca"].config.algorithm.num_clusters  # the option changes it
    for name in ("ifca", "fesem"):
        assert given[name].config.algorithm.num_clusters == groups
        assert f"algorithm.num_clusters={groups}" in given[name].overrides
    for name in ("fedgwc", "none"):
        assert given[name].config.to_dict() == plain[name].config.to_dict()
    line = given_clusters_line(list(given.values()))
    assert "ifca (num_clusters), fesem (num_clusters)" in line, line
    assert line.rstrip().endswith("fedgwc, fedavg"), line


def test_true_clusters_and_a_set_of_the_same_key_are_refused(tmp_path):
    with pytest.raises(UserError) as exc:
        plan_jobs(["digits-mixed"], ["ifca"], [0], tmp_path, ["algorithm.num_clusters=3"],
                  true_clusters=True)  # fmt: skip
    message = str(exc.value)
    assert "--true-clusters" in message and "algorithm.num_clusters=3" in message, message
    assert "\n" not in message


def test_a_clusters_key_must_be_an_int_setting():
    from dataclasses import dataclass

    from distfl.algorithms import ClusteringAlgorithm, Params, register
    from distfl.algorithms.api.base import setting

    @dataclass(frozen=True)
    class P(Params):
        threshold: float = setting(0.5, "> 0", "a threshold")

    class Wrong(ClusteringAlgorithm):
        name = "wrong_clusters_key"
        Params = P
        clusters_key = "threshold"

        def plan(self, round_index):
            raise NotImplementedError

    with pytest.raises(ValueError, match="clusters_key = 'threshold'"):
        register(Wrong)


def test_a_variant_may_set_a_key_of_another_section(tmp_path):
    """FedProx as a variant of one global model: SECTION.KEY items pass whole; an unknown
    one is refused before anything runs, naming the key."""
    from distfl.errors import UserError
    from distfl.tools.suite_plan import parse_variant

    text = 'fedprox=none:server.aggregator="fedprox",train.prox_mu=0.01'
    assert parse_variant(text) == (
        "fedprox",
        "none",
        ('server.aggregator="fedprox"', "train.prox_mu=0.01"),
    )
    (job,) = plan_jobs(["digits-mixed"], ["fedprox"], [0], tmp_path, [], [text])
    assert job.variant and job.name == "fedprox" and job.out.name.endswith("--fedprox--s0.h5")
    assert (job.config.server.aggregator, job.config.train.prox_mu) == ("fedprox", 0.01)
    with pytest.raises(UserError) as exc:
        plan_jobs(["digits-mixed"], ["p"], [0], tmp_path, [], ["p=none:server.nope=1"])
    assert "server.nope" in str(exc.value) and "\n" not in str(exc.value)
    assert not any(tmp_path.glob("*.h5"))
