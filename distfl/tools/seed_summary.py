"""A suite's runs summed up over their seeds: one line per scenario and algorithm.

``distfl suite`` prints it after the table of runs when a scenario and algorithm ran on two
seeds or more (``--seeds 0-9``); :func:`markdown` writes the same lines as a Markdown table
(the fidelity tables of the docs are these lines of a suite's ``suite.csv``).

Per scenario and algorithm, over the seeds whose run finished (a failed run has no scores):

- ``clusters``: the fewest and the most clusters found (``2`` where every seed found 2,
  ``2–4`` otherwise);
- ``rand`` and ``ari``: mean ± sample standard deviation;
- ``ari_worst``: the least ARI and its seed (the first of equal ones), ``–`` where every
  seed scored the same;
- ``accuracy``: the mean final balanced accuracy over the clients, mean ± sd over seeds;
- ``accuracy_worst``: the worst client's final accuracy on the worst seed for it, and that
  seed;
- ``first_split``: the earliest and latest round of a first split and on how many seeds
  there was one (``110–150``, ``220 (3 of 10)``, ``–`` for none);
- where the runs have newcomers (``data.held_out``), ``held_out_accuracy`` (mean ± sd),
  ``held_out_accuracy_worst`` (the worst newcomer on the worst seed for it) and
  ``held_out_ari`` (mean ± sd), beside the trained clients' figures.

Values that are missing or not finite are left out of a mean and of a worst, as in
:func:`distfl.tools.paper_tables.stats`.
"""

from __future__ import annotations

from typing import Any

from distfl.tools.gather import format_table
from distfl.tools.paper_tables import finished, stats, worst_seed

#: the summary's columns, in order, each with its heading in the tables
COLUMNS = (
    ("scenario", "scenario"),
    ("algorithm", "algorithm"),
    ("seeds", "seeds"),
    ("clusters", "clusters"),
    ("rand", "Rand"),
    ("ari", "ARI"),
    ("ari_worst", "worst ARI"),
    ("accuracy", "accuracy"),
    ("accuracy_worst", "worst client"),
    ("first_split", "first split"),
)
#: the columns a summary of runs with newcomers adds
NEWCOMER_COLUMNS = (
    ("held_out_accuracy", "newcomers"),
    ("held_out_accuracy_worst", "worst newcomer"),
    ("held_out_ari", "newcomers' ARI"),
)


def _number(value: float) -> str:
    """Three decimals, without the sign of a value that rounds to zero (-0.0002: 0.000)."""
    text = f"{value:.3f}"
    return "0.000" if text == "-0.000" else text


def _mean_sd(values: list[Any]) -> str:
    got = stats(values)
    return "–" if got is None else f"{_number(got[0])} ± {_number(got[1])}"


def _worst(runs: list[dict[str, Any]], column: str, *, unless_equal: bool) -> str:
    pairs = [(r.get(column), r.get("seed")) for r in runs]
    worst = worst_seed(pairs, column)
    if worst is None:
        finite = [v for v, _ in pairs if v is not None]
        return _number(finite[0]) if len(finite) == 1 else "–"
    if unless_equal and all(v == worst[0] for v, _ in pairs if v is not None):
        return "–"
    return f"{_number(worst[0])} at seed {worst[1]}"


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"{low}" if low == high else f"{low}–{high}"


def _first_split(runs: list[dict[str, Any]]) -> str:
    rounds = [int(r["first_split"]) for r in runs if r.get("first_split") is not None]
    if not rounds:
        return "–"
    return _span(rounds) + ("" if len(rounds) == len(runs) else f" ({len(rounds)} of {len(runs)})")


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One line per (scenario, algorithm) of ``rows`` (a suite's rows, in the order the
    pairs first come), its cells as text (:data:`COLUMNS`)."""
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        pairs.setdefault((row["scenario"], row["algorithm"]), []).append(row)
    out = []
    for (scenario, algorithm), runs in pairs.items():
        done = [r for r in runs if finished(r)]
        clusters = [int(r["clusters"]) for r in done if r.get("clusters") is not None]
        seeds = f"{len(done)}" if len(done) == len(runs) else f"{len(done)} of {len(runs)}"
        out.append({
            "scenario": scenario,
            "algorithm": algorithm,
            "seeds": seeds,
            "clusters": _span(clusters) if clusters else "–",
            "rand": _mean_sd([r.get("rand") for r in done]),
            "ari": _mean_sd([r.get("ari") for r in done]),
            "ari_worst": _worst(done, "ari", unless_equal=True),
            "accuracy": _mean_sd([r.get("accuracy") for r in done]),
            "accuracy_worst": _worst(done, "accuracy_worst", unless_equal=False),
            "first_split": _first_split(done) if done else "–",
        })  # fmt: skip
        if any(r.get("newcomers") for r in runs):
            out[-1].update({
                "held_out_accuracy": _mean_sd([r.get("held_out_accuracy") for r in done]),
                "held_out_accuracy_worst": _worst(done, "held_out_accuracy_worst",
                                                  unless_equal=False),
                "held_out_ari": _mean_sd([r.get("held_out_ari") for r in done]),
            })  # fmt: skip
    return out


def _columns(lines: list[dict[str, str]]) -> tuple[tuple[str, str], ...]:
    """The summary's columns: :data:`COLUMNS`, and the newcomers' where a line has them."""
    newcomers = any("held_out_accuracy" in line for line in lines)
    return COLUMNS + (NEWCOMER_COLUMNS if newcomers else ())


def several_seeds(rows: list[dict[str, Any]]) -> bool:
    """Whether some scenario and algorithm of ``rows`` ran on two seeds or more."""
    seen: dict[tuple[str, str], set[Any]] = {}
    for row in rows:
        seen.setdefault((row["scenario"], row["algorithm"]), set()).add(row.get("seed"))
    return any(len(s) > 1 for s in seen.values())


def text(lines: list[dict[str, str]]) -> str:
    """The summary as an aligned text table for the terminal, a header line first (the
    table of ``distfl gather``, :func:`~distfl.tools.gather.format_table`, of its cells)."""
    if not lines:
        return "  ".join(h for _, h in COLUMNS) + "\n"
    columns = _columns(lines)
    return format_table([{h: line.get(c, "–") for c, h in columns} for line in lines])


def markdown(lines: list[dict[str, str]]) -> str:
    """The summary as a Markdown table (scenario names as code)."""
    columns = _columns(lines)
    head = [h for _, h in columns]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines:
        cells = [line.get(c, "–") for c, _ in columns]
        cells[0] = f"`{cells[0]}`"
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
