"""The package's layout holds: an acyclic module-level import graph, no function importing an
enginespec module, one exception family exported at the top level, and the spec's argv methods
agreeing with parse_argv on every corpus record."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import enginespec
import enginespec.errors
from enginespec import EngineSpecError, UnknownEngineError, all_engine_specs, get_engine_spec, parse_argv

PACKAGE = Path(enginespec.__file__).parent
CORPORA = [
    Path(__file__).parent / "data" / name
    for name in ("argv-public.jsonl", "argv-new-public.jsonl", "argv-issue27-public.jsonl")
]


def _module_name(path: Path) -> str:
    parts = ["enginespec", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The enginespec modules an import statement names (``from enginespec import x`` names the
    submodule ``enginespec.x`` when there is one, else the package itself)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "enginespec"]
    base = node.module or ""
    if node.level:
        package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    if base.split(".")[0] != "enginespec":
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports outside functions and classes, including those under ``if``/``try`` (and so under
    ``if TYPE_CHECKING:``, which counts: a type-only cycle is still a cycle)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            pending.extend(node.body)
            pending.extend(node.orelse)
            if isinstance(node, ast.Try):
                pending.extend(node.finalbody)
                for handler in node.handlers:
                    pending.extend(handler.body)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        edges = {t for node in _module_level_imports(tree) for t in _targets(node, name)}
        graph[name] = {t for t in edges if t in MODULES and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return [*path[path.index(successor) :], successor]
            if successor not in state and (found := visit(successor)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_module_level_import_graph_is_acyclic() -> None:
    graph = _graph()
    assert len(graph) > 20  # the whole package was read
    # every import form is seen: `import a.b as c`, `from a.b import x`, `from a import module`
    assert {"enginespec.commands", "enginespec.definition"} <= graph["enginespec.spec"]
    assert "enginespec.engines.vllm" in graph["enginespec.engines"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _function_imports(name: str, path: Path) -> set[str]:
    """The package modules ``name`` imports inside its functions (to start without them)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found |= {t for t in _targets(inner, name) if t in MODULES and t != name}
    return found


def test_imports_inside_functions_hide_no_cycle() -> None:
    """A function may import what it alone needs (the CLI's commands, an engine's machinery:
    `enginespec --version` and a scan start without them), but only where that import, taken as
    if it were at module level, closes no cycle."""
    graph = _graph()
    lazy = {name: _function_imports(name, path) for name, path in MODULES.items()}
    assert lazy["enginespec.spec"] >= {"enginespec.commands", "enginespec.installing"}  # they are seen
    whole = {name: graph[name] | lazy[name] for name in graph}
    assert _cycle(whole) is None, " -> ".join(_cycle(whole) or [])


def _family() -> list[type[BaseException]]:
    return [
        member
        for _, member in inspect.getmembers(enginespec.errors, inspect.isclass)
        if issubclass(member, BaseException) and member.__module__ == "enginespec.errors"
    ]


def test_one_error_family_exported_at_the_top_level() -> None:
    family = _family()
    assert len(family) >= 10
    for error in family:
        assert issubclass(error, EngineSpecError), error
        assert getattr(enginespec, error.__name__) is error
        assert error.__name__ in enginespec.__all__
        if error is not EngineSpecError:  # each also resembles a builtin
            builtins = [b for b in error.__mro__ if b.__module__ == "builtins"]
            assert builtins[0] not in (Exception, BaseException), error
    for name in enginespec.__all__:  # and nothing raised on purpose lives elsewhere
        value = getattr(enginespec, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert value in family, name


def test_unknown_engine_is_a_family_member_and_a_value_error() -> None:
    with pytest.raises(UnknownEngineError, match="unknown engine 'nope'; known engines: vllm") as info:
        get_engine_spec("nope")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, EngineSpecError)


def _records() -> list[list[str]]:
    records = [
        json.loads(line)["argv"]
        for corpus in CORPORA
        for line in corpus.read_text().splitlines()
        if line.strip()
    ]
    assert len(records) > 300
    return records


def test_spec_argv_methods_agree_with_parse_argv_on_the_corpus() -> None:
    specs = all_engine_specs()
    for argv in _records():
        invocation = parse_argv(argv)
        for spec in specs:
            mine = invocation is not None and invocation.engine == spec.id
            assert spec.detect_invocation(argv) is mine, (spec.id, argv)
            assert spec.extract_model_path(argv) == (invocation.model if mine and invocation else None)
            served = invocation.served_model_name if mine and invocation else None
            assert spec.extract_served_model_name(argv) == served
        assert sum(spec.detect_invocation(argv) for spec in specs) == (invocation is not None)


def test_import_stays_light() -> None:
    """`import enginespec` loads none of the CLI's extras (rich, prometheus_client), nor httpx, nor
    pydantic: its names are imported on first use."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import enginespec"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line
    }
    assert "enginespec" in imported  # the list was read
    assert not imported & {"rich", "prometheus_client", "httpx", "pydantic"}
