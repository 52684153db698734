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
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from enginespec._pymatcher import Matcher, RawInvocation, basename
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


def _list_pids() -> list[tuple[int, int]]:
    """(pid, inode of /proc/PID) pairs; the inode changes when a pid is handed to a new process."""
    if not _LINUX:
        return [(pid, 0) for pid in psutil.pids()]
    with os.scandir("/proc") as entries:
        return [(int(e.name), e.inode()) for e in entries if e.name.isdigit()]


def _read_int(path: str) -> int | None:
    try:
        with open(path) as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None


def _read_cursor() -> tuple[int, int] | None:
    """(last allocated pid, forks since boot), as the Rust scanner reads them."""
    last_pid = _read_int("/proc/sys/kernel/ns_last_pid")
    try:
        with open("/proc/stat") as file:
            forks = next(int(line.split()[1]) for line in file if line.startswith("processes "))
    except (OSError, ValueError, StopIteration, IndexError):
        return None
    return None if last_pid is None else (last_pid, forks)


def _reuse_window(
    old: tuple[int, int] | None, new: tuple[int, int] | None, pid_max: int
) -> Callable[[int], bool]:
    """Which pids may have been handed out again since the previous scan (``Reuse`` in scan.rs)."""
    if old is None or new is None or new[1] - old[1] >= pid_max - 301:
        return lambda pid: True
    if new[1] == old[1]:
        return lambda pid: False
    after, upto = old[0], new[0]
    if after <= upto:
        return lambda pid: after < pid <= upto
    return lambda pid: pid > after or pid <= upto


@dataclass
class _Engine:
    create_time: float
    ppid: int
    argv: list[str]
    exe: str | None
    parent_argv: list[str]
    #: (descendants, listen ports, monotonic time read), refreshed as in ``collect`` in scan.rs.
    tree: tuple[list[int], list[int], float] | None = None


@dataclass
class _Other:
    create_time: float
    #: argv of a process watched for an exec, and the monotonic deadline (None: while it lives).
    watch: tuple[list[str], float | None] | None


class Scanner:
    def __init__(
        self,
        signatures_json: str,
        wrappers: list[str],
        young_seconds: float,
        refresh_seconds: float,
        listen_ports: bool,
    ) -> None:
        import json

        self._matcher = Matcher(signatures_json)
        self._fold = [Signature.model_validate(doc).fold_workers for doc in json.loads(signatures_json)]
        self._wrappers = frozenset(wrappers)
        self._young = young_seconds
        self._refresh = refresh_seconds
        self._engine_appeared = False
        self._listen_ports = listen_ports
        self._known: dict[int, _Engine | _Other | None] = {}
        self._first = True
        self._cursor: tuple[int, int] | None = None
        self._inodes: dict[int, int] = {}
        self._counts: dict[str, int] = {}
        self._pid_max = _read_int("/proc/sys/kernel/pid_max") or 4_194_304
        self._stats = (0, 0, 0, 0, 0, False, 0)

    def stats(self) -> tuple[int, int, int, int, int, bool, int]:
        return self._stats

    def _is_wrapper(self, argv: list[str]) -> bool:
        """A wrapper running a command, not an interactive or login shell (as ``is_wrapper``)."""
        return (
            bool(argv)
            and not argv[0].startswith("-")
            and basename(argv[0]) in self._wrappers
            and any(a == "-c" or not a.startswith("-") for a in argv[1:])
        )

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
            self._engine_appeared = True
            return _Engine(create_time, ppid, argv, _exe(proc), _parent_argv(ppid))
        if self._is_wrapper(argv):
            return _Other(create_time, (argv, None))
        # Empty argv: a kernel thread, a zombie, or a process caught inside execve.
        if young or not argv:
            return _Other(create_time, (argv, now + self._young))
        return _Other(create_time, None)

    def scan(self) -> list[RawProcess]:
        now = time.monotonic()
        self._engine_appeared = False
        self._counts = {"new": 0, "vanished": 0, "unreadable": 0, "reread": 0}
        pids = _list_pids()
        cursor = _read_cursor()
        in_window = _reuse_window(self._cursor, cursor, self._pid_max)
        known: dict[int, _Engine | _Other | None] = {}
        for pid, inode in pids:
            try:
                proc = psutil.Process(pid)
                create_time = proc.create_time()
                if pid not in self._known:
                    self._counts["new"] += 1
                    known[pid] = self._classify(proc, create_time, not self._first, now)
                else:
                    maybe_reused = in_window(pid) or self._inodes.get(pid) != inode
                    known[pid] = self._revisit(proc, create_time, self._known[pid], maybe_reused, now)
            except (_Denied, psutil.AccessDenied):
                self._counts["unreadable"] += 1
                known[pid] = None
            except (_Gone, psutil.Error):
                self._counts["vanished"] += 1
        self._counts["vanished"] += sum(1 for pid in self._known if pid not in known)
        self._known = known
        self._inodes = dict(pids)
        self._first = False
        self._cursor = cursor
        c = self._counts
        self._stats = (len(pids), c["new"], c["vanished"], c["unreadable"], c["reread"], False, len(known))
        return self._collect(now)

    def _revisit(
        self,
        proc: psutil.Process,
        create_time: float,
        previous: _Engine | _Other | None,
        maybe_reused: bool,
        now: float,
    ) -> _Engine | _Other | None:
        """A known process, as ``Scanner::revisit`` in scan.rs."""
        if isinstance(previous, _Engine):
            if previous.create_time != create_time:
                self._counts["new"] += 1
                return self._classify(proc, create_time, True, now)
            # Same start time yet maybe another process (same clock tick): compare argv.
            if maybe_reused:
                self._counts["reread"] += 1
                current = _read_argv(proc.pid)
                if current != previous.argv:
                    self._counts["new"] += 1
                    return self._classify_argv(proc, create_time, current, True, now)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return _Other(create_time, None)
            ppid = proc.ppid()
            if ppid != previous.ppid:
                previous.ppid, previous.parent_argv = ppid, _parent_argv(ppid)
            return previous
        if maybe_reused or previous is None or previous.create_time != create_time:
            if previous is None and not maybe_reused:
                self._counts["unreadable"] += 1
                return None
            self._counts["reread"] += 1
            return self._classify(proc, create_time, True, now)
        if previous.watch is None:
            return previous
        argv, deadline = previous.watch
        if deadline is not None and now >= deadline:
            return _Other(create_time, None)
        self._counts["reread"] += 1
        current = _read_argv(proc.pid)
        if current == argv:
            return previous
        # It exec'd: classify the new program, watching it for the rest of its window.
        classified = self._classify_argv(proc, create_time, current, deadline is not None, now)
        if isinstance(classified, _Other) and classified.watch and classified.watch[1] is not None:
            classified.watch = (classified.watch[0], deadline)
        return classified

    def _collect(self, now: float) -> list[RawProcess]:
        out: list[RawProcess] = []
        for pid, entry in sorted(self._known.items()):
            if not isinstance(entry, _Engine):
                continue
            parsed = self._matcher.parse(entry.argv)
            if parsed is None:
                continue
            if self._engine_appeared or entry.tree is None or now - entry.tree[2] >= self._refresh:
                descendants: list[int] = []
                if self._fold[parsed[0]]:
                    try:
                        descendants = sorted(c.pid for c in psutil.Process(pid).children(recursive=True))
                    except psutil.Error:
                        descendants = []
                ports = _listen_ports([pid, *descendants]) if self._listen_ports else []
                entry.tree = (descendants, ports, now)
            else:
                alive = [d for d in entry.tree[0] if d in self._known]
                entry.tree = (alive, entry.tree[1], entry.tree[2])
            descendants, ports, _read = entry.tree
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
