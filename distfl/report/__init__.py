"""``distfl report RUN.h5|DIR --out OUT``: the figures of a run (or of a suite) as PNG files
and one ``index.html`` that shows them with the run's config and summary table.

A run file is read as it is on disk, so a run still in progress is reported from its last
checkpoint (its page says which round that is). Its figures: the report's own (accuracy,
tree, classes, membership, each split's), those the registered algorithms bring
(:class:`~distfl.algorithms.ReportFigure`; a plug-in's only once imported), and a plot over
rounds of each per-cluster statistic in the file that none of them drew, so that what any
algorithm recorded is shown from the file alone. A directory is reported as a suite: the
comparison table of its run files, the paper's table where a ``distfl suite --table`` left
its comparison there, a bar chart per metric and each scenario's loss curves, with a
report of each run in ``OUT/runs/<name>/``. Only an earlier report's files in ``OUT`` are
ever removed or replaced (:mod:`distfl.report.files`).
"""

from __future__ import annotations

import html
import io
import re
import sys
from pathlib import Path
from typing import Any, TextIO

from distfl.errors import CheckpointError, UserError
from distfl.report.files import GENERATOR, prepare
from distfl.text import printable

#: the section of the per-cluster statistics that no figure of an algorithm drew
STATISTICS = "Statistics recorded per cluster"
SUITE_METRICS = (
    ("ari", "Adjusted Rand index against the ground-truth groups"),
    ("rand", "Rand index against the ground-truth groups"),
    ("was", "WAS (silhouette of the clusters' class distributions)"),
    ("wadb", "WADB (Davies–Bouldin of the clusters' class distributions; lower is better)"),
    ("accuracy", "Final balanced accuracy"),
    ("accuracy_worst", "Final balanced accuracy of the worst client"),
    ("held_out_accuracy", "Final balanced accuracy of the newcomers, never trained"),
    ("clusters", "Clusters found"),
)


def report_main(args, stream: TextIO | None = None) -> int:
    """``distfl report``; 0 when the report was written (said on ``stream``, by default the
    ``sys.stdout`` of the call)."""
    stream = sys.stdout if stream is None else stream
    target = Path(args.target)
    try:
        target.stat()
    except FileNotFoundError:
        raise UserError(
            f"{target} does not exist; expected a distfl HDF5 run file or a directory of them"
        ) from None
    except OSError as exc:  # a name too long, a folder on the way that is not one, ...
        raise UserError(f"{target} cannot be read: {exc.strerror or exc}") from None
    default = target / "report" if target.is_dir() else target.with_name(target.stem + "-report")
    out = Path(args.out) if args.out else default
    plugins = getattr(args, "trust_plugins", False)  # import the files' run.plugins
    try:
        if target.is_dir():
            index = write_suite_report(target, out, stream=stream, pdf=args.pdf, plugins=plugins)
        else:
            index = write_run_report(target, out, pdf=args.pdf, plugins=plugins)
    except OSError as exc:  # a read-only or full disk: one line, not a traceback
        where = exc.filename or out
        raise UserError(f"cannot write the report to {where}: {exc.strerror or exc}") from None
    pngs = [*out.glob("*.png"), *out.glob("runs/*/*.png")]
    pdfs = " (and as PDF)" if args.pdf else ""
    stream.write(f"distfl report: {len(pngs)} figures{pdfs}; open {index}\n")
    return 0


# -- one run ---------------------------------------------------------------------------


def write_run_report(
    path: str | Path,
    out: str | Path,
    *,
    up: str | None = None,
    pdf: bool = False,
    plugins: bool = False,
) -> Path:
    """Every figure of the run file at ``path`` and ``out/index.html``; returns the index.
    ``up``: a link back (a suite's page); ``pdf``: each figure also as a PDF; ``plugins``:
    import the file's ``run.plugins`` (code; without, the figures come from the file
    alone)."""
    from distfl import plot as figures
    from distfl.algorithms import ReportFigure, report_figures
    from distfl.runfile.run import recorded_statistics, unverified_warning
    from distfl.runfile.view import load_run
    from distfl.tools.gather import gather_rows

    path, out = Path(path), Path(out)
    data = load_run(path, plugins=plugins)
    if not data.run.verified:
        sys.stderr.write(unverified_warning(path))
    (summary,) = gather_rows([path], runs=[data.run])
    prepare(out)
    palette = figures.Palette(data)
    shown: list[tuple[str, str, str]] = []  # (section, file, caption)

    def draw(section: str, name: str, fn, *a) -> bool:
        drawn = fn(data, *a, palette)
        if drawn is not None:
            figures.save(drawn[0], out / name, pdf=pdf)
            shown.append((section, name, drawn[1]))
        return drawn is not None

    sections = (ReportFigure.TRAINING, ReportFigure.CLUSTERS, ReportFigure.WHY)
    draw(ReportFigure.TRAINING, "accuracy.png", figures.accuracy)
    draw(ReportFigure.CLUSTERS, "tree.png", figures.tree)
    draw(ReportFigure.CLUSTERS, "classes.png", figures.classes)
    draw(ReportFigure.WHY, "membership.png", figures.membership)
    # the algorithms' own figures (a plug-in's once imported), each drawn where the file
    # holds what it draws; then every statistic none of them drew, on its own
    plotted: set[str] = set()
    theirs = [figure for _, figure in report_figures(data.config.algorithm.name)]
    for figure in theirs:
        if not figure.per_split and draw(figure.section, figure.file, figure.function()):
            plotted.update(figure.stats)
    left = [n for n in recorded_statistics(data.cluster_metrics) if n not in plotted]
    for name, file in zip(left, _statistic_files(left), strict=True):
        draw(STATISTICS, file, figures.statistic, name)
    # the report's sections first, in their order; the algorithms' own after them
    order = list(dict.fromkeys([*sections, *(s for s, _, _ in shown)]))
    shown.sort(key=lambda figure: order.index(figure[0]))
    for split in data.splits():
        section = f"Split of {split.id} at round {split.round}"
        draw(section, f"split-{split.id}-matrices.png", figures.split_matrices, split)
        for figure in theirs:
            if figure.per_split:
                draw(section, f"split-{split.id}-{figure.file}", figure.function(), split)
    page = _run_page(data, summary, shown, up, pdf)
    figures.write_page(out / "index.html", page)
    return out / "index.html"


def _statistic_files(names: list[str]) -> list[str]:
    """``stat-<name>.png`` for each statistic, its name reduced to letters, digits and
    ``_ . -`` (a name that reduces to an earlier one's gets ``-2``, ``-3``, ...)."""
    files: list[str] = []
    for name in names:
        stem = "stat-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "statistic")
        file, n = f"{stem}.png", 1
        while file in files:
            n += 1
            file = f"{stem}-{n}.png"
        files.append(file)
    return files


def _status(data) -> str:
    unverified = (
        ""
        if data.run is None or data.run.verified
        else "; unverified: the file has no integrity record (distfl 0.1.0 wrote none), only "
        "its /state was checked"
    )
    if data.finished:
        return f"finished: {data.rounds_done} of {data.config.run.rounds} rounds{unverified}"
    return (
        f"not finished: round {data.rounds_done} of {data.config.run.rounds}, from the last "
        f"checkpoint (written {data.written}); a run in progress or a stopped one "
        f"(continue it with distfl run --resume){unverified}"
    )


def _run_page(data, summary: dict[str, Any], shown, up: str | None, pdf: bool) -> str:
    from distfl.tools.gather import cell_text
    from distfl.tools.inspection import inspect_run

    cfg = data.config
    title = f"{cfg.algorithm.name} on {cfg.data.dataset}: {Path(data.path).name}"
    tree = io.StringIO()
    inspect_run(data.path, tree, run=data.run)
    cols = [c for c in summary if c != "file"]
    parts = [
        f"<p class=status>{html.escape(_status(data))}</p>",
        f"<p>Run file <code>{html.escape(str(data.path))}</code>, distfl "
        f"{html.escape(data.version)}, world size {data.world_size}, "
        f"{cfg.data.num_clients} clients in {len(cfg.groups)} group(s).</p>",
        "<h2>Summary</h2>",
        _table(cols, [[cell_text(c, summary[c], table=True) for c in cols]]),
    ]
    sections: dict[str, list[tuple[str, str]]] = {}
    for section, name, caption in shown:
        sections.setdefault(section, []).append((name, caption))
    for section, figs in sections.items():
        parts.append(f"<h2>{html.escape(section)}</h2>")
        parts.extend(_figure_html(name, caption, pdf) for name, caption in figs)
    parts += [
        "<h2>Hierarchy</h2>",
        f"<pre>{html.escape(tree.getvalue())}</pre>",
        "<h2>Config</h2>",
        f"<pre>{html.escape(cfg.to_toml())}</pre>",
    ]
    back = f'<p><a href="{html.escape(up)}">back to the suite</a></p>' if up else ""
    return _page(title, back + "\n".join(parts))


# -- a suite ---------------------------------------------------------------------------


def suite_rows(
    directory: str | Path, *, plugins: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per readable run file in ``directory`` (the suite's columns and those of a
    loss target, its file, whether it finished and its loss target), and one line per file
    that could not be read. ``plugins``: import the files' ``run.plugins``."""
    from distfl.runfile.run import read
    from distfl.tools.gather import find_run_files, gather_rows
    from distfl.tools.suite import (
        COLUMNS,
        COMPLEXITY_COLUMNS,
        NEWCOMER_COLUMNS,
        RUN_FILE_STEM,
        algorithm_label,
    )

    rows, problems = [], []
    points = grid_point_names(directory)
    every = COLUMNS + COMPLEXITY_COLUMNS + NEWCOMER_COLUMNS
    for path in find_run_files([directory]):
        try:
            run = read(path, plugins=plugins)
            (g,) = gather_rows([path], runs=[run])
            config = run.config
        except CheckpointError as exc:
            problems.append(printable(exc))  # it may name parts of the file
            continue
        stem = Path(path).stem
        match = RUN_FILE_STEM.match(stem)
        row = dict.fromkeys(every)
        row.update({c: g[c] for c in every if c in g})
        listed = match["algorithm"] if match else ""
        variant = listed and listed != config.algorithm.name  # a --variant's name
        row.update(
            scenario=match["scenario"] if match else stem,
            algorithm=points.get(listed, listed) if variant else algorithm_label(config),
            seed=config.run.seed,
            groups=len(config.groups),
            file=path,
            finished=g["rounds_done"] >= g["rounds"],
            loss_target=config.eval.loss_target,
        )
        rows.append(row)
    return rows, problems


def grid_point_names(directory: str | Path) -> dict[str, str]:
    """The name in a suite's tables (``A [train.lr=0.05]``) of each ``--grid`` point's
    name in its run files (``A_g1f0c9a2e``), from the ``suite.json`` the suite wrote in
    ``directory`` ({} where there is none of its own)."""
    from distfl.tools.suite import COLUMN_SETS
    from distfl.tools.suite_files import earlier_rows
    from distfl.tools.suite_grid import point_items, split_name, suffix

    earlier = earlier_rows(Path(directory), COLUMN_SETS)
    names = {}
    for row in [] if earlier is None else earlier[1]:
        name, point = split_name(str(row["algorithm"]))
        if point:
            names[name + suffix(point_items(point))] = row["algorithm"]
    return names


def write_suite_report(
    directory: str | Path,
    out: str | Path,
    *,
    stream: TextIO,
    pdf: bool = False,
    plugins: bool = False,
) -> Path:
    from distfl import plot as figures
    from distfl.report.suite_figures import loss_curves, metric_bars
    from distfl.tools.gather import cell_text
    from distfl.tools.suite import COLUMNS, COMPLEXITY_COLUMNS, NEWCOMER_COLUMNS

    directory, out = Path(directory), Path(out)
    rows, problems = suite_rows(directory, plugins=plugins)
    if not rows:
        raise UserError(f"no readable run files in {directory}: " + "; ".join(problems))
    prepare(out, suite=True)
    for line in problems:
        stream.write(f"distfl report: skipped {line}\n")
    shown = []
    for metric, title in SUITE_METRICS:
        name = f"suite-{metric}.png"
        drawn = metric_bars(rows, metric, title)
        if drawn is not None:
            figures.save(drawn[0], out / name, pdf=pdf)
            shown.append((name, drawn[1]))
    for i, scenario in enumerate(dict.fromkeys(str(r["scenario"]) for r in rows)):
        drawn = loss_curves(rows, scenario)
        if drawn is not None:  # the seed-004 paper's figure: loss against rounds and time
            name = f"suite-loss-{i}.png"
            figures.save(drawn[0], out / name, pdf=pdf)
            shown.append((name, drawn[1]))
    # the suite's columns, and those of a loss target where a run has one (as its table)
    columns = COLUMNS + (COMPLEXITY_COLUMNS if any(r["loss_target"] > 0 for r in rows) else ())
    columns += NEWCOMER_COLUMNS if any(r["newcomers"] for r in rows) else ()
    cells = []
    for row in rows:
        stem = Path(row["file"]).stem
        write_run_report(
            row["file"], out / "runs" / stem, up="../../index.html", pdf=pdf, plugins=plugins
        )
        link = f'<a href="runs/{html.escape(stem)}/index.html">{html.escape(stem)}</a>'
        state = "" if row["finished"] else " (not finished)"
        cells.append(
            [link + state] + [html.escape(cell_text(c, row[c], table=True)) for c in columns]
        )
    parts = [
        f"<p>{len(rows)} run files in <code>{html.escape(str(directory))}</code>; "
        "each row links to the run's own report.</p>",
        _table(["run", *columns], cells, escaped=True),
        *_paper_comparison(directory, rows),
    ]
    if problems:
        parts.append(
            "<p>Not readable:</p><ul>"
            + "".join(f"<li>{html.escape(p)}</li>" for p in problems)
            + "</ul>"
        )
    parts.append("<h2>Metrics</h2>")
    parts.extend(_figure_html(name, caption, pdf) for name, caption in shown)
    figures.write_page(
        out / "index.html", _page(f"Suite {directory.name or directory}", "\n".join(parts))
    )
    return out / "index.html"


def _paper_comparison(directory: Path, rows: list[dict[str, Any]]) -> list[str]:
    """The paper's table beside the suite's runs, where ``directory`` holds the comparison
    of a ``distfl suite --table`` (``comparison.md``, whose first line is the table's title):
    computed again from ``rows``, the run files as they are now. Nothing otherwise."""
    from distfl.tools.paper_tables import (
        ABSENT,
        PERCENT,
        TABLES,
        absent_rows,
        comparison,
        comparison_cells,
        table_titled,
    )
    from distfl.tools.suite_files import COMPARISON, read_own

    head = read_own(directory / COMPARISON, 4096, head=True)
    name = table_titled(head.split(b"\n", 1)[0].decode("utf-8", "replace")) if head else None
    if name is None:
        return []
    spec = TABLES[name]
    columns, cells = comparison_cells(spec, comparison(spec, rows))
    absent = absent_rows(spec)
    return [
        f"<h2>{html.escape(spec.title)}</h2>",
        "<p>The paper's values beside the suite's, as <code>distfl suite --table "
        f"{html.escape(name)}</code> computes them, from the run files here: ours the mean "
        "± standard deviation over the seeds and how many (n)"
        + (", accuracies in percent" if any(c in PERCENT for c, _ in spec.columns) else "")
        + ".</p>",
        _table(columns, cells),
        *([f"<p>{html.escape(ABSENT)}: {html.escape(', '.join(absent))}</p>"] if absent else []),
        f"<p>{html.escape(spec.notes)}</p>" if spec.notes else "",
    ]


# -- HTML ------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; max-width: 60em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.status { font-weight: bold; }
"""


def _page(title: str, body: str) -> str:
    t = html.escape(title)
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        f'<meta name=generator content="{GENERATOR}">\n<title>{t}</title>\n'
        f"<style>{_STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n{body}\n</body>\n</html>\n"
    )


def _table(columns: list[str], rows: list[list[str]], *, escaped: bool = False) -> str:
    esc = (lambda s: s) if escaped else html.escape
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>\n" for r in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}</table>"


def _figure_html(name: str, caption: str, pdf: bool = False) -> str:
    n = html.escape(name)
    vector = f' <a href="{html.escape(Path(name).with_suffix(".pdf").name)}">PDF</a>' if pdf else ""
    return (
        f'<figure><a href="{n}"><img src="{n}" alt="{html.escape(caption)}"></a>'
        f"<figcaption>{html.escape(caption)}{vector}</figcaption></figure>"
    )
