"""One name for one global model (``algorithm.name = "none"``) wherever a reader reads it:
``gather`` names it by its aggregator, ``fedavg``, as ``suite`` and ``report`` do, also in
a run file that stores ``none`` (distfl 0.1.0's); every other algorithm by its own name."""

from __future__ import annotations

from pathlib import Path

from distfl.cli import main
from distfl.config import load
from distfl.tools.gather import gather_rows
from distfl.tools.suite_plan import algorithm_label

OLD = Path(__file__).resolve().parents[1] / "data" / "runfiles-v0.1.0"


def test_gather_names_a_global_model_as_suite_and_report_do():
    none, fedgwc = OLD / "none.h5", OLD / "fedgwc.h5"
    rows = gather_rows([none, fedgwc])
    assert [r["algorithm"] for r in rows] == ["fedavg", "fedgwc"]
    from distfl.runfile.run import read

    labels = [algorithm_label(read(p).config) for p in (none, fedgwc)]
    assert [r["algorithm"] for r in rows] == labels


def test_the_gather_table_and_csv_say_fedavg(capsys, tmp_path):
    csv = tmp_path / "t.csv"
    assert main(["gather", str(OLD / "none.h5"), "--csv", str(csv)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:2] == [str(OLD / "none.h5"), "fedavg"]
    assert csv.read_text().splitlines()[1].split(",")[:2] == [str(OLD / "none.h5"), "fedavg"]


def test_the_label_is_the_aggregator_of_a_global_model_only():
    fedavgm = load(overrides=['algorithm.name="none"', 'server.aggregator="fedavgm"'])
    assert algorithm_label(fedavgm) == "fedavgm"
    assert algorithm_label(load(overrides=['algorithm.name="ifca"'])) == "ifca"
