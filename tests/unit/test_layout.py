"""The run file's layout has one owner (distfl.runfile.layout): the docs' listing is
generated from it (scripts/docs_hooks.py), and a file the writer makes holds exactly the
declared tables, columns and dtypes, every part of it described."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import h5py
import numpy as np

from distfl.config import load
from distfl.hierarchy import HierarchyNode
from distfl.runfile import layout
from distfl.runfile.reader import read_run_file
from distfl.runfile.tables import Record
from distfl.runfile.writer import write_run_file

ROOT = Path(__file__).resolve().parents[2]


def docs_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts/docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_listing_is_the_declaration():
    page = (ROOT / "docs" / "run-file.md").read_text(encoding="utf-8")
    assert page.count(docs_hooks().LAYOUT) == 1
    built = docs_hooks().on_page_markdown(page, None, None, None)
    start = built.index("```\n/") + len("```\n")
    assert built[start : built.index("```", start)] == layout.describe()


def small_file(path: Path, *, newcomers: bool = True) -> None:
    record = Record()
    evaluated = {"accuracy": 0.5, "accuracy_plain": 0.5, "test_loss": 1.0}
    record.metrics.append({"round": 1, "num_clusters": 1, "num_participants": 2,
                           "num_splits": 0, "federation_bytes": 10, "unavailable": 0,
                           "dropped": 0, "late": 0, "rejected": 0, "train_loss_first": 2.0,
                           "train_loss_last": 1.5, "dp_sample_steps": 0, **evaluated})  # fmt: skip
    record.clusters.append({"round": 1, "cluster": "0", "size": 2, "sampled": 2},
                           {"mse": 0.5, "regret": 1.0})  # fmt: skip
    record.evaluation.append({"round": 1, "cluster": "0", "clients": 2, **evaluated})
    record.membership.append({"round": 1, "cluster": "0", "group": 0, "clients": 2})
    record.timing.append({"round": 1, "elapsed_s": 0.5, "bytes": 0, "rss_mb": 100.0})
    record.workers.append({"round": 1, "rank": 0, "clients": 2, "loaded": 2, "pooled": 0})
    config = load(preset="digits")
    K = config.data.num_clients  # the per-client arrays hold a row for each client
    if newcomers:  # the optional table, as a run with data.held_out writes it
        record.held_out.append({"round": 1, "client": K, "group": 0, "cluster": "0", **evaluated})
    counts = np.zeros((K, 10), dtype=np.int64)
    counts[:, 0] = 4  # each client's samples, all of class 0: what a reader checks
    P = 64 * 64 + 64 + 64 * 10 + 10  # the parameters of the digits' MLP (model.hidden = [64])
    write_run_file(
        path, config=config, world_size=1,
        clients={"group": np.zeros(K, dtype=np.int64), "class_counts": counts,
                 "num_train": np.full(K, 3), "num_test": np.ones(K, dtype=np.int64),
                 "accuracy": np.zeros(K)},
        world={"host": ["h"], "local_rank": [0], "address": ["a"], "launcher": "single"},
        hierarchy=[HierarchyNode(id="0", parent="", created_round=0, members=np.arange(K))],
        leaves=["0"],
        assignment=np.zeros(K, dtype=np.int64), leaf_models=np.zeros((1, P)),
        tables=record.arrays(),
        state={"round": 1, "model_ids": ["0"], "models": np.zeros((1, P), np.float32),
               "client_accuracy": np.zeros(K)},
    )  # fmt: skip


def test_a_written_file_holds_the_declared_tables(tmp_path):
    small_file(tmp_path / "run.h5")
    with h5py.File(tmp_path / "run.h5", "r") as f:
        for table in layout.TABLES:
            g = f[table.path]
            columns = [k for k in g if isinstance(g[k], h5py.Dataset)]
            extra = ["mse", "regret"] if table is layout.CLUSTERS else []
            assert sorted(columns) == sorted([*table.names, *extra]), table.path
            for c in table.columns:
                ds = g[c.name]
                assert len(ds) == 1, c.name
                if c.kind == "str":
                    assert h5py.check_string_dtype(ds.dtype) is not None, c.name
                else:
                    assert ds.dtype == c.dtype, (table.path, c.name)
        described = {p.path.split("/")[1] for p in layout.PARTS if p.path != "/"}
        described |= {t.path.split("/")[0] for t in layout.TABLES}
        assert set(f) == described  # every top-level part of the file is described
    run = read_run_file(tmp_path / "run.h5")
    assert run.tables["clusters"]["regret"].tolist() == [1.0]
    assert run.tables["clusters"]["cluster"].tolist() == ["0"]  # str, not bytes
    assert np.isnan(run.metrics["loss_in_sample"][0])  # a float column not given: NaN
    assert run.world["host"] == ["h"] and run.world["launcher"] == "single"


def test_a_file_without_newcomers_has_no_table_of_them_and_is_whole(tmp_path):
    small_file(tmp_path / "run.h5", newcomers=False)
    with h5py.File(tmp_path / "run.h5", "r") as f:
        assert layout.HELD_OUT.optional and layout.HELD_OUT.path not in f
        assert "metrics/evaluation" in f  # a table every run writes
    run = read_run_file(tmp_path / "run.h5")  # verified: no table is missing
    assert run.tables["held_out"] == {}
    assert Record(run.tables).held_out.arrays()["client"].tolist() == []


def test_a_record_restored_from_a_file_writes_the_same_tables(tmp_path):
    small_file(tmp_path / "run.h5")
    run = read_run_file(tmp_path / "run.h5")
    again = Record(run.tables).arrays()
    for key, columns in again.items():
        stored = run.tables[key]
        assert list(columns) == [*layout.BY_KEY[key].names, *sorted(
            set(stored) - set(layout.BY_KEY[key].names))]  # fmt: skip
        for name, values in columns.items():
            assert values.tolist() == stored[name].tolist() or (
                values.dtype.kind == "f" and np.array_equal(values, stored[name], equal_nan=True)
            ), (key, name)
