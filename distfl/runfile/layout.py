"""The run file's layout, declared once: every group, every per-row table and each of its
columns (dtype, unit, meaning). The writer (:func:`distfl.runfile.writer.write_run_file`)
places the tables by this declaration, the reader (:func:`distfl.runfile.reader.read_run_file`)
reads them by it, the server's :class:`~distfl.runfile.tables.Rows` fill them by it, and the
layout on the run file page (docs/run-file.md) is rendered from it (``python -m
distfl.runfile.layout``), so that none of them can drift from the others.

Every part of a file is covered by its integrity record (:mod:`distfl.runfile.integrity`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

#: dtypes of the table columns as written
DTYPES = {"int": np.dtype(np.int64), "float": np.dtype(np.float64), "str": np.dtype(object)}

#: the format of the files this writer seals (root attribute ``format``): every file of a
#: format >= 2 carries its integrity record, every one of format >= 3 the digest of the
#: config its state was computed with (/state@config_sha256); distfl 0.1.0's files have no
#: such attribute
FORMAT = 3


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "int", "float" or "str" (int64, float64, a variable-length string)
    doc: str
    unit: str = ""

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.kind]

    @property
    def missing(self):
        """What a row written before the column existed holds: NaN, 0 or ""."""
        return {"float": float("nan"), "int": 0, "str": ""}[self.kind]


@dataclass(frozen=True)
class Table:
    """A per-row table: one resizable dataset per column under ``path``, all of the same
    length. ``open``: further float64 columns by name are allowed (an algorithm's own
    statistics), written after the declared ones in sorted order."""

    key: str  # its name in RunFile.tables
    path: str
    rows: str  # what one row is
    columns: tuple[Column, ...]
    doc: str = ""
    open: bool = False
    #: an open table's columns that only the runtime fills (no statistic may take them)
    fixed: tuple[str, ...] = ()
    #: whether only some runs write it (a file without it is whole): it is written where it
    #: holds rows
    optional: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        if self.open:
            return Column(name, "float", "a statistic an algorithm records")
        raise KeyError(f"/{self.path} has no column {name!r}")


def _c(name: str, kind: str, doc: str, unit: str = "") -> Column:
    return Column(name, kind, doc, unit)


ROUND = _c("round", "int", "the round (1, 2, ...)")
CLUSTER = _c("cluster", "str", "the cluster's id in /hierarchy")

METRICS = Table(
    "metrics", "metrics", "one per round",
    (
        ROUND,
        _c("num_clusters", "int", "leaf clusters at the round's end"),
        _c("num_participants", "int", "clients that trained"),
        _c("num_splits", "int", "splits made in the round"),
        _c("train_loss_first", "float", "mean over participants of the first local step's loss"),
        _c("train_loss_last", "float", "the same of the last local step"),
        _c("accuracy", "float", "balanced accuracy of the federation (NaN in rounds without "
           "evaluation): the mean over the evaluated clients (weighted as eval.weighted says)"),
        _c("accuracy_worst", "float", "the lowest balanced accuracy of an evaluated client "
           "(NaN in rounds without evaluation, and in files written before the column)"),
        _c("accuracy_p10", "float", "the 10th percentile of the evaluated clients' balanced "
           "accuracies (unweighted; numpy's default linear interpolation), NaN as "
           "accuracy_worst"),
        _c("accuracy_plain", "float", "plain accuracy, as accuracy"),
        _c("test_loss", "float", "test loss, as accuracy"),
        _c("federation_bytes", "int", "what a real deployment's clients and server exchange "
           "in the round", "bytes"),
        _c("unavailable", "int", "clients a plan named that were not available "
           "([participation]; an algorithm that names every member of a cluster)"),
        _c("dropped", "int", "selected clients that dropped out before they reported"),
        _c("late", "int", "reports that arrived after participation.deadline (discarded)"),
        _c("rejected", "int", "reports the selection left out of the aggregates (FedPNS's "
           "optimal aggregation)"),
        _c("sim_round_s", "float", "the round's duration on the virtual clock: the slowest "
           "reporting client's download, local steps and upload, or the deadline when a report "
           "was lost (NaN without participation.resources)", "s"),
        _c("sim_elapsed_s", "float", "the virtual clock's time since the run began, as "
           "sim_round_s", "s"),
        _c("loss_in_sample", "float", "the mean test loss of the evaluated clients that have "
           "trained so far, weighted as accuracy (eval.coverage; NaN without it and in rounds "
           "without evaluation)"),
        _c("loss_out_of_sample", "float", "the same of the evaluated clients that never "
           "trained (NaN when there are none)"),
        _c("dp_epsilon", "float", "ε of client-level differential privacy at privacy.delta "
           "after the rounds so far, from the accountant ([privacy]; NaN without noise, in "
           "files written before the column, and with privacy.accountant = 'prv' in rounds "
           "without evaluation)"),
        _c("dp_sample_steps", "int", "DP-SGD steps the busiest client may have taken so far: "
           "the sum over the rounds of train.local_steps times the most trainings one client "
           "had in the round (0 without privacy.sample_clip)"),
        _c("dp_sample_epsilon", "float", "a bound on every client's sample-level ε at "
           "privacy.delta: the accountant's for dp_sample_steps steps at the sampling rate of "
           "the smallest train split, b / n_min (NaN without privacy.sample_noise, and as "
           "dp_epsilon with 'prv')"),
        _c("held_out_accuracy", "float", "the newcomers' mean balanced accuracy (weighted as "
           "accuracy), each on the model its algorithm's rule gave it (data.held_out; NaN "
           "without newcomers and in rounds without evaluation)"),
        _c("held_out_accuracy_worst", "float", "the lowest balanced accuracy of a newcomer, "
           "NaN as held_out_accuracy"),
        _c("held_out_accuracy_p10", "float", "the 10th percentile of the newcomers' balanced "
           "accuracies, NaN as held_out_accuracy"),
        _c("held_out_ari", "float", "the adjusted Rand index of the clusters the newcomers "
           "joined (their largest weight's under soft membership) against their groups; NaN "
           "as held_out_accuracy, and for an algorithm without clusters to score"),
    ),
    "the deterministic per-round metrics: the same bits at any world size",
)  # fmt: skip

CLUSTERS = Table(
    "clusters", "metrics/clusters", "one per (round, cluster that trained)",
    (
        ROUND, CLUSTER,
        _c("size", "int", "members when the algorithm has updated the tree", "clients"),
        _c("sampled", "int", "members that trained", "clients"),
    ),
    "then one float64 column per statistic an algorithm returns in its round statistics, "
    "by name, NaN in rows without it (the algorithms' statistics: docs/algorithms.md); the "
    "first built-in algorithms' are written for every run",
    open=True,
    fixed=("round", "cluster", "size", "sampled"),
)  # fmt: skip
#: the columns the runtime fills itself (a statistic may not take their names)
FIXED_CLUSTER_COLUMNS = CLUSTERS.fixed

EVALUATION = Table(
    "evaluation", "metrics/evaluation", "one per (evaluation round, cluster)",
    (
        ROUND, CLUSTER,
        _c("clients", "int", "clients evaluated"),
        _c("accuracy", "float", "their mean balanced accuracy (weighted as eval.weighted says)"),
        _c("accuracy_worst", "float", "the lowest balanced accuracy of one of them (NaN in "
           "files written before the column)"),
        _c("accuracy_p10", "float", "the 10th percentile of their balanced accuracies "
           "(unweighted; numpy's default linear interpolation; NaN in files written before "
           "the column)"),
        _c("accuracy_plain", "float", "their mean plain accuracy"),
        _c("test_loss", "float", "their mean test loss"),
    ),
)  # fmt: skip

MEMBERSHIP = Table(
    "membership", "metrics/membership",
    "one per (round, leaf cluster, ground-truth group it holds clients of); for an "
    "algorithm that records no idle cluster (local), the leaves that trained that round",
    (
        ROUND, CLUSTER,
        _c("group", "int", "the ground-truth group (index into data.groups)"),
        _c("clients", "int", "the group's clients in the cluster at the round's end"),
    ),
)  # fmt: skip

TIMING = Table(
    "timing", "timing", "one per round",
    (
        ROUND,
        _c("elapsed_s", "float", "wall clock since the run's first round began", "s"),
        _c("bytes", "int", "this world's traffic on rank 0", "bytes"),
        _c("rss_mb", "float", "rank 0's peak resident memory so far", "MiB"),
        _c("update_s", "float", "the clustering algorithm's update of the round on the "
           "server, its split tests included (NaN in files written before the column)", "s"),
    ),
    "wall-clock numbers: they differ between runs and world sizes, so they stay out of "
    "/metrics",
)  # fmt: skip

WORKERS = Table(
    "workers", "timing/workers", "one per (round, worker rank)",
    (
        ROUND,
        _c("rank", "int", "the worker's rank (0: the in-process worker of a one-process run)"),
        _c("clients", "int", "clients it trained in the round"),
        _c("train_s", "float", "local training, materialising the clients included", "s"),
        _c("busy_s", "float", "all its steps of the round: training, exact sums, probes, "
           "evaluation", "s"),
        _c("loaded", "int", "clients it materialised (cache misses)"),
        _c("cache_mb", "float", "clients cached at the round's end", "MiB"),
        _c("rss_mb", "float", "its peak resident memory so far", "MiB"),
        _c("pooled", "int", "pieces of the server's clustering it computed in the round "
           "(an algorithm's pooled pieces, such as Gaussian references; rank 0 itself at W = 1)"),
        _c("pooled_s", "float", "seconds it spent on them", "s"),
    ),
)  # fmt: skip

#: the /metrics columns of the newcomers' figures (data.held_out)
HELD_OUT_COLUMNS = ("held_out_accuracy", "held_out_accuracy_worst", "held_out_accuracy_p10",
                    "held_out_ari")  # fmt: skip

HELD_OUT = Table(
    "held_out", "metrics/held_out", "one per (evaluation round, newcomer)",
    (
        ROUND,
        _c("client", "int", "the newcomer's id (K, K + 1, ...: after every trained client)"),
        _c("group", "int", "its ground-truth group (index into data.groups)"),
        CLUSTER,
        _c("accuracy", "float", "its balanced accuracy on the model of the cluster it joined "
           "(on the algorithm's own evaluation where it has one: a mixture's)"),
        _c("accuracy_plain", "float", "its plain accuracy"),
        _c("test_loss", "float", "its mean test loss"),
    ),
    "the newcomers of data.held_out, placed by their algorithm's rule at every evaluation "
    "(docs/newcomers.md); written only by a run with newcomers",
    optional=True,
)  # fmt: skip

#: every per-row table, in the order of the file's description
TABLES = (METRICS, CLUSTERS, EVALUATION, MEMBERSHIP, HELD_OUT, TIMING, WORKERS)
BY_KEY = {t.key: t for t in TABLES}

# -- an algorithm's own tables -------------------------------------------------------------

#: where an algorithm's own tables go: /metrics/tables/<name>/<column>, deterministic like
#: the rest of /metrics (the same bits at any world size)
ALGORITHM_TABLES = "metrics/tables"
#: the key of an algorithm's table in RunFile.tables and Record: this prefix, then its name
ALGORITHM_PREFIX = "tables/"
CLIENT = _c("client", "int", "the client's id (0 .. K-1)")
OTHER = _c("other", "int", "the pair's second client (0 .. K-1)")
#: what one row of an algorithm's table is about, and the columns the runtime checks and
#: places first (its own columns follow): the algorithm gives them all but ``round``
PER = {
    "cluster": ("one per (round, cluster) it records", (ROUND, CLUSTER)),
    "client": ("one per (round, client) it records", (ROUND, CLIENT)),
    "pair": ("one per (round, pair of clients) it records", (ROUND, CLIENT, OTHER)),
    "client_cluster": ("one per (round, client, cluster) it records", (ROUND, CLIENT, CLUSTER)),
}
#: the kinds of an algorithm's own columns
ALGORITHM_KINDS = ("int", "float")


def algorithm_table(name: str, per: str, columns: tuple[Column, ...], doc: str = "") -> Table:
    """The :class:`Table` of an algorithm's own table ``name``: rows ``per`` cluster,
    client or pair (:data:`PER`'s columns first), then ``columns``."""
    rows, first = PER[per]
    return Table(
        ALGORITHM_PREFIX + name, f"{ALGORITHM_TABLES}/{name}", rows, first + tuple(columns), doc,
        fixed=tuple(c.name for c in first),
    )  # fmt: skip


def found_table(name: str, stored: dict) -> Table:
    """The :class:`Table` of an algorithm's table ``name`` as a file holds it
    (``stored``: its columns), for one no algorithm of this process declares: its columns
    by their dtypes, so that it is carried on as it is."""
    kinds = {"i": "int", "u": "int", "f": "float", "b": "int"}
    columns = tuple(
        Column(k, kinds.get(np.asarray(v).dtype.kind, "str"), "a column of the file")
        for k, v in stored.items()
    )
    return Table(ALGORITHM_PREFIX + name, f"{ALGORITHM_TABLES}/{name}", "as the file holds it",
                 columns)  # fmt: skip


def table_path(key: str) -> str:
    """Where the table of key ``key`` lies in a run file (a built-in table or an
    algorithm's own)."""
    if key in BY_KEY:
        return BY_KEY[key].path
    if not key.startswith(ALGORITHM_PREFIX):
        raise KeyError(f"no table {key!r} in a run file")
    return f"{ALGORITHM_TABLES}/{key[len(ALGORITHM_PREFIX) :]}"


@dataclass(frozen=True)
class Part:
    """A dataset, group or attribute set outside the tables, for the description."""

    path: str
    shape: str
    doc: str


PARTS = (
    Part("/", "attrs", "distfl_version, format (3: the file has an integrity record and "
         "/state@config_sha256; 2: an integrity record; distfl 0.1.0's files have neither), "
         "config (JSON), seed, world_size, created (the run's first write), written (this "
         "write)"),
    Part("/clients/group", "[K]", "ground-truth group of each client (index into data.groups)"),
    Part("/clients/class_counts", "[K, C]", "class counts of each client's samples (train + "
         "test)"),
    Part("/clients/num_train", "[K]", "training samples of each client"),
    Part("/clients/num_test", "[K]", "test samples of each client"),
    Part("/clients/accuracy", "[K]", "balanced accuracy of each client's cluster model at the "
         "last evaluation"),
    Part("/clients/owner", "[K]", "natural partitions only: the writer (owner) index of each "
         "client"),
    Part("/metrics/tables/<name>", "group", "a table of the run's algorithm's own "
         "(declared by its tables: docs/adding-an-algorithm.md), one resizable dataset per "
         "column: round, then cluster (str), client (int), client and other (int) or client "
         "and cluster, for rows per cluster, client, pair or (client, cluster), then its own "
         "int64 and float64 columns"),
    Part("/hierarchy/<id>", "group", "one per cluster; \"0\" is the root, its children "
         "\"0.0\", \"0.1\", ...; attrs parent (\"\" for the root), created_round, split_round "
         "(-1: a leaf); members [n] client ids (a leaf: its members now; an algorithm that "
         "moves clients between clusters updates them); at a split what the algorithm stores "
         "there, each algorithm's own (its split_datasets: docs/run-file.md lists them)"),
    Part("/final/assignment", "[K]", "index of each client's leaf in /final/leaves"),
    Part("/final/leaves", "[L]", "leaf ids (strings)"),
    Part("/final/models", "[L, P]", "float32 flat parameters of each leaf's model"),
    Part("/timing", "attrs", "trainer (the local trainer the workers used), loop_started (Unix "
         "time at which the writing process's rounds loop began: launch to it is the "
         "start-up), sum_bytes_per_param (bytes each rank handed to the exact sums' reduce "
         "per model parameter, Σ n_k aside, in the last training round)"),
    Part("/world", "group", "where the ranks of the launch that wrote the file ran: host [W], "
         "local_rank [W], address [W]; attrs launcher, backend, rendezvous, rendezvous_ip"),
    Part("/state", "group", "what exact resumption needs: attrs round, sha256, "
         "config_sha256 (the digest of the config the state was computed with: every key "
         "but those a resume may change and run.plugins, and a key added since at its "
         "former behaviour's value); model_ids, "
         "models [clusters, P], client_accuracy, trained_ids (eval.coverage: the clients "
         "that have trained, ascending), selection/ (FedPNS's probabilities and counts), "
         "algorithm/ (the algorithm's own state "
         "besides the tree, which is /hierarchy: its generator, weights, per-cluster "
         "matrices, ...), aggregator/ (FedAvgM's velocity per cluster)"),
    Part("/integrity", "group", "path [n], sha256 [n]: the SHA-256 of every other dataset "
         "(/metrics/accuracy) and attribute (/hierarchy/0@split_round, /@config), checked by "
         "every reader"),
)  # fmt: skip

WIDTH = 92


def _wrap(head: str, text: str, indent: int) -> list[str]:
    lines = textwrap.wrap(text, WIDTH - indent) or [""]
    first = f"{head:<{indent}}{lines[0]}" if len(head) < indent else f"{head}\n{' ' * indent}"
    if len(head) >= indent:
        return [head, *(" " * indent + ln for ln in lines)]
    return [first, *(" " * indent + ln for ln in lines[1:])]


def describe() -> str:
    """The layout as text: each part, then each table with its columns."""
    out: list[str] = []
    for part in PARTS:
        out += _wrap(f"{part.path:<22}{part.shape}", part.doc, 30)
    for table in TABLES:
        out.append("")
        out += _wrap(f"/{table.path}/<column>", f"{table.rows}; resizable", 30)
        for c in table.columns:
            unit = f" [{c.unit}]" if c.unit else ""
            out += _wrap(f"  {c.name:<18}{c.kind}", c.doc + unit, 30)
        if table.doc:
            out += _wrap("", table.doc, 30)
    return "\n".join(line.rstrip() for line in out) + "\n"


if __name__ == "__main__":
    print(describe(), end="")
