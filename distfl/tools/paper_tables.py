"""The source papers' comparison tables as ``distfl suite --table NAME``: one command runs a
table's scenario with every method distfl has of the table's (and its own beside them), the
papers' protocol (``--true-clusters``: each method that takes a number of clusters is given
the scenario's number of groups), over the table's seeds, and prints the paper's columns
with the paper's value beside each row.

A table names its scenario (a preset), the ``--set`` items that make the paper's setting
on distfl's data (dataset, model, rounds, the methods' settings: an ``algorithm.KEY`` item
reaches only the listed methods that take KEY, and one no listed method takes is left out),
its methods in the paper's order (distfl's names; one distfl does not have is left out of
the run and listed as absent), and the paper's values: mean and standard deviation over the
paper's seeds. Ours are the mean and standard deviation (sample, n - 1) over the suite's
seeds of the suite's columns: ``accuracy`` (the federation's mean balanced accuracy at the
last evaluation), ``accuracy_worst`` (the worst client's) and ``ari``, accuracies in
percent as the papers print them, each with the number of seeds it is over (``n = 1``, and
no deviation, for one); counts (the rounds to a loss target) as whole numbers. Deviations
of a table (balanced rather than plain accuracy, distfl's smaller data and models) are its
``notes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: a paper's value: (mean, standard deviation), or None where the paper gives none ("-")
Value = tuple[float, float] | None


@dataclass(frozen=True)
class PaperRow:
    """A method's row of a paper's table: its label there and its values by our column."""

    label: str
    values: dict[str, Value] = field(default_factory=dict)


@dataclass(frozen=True)
class PaperTable:
    """A comparison table of a source paper, as ``distfl suite --table`` runs it."""

    name: str
    title: str
    #: the paper's columns: (our column, the paper's heading), in the paper's order
    columns: tuple[tuple[str, str], ...]
    scenario: str
    items: tuple[str, ...]
    #: distfl's methods in the paper's order, then distfl's own (fedgwc, local, ...)
    algorithms: tuple[str, ...]
    #: the paper's rows, by distfl's name of the method (the suite table's algorithm)
    rows: dict[str, PaperRow]
    seeds: tuple[int, ...] = (0, 1, 2)
    notes: str = ""
    #: ``--variant`` texts of the table's methods that are an algorithm with settings of
    #: their own (FedProx: one global model with the ``fedprox`` aggregator), by the name
    #: ``algorithms`` lists
    variants: tuple[str, ...] = ()


#: the columns of the comparison, as a suite row names them: accuracies in percent
PERCENT = frozenset({"accuracy", "accuracy_worst"})

_T1_COLUMNS = (("accuracy", "Avg Acc"), ("accuracy_worst", "Worst Acc"), ("ari", "ARI"))


def _t1(avg: float, avg_sd: float, worst: float, worst_sd: float, ari=None, ari_sd=0.0):
    values: dict[str, Value] = {"accuracy": (avg, avg_sd), "accuracy_worst": (worst, worst_sd)}
    values["ari"] = None if ari is None else (ari, ari_sd)
    return values


#: EMD-CFL (Table 1, Rotated MNIST): mean ± sd over 3 runs; "-": no clustering to score
_EMDCFL_T1_MNIST = {
    "oracle": PaperRow("Oracle", _t1(98.86, 0.05, 97.58, 0.26, 1.00, 0.00)),
    "emdcfl": PaperRow("EMD-CFL", _t1(98.86, 0.04, 97.58, 0.26, 1.00, 0.00)),
    "cfl": PaperRow("CFL", _t1(98.62, 0.33, 96.97, 0.95, 0.90, 0.14)),
    "pacfl": PaperRow("PACFL", _t1(98.86, 0.02, 97.73, 0.00, 1.00, 0.00)),
    "fedclust": PaperRow("FedClust", _t1(96.93, 0.43, 94.39, 1.46, 1.00, 0.00)),
    "ifca": PaperRow("IFCA", _t1(98.44, 0.33, 96.67, 0.95, 0.80, 0.14)),
    "flexcfl": PaperRow("FlexCFL", _t1(97.25, 0.28, 94.85, 0.26, 1.00, 0.00)),
    "fesem": PaperRow("FeSEM", _t1(87.80, 4.10, 64.09, 22.17, 0.34, 0.10)),
    "cflgp": PaperRow("CFLGP", _t1(98.83, 0.09, 97.73, 0.00, 1.00, 0.00)),
    "fedavg": PaperRow("FedAvg", _t1(91.04, 0.12, 86.67, 0.69)),
    "fedprox": PaperRow("FedProx", _t1(89.05, 0.37, 85.61, 0.52)),
    # the soft-clustering rows: no clustering to score ("-")
    "fedem": PaperRow("FedEM", _t1(94.86, 1.24, 84.55, 4.17)),
    "fedsoft": PaperRow("FedSoft", _t1(98.59, 0.05, 96.82, 0.45)),
    "fedrc": PaperRow("FedRC", _t1(95.10, 1.65, 85.76, 5.17)),
    "fedce": PaperRow("FedCE", _t1(98.73, 0.15, 96.82, 0.79)),
    "pfedgraph": PaperRow("pFedGraph", _t1(98.20, 0.09, 96.06, 0.52)),
    "fedsac": PaperRow("FedSaC", _t1(97.19, 0.95, 89.70, 5.46)),
}

#: FedProx (Li et al., MLSys 2020) as the table runs it: one global model whose clients add
#: (μ/2)‖w − w_start‖², μ = 0.01 (EMD-CFL's ``run_fedprox.py``)
_FEDPROX = 'fedprox=none:server.aggregator="fedprox",train.prox_mu=0.01'


#: EMD-CFL's hard-clustering methods and FedAvg (Table 1's rows distfl can have), then
#: distfl's own methods and baselines beside them
_T1_ALGORITHMS = (
    "oracle", "emdcfl", "cfl", "pacfl", "fedclust", "ifca", "flexcfl", "fesem", "cflgp",
    "fedem", "fedsoft", "fedrc", "fedce", "none", "fedprox", "pfedgraph", "fedsac", "fedgwc",
    "flcl", "local", "fedavg_ft",
)  # fmt: skip

#: EMD-CFL's settings on distfl's MNIST subset (mnist5k, LeNet-5) as docs/fidelity.md
#: measured them: 500 samples a client, ε = 0.75; the one-shot methods that train before
#: they cluster (EMD-CFL, FedClust) cluster after the paper's first round of 10 local epochs,
#: 235 steps of batch 16 over a client's 375 training samples
_MNIST5K_ITEMS = (
    'data.dataset="mnist5k"',
    'model.name="lenet5"',
    "data.samples_per_client=500",
    "algorithm.emd_epsilon=0.75",
    "algorithm.steps=235",
)

#: the paper's main experiments train every client in every round (its partial
#: participation is appendix E.4's Table 6): all 40 clients of `rotated`
_T1_EVERY_CLIENT = ("server.clients_per_round=40",)

_T1_NOTES = (
    "Accuracies are balanced (mean recall over the classes of a client's test split), the "
    "paper's plain. The paper tunes PACFL's and FedClust's thresholds to the split closest "
    "to the true one; --true-clusters cuts their hierarchies into the true number of "
    "clusters, which can leave an outlying client alone where a threshold would not. "
    "The paper scores no clustering of the soft methods (-); distfl's ARI of FedEM, "
    "FedSoft and FedRC is that of each client's largest weight, FedCE's that of its last "
    "cluster; pFedGraph and FedSaC have none. FedProx is one global model with the fedprox "
    "aggregator and mu = 0.01 (EMD-CFL's; its term is mu times the norm, distfl's the "
    "paper's mu/2 times the squared norm). Every client trains in every round, as in the "
    "paper's main experiments; the paper's T = 10 rounds of E = 10 "
    "local epochs are distfl's rounds of 8 local steps (the table's rounds)."
)

TABLES: dict[str, PaperTable] = {
    # Table 1 on distfl's MNIST subset (mnist5k, LeNet-5): EMD-CFL's settings on it as
    # docs/fidelity.md measured them (500 samples a client, ε = 0.75, 235 embedding steps)
    "emdcfl-table1": PaperTable(
        name="emdcfl-table1",
        title="EMD-CFL Table 1, Rotated MNIST (mnist5k, LeNet-5)",
        columns=_T1_COLUMNS,
        scenario="rotated",
        # 75 rounds of all 40 clients: the client updates of the scenario's 300 rounds of 10
        items=(*_MNIST5K_ITEMS, *_T1_EVERY_CLIENT, "run.rounds=75", "eval.every=15"),
        algorithms=_T1_ALGORITHMS,
        rows=_EMDCFL_T1_MNIST,
        variants=(_FEDPROX,),
        notes=_T1_NOTES + " EMD-CFL and FedClust train 235 local steps (the paper's 10 epochs "
        "over a client's 375 training samples) before their one-shot clustering.",
    ),
    # the quick form: rotated 8x8 digits, the MLP, 100 rounds (docs/scenarios.md's "every
    # algorithm on one scenario", seconds a run)
    "emdcfl-table1-quick": PaperTable(
        name="emdcfl-table1-quick",
        title="EMD-CFL Table 1, Rotated MNIST, quick form on rotated digits (MLP)",
        columns=_T1_COLUMNS,
        scenario="rotated",
        items=(
            "data.samples_per_client=300",
            *_T1_EVERY_CLIENT,
            "run.rounds=100",
            "eval.every=20",
            "algorithm.emd_epsilon=0.15",
            "algorithm.eps2=0.9",
            "algorithm.warmup=5",
        ),
        algorithms=_T1_ALGORITHMS,
        rows=_EMDCFL_T1_MNIST,
        variants=(_FEDPROX,),
        notes=_T1_NOTES + " Digits are 8x8 and the model an MLP: the paper's values are "
        "for 28x28 MNIST and its CNN.",
    ),
    # Table 3 (Backdoor MNIST): the paper's clean accuracy and ARI; its backdoor accuracy
    # (targets' accuracy on data with the backdoor feature flipped) is not measured here
    "emdcfl-table3": PaperTable(
        name="emdcfl-table3",
        title="EMD-CFL Table 3, Backdoor MNIST (mnist5k, LeNet-5)",
        columns=(("accuracy", "Clean Acc"), ("accuracy_worst", "Worst Acc"), ("ari", "ARI")),
        scenario="backdoor",
        # every one of the scenario's 15 clients in every round, as the paper trains them
        items=(*_MNIST5K_ITEMS, "server.clients_per_round=15"),
        algorithms=_T1_ALGORITHMS,
        rows={
            name: PaperRow(label, {"accuracy": acc, "accuracy_worst": None, "ari": ari})
            for name, label, acc, ari in (
                ("oracle", "Oracle", (98.37, 0.11), (1.00, 0.00)),
                ("emdcfl", "EMD-CFL", (98.40, 0.04), (1.00, 0.00)),
                ("cfl", "CFL", (98.43, 0.07), (0.46, 0.02)),
                ("pacfl", "PACFL", (95.55, 0.14), (0.42, 0.00)),
                ("fedclust", "FedClust", (93.04, 3.35), (0.53, 0.02)),
                ("ifca", "IFCA", (98.54, 0.05), (0.55, 0.00)),
                ("flexcfl", "FlexCFL", (39.51, 51.12), (1.00, 0.00)),
                ("fesem", "FeSEM", (97.23, 0.00), (-0.00, 0.01)),
                ("cflgp", "CFLGP", (98.34, 0.08), (1.00, 0.00)),
            )
        },
        notes="The paper's second column is the backdoor accuracy (the targets' accuracy "
        "on data with the backdoor feature flipped), which distfl does not measure: its "
        "worst-client accuracy stands there, with no paper value. " + _T1_NOTES,
    ),
}


#: FedCS and FedPNS as the FLCL paper compares them: FedAvg's global model with their
#: selection of each round's clients (FedCS's deadline fits the clients of about the faster
#: half of the clock's speeds: 5 local steps of 16 samples at 53 samples/s or more)
_SELECTIONS = (
    'fedcs=none:participation.selection="fedcs",participation.deadline=1.5',
    'fedpns=none:participation.selection="fedpns"',
)

_FLCL_NOTES = (
    "The paper draws its Fig. 1 and Fig. 2 as the global loss against the rounds and gives "
    "no numbers: the rows hold none (-), and distfl report draws the curves "
    "(docs/fidelity.md says which of the paper's claims hold). The loss is the mean test "
    "loss of the clients on their cluster's model (FLCL) or the global model; the paper's "
    "l_g of the sampling methods is the sum of the mean in-sample and the mean "
    "out-of-sample loss (eval.coverage records both). FedCS and FedPNS select FedAvg's "
    "clients; the paper's client counts, rounds and resources are not given: distfl's are "
    "the preset's."
)


def _flcl_figure(name: str, title: str) -> PaperTable:
    return PaperTable(
        name=name,
        title=title,
        columns=(("test_loss", "final test loss"), ("rounds_to_target", "rounds to 0.28")),
        scenario=name,
        items=(),
        algorithms=("flcl", "fedcs", "fedpns", "none"),
        rows={
            "flcl": PaperRow("FLCL"),
            "fedcs": PaperRow("FedCS"),
            "fedpns": PaperRow("FedPNS"),
            "fedavg": PaperRow("FedAvg"),
        },  # fmt: skip
        notes=_FLCL_NOTES,
        variants=_SELECTIONS,
    )


TABLES["flcl-fig1"] = _flcl_figure(
    "flcl-fig1", "FLCL Fig. 1, input heterogeneity (the Gaussian mixture, rotations in [0, π/2))"
)
TABLES["flcl-fig2"] = _flcl_figure(
    "flcl-fig2", "FLCL Fig. 2, output heterogeneity (rotations in [0, π], 12 of 40 flipped)"
)


def table_names() -> list[str]:
    return list(TABLES)


def table_titled(title: str) -> str | None:
    """The name of the table whose title is ``title`` (the first line of its comparison),
    or None."""
    return next((name for name, spec in TABLES.items() if spec.title == title), None)


def absent_rows(table: PaperTable) -> list[str]:
    """The paper's labels of the table's rows that are not methods of distfl (neither an
    algorithm, nor a variant the table defines, nor FedAvg)."""
    from distfl.algorithms import algorithm_names

    known = set(algorithm_names()) | {v.partition("=")[0] for v in table.variants}
    return [row.label for name, row in table.rows.items()
            if name not in known and name != "fedavg"]  # fmt: skip


def stats(values: list[float]) -> tuple[float, float] | None:
    """(mean, sample standard deviation) of the finite ``values``; sd 0 for one value; None
    for none."""
    finite = _finite(values)
    if not finite:
        return None
    mean = math.fsum(finite) / len(finite)
    if len(finite) == 1:
        return mean, 0.0
    var = math.fsum((v - mean) ** 2 for v in finite) / (len(finite) - 1)
    return mean, math.sqrt(var)


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def finished(row: dict[str, Any]) -> bool:
    """Whether a suite's ``row`` is of a run that finished (a failed run has no scores)."""
    return row.get("ari") is not None or row.get("accuracy") is not None


def comparison(table: PaperTable, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method of the suite's ``rows`` (in the order they came): the method,
    the paper's label, the seeds that finished, and for each of the table's columns ours
    (mean ± sd over the seeds, accuracies in percent), the number of seeds it is over
    (``<column>_n``), its worst seed's value and seed (``<column>_worst_seed``:
    :func:`worst_seed`) and the paper's."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_method.setdefault(row["algorithm"], []).append(row)
    out = []
    for method, runs in by_method.items():
        paper = table.rows.get(method)
        done = [r for r in runs if finished(r)]
        line: dict[str, Any] = {
            "method": method,
            "paper_label": paper.label if paper else "",
            "seeds": len(done),
        }
        for column, _ in table.columns:
            scale = 100.0 if column in PERCENT else 1.0
            values = [r[column] * scale for r in done if r.get(column) is not None]
            line[column] = stats(values)
            line[f"{column}_n"] = len(_finite(values))
            line[f"{column}_worst_seed"] = worst_seed(
                [(None if r.get(column) is None else r[column] * scale, r.get("seed"))
                 for r in done], column,
            )  # fmt: skip
            line[f"paper_{column}"] = paper.values.get(column) if paper else None
        out.append(line)
    return out


#: the columns where more is better (their worst seed has the least) and where less is
#: (the most); the others (clusters, a split's round) have no worst
HIGHER_BETTER = frozenset({"accuracy", "accuracy_worst", "ari", "rand", "was", "held_out_accuracy",
                           "held_out_accuracy_worst", "held_out_ari"})  # fmt: skip
LOWER_BETTER = frozenset({"test_loss", "rounds_to_target", "bytes_to_target", "wadb"})


#: the columns where a finished run without a value never reached the target: the worst
NEVER = frozenset({"rounds_to_target", "bytes_to_target"})


def worst_seed(values: list[tuple[Any, Any]], column: str) -> tuple[float, Any] | None:
    """(value, seed) of the worst of ``values`` ((value, seed) pairs of the finished runs)
    for ``column``: the least where more is better, the most where less is (the first seed
    of equal ones), ``inf`` for a run of a :data:`NEVER` column without a value (it never
    reached the target); None for a column without a worst, or fewer than 2 values. Other
    missing or non-finite values are left out."""
    if column not in HIGHER_BETTER | LOWER_BETTER:
        return None
    kept = []
    for v, seed in values:
        if v is None and column in NEVER:
            kept.append((math.inf, seed))
        elif v is not None and math.isfinite(float(v)):
            kept.append((float(v), seed))
    if len(kept) < 2:
        return None
    pick = min if column in HIGHER_BETTER else max
    return pick(kept, key=lambda pair: pair[0])


#: the columns that count (rounds, bytes, clusters): printed as whole numbers
COUNTS = frozenset({"rounds_to_target", "bytes_to_target", "clusters", "first_split"})


def _number(value: float, column: str) -> str:
    """A value of ``column``: a count as a whole number (one decimal where a mean over
    seeds is not whole), an accuracy or the ARI with two decimals, any other with three."""
    if column in COUNTS:
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.{2 if column in PERCENT or column == 'ari' else 3}f}"


def _cell(value: Value, column: str, n: int | None = None,
          worst: tuple[float, Any] | None = None) -> str:  # fmt: skip
    """A cell of the comparison: ``-`` for none; the paper's mean ± sd; ours with the
    number of seeds, ``n = 1`` in place of a deviation that one seed cannot have, and the
    worst seed's value (:func:`worst_seed`) where there is one."""
    if value is None:
        return "-"
    mean, sd = value
    if n is None:
        return f"{_number(mean, column)} ± {_number(sd, column)}"
    worst_text = "" if worst is None else (
        f", worst {'never' if math.isinf(worst[0]) else _number(worst[0], column)}"
        + ("" if worst[1] is None else f" at seed {worst[1]}"))  # fmt: skip
    if n == 1:  # (a worst beside one value: a seed that never reached the target)
        return f"{_number(mean, column)} (n = 1{worst_text})"
    return f"{_number(mean, column)} ± {_number(sd, column)} (n = {n}{worst_text})"


def comparison_cells(
    table: PaperTable, lines: list[dict[str, Any]]
) -> tuple[list[str], list[list[str]]]:
    """The comparison's header and cells: per method its name (the paper's label beside a
    name of its own), its seeds, and per column ours beside the paper's."""
    head = ["method", "seeds"]
    for _, heading in table.columns:
        head += [f"{heading} (distfl)", f"{heading} (paper)"]
    cells = []
    for line in lines:
        name = line["method"]
        if line["paper_label"] and line["paper_label"].lower() != name:
            name = f"{name} ({line['paper_label']})"
        row = [name, str(line["seeds"])]
        for column, _ in table.columns:
            row += [_cell(line[column], column, line[f"{column}_n"],
                          line.get(f"{column}_worst_seed")),
                    _cell(line[f"paper_{column}"], column)]  # fmt: skip
        cells.append(row)
    return head, cells


def format_comparison(table: PaperTable, lines: list[dict[str, Any]], absent: list[str]) -> str:
    """The comparison as a Markdown table: our value beside the paper's in each column."""
    head, cells = comparison_cells(table, lines)
    out = [f"{table.title}\n", "| " + " | ".join(head) + " |\n", "|" + "---|" * len(head) + "\n"]
    out += ["| " + " | ".join(row) + " |\n" for row in cells]
    if absent:
        out.append(f"\n{ABSENT}: {', '.join(absent)}\n")
    if table.notes:
        out.append(f"\n{table.notes}\n")
    return "".join(out)


#: what the comparison says of the paper's rows that are not methods of distfl
ABSENT = "not methods of distfl (paper's rows left out)"

__all__ = [
    "HIGHER_BETTER",
    "LOWER_BETTER",
    "TABLES",
    "PaperRow",
    "PaperTable",
    "absent_rows",
    "comparison",
    "comparison_cells",
    "format_comparison",
    "stats",
    "table_titled",
    "worst_seed",
]
