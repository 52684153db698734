"""The processes of one engine start besides its main process: its descendants, remembered by
identity (pid and start ticks) as they are seen, and those that carry the start's marker in their
environment (a descendant that left the process group and was re-parented is still found). They
are this host's processes (the engine's, launched or adopted here), read through
:data:`~enginespec._host.root.HOST_ROOT`."""

from __future__ import annotations

import os
from collections.abc import Mapping

import psutil

from enginespec._host.root import HOST_ROOT
from enginespec.lifecycle.handle import ProcessHandle, alive

#: The variable every launched process and its descendants carry: how a descendant that left the
#: process group and was re-parented is still found at stop.
RUN_ID_VARIABLE = "ENGINESPEC_RUN_ID"


def in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _marked(run_id: str, born_after: int) -> list[int]:
    """Processes whose environment carries this run's marker, born after the engine started."""
    needle = f"{RUN_ID_VARIABLE}={run_id}".encode()
    found = []
    for pid in psutil.pids():
        # the start time first: the environments of the (many) older processes are not read
        start = HOST_ROOT.start_ticks(pid)
        if start is None or start < born_after:
            continue
        try:
            environ = HOST_ROOT.read(pid, "environ", 1 << 20)
        except OSError:
            continue
        if needle in environ.split(b"\0") and HOST_ROOT.start_ticks(pid) == start:
            found.append(pid)
    return found


class ProcessTree:
    """The descendants of ``process`` (the engine's main process), by identity: ``known`` maps
    each pid seen to its start ticks. ``run_id``: the marker its start put in the environment
    (``""``: none, an adopted engine)."""

    def __init__(
        self, process: ProcessHandle, run_id: str = "", known: Mapping[int, int] | None = None
    ) -> None:
        self.process = process
        self.run_id = run_id
        self.known: dict[int, int] = dict(known or {})

    def descendants(self) -> list[int]:
        """The engine's descendants now, remembered by identity (a child that leaves the group and
        is re-parented is still signalled at stop)."""
        leader = self.process
        found = _descendants(leader.pid)
        if leader.popen is not None:
            found += [pid for pid in psutil.pids() if in_group(pid, leader.pid)]
        for pid in found:
            if pid != leader.pid and pid not in self.known:
                start = HOST_ROOT.start_ticks(pid)
                if start is not None and start >= leader.ticks:
                    self.known[pid] = start
        return [pid for pid in self.known if pid != leader.pid]

    def members(self, *, marked: bool = False) -> dict[int, int]:
        """The live processes of the tree; with ``marked``, also every process that carries this
        start's marker (a descendant that left the group and was re-parented)."""
        self.descendants()
        if marked and self.run_id:
            for pid in _marked(self.run_id, self.process.ticks):
                if pid != self.process.pid and pid not in self.known:
                    start = HOST_ROOT.start_ticks(pid)
                    if start is not None:
                        self.known[pid] = start
        return {pid: start for pid, start in self.known.items() if alive(pid, start)}
