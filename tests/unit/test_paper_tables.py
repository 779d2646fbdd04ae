"""``distfl suite --table``: a paper's table expands into its scenario, its settings, the
methods distfl has of it and the papers' protocol, and its comparison puts our mean and
standard deviation over the seeds beside the paper's values."""

from __future__ import annotations

import argparse
import math
import statistics

import pytest

from distfl.algorithms import algorithm_names, key_owners
from distfl.cli import _parser
from distfl.errors import UserError
from distfl.tools.paper_tables import TABLES, comparison, format_comparison, stats, worst_seed
from distfl.tools.suite import plan_jobs, seed_list, suite_arguments


def suite_args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["suite", *argv])


def test_stats_are_the_mean_and_the_sample_deviation_of_the_finite_values():
    values = [0.5, 0.75, 1.0, float("nan"), None]
    mean, sd = stats(values)
    assert mean == pytest.approx(statistics.mean([0.5, 0.75, 1.0]), abs=1e-15)
    assert sd == pytest.approx(statistics.stdev([0.5, 0.75, 1.0]), abs=1e-15)
    assert stats([0.3]) == (0.3, 0.0)
    assert stats([float("nan"), None]) is None


@pytest.mark.parametrize("name", list(TABLES))
def test_a_table_expands_into_its_scenario_methods_seeds_and_protocol(name, tmp_path):
    spec = TABLES[name]
    kw = suite_arguments(suite_args("--table", name, "--out", str(tmp_path)))
    assert kw["scenarios"] == [spec.scenario] and kw["seeds"] == list(spec.seeds)
    assert kw["true_clusters"] is True and kw["table"] == name
    # every method of the table that distfl has (an algorithm, or a variant of one the
    # table defines), in the table's order, and no other
    own = {v.partition("=")[0]: v for v in spec.variants}
    known = set(algorithm_names()) | set(own)
    assert kw["algorithms"] == [a for a in spec.algorithms if a in known]
    assert kw["variants"] == [own[a] for a in kw["algorithms"] if a in own]
    if name.startswith("flcl-"):  # FLCL against FedAvg with FedCS's and FedPNS's selection
        assert kw["algorithms"] == ["flcl", "fedcs", "fedpns", "none"]
        jobs = plan_jobs(kw["scenarios"], kw["algorithms"], kw["seeds"], tmp_path,
                         kw["overrides"], kw["variants"], true_clusters=True)  # fmt: skip
        selection = {j.algorithm: j.config.participation.selection for j in jobs}
        assert selection == {"flcl": "uniform", "fedcs": "fedcs", "fedpns": "fedpns",
                             "none": "uniform"}  # fmt: skip
        assert all(j.config.eval.loss_target == 0.28 for j in jobs)
        return
    assert {"oracle", "emdcfl", "ifca", "none"} <= set(kw["algorithms"])
    # the table's items come first, then the user's
    assert kw["overrides"][: len(spec.items)] == list(spec.items)
    jobs = plan_jobs(kw["scenarios"], kw["algorithms"], kw["seeds"], tmp_path,
                     kw["overrides"], kw["variants"], true_clusters=True)  # fmt: skip
    ifca = next(j for j in jobs if j.algorithm == "ifca")
    assert ifca.config.algorithm.num_clusters == len(ifca.config.groups)
    if "fedprox" in own:  # Table 1's FedProx: one global model, the fedprox aggregator
        fedprox = next(j for j in jobs if j.algorithm == "fedprox")
        assert fedprox.variant and fedprox.config.algorithm.name == "none"
        assert fedprox.config.server.aggregator == "fedprox"
        assert fedprox.config.train.prox_mu == 0.01
        assert fedprox.out.name.endswith("--fedprox--s0.h5")
    emdcfl = next(j for j in jobs if j.algorithm == "emdcfl")
    for item in spec.items:
        key, _, value = item.partition("=")
        if key == "algorithm.emd_epsilon":
            assert emdcfl.config.algorithm.epsilon == float(value)


def test_listed_methods_keep_only_the_items_one_of_them_takes(tmp_path):
    # IFCA alone: EMD-CFL's and CFL's keys of the quick table are left out (a suite-wide
    # algorithm key no listed method takes would be refused), the rest stays
    kw = suite_arguments(suite_args("--table", "emdcfl-table1-quick", "--algorithms", "ifca",
                                    "--seeds", "4", "--set", "train.lr=0.2"))  # fmt: skip
    assert kw["algorithms"] == ["ifca"] and kw["seeds"] == [4]
    spec = TABLES["emdcfl-table1-quick"]
    kept = [i for i in spec.items if not i.startswith("algorithm.")]
    dropped = [i for i in spec.items if i.startswith("algorithm.")]
    assert dropped and all("ifca" not in key_owners(i.split("=")[0][10:]) for i in dropped)
    assert kw["overrides"] == [*kept, "train.lr=0.2"]
    plan_jobs(kw["scenarios"], kw["algorithms"], kw["seeds"], tmp_path, kw["overrides"],
              kw["variants"], true_clusters=True)  # fmt: skip


def test_a_scenario_beside_a_table_and_an_unknown_table_are_refused():
    with pytest.raises(UserError, match="runs its own scenario"):
        suite_arguments(suite_args("default", "--table", "emdcfl-table1"))
    with pytest.raises(UserError) as exc:
        suite_arguments(suite_args("--table", "emdcfl-table2"))
    message = str(exc.value)
    assert "emdcfl-table1" in message and "\n" not in message


def test_without_a_table_the_defaults_stay():
    kw = suite_arguments(suite_args())
    assert kw["algorithms"] == ["fedgwc", "none"] and kw["seeds"] == [0]
    assert "table" not in kw and len(kw["scenarios"]) > 1


def test_the_comparison_is_our_mean_and_deviation_beside_the_papers():
    spec = TABLES["emdcfl-table1-quick"]
    rows = [
        {"algorithm": "oracle", "accuracy": 0.9, "accuracy_worst": 0.8, "ari": 1.0, "seed": 0},
        {"algorithm": "oracle", "accuracy": 0.8, "accuracy_worst": 0.6, "ari": 1.0, "seed": 1},
        {"algorithm": "fedgwc", "accuracy": 0.7, "accuracy_worst": 0.5, "ari": 0.0},
        {"algorithm": "fedgwc", "accuracy": None, "accuracy_worst": None, "ari": None},
    ]
    lines = {line["method"]: line for line in comparison(spec, rows)}
    oracle = lines["oracle"]
    assert oracle["seeds"] == 2 and oracle["paper_label"] == "Oracle"
    assert oracle["accuracy"] == pytest.approx((85.0, statistics.stdev([90.0, 80.0])))
    assert oracle["accuracy_worst"] == pytest.approx((70.0, statistics.stdev([80.0, 60.0])))
    assert oracle["ari"] == (1.0, 0.0)
    assert oracle["paper_accuracy"] == spec.rows["oracle"].values["accuracy"]
    # a failed seed counts for nothing; a method the paper has no row for shows none
    assert lines["fedgwc"]["seeds"] == 1 and lines["fedgwc"]["paper_ari"] is None
    assert oracle["accuracy_n"] == 2 and lines["fedgwc"]["accuracy_n"] == 1
    text = format_comparison(spec, list(lines.values()), ["FedEM"])
    assert "| oracle | 2 | 85.00 ± 7.07 (n = 2, worst 80.00 at seed 1) | 98.86 ± 0.05 |" in text
    assert "| 1.00 ± 0.00 (n = 2, worst 1.00 at seed 0) |" in text, text  # the first of ties
    assert "| fedgwc | 1 | 70.00 (n = 1) | - |" in text, text
    assert "not methods of distfl (paper's rows left out): FedEM" in text


def test_one_seed_says_n_1_and_counts_are_whole_numbers():
    """No deviation where one seed cannot have one ("n = 1", never "± 0.00"); the count
    of seeds where there are more; rounds as whole numbers (one decimal where a mean over
    seeds is not whole)."""
    spec = TABLES["flcl-fig2"]
    rows = [
        {"algorithm": "flcl", "accuracy": 0.9, "test_loss": 0.25, "rounds_to_target": 152},
        {"algorithm": "fedavg", "accuracy": 0.8, "test_loss": 0.3, "rounds_to_target": 150},
        {"algorithm": "fedavg", "accuracy": 0.8, "test_loss": 0.2, "rounds_to_target": 153},
        {"algorithm": "fedavg", "accuracy": 0.8, "test_loss": 0.4, "rounds_to_target": 153},
        {"algorithm": "fedcs", "accuracy": 0.7, "test_loss": 0.5, "rounds_to_target": None},
    ]
    text = format_comparison(spec, comparison(spec, rows), [])
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    assert lines["flcl"] == "| flcl | 1 | 0.250 (n = 1) | - | 152 (n = 1) | - |"
    sd = statistics.stdev([150, 153, 153])
    # the worst loss is the highest, the worst round count the latest (no seed recorded)
    assert lines["fedavg"] == (
        f"| fedavg | 3 | 0.300 ± 0.100 (n = 3, worst 0.400) | - | 152 ± {sd:.1f} (n = 3, "
        "worst 153) | - |"
    )
    assert lines["fedcs"] == "| fedcs | 1 | 0.500 (n = 1) | - | - | - |"
    rows.append({**rows[0], "rounds_to_target": None, "seed": 4})  # flcl's second seed
    text = format_comparison(spec, comparison(spec, rows), [])
    assert (
        "| flcl | 2 | 0.250 ± 0.000 (n = 2, worst 0.250) | - | 152 (n = 1, worst never at seed 4) |"
        in text
    ), text
    rows.append({**rows[0], "seed": 5})
    text = format_comparison(spec, comparison(spec, rows), [])
    assert "152 ± 0 (n = 2, worst never at seed 4) |" in text, text
    del rows[-2:]
    rows[1]["rounds_to_target"] = 151  # a mean of 152.33...: one decimal
    text = format_comparison(spec, comparison(spec, rows), [])
    assert "| 152.3 ± 1.2 (n = 3, worst 153) |" in text, text
    assert "± 0.00" not in text and ".000" not in text


def test_the_scenarios_page_lists_every_table():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text()
    section = page[page.index("## A source paper's table") :]
    listed = [line.split("`")[1] for line in section.splitlines()
              if line.startswith(("| `emdcfl-", "| `fedgwc-", "| `flcl-"))]  # fmt: skip
    assert listed == list(TABLES)
    for name, spec in TABLES.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"| `{spec.scenario}` |" in row, row


def test_the_scenarios_page_gives_each_tables_rounds_and_clients_a_round():
    """docs/scenarios.md's row of each table names the rounds and the clients a round its
    runs take (the table's items over its scenario's preset), every client each round."""
    from pathlib import Path

    from distfl.config.parse import load

    text = (Path(__file__).parents[2] / "docs" / "scenarios.md").read_text()
    section = text[text.index("## A source paper's table") :]
    rows = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines()
            if line.startswith(("| `emdcfl-", "| `flcl-"))}  # fmt: skip
    assert set(rows) == set(TABLES)
    for name, table in TABLES.items():
        sets = [i for i in table.items if i.split(".")[0] in ("run", "server", "data")]
        config = load(preset=table.scenario, overrides=sets)
        K, rounds = config.data.num_clients, config.run.rounds
        cell = rows[name].split("|")[5].strip()
        if name.startswith("flcl-"):  # FLCL trains every member, the sampling methods not
            n = config.server.clients_per_round
            assert cell == f"{rounds}; FLCL all {K} clients each, the others {n}", (name, cell)
            continue
        assert config.server.clients_per_round == K, name
        assert cell == f"{rounds}, all {K} clients each", (name, cell)


def test_each_table_has_a_title_of_its_own():
    """The suite knows its comparison, and the report a suite's table, by the title the
    comparison starts with."""
    from distfl.tools.paper_tables import table_titled

    assert len({spec.title for spec in TABLES.values()}) == len(TABLES)
    for name, spec in TABLES.items():
        assert table_titled(spec.title) == name
    assert table_titled("Table 1") is None


def test_the_worst_seed_is_the_least_where_more_is_better_and_the_most_where_less_is():
    assert worst_seed([(0.9, 0), (0.6, 3), (0.6, 5), (1.0, 1)], "ari") == (0.6, 3)
    assert worst_seed([(0.2, 0), (0.5, 2), (float("nan"), 4)], "test_loss") == (0.5, 2)
    assert worst_seed([(3, 0), (2, 1)], "clusters") is None  # no worst for a count
    assert worst_seed([(0.9, 0), (None, 1)], "ari") is None  # one value: no worst
    # a finished run that never reached the target is the worst of the rounds to it
    assert worst_seed([(152, 0), (None, 1), (174, 2)], "rounds_to_target") == (math.inf, 1)


@pytest.mark.parametrize(("text", "seeds"), [
    ("0-9", list(range(10))), ("0-2,7", [0, 1, 2, 7]), ("3", [3]), ("5-5", [5]),
    (" 1 , 4-6 ", [1, 4, 5, 6]), ("", []),
])  # fmt: skip
def test_seeds_take_ranges(text, seeds):
    assert seed_list(text) == seeds
    assert suite_arguments(suite_args("--seeds", text or "0"))["seeds"] == (seeds or [0])


@pytest.mark.parametrize(("text", "says"), [
    ("9-0", "runs backwards"), ("1,2,1", "seed 1 is named twice"), ("0-3,2", "seed 2"),
    ("a", "neither a seed nor a range"), ("-1", "neither"), ("1.5", "neither"),
    ("0-99999", "more than 10,000 seeds"), ("1-2-3", "neither"),
])  # fmt: skip
def test_a_bad_seed_list_is_refused_in_one_line(text, says):
    with pytest.raises(UserError) as err:
        seed_list(text)
    assert says in str(err.value) and "\n" not in str(err.value)
