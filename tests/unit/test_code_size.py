"""No module of the package is over 600 lines and no function over 80 (a ``def`` counted
from its ``def`` line to its last line, decorators excluded), with no exception: each
failure is named ``path:line name (N lines)``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "distfl"

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

MODULES = sorted(PACKAGE.rglob("*.py"))


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function of ``tree`` with its dotted name (``Class.method``, ``outer.inner``),
    methods and nested functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def test_the_package_has_modules():
    assert PACKAGE / "__init__.py" in MODULES


def test_no_module_is_over_600_lines():
    over = []
    for path in MODULES:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            over.append(f"{path.relative_to(ROOT)}:1 module ({lines} lines)")
    assert not over, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(over)


def test_no_function_is_over_80_lines():
    over = []
    for path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, node in functions(tree):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                over.append(f"{path.relative_to(ROOT)}:{node.lineno} {name} ({lines} lines)")
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)
