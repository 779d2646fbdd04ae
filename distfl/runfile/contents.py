"""What a run file says, checked against its own config before any reader uses it.

The integrity record (:mod:`distfl.runfile.integrity`) is a checksum, not a signature:
whoever edits a file can seal it anew. So every reader also checks that the file holds
what a run of its stored config could have written, and refuses anything else with one
line (:class:`~distfl.errors.CheckpointError`, exit code 2), never a traceback, a number
shown as valid that no run wrote, or gigabytes of memory. It does so in two passes:

- :meth:`Contents.check_shapes`, from HDF5's metadata and the attributes alone, before
  anything is hashed: only the parts a run file has, each of the kind (group, dataset,
  attribute), dtype (int64, float64, float32 models, text) and shape its declaration gives
  (:mod:`distfl.runfile.layout`), no name deeper than :data:`MAX_DEPTH` levels; the round
  of ``/state`` a whole number from 0 to ``run.rounds``, with one row of ``/metrics`` and
  ``/timing`` for each round done; the world size from 1 to ``data.num_clients + 1`` (one
  server, at most one worker per client), and ``/world`` one row per rank; one row per
  client in ``/clients``, one column per class of the dataset; the models of ``/final``
  and ``/state`` as wide as the stored config's model has parameters (where a reader can
  count them without a plug-in), one per leaf and one per cluster of
  ``/state@model_ids``;
- :meth:`Contents.check_values`, on the values, after the digests: ground-truth groups of
  ``data.groups``, class counts that are not negative and add up to each client's
  samples, accuracies from 0 to 1; the tree's members clients of the run, each in one leaf
  at most and the final assignment the leaves' members, each node's parent a node that
  split in the round the node was made; short labels (:data:`MAX_LABEL`); the tables'
  values (:mod:`distfl.runfile.table_checks`), and /state's
  (:mod:`distfl.runfile.state_checks`: its JSON values, finite models).

Values are read only after :func:`distfl.runfile.integrity.check_storage` has bounded what
any dataset can cost.
"""

from __future__ import annotations

import re
from typing import Any

import h5py
import numpy as np

from distfl.config import Config
from distfl.errors import ConfigError
from distfl.runfile import integrity, state_checks, table_checks
from distfl.runfile.opened import MAX_JSON_DEPTH, MAX_LABEL, OpenedFile, of_kind

#: the deepest name of a run file (/state/algorithm/<part>/<part>/... of an algorithm's
#: nested state is a few levels deep)
MAX_DEPTH = 32
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
NODE_ATTRS = ("parent", "created_round", "split_round")


class Contents(OpenedFile):
    """The checks of one open run file, each refusal a CheckpointError naming ``path``."""

    def __init__(self, f: h5py.File, config: Config, path: Any):
        super().__init__(f, config, path)
        #: what :meth:`check_shapes` found: /state@model_ids, /final's leaves
        self.model_ids: list[str] = []
        #: what :meth:`check_hierarchy` found: the members of each leaf
        self.leaf_members: dict[str, np.ndarray] = {}

    # -- the whole file: shapes first, before anything is hashed ---------------------------

    def check_shapes(self) -> int:
        """Every check of the file's structure, from HDF5's metadata and the attributes alone
        (no dataset is read): returns the round of ``/state``."""
        f = self.f
        extra = sorted(set(f) - TOP_LEVEL) + sorted(f"@{a}" for a in set(f.attrs) - ROOT_ATTRS)
        if extra:
            raise self.bad(f"{extra[0]} is no part of a distfl run file")
        for part in REQUIRED:
            if part not in f:
                raise self.bad(f"/{part} is missing")
        for top in ("clients", "hierarchy", "final", "state"):
            if not isinstance(f[top], h5py.Group):
                raise self.bad(f"/{top} is not a group")
        self.check_names()
        self.check_root()
        self.done = self.check_state_round()
        self.check_client_shapes()
        self.check_hierarchy_shapes()
        self.check_model_shapes()
        table_checks.check_shapes(self)
        self.check_world_shapes()
        return self.done

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
                self.label(a[key], f"@{key}")
        if self.integer(a.get("seed"), "@seed", 0, 2**63 - 1, "a seed") != self.config.run.seed:
            raise self.bad(f"@seed is not the stored config's run.seed ({self.config.run.seed})")
        most = f"a world of this run (1 to data.num_clients + 1 = {self.K + 1} ranks)"
        self.integer(a.get("world_size"), "@world_size", 1, self.K + 1, most)

    def check_state_round(self) -> int:
        rounds = self.config.run.rounds
        value = self.json_value(self.f["state"].attrs.get("round"), "/state@round")
        done = self.integer(value, "/state@round", 0, rounds,
                            f"a round of this run (0 to run.rounds = {rounds})")  # fmt: skip
        self.sized("metrics/round", "int", done, "rounds done (/state@round)")
        return done

    def check_client_shapes(self) -> None:
        clients = self.f["clients"]
        for name in clients:
            if name not in CLIENTS:
                raise self.bad(f"/clients/{name} is no part of a distfl run file")
        for name, kind in CLIENTS.items():
            if name in clients:
                self.sized(f"clients/{name}", kind, self.K, "clients",
                           ndim=2 if name == "class_counts" else 1)  # fmt: skip
        classes = self.f["clients/class_counts"].shape[1]
        want = dataset_classes(self.config)
        if classes < 1 or (want is not None and classes != want):
            of = "" if want is None else f"; data.dataset = {self.config.data.dataset!r} has {want}"
            raise self.bad(f"/clients/class_counts counts {classes} classes{of}")

    def check_hierarchy_shapes(self) -> None:
        rounds = self.config.run.rounds
        for node_id, g in self.f["hierarchy"].items():
            where = f"/hierarchy/{node_id}"
            if not NODE_ID.fullmatch(node_id):
                raise self.bad(f"/hierarchy holds {node_id[:40]!r}, which is not a cluster id")
            if not isinstance(g, h5py.Group) or "members" not in g:
                raise self.bad(f"{where} is not a cluster (no members)")
            for attr in NODE_ATTRS:
                if attr not in g.attrs:
                    raise self.bad(f"{where}@{attr} is missing")
            if set(g.attrs) - set(NODE_ATTRS):
                other = sorted(set(g.attrs) - set(NODE_ATTRS))[0]
                raise self.bad(f"{where}@{other} is no part of a distfl run file")
            self.text(g.attrs["parent"], f"{where}@parent")
            created = self.integer(g.attrs["created_round"], f"{where}@created_round", 0,
                                   rounds, f"a round of this run (0 to {rounds})")  # fmt: skip
            split = self.integer(g.attrs["split_round"], f"{where}@split_round", -1, rounds,
                                 f"-1 (a leaf) or a round of this run (to {rounds})")  # fmt: skip
            if split >= 0 and split < created:
                raise self.bad(f"{where} split in round {split}, before it was made ({created})")
            members = self.dataset(f"hierarchy/{node_id}/members", "int")
            if members.shape[0] > self.K:
                raise self.bad(f"{where}/members names {members.shape[0]} clients, more than "
                               f"the run's {self.K}")  # fmt: skip
            for name, item in g.items():
                if name != "members" and (
                    not isinstance(item, h5py.Dataset) or not of_kind(item.dtype, "number")
                ):
                    raise self.bad(f"{where}/{name} is not an array of numbers")

    def check_model_shapes(self) -> None:
        """/final's leaves, assignment and models, /state's models and per-client arrays."""
        leaves = self.dataset("final/leaves", "str").shape[0]
        if leaves > len(self.f["hierarchy"]):
            raise self.bad(f"/final/leaves names {leaves} clusters, more than /hierarchy holds")
        self.sized("final/assignment", "int", self.K, "clients")
        width = self._models("final/models", leaves, "leaves (/final/leaves)", None)
        st = self.f["state"]
        for name in st:
            if name not in STATE:
                raise self.bad(f"/state/{name} is no part of a distfl run file")
        for name in ("algorithm", "aggregator", "selection"):
            if name in st and not isinstance(st[name], h5py.Group):
                raise self.bad(f"/state/{name} is not a group")
        ids = self.json_value(st.attrs.get("model_ids"), "/state@model_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise self.bad("/state@model_ids is not a list of cluster ids")
        self.model_ids = ids
        self._models("state/models", len(ids), "clusters of /state@model_ids", width)
        self.sized("state/client_accuracy", "float", self.K, "clients")
        if "trained_ids" in st and self.dataset("state/trained_ids", "int").shape[0] > self.K:
            raise self.bad("/state/trained_ids names more clients than the run has")

    def _models(self, where: str, n: int, what: str, width: int | None) -> int:
        """The models at ``where``: float32, ``n`` rows (one per ``what``), ``width`` wide
        (when given: /final's) and as wide as the stored config's model has parameters
        (where that can be counted here). Returns their width."""
        models = self.dataset(where, "model", ndim=2)
        count, got = models.shape
        if count != n or got < 1 or (width is not None and got != width):
            like = "some" if width is None else f"{width} (as /final/models)"
            raise self.bad(
                f"/{where} holds {count} models of {got} parameters, not one of {like} "
                f"for each of the {n} {what}"
            )
        want = model_parameters(self.config)
        if want is not None and got != want:
            raise self.bad(
                f"/{where} holds models of {got} parameters; the stored config's model "
                f"({self.config.model.name} on {self.config.data.dataset}) has {want}"
            )
        return got

    def check_world_shapes(self) -> None:
        world = self.f.get("world")
        if world is None:
            return
        if not isinstance(world, h5py.Group):
            raise self.bad("/world is not a group")
        W = int(self.f.attrs["world_size"])
        for name in world:
            if name not in WORLD:
                raise self.bad(f"/world/{name} is no part of a distfl run file")
            self.sized(f"world/{name}", WORLD[name], W, f"ranks (@world_size = {W})")
        for key, value in world.attrs.items():
            if key not in WORLD_ATTRS:
                raise self.bad(f"/world@{key} is no part of a distfl run file")
            self.label(value, f"/world@{key}")

    # -- the values, once every part has matched its digest -------------------------------

    def check_values(self) -> None:
        """The values of every part (:meth:`check_shapes` first)."""
        done = self.done
        if not np.array_equal(self.f["metrics/round"][()], np.arange(1, done + 1)):
            raise self.bad(f"/metrics/round does not count the rounds 1 to {done}")
        self.check_clients()
        nodes = self.check_hierarchy()
        self.check_final(nodes)
        table_checks.check_values(self, done, nodes)
        self.check_world()
        self.check_state_ids(nodes)
        state_checks.check(self)

    def check_world(self) -> None:
        """Ranks within the world, host names and addresses short text."""
        world = self.f.get("world", {})
        for name in ("host", "address"):
            if name in world:
                for x in world[name][()]:
                    self.label(x, f"/world/{name}")
        if "local_rank" in world:
            local = world["local_rank"][()]
            if len(local) and (local.min() < 0 or local.max() >= len(local)):
                raise self.bad("/world/local_rank holds a rank outside the world")

    def check_clients(self) -> None:
        K, G = self.K, len(self.config.groups)
        # the [K] arrays before the [K, C] one, so that a file that claims clients it has
        # not is refused before the largest is read
        train = self.f["clients/num_train"][()]
        test = self.f["clients/num_test"][()]
        if K and (train.min() < 0 or test.min() < 0):
            raise self.bad("/clients/num_train or /clients/num_test holds a negative count")
        if K and (train + test).min() < 2:
            raise self.bad(
                "a client holds fewer than two samples (/clients/num_train + num_test); "
                "every client of a run holds one to train on and one to test on"
            )
        group = self.f["clients/group"][()]
        if K and (group.min() < 0 or group.max() >= G):
            raise self.bad(f"/clients/group holds a group outside 0..{G - 1} (data.groups)")
        counts = self.f["clients/class_counts"][()]
        if counts.size and counts.min() < 0:
            raise self.bad("/clients/class_counts holds a negative count")
        if not np.array_equal(counts.sum(axis=1), train + test):
            raise self.bad(
                "/clients/class_counts does not add up to each client's samples "
                "(/clients/num_train + /clients/num_test)"
            )
        self.fractions(self.f["clients/accuracy"][()], "/clients/accuracy")
        if "owner" in self.f["clients"]:
            owner = self.f["clients/owner"][()]
            if K and owner.min() < 0:
                raise self.bad("/clients/owner holds a negative owner")

    def check_hierarchy(self) -> dict[str, tuple[str, int, int]]:
        """(parent, created_round, split_round) of every node, by id; its members clients
        of the run (each once), each client in one leaf at most."""
        nodes: dict[str, tuple[str, int, int]] = {}
        K = self.K
        in_leaf = np.zeros(K, dtype=bool)
        self.leaf_members = {}
        for node_id, g in self.f["hierarchy"].items():
            where = f"/hierarchy/{node_id}"
            members = g["members"][()]
            if len(members) and (members.min() < 0 or members.max() >= K):
                raise self.bad(f"{where}/members holds a client id outside 0..{K - 1}")
            if len(np.unique(members)) != len(members):
                raise self.bad(f"{where}/members names a client twice")
            if (np.diff(members) < 0).any():
                raise self.bad(f"{where}/members is not in ascending order, as a run writes it")
            split = int(g.attrs["split_round"])
            if split < 0:
                if in_leaf[members].any():
                    first = int(members[in_leaf[members]][0])
                    raise self.bad(f"{where}/members names client {first}, a member of another "
                                   "leaf too (a client is in one leaf at most)")  # fmt: skip
                in_leaf[members] = True
                self.leaf_members[node_id] = members
            parent = self.text(g.attrs["parent"], f"{where}@parent")
            nodes[node_id] = (parent, int(g.attrs["created_round"]), split)
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
        leaves = [self.text(x, "/final/leaves") for x in self.f["final/leaves"][()]]
        for leaf in leaves:
            if leaf not in nodes:
                raise self.bad(f"/final/leaves names {leaf[:40]!r}, which is not in /hierarchy")
            if nodes[leaf][2] >= 0:
                raise self.bad(f"/final/leaves names {leaf[:40]!r}, a cluster that split")
        if len(set(leaves)) != len(leaves):
            raise self.bad("/final/leaves names a cluster twice")
        values = self.f["final/assignment"][()]
        if self.K and (values.min() < 0 or values.max() >= len(leaves)):
            raise self.bad(f"/final/assignment points outside the {len(leaves)} leaves")
        expected = np.full(self.K, -1, dtype=np.int64)
        for i, leaf in enumerate(leaves):
            expected[self.leaf_members[leaf]] = i
        if not np.array_equal(values, expected):
            k = int(np.flatnonzero(values != expected)[0])
            raise self.bad(f"/final/assignment puts client {k} in another leaf than the one "
                           "whose members it is (/hierarchy/<id>/members)")  # fmt: skip

    def check_state_ids(self, nodes: dict[str, tuple[str, int, int]]) -> None:
        ids = self.model_ids
        for cid in ids:
            if cid not in nodes:
                raise self.bad(f"/state@model_ids names {cid[:40]!r}, which is not in /hierarchy")
        if len(set(ids)) != len(ids):
            raise self.bad("/state@model_ids names a cluster twice")
        st = self.f["state"]
        digest = st.attrs.get("sha256")
        if digest is not None:
            self.text(digest, "/state@sha256")
        self.fractions(st["client_accuracy"][()], "/state/client_accuracy")
        if "trained_ids" in st:
            trained = st["trained_ids"][()]
            if len(trained) and (
                trained[0] < 0 or trained[-1] >= self.K or (np.diff(trained) <= 0).any()
            ):
                raise self.bad("/state/trained_ids is not ascending client ids of the run")


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


def _builtin(registry: Any, name: str) -> Any:
    """distfl's own class registered as ``name`` (None for a plug-in's, or a name not
    registered in this process): what a reader can count without running a plug-in."""
    try:
        cls = registry.get(name)
    except ConfigError:
        return None
    return cls if cls.__module__.startswith("distfl.") else None


def dataset_classes(config: Config) -> int | None:
    """The classes of ``config``'s dataset, where it is one of distfl's own; else None."""
    from distfl.plugins import DATASETS

    spec = _builtin(DATASETS, config.data.dataset)
    return None if spec is None else int(spec.classes(config))


def model_parameters(config: Config) -> int | None:
    """The parameters of ``config``'s model on its dataset, where both are distfl's own (a
    built-in model counts them without being built); else None."""
    from distfl.plugins import DATASETS, MODELS

    data = _builtin(DATASETS, config.data.dataset)
    model = _builtin(MODELS, config.model.name)
    if data is None or model is None:
        return None
    shape = tuple(data.input_shape(config))
    count = model.parameter_count(shape, data.classes(config), config.model.params)
    return None if count is None else int(count)


__all__ = [
    "MAX_DEPTH", "MAX_JSON_DEPTH", "MAX_LABEL", "NODE_ID", "Contents", "dataset_classes",
    "model_parameters", "of_kind",
]  # fmt: skip
