"""The flat layout's import paths work for one release, each with a DeprecationWarning naming the
new path: the modules the docs showed (``enginespec.sockets``, ``enginespec.lifecycle.open_pidfd``)
and every name of every module the flat package had, checked in a fresh interpreter so that no
earlier import hides a missing one."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from enginespec._moved import MOVED

#: Paths the README and docs/ showed before the layout (as they were written there).
SHOWN_BEFORE = [
    "enginespec.boundary.contained",
    "enginespec.sockets",
    "enginespec.agentwire",
    "enginespec.disclosure",
    "enginespec.remote.watch_remote",
    "enginespec.lifecycle.open_pidfd",
    "enginespec.vitals.MAX_PIDFDS",
    "enginespec.processmodels",
    "enginespec.safewrite",
]

#: A sample of the flat modules' names (each old module once): the name and where it lives now.
NAMES = {
    ("sockets", "listeners"): "process.sockets",
    ("lifecycle", "RunningEngine"): "lifecycle.running",
    ("lifecycle", "open_pidfd"): "lifecycle.handle",
    ("lifecycle", "StopResult"): "lifecycle.stopping",
    ("gpus", "GpuReader"): "gpus.reader",
    ("scanning", "Scanner"): "scanning.scanner",
    ("definition", "EngineDefinition"): "definition.records",
    ("health", "MAX_ANSWER_BYTES"): "health.checks",
    ("modelfacts", "MemoryEstimate"): "definition.modelrecords",
    ("versions", "requested_specifier"): "definition.specifiers",
    ("engineprocess", "EngineProcess"): "process.record",
    ("status", "Health"): "healthrecord",
    ("version", "__version__"): "packageversion",
}
#: Names renamed as they moved: (old module, old name) -> where it lives now, and its new name.
RENAMED = {
    ("engineprocess", "make_engine_id"): ("process.record", "make_instance_id"),
    ("scanning", "unique_engine_ids"): ("scanning.scanner", "unique_instance_ids"),
}


def _in_a_fresh_interpreter(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("dotted", SHOWN_BEFORE)
def test_a_path_the_docs_showed_still_imports_with_a_warning(dotted: str) -> None:
    code = f"""
import importlib, json, warnings
parts = {dotted.split(".")!r}
caught = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for name in parts[end:]:
            found = getattr(found, name)
        break
print(json.dumps([str(w.message) for w in caught if w.category is DeprecationWarning]))
"""
    said = _in_a_fresh_interpreter(code)
    assert isinstance(said, list)
    assert said, f"{dotted}: no DeprecationWarning"
    assert all("the old path goes in the next release" in message for message in said)


@pytest.mark.parametrize(("old", "name"), sorted(NAMES))
def test_an_old_name_is_the_new_object(old: str, name: str) -> None:
    import importlib

    home = importlib.import_module(f"enginespec.{NAMES[old, name]}")
    with warnings.catch_warnings():  # importing the old module warns too (the first time)
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(f"enginespec.{old}")
    with pytest.warns(DeprecationWarning, match=rf"enginespec\.{NAMES[old, name]}\.{name}"):
        value = getattr(module, name)
    assert value is getattr(home, name)


@pytest.mark.parametrize(("old", "name"), sorted(RENAMED))
def test_an_old_name_renamed_as_it_moved_is_the_new_object(old: str, name: str) -> None:
    import importlib

    home, new = RENAMED[old, name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(f"enginespec.{old}")
    with pytest.warns(
        DeprecationWarning, match=rf"enginespec\.{old}\.{name} is enginespec\.{home}\.{new} now"
    ):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(f"enginespec.{home}"), new)


def test_a_name_no_old_module_had_is_an_attribute_error() -> None:
    import enginespec.lifecycle

    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        enginespec.lifecycle.no_such_name  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        __import__("enginespec.no_such_module")


def test_every_old_module_imports_in_a_fresh_interpreter() -> None:
    code = f"""
import importlib, json, warnings
warnings.simplefilter("ignore", DeprecationWarning)
print(json.dumps([type(importlib.import_module("enginespec." + old)).__name__ for old in {sorted(MOVED)!r}]))
"""
    kinds = _in_a_fresh_interpreter(code)
    assert isinstance(kinds, list)
    assert len(kinds) == len(MOVED)


def test_new_paths_warn_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        import enginespec.lifecycle.handle
        import enginespec.process.sockets

        assert enginespec.process.sockets.listeners is not None
        assert enginespec.lifecycle.handle.open_pidfd is not None
