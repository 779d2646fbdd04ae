"""What a run file says, checked against its own config before any reader uses it.

The integrity record (:mod:`distfl.runfile.integrity`) is a checksum, not a signature:
whoever edits a file can seal it anew. So every reader also checks that the file holds
what a run of its stored config could have written, and refuses anything else with one
line (:class:`~distfl.errors.CheckpointError`, exit code 2), never a traceback, a number
shown as valid that no run wrote, or gigabytes of memory:

- only the parts a run file has, each of the kind (group, dataset, attribute), dtype and
  shape its declaration gives (:mod:`distfl.runfile.layout`), no name deeper than
  :data:`MAX_DEPTH` levels, and every JSON value nested at most :data:`MAX_JSON_DEPTH`
  deep;
- the round of ``/state`` a whole number from 0 to ``run.rounds``, with one row of
  ``/metrics`` for each round done; every table's rounds within them;
- the world size from 1 to ``data.num_clients + 1`` (one server, at most one worker per
  client), and ``/world`` one row per rank;
- one row per client in ``/clients`` (ground-truth groups of ``data.groups``, class
  counts that are not negative and add up to each client's samples, accuracies from 0 to
  1), the tree's members clients of the run, each node's parent a node that split in the
  round the node was made, and the models of ``/state`` one row of the same width as
  ``/final``'s per cluster of ``/state@model_ids``.

Shapes and dtypes come from HDF5's metadata; values are read only for the small per-client
and per-round arrays, after :func:`distfl.runfile.integrity.check_storage` has bounded what
any dataset can cost.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import h5py
import numpy as np

from distfl.config import Config
from distfl.config.parse import nesting
from distfl.errors import CheckpointError
from distfl.runfile import integrity, layout

#: the deepest name of a run file (/state/algorithm/<part>/<part>/... of an algorithm's
#: nested state is a few levels deep)
MAX_DEPTH = 32
#: the deepest nesting of a JSON value in a run file (the stored config, /state's values)
MAX_JSON_DEPTH = 32
#: a cluster id: "0", "0.1", "0.1.10" (:func:`distfl.hierarchy.node_order` reads them)
NODE_ID = re.compile(r"[0-9]+(\.[0-9]+)*")

#: the groups and datasets at the top of a run file, and the root's attributes
TOP_LEVEL = {"clients", "final", "hierarchy", "metrics", "state", "timing", "world",
             integrity.GROUP}  # fmt: skip
ROOT_ATTRS = {"config", "created", "distfl_version", "format", "seed", "world_size", "written"}
REQUIRED = ("clients/group", "clients/class_counts", "clients/num_train", "clients/num_test",
            "clients/accuracy", "final/assignment", "final/leaves", "final/models",
            "hierarchy", "metrics", "state", "timing")  # fmt: skip
#: /clients: each dataset and the kind of its values
CLIENTS = {"group": "int", "class_counts": "int", "num_train": "int", "num_test": "int",
           "accuracy": "float", "owner": "int"}  # fmt: skip
#: /state's own datasets and groups (an algorithm's and an aggregator's state below them)
STATE = {"models", "client_accuracy", "trained_ids", "algorithm", "aggregator", "selection"}
#: /world: its datasets and attributes
WORLD = {"host": "str", "local_rank": "int", "address": "str"}
WORLD_ATTRS = {"launcher", "backend", "rendezvous", "rendezvous_ip"}
TIMING_ATTRS = {"trainer", "loop_started", "sum_bytes_per_param"}
#: the columns of the tables whose values are a fraction (balanced or plain accuracy)
FRACTIONS = {"accuracy", "accuracy_plain", "accuracy_worst", "accuracy_p10"}


class Contents:
    """The checks of one open run file, each refusal a CheckpointError naming ``path``."""

    def __init__(self, f: h5py.File, config: Config, path: Any):
        self.f, self.config, self.path = f, config, path
        self.K = config.data.num_clients

    def bad(self, what: str) -> CheckpointError:
        return CheckpointError(f"run file {self.path} is inconsistent: {what}")

    # -- values read from attributes ------------------------------------------------------

    def json_value(self, value: Any, where: str) -> Any:
        """An attribute that holds JSON (as the writer's ``_write_tree`` stores a value),
        parsed with its nesting bounded."""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str):
            raise self.bad(f"{where} is not JSON text")
        try:
            parsed = json.loads(value)
        except RecursionError:
            raise self.bad(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError:
            raise self.bad(f"{where} is not JSON") from None
        if nesting(parsed) > MAX_JSON_DEPTH:
            raise self.bad(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels")
        return parsed

    def integer(self, value: Any, where: str, lo: int, hi: int, what: str) -> int:
        """A whole number from ``lo`` to ``hi`` (an attribute's value as h5py gives it)."""
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]
        if isinstance(value, np.integer):
            value = int(value)
        if type(value) is not int or not lo <= value <= hi:
            shown = value if type(value) is int else repr(value)[:40]
            raise self.bad(f"{where} = {shown} is not {what}")
        return value

    def text(self, value: Any, where: str) -> str:
        if isinstance(value, bytes):
            try:
                return value.decode()
            except UnicodeDecodeError:
                raise self.bad(f"{where} is not UTF-8 text") from None
        if not isinstance(value, str):
            raise self.bad(f"{where} is not text")
        return value

    # -- datasets --------------------------------------------------------------------------

    def dataset(self, where: str, kind: str, ndim: int = 1) -> h5py.Dataset:
        """The dataset at ``where`` (no leading slash), of ``kind`` ("int", "float", "str",
        "number": int or float) and ``ndim`` dimensions."""
        ds = self.f.get(where)
        if not isinstance(ds, h5py.Dataset):
            raise self.bad(f"/{where} is not a dataset")
        if ds.ndim != ndim:
            raise self.bad(f"/{where} has {ds.ndim} dimensions; a run file's has {ndim}")
        if not _of_kind(ds.dtype, kind):
            raise self.bad(f"/{where} holds {ds.dtype} values; a run file's are {_KINDS[kind]}")
        return ds

    def rows(self, where: str, kind: str, n: int, what: str, ndim: int = 1) -> np.ndarray:
        ds = self.dataset(where, kind, ndim)
        if ds.shape[0] != n:
            raise self.bad(f"/{where} holds {ds.shape[0]} rows, not one for each of the {n} {what}")
        return ds[()]

    # -- the whole file --------------------------------------------------------------------

    def check(self) -> int:
        """Every check; returns the round of ``/state``."""
        f = self.f
        extra = sorted(set(f) - TOP_LEVEL) + sorted(f"@{a}" for a in set(f.attrs) - ROOT_ATTRS)
        if extra:
            raise self.bad(f"{extra[0]} is no part of a distfl run file")
        for part in REQUIRED:
            if part not in f:
                raise self.bad(f"/{part} is missing")
        self.check_names()
        self.check_root()
        rounds = self.check_state_round()
        self.check_clients()
        nodes = self.check_hierarchy(rounds)
        self.check_final(nodes)
        self.check_tables(rounds, nodes)
        self.check_world()
        self.check_state(nodes)
        return rounds

    def check_names(self) -> None:
        names: list[str] = []
        self.f.visititems_links(lambda name, link: names.append(name))
        for name in names:
            if name.count("/") >= MAX_DEPTH:
                raise self.bad(f"/{name[:80]}... is nested deeper than {MAX_DEPTH} levels")

    def check_root(self) -> None:
        a = self.f.attrs
        for key in ("created", "written", "distfl_version"):
            if key in a:
                self.text(a[key], f"@{key}")
        if self.integer(a.get("seed"), "@seed", 0, 2**63 - 1, "a seed") != self.config.run.seed:
            raise self.bad(f"@seed is not the stored config's run.seed ({self.config.run.seed})")
        most = f"a world of this run (1 to data.num_clients + 1 = {self.K + 1} ranks)"
        self.integer(a.get("world_size"), "@world_size", 1, self.K + 1, most)

    def check_state_round(self) -> int:
        state = self.f["state"]
        if not isinstance(state, h5py.Group):
            raise self.bad("/state is not a group")
        rounds = self.config.run.rounds
        value = self.json_value(state.attrs.get("round"), "/state@round")
        done = self.integer(value, "/state@round", 0, rounds,
                            f"a round of this run (0 to run.rounds = {rounds})")  # fmt: skip
        column = self.rows("metrics/round", "int", done, "rounds done (/state@round)")
        if not np.array_equal(column, np.arange(1, done + 1)):
            raise self.bad(f"/metrics/round does not count the rounds 1 to {done}")
        return done

    def check_clients(self) -> None:
        clients = self.f["clients"]
        if not isinstance(clients, h5py.Group):
            raise self.bad("/clients is not a group")
        for name in clients:
            if name not in CLIENTS:
                raise self.bad(f"/clients/{name} is no part of a distfl run file")
        K, G = self.K, len(self.config.groups)
        what = "clients"
        # the [K] arrays before the [K, C] one, so that a file that claims clients it has
        # not is refused before the largest is read
        train = self.rows("clients/num_train", "int", K, what)
        test = self.rows("clients/num_test", "int", K, what)
        if K and (train.min() < 0 or test.min() < 0):
            raise self.bad("/clients/num_train or /clients/num_test holds a negative count")
        if K and (train + test).min() < 2:
            raise self.bad(
                "a client holds fewer than two samples (/clients/num_train + num_test); "
                "every client of a run holds one to train on and one to test on"
            )
        group = self.rows("clients/group", "int", K, what)
        if K and (group.min() < 0 or group.max() >= G):
            raise self.bad(f"/clients/group holds a group outside 0..{G - 1} (data.groups)")
        counts = self.rows("clients/class_counts", "int", K, what, ndim=2)
        if counts.shape[1] < 1:
            raise self.bad("/clients/class_counts has no class")
        if counts.size and counts.min() < 0:
            raise self.bad("/clients/class_counts holds a negative count")
        if not np.array_equal(counts.sum(axis=1), train + test):
            raise self.bad(
                "/clients/class_counts does not add up to each client's samples "
                "(/clients/num_train + /clients/num_test)"
            )
        accuracy = self.rows("clients/accuracy", "float", K, what)
        _fractions(self, accuracy, "/clients/accuracy")
        if "owner" in clients:
            owner = self.rows("clients/owner", "int", K, what)
            if K and owner.min() < 0:
                raise self.bad("/clients/owner holds a negative owner")

    def check_hierarchy(self, rounds: int) -> dict[str, tuple[str, int, int]]:
        """(parent, created_round, split_round) of every node, by id."""
        group = self.f["hierarchy"]
        if not isinstance(group, h5py.Group):
            raise self.bad("/hierarchy is not a group")
        nodes: dict[str, tuple[str, int, int]] = {}
        K = self.K
        for node_id, g in group.items():
            where = f"/hierarchy/{node_id}"
            if not NODE_ID.fullmatch(node_id):
                raise self.bad(f"/hierarchy holds {node_id[:40]!r}, which is not a cluster id")
            if not isinstance(g, h5py.Group) or "members" not in g:
                raise self.bad(f"{where} is not a cluster (no members)")
            for attr in ("parent", "created_round", "split_round"):
                if attr not in g.attrs:
                    raise self.bad(f"{where}@{attr} is missing")
            if set(g.attrs) - {"parent", "created_round", "split_round"}:
                other = sorted(set(g.attrs) - {"parent", "created_round", "split_round"})[0]
                raise self.bad(f"{where}@{other} is no part of a distfl run file")
            parent = self.text(g.attrs["parent"], f"{where}@parent")
            created = self.integer(g.attrs["created_round"], f"{where}@created_round", 0,
                                   rounds, f"a round of this run (0 to {rounds})")  # fmt: skip
            split = self.integer(g.attrs["split_round"], f"{where}@split_round", -1, rounds,
                                 f"-1 (a leaf) or a round of this run (to {rounds})")  # fmt: skip
            if split >= 0 and split < created:
                raise self.bad(f"{where} split in round {split}, before it was made ({created})")
            members = self.dataset(f"hierarchy/{node_id}/members", "int")[()]
            if len(members) and (members.min() < 0 or members.max() >= K):
                raise self.bad(f"{where}/members holds a client id outside 0..{K - 1}")
            if len(np.unique(members)) != len(members):
                raise self.bad(f"{where}/members names a client twice")
            for name, item in g.items():
                if name != "members" and (
                    not isinstance(item, h5py.Dataset) or not _of_kind(item.dtype, "number")
                ):
                    raise self.bad(f"{where}/{name} is not an array of numbers")
            nodes[node_id] = (parent, created, split)
        for node_id, (parent, created, _) in nodes.items():
            where = f"/hierarchy/{node_id}"
            if not parent:
                if created != 0:
                    raise self.bad(f"{where} is a root made in round {created}, not round 0")
                continue
            if parent not in nodes:
                raise self.bad(f"{where}'s parent {parent[:40]!r} is not in /hierarchy")
            if nodes[parent][2] != created:
                raise self.bad(
                    f"{where} was made in round {created}, not in the round its parent "
                    f"{parent} split ({nodes[parent][2]})"
                )
        _check_acyclic(self, nodes)
        return nodes

    def check_final(self, nodes: dict[str, tuple[str, int, int]]) -> None:
        leaves_ds = self.dataset("final/leaves", "str")
        leaves = [self.text(x, "/final/leaves") for x in leaves_ds[()]]
        for leaf in leaves:
            if leaf not in nodes:
                raise self.bad(f"/final/leaves names {leaf[:40]!r}, which is not in /hierarchy")
        if len(set(leaves)) != len(leaves):
            raise self.bad("/final/leaves names a cluster twice")
        K = self.K
        assignment = self.f["final/assignment"]
        if (
            not isinstance(assignment, h5py.Dataset)
            or assignment.shape != (K,)
            or assignment.dtype.kind not in "iu"
        ):
            raise self.bad(
                f"/final/assignment does not hold one leaf index for each of the {K} clients"
            )
        values = assignment[()]
        if K and (values.min() < 0 or values.max() >= len(leaves)):
            raise self.bad(f"/final/assignment points outside the {len(leaves)} leaves")
        models = self.dataset("final/models", "float", ndim=2)
        if models.shape[0] != len(leaves) or models.shape[1] < 1:
            raise self.bad(
                f"/final/models holds {models.shape[0]} models of {models.shape[1]} parameters, "
                f"not one for each of the {len(leaves)} leaves"
            )

    def check_tables(self, rounds: int, nodes: dict[str, tuple[str, int, int]]) -> None:
        for top in ("metrics", "timing"):
            if not isinstance(self.f[top], h5py.Group):
                raise self.bad(f"/{top} is not a group")
        placed = {t.path for t in layout.TABLES} | {layout.ALGORITHM_TABLES}
        for top in ("metrics", "timing"):
            for name, item in self.f[top].items():
                if isinstance(item, h5py.Group) and f"{top}/{name}" not in placed:
                    raise self.bad(f"/{top}/{name} is no part of a distfl run file")
        timing = self.f["timing"].attrs
        for key in timing:
            if key not in TIMING_ATTRS:
                raise self.bad(f"/timing@{key} is no part of a distfl run file")
        if "trainer" in timing:
            self.text(timing["trainer"], "/timing@trainer")
        for key in ("loop_started", "sum_bytes_per_param"):
            if key in timing:
                value = timing[key]
                if not isinstance(value, int | float | np.integer | np.floating) or not (
                    math.isfinite(float(value)) and float(value) >= 0
                ):
                    raise self.bad(f"/timing@{key} is not a non-negative number")
        for table in layout.TABLES:
            g = self.f.get(table.path)
            if g is not None:
                self.check_table(g, table, rounds, nodes)
        own = self.f.get(layout.ALGORITHM_TABLES)
        if own is not None and not isinstance(own, h5py.Group):
            raise self.bad(f"/{layout.ALGORITHM_TABLES} is not a group of tables")
        for name, g in (own or {}).items():
            where = f"/{layout.ALGORITHM_TABLES}/{name}"
            columns = list(g.values()) if isinstance(g, h5py.Group) else []
            if not columns or any(not isinstance(c, h5py.Dataset) or c.ndim != 1 for c in columns):
                raise self.bad(f"{where} is not a table (a group of columns)")
            if len({c.shape[0] for c in columns}) != 1:
                raise self.bad(f"{where}'s columns are not of one length")
            if set(g.attrs) - {"columns"}:
                raise self.bad(f"{where}@{sorted(set(g.attrs) - {'columns'})[0]} is no part of "
                               "a distfl run file")  # fmt: skip
            order = g.attrs.get("columns", np.array(sorted(g), dtype=object))
            listed = isinstance(order, np.ndarray) and order.ndim == 1
            if not listed or order.dtype.kind not in "OSU":
                raise self.bad(f"{where}@columns does not name its columns")
            if sorted(self.text(x, f"{where}@columns") for x in order) != sorted(g):
                raise self.bad(f"{where}@columns does not name its columns")
            found = layout.found_table(name, {k: np.empty(0, g[k].dtype) for k in g})
            self.check_table(g, found, rounds, nodes, own_table=True)

    def check_table(self, g, table: layout.Table, rounds: int, nodes, *, own_table=False) -> None:
        """One per-row table: each column 1-D of its declared kind (a further column of
        numbers), all of one length; rounds within the run's, cluster ids of the tree."""
        where = f"/{table.path}"
        if not isinstance(g, h5py.Group):
            raise self.bad(f"{where} is not a group of columns")
        lengths = set()
        declared = {c.name: c.kind for c in table.columns}
        tables = {t.path for t in layout.TABLES} | {layout.ALGORITHM_TABLES}
        for name, ds in g.items():
            if isinstance(ds, h5py.Group):
                if own_table or f"{table.path}/{name}" not in tables:
                    raise self.bad(f"{where}/{name} is no part of a distfl run file")
                continue  # a table below this one (/metrics/clusters), checked on its own
            kind = declared.get(name, "number")
            if own_table and name in ("round", "client", "other"):
                kind = "int"
            if own_table and name == "cluster":
                kind = "str"
            column = self.dataset(f"{table.path}/{name}", kind)
            lengths.add(column.shape[0])
            values = column[()]
            if name == "round" and len(values) and (values.min() < 1 or values.max() > rounds):
                raise self.bad(f"{where}/round holds a round outside 1..{rounds}")
            if kind == "str":
                for x in values:
                    text = self.text(x, f"{where}/{name}")
                    if name == "cluster" and text not in nodes:
                        raise self.bad(f"{where}/cluster names {text[:40]!r}, which is not in "
                                       "/hierarchy")  # fmt: skip
            elif (
                name in ("client", "other")
                and own_table
                and len(values)
                and (values.min() < 0 or values.max() >= self.K)
            ):
                raise self.bad(f"{where}/{name} holds a client id outside 0..{self.K - 1}")
            elif declared.get(name) == "int" and len(values) and values.min() < 0:
                raise self.bad(f"{where}/{name} holds a negative value")
            if name in FRACTIONS and declared.get(name) == "float" and not own_table:
                _fractions(self, values, f"{where}/{name}")
        if len(lengths) > 1:
            raise self.bad(f"{where}'s columns are not of one length")

    def check_world(self) -> None:
        world = self.f.get("world")
        if world is None:
            return
        if not isinstance(world, h5py.Group):
            raise self.bad("/world is not a group")
        W = int(self.f.attrs["world_size"])
        for name in world:
            if name not in WORLD:
                raise self.bad(f"/world/{name} is no part of a distfl run file")
            self.rows(f"world/{name}", WORLD[name], W, f"ranks (@world_size = {W})")
        for key, value in world.attrs.items():
            if key not in WORLD_ATTRS:
                raise self.bad(f"/world@{key} is no part of a distfl run file")
            self.text(value, f"/world@{key}")
        if "local_rank" in world and W and world["local_rank"][()].min() < 0:
            raise self.bad("/world/local_rank holds a negative rank")

    def check_state(self, nodes: dict[str, tuple[str, int, int]]) -> None:
        state = self.f["state"]
        for name in state:
            if name not in STATE:
                raise self.bad(f"/state/{name} is no part of a distfl run file")
        for name in ("algorithm", "aggregator", "selection"):
            if name in state and not isinstance(state[name], h5py.Group):
                raise self.bad(f"/state/{name} is not a group")
        ids = self.json_value(state.attrs.get("model_ids"), "/state@model_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise self.bad("/state@model_ids is not a list of cluster ids")
        for cid in ids:
            if cid not in nodes:
                raise self.bad(f"/state@model_ids names {cid[:40]!r}, which is not in /hierarchy")
        if len(set(ids)) != len(ids):
            raise self.bad("/state@model_ids names a cluster twice")
        digest = state.attrs.get("sha256")
        if digest is not None:
            self.text(digest, "/state@sha256")
        models = self.dataset("state/models", "float", ndim=2)
        width = self.f["final/models"].shape[1]
        if models.shape != (len(ids), width):
            raise self.bad(
                f"/state/models holds {models.shape[0]} models of {models.shape[1]} "
                f"parameters, not one of {width} (as /final/models) for each of the "
                f"{len(ids)} clusters of /state@model_ids"
            )
        accuracy = self.rows("state/client_accuracy", "float", self.K, "clients")
        _fractions(self, accuracy, "/state/client_accuracy")
        if "trained_ids" in state:
            ids = self.dataset("state/trained_ids", "int", ndim=1)[()]
            if len(ids) and (ids[0] < 0 or ids[-1] >= self.K or (np.diff(ids) <= 0).any()):
                raise self.bad("/state/trained_ids is not ascending client ids of the run")


_KINDS = {"int": "integers", "float": "floating-point numbers", "str": "text",
          "number": "numbers"}  # fmt: skip


def _of_kind(dtype: np.dtype, kind: str) -> bool:
    if kind == "int":
        return dtype.kind in "iu"
    if kind == "float":
        return dtype.kind == "f"
    if kind == "number":
        return dtype.kind in "biuf"
    return h5py.check_string_dtype(dtype) is not None


def _fractions(c: Contents, values: np.ndarray, where: str) -> None:
    """Accuracies: from 0 to 1, or NaN (not evaluated)."""
    v = np.asarray(values, dtype=np.float64)
    known = v[~np.isnan(v)]
    if len(known) and (known.min() < 0.0 or known.max() > 1.0):
        raise c.bad(f"{where} holds an accuracy outside 0..1")


def _check_acyclic(c: Contents, nodes: dict[str, tuple[str, int, int]]) -> None:
    """Every node reaches a root by its parents (no loop of parents)."""
    reaches: set[str] = set()
    for node_id in nodes:
        path: set[str] = set()
        cid = node_id
        while cid and cid not in reaches:
            if cid in path:
                raise c.bad(f"/hierarchy/{node_id}'s parents loop back to it")
            path.add(cid)
            cid = nodes[cid][0]
        reaches.update(path)


def check_contents(f: h5py.File, config: Config, path: Any) -> int:
    """Every check of this module on the open file ``f`` whose stored config is ``config``;
    returns the round of ``/state``. Raises CheckpointError."""
    return Contents(f, config, path).check()


__all__ = ["MAX_DEPTH", "MAX_JSON_DEPTH", "NODE_ID", "Contents", "check_contents"]
