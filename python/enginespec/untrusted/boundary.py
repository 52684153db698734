"""The error boundary around each engine: what is computed for one engine (its record, settings,
model facts, health, load, GPUs, its row or document, its feed entry) is done through
:func:`contained`, so an exception (a hostile process's input that a parser did not foresee, or
a bug) becomes that engine's ``problems`` entry or ``unknown`` verdict with the reason, and the
other engines, and the loop that serves them all, carry on.

Every failure is counted by stage (:func:`failures`; the exporter's
``enginespec_engine_failures_total``) and logged (logger ``enginespec``) once per distinct cause:
the stage, the exception's type and where it was raised, so a failure that recurs every refresh
is said once, not every second. One engine's failure is logged at ``INFO`` (its reason is shown
with that engine already, and another user's process must not write on root's terminal); a
loop's (a refresh, a watch's step: ``loud``) is a ``WARNING``, on stderr unless the program
configures logging.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

from enginespec.display import literal

_Result = TypeVar("_Result")

#: The most characters of an exception's message kept in a reason (it may quote a process's input).
MESSAGE_CHARS = 100
#: The most distinct causes remembered as logged (beyond that, each is logged again: never silent).
MAX_CAUSES = 1024

_log = logging.getLogger("enginespec")
_lock = threading.Lock()
_counts: dict[str, int] = {}
_logged: set[tuple[str, str, str]] = set()


def _origin(err: BaseException) -> str:
    """Where ``err`` was raised: the innermost frame's function, file and line."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.name} ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})"


def failed(stage: str, err: BaseException, *, loud: bool = False) -> str:
    """Counts a failure of ``stage`` (``"health"``, ``"model facts"``...), logs its cause the
    first time it is seen (a warning when ``loud``), and returns the reason to show for it."""
    message = str(err)
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + "..."
    where = _origin(err)
    reason = f"{stage} failed: {type(err).__name__} in {where}" + (f": {literal(message)}" if message else "")
    cause = (stage, type(err).__name__, where)
    with _lock:
        _counts[stage] = _counts.get(stage, 0) + 1
        first = cause not in _logged
        if first and len(_logged) < MAX_CAUSES:
            _logged.add(cause)
    if first:
        _log.log(
            logging.WARNING if loud else logging.INFO,
            "enginespec: %s (said once for this cause; each failure is counted)",
            reason,
        )
    return reason


def contained(stage: str, action: Callable[[], _Result], fallback: Callable[[str], _Result]) -> _Result:
    """``action()``, or when it raises, ``fallback(reason)`` (the failure counted and logged,
    see :func:`failed`). An ``Exception`` only: an interrupt or ``SystemExit`` still ends the
    program."""
    try:
        return action()
    except Exception as err:  # the boundary: one engine's failure stays its own
        return fallback(failed(stage, err))


async def contained_async(stage: str, job: Awaitable[_Result], fallback: Callable[[str], _Result]) -> _Result:
    """:func:`contained` of an awaitable (a cancellation is not a failure: it goes through)."""
    try:
        return await job
    except Exception as err:  # the boundary: one engine's failure stays its own
        return fallback(failed(stage, err))


def failures() -> dict[str, int]:
    """Failures contained so far in this process, by stage."""
    with _lock:
        return dict(_counts)
