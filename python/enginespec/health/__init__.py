"""Whether engines answer and what they report: ``checks`` (health and readiness over HTTP),
``reaching`` (where a check is sent and who answers there), ``load`` (what each engine reports of
its work) and ``vitals`` (a process's own counters beside them).

``enginespec.health`` keeps the names of the module it was (``check_health``, ``check_all``,
``wait_ready`` and the rest), loaded on first use: a scan that imports ``load`` does not load
httpx."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enginespec.health.checks import (
        broken,
        check_all,
        check_all_async,
        check_health,
        check_health_async,
        in_turn,
        kept,
        late_verdict,
        needs_no_request,
        not_checked_in_time,
        request_timeout,
        wait_ready,
        wait_ready_async,
    )

__all__ = [
    "broken",
    "check_all",
    "check_all_async",
    "check_health",
    "check_health_async",
    "in_turn",
    "kept",
    "late_verdict",
    "needs_no_request",
    "not_checked_in_time",
    "request_timeout",
    "wait_ready",
    "wait_ready_async",
]


def __getattr__(name: str) -> Any:
    """The names of ``enginespec.health.checks``, loaded on first use."""
    if name in __all__:
        return getattr(importlib.import_module("enginespec.health.checks"), name)
    from enginespec._moved import forwarded  # the flat module's other names, deprecated

    return forwarded("health", name)
