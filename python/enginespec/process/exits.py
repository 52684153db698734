"""How a process that is not our child ended: its exit status or the signal that ended it.

A zombie not yet reaped by its parent holds its wait status (``/proc/PID/stat``, Linux 3.5+).
Once reaped, the kernel keeps it for whoever holds a pidfd of the process (Linux 6.15+:
``PIDFD_GET_INFO`` with ``PIDFD_INFO_EXIT``, fs/pidfs.c ``pidfs_exit``), so a :class:`HeldProcess`
opens one while the process runs, within a budget of open files shared by this whole process.
Without a pidfd (the budget spent, an older kernel, a fixture host) only a zombie tells.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import threading
from typing import NamedTuple

from enginespec._host.root import HostRoot

#: ``PIDFD_GET_INFO``: ``_IOWR(0xFF, 11, struct pidfd_info)`` with the first published struct's
#: 64 bytes (Linux 6.13+; the kernel takes any size from that one up, include/uapi/linux/pidfd.h).
_PIDFD_GET_INFO = 0xC040FF0B
#: Asks for (and, in the answer's mask, says there is) the exit status (Linux 6.15+).
_PIDFD_INFO_EXIT = 1 << 3
_PIDFD_INFO_SIZE = 64
#: Where ``struct pidfd_info`` holds ``exit_code`` (a wait status, as waitpid gives).
_EXIT_CODE_AT = 60
#: The most pidfds this process keeps for processes it watches end (each is an open file; beyond
#: this many, processes are watched without one and only a zombie shows how they exited).
MAX_PIDFDS = 256


class PidfdBudget:
    """How many pidfds the holders of this process may still open."""

    def __init__(self, most: int) -> None:
        self.left = most
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True

    def give(self) -> None:
        with self._lock:
            self.left += 1


PIDFDS = PidfdBudget(MAX_PIDFDS)


class ExitStatus(NamedTuple):
    """How a process ended: ``status`` when it exited, ``signal`` when a signal ended it; both
    ``None`` when that could no longer be read."""

    status: int | None
    signal: int | None


def wait_status(raw: int) -> ExitStatus:
    """The :class:`ExitStatus` a wait status (as ``waitpid`` gives it) encodes."""
    if raw & 0x7F:
        return ExitStatus(None, raw & 0x7F)
    return ExitStatus((raw >> 8) & 0xFF, None)


def reaped_status(pidfd: int) -> ExitStatus | None:
    """How the reaped process of ``pidfd`` ended, from the kernel's pidfd info; ``None`` while it
    is not reaped or when this kernel does not keep exit statuses."""
    buffer = bytearray(_PIDFD_INFO_SIZE)
    struct.pack_into("=Q", buffer, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, buffer, True)
    except OSError:
        # ENOTTY or EINVAL: no PIDFD_GET_INFO here; ESRCH: reaped, and no exit info kept
        return None
    (mask,) = struct.unpack_from("=Q", buffer, 0)
    if not mask & _PIDFD_INFO_EXIT:
        return None
    (raw,) = struct.unpack_from("=i", buffer, _EXIT_CODE_AT)
    return wait_status(raw)


def exit_words(status: int | None, signum: int | None) -> str:
    """``exited (SIGKILL)``, ``exited 1``, or ``exited`` when how is not known."""
    if signum is not None:
        try:
            return f"exited ({signal.Signals(signum).name})"
        except ValueError:
            return f"exited (signal {signum})"
    return "exited" if status is None else f"exited {status}"


class HeldProcess:
    """One process (``pid`` started at ``started`` clock ticks on ``root``), held to learn how it
    ends: :meth:`hold` opens its pidfd, :meth:`ended` says how it ended once it has."""

    __slots__ = ("pid", "pidfd", "root", "started")

    def __init__(self, root: HostRoot, pid: int, started: int) -> None:
        self.root, self.pid, self.started = root, pid, started
        self.pidfd = -1

    def hold(self) -> None:
        """Opens a pidfd of this very process (its start checked after the open), when the
        budget allows and the kernel has them. (A fixture host's pids are not this kernel's: no
        pidfd names them.)"""
        opener = getattr(os, "pidfd_open", None)
        if self.pidfd >= 0 or opener is None or not self.root.is_host or not PIDFDS.take():
            return
        try:
            fd: int = opener(self.pid)
        except OSError:
            PIDFDS.give()
            return
        found = self.root.stat(self.pid)
        if found is None or found.start_ticks != self.started:
            # not this process any more: the pid was handed to another one
            os.close(fd)
            PIDFDS.give()
            return
        self.pidfd = fd

    def release(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
            PIDFDS.give()

    def __del__(self) -> None:
        # a holder dropped without release(): its pidfd closes with it
        with contextlib.suppress(Exception):
            self.release()

    def ended(self) -> ExitStatus | None:
        """How it ended (the pidfd released then), or ``None`` while it runs; a zombie has
        ended. Its parts are ``None`` when neither its zombie nor a pidfd tells."""
        now_at = self.root.stat(self.pid)
        mine = now_at is not None and now_at.start_ticks == self.started
        if now_at is not None and mine and now_at.state != "Z":
            return None
        found = ExitStatus(None, None)
        if now_at is not None and mine and now_at.state == "Z" and now_at.exit_code is not None:
            found = wait_status(now_at.exit_code)
        elif self.pidfd >= 0:
            # reaped by its parent: the kernel kept its status for the pidfd held
            found = reaped_status(self.pidfd) or found
        self.release()
        return found
