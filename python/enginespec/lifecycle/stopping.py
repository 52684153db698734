"""Ending an engine's process tree: SIGTERM to its process group and to each descendant outside
it, ``grace`` seconds, then up to three rounds of SIGKILL; the main process is reaped. Every
process is signalled through a pidfd checked against its start time."""

from __future__ import annotations

import contextlib
import os
import signal as signals
import time
from collections.abc import Mapping
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from enginespec.lifecycle.containerstop import ContainerStop
from enginespec.lifecycle.handle import KILL_WAIT, open_pidfd, send
from enginespec.lifecycle.processtree import ProcessTree, in_group


class Signalled(BaseModel):
    """One signal a stop sent: to the process group ``pgid`` or to the process ``pid``."""

    model_config = ConfigDict(frozen=True)

    target: Literal["group", "process"]
    pid: int
    signal: str


class StopResult(BaseModel):
    """What a stop did and found: the signals sent, the processes that had to be killed, the
    engine's exit, and the scan at the end (``leftover``: pids of the tree still alive;
    ``port_holders``: pids still listening on the port, ``None`` when no port is known);
    ``container``: the stop through the container's runtime, for an engine in a container."""

    model_config = ConfigDict(frozen=True)

    signals: tuple[Signalled, ...]
    killed: tuple[int, ...]
    exit_code: int | None
    signal: int | None
    leftover: tuple[int, ...]
    port: int | None
    port_holders: tuple[int, ...] | None
    container: ContainerStop | None = None


class TreeEnd(NamedTuple):
    """What :func:`end_tree` did and found: the signals sent, the pids killed, the main process's
    (exit code, signal) and the pids of the tree still alive after it."""

    signals: tuple[Signalled, ...]
    killed: tuple[int, ...]
    status: tuple[int | None, int | None]
    leftover: tuple[int, ...]


def wait_ended(tree: ProcessTree, seconds: float) -> None:
    """Waits up to ``seconds`` for the engine and every member of its tree to end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (tree.process.exit_status() is None or tree.members()):
        tree.process.sleep(0.05)
        time.sleep(0.01)


def end_tree(tree: ProcessTree, grace: float) -> TreeEnd:
    """SIGTERM to the tree, up to ``grace`` seconds for it to end, then SIGKILL to what is left
    (three rounds at most, each waiting up to :data:`KILL_WAIT`); the main process is reaped."""
    leader = tree.process
    sent: list[Signalled] = []
    killed: list[int] = []
    members = tree.members(marked=True)
    leader_alive = leader.exit_status() is None
    # nothing left (the engine ended and took its tree along): this scan is the last one
    rounds = range(3) if members or leader_alive else range(0)
    if rounds:
        _signal_all(tree, signals.SIGTERM, members, leader_alive, sent)
    if rounds:
        wait_ended(tree, grace)
    for round_ in rounds:
        members = tree.members(marked=round_ == 0)
        leader_alive = leader.exit_status() is None
        if not members and not leader_alive:
            break
        killed += [leader.pid] if leader_alive else []
        killed += list(members)
        _signal_all(tree, signals.SIGKILL, members, leader_alive, sent)
        end = time.monotonic() + KILL_WAIT
        while time.monotonic() < end and (leader.exit_status() is None or tree.members()):
            time.sleep(0.02)
    status = leader.exit_status() or (None, None)
    leader.reap()
    leftover = tuple(sorted(tree.members(marked=True))) if rounds else ()
    return TreeEnd(tuple(sent), tuple(sorted(set(killed))), status, leftover)


def _signal_all(
    tree: ProcessTree, sig: int, members: Mapping[int, int], leader_alive: bool, sent: list[Signalled]
) -> None:
    leader = tree.process
    name = signals.Signals(sig).name
    group_signalled = False
    if leader.popen is not None and leader.popen.returncode is None:
        # the leader is our unreaped child: its pid, which is the group's id, is still ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader.pid, sig)
            group_signalled = True
            sent.append(Signalled(target="group", pid=leader.pid, signal=name))
    elif leader_alive and send(leader.pidfd, leader.pid, sig):
        sent.append(Signalled(target="process", pid=leader.pid, signal=name))
    for pid, start in members.items():
        if group_signalled and in_group(pid, leader.pid):
            continue
        pidfd = open_pidfd(pid, start)
        if pidfd is None:
            continue
        try:
            if send(pidfd, pid, sig):
                sent.append(Signalled(target="process", pid=pid, signal=name))
        finally:
            if pidfd >= 0:
                os.close(pidfd)
