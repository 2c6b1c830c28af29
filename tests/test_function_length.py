"""No function in src/ runs over 80 lines (issue 64). The functions that did when this
check came are listed with their length: none may grow, a new one may not join them, and
one brought under the limit leaves the list (the test says so), until it is empty."""

from __future__ import annotations

import ast
from pathlib import Path

LIMIT = 80
SRC = Path(__file__).resolve().parents[1] / "src"
# module path: {qualified name: lines} of the functions over LIMIT on 2026-12-06.
LONG = {
    "stackcost/commands/ab.py": {"add_parser": 95},
    "stackcost/compare/bisect.py": {"bisect": 131},
}


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


def test_no_function_grows_over_the_limit() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        module = str(path.relative_to(SRC))
        known = LONG.get(module, {})
        for name, n in lengths(path).items():
            allowed = known.get(name, LIMIT)
            if n > allowed:
                problems.append(f"{module}:{name} is {n} lines (at most {allowed})")
            elif name in known and n <= LIMIT:
                problems.append(f"{module}:{name} is {n} lines now: take it out of LONG")
        missing = set(known) - set(lengths(path))
        problems += [f"{module}:{name} is gone: take it out of LONG" for name in missing]
    assert not problems, "\n".join(problems)
