"""``distfl report`` on real run files: a FedGWC run that splits twice, the last checkpoint
of a run still in progress, and a real ``distfl suite`` directory. Every figure the run
file calls for (worked out here from the HDF5 file, not from the report code) must exist,
be a PNG that Pillow decodes, have a sensible size and some content, and be linked from
``index.html``; the page's config must read back to the run's config."""

from __future__ import annotations

import html
import json
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

from timing import limit

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from PIL import Image
from runfile import fedgwc_toml

from distfl.algorithms.emdcfl.figures import epsilon_window
from distfl.config import build
from distfl.report import SUITE_METRICS
from distfl.runfile.reader import read_run_file

pytestmark = pytest.mark.integration

TINY = """\
[run]
rounds = 12
progress = "none"
[data]
num_clients = 8
samples_per_client = 30
groups = [{count = 5, alpha = 1000.0, name = "clean"},
          {count = 3, alpha = 1000.0, name = "flipped", permute_labels = true}]
[train]
local_steps = 2
[server]
clients_per_round = 4
[algorithm]
name = "fedgwc"
epsilon = 1e-5
patience = 1
stable_tests = 1
reference_draws = 0
min_observations = 0
[eval]
every = 4
"""


def distfl(helpers, cwd, *args):
    """``distfl ARGS`` from ``cwd``, in this process (the command's code; what is tested is
    what it writes, not its process)."""
    return helpers.cli(cwd, *args)


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.img: list[str] = []
        self.href: list[str] = []
        self.pre: list[str] = []
        self._in_pre = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.img.append(a["src"])
        elif tag == "a":
            self.href.append(a["href"])
        elif tag == "pre":
            self._in_pre = True
            self.pre.append("")

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_pre = False

    def handle_data(self, data):
        if self._in_pre:
            self.pre[-1] += data


def parse(index: Path) -> Links:
    links = Links()
    links.feed(index.read_text(encoding="utf-8"))
    return links


def check_png(path: Path) -> tuple[int, int]:
    """A PNG that decodes, of figure size, neither blank nor bloated."""
    assert path.is_file(), f"{path} missing"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    assert 3_000 < path.stat().st_size < 2_000_000, (path, path.stat().st_size)
    with Image.open(path) as im:
        im.verify()  # chunk CRCs and structure
    with Image.open(path) as im:
        assert im.format == "PNG"
        w, h = im.size
        assert 400 <= w <= 4000 and 250 <= h <= 4000, (path, im.size)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) >= 8, f"{path}: nearly blank"
    return w, h


#: the per-cluster statistics the package's algorithms' own figures draw (mse.png, norms.png,
#: contrast.png, db-tests.png): every other one with a finite value gets a plot of its own,
#: stat-NAME.png
DRAWN_STATS = {
    "mse", "mean_norm", "max_norm",
    "p_within", "p_cross", "p_spread", "w_within", "w_cross", "w_spread",
    "db", "db_reference",
}  # fmt: skip


def expected_figures(run_file: Path) -> set[str]:
    """The figures a run file calls for, from its HDF5 contents."""
    names = {"accuracy.png", "tree.png", "classes.png"}
    with h5py.File(run_file, "r") as f:
        for name, column in f["metrics/clusters"].items():
            fixed = name in ("round", "cluster", "size", "sampled")
            if not fixed and name not in DRAWN_STATS and np.isfinite(column[()]).any():
                names.add(f"stat-{name}.png")
        if np.isfinite(f["metrics/clusters/mse"][()]).any():
            names.add("mse.png")
        if np.isfinite(f["metrics/clusters/mean_norm"][()]).any():
            names.add("norms.png")
        if np.isfinite(f["metrics/clusters/p_within"][()]).any():
            names.add("contrast.png")
        if "db" in f["metrics/clusters"] and np.isfinite(f["metrics/clusters/db"][()]).any():
            names.add("db-tests.png")
        clusters = set(f["metrics/membership/cluster"][()].tolist())
        if len(clusters) >= 2 or len(f["final/leaves"]) >= 2:
            names.add("membership.png")
        if (
            "distances" in f["hierarchy/0"]
            and "epsilon" in json.loads(f.attrs["config"])["algorithm"]
        ):
            names.add("emd-distances.png")
        for node_id, g in f["hierarchy"].items():
            if g.attrs["split_round"] >= 0:
                if {"interaction", "distances", "similarity"} & set(g):
                    names.add(f"split-{node_id}-matrices.png")
                if "affinity" in g:
                    names.add(f"split-{node_id}-embedding.png")
                if "db_scores" in g:
                    names.add(f"split-{node_id}-db.png")
    return names


def check_run_report(out: Path, run_file: Path) -> Links:
    index = out / "index.html"
    links = parse(index)
    expected = expected_figures(run_file)
    written = {p.name for p in out.glob("*.png")}
    assert written == expected
    for name in expected:
        check_png(out / name)
        assert name in links.img and name in links.href, f"{name} not linked from index.html"
    stored = read_run_file(run_file).config
    config_text = next(t for t in links.pre if t.startswith("[run]"))
    assert build(tomllib.loads(config_text)) == stored
    return links


@pytest.fixture(scope="module")
def fedgwc_run(tmp_path_factory, helpers):
    """FedGWC on 16 clients, 5 label-permuted: the root splits at round 19, a child at 29."""
    tmp = tmp_path_factory.mktemp("report")
    (tmp / "run.toml").write_text(fedgwc_toml(40, progress="none"))
    helpers.run_alone(tmp, "--config", "run.toml", "--out", "run.h5")  # the code of distfl run
    return tmp / "run.h5"


def test_a_report_of_a_run_that_splits_twice(fedgwc_run, helpers, tmp_path):
    out = tmp_path / "report"
    proc = distfl(helpers, tmp_path, "report", str(fedgwc_run), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    links = check_run_report(out, fedgwc_run)
    with h5py.File(fedgwc_run, "r") as f:
        splits = sorted(k for k, g in f["hierarchy"].items() if g.attrs["split_round"] >= 0)
        groups = f["clients/group"][()]
    assert len(splits) == 2  # the scenario's two splits, each with its three figures
    assert sum(n.startswith("split-") for n in links.img) == 6
    text = (out / "index.html").read_text(encoding="utf-8")
    assert "finished: 40 of 40 rounds" in text
    # the matrices figure is at least as wide as two heatmaps side by side
    w, _ = check_png(out / f"split-{splits[0]}-matrices.png")
    assert w >= 800
    assert len(np.unique(groups)) == 2
    assert f"{len(list(out.glob('*.png')))} figures" in proc.stdout


def test_a_report_of_a_cfl_run(helpers, tmp_path):
    """CFL on 5 upright and 5 rotated clients splits the root at round 10: its update norms
    with ε1 and ε2, and the cosine similarities at the split; with --pdf each figure also
    as a PDF, linked beside its PNG."""
    federation = [
        "--set", "data.groups=[{count=5, alpha=1000.0}, {count=5, alpha=1000.0, rotation=180.0}]",
        "--set", "data.num_clients=10", "--set", "server.clients_per_round=10",
        "--set", "train.lr=0.5", "--set", "train.batch_size=60", "--set", 'run.progress="none"',
        "--set", 'algorithm.name="cfl"', "--set", "algorithm.eps1=0.4",
        "--set", "algorithm.eps2=0.9", "--set", "algorithm.warmup=5", "--set", "run.rounds=12",
        "--set", "eval.every=4",
    ]  # fmt: skip
    helpers.run_alone(tmp_path, *federation, "--out", "cfl.h5")
    proc = distfl(helpers, tmp_path, "report", "cfl.h5", "--pdf")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "cfl-report"  # the default: beside the run file
    links = check_run_report(out, tmp_path / "cfl.h5")
    pngs = sorted(p.stem for p in out.glob("*.png"))
    assert sorted(p.stem for p in out.glob("*.pdf")) == pngs  # --pdf: a PDF twin of each
    for stem in pngs:
        data = (out / f"{stem}.pdf").read_bytes()
        assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF") and len(data) > 3000
        assert f"{stem}.pdf" in links.href
    assert {"norms.png", "split-0-matrices.png"} <= {p.name for p in out.glob("*.png")}
    assert "mse.png" not in {p.name for p in out.glob("*.png")}


def test_the_diagnostics_of_ifca_and_emdcfl(helpers, tmp_path):
    """Where a run's clusters come from: IFCA's membership round by round, EMD-CFL's pair
    distances against ε, recorded at the root also when it does not split (here ε is so
    large that every pair is adjacent and the root stays whole); FLCL's regret and bound,
    statistics no figure of an algorithm draws, each in the report's per-cluster plot."""
    federation = [
        "--set", "data.groups=[{count=4, alpha=1000.0}, {count=4, alpha=1000.0, rotation=180.0}]",
        "--set", "data.num_clients=8", "--set", "server.clients_per_round=4",
        "--set", "data.samples_per_client=60", "--set", 'run.progress="none"',
        "--set", "run.rounds=6", "--set", "eval.every=3",
    ]  # fmt: skip
    ifca = [*federation, "--set", 'algorithm.name="ifca"', "--set", "algorithm.num_clusters=2"]
    emd = [*federation, "--set", 'algorithm.name="emdcfl"', "--set", "algorithm.steps=10",
           "--set", "algorithm.epsilon=100.0"]  # fmt: skip
    flcl = [*federation, "--set", 'algorithm.name="flcl"', "--set", "algorithm.period=2"]
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, args in (("ifca", ifca), ("emd", emd), ("flcl", flcl)):
        helpers.run_alone(runs, *args, "--out", f"{name}.h5")
    proc = distfl(helpers, tmp_path, "report", str(runs))  # the runs' reports at once
    assert proc.returncode == 0, proc.stderr
    for name in ("ifca", "emd", "flcl"):
        check_run_report(runs / "report" / "runs" / name, runs / f"{name}.h5")
    flcl_out = {p.name for p in (runs / "report" / "runs" / "flcl").glob("*.png")}
    assert {"stat-regret.png", "stat-bound.png"} <= flcl_out
    assert (runs / "report" / "runs" / "ifca" / "membership.png").exists()
    emd_out = {p.name for p in (runs / "report" / "runs" / "emd").glob("*.png")}
    assert "emd-distances.png" in emd_out and "membership.png" not in emd_out
    with h5py.File(runs / "emd.h5", "r") as f:
        root = f["hierarchy/0"]
        assert root.attrs["split_round"] == -1 and root["distances"].shape == (8, 8)
        assert root["adjacency"][()].all()
    text = (runs / "report" / "runs" / "emd" / "index.html").read_text(encoding="utf-8")
    assert "100% of the same group pairs and 100% of the different groups pairs" in text
    with h5py.File(runs / "emd.h5", "r") as f:
        lo, hi = epsilon_window(f["hierarchy/0/distances"][()], f["clients/group"][()])
    if lo < hi:
        assert f"Every ε in ({lo:.3g}, {hi:.3g}] (shaded) recovers the groups" in text
    else:
        assert f"No ε recovers the groups exactly: same-group pairs reach {lo:.3g}" in text


def test_the_evaluation_columns_add_up_to_the_federation(fedgwc_run):
    """Each evaluation round's per-cluster accuracies, weighted by their clients, give the
    federation's (unweighted mean over clients); every client is in one evaluated cluster."""
    with h5py.File(fedgwc_run, "r") as f:
        ev = {k: v[()] for k, v in f["metrics/evaluation"].items()}
        rounds = f["metrics/round"][()]
        acc = f["metrics/accuracy"][()]
        K = len(f["clients/group"][()])
    evaluated = rounds[np.isfinite(acc)]
    assert list(np.unique(ev["round"])) == list(evaluated)
    for t in evaluated:
        mine = ev["round"] == t
        assert ev["clients"][mine].sum() == K
        total = (ev["accuracy"][mine] * ev["clients"][mine]).sum() / K
        assert total == pytest.approx(acc[rounds == t][0], rel=1e-12)
    assert len(set(ev["cluster"][ev["round"] == evaluated[-1]])) == 4  # the final leaves


def _round_written(path: Path) -> int:
    """The last round the run file at ``path`` holds (0: none yet)."""
    if not path.exists():
        return 0
    import distfl

    return distfl.open(path).round


def test_a_run_in_progress_is_reported_from_its_last_checkpoint(helpers, tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY)
    cmd = [sys.executable, "-m", "distfl", "run", "--config", "tiny.toml", "--out", "live.h5",
           "--set", "run.rounds=100000", "--set", "checkpoint.every=5"]  # fmt: skip
    run = subprocess.Popen(
        cmd, cwd=tmp_path, env=helpers.clean_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + limit(120)
        # the file is written after round 1 (no evaluation yet: eval.every = 4), then every
        # 5 rounds: the report is asked of a checkpoint with an evaluation in it
        while _round_written(tmp_path / "live.h5") < 5:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "no checkpoint of round 5 within 120 s"
            time.sleep(0.2)
        proc = distfl(helpers, tmp_path, "report", "live.h5", "--out", "live")
        assert run.poll() is None, "the run ended before its report was written"
        assert proc.returncode == 0, proc.stderr
        text = (tmp_path / "live" / "index.html").read_text(encoding="utf-8")
        status = html.unescape(text.split("<p class=status>")[1].split("</p>")[0])
        assert status.startswith("not finished: round ")
        done = int(status.split("round ")[1].split(" ")[0])
        assert done % 5 == 0 and 0 < done < 100000, status
        for name in ("accuracy.png", "tree.png", "classes.png", "mse.png"):
            check_png(tmp_path / "live" / name)
    finally:
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=limit(120))
    assert run.returncode == 0, err  # SIGTERM: checkpoint and a clean exit


def test_a_report_of_a_suite(helpers, tmp_path):
    """A suite of FedGWC as a variant (the paper's DB threshold) and FedAvg: the table, the
    report's table and its run files name the variant."""
    (tmp_path / "tiny.toml").write_text(TINY)
    proc = distfl(
        helpers, tmp_path, "suite", "tiny.toml", "--algorithms", "fedgwc_paper,none",
        "--variant", "fedgwc_paper=fedgwc:db_threshold=1.0",
        "--seeds", "0,1", "--out", "suite", "--workers", "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny fedgwc_paper seed 1: done" in proc.stdout
    proc = distfl(helpers, tmp_path, "report", "suite")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "suite" / "report"  # the default for a directory
    links = parse(out / "index.html")
    rows = json.loads((tmp_path / "suite" / "suite.json").read_text())["rows"]
    assert len(rows) == 4
    assert sorted(r["algorithm"] for r in rows) == ["fedavg"] * 2 + ["fedgwc_paper"] * 2
    stored = read_run_file(tmp_path / "suite" / "tiny--fedgwc_paper--s0.h5", state=False)
    assert (stored.config.algorithm.name, stored.config.algorithm.db_threshold) == ("fedgwc", 1)
    metrics = {m for m, _ in SUITE_METRICS if any(r.get(m) is not None for r in rows)}
    assert {"ari", "rand", "accuracy", "accuracy_worst", "clusters"} <= metrics
    # a bar chart per metric, and the one scenario's loss against the rounds
    assert {p.name for p in out.glob("*.png")} == {f"suite-{m}.png" for m in metrics} | {
        "suite-loss-0.png"
    }
    for name in [*(f"suite-{m}.png" for m in metrics), "suite-loss-0.png"]:
        check_png(out / name)
        assert name in links.img
    text = (out / "index.html").read_text(encoding="utf-8")
    for row in rows:
        stem = f"tiny--{row['algorithm']}--s{row['seed']}"  # one name: the table's (fedavg)
        assert f"runs/{stem}/index.html" in links.href
        check_run_report(out / "runs" / stem, tmp_path / "suite" / f"{stem}.h5")
        assert f"{row['ari']:.4f}" in text
    assert text.count("<td>fedgwc_paper</td>") == 2 and text.count("<td>fedavg</td>") == 2
    # a second report into the same directory replaces the first; a run file that cannot be
    # read is named on the page and skipped, the others are still reported
    (tmp_path / "suite" / "broken.h5").write_bytes(b"\x89HDF\r\n\x1a\n truncated")
    again = distfl(helpers, tmp_path, "report", "suite")
    assert again.returncode == 0, again.stderr
    assert "skipped" in again.stdout and "broken.h5" in again.stdout
    page = (out / "index.html").read_text(encoding="utf-8")
    links = parse(out / "index.html").href  # the runs, the bar charts and the loss figure
    assert "broken.h5" in page and len(links) == len(rows) + len(metrics) + 1


def test_bad_targets_are_one_line_errors(helpers, tmp_path, fedgwc_run):
    missing = distfl(helpers, tmp_path, "report", "nothing.h5")
    assert_one_line_error(missing, "nothing.h5", "does not exist")
    (tmp_path / "notes.h5").write_text("not HDF5")
    garbage = distfl(helpers, tmp_path, "report", "notes.h5")
    assert_one_line_error(garbage, "notes.h5")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep me")
    refused = distfl(helpers, tmp_path, "report", str(fedgwc_run), "--out", "mine")
    assert_one_line_error(refused, "mine", "non-empty")
    assert (mine / "thesis.tex").read_text() == "keep me" and len(list(mine.iterdir())) == 1
    assert not (tmp_path / "notes-report").exists()
    (tmp_path / "plain.txt").write_text("a file")
    blocked = distfl(helpers, tmp_path, "report", str(fedgwc_run), "--out", "plain.txt/report")
    assert_one_line_error(blocked, "cannot write the report", "plain.txt")


def test_the_docs_show_figures_that_exist():
    docs = Path(__file__).resolve().parents[2] / "docs"
    shown = [
        (page, line.split("](")[1].rstrip(")"))
        for page in sorted(docs.glob("*.md"))
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("![")
    ]
    assert len(shown) >= 4
    for page, p in shown:
        check_png(page.parent / p)


def test_a_report_reads_the_state_attributes_only(fedgwc_run):
    """The report does not load /state's arrays (each cluster's model and K×K P)."""
    light = read_run_file(fedgwc_run, state=False).state
    full = read_run_file(fedgwc_run).state
    assert light["round"] == full["round"] == 40
    assert not any(isinstance(v, (np.ndarray, dict)) for v in light.values())
    assert "models" in full and "models" not in light
