"""No function in src/ runs over 80 lines: a longer one is split along its steps."""

from __future__ import annotations

import ast
from pathlib import Path

LIMIT = 80
SRC = Path(__file__).resolve().parents[1] / "src"


def lengths(path: Path) -> dict[str, int]:
    """Every function's and method's length in lines (decorators left out), by its
    qualified name inside the module."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + child.name] = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(path.read_text()), "")
    return out


def test_no_function_runs_over_the_limit() -> None:
    problems = [
        f"{path.relative_to(SRC)}:{name} is {n} lines (at most {LIMIT})"
        for path in sorted(SRC.rglob("*.py"))
        for name, n in lengths(path).items()
        if n > LIMIT
    ]
    assert not problems, "\n".join(problems)
