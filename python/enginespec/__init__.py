"""enginespec: everything a program needs to know about local LLM inference engines.

``BACKEND`` is ``"native"`` when the Rust extension is in use and ``"python"`` on the pure-Python
fallback (forced with ``ENGINESPEC_BACKEND=python``); both give the same results.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

# The backend is chosen at import (an unusable ENGINESPEC_BACKEND fails here, not later).
from enginespec._host.backend import BACKEND


class _FlatLayoutPaths:
    """The flat layout's import paths (``enginespec.sockets``) keep working for one release, with
    a warning: last on :data:`sys.meta_path`, this finder is asked only for names under the
    package that no file answers, and imports :mod:`enginespec._moved` then, not with the package."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(f"{__name__}."):
            return None
        from enginespec._moved import OldPaths

        return OldPaths().find_spec(fullname, path, target)


sys.meta_path.append(_FlatLayoutPaths)

if TYPE_CHECKING:
    import importlib.machinery
    import types
    from collections.abc import Sequence

    from enginespec.config import Config
    from enginespec.definition.records import (
        ExtraPort,
        FamilyDefault,
        Flags,
        HealthRule,
        IdentityProbe,
        Launch,
        LoadMetrics,
        Package,
        Serving,
        SourceBuild,
    )
    from enginespec.definition.servedrecords import ModelList
    from enginespec.definition.signature import Evidence, LaunchForm, Signature
    from enginespec.engines import (
        BUILTIN_ENGINE_SPECS,
        all_engine_specs,
        all_signatures,
        engine_ids,
        get_engine_spec,
    )
    from enginespec.errors import (
        CommandError,
        ControlError,
        ControlFailed,
        ControlRefused,
        ControlUnsupported,
        EngineExited,
        EngineSpecError,
        ExporterError,
        FileWriteError,
        FitRefused,
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
    from enginespec.fleet.feeds import FeedFormat, FeedWriter
    from enginespec.fleet.remote import HostReport, RemoteEngine, fetch_remote, fetch_remote_async
    from enginespec.gpus.energy import CpuEnergy, CpuEnergyReader, CpuPackage, cpu_packages
    from enginespec.gpus.reader import GpuDevice, GpuProcess, GpuUse
    from enginespec.health.latency import Latency, LatencySummary
    from enginespec.health.load import (
        EngineLoad,
        check_load,
        check_load_all,
        check_load_all_async,
        check_load_async,
    )
    from enginespec.health.servedmodels import (
        ServedModel,
        ServedModels,
        served_models,
        served_models_all,
        served_models_all_async,
        served_models_async,
    )
    from enginespec.health.vitals import EngineMonitor, Vitals, WorkerExit
    from enginespec.healthrecord import Health, HealthState
    from enginespec.lifecycle.commands import Command
    from enginespec.lifecycle.containerstop import ContainerStop
    from enginespec.lifecycle.ensuring import Ensured, ensure
    from enginespec.lifecycle.installing import InstallOptions, InstallResult, ProgressEvent
    from enginespec.lifecycle.logbook import LogLine
    from enginespec.lifecycle.logsources import LogSource
    from enginespec.lifecycle.modelcontrol import (
        load_model,
        load_model_async,
        sleep,
        sleep_async,
        unload_model,
        unload_model_async,
        wake,
        wake_async,
    )
    from enginespec.lifecycle.probing import BinaryProbeResult, EngineHelp, RuntimeInfo
    from enginespec.lifecycle.readiness import classify_failure
    from enginespec.lifecycle.recipe import DockerRuntime, NativeRuntime, Recipe
    from enginespec.lifecycle.running import RunningEngine, adopt, launch
    from enginespec.lifecycle.stopping import Signalled, StopResult
    from enginespec.lifecycle.supervising import Supervision
    from enginespec.packageversion import __version__
    from enginespec.process.argv import Invocation, detect_engine, parse_argv, redact_argv
    from enginespec.process.containers import Container, PublishedPort
    from enginespec.process.record import EngineProcess
    from enginespec.scanning.scanner import Scanner, ScanStats, gpu_ledger, scan, with_gpus
    from enginespec.scanning.watch import (
        Changed,
        EngineIdentity,
        HealthChanged,
        ModelChanged,
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
    from enginespec.spec import EngineSpec

#: Where each public name lives: imported on first use, so that ``import enginespec`` (and the
#: ``enginespec`` command's start) costs only what is used.
_LAZY = {
    "Invocation": "enginespec.process.argv",
    "detect_engine": "enginespec.process.argv",
    "parse_argv": "enginespec.process.argv",
    "redact_argv": "enginespec.process.argv",
    "Command": "enginespec.lifecycle.commands",
    "Config": "enginespec.config",
    "Container": "enginespec.process.containers",
    "PublishedPort": "enginespec.process.containers",
    "ExtraPort": "enginespec.definition.records",
    "FamilyDefault": "enginespec.definition.records",
    "Flags": "enginespec.definition.records",
    "HealthRule": "enginespec.definition.records",
    "IdentityProbe": "enginespec.definition.records",
    "Launch": "enginespec.definition.records",
    "LoadMetrics": "enginespec.definition.records",
    "ModelList": "enginespec.definition.servedrecords",
    "Package": "enginespec.definition.records",
    "Serving": "enginespec.definition.records",
    "SourceBuild": "enginespec.definition.records",
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
    "CpuEnergy": "enginespec.gpus.energy",
    "CpuEnergyReader": "enginespec.gpus.energy",
    "CpuPackage": "enginespec.gpus.energy",
    "cpu_packages": "enginespec.gpus.energy",
    "GpuDevice": "enginespec.gpus.reader",
    "GpuProcess": "enginespec.gpus.reader",
    "GpuUse": "enginespec.gpus.reader",
    "InstallOptions": "enginespec.lifecycle.installing",
    "InstallResult": "enginespec.lifecycle.installing",
    "ProgressEvent": "enginespec.lifecycle.installing",
    "LaunchFailed": "enginespec.errors",
    "LogSource": "enginespec.lifecycle.logsources",
    "ContainerStop": "enginespec.lifecycle.containerstop",
    "RestartRefused": "enginespec.errors",
    "ControlError": "enginespec.errors",
    "ControlFailed": "enginespec.errors",
    "ControlRefused": "enginespec.errors",
    "ControlUnsupported": "enginespec.errors",
    "FitRefused": "enginespec.errors",
    "Ensured": "enginespec.lifecycle.ensuring",
    "ensure": "enginespec.lifecycle.ensuring",
    "load_model": "enginespec.lifecycle.modelcontrol",
    "load_model_async": "enginespec.lifecycle.modelcontrol",
    "unload_model": "enginespec.lifecycle.modelcontrol",
    "unload_model_async": "enginespec.lifecycle.modelcontrol",
    "sleep": "enginespec.lifecycle.modelcontrol",
    "sleep_async": "enginespec.lifecycle.modelcontrol",
    "wake": "enginespec.lifecycle.modelcontrol",
    "wake_async": "enginespec.lifecycle.modelcontrol",
    "RunningEngine": "enginespec.lifecycle.running",
    "Signalled": "enginespec.lifecycle.stopping",
    "StopResult": "enginespec.lifecycle.stopping",
    "Supervision": "enginespec.lifecycle.supervising",
    "adopt": "enginespec.lifecycle.running",
    "classify_failure": "enginespec.lifecycle.readiness",
    "launch": "enginespec.lifecycle.running",
    "EngineLoad": "enginespec.health.load",
    "Latency": "enginespec.health.latency",
    "LatencySummary": "enginespec.health.latency",
    "check_load": "enginespec.health.load",
    "check_load_all": "enginespec.health.load",
    "check_load_all_async": "enginespec.health.load",
    "check_load_async": "enginespec.health.load",
    "ServedModel": "enginespec.health.servedmodels",
    "ServedModels": "enginespec.health.servedmodels",
    "served_models": "enginespec.health.servedmodels",
    "served_models_all": "enginespec.health.servedmodels",
    "served_models_all_async": "enginespec.health.servedmodels",
    "served_models_async": "enginespec.health.servedmodels",
    "LogLine": "enginespec.lifecycle.logbook",
    "BinaryProbeResult": "enginespec.lifecycle.probing",
    "EngineHelp": "enginespec.lifecycle.probing",
    "RuntimeInfo": "enginespec.lifecycle.probing",
    "DockerRuntime": "enginespec.lifecycle.recipe",
    "NativeRuntime": "enginespec.lifecycle.recipe",
    "Recipe": "enginespec.lifecycle.recipe",
    "EngineProcess": "enginespec.process.record",
    "ScanStats": "enginespec.scanning.scanner",
    "gpu_ledger": "enginespec.scanning.scanner",
    "scan": "enginespec.scanning.scanner",
    "with_gpus": "enginespec.scanning.scanner",
    "Evidence": "enginespec.definition.signature",
    "LaunchForm": "enginespec.definition.signature",
    "Signature": "enginespec.definition.signature",
    "EngineSpec": "enginespec.spec",
    "Health": "enginespec.healthrecord",
    "HealthState": "enginespec.healthrecord",
    "EngineMonitor": "enginespec.health.vitals",
    "Vitals": "enginespec.health.vitals",
    "WorkerExit": "enginespec.health.vitals",
    "FeedFormat": "enginespec.fleet.feeds",
    "FeedWriter": "enginespec.fleet.feeds",
    "HostReport": "enginespec.fleet.remote",
    "RemoteEngine": "enginespec.fleet.remote",
    "fetch_remote": "enginespec.fleet.remote",
    "fetch_remote_async": "enginespec.fleet.remote",
    "Changed": "enginespec.scanning.watch",
    "EngineIdentity": "enginespec.scanning.watch",
    "HealthChanged": "enginespec.scanning.watch",
    "Recovered": "enginespec.scanning.watch",
    "Scanner": "enginespec.scanning.scanner",
    "Started": "enginespec.scanning.watch",
    "Stopped": "enginespec.scanning.watch",
    "Watch": "enginespec.scanning.watch",
    "WatchOptions": "enginespec.scanning.watch",
    "WatchEvent": "enginespec.scanning.watch",
    "WorkerLost": "enginespec.scanning.watch",
    "ModelChanged": "enginespec.scanning.watch",
    "event_json": "enginespec.scanning.watch",
    "event_schema": "enginespec.scanning.watch",
    "parse_event": "enginespec.scanning.watch",
    "__version__": "enginespec.packageversion",
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
    "ControlError",
    "ControlFailed",
    "ControlRefused",
    "ControlUnsupported",
    "CpuEnergy",
    "CpuEnergyReader",
    "CpuPackage",
    "DockerRuntime",
    "EngineExited",
    "EngineHelp",
    "EngineIdentity",
    "EngineLoad",
    "EngineMonitor",
    "EngineProcess",
    "EngineSpec",
    "EngineSpecError",
    "Ensured",
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
    "FitRefused",
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
    "IdentityProbe",
    "InstallCancelled",
    "InstallError",
    "InstallOptions",
    "InstallOptionsError",
    "InstallResult",
    "InstallTimeout",
    "InvalidInputError",
    "Invocation",
    "Latency",
    "LatencySummary",
    "Launch",
    "LaunchFailed",
    "LaunchForm",
    "LoadMetrics",
    "LogLine",
    "LogSource",
    "Memory",
    "ModelChanged",
    "ModelList",
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
    "ServedModel",
    "ServedModels",
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
    "cpu_packages",
    "detect_engine",
    "engine_ids",
    "ensure",
    "event_json",
    "event_schema",
    "fetch_remote",
    "fetch_remote_async",
    "get_engine_spec",
    "gpu_ledger",
    "launch",
    "load_model",
    "load_model_async",
    "parse_argv",
    "parse_event",
    "redact_argv",
    "scan",
    "served_models",
    "served_models_all",
    "served_models_all_async",
    "served_models_async",
    "sleep",
    "sleep_async",
    "unload_model",
    "unload_model_async",
    "wake",
    "wake_async",
    "with_gpus",
]
