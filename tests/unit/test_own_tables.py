"""An algorithm's own tables (``ClusteringAlgorithm.tables``, /metrics/tables/<name>): the
declarations :func:`distfl.algorithms.register` refuses, the rows
:meth:`distfl.runfile.tables.Rows.extend` refuses or types, and a :class:`Record` that
carries on a table of a file that no algorithm declares any more."""

from __future__ import annotations

import numpy as np
import pytest

from distfl.algorithms import ClusteringAlgorithm, Column, RecordTable, RoundPlan, register
from distfl.runfile import layout
from distfl.runfile.tables import Record

GAP = Column("gap", "float", "a difference")


def algorithm_with(*tables) -> type:
    class Declares(ClusteringAlgorithm):
        name = "declares_tables"

        def plan(self, round_index):
            return RoundPlan(round_index, {})

        def update(self, round_index, plan, reports):
            raise NotImplementedError

    Declares.tables = tables
    return Declares


@pytest.mark.parametrize(
    ("tables", "needle"),
    [
        ((RecordTable("clusters", "client", (GAP,)),), "none of the run file's"),
        ((RecordTable("Bad-name", "client", (GAP,)),), "lower-case name"),
        ((RecordTable("mine", "cell", (GAP,)),), "per = 'cell'; allowed: cluster, client, pair"),
        ((RecordTable("mine", "pair", (Column("other", "int", ""),)),), "none of client, other"),
        ((RecordTable("mine", "client", (GAP, GAP)),), "column 'gap'"),
        ((RecordTable("mine", "client", (Column("tag", "str", ""),)),), "allowed: int, float"),
        ((RecordTable("a", "client", (GAP,)), RecordTable("a", "pair", (GAP,))), "two tables"),
        ((RecordTable("mine", "client", (("gap", "float", ""),)),), "is not a Column"),
        (("mine",), "is not a RecordTable"),
    ],
)
def test_a_bad_declaration_is_refused_when_registered(tables, needle):
    with pytest.raises((ValueError, TypeError), match=needle.replace("(", r"\(")):
        register(algorithm_with(*tables))


def test_the_declared_tables_columns_and_place():
    table = RecordTable("loss_gaps", "pair", (GAP,)).table()
    assert table.key == "tables/loss_gaps" and table.path == "metrics/tables/loss_gaps"
    assert table.names == ("round", "client", "other", "gap")
    assert RecordTable("x", "cluster", (GAP,)).given == ("cluster", "gap")
    assert layout.table_path("tables/loss_gaps") == "metrics/tables/loss_gaps"
    assert layout.table_path("clusters") == "metrics/clusters"


def own_record() -> Record:
    return Record(own=[RecordTable("loss_gaps", "pair", (GAP, Column("n", "int", ""))).table()])


def test_rows_are_typed_and_kept_in_the_declared_order():
    record = own_record()
    rows = record.tables["tables/loss_gaps"]
    gap = np.array([0.5, -1.0], dtype=np.float32)
    rows.extend({"round": [3, 3], "client": np.array([0, 1]), "other": [2, 2], "gap": gap,
                 "n": np.array([4.0, 5.0])})  # fmt: skip
    out = record.arrays()["tables/loss_gaps"]
    assert list(out) == ["round", "client", "other", "gap", "n"]
    assert out["n"].dtype == np.int64 and out["n"].tolist() == [4, 5]
    assert out["gap"].dtype == np.float64 and out["gap"].tolist() == [0.5, -1.0]
    mark = record.mark()
    rows.extend({"round": [4], "client": [0], "other": [1], "gap": [1.0], "n": [1]})
    record.rollback(mark)
    assert len(record.tables["tables/loss_gaps"]) == 2


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"round": [1], "client": [0], "other": [1], "gap": [0.0]}, r"\(no n\)"),
        ({"round": [1], "client": [0], "other": [1], "gap": [0.0], "n": [1], "x": [2]},
         r"\(x is none of them\)"),
        ({"round": [1, 1], "client": [0], "other": [1], "gap": [0.0], "n": [1]},
         "not of one length"),
        ({"round": [1], "client": [0], "other": [1], "gap": [0.0], "n": [1.5]},
         "n holds other than integers"),
        ({"round": [[1]], "client": [[0]], "other": [[1]], "gap": [[0.0]], "n": [[1]]},
         "not of one length"),
    ],
)  # fmt: skip
def test_odd_rows_are_refused_and_nothing_is_added(values, needle):
    record = own_record()
    with pytest.raises(RuntimeError, match=needle):
        record.tables["tables/loss_gaps"].extend(values, source="algorithm 'toy'")
    assert len(record.tables["tables/loss_gaps"]) == 0


def test_a_table_no_algorithm_declares_any_more_is_carried_on():
    """A file's table that the run's algorithm no longer declares (its plug-in changed) is
    kept as the file holds it, so that a resume loses none of its rows."""
    saved = {"tables/gone": {"round": np.array([1, 2]), "cluster": np.array(["0", "0.1"],
             dtype=object), "value": np.array([0.25, 0.5])}}  # fmt: skip
    record = Record(saved, own=[RecordTable("kept", "client", (GAP,)).table()])
    out = record.arrays()
    assert list(out["tables/gone"]) == ["round", "cluster", "value"]
    assert out["tables/gone"]["value"].tolist() == [0.25, 0.5]
    assert out["tables/gone"]["cluster"].tolist() == ["0", "0.1"]
    assert out["tables/kept"]["gap"].shape == (0,)


class Mine(ClusteringAlgorithm):
    """Not registered: an algorithm of one table per client and one per cluster."""

    name = "mine"
    tables = (
        RecordTable("per_client", "client", (GAP,)),
        RecordTable("per_cluster", "cluster", (Column("n", "int", ""),)),
    )

    def plan(self, round_index):
        return RoundPlan(round_index, {})

    def update(self, round_index, plan, reports):
        raise NotImplementedError


def recorded(rows: dict) -> Record:
    """What the runtime's Recorder makes of ``rows`` (RoundUpdate.rows) in round 5 of a run
    of 4 clients whose tree is the root and its children 0.0 and 0.1."""
    from types import SimpleNamespace

    from distfl.runtime.components import Recorder

    algorithm = Mine(num_clients=4, clients_per_round=4, seed=0)
    algorithm.tree.split("0", {"0.0": np.array([0, 1]), "0.1": np.array([2, 3])}, 1, {})
    server = SimpleNamespace(
        algorithm=algorithm, num_clients=4, tree=algorithm.tree,
        state=SimpleNamespace(record=Record(own=[t.table() for t in Mine.tables])),
    )  # fmt: skip
    Recorder._own_rows(server, 5, rows)
    return server.state.record


def test_the_runtime_adds_the_round_to_the_rows_it_is_given():
    record = recorded({"per_client": {"client": [3, 1], "gap": [0.5, 0.25]},
                       "per_cluster": {"cluster": ["0.1"], "n": [2]}})  # fmt: skip
    out = record.arrays()
    assert out["tables/per_client"]["round"].tolist() == [5, 5]
    assert out["tables/per_client"]["client"].tolist() == [3, 1]
    assert out["tables/per_cluster"]["cluster"].tolist() == ["0.1"]


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ({"other": {"client": [0], "gap": [0.0]}}, "table 'other' that it does not declare"),
        ({"per_client": {"client": [4], "gap": [0.0]}}, r"client is no client id .*\(0 \.\. 3\)"),
        ({"per_client": {"client": [-1], "gap": [0.0]}}, "client is no client id"),
        ({"per_client": {"client": [0.0], "gap": [0.0]}}, "client is no client id"),
        ({"per_cluster": {"cluster": ["0.2"], "n": [1]}}, "cluster '0.2', which is not in"),
    ],
)
def test_the_runtime_refuses_rows_of_no_table_or_of_no_client_or_cluster(rows, needle):
    with pytest.raises(RuntimeError, match=f"algorithm 'mine' gave rows of .*{needle}"):
        recorded(rows)


def test_the_docs_example_declares_a_table_the_registry_accepts():
    """The example of docs/adding-an-algorithm.md, "a table of its own", as written: its
    declaration passes the registry's checks and its rows are what the runtime takes."""
    from pathlib import Path

    from distfl.algorithms import ClientReports
    from distfl.algorithms.api.registry import _check_tables
    from distfl.plugins import ALGORITHMS

    page = Path(__file__).resolve().parents[2] / "docs" / "adding-an-algorithm.md"
    text = page.read_text(encoding="utf-8")
    start = text.index("```python\n# last_loss.py")
    code = text[start + len("```python\n") : text.index("```", start + 3)]
    space: dict = {}
    try:
        exec(compile(code, str(page), "exec"), space)  # registers it
    finally:
        ALGORITHMS.remove("last_loss")
    cls = space["LastLoss"]
    _check_tables(cls)
    reports = ClientReports(np.array([1, 3]), np.array([[2.0, 1.5], [2.5, 0.5]]), np.ones(2))
    rows = cls.update(None, 4, None, reports).rows
    record = Record(own=[t.table() for t in cls.tables])
    record.tables["tables/client_loss"].extend({"round": [4, 4], **rows["client_loss"]})
    assert record.arrays()["tables/client_loss"]["last_loss"].tolist() == [1.5, 0.5]
