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
from enginespec.definition import FamilyDefault, Flags, Launch, Package, Serving, SourceBuild
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
    LaunchFailed,
    NotReady,
    RecipeFileError,
    RestartRefused,
    UnknownEngineError,
)
from enginespec.failures import Failure, FailureKind, FailurePattern, Failures
from enginespec.installing import InstallOptions, InstallResult, ProgressEvent
from enginespec.lifecycle import (
    LogSource,
    RunningEngine,
    Signalled,
    StopResult,
    Supervision,
    adopt,
    classify_failure,
    launch,
)
from enginespec.logbook import LogLine
from enginespec.probing import BinaryProbeResult, EngineHelp, RuntimeInfo
from enginespec.recipe import DockerRuntime, NativeRuntime, Recipe
from enginespec.scanning import EngineProcess, ScanStats, scan
from enginespec.signature import Evidence, LaunchForm, Signature
from enginespec.spec import EngineSpec
from enginespec.status import Health, HealthState
from enginespec.version import __version__
from enginespec.watching import (
    Changed,
    EngineIdentity,
    HealthChanged,
    Scanner,
    Started,
    Stopped,
    Watch,
    WatchEvent,
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
    "EngineProcess",
    "EngineSpec",
    "EngineSpecError",
    "Evidence",
    "Failure",
    "FailureKind",
    "FailurePattern",
    "Failures",
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
    "LaunchFailed",
    "LaunchForm",
    "LogLine",
    "LogSource",
    "NativeRuntime",
    "NotReady",
    "Package",
    "ProgressEvent",
    "PublishedPort",
    "Recipe",
    "RecipeFileError",
    "RestartRefused",
    "RunningEngine",
    "RuntimeInfo",
    "ScanStats",
    "Scanner",
    "Serving",
    "Signalled",
    "Signature",
    "SourceBuild",
    "Started",
    "StopResult",
    "Stopped",
    "Supervision",
    "UnknownEngineError",
    "Watch",
    "WatchEvent",
    "__version__",
    "adopt",
    "all_engine_specs",
    "all_signatures",
    "classify_failure",
    "detect_engine",
    "engine_ids",
    "event_json",
    "event_schema",
    "get_engine_spec",
    "launch",
    "parse_argv",
    "parse_event",
    "redact_argv",
    "scan",
]
