"""Whether the process an :class:`~enginespec.EngineProcess` was made from still runs: pids are
reused, so a record's identity is its pid and start, read again from ``/proc`` of the host it
was scanned on (the record itself does no I/O)."""

from __future__ import annotations

import os
import sys

from enginespec._host.procfiles import PidStat
from enginespec.process.record import EngineProcess

#: How far a record's epoch start time may be from the process's when it has no start ticks.
_START_TOLERANCE = 0.05


def _scanned_stat(proc: EngineProcess) -> PidStat | None:
    """The ``stat`` of the process now at ``proc.pid`` when it is the process scanned. A
    scanner's record carries the very ticks it read, compared exactly; a record built elsewhere
    (from JSON) only its epoch start time, which must be within 50 ms of the process's or a
    whole second off (both are computed from the kernel's boot time, read at different
    moments)."""
    root = proc._root
    found = root.stat(proc.pid)
    if found is None:
        return None
    if proc._start_ticks is not None:
        return found if found.start_ticks == proc._start_ticks else None
    boot = root.boot_time()
    if boot is None:
        return None
    delta = abs(found.start_ticks / os.sysconf("SC_CLK_TCK") + boot - proc.start_time)
    return found if delta < _START_TOLERANCE or abs(delta - 1.0) < _START_TOLERANCE else None


def scanned_ticks(proc: EngineProcess) -> int | None:
    """The start ticks of the process now at ``proc.pid`` when it is the process scanned (a
    zombie too), else ``None`` (Linux)."""
    found = _scanned_stat(proc)
    return None if found is None else found.start_ticks


def process_alive(proc: EngineProcess) -> bool:
    """Whether the process with this identity (pid, start) still runs (zombies do not)."""
    if sys.platform.startswith("linux"):
        found = _scanned_stat(proc)
        return found is not None and found.state not in ("Z", "X")
    import psutil

    try:
        current = psutil.Process(proc.pid)
        return (
            abs(current.create_time() - proc.start_time) < _START_TOLERANCE
            and current.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False
