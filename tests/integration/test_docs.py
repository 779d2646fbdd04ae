"""The docs site builds in strict mode (a broken link, a missing anchor or page, a page left
out of the navigation each fail the build), its generated parts are in the built pages,
and the README stays the short front door whose links lead to pages that exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docpage import FENCE, computed, masked
from timing import limit

from distfl.runfile.layout import describe
from distfl.tools.reference import config_keys

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists() and shutil.which("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install 'distfl[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [str(mkdocs) if mkdocs.exists() else "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit(300),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def test_the_site_builds_strictly_with_every_page(site):
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for stem in pages:
        built = site / ("index.html" if stem == "index" else f"{stem}/index.html")
        assert built.exists(), stem


def test_the_configuration_page_is_generated_from_the_schema(site):
    html = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "distfl:config-keys" not in html
    for d in config_keys():
        assert f"<code>{d.key}</code>" in html, d.key


def test_the_run_file_page_holds_the_declared_layout(site):
    import html as markup

    html = markup.unescape((site / "run-file" / "index.html").read_text(encoding="utf-8"))
    for line in describe().splitlines():
        path = line.split()[0] if line.startswith("/") else None
        if path:
            assert path in html, path


def test_the_readme_is_short_and_its_links_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).exists(), link


def shown_after(page: Path, lead: str) -> list[str]:
    """The lines of the first code block after the sentence that starts with ``lead``."""
    text = page.read_text(encoding="utf-8")
    start = text.index("```\n", text.index(lead)) + len("```\n")
    return text[start : text.index("```", start)].splitlines()


@pytest.mark.parametrize(
    ("page", "lead", "lines"),
    [("README.md", "The first command prints a progress line", 8),
     ("docs/index.md", "The first command prints a progress line", 8),
     ("docs/watching.md", "Rank 0 prints one line per round it shows", 1)],
)  # fmt: skip
def test_the_default_runs_output_is_what_the_pages_show(default_run, page, lead, lines):
    """Every line the page shows of the default job's output is a line the job printed,
    but for rates, seconds and the time left (and every number, on a CPU whose float32
    kernels are not those the pages' runs were made with: docpage.computed)."""
    printed = {computed(masked(line)) for line in default_run.stdout.splitlines()}
    shown = shown_after(ROOT / page, lead)
    assert len(shown) >= lines
    for line in shown:
        assert computed(masked(line)) in printed, (
            f"{page} shows {line!r}, which the run did not print"
        )


def inspect_masked(path: Path) -> set[str]:
    """``distfl inspect`` of ``path`` as the pages show it: the file named distfl-run.h5,
    its creation time and the host masked."""
    import io

    from distfl.tools.inspection import inspect_run

    stream = io.StringIO()
    inspect_run(path, stream)
    text = stream.getvalue().replace(str(path), "distfl-run.h5")
    return {_inspect_mask(line) for line in text.splitlines()}


def _inspect_mask(line: str) -> str:
    line = re.sub(r"created [^,]+,", "created C,", line)
    return computed(re.sub(r"^world( +)\S+ rank", r"world\1HOST rank", line).rstrip())


@pytest.mark.parametrize(
    ("page", "lead"),
    [("README.md", "shows the cluster tree and the scores"),
     ("docs/index.md", "`distfl inspect distfl-run.h5` shows the tree")],
)  # fmt: skip
def test_the_default_runs_inspect_is_what_the_pages_show(default_run, page, lead):
    printed = inspect_masked(default_run.path)
    shown = shown_after(ROOT / page, lead)
    assert len(shown) >= 5
    for line in shown:
        assert _inspect_mask(line) in printed, f"{page} shows {line!r}, which inspect did not print"


#: a named section of the README: ``README, "Launching"``, ``README.md, Benchmarks``,
#: ``README.md#launching``
README_SECTION = re.compile(r"README(?:\.md)?(?:, \"?([A-Z][\w -]+[\w])\"?|#([a-z0-9-]+))")


def test_every_readme_section_named_elsewhere_exists():
    """The docs pages and the package's docstrings name README sections that it has."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    files = [*(ROOT / "docs").glob("*.md"), *(ROOT / "distfl").rglob("*.py"), ROOT / "README.md"]
    named = []
    for path in files:
        for m in README_SECTION.finditer(path.read_text(encoding="utf-8")):
            title, anchor = m.groups()
            ok = title in headings if title else anchor in anchors
            if not ok:
                named.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not named, f"README has no such section: {named}"


def page_block(page: str, lead: str) -> list[str]:
    return shown_after(ROOT / page, lead)


def test_the_configuration_pages_error_line_is_what_the_config_says():
    from distfl.config import load
    from distfl.errors import ConfigError

    (shown,) = page_block("docs/configuration.md", "does not take stops the run with exit code 2")
    with pytest.raises(ConfigError) as info:
        load(overrides=['algorithm.name="fedgwc"', "algorithm.eps1=0.4"])
    assert shown == f"distfl: error: {info.value}"


def test_the_commands_pages_keys_excerpt_is_what_distfl_keys_prints():
    from distfl.tools.keys import format_keys, key_rows

    printed = {line.rstrip() for line in format_keys(key_rows("default"), "default").splitlines()}
    shown = page_block("docs/commands.md", "printed on the next line. An excerpt:")
    assert len(shown) >= 4
    for line in shown:
        assert line.rstrip() in printed, line


def test_the_commands_pages_gather_lines_are_what_gather_prints(default_run, tmp_path):
    """A sweep of three run files and a text file named x.h5, gathered as the page
    shows."""
    import io

    from distfl.tools.gather import gather

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for name in ("a.h5", "b.h5", "c.h5"):
        shutil.copy(default_run.path, sweep / name)
    (sweep / "x.h5").write_text("not a run file\n")
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = gather(["sweep"], out, errors=err)
    finally:
        os.chdir(here)
    shown = page_block("docs/commands.md", "named on stderr with the reason, followed by a")
    assert code == 1 and err.getvalue().splitlines() == shown


#: what starts a block of commands (not of output) on the pages
COMMAND = re.compile(
    r"^(distfl (run|suite|report|inspect|status|gather|compare|keys|bench)\b(?!:)|torchrun|"
    r"mpiexec|sbatch|srun|python|\.|/usr|#|\$|launch/|NPROC|export|pip|tail|tensorboard|cd |"
    r"OMP|scripts|git|request)"
)
#: every block of output a page shows (a page and its first line's start), with the test
#: that compares it with what the code prints; python-api.md's blocks after its Python
#: blocks are all run by tests/integration/test_docs_python_api.py
CHECKED_OUTPUTS = {
    ("README.md", "round 270/300 |"): "test_docs.py",
    ("README.md", "hierarchy"): "test_docs.py",
    ("docs/index.md", "round 240/300 |"): "test_docs.py",
    ("docs/index.md", "run file   distfl-run.h5"): "test_docs.py",
    ("docs/watching.md", "round 250/300 |"): "test_docs.py",
    ("docs/configuration.md", "distfl: error: unknown key algorithm.eps1"): "test_docs.py",
    ("docs/commands.md", "key                             value"): "test_docs.py",
    ("docs/commands.md", "distfl gather: skipped sweep/x.h5"): "test_docs.py",
    ("docs/checkpoints.md", "distfl: stopped by SIGUSR1"): "test_resume.py",
    ("docs/checkpoints.md", "distfl: error: round 25 failed"): "test_round_failure.py",
    # a plug-in's state that cannot be read, and a worker whose plug-in raised
    ("docs/checkpoints.md", "distfl: error: round 4 failed"): "test_plugin_failures.py",
    ("docs/launching.md", "A  alone.h5"): "test_compare.py",
    ("docs/launching.md", "world      node1 ranks 0-1"): "test_multi_node.py",
    ("docs/run-file.md", "/"): "test_reference.py",  # the layout, written from the code
    ("docs/adding-a-dataset.md", "distfl: error: run.plugins: 'blobs.py'"): "test_plugin_checks.py",
    ("docs/adding-a-model.md", "distfl: error: model.name = 'resnet'"): "test_plugin_checks.py",
    ("docs/privacy.md", "  privacy                  ε = 4"): "test_privacy_runs.py",
    ("docs/newcomers.md", "  newcomers                0.9615"): "test_newcomers_runs.py",
}


def output_blocks(page: Path) -> list[str]:
    """The first lines of the page's blocks of output: fenced blocks without a language (or
    ``text``) that start with no command, other than those after a Python block."""
    text = page.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    out = []
    for i, m in enumerate(fences):
        first = (m.group(2).splitlines() or [""])[0]
        after_python = i and fences[i - 1].group(1) == "python"
        if m.group(1) in ("", "text") and not COMMAND.match(first) and not after_python:
            out.append(first)
    return out


def test_every_output_a_page_shows_is_compared_by_a_test():
    """A new block of output on a page fails here until a test compares it with what the
    code prints (and CHECKED_OUTPUTS names that test); a check whose block is gone, too."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = {
        (str(page.relative_to(ROOT)), first)
        for page in pages
        for first in output_blocks(page)
        if page.name != "adding-an-algorithm.md" or not first.startswith("request =")
    }
    unchecked = sorted(
        f"{page}: {first!r}"
        for page, first in found
        if not any(page == p and first.startswith(start) for p, start in CHECKED_OUTPUTS)
    )
    assert not unchecked, f"output shown by no test: {unchecked}"
    gone = [k for k in CHECKED_OUTPUTS if not any(k[0] == p and f.startswith(k[1])
                                                    for p, f in found)]  # fmt: skip
    assert not gone, f"checked outputs no page shows: {gone}"
    tests = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    assert set(CHECKED_OUTPUTS.values()) <= tests
