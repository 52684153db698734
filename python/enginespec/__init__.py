"""enginespec: everything a program needs to know about local LLM inference engines.

``BACKEND`` is ``"native"`` when the Rust extension is in use and ``"python"`` on the pure-Python
fallback (forced with ``ENGINESPEC_BACKEND=python``); both give the same results.
"""

from __future__ import annotations

from typing import Any

from enginespec._backend import BACKEND
from enginespec.argv import Invocation, detect_engine, parse_argv, redact_argv
from enginespec.commands import Command
from enginespec.config import Config
from enginespec.containers import Container, PublishedPort
from enginespec.definition import FamilyDefault, Flags, Launch, LoadMetrics, Package, Serving, SourceBuild
from enginespec.engines import (
    BUILTIN_ENGINE_SPECS,
    all_engine_specs,
    all_signatures,
    engine_ids,
    get_engine_spec,
)
from enginespec.errors import (
    CommandError,
    EngineExited,
    EngineSpecError,
    HelpError,
    InstallCancelled,
    InstallError,
    InstallOptionsError,
    InstallTimeout,
    InvalidInputError,
    NotReady,
    RecipeFileError,
    UnknownEngineError,
)
from enginespec.installing import InstallOptions, InstallResult, ProgressEvent
from enginespec.load import EngineLoad, check_load, check_load_all, check_load_all_async, check_load_async
from enginespec.probing import BinaryProbeResult, EngineHelp, RuntimeInfo
from enginespec.recipe import DockerRuntime, NativeRuntime, Recipe
from enginespec.scanning import EngineProcess, ScanStats, scan
from enginespec.signature import Evidence, LaunchForm, Signature
from enginespec.spec import EngineSpec
from enginespec.status import Health, HealthState
from enginespec.version import __version__
from enginespec.vitals import EngineMonitor, Vitals, WorkerExit
from enginespec.watching import (
    Changed,
    EngineIdentity,
    HealthChanged,
    Recovered,
    Scanner,
    Started,
    Stopped,
    Watch,
    WatchEvent,
    WorkerLost,
    event_json,
    event_schema,
    parse_event,
)


def __getattr__(name: str) -> Any:
    # ALL_ENGINE_SPECS includes plugins, which are loaded on first use rather than at import.
    if name == "ALL_ENGINE_SPECS":
        return all_engine_specs()
    raise AttributeError(f"module 'enginespec' has no attribute {name!r}")


__all__ = [
    "ALL_ENGINE_SPECS",
    "BACKEND",
    "BUILTIN_ENGINE_SPECS",
    "BinaryProbeResult",
    "Changed",
    "Command",
    "CommandError",
    "Config",
    "Container",
    "DockerRuntime",
    "EngineExited",
    "EngineHelp",
    "EngineIdentity",
    "EngineLoad",
    "EngineMonitor",
    "EngineProcess",
    "EngineSpec",
    "EngineSpecError",
    "Evidence",
    "FamilyDefault",
    "Flags",
    "Health",
    "HealthChanged",
    "HealthState",
    "HelpError",
    "InstallCancelled",
    "InstallError",
    "InstallOptions",
    "InstallOptionsError",
    "InstallResult",
    "InstallTimeout",
    "InvalidInputError",
    "Invocation",
    "Launch",
    "LaunchForm",
    "LoadMetrics",
    "NativeRuntime",
    "NotReady",
    "Package",
    "ProgressEvent",
    "PublishedPort",
    "Recipe",
    "RecipeFileError",
    "Recovered",
    "RuntimeInfo",
    "ScanStats",
    "Scanner",
    "Serving",
    "Signature",
    "SourceBuild",
    "Started",
    "Stopped",
    "UnknownEngineError",
    "Vitals",
    "Watch",
    "WatchEvent",
    "WorkerExit",
    "WorkerLost",
    "__version__",
    "all_engine_specs",
    "all_signatures",
    "check_load",
    "check_load_all",
    "check_load_all_async",
    "check_load_async",
    "detect_engine",
    "engine_ids",
    "event_json",
    "event_schema",
    "get_engine_spec",
    "parse_argv",
    "parse_event",
    "redact_argv",
    "scan",
]
