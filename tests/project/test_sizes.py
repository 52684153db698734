"""Units stay small enough to read: no module of the package over 800 lines, no function or method
over 120 (docs/architecture.md says so; a unit that outgrows them is split by its jobs)."""

from __future__ import annotations

import ast
from pathlib import Path

import enginespec

PACKAGE = Path(enginespec.__file__).parent
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120


def _oversized(name: str, source: str) -> list[str]:
    """What in one module's ``source`` is over its limit, as ``name: what (lines)``."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: the module ({lines} lines)")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno}: {node.name} ({length} lines)")
    return found


def test_no_module_or_function_of_the_package_is_over_its_limit() -> None:
    modules = sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pyi"))
    assert len(modules) > 100  # the package was found
    found = [
        problem
        for path in modules
        for problem in _oversized(path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_size_check_finds_a_long_module_and_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_function = f"def long():\n{body}\n"
    assert _oversized("f.py", long_function) == [f"f.py:1: long ({MAX_FUNCTION_LINES + 1} lines)"]
    fits = "def fits():\n" + "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1)) + "\n"
    assert _oversized("f.py", fits) == []
    long_module = "x = 1\n" * (MAX_MODULE_LINES + 1)
    assert _oversized("m.py", long_module) == [f"m.py: the module ({MAX_MODULE_LINES + 1} lines)"]
    method = (
        "class C:\n    async def m(self):\n" + "\n".join(f"        y{i} = {i}" for i in range(130)) + "\n"
    )
    assert _oversized("c.py", method) == ["c.py:2: m (131 lines)"]
