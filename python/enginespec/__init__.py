"""enginespec: everything a program needs to know about local LLM inference engines.

``BACKEND`` is ``"native"`` when the Rust extension is in use and ``"python"`` on the pure-Python
fallback (forced with ``ENGINESPEC_BACKEND=python``); both give the same results.
"""

from __future__ import annotations

from typing import Any

from enginespec._backend import BACKEND
from enginespec.argv import Invocation, detect_engine, parse_argv, redact_argv
from enginespec.engines import BUILTIN_ENGINE_SPECS, all_engine_specs, all_signatures, get_engine_spec
from enginespec.recipe import Config, DockerRuntime, NativeRuntime, Recipe, RecipeFileError
from enginespec.scanning import EngineProcess, Scanner, ScanStats, scan
from enginespec.signature import LaunchForm, Signature
from enginespec.spec import Command, CommandError, EngineSpec, FamilyDefault

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # ALL_ENGINE_SPECS includes plugins, which are loaded on first use rather than at import.
    if name == "ALL_ENGINE_SPECS":
        return all_engine_specs()
    raise AttributeError(f"module 'enginespec' has no attribute {name!r}")


__all__ = [
    "ALL_ENGINE_SPECS",
    "BACKEND",
    "BUILTIN_ENGINE_SPECS",
    "Command",
    "CommandError",
    "Config",
    "DockerRuntime",
    "EngineProcess",
    "EngineSpec",
    "FamilyDefault",
    "Invocation",
    "LaunchForm",
    "NativeRuntime",
    "Recipe",
    "RecipeFileError",
    "ScanStats",
    "Scanner",
    "Signature",
    "__version__",
    "all_engine_specs",
    "all_signatures",
    "detect_engine",
    "get_engine_spec",
    "parse_argv",
    "redact_argv",
    "scan",
]
