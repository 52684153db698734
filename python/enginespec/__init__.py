"""enginespec: everything a program needs to know about local LLM inference engines.

``BACKEND`` is ``"native"`` when the Rust extension is in use and ``"python"`` on the pure-Python
fallback (forced with ``ENGINESPEC_BACKEND=python``); both give the same results.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The backend is chosen at import (an unusable ENGINESPEC_BACKEND fails here, not later).
from enginespec._backend import BACKEND
from enginespec.version import __version__

if TYPE_CHECKING:
    from enginespec.argv import Invocation, detect_engine, parse_argv, redact_argv
    from enginespec.commands import Command
    from enginespec.config import Config
    from enginespec.containers import Container, PublishedPort
    from enginespec.definition import (
        ExtraPort,
        FamilyDefault,
        Flags,
        HealthRule,
        Launch,
        LoadMetrics,
        Package,
        Serving,
        SourceBuild,
    )
    from enginespec.engineprocess import EngineProcess
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
        ExporterError,
        FileWriteError,
        HelpError,
        InstallCancelled,
        InstallError,
        InstallOptionsError,
        InstallTimeout,
        InvalidInputError,
        LaunchFailed,
        NotReady,
        RecipeFileError,
        RecipeValidationError,
        RestartRefused,
        UnknownEngineError,
    )
    from enginespec.failures import (
        ArgvHint,
        Failure,
        FailureFigures,
        FailureKind,
        FailurePattern,
        Failures,
        Memory,
    )
    from enginespec.feeds import FeedFormat, FeedWriter
    from enginespec.gpus import GpuDevice, GpuProcess, GpuUse
    from enginespec.installing import InstallOptions, InstallResult, ProgressEvent
    from enginespec.lifecycle import (
        ContainerStop,
        LogSource,
        RunningEngine,
        Signalled,
        StopResult,
        Supervision,
        adopt,
        classify_failure,
        launch,
    )
    from enginespec.load import EngineLoad, check_load, check_load_all, check_load_all_async, check_load_async
    from enginespec.logbook import LogLine
    from enginespec.probing import BinaryProbeResult, EngineHelp, RuntimeInfo
    from enginespec.recipe import DockerRuntime, NativeRuntime, Recipe
    from enginespec.remote import HostReport, RemoteEngine, fetch_remote, fetch_remote_async
    from enginespec.scanning import Scanner, ScanStats, gpu_ledger, scan, with_gpus
    from enginespec.signature import Evidence, LaunchForm, Signature
    from enginespec.spec import EngineSpec
    from enginespec.status import Health, HealthState
    from enginespec.vitals import EngineMonitor, Vitals, WorkerExit
    from enginespec.watching import (
        Changed,
        EngineIdentity,
        HealthChanged,
        Recovered,
        Started,
        Stopped,
        Watch,
        WatchEvent,
        WatchOptions,
        WorkerLost,
        event_json,
        event_schema,
        parse_event,
    )

#: Where each public name lives: imported on first use, so that ``import enginespec`` (and the
#: ``enginespec`` command's start) costs only what is used.
_LAZY = {
    "Invocation": "enginespec.argv",
    "detect_engine": "enginespec.argv",
    "parse_argv": "enginespec.argv",
    "redact_argv": "enginespec.argv",
    "Command": "enginespec.commands",
    "Config": "enginespec.config",
    "Container": "enginespec.containers",
    "PublishedPort": "enginespec.containers",
    "ExtraPort": "enginespec.definition",
    "FamilyDefault": "enginespec.definition",
    "Flags": "enginespec.definition",
    "HealthRule": "enginespec.definition",
    "Launch": "enginespec.definition",
    "LoadMetrics": "enginespec.definition",
    "Package": "enginespec.definition",
    "Serving": "enginespec.definition",
    "SourceBuild": "enginespec.definition",
    "BUILTIN_ENGINE_SPECS": "enginespec.engines",
    "all_engine_specs": "enginespec.engines",
    "all_signatures": "enginespec.engines",
    "engine_ids": "enginespec.engines",
    "get_engine_spec": "enginespec.engines",
    "CommandError": "enginespec.errors",
    "EngineExited": "enginespec.errors",
    "EngineSpecError": "enginespec.errors",
    "ExporterError": "enginespec.errors",
    "FileWriteError": "enginespec.errors",
    "HelpError": "enginespec.errors",
    "InstallCancelled": "enginespec.errors",
    "InstallError": "enginespec.errors",
    "InstallOptionsError": "enginespec.errors",
    "InstallTimeout": "enginespec.errors",
    "InvalidInputError": "enginespec.errors",
    "NotReady": "enginespec.errors",
    "RecipeFileError": "enginespec.errors",
    "RecipeValidationError": "enginespec.errors",
    "UnknownEngineError": "enginespec.errors",
    "ArgvHint": "enginespec.failures",
    "Failure": "enginespec.failures",
    "FailureFigures": "enginespec.failures",
    "FailureKind": "enginespec.failures",
    "FailurePattern": "enginespec.failures",
    "Failures": "enginespec.failures",
    "Memory": "enginespec.failures",
    "GpuDevice": "enginespec.gpus",
    "GpuProcess": "enginespec.gpus",
    "GpuUse": "enginespec.gpus",
    "InstallOptions": "enginespec.installing",
    "InstallResult": "enginespec.installing",
    "ProgressEvent": "enginespec.installing",
    "LaunchFailed": "enginespec.errors",
    "LogSource": "enginespec.lifecycle",
    "ContainerStop": "enginespec.lifecycle",
    "RestartRefused": "enginespec.errors",
    "RunningEngine": "enginespec.lifecycle",
    "Signalled": "enginespec.lifecycle",
    "StopResult": "enginespec.lifecycle",
    "Supervision": "enginespec.lifecycle",
    "adopt": "enginespec.lifecycle",
    "classify_failure": "enginespec.lifecycle",
    "launch": "enginespec.lifecycle",
    "EngineLoad": "enginespec.load",
    "check_load": "enginespec.load",
    "check_load_all": "enginespec.load",
    "check_load_all_async": "enginespec.load",
    "check_load_async": "enginespec.load",
    "LogLine": "enginespec.logbook",
    "BinaryProbeResult": "enginespec.probing",
    "EngineHelp": "enginespec.probing",
    "RuntimeInfo": "enginespec.probing",
    "DockerRuntime": "enginespec.recipe",
    "NativeRuntime": "enginespec.recipe",
    "Recipe": "enginespec.recipe",
    "EngineProcess": "enginespec.engineprocess",
    "ScanStats": "enginespec.scanning",
    "gpu_ledger": "enginespec.scanning",
    "scan": "enginespec.scanning",
    "with_gpus": "enginespec.scanning",
    "Evidence": "enginespec.signature",
    "LaunchForm": "enginespec.signature",
    "Signature": "enginespec.signature",
    "EngineSpec": "enginespec.spec",
    "Health": "enginespec.status",
    "HealthState": "enginespec.status",
    "EngineMonitor": "enginespec.vitals",
    "Vitals": "enginespec.vitals",
    "WorkerExit": "enginespec.vitals",
    "FeedFormat": "enginespec.feeds",
    "FeedWriter": "enginespec.feeds",
    "HostReport": "enginespec.remote",
    "RemoteEngine": "enginespec.remote",
    "fetch_remote": "enginespec.remote",
    "fetch_remote_async": "enginespec.remote",
    "Changed": "enginespec.watching",
    "EngineIdentity": "enginespec.watching",
    "HealthChanged": "enginespec.watching",
    "Recovered": "enginespec.watching",
    "Scanner": "enginespec.scanning",
    "Started": "enginespec.watching",
    "Stopped": "enginespec.watching",
    "Watch": "enginespec.watching",
    "WatchOptions": "enginespec.watching",
    "WatchEvent": "enginespec.watching",
    "WorkerLost": "enginespec.watching",
    "event_json": "enginespec.watching",
    "event_schema": "enginespec.watching",
    "parse_event": "enginespec.watching",
    "__version__": "enginespec.version",
}


def __getattr__(name: str) -> Any:
    # ALL_ENGINE_SPECS includes plugins, which are loaded on first use rather than at import.
    if name == "ALL_ENGINE_SPECS":
        return importlib.import_module("enginespec.engines").all_engine_specs()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'enginespec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ALL_ENGINE_SPECS",
    "BACKEND",
    "BUILTIN_ENGINE_SPECS",
    "ArgvHint",
    "BinaryProbeResult",
    "Changed",
    "Command",
    "CommandError",
    "Config",
    "Container",
    "ContainerStop",
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
    "ExporterError",
    "ExtraPort",
    "Failure",
    "FailureFigures",
    "FailureKind",
    "FailurePattern",
    "Failures",
    "FamilyDefault",
    "FeedFormat",
    "FeedWriter",
    "FileWriteError",
    "Flags",
    "GpuDevice",
    "GpuProcess",
    "GpuUse",
    "Health",
    "HealthChanged",
    "HealthRule",
    "HealthState",
    "HelpError",
    "HostReport",
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
    "LoadMetrics",
    "LogLine",
    "LogSource",
    "Memory",
    "NativeRuntime",
    "NotReady",
    "Package",
    "ProgressEvent",
    "PublishedPort",
    "Recipe",
    "RecipeFileError",
    "RecipeValidationError",
    "Recovered",
    "RemoteEngine",
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
    "Vitals",
    "Watch",
    "WatchEvent",
    "WatchOptions",
    "WorkerExit",
    "WorkerLost",
    "__version__",
    "adopt",
    "all_engine_specs",
    "all_signatures",
    "check_load",
    "check_load_all",
    "check_load_all_async",
    "check_load_async",
    "classify_failure",
    "detect_engine",
    "engine_ids",
    "event_json",
    "event_schema",
    "fetch_remote",
    "fetch_remote_async",
    "get_engine_spec",
    "gpu_ledger",
    "launch",
    "parse_argv",
    "parse_event",
    "redact_argv",
    "scan",
    "with_gpus",
]
