"""The package's layout holds: folders in layers that import only downward (at module level or
inside a function), an acyclic import graph, one exception family exported at the top level, the
spec's argv methods agreeing with parse_argv on every corpus record; and what is written about it
is true: docs/architecture.md names every module, and no doc, test or bench cites a file of the
repository that is not there."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import io
import json
import re
import subprocess
import sys
import tokenize
import warnings
from pathlib import Path

import pytest

import enginespec
import enginespec.errors
from enginespec import EngineSpecError, UnknownEngineError, all_engine_specs, get_engine_spec, parse_argv
from enginespec._moved import OldPaths

PACKAGE = Path(enginespec.__file__).parent
CORPORA = [
    Path(__file__).parents[1] / "data" / name
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
    assert {"enginespec.lifecycle.commands", "enginespec.definition.records"} <= graph["enginespec.spec"]
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
    assert lazy["enginespec.spec"] >= {
        "enginespec.lifecycle.commands",
        "enginespec.lifecycle.installing",
    }  # they are seen
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


# --- the suite's own children ------------------------------------------------------------------

#: Calls that end a child (or hand it to what ends it: a fixture's stop, a stream's interrupt).
_ENDS = ("kill", "killpg", "terminate", "stop", "stop_all", "interrupt", "send_signal")


def _ends_a_child(nodes: list[ast.stmt]) -> bool:
    return any(
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute | ast.Name)
        and any(
            end in (call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id) for end in _ENDS
        )
        for node in nodes
        for call in ast.walk(node)
    )


def _unowned_children(source: str) -> list[int]:
    """The lines of ``subprocess.Popen`` calls whose child nothing is sure to end: not inside, or
    followed in the same function by, a ``try`` whose ``finally`` ends children; not appended to a
    list a fixture ends (``procs.started.append(proc)``); not returned to a caller that owns it;
    not kept by an object with a method that ends it."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Popen"
    ]
    return [call.lineno for call in calls if not _owned(call, parents)]


def _owned(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    node: ast.AST = call
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Return) or (isinstance(node, ast.Try) and _ends_a_child(node.finalbody)):
            return True
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):  # self.proc = ...
            owner = next(n for n in _ancestors(node, parents) if isinstance(n, ast.ClassDef))
            return _ends_a_child(owner.body)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return _ended_later(call, node)
    return False


def _ended_later(call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether, after ``call``, ``function`` ends children in a ``finally``, or hands the child
    (by the name it was assigned to) to a list or to its caller."""
    names = {
        target.id
        for node in ast.walk(function)
        if isinstance(node, ast.Assign) and node.value is call
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(function):
        if getattr(node, "lineno", 0) <= call.lineno:
            continue
        if isinstance(node, ast.Try) and _ends_a_child(node.finalbody):
            return True
        handed = (
            node.args
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            else [node.value]
            if isinstance(node, ast.Return) and node.value is not None
            else []
        )
        if any(isinstance(arg, ast.Name) and arg.id in names for arg in handed):
            return True
    return False


def _ancestors(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    found = []
    while node in parents:
        node = parents[node]
        found.append(node)
    return found


def test_every_child_the_suite_starts_is_ended_in_a_finally() -> None:
    """A child that outlives its test (holding a pipe, a port) hangs or breaks the rest of the
    suite: every one is ended in a ``finally`` or by a fixture's."""
    tests = Path(__file__).resolve().parents[1]
    offenders = {
        str(path.relative_to(tests)): lines
        for path in sorted(tests.rglob("*.py"))
        if (lines := _unowned_children(path.read_text()))
    }
    assert offenders == {}


def test_the_child_check_finds_a_child_left_running() -> None:
    left = "import subprocess\ndef test_x():\n    p = subprocess.Popen(['sleep', '9'])\n"
    left += "    assert p.wait(1) == 0\n"
    ended = left.replace(
        "    assert p.wait(1) == 0\n", "    try:\n        p.wait(1)\n    finally:\n        p.kill()\n"
    )
    fixture = left.replace("    assert p.wait(1) == 0\n", "    procs.started.append(p)\n")
    assert (_unowned_children(left), _unowned_children(ended), _unowned_children(fixture)) == ([3], [], [])


def test_only_the_backend_selector_imports_a_twin() -> None:
    """The pure-Python twins (``_host/fallback/``) are the fallback backend, chosen in
    ``_host/backend`` alone: what the facade shares with them lives in ``_host/shapes``, so the
    native path never loads them and a change to a twin cannot break it."""
    graph = _whole_graph()
    twins = {name for name in MODULES if name.startswith("enginespec._host.fallback.")}
    assert len(twins) == 8  # one per Rust file it mirrors
    importers = {name for name, edges in graph.items() if edges & twins and name not in twins}
    assert importers == {"enginespec._host.backend"}


#: The package's folders from the bottom up: a module imports only from its own folder and those
#: below it (module level or inside a function). Root modules are named: the shared records and
#: errors at the bottom, the facade (``spec``, the ``modelfacts`` path) above the capabilities.
LAYERS: list[tuple[str, set[str] | None]] = [
    (
        "base",
        {"errors", "healthrecord", "failures", "config", "packageversion", "display", "suggest", "_moved"},
    ),
    ("untrusted", None),
    ("definition", None),
    ("_host", None),
    ("gpus", None),
    ("models", None),
    ("process", None),
    ("health", None),
    ("scanning", None),
    ("lifecycle", None),
    ("fleet", None),
    ("facade", {"spec", "modelfacts"}),
    ("engines", None),
    ("cli", None),
    ("top", {""}),
]


def _layer(module: str) -> int:
    rest = module.removeprefix("enginespec").lstrip(".")
    for rank, (name, members) in enumerate(LAYERS):
        if rest in members if members is not None else rest.split(".")[0] == name:
            return rank
    raise AssertionError(f"{module} is in no layer: add it to a folder (and to docs/architecture.md)")


def _whole_graph() -> dict[str, set[str]]:
    top = _graph()
    return {name: top[name] | _function_imports(name, path) for name, path in MODULES.items()}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if _layer(target) > _layer(name)
    )


def test_nothing_imports_upward() -> None:
    """Every module sits in a folder of one capability, and folders import only downward: a
    newcomer reading ``health/`` never lands in ``scanning/``, and ``definition/`` (what an
    engine is) reads nothing of the host."""
    graph = _whole_graph()
    assert {_layer(name) for name in graph} == set(range(len(LAYERS)))  # every layer is populated
    assert _upward(graph) == []
    assert _upward({"enginespec.definition.registry": {"enginespec._host.procfiles"}})  # it finds them


def test_the_package_is_one_level_deep() -> None:
    """Folders hold modules, not folders (the fallback's twins, one per Rust file, aside)."""
    deep = {
        name for name in MODULES if name.count(".") > 2 and not name.startswith("enginespec._host.fallback.")
    }
    assert deep == set()


def _classes_named_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """Public class names defined in more than one module (module name -> its source), but for
    a twin: a class of a ``_host/fallback/`` module named as a class of the native stub (``_native``) it
    mirrors."""
    defined: dict[str, list[str]] = {}
    for module, source in sorted(sources.items()):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(module)
    native = {name for name, modules in defined.items() if "enginespec._native" in modules}

    def twin(module: str, name: str) -> bool:
        return name in native and module.startswith("enginespec._host.fallback.")

    shared = {name: [m for m in modules if not twin(m, name)] for name, modules in defined.items()}
    return {name: modules for name, modules in shared.items() if len(modules) > 1}


def test_one_class_per_name() -> None:
    """A class name means one class: following ``Scanner`` or ``Target`` through the code never
    lands on another of the same name (the fallback's twins of the native classes aside)."""
    sources = {name: path.read_text() for name, path in MODULES.items()}
    sources["enginespec._native"] = (PACKAGE / "_native.pyi").read_text()
    assert {"Scanner", "ProcessScanner", "Watch", "EngineProcess"} <= {
        node.name
        for source in sources.values()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }
    assert _classes_named_twice(sources) == {}


def test_the_class_name_check_finds_a_name_used_twice() -> None:
    sources = {
        "enginespec._native": "class Matcher: ...",
        "enginespec._host.fallback.matcher": "class Matcher: ...",
        "enginespec.process.argv": "class Matcher: ...\nclass _Private: ...",
        "enginespec.health.checks": "class _Private: ...",
    }
    assert _classes_named_twice(sources) == {"Matcher": ["enginespec._native", "enginespec.process.argv"]}


@pytest.mark.skipif(enginespec.BACKEND != "native", reason="the fallback backend is the twins")
def test_the_native_path_loads_no_twin() -> None:
    code = "import sys, enginespec; enginespec.Scanner().scan(); print(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "enginespec._host.backend" in loaded.stdout.split()  # the list was read
    assert not [name for name in loaded.stdout.split() if name.startswith("enginespec._host.fallback")]


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def test_only_the_reading_layer_names_proc() -> None:
    """The paths of kernel and process files are made in ``_host/`` (its ``proc`` root is how a
    scanner reads a fixture host): no other folder's code holds a ``/proc`` path."""
    naming = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        texts = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        ]
        if any("/proc" in text for text in texts):
            naming[name] = path
    assert "enginespec._host.procfiles" in naming  # the search finds what it looks for
    assert {name for name in naming if not name.startswith("enginespec._host.")} == set()


#: What a module outside ``_host/`` may take from the kernel's files and the files a process names:
#: their records and pure parsers. Every read goes through the door, ``_host/root.py``'s
#: ``HostRoot``, of the root the record was scanned under (or this host's, ``HOST_ROOT``).
NOT_READERS = {
    "enginespec._host.procfiles": {
        *("Owner", "PidStat", "PidStatus", "CgroupLine"),
        *("parse_stat", "parse_status", "parse_cgroup_lines"),
    },
    "enginespec._host.namedfiles": {"FileKind", "Identity", "NamedFile", "Refused", "file_kind"},
}


def _reads_past_the_door(name: str, source: str) -> list[str]:
    """What module ``name`` imports of ``_host/``'s readers besides the door (anywhere in it,
    functions too): a reading function, a path constant, or a reader module whole."""
    if name.startswith("enginespec._host."):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name in NOT_READERS]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            if node.module in NOT_READERS:
                allowed = NOT_READERS[node.module]
                found += [f"{node.module}.{a.name}" for a in node.names if a.name not in allowed]
            else:
                found += [
                    f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in NOT_READERS
                ]
    return found


def test_every_read_of_a_process_goes_through_the_door() -> None:
    """Outside ``_host/``, a process's files (``/proc``, ``/sys``, the files it names) are read
    through a ``HostRoot``: health, load, vitals, lifecycle, probing, model files and GPUs read the
    host a record was scanned under, never this host's ``/proc`` by a reader's default."""
    found = {name: _reads_past_the_door(name, path.read_text()) for name, path in MODULES.items()}
    assert {name: names for name, names in found.items() if names} == {}


#: The files of a process the door parses once into named records (``PidStat``, ``PidStatus``,
#: ``CgroupLine``): read raw outside ``_host/`` only for the backend's container parser.
PARSED_ONCE = {"stat", "status", "cgroup"}


def _raw_reads_of_parsed_files(source: str) -> list[str]:
    """The ``X.read(pid, NAME, ...)`` of a file in :data:`PARSED_ONCE`, unless handed straight
    to ``parse_cgroup`` (the scan's container parser, which the backend implements)."""
    tree = ast.parse(source)
    handed = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "parse_cgroup"
        for arg in node.args
    }
    return [
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "read"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in PARSED_ONCE
        and id(node) not in handed
    ]


def test_a_process_stat_status_and_cgroup_are_parsed_once_in_the_door() -> None:
    found = {
        name: _raw_reads_of_parsed_files(path.read_text())
        for name, path in MODULES.items()
        if not name.startswith("enginespec._host.")
    }
    assert {name: names for name, names in found.items() if names} == {}
    past = (
        "def f(root, pid):\n"
        '    return root.read(pid, "cgroup", 99).split(b":"), parse_cgroup(root.read(pid, "cgroup", 9))\n'
    )
    assert _raw_reads_of_parsed_files(past) == ["cgroup"]


def test_the_door_check_finds_a_read_past_it() -> None:
    past = (
        "from enginespec._host.procfiles import PidStat, read_proc\n"
        "from enginespec._host import namedfiles\n"
        "import enginespec._host.procfiles\n"
        "def f():\n"
        "    from enginespec._host.namedfiles import Refused, open_held\n"
    )
    assert _reads_past_the_door("enginespec.lifecycle.x", past) == [
        "enginespec._host.procfiles.read_proc",
        "enginespec._host.namedfiles",
        "enginespec._host.procfiles",
        "enginespec._host.namedfiles.open_held",
    ]
    assert _reads_past_the_door("enginespec._host.root", past) == []
    door = "from enginespec._host.root import HOST_ROOT\nfrom enginespec._host.namedfiles import Refused\n"
    assert _reads_past_the_door("enginespec.lifecycle.x", door) == []


def _loaded(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.split()


@pytest.mark.skipif(enginespec.BACKEND != "native", reason="the fallback scanner is psutil")
def test_ps_loads_only_what_it_uses() -> None:
    """`enginespec ps --no-health` starts without what only other paths use: psutil (the
    fallback's), httpx (health), pydantic-settings; the scanner's modules without http.client and
    ssl (a container's name: a host's containerised engine would load them in ps). Its table may
    use rich: engines of the host, such as other tests', may be found."""
    loaded = _loaded(
        "import sys, io, contextlib; from enginespec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['ps', '--no-health'])\n"
        "print(*sys.modules)"
    )
    assert "enginespec.scanning.scanner" in loaded  # the list was read
    assert not {"psutil", "httpx", "pydantic_settings", "asyncio"}.intersection(loaded)
    loaded = _loaded("import sys, enginespec.cli.app, enginespec.scanning.scanner; print(*sys.modules)")
    assert "enginespec.process.containers" in loaded
    assert not {"http.client", "ssl"}.intersection(loaded)
    # rich comes with the first table drawn: ps's sorting and rows, with nothing to show, go without
    loaded = _loaded("import sys, enginespec.cli.ps, enginespec.cli.pstable; print(*sys.modules)")
    assert not [name for name in loaded if name.split(".")[0] == "rich"]


def test_the_docs_link_only_to_files_in_the_repository() -> None:
    """README is the front door and docs/ the reference: every relative link resolves."""
    repository = Path(__file__).resolve().parents[2]
    pages = [repository / "README.md", *sorted((repository / "docs").glob("*.md"))]
    assert len(pages) > 10
    broken = [
        (page.name, target)
        for page in pages
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        if not target.startswith(("http://", "https://")) and not (page.parent / target).exists()
    ]
    assert broken == []
    assert len((repository / "README.md").read_text().splitlines()) <= 250


# --- what is written about the package -------------------------------------------------------

REPOSITORY = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPOSITORY / "docs" / "architecture.md"
_MAP = "### The package, folder by folder"


def _mapped(text: str) -> list[str]:
    """The modules the map of docs/architecture.md names, in its order: the code span that opens
    each bullet of its package section (``- `health/checks.py`: ...``)."""
    section = text[text.index(_MAP) :]
    end = section.find("\n## ")
    return re.findall(r"^- `([^`\s]+\.pyi?)`", section if end < 0 else section[:end], re.M)


def _package_files() -> set[str]:
    """Every module of the package by its path below python/enginespec/, and the extension's stub."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")} | {"_native.pyi"}


def _map_errors(mapped: list[str], modules: set[str]) -> str:
    """What is wrong with a map naming ``mapped`` of a package holding ``modules`` ("" if nothing)."""
    errors = {
        "missing (modules the map does not name)": sorted(modules - set(mapped)),
        "stale (named, but no such module)": sorted(set(mapped) - modules),
        "named twice": sorted({name for name in mapped if mapped.count(name) > 1}),
    }
    return "; ".join(f"{what}: {', '.join(names)}" for what, names in errors.items() if names)


def test_the_map_names_every_module() -> None:
    """docs/architecture.md names every module of the package by its path below python/enginespec/,
    with its job, and no module that is not there: a module added, renamed, split or removed fails
    here until the map says so."""
    mapped = _mapped(ARCHITECTURE.read_text())
    assert len(mapped) > 50  # the map was read
    problems = _map_errors(mapped, _package_files())
    assert not problems, f"docs/architecture.md, {_MAP!r}: {problems}"


def test_the_map_check_finds_missing_stale_and_repeated_names() -> None:
    text = f"# A\n\n{_MAP}\n\n- `spec.py`: x\n- `health/old.py`: y\n- `spec.py`: z\n\n## B\n\n"
    text += "- `cli/app.py`: w\n"
    assert _mapped(text) == ["spec.py", "health/old.py", "spec.py"]
    assert _map_errors(_mapped(text), {"spec.py", "health/checks.py", "cli/app.py"}) == (
        "missing (modules the map does not name): cli/app.py, health/checks.py; "
        "stale (named, but no such module): health/old.py; named twice: spec.py"
    )


def test_the_map_lists_the_folders_in_layer_order() -> None:
    """The map reads from the bottom up, as the layers do: a module is listed after everything it
    may import from."""
    mapped = [name for name in _mapped(ARCHITECTURE.read_text()) if (PACKAGE / name).suffix == ".py"]
    mapped = [name for name in mapped if (PACKAGE / name).is_file()]  # (a stale name fails above)
    ranks = [_layer(_module_name(PACKAGE / name)) for name in mapped]
    assert len(set(ranks)) == len(LAYERS)  # every layer is in the map
    pairs = zip(mapped[1:], ranks[1:], ranks[:-1], strict=True)
    assert [name for name, rank, before in pairs if rank < before] == []  # after a higher layer's


#: The package's modules when it was flat (before issue 39), by name. Cited bare (``scanning.py``,
#: ``_procfiles``), such a name meant the flat module, which is gone unless a module of that name
#: is still at the root or beside the file that cites it.
FLAT_MODULES = frozenset(
    {
        *("_backend", "_common", "_documents", "_gpuids", "_nvml", "_procfiles", "_pycontainers"),
        *("_pygguf", "_pymatcher", "_pyprocfs", "_pyprocread", "_pyscanner", "_pysysinfo"),
        *("agent", "agentviews", "agentwire", "argv", "boundary", "cli", "cli_lifecycle", "cliargs"),
        *("commands", "containers", "definition", "disclosure", "engineprocess", "exporter", "feeds"),
        *("fit", "gpus", "hardware", "health", "installing", "launching", "layout", "lifecycle"),
        *("liveness", "load", "logbook", "masking", "modelcli", "modelfacts", "naming", "probing"),
        *("processmodels", "reaching", "recipe", "registry", "remote", "safewrite", "scanning"),
        *("scanstages", "settings", "signature", "sockets", "status", "targets", "urls", "version"),
        *("versions", "vitals", "watching"),
    }
)

#: The repository's own top-level folders: a path that begins with one is a file of this
#: repository (``python/`` only as ``python/enginespec/``: SGLang's sources are under ``python/``).
_OWN_TOP = ("rust", "tests", "benches", "fuzz", "ci", "docs", "deploy", "scripts", ".github", ".ci")
_PACKAGE_FOLDERS = {path.parent.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("__init__.py")}
_CITED = re.compile(
    r"(?<![\w./:$-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:pyi?|rs|md|toml|c|sh|jsonl|json|ya?ml|txt))(?![\w/-])"
)
#: Another project's file, said so before it (across a comment's line break): "ggml's
#: `docs/gguf.md`", "the driver's nv-procfs.c".
_THEIRS = re.compile(r"\w's(?:\s|#|//)+[`(\"]*$")
#: A private flat module by its name (``_procfiles``, ``enginespec._common``), not an attribute or
#: a function of that name (``self._backend``, ``_backend()``).
_FLAT_PRIVATE = re.compile(
    r"(?:(?<=enginespec\.)|(?<![\w./-]))("
    + "|".join(sorted(name for name in FLAT_MODULES if name[0] == "_"))
    + r")\b(?!\()"
)


def _where_cited(cited: str, source: Path) -> list[Path] | None:
    """Where ``cited``, written in ``source``, may be (any will do), or None when it is not a file
    of this repository: another project's path (``vllm/v1/worker/gpu_worker.py``, ``main.py``)."""
    path = Path(cited.removeprefix("./"))
    parts = path.parts
    around = [source.parent, *source.parent.parents]  # a path relative to the citing file's folders
    if parts[0] == "python":
        return [REPOSITORY / path] if parts[1:2] == ("enginespec",) else None
    if parts[0] == "enginespec":
        return [REPOSITORY / "python" / path]
    if parts[0] in _OWN_TOP and len(parts) > 1:
        return [REPOSITORY / path, *(folder / path for folder in around)]
    if len(parts) > 1:  # a module by its folder: `health/checks.py`, `_host/fallback/scan.py`
        ours = path.parent.as_posix() in _PACKAGE_FOLDERS and path.suffix == ".py"
        return [PACKAGE / path] if ours else None
    if path.suffix == ".py" and path.stem in FLAT_MODULES:
        return [PACKAGE / path, source.parent / path]
    if path.suffix == ".md":  # README.md, DESIGN.md, health.md: the repository's, or its docs'
        return [REPOSITORY / path, REPOSITORY / "docs" / path, source.parent / path]
    return None


def _prose(source: Path) -> str:
    """What a person reads in ``source``: a page whole; a Python file's comments and docstrings; a
    Rust file's comments (code may name, say, an alias ``_pyscanner`` or a file it makes)."""
    text = source.read_text()
    if source.suffix == ".py":
        tree = ast.parse(text)
        docs = _docstrings(tree)
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) in docs]
        words = tokenize.generate_tokens(io.StringIO(text).readline)
        comments = [token.string for token in words if token.type == tokenize.COMMENT]
        return "\n".join(s for s in [*strings, *comments] if isinstance(s, str))
    if source.suffix == ".rs":
        return "\n".join(line.split("//", 1)[1] for line in text.splitlines() if "//" in line)
    return text


def _stale_citations(text: str, prose: str, source: Path) -> list[str]:
    """The files of this repository that ``text`` cites and that are not there, and the flat
    modules ``prose`` (what a person reads of it) names without ``.py`` (``_procfiles``)."""
    stale = []
    for found in _CITED.finditer(text):
        theirs = _THEIRS.search(text[max(0, found.start() - 40) : found.start()])
        places = None if theirs else _where_cited(found.group(1), source)
        if places is not None and not any(place.is_file() for place in places):
            stale.append(found.group(1))
    return stale + [found.group(1) for found in _FLAT_PRIVATE.finditer(prose)]


def _cited_in() -> list[Path]:
    """What people read about the repository: README, docs/, the tests, benches, fuzz targets, CI
    and maintenance scripts, the package and the Rust crate (the recorded corpora and logs of
    tests/data aside: they are other programs' words)."""
    suffixes = {".py", ".pyi", ".rs", ".md", ".c", ".sh"}
    found = [REPOSITORY / "README.md", REPOSITORY / "pyproject.toml", REPOSITORY / "Cargo.toml"]
    mine = Path(__file__).resolve()  # whose examples of stale citations are stale on purpose
    for top in ("docs", "tests", "benches", "python", "rust", "fuzz", "ci", "scripts"):
        found += [
            path
            for path in sorted((REPOSITORY / top).rglob("*"))
            if path.suffix in suffixes
            and path.is_file()
            and not {"data", "target", "seeds", "regressions"} & set(path.relative_to(REPOSITORY).parts)
            and path != mine
        ]
    return found


def test_nothing_cites_a_file_of_the_repository_that_is_not_there() -> None:
    """A citation of this repository's own file (``rust/scan.rs``, ``health/checks.py``,
    ``python/enginespec/...``, a root page such as ``README.md``, a module by the name it had when
    the package was flat) names a file that is there; other projects' files (``vllm/...``,
    TabbyAPI's ``main.py``) are theirs to keep."""
    sources = _cited_in()
    assert len(sources) > 200  # the repository was read
    stale = [
        f"{source.relative_to(REPOSITORY)}: {', '.join(found)}"
        for source in sources
        if (found := _stale_citations(source.read_text(), _prose(source), source))
    ]
    assert not stale, "cited, but not in the repository:\n" + "\n".join(stale)


def test_the_citation_check_finds_stale_citations() -> None:
    source = PACKAGE / "process" / "argv.py"
    text = (
        "see DESIGN.md and README.md, `rust/scan.rs` and `rust/gone.rs`, _procfiles.py beside\n"
        "settings.py and scanning.py, `health/checks.py`, `health/check.py`, `cli/main.py`,\n"
        "python/enginespec/_pymatcher.py, vllm/v1/worker/gpu_worker.py, main.py, python/sglang/x.py,\n"
        "ggml's `docs/gguf.md`, docs/health.md and tests/project/test_layout.py, models/auto/x.py"
    )
    prose = "`_procfiles`, `_host.procfiles`, `enginespec._common.X`, `self._backend`, `_nvml()`"
    assert _stale_citations(text, prose, source) == [
        "DESIGN.md",
        "rust/gone.rs",
        "_procfiles.py",
        "scanning.py",
        "health/check.py",
        "cli/main.py",
        "python/enginespec/_pymatcher.py",
        "_procfiles",
        "_common",
    ]
    assert _stale_citations("settings.py", "", REPOSITORY / "docs" / "scanning.md") == ["settings.py"]


def _dotted(text: str) -> list[str]:
    """The ``enginespec.a.b`` import paths a page shows (not a file such as ``/run/enginespec.sock``),
    and the names its examples import (``from enginespec.health import check_all`` shows
    ``enginespec.health.check_all``)."""
    imported = [
        f"{module}.{name.strip()}"
        for module, names in re.findall(r"^\s*(?:>>> )?from (enginespec[\w.]*) import ([\w, ]+)$", text, re.M)
        for name in names.split(",")
        if name.strip()
    ]
    return re.findall(r"(?<![\w./-])(enginespec(?:\.[A-Za-z_]\w*)+)", text) + imported


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of the package or a name in one, by its own path (a path of
    the flat layout, kept for one release with a DeprecationWarning, is not)."""
    if dotted.endswith(".__main__"):  # found, not run
        return importlib.util.find_spec(dotted) is not None
    parts = dotted.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for end in range(len(parts), 0, -1):
            try:
                found: object = importlib.import_module(".".join(parts[:end]))
            except ImportError:
                continue
            except DeprecationWarning:
                return False
            if isinstance(getattr(getattr(found, "__spec__", None), "loader", None), OldPaths):
                return False
            for name in parts[end:]:
                try:
                    found = getattr(found, name)
                except (AttributeError, DeprecationWarning):
                    return False
            return True
    return False


def test_the_docs_show_import_paths_that_exist() -> None:
    """Every ``enginespec.x.y`` a page shows (``enginespec.untrusted.boundary.contained``,
    ``enginespec.health``) imports: a module of the package, or a name in one."""
    pages = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md"))]
    shown = {(page.name, dotted) for page in pages for dotted in _dotted(page.read_text())}
    assert len(shown) > 30  # the pages were read
    # the Rust extension is absent where the fallback is tested (the wheel with it deleted)
    extension = importlib.util.find_spec("enginespec._native") is not None
    missing = sorted(
        f"{page}: {dotted}"
        for page, dotted in shown
        if not _resolves(dotted) and (extension or not dotted.startswith("enginespec._native"))
    )
    assert not missing, "shown, but not importable:\n" + "\n".join(missing)
    assert not _resolves("enginespec.boundary.contained")  # a path the package had when it was flat
    assert _resolves("enginespec.health.check_health")
    example = (
        ">>> from enginespec.health import check_health, wait\nsee `enginespec.scan()`, /run/enginespec.sock"
    )
    expected = [
        "enginespec.health",
        "enginespec.scan",
        "enginespec.health.check_health",
        "enginespec.health.wait",
    ]
    assert _dotted(example) == expected
    assert not _resolves("enginespec.health.wait")
