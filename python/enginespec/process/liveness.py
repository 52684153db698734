"""Whether the process an :class:`~enginespec.EngineProcess` was made from still runs: pids are
reused, so a record's identity is its pid and start, read again from ``/proc`` (the record itself
does no I/O)."""

from __future__ import annotations

import os
import sys

from enginespec._host.procfiles import process_state
from enginespec.process.record import EngineProcess

#: How far a record's epoch start time may be from the process's when it has no start ticks.
_START_TOLERANCE = 0.05


def _scanned_state(proc: EngineProcess) -> tuple[str, int] | None:
    """(state, start ticks) of the process now at ``proc.pid`` when it is the process scanned.
    A scanner's record carries the very ticks it read, compared exactly; a record built
    elsewhere (from JSON) only its epoch start time, which must be within 50 ms of the
    process's or a whole second off (both are computed from the kernel's boot time, read at
    different moments)."""
    state = process_state(proc.pid)
    if state is None:
        return None
    if proc._start_ticks is not None:
        return state if state[1] == proc._start_ticks else None
    import psutil  # the fallback's library: not imported by a start on the native backend

    delta = abs(state[1] / os.sysconf("SC_CLK_TCK") + psutil.boot_time() - proc.start_time)
    return state if delta < _START_TOLERANCE or abs(delta - 1.0) < _START_TOLERANCE else None


def scanned_ticks(proc: EngineProcess) -> int | None:
    """The start ticks of the process now at ``proc.pid`` when it is the process scanned (a
    zombie too), else ``None`` (Linux)."""
    state = _scanned_state(proc)
    return None if state is None else state[1]


def process_alive(proc: EngineProcess) -> bool:
    """Whether the process with this identity (pid, start) still runs (zombies do not)."""
    if sys.platform.startswith("linux"):
        state = _scanned_state(proc)
        return state is not None and state[0] not in ("Z", "X")
    import psutil

    try:
        current = psutil.Process(proc.pid)
        return (
            abs(current.create_time() - proc.start_time) < _START_TOLERANCE
            and current.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False
