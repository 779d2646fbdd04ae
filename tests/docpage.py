"""A docs page's Python blocks run in order, as a notebook runs them, and their output
compared with what the page shows.

A page's ```python block is followed, where the page shows what it prints, by a ```text
block (nothing but blank lines between them). :func:`run_page` executes every Python block
of a page in one namespace in a fresh Python (``python tests/docpage.py PAGE``, in a
directory of the caller's choice) and returns what each printed, with the value of its last
line when that is an expression, shown as a notebook shows it (``pprint`` for a dict, the
object's ``repr`` otherwise). :func:`differences` compares that with the page, but for
the numbers :data:`VOLATILE` names (times and rates, which differ from run to run)."""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import json
import os
import pprint
import re
import shlex
import subprocess
import sys
from pathlib import Path

from timing import limit

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)

#: what differs between two runs of the same blocks: seconds and rates
VOLATILE = [
    (re.compile(r"('wall_s': )[0-9.e+-]+"), r"\1T"),
    (re.compile(r"\d+\.\d+ rounds/s"), "R rounds/s"),
    (re.compile(r"ETA [^|\n]+$", re.M), "ETA T"),
    (re.compile(r"in \d+\.\d+ s\b"), "in T s"),
    (re.compile(r"(client-steps/s +)\d+\.\d+"), r"\1R"),
]


#: a number of a line (a round, an accuracy, a count ...)
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")

#: the float kernels of the machine whose runs the pages show: the one that wrote the old
#: run files (tests/runfile.py's kernel_fingerprint)
PAGES_KERNELS = Path(__file__).parent / "data" / "runfiles-v0.1.0" / "kernels.sha256"


@functools.cache
def other_kernels() -> str | None:
    """Why a run here cannot print the numbers the pages show (this CPU's float32 kernels
    are not those of the machine that made them: another last bit, another split round), or
    None where it can."""
    from runfile import kernel_fingerprint

    here, pages = kernel_fingerprint(), PAGES_KERNELS.read_text().strip()
    if here == pages:
        return None
    return f"this CPU's float32 kernels ({here[:12]}) are not the pages' ({pages[:12]})"


def computed(text: str) -> str:
    """``text`` with every number masked where a run here cannot print the pages' numbers
    (:func:`other_kernels`), and the spaces numpy pads them with: there, the lines a run
    prints are checked for their form; as it is where it can, every number checked."""
    if not other_kernels():
        return text
    return re.sub(r"(?<=\S) +", " ", NUMBER.sub("N", text))  # (numpy pads to the widest)


#: the comment before a block that runs only where pandas is importable
NEEDS_PANDAS = "<!-- needs pandas -->"


def blocks(page: Path) -> list[tuple[str, str | None]]:
    """(code, the output the page shows after it or None) of each Python block, in order;
    a block preceded by :data:`NEEDS_PANDAS` only where pandas is importable."""
    import importlib.util

    pandas = importlib.util.find_spec("pandas") is not None
    text = page.read_text(encoding="utf-8")
    fences = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    out = []
    for i, (lang, body, start, end) in enumerate(fences):
        if lang != "python":
            continue
        before = text[fences[i - 1][3] if i else 0 : start]
        if NEEDS_PANDAS in before and not pandas:
            continue
        shown = None
        if i + 1 < len(fences):
            nxt_lang, nxt_body, nxt_start, _ = fences[i + 1]
            if nxt_lang == "text" and not text[end:nxt_start].strip():
                shown = nxt_body
        out.append((body, shown))
    return out


def fenced(page: Path, kind: str) -> list[str]:
    """The page's fenced blocks of ``kind`` (python, toml, bash), in order."""
    return [body for lang, body in FENCE.findall(page.read_text(encoding="utf-8")) if lang == kind]


def first_run_and_its_output(page: Path, cwd: Path, helpers) -> tuple[str, str]:
    """(what the page's first ``distfl run`` command prints, the page's one ``text`` block):
    the first line of its first bash block, its comment left out, run in this process into
    ``cwd`` (``--out`` there)."""
    first = fenced(page, "bash")[0].splitlines()[0].split("#")[0]
    argv = shlex.split(first)
    assert argv[:2] == ["distfl", "run"], first
    printed = helpers.run_alone(cwd, *argv[2:], "--out", str(cwd / "first.h5"))
    (shown,) = fenced(page, "text")
    return printed, shown


def run_commands(block: str, cwd: Path, helpers) -> list[subprocess.CompletedProcess]:
    """Each line of a page's bash ``block`` run in ``cwd`` as the page shows it: ``distfl``
    as this Python's ``-m distfl``, ``torchrun`` from its environment; each must exit 0."""
    done = []
    for line in block.strip().splitlines():
        words = shlex.split(line)
        if words[0] == "distfl":
            argv = [sys.executable, "-m", "distfl", *words[1:]]
        else:
            argv = [helpers.venv_tool(words[0]), *words[1:]]
        env = helpers.clean_env()
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=limit(600))  # fmt: skip
        assert proc.returncode == 0, f"{line}:\n{proc.stdout}\n{proc.stderr}"
        done.append(proc)
    return done


def without_plugin(plugin: Path, argv: list[str], helpers) -> subprocess.CompletedProcess:
    """``python -m distfl *argv`` in the plug-in file's folder with the file moved away
    (put back after): what a reader does where the plug-in is not."""
    gone = plugin.parent / "elsewhere"
    gone.mkdir(exist_ok=True)
    plugin.rename(gone / plugin.name)
    try:
        return subprocess.run([sys.executable, "-m", "distfl", *argv], cwd=plugin.parent,
                              env=helpers.clean_env(), capture_output=True, text=True,
                              timeout=limit(120))  # fmt: skip
    finally:
        (gone / plugin.name).rename(plugin)


def masked(text: str) -> str:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def differences(page: Path, printed: list[str], *, of_a_run: bool = False) -> list[str]:
    """Each block whose shown output is not what it printed (masked), as a message;
    ``of_a_run``: the numbers are a run's, masked too where a run here cannot print the
    pages' (:func:`computed`)."""
    mask = (lambda text: computed(masked(text))) if of_a_run else masked
    out = []
    for i, ((code, shown), got) in enumerate(zip(blocks(page), printed, strict=True)):
        if shown is not None and mask(shown) != mask(got):
            first = code.strip().splitlines()[0]
            out.append(f"block {i + 1} ({first!r}) shows\n{shown}\nbut printed\n{got}")
    return out


def run_page(page: Path, cwd: Path, env: dict[str, str]) -> list[str]:
    """What each Python block of ``page`` printed, run in order in a fresh Python in
    ``cwd`` with ``env``."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(page)], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=limit(900),
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"the blocks of {page} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])


def _display(value) -> str:
    if isinstance(value, (dict, list, tuple)):
        return pprint.pformat(value, width=79, sort_dicts=False)
    return repr(value)


def _execute(page: Path) -> list[str]:
    namespace: dict = {"__name__": "__main__"}
    printed = []
    for code, _ in blocks(page):
        tree = ast.parse(code)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body = tree.body[:-1]
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(tree, str(page), "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), str(page), "eval"), namespace)
                if value is not None:
                    print(_display(value))
        printed.append(buffer.getvalue())
    return printed


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    print(json.dumps(_execute(Path(sys.argv[1]))))
