"""One engine process, pinned by its identity (pid and start ticks): whether it still runs, how it
ended, waiting for it and signalling it.

A process enginespec started is its unreaped child (its pid cannot be handed out again before it is
reaped); an adopted one is held through a pidfd opened and checked against its start time. Either
way a pid the kernel handed to another process since is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal as signals
import subprocess
import time

from enginespec._host.root import HOST_ROOT

#: Seconds a stop waits for SIGKILL to take effect (and for the killed child to be reaped) before
#: it reports what is left.
KILL_WAIT = 5.0


def alive(pid: int, ticks: int) -> bool:
    """Whether the process of this host with this identity (pid, start ticks) still runs (a
    zombie does not): a handle's process is this kernel's, held or signalled from here."""
    found = HOST_ROOT.stat(pid)
    return found is not None and found.start_ticks == ticks and found.state not in ("Z", "X")


def open_pidfd(pid: int, ticks: int) -> int | None:
    """A pidfd of the process with this identity, or ``None`` when that process is gone (its pid
    may now be another process's). The start is checked after the pidfd is opened, so the pidfd
    is the checked process's for good. ``-1``: this kernel has no pidfds."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return -1 if alive(pid, ticks) else None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    if not alive(pid, ticks):
        os.close(fd)
        return None
    return fd


def send(pidfd: int, pid: int, sig: int) -> bool:
    """Sends ``sig`` through the pidfd (``-1``: by pid, no pidfds here); False when it is gone."""
    try:
        if pidfd >= 0:
            signals.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True


def _child_exit(pid: int) -> tuple[int | None, int | None] | None:
    """(exit code, signal) of an exited child, without reaping it; ``None`` while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return (None, None)
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return (info.si_status, None)
    return (None, info.si_status)


class ProcessHandle:
    """The engine's main process: ``popen`` when enginespec started it (our child, reaped at
    stop), else an adopted process known by ``pid`` and ``ticks`` (its start) and held through
    ``pidfd`` (``-1``: none, this kernel has no pidfds). Before any start, pid 0."""

    def __init__(
        self,
        pid: int = 0,
        ticks: int = 0,
        pidfd: int = -1,
        *,
        start_time: float = 0.0,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.ticks = ticks
        self.pidfd = pidfd
        self.start_time = start_time
        self.popen = popen

    def exit_status(self) -> tuple[int | None, int | None] | None:
        """(exit code, signal) once the process ended, ``None`` while it runs."""
        if self.popen is not None:
            if self.popen.returncode is not None:
                code = self.popen.returncode
                return (code, None) if code >= 0 else (None, -code)
            return _child_exit(self.pid)
        if self.pidfd >= 0:
            # adopted: the pidfd turns readable when the process ends (no status: not our child)
            ready, _w, _x = select.select([self.pidfd], [], [], 0)
            return (None, None) if ready else None
        return None if alive(self.pid, self.ticks) else (None, None)

    def wait(self, timeout: float | None = None) -> tuple[int | None, int | None] | None:
        """Waits up to ``timeout`` seconds (``None``: for ever) for the process to end; its (exit
        code, signal), or ``None`` when it still runs. The process is not reaped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.exit_status()
            if status is not None:
                return status
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            self.sleep(min(left, 1.0))

    def sleep(self, seconds: float) -> None:
        """Sleeps up to ``seconds``; returns early when the process ends (its pidfd is readable)."""
        if seconds <= 0:
            return
        if self.pidfd >= 0:
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            poller.poll(seconds * 1000)
        else:
            time.sleep(min(seconds, 0.05))

    def reap(self) -> None:
        """Reaps the process when it is our child (waiting up to :data:`KILL_WAIT` seconds)."""
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=KILL_WAIT)

    def release(self) -> None:
        """Closes the pidfd (the process is no longer held)."""
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
