"""Every Python block of docs/adding-an-algorithm.md and docs/adding-a-dataset.md runs as
written, each alone: the pages hold complete modules, and no block is the continuation of
another (one that needed an earlier block's names would fail here). In one fresh Python
each block runs as a module of its own (``runpy``, a namespace of its own) and registers
the algorithm or dataset it names. The pages' other blocks: the algorithm page's sketch of
the server's calls (no code to run), and the dataset page's ``blobs.toml`` and commands,
which tests/integration/test_dataset_plugin.py runs as written. The table example of the
algorithm page also runs as its first line says, and its table holds each client's last
loss, as /metrics/train_loss_last has their mean."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from docpage import FENCE
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "adding-an-algorithm.md", ROOT / "docs" / "adding-a-dataset.md"]

RUN_EACH = """
import json, runpy, sys
from distfl.plugins import ALGORITHMS, DATASETS

ALGORITHMS.names(), DATASETS.names()  # the built-ins, registered before any block

registered = [sorted(ALGORITHMS._classes.keys() | DATASETS._classes.keys())]
for path in sys.argv[1:]:
    runpy.run_path(path, run_name=path.rsplit("/", 1)[-1][:-3])
    registered.append(sorted(n for n in ALGORITHMS._classes.keys() | DATASETS._classes.keys()))
print(json.dumps(registered))
"""


def fences(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def python_blocks() -> list[str]:
    return [body for page in PAGES for lang, body in fences(page) if lang == "python"]


def test_the_pages_blocks_are_python_or_run_elsewhere():
    kinds = {page.name: [lang for lang, _ in fences(page)] for page in PAGES}
    assert kinds == {
        "adding-an-algorithm.md": ["", "python", "python", "python"],
        "adding-a-dataset.md": ["python", "toml", "bash", "text"],
    }
    (sketch,) = [body for lang, body in fences(PAGES[0]) if lang == ""]
    assert sketch.startswith("request = algorithm.plan_probe(t)")


def test_every_python_block_runs_alone(tmp_path, helpers):
    files = []
    for i, code in enumerate(python_blocks()):
        files.append(tmp_path / f"block{i}.py")
        files[-1].write_text(code)
    proc = subprocess.run(
        [sys.executable, "-c", RUN_EACH, *map(str, files)], cwd=tmp_path,
        env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(300),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    registered = json.loads(proc.stdout.splitlines()[-1])
    names = [re.findall(r'^    name = "(\w+)"$', code, flags=re.M) for code in python_blocks()]
    assert names == [["median_split"], ["last_loss"], ["soft_ifca"], ["blobs"]]
    before = set(registered[0])
    for (name,), now in zip(names, registered[1:], strict=True):
        assert set(now) - before == {name}  # each block registers what it names
        before = set(now)


def test_the_table_example_runs_as_its_first_line_says(tmp_path, monkeypatch, capsys):
    import distfl
    from distfl.cli import main
    from distfl.plugins import ALGORITHMS

    (table_block,) = [code for code in python_blocks() if '"client_loss"' in code]
    first = table_block.splitlines()[0]
    assert first.startswith("# last_loss.py: distfl run ")
    (tmp_path / "last_loss.py").write_text(table_block)
    args = [a.strip("'") for a in first.split(": ", 1)[1].split()[2:]]  # after "distfl run"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the plug-in's folder goes on it
    try:
        code = main(["run", *args, "--preset", "digits", "--set", "data.num_clients=6",
                     "--set", "server.clients_per_round=6", "--set", "run.rounds=2",
                     "--set", 'run.progress="none"', "--out", "last.h5"])  # fmt: skip
    finally:
        ALGORITHMS.remove("last_loss")
    assert code == 0, capsys.readouterr()
    run = distfl.open(tmp_path / "last.h5")
    assert run.own_tables == ["client_loss"]
    table = run.table("client_loss")
    assert np.asarray(table["round"]).tolist() == [1] * 6 + [2] * 6
    assert np.asarray(table["client"]).tolist() == list(range(6)) * 2
    last = np.asarray(table["last_loss"]).reshape(2, 6)
    np.testing.assert_allclose(last.mean(axis=1), np.asarray(run.metrics["train_loss_last"]),
                               rtol=1e-12)  # fmt: skip


def test_the_soft_membership_example_runs_as_its_first_line_says(tmp_path, monkeypatch, capsys):
    """Each drawn client trains both clusters; its weights are a softmax (a row per client
    and cluster, summing to 1), the tree holds it under its larger one, and inspect marks
    the ARI as the largest weight's."""
    import distfl
    from distfl.cli import main
    from distfl.plugins import ALGORITHMS

    (block,) = [code for code in python_blocks() if '"soft_ifca"' in code]
    first = block.splitlines()[0]
    assert first.startswith("# soft_ifca.py: distfl run ")
    (tmp_path / "soft_ifca.py").write_text(block)
    args = [a.strip("'") for a in first.split(": ", 1)[1].split()[2:]]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        code = main(["run", *args, "--preset", "digits", "--set", "data.num_clients=8",
                     "--set", "server.clients_per_round=4", "--set", "run.rounds=3",
                     "--set", 'run.progress="none"', "--out", "soft.h5"])  # fmt: skip
        assert code == 0, capsys.readouterr()
        assert main(["inspect", "soft.h5"]) == 0
        shown = capsys.readouterr().out
    finally:
        ALGORITHMS.remove("soft_ifca")
    assert "(each client in its cluster of largest weight)" in shown
    run = distfl.open(tmp_path / "soft.h5")
    table = run.table("weights")
    rounds = np.asarray(table["round"])
    assert rounds.tolist() == [1] * 8 + [2] * 8 + [3] * 8
    w = np.asarray(table["weight"]).reshape(-1, 2)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    assert ((w > 0) & (w < 1)).all()  # soft: both clusters trained by every drawn client
    last = np.asarray(table["client"]).reshape(-1, 2)[-4:, 0]
    larger = np.argmax(w[-4:], axis=1)
    assert [str(j) for j in larger] == [str(run.assignment[k]) for k in last]
