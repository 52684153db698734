"""Launching, waiting for, stopping, restarting and adopting engines, and telling why one failed.

See ``docs/lifecycle.md``.
"""

from __future__ import annotations

from enginespec.definition import EngineDefinition
from enginespec.failures import Failure
from enginespec.registry import find_engine


def classify_failure(
    engine: str | EngineDefinition,
    log_text: str,
    exit_code: int | None = None,
    signal: int | None = None,
    *,
    oom_kill: bool = False,
) -> Failure:
    """Why an engine failed to start: its class, the log lines that show the cause (verbatim),
    the figures in them, a hint, and how the process ended. A pure function of its arguments,
    by the engine's failure vocabulary (``EngineSpec.failures``); ``oom_kill`` says the kernel's
    OOM killer killed a process of the engine's cgroup."""
    spec = find_engine(engine) if isinstance(engine, str) else engine
    return spec.classify_failure(log_text, exit_code, signal, oom_kill=oom_kill)
