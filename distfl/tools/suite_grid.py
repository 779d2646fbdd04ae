"""``distfl suite --grid KEY=V1,V2``: a grid of settings, each algorithm run at every point of
the keys it takes, and the table of the points with the best one per algorithm marked.

A grid key is ``SECTION.KEY`` with its values (``--grid train.lr=0.01,0.05 --grid
algorithm.alpha=0.5,1``); the points are the product of the keys' values, in the order
given. A key of ``[algorithm]`` spreads only the algorithms that take it (as a ``--set``
item does), so an algorithm runs at the product of the keys it takes, once where it takes
none of them. Each point is a job of its own for every seed: its items come after the
suite-wide ``--set`` items and a variant's; its run file is
``<scenario>--<algorithm>_g<8 hex digits>--s<seed>.h5``, the digits those of a hash of the
point's items, so a grid grown by a value keeps the runs it had (a finished run is kept, an
unfinished one resumed); its name in the tables is the algorithm and the point
(``ifca [train.lr=0.05]``). ``OUT/grid.csv`` (:func:`distfl.tools.suite.grid_text`)
holds one line per scenario, algorithm and point: the seeds that finished, the mean and
sample standard deviation of the ``--best`` column and of the ARI, and ``best`` on the
point of each scenario and algorithm whose mean of the ``--best`` column is the highest
(the first of equal ones)."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from distfl.errors import UserError

#: the columns --best may name (higher is better for each)
BEST_COLUMNS = ("accuracy", "accuracy_worst", "accuracy_p10", "ari", "rand", "held_out_accuracy")
#: keys the suite gives each job itself (or that name the job's algorithm)
_SUITE_KEYS = {
    "algorithm.name": "list the algorithms in --algorithms",
    "run.seed": "give the seeds with --seeds",
    "run.out": "the suite names each run's file",
}
#: the most points of one grid
MAX_POINTS = 10_000


def split_values(text: str) -> list[str]:
    """``text`` split at its commas outside brackets and quotes (``1,[2,3],"a,b"`` is three
    values)."""
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return [v.strip() for v in values]


def parse_grid(texts: list[str] | tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """The ``--grid`` texts as (``SECTION.KEY``, its items ``SECTION.KEY=V`` in order),
    each value read as ``--set`` reads one (ConfigError naming the key). UserError for a
    text that is not ``SECTION.KEY=V1,V2,...``, a key given twice, an empty or repeated
    value, and a key the suite sets itself."""
    from distfl import config as cfg

    grid: list[tuple[str, tuple[str, ...]]] = []
    for text in texts:
        key, has, rest = text.partition("=")
        key = key.strip()
        if not has or key.count(".") != 1 or not all(key.split(".")):
            raise UserError(
                f"--grid {text!r}: expected SECTION.KEY=V1,V2 (e.g. train.lr=0.01,0.05)"
            )
        if key in _SUITE_KEYS:
            raise UserError(f"--grid {key}: {_SUITE_KEYS[key]}")
        if key in (k for k, _ in grid):
            raise UserError(f"--grid {key} is given twice: put its values in one --grid")
        values = split_values(rest)
        if any(not v for v in values):
            raise UserError(f"--grid {text!r}: an empty value; expected SECTION.KEY=V1,V2")
        items = tuple(f"{key}={v}" for v in values)
        parsed = [cfg.parse_set(item)[2] for item in items]
        twice = [v for i, v in enumerate(values) if parsed[i] in parsed[:i]]
        if twice:
            raise UserError(f"--grid {key}: the value {twice[0]} is given twice")
        grid.append((key, items))
    return grid


def check_not_set(grid, items: tuple[str, ...], algorithm: str) -> None:
    """UserError where one of ``items`` (a ``--set`` item or a variant's) sets a key that
    the grid spreads for ``algorithm``: the two would contradict each other."""
    from distfl import config as cfg

    spread = {key for key, _ in grid}
    for item in items:
        section, name, _ = cfg.parse_set(item)
        if f"{section}.{name}" in spread:
            raise UserError(
                f"--grid {section}.{name} spreads a key that {item!r} sets for {algorithm}: "
                "leave one of them out"
            )


def points(grid, algorithm: str) -> list[tuple[str, ...]]:
    """The points ``algorithm`` runs at: the product of the values of the grid's keys it
    takes (every key of another section; an ``algorithm.KEY`` where it takes KEY), each a
    tuple of items; ``[()]`` without a grid or where it takes none of the keys."""
    from distfl.algorithms import key_owners

    mine = [
        items for key, items in grid
        if not key.startswith("algorithm.") or algorithm in key_owners(key.split(".")[1])
    ]  # fmt: skip
    count = 1
    for items in mine:
        count *= len(items)
    if count > MAX_POINTS:
        raise UserError(f"--grid: {count:,} points for {algorithm}, more than {MAX_POINTS:,}")
    return [tuple(p) for p in itertools.product(*mine)]


def suffix(point: tuple[str, ...]) -> str:
    """What a point adds to its algorithm's name in its run files: ``_g`` and 8 hex digits of
    a SHA-256 of its items ("" for no point)."""
    if not point:
        return ""
    return "_g" + hashlib.sha256("\n".join(point).encode()).hexdigest()[:8]


def point_name(name: str, point: tuple[str, ...]) -> str:
    """The algorithm ``name`` at ``point`` as the tables show it: ``ifca [train.lr=0.05]``."""
    return f"{name} [{', '.join(point)}]" if point else name


def split_name(shown: str) -> tuple[str, str]:
    """(algorithm, point text) of a name :func:`point_name` made ("" for no point)."""
    name, bracket, rest = shown.partition(" [")
    return (name, rest[:-1]) if bracket and rest.endswith("]") else (shown, "")


def point_items(text: str) -> tuple[str, ...]:
    """The items of a point's text in a name :func:`point_name` made (commas inside a
    bracketed or quoted value kept)."""
    return tuple(split_values(text)) if text else ()


def measured(best: str) -> tuple[str, ...]:
    """The columns a grid's table sums up over the seeds: ``best``, then the ARI."""
    return tuple(dict.fromkeys((best, "ari")))


def grid_rows(rows: list[dict[str, Any]], best: str = "accuracy") -> list[dict[str, Any]]:
    """One line per (scenario, algorithm, point) of a suite's ``rows`` (in the order the
    points first come): seeds finished of seeds run, the mean and sample sd of ``best``
    and of ``ari`` over the finished seeds (None where undefined), and ``best`` marking
    each scenario's and algorithm's point of the highest mean of ``best``."""
    from distfl.tools.paper_tables import finished, stats

    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        algorithm, point = split_name(row["algorithm"])
        groups.setdefault((row["scenario"], algorithm, point), []).append(row)
    out = []
    for (scenario, algorithm, point), runs in groups.items():
        done = [r for r in runs if finished(r)]
        line = {"scenario": scenario, "algorithm": algorithm, "setting": point,
                "seeds": f"{len(done)} of {len(runs)}"}  # fmt: skip
        for column in measured(best):
            got = stats([r.get(column) for r in done])
            line[column] = None if got is None else got[0]
            line[f"{column}_sd"] = None if got is None else got[1]
        line["best"] = ""
        out.append(line)
    leaders: dict[tuple[str, str], dict[str, Any]] = {}
    for line in out:
        key = (line["scenario"], line["algorithm"])
        value = line[best]
        if value is not None and (key not in leaders or value > leaders[key][best]):
            leaders[key] = line
    for line in leaders.values():
        line["best"] = "best"
    return out


def grid_cells(lines: list[dict[str, Any]], best: str) -> list[dict[str, str]]:
    """:func:`grid_rows`' lines as the terminal shows them: ``mean ± sd`` to three decimals
    (``–`` where undefined)."""

    def shown(line, column):
        mean, sd = line[column], line[f"{column}_sd"]
        return "–" if mean is None else f"{mean:.3f} ± {sd:.3f}"

    return [
        {"scenario": x["scenario"], "algorithm": x["algorithm"], "setting": x["setting"],
         "seeds": x["seeds"], **{c: shown(x, c) for c in measured(best)}, "best": x["best"]}
        for x in lines
    ]  # fmt: skip


def grid_columns(best: str) -> list[str]:
    """The columns of ``grid.csv`` for a ``--best`` column."""
    sums = [c for column in measured(best) for c in (column, f"{column}_sd")]
    return ["scenario", "algorithm", "setting", "seeds", *sums, "best"]


def check_best(best: str) -> None:
    if best not in BEST_COLUMNS:
        raise UserError(f"--best {best!r}: allowed values are {', '.join(BEST_COLUMNS)}")


__all__ = [
    "BEST_COLUMNS",
    "check_best",
    "check_not_set",
    "grid_cells",
    "grid_columns",
    "grid_rows",
    "measured",
    "parse_grid",
    "point_items",
    "point_name",
    "points",
    "split_name",
    "split_values",
    "suffix",
]
