"""``distfl suite --grid``: the values of a key (commas inside brackets and quotes kept), the
points each algorithm runs at (an ``algorithm.KEY`` only where the algorithm takes it), the
run files' names, the refusals before any job is planned, and the table of the points with
the best of each algorithm marked (checked against values computed here)."""

from __future__ import annotations

import statistics

import pytest

from distfl.errors import ConfigError, UserError
from distfl.tools import suite_grid
from distfl.tools.suite import grid_text, grid_texts, plan_jobs
from distfl.tools.suite_files import csv_text


def test_values_split_at_commas_outside_brackets_and_quotes():
    assert suite_grid.split_values("0.01, 0.05,0.1") == ["0.01", "0.05", "0.1"]
    assert suite_grid.split_values('[1,2],"a,b",3') == ["[1,2]", '"a,b"', "3"]
    assert suite_grid.split_values("{a = 1, b = 2},x") == ["{a = 1, b = 2}", "x"]


def test_a_grid_is_its_keys_items_in_order():
    grid = suite_grid.parse_grid(["train.lr=0.01,0.05", "algorithm.epsilon=1e-3,2e-3"])
    assert grid == [
        ("train.lr", ("train.lr=0.01", "train.lr=0.05")),
        ("algorithm.epsilon", ("algorithm.epsilon=1e-3", "algorithm.epsilon=2e-3")),
    ]


@pytest.mark.parametrize(
    "texts, says",
    [
        (["lr=0.1,0.2"], "expected SECTION.KEY=V1,V2"),
        (["train.lr"], "expected SECTION.KEY=V1,V2"),
        (["train.lr=0.1,"], "an empty value"),
        (["train.lr=0.1,1e-1"], "the value 1e-1 is given twice"),
        (["train.lr=0.1", "train.lr=0.2"], "is given twice"),
        (["run.seed=1,2"], "--seeds"),
        (["algorithm.name=ifca,cfl"], "--algorithms"),
    ],
)
def test_a_bad_grid_is_refused_in_one_line(texts, says):
    with pytest.raises(UserError) as exc:
        suite_grid.parse_grid(texts)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_an_algorithm_runs_at_the_points_of_the_keys_it_takes():
    grid = suite_grid.parse_grid(["train.lr=0.01,0.05", "algorithm.epsilon=1e-3,2e-3,3e-3"])
    fedgwc = suite_grid.points(grid, "fedgwc")  # takes epsilon
    none = suite_grid.points(grid, "none")  # does not
    assert len(fedgwc) == 6 and fedgwc[0] == ("train.lr=0.01", "algorithm.epsilon=1e-3")
    assert fedgwc[-1] == ("train.lr=0.05", "algorithm.epsilon=3e-3")
    assert none == [("train.lr=0.01",), ("train.lr=0.05",)]
    assert suite_grid.points([], "none") == [()]


def test_a_points_name_and_file_suffix():
    point = ("train.lr=0.05", "algorithm.epsilon=1e-3")
    name = suite_grid.point_name("fedgwc", point)
    assert name == "fedgwc [train.lr=0.05, algorithm.epsilon=1e-3]"
    assert suite_grid.split_name(name) == ("fedgwc", "train.lr=0.05, algorithm.epsilon=1e-3")
    assert suite_grid.split_name("fedavg") == ("fedavg", "")
    tail = suite_grid.suffix(point)
    assert len(tail) == 10 and tail.startswith("_g") and int(tail[2:], 16) >= 0
    assert tail == suite_grid.suffix(tuple(point))  # the same point, the same name
    assert tail != suite_grid.suffix(point[::-1]) and suite_grid.suffix(()) == ""


def test_jobs_of_a_grid(tmp_path):
    jobs = plan_jobs(
        ["digits-mixed"], ["fedgwc", "none"], [0, 1], tmp_path, ["run.rounds=3"],
        grid=["train.lr=0.05,0.1", "algorithm.epsilon=0.5,0.7"],
    )  # fmt: skip
    assert len(jobs) == (4 + 2) * 2
    fedgwc = [j for j in jobs if j.algorithm == "fedgwc"]
    assert {(j.config.train.lr, j.config.algorithm.epsilon) for j in fedgwc} == {
        (0.05, 0.5), (0.05, 0.7), (0.1, 0.5), (0.1, 0.7)
    }  # fmt: skip
    none = [j for j in jobs if j.algorithm == "none"]
    assert sorted({j.config.train.lr for j in none}) == [0.05, 0.1]
    assert none[0].name == "fedavg [train.lr=0.05]"
    assert none[0].out.name == f"digits-mixed--fedavg{suite_grid.suffix(none[0].point)}--s0.h5"
    assert len({j.out for j in jobs}) == len(jobs)  # every run its own file
    assert all(j.config.run.rounds == 3 for j in jobs)  # the suite-wide items too
    assert not any(tmp_path.iterdir())


def test_a_grown_grid_keeps_the_files_of_its_points(tmp_path):
    small = plan_jobs(["digits-mixed"], ["none"], [0], tmp_path, [], grid=["train.lr=0.05,0.1"])
    grown = plan_jobs(
        ["digits-mixed"], ["none"], [0], tmp_path, [], grid=["train.lr=0.02,0.05,0.1"]
    )
    assert {j.out for j in small} < {j.out for j in grown}


@pytest.mark.parametrize(
    "grid, overrides, error, says",
    [
        (["algorithm.eps1=0.1,0.2"], [], ConfigError, "a key of cfl only"),
        (["train.lr=0.1,0.2"], ["train.lr=0.3"], UserError, "leave one of them out"),
    ],
)
def test_a_grid_that_contradicts_or_reaches_no_algorithm_is_refused(
    tmp_path, grid, overrides, error, says
):
    with pytest.raises(error) as exc:
        plan_jobs(["digits-mixed"], ["none", "fedgwc"], [0], tmp_path, overrides, grid=grid)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def row(algorithm, seed, accuracy, ari):
    return {"scenario": "s", "algorithm": algorithm, "seed": seed, "accuracy": accuracy,
            "ari": ari, "rand": 1.0}  # fmt: skip


def test_the_grid_table_marks_each_algorithms_best_point():
    rows = [
        row("ifca [train.lr=0.01]", 0, 0.70, 0.5), row("ifca [train.lr=0.01]", 1, 0.80, 0.7),
        row("ifca [train.lr=0.05]", 0, 0.90, 0.1), row("ifca [train.lr=0.05]", 1, None, None),
        row("fedavg [train.lr=0.01]", 0, 0.60, 0.0), row("fedavg [train.lr=0.05]", 0, 0.55, 0.0),
    ]  # fmt: skip
    lines = suite_grid.grid_rows(rows)
    assert [(x["algorithm"], x["setting"], x["seeds"]) for x in lines] == [
        ("ifca", "train.lr=0.01", "2 of 2"), ("ifca", "train.lr=0.05", "1 of 2"),
        ("fedavg", "train.lr=0.01", "1 of 1"), ("fedavg", "train.lr=0.05", "1 of 1"),
    ]  # fmt: skip
    assert lines[0]["accuracy"] == pytest.approx(0.75)
    assert lines[0]["accuracy_sd"] == pytest.approx(statistics.stdev([0.7, 0.8]))
    assert lines[1]["accuracy"] == pytest.approx(0.90)  # the finished seed alone
    assert [x["best"] for x in lines] == ["", "best", "best", ""]
    by_ari = suite_grid.grid_rows(rows, best="ari")
    assert [x["best"] for x in by_ari] == ["best", "", "best", ""]  # fedavg: the first of equal
    assert list(by_ari[0]) == suite_grid.grid_columns("ari")


def test_grid_csv_is_one_of_the_texts_the_suite_may_write():
    rows = [row("ifca [train.lr=0.01]", 0, 0.7, 0.5), row("ifca [train.lr=0.05]", 0, 0.9, 0.1)]
    text = grid_text(rows, "accuracy")
    assert text.splitlines()[0] == ",".join(suite_grid.grid_columns("accuracy"))
    assert text == csv_text(suite_grid.grid_rows(rows), suite_grid.grid_columns("accuracy"))
    assert text in grid_texts(rows) and grid_text(rows, "ari") in grid_texts(rows)
    assert text.splitlines()[2].endswith(",best")


def test_the_terminal_shows_mean_and_sd_to_three_decimals():
    rows = [row("ifca [train.lr=0.01]", 0, 0.70, 0.5), row("ifca [train.lr=0.01]", 1, 0.80, 0.7),
            row("ifca [train.lr=0.05]", 0, None, None)]  # fmt: skip
    cells = suite_grid.grid_cells(suite_grid.grid_rows(rows), "accuracy")
    assert cells[0] == {"scenario": "s", "algorithm": "ifca", "setting": "train.lr=0.01",
                        "seeds": "2 of 2", "accuracy": "0.750 ± 0.071",
                        "ari": "0.600 ± 0.141", "best": "best"}  # fmt: skip
    assert cells[1]["accuracy"] == "–" and cells[1]["best"] == ""


def test_a_points_items_come_back_from_its_name():
    point = ("train.lr=0.05", "data.groups=[{count = 2}, {count = 3}]", 'run.note="a, b"')
    name, text = suite_grid.split_name(suite_grid.point_name("ifca", point))
    assert name == "ifca" and suite_grid.point_items(text) == point
    assert suite_grid.point_items("") == ()
