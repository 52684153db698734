"""Pure-Python twin of the Rust scanner (``rust/scan.rs``), on psutil.

Same results, not the same cost: identity is checked through psutil's ``create_time`` for every
known process instead of the kernel's pid cursor. The classification rules are the Rust ones:
a process is read once while it lives, except engines (identity and liveness re-checked), exec
wrappers and processes born since the previous scan (watched for an ``exec``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import psutil

from enginespec._pymatcher import Matcher, RawInvocation
from enginespec.signature import Signature

#: (pid, start time, ppid, argv, facts, exe, descendants, parent argv, listen ports).
RawProcess = tuple[int, float, int, list[str], RawInvocation, "str | None", list[int], list[str], list[int]]

_LINUX = sys.platform.startswith("linux")


def split_cmdline(data: bytes) -> list[str]:
    """NUL separated, one trailing NUL dropped, empty -> [] (as ``split_cmdline`` in scan.rs)."""
    if not data:
        return []
    if data.endswith(b"\0"):
        data = data[:-1]
    return [os.fsdecode(part) for part in data.split(b"\0")]


def _basename(path: str) -> str:
    return path[max(path.rfind("/"), path.rfind("\\")) + 1 :]


class _Gone(Exception):
    pass


class _Denied(Exception):
    pass


def _read_argv(pid: int) -> list[str]:
    try:
        if _LINUX:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                return split_cmdline(file.read())
        return list(psutil.Process(pid).cmdline())
    except (psutil.AccessDenied, PermissionError):
        raise _Denied from None
    except (psutil.Error, OSError):
        raise _Gone from None


@dataclass
class _Engine:
    create_time: float
    ppid: int
    argv: list[str]
    exe: str | None
    parent_argv: list[str]


@dataclass
class _Other:
    create_time: float
    #: argv of a process watched for an exec, and the monotonic deadline (None: while it lives).
    watch: tuple[list[str], float | None] | None


class Scanner:
    def __init__(
        self, signatures_json: str, wrappers: list[str], young_seconds: float, listen_ports: bool
    ) -> None:
        import json

        self._matcher = Matcher(signatures_json)
        self._fold = [Signature.model_validate(doc).fold_workers for doc in json.loads(signatures_json)]
        self._wrappers = frozenset(wrappers)
        self._young = young_seconds
        self._listen_ports = listen_ports
        self._known: dict[int, _Engine | _Other | None] = {}
        self._first = True
        self._stats = (0, 0, 0, 0, 0, False, 0)

    def stats(self) -> tuple[int, int, int, int, int, bool, int]:
        return self._stats

    def _is_wrapper(self, argv: list[str]) -> bool:
        return bool(argv) and _basename(argv[0]).removeprefix("-") in self._wrappers

    def _classify(
        self, proc: psutil.Process, create_time: float, young: bool, now: float
    ) -> _Engine | _Other:
        argv = _read_argv(proc.pid)
        return self._classify_argv(proc, create_time, argv, young, now)

    def _classify_argv(
        self, proc: psutil.Process, create_time: float, argv: list[str], young: bool, now: float
    ) -> _Engine | _Other:
        if self._matcher.parse(argv) is not None:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    return _Other(create_time, None)
                ppid = proc.ppid()
            except psutil.Error:
                raise _Gone from None
            return _Engine(create_time, ppid, argv, _exe(proc), _parent_argv(ppid))
        if self._is_wrapper(argv):
            return _Other(create_time, (argv, None))
        # Empty argv: a kernel thread, a zombie, or a process caught inside execve.
        if young or not argv:
            return _Other(create_time, (argv, now + self._young))
        return _Other(create_time, None)

    def scan(self) -> list[RawProcess]:
        now = time.monotonic()
        new = vanished = unreadable = reread = 0
        pids = psutil.pids()
        known: dict[int, _Engine | _Other | None] = {}
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                create_time = proc.create_time()
            except psutil.AccessDenied:
                unreadable += 1
                known[pid] = None
                continue
            except psutil.Error:
                vanished += 1
                continue
            seen_before = pid in self._known
            previous = self._known.get(pid)
            try:
                if not seen_before or (previous is not None and previous.create_time != create_time):
                    new += 1
                    known[pid] = self._classify(proc, create_time, not self._first, now)
                elif previous is None:
                    unreadable += 1
                    known[pid] = None
                elif isinstance(previous, _Engine):
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        known[pid] = _Other(create_time, None)
                        continue
                    ppid = proc.ppid()
                    if ppid != previous.ppid:
                        previous.ppid, previous.parent_argv = ppid, _parent_argv(ppid)
                    known[pid] = previous
                elif previous.watch is not None:
                    argv, deadline = previous.watch
                    if deadline is not None and now >= deadline:
                        known[pid] = _Other(create_time, None)
                        continue
                    reread += 1
                    current = _read_argv(pid)
                    if current == argv:
                        known[pid] = previous
                    else:
                        classified = self._classify_argv(
                            proc, create_time, current, deadline is not None, now
                        )
                        if (
                            isinstance(classified, _Other)
                            and classified.watch
                            and classified.watch[1] is not None
                        ):
                            classified.watch = (classified.watch[0], deadline)
                        known[pid] = classified
                else:
                    known[pid] = previous
            except _Denied:
                unreadable += 1
                known[pid] = None
            except (_Gone, psutil.NoSuchProcess):
                vanished += 1
            except psutil.AccessDenied:
                unreadable += 1
                known[pid] = None
        vanished += sum(1 for pid in self._known if pid not in known)
        self._known = known
        self._first = False
        self._stats = (len(pids), new, vanished, unreadable, reread, False, len(known))
        return self._collect()

    def _collect(self) -> list[RawProcess]:
        out: list[RawProcess] = []
        for pid, entry in sorted(self._known.items()):
            if not isinstance(entry, _Engine):
                continue
            parsed = self._matcher.parse(entry.argv)
            if parsed is None:
                continue
            descendants: list[int] = []
            if self._fold[parsed[0]]:
                try:
                    descendants = sorted(child.pid for child in psutil.Process(pid).children(recursive=True))
                except psutil.Error:
                    descendants = []
            ports = _listen_ports([pid, *descendants]) if self._listen_ports else []
            out.append(
                (
                    pid,
                    entry.create_time,
                    entry.ppid,
                    entry.argv,
                    parsed,
                    entry.exe,
                    descendants,
                    entry.parent_argv,
                    ports,
                )
            )
        return out


def _exe(proc: psutil.Process) -> str | None:
    try:
        # readlink as the Rust side does (psutil strips " (deleted)").
        return os.readlink(f"/proc/{proc.pid}/exe") if _LINUX else proc.exe() or None
    except (OSError, psutil.Error):
        return None


def _parent_argv(ppid: int) -> list[str]:
    try:
        return _read_argv(ppid)
    except (_Gone, _Denied):
        return []


def _listen_ports(pids: list[int]) -> list[int]:
    ports: set[int] = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        ports.update(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN and c.laddr)
    return sorted(ports)
