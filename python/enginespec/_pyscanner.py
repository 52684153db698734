"""Pure-Python twin of the Rust scanner (``rust/scan.rs``): the same state machine, the same
results and the same counts.

On Linux it reads procfs as the Rust one does: the listing with each ``/proc/PID`` inode, the
kernel's pid cursor and fork counter (to bound pid reuse, and to skip the listing when nothing
forked), ``stat`` for identity (pid, start time) and liveness. Elsewhere psutil stands in for
procfs, without a cursor, so every listing re-checks every known process.

The cost model is scan.rs's: a process is read once while it lives, except engines (``stat`` and
both ends of ``cmdline`` on every scan), exec wrappers and processes born since the previous scan
(watched for an ``exec``), and pids the kernel may have handed out again.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple, TypeAlias

import psutil

from enginespec._common import (
    ARGV_CUT,
    MAX_ARGV_ARGS,
    MAX_ARGV_BYTES,
    RawInvocation,
    RawProcess,
    Woke,
    basename,
    tcp_listen,
)
from enginespec._procfiles import PROC
from enginespec._pymatcher import Matcher
from enginespec.signature import Signature

_LINUX = sys.platform.startswith("linux")

#: How much of each end of an engine's cmdline is compared on every scan (``CMDLINE_PEEK``).
CMDLINE_PEEK = 4096


def capped_argv(data: bytes) -> tuple[list[str], bool]:
    """The argv a scan examines (``capped_argv`` in procfs.rs): ``cmdline`` split on NUL (one
    trailing NUL dropped, empty -> []), only its first MAX_ARGV_ARGS arguments within
    MAX_ARGV_BYTES; and whether it was cut. The rest is not split or decoded."""
    if not data:
        return [], False
    if data.endswith(b"\0"):
        data = data[:-1]
    parts = data.split(b"\0", MAX_ARGV_ARGS)
    cut = len(parts) > MAX_ARGV_ARGS
    kept: list[str] = []
    size = 0
    for part in parts[:MAX_ARGV_ARGS]:
        size += len(part) + 1
        if size > MAX_ARGV_BYTES:
            return kept, True
        kept.append(os.fsdecode(part))
    return kept, cut


class _Gone(Exception):
    """The process exited while being read."""


class _Denied(Exception):
    """The process's file may not be read (another user's process, hidepid)."""


class _Stat(NamedTuple):
    """What the scanner needs from ``/proc/PID/stat`` (``ProcStat`` in procfs.rs)."""

    state: str
    ppid: int
    #: epoch seconds, computed as scan.rs and psutil do (start ticks / CLK_TCK + btime)
    start_time: float
    comm: bytes
    #: where argv lies in memory (arg_start, arg_end); None when unknown
    args: tuple[int, int] | None


def _is_dead(state: str) -> bool:
    """A zombie or dead process: whatever its argv says, it serves nothing."""
    return state in ("Z", "X")


def _read_int(path: str) -> int | None:
    try:
        with open(path) as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None


def _proc_stat_value(proc: str, key: bytes) -> int | None:
    """The value of the ``key`` line of ``/proc/stat`` (``btime``, ``processes``)."""
    try:
        with open(f"{proc}/stat", "rb") as file:
            for line in file:
                name, _, value = line.partition(b" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes from ``offset`` on, as far as the file goes."""
    parts = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return b"".join(parts)


class _Procfs:
    """Linux: every process file read where and as scan.rs reads it, below ``proc`` (``/proc``,
    or a fixture host's ``ROOT/proc``)."""

    def __init__(self, proc: str = PROC) -> None:
        self._proc = proc
        self.boot_time = float(_proc_stat_value(proc, b"btime") or 0)
        self._clock_ticks = float(os.sysconf("SC_CLK_TCK"))
        self.pid_max = _read_int(f"{proc}/sys/kernel/pid_max") or 4_194_304

    def list_pids(self) -> list[tuple[int, int]]:
        """(pid, inode of /proc/PID): the inode changes when a pid is handed to a new process."""
        try:
            with os.scandir(self._proc) as entries:
                return [(int(e.name), e.inode()) for e in entries if e.name.isdigit()]
        except OSError:
            return []

    def cursor(self) -> tuple[int, int] | None:
        """(last allocated pid, forks since boot)."""
        last_pid = _read_int(f"{self._proc}/sys/kernel/ns_last_pid")
        forks = _proc_stat_value(self._proc, b"processes")
        return None if last_pid is None or forks is None else (last_pid, forks)

    def stat(self, pid: int) -> _Stat | None:
        """``None`` when the process is gone or its stat cannot be read or parsed."""
        try:
            with open(f"{self._proc}/{pid}/stat", "rb") as file:
                data = file.read()
        except OSError:
            return None
        # The command name is chosen by the process and may hold spaces and parentheses.
        open_, close = data.find(b"("), data.rfind(b")")
        if open_ < 0 or close <= open_:
            return None
        fields = data[close + 1 :].split()
        try:
            state, ppid, start_ticks = chr(fields[0][0]), int(fields[1]), int(fields[19])
        except (IndexError, ValueError):
            return None
        try:
            args: tuple[int, int] | None = (int(fields[45]), int(fields[46]))
        except (IndexError, ValueError):
            args = None
        start_time = start_ticks / self._clock_ticks + self.boot_time
        return _Stat(state, ppid, start_time, data[open_ + 1 : close], args)

    def cmdline(self, pid: int) -> bytes:
        try:
            with open(f"{self._proc}/{pid}/cmdline", "rb") as file:
                return file.read()
        except PermissionError:
            raise _Denied from None
        except OSError:
            raise _Gone from None

    def ends_match(self, pid: int, known: bytes) -> bool:
        """Whether cmdline still holds ``known``, from its first and last ``CMDLINE_PEEK`` bytes
        and its length (``ends_match`` in scan.rs); any failure answers False."""
        try:
            fd = os.open(f"{self._proc}/{pid}/cmdline", os.O_RDONLY)
        except OSError:
            return False
        try:
            # At the end one byte more is asked for, so that a cmdline that grew does not match.
            if len(known) <= 2 * CMDLINE_PEEK:
                return _pread_all(fd, len(known) + 1, 0) == known
            tail_at = len(known) - CMDLINE_PEEK
            return (
                _pread_all(fd, CMDLINE_PEEK, 0) == known[:CMDLINE_PEEK]
                and _pread_all(fd, CMDLINE_PEEK + 1, tail_at) == known[tail_at:]
            )
        except OSError:
            return False
        finally:
            os.close(fd)

    def exe(self, pid: int) -> tuple[str | None, bool]:
        """The executable, and whether reading it was denied. readlink as scan.rs does (psutil
        strips " (deleted)")."""
        try:
            return os.readlink(f"{self._proc}/{pid}/exe"), False
        except PermissionError:
            return None, True
        except OSError:
            return None, False

    def children(self, pid: int) -> list[int]:
        """From /proc/PID/task/TID/children (zombies included)."""
        found: list[int] = []
        try:
            tasks = os.listdir(f"{self._proc}/{pid}/task")
        except OSError:
            return found
        for task in tasks:
            try:
                with open(f"{self._proc}/{pid}/task/{task}/children", "rb") as file:
                    tokens = file.read().split()
            except OSError:
                continue
            found.extend(int(t) for t in tokens if t.isdigit() and 0 < int(t) < 2**31)
        return found

    def exists(self, pid: int) -> bool:
        return os.path.exists(f"{self._proc}/{pid}")

    def listen_ports(
        self, pids: list[int], tables: dict[int, list[tuple[int, int]]] | None = None
    ) -> tuple[list[int], bool]:
        """TCP ports in LISTEN state held by ``pids`` (the engine first), sorted, and whether some
        fd directory, fd link or socket table could not be read for lack of permission.
        ``tables``: the (inode, port) listeners of each network namespace read so far in this
        scan (one read per namespace, not per engine: a socket table can take 10 ms to read)."""
        denied = False
        inodes: set[int] = set()
        for pid in pids:
            try:
                fds = os.listdir(f"{self._proc}/{pid}/fd")
            except PermissionError:
                denied = True
                continue
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"{self._proc}/{pid}/fd/{fd}")
                except PermissionError:
                    denied = True
                    continue
                except OSError:
                    continue
                if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit():
                    inodes.add(int(target[8:-1]))
        if not inodes:
            return [], denied
        try:
            netns: int | None = os.stat(f"{self._proc}/{pids[0]}/ns/net").st_ino
        except OSError:
            netns = None
        found = tables.get(netns) if tables is not None and netns is not None else None
        if found is None:
            found = []
            for table in ("tcp", "tcp6"):
                try:
                    with open(f"{self._proc}/{pids[0]}/net/{table}", "rb") as file:
                        data = file.read()
                except PermissionError:
                    denied = True
                    continue
                except OSError:
                    continue
                found.extend((inode, port) for inode, _address, port in tcp_listen(data))
            if tables is not None and netns is not None and not denied:
                tables[netns] = found
        return sorted({port for inode, port in found if inode in inodes}), denied


class _Psutil:
    """Elsewhere: psutil stands in for procfs, with no pid cursor, inode or argv place."""

    pid_max = 0
    boot_time: float | None = None

    def list_pids(self) -> list[tuple[int, int]]:
        return [(pid, 0) for pid in psutil.pids()]

    def cursor(self) -> tuple[int, int] | None:
        return None

    def stat(self, pid: int) -> _Stat | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                status, ppid, start_time, name = proc.status(), proc.ppid(), proc.create_time(), proc.name()
        except psutil.Error:
            return None
        state = {psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_DEAD: "X"}.get(status, "S")
        return _Stat(state, ppid, start_time, os.fsencode(name), None)

    def cmdline(self, pid: int) -> bytes:
        try:
            argv = psutil.Process(pid).cmdline()
        except psutil.ZombieProcess:
            return b""
        except psutil.AccessDenied:
            raise _Denied from None
        except psutil.Error:
            raise _Gone from None
        return b"".join(os.fsencode(arg) + b"\0" for arg in argv)

    def ends_match(self, pid: int, known: bytes) -> bool:
        # No bounded read here: the whole argv is compared.
        try:
            return self.cmdline(pid) == known
        except (_Gone, _Denied):
            return False

    def exe(self, pid: int) -> tuple[str | None, bool]:
        try:
            return psutil.Process(pid).exe() or None, False
        except psutil.AccessDenied:
            return None, True
        except psutil.Error:
            return None, False

    def children(self, pid: int) -> list[int]:
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []

    def exists(self, pid: int) -> bool:
        return psutil.pid_exists(pid)

    def listen_ports(
        self, pids: list[int], tables: dict[int, list[tuple[int, int]]] | None = None
    ) -> tuple[list[int], bool]:
        denied = False
        ports: set[int] = set()
        for pid in pids:
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except psutil.AccessDenied:
                denied = True
                continue
            except psutil.Error:
                continue
            ports.update(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN and c.laddr)
        return sorted(ports), denied


_Source: TypeAlias = "_Procfs | _Psutil"


def _descendants(source: _Source, pid: int) -> list[int]:
    """Every live descendant of ``pid``, sorted: zombies (exited, not yet reaped) serve nothing
    and have no children left, so each child's stat is read to leave them out."""
    seen: set[int] = set()
    queue = [pid]
    while queue:
        for child in source.children(queue.pop()):
            if child != pid and child not in seen:
                stat = source.stat(child)
                if stat is not None and not _is_dead(stat.state):
                    seen.add(child)
                    queue.append(child)
    return sorted(seen)


def _reuse(
    old: tuple[int, int] | None, new: tuple[int, int] | None, pid_max: int
) -> tuple[bool, Callable[[int], bool]]:
    """Whether every pid may have been handed out again since the previous listing, and which
    may have been (``Reuse`` in scan.rs), from the (last pid, forks) cursors."""
    if old is None or new is None:
        return True, lambda pid: True
    if new[1] == old[1]:
        return False, lambda pid: False
    if max(new[1] - old[1], 0) >= max(pid_max - 301, 0):
        return True, lambda pid: True
    after, upto = old[0], new[0]
    if after <= upto:
        return False, lambda pid: after < pid <= upto
    # the cursor wrapped around pid_max
    return False, lambda pid: pid > after or pid <= upto


class _Unreadable:
    """A process whose cmdline could not be read (``Class::Unreadable``)."""


_UNREADABLE: Final = _Unreadable()


@dataclass(eq=False)
class _Other:
    #: cmdline of a process watched for an exec, and the monotonic deadline (None: while it
    #: lives, for exec wrappers)
    watch: tuple[bytes, float | None] | None


#: A settled process, trusted without reads (``Class::Other { watch: None }``); the only
#: ``_Other`` without a watch, so it is told by identity.
_SETTLED: Final = _Other(None)


@dataclass(eq=False)
class _Engine:
    """An engine and what is reported for it (``EngineState`` in scan.rs). Fields are replaced,
    never changed in place: the tuple already returned holds them."""

    pid: int
    #: the cmdline the argv and facts were parsed from, to tell when the process rewrites it
    cmdline: bytes
    #: the stat last read: identity (start time), parent, and the signs of an argv rewrite
    stat: _Stat
    argv: list[str]
    facts: RawInvocation
    exe: str | None
    exe_denied: bool
    parent_argv: list[str]
    descendants: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    tree_denied: bool = False
    tree_read: float | None = None
    #: the tuple returned while nothing above changes; None once something did
    built: RawProcess | None = None

    def record(self) -> RawProcess:
        if self.built is None:
            s = self.stat
            self.built = RawProcess(
                self.pid,
                s.start_time,
                s.ppid,
                self.argv,
                self.facts,
                self.exe,
                self.descendants,
                self.parent_argv,
                self.ports,
            )
        return self.built


_Class: TypeAlias = "_Engine | _Other | _Unreadable"


@dataclass
class _Counts:
    new: int = 0
    vanished: int = 0
    unreadable: int = 0
    restricted: int = 0
    reread: int = 0


#: rust/scan.rs RECENT_PIDS: pids within this many of the cursor are the recently handed out ones.
RECENT_PIDS = 4096


def _near_cursor(pid: int, last: int, pid_max: int) -> bool:
    """Whether ``pid`` lies within RECENT_PIDS of the cursor ``last``, either side, cyclically."""
    span = max(pid_max, 1)
    return (last - pid) % span < RECENT_PIDS or (pid - last) % span < RECENT_PIDS


class ProcessScanner:
    """The incremental scanner (``ProcessScanner`` in backend.rs, over ``Scanner`` in scan.rs).
    Keep one per polling loop."""

    def __init__(
        self,
        signatures_json: str,
        wrappers: list[str],
        young_seconds: float,
        refresh_seconds: float,
        listen_ports: bool,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self._matcher = Matcher(signatures_json)
        self._fold = [Signature.model_validate(doc).fold_workers for doc in json.loads(signatures_json)]
        self._wrappers = frozenset(wrappers)
        self._young = young_seconds
        self._refresh = refresh_seconds
        self._listen_ports = listen_ports
        # ``root``: a fixture host (ROOT/proc laid out as the kernel's), read on any system
        self._source: _Source = (
            _Procfs(os.path.join(root or "/", "proc")) if _LINUX or root is not None else _Psutil()
        )
        #: pid -> (inode of /proc/PID at the last listing, class)
        self._known: dict[int, tuple[int, _Class]] = {}
        #: the kernel's cursor read after the last listing: bounds the pids reused since
        self._cursor: tuple[int, int] | None = None
        #: the fork count read just before the last listing: every process forked up to then
        #: was listed
        self._forks_listed: int | None = None
        #: number of listing scans so far
        self._generation = 0
        #: during the first listing, the time it began and the pid cursor then (see
        #: ``cold_uptime`` and ``near_cursor`` in scan.rs)
        self._cold: float | None = None
        self._cold_cursor: int | None = None
        self._counts = _Counts()
        #: whether this scan classified a process as an engine for the first time
        self._engine_appeared = False
        self._stats: tuple[int, int, int, int, int, int, bool, int] = (0, 0, 0, 0, 0, 0, False, 0)

    @property
    def boot_time(self) -> float | None:
        """The boot time every start time is computed from (``None`` with psutil)."""
        return self._source.boot_time

    def stats(self) -> tuple[int, int, int, int, int, int, bool, int]:
        """(scanned, new, vanished, unreadable, restricted, reread, full_recheck, known)."""
        return self._stats

    def subscribe_events(self, ack_timeout: float, full_rescan_seconds: float) -> str | None:
        """The kernel's process events need the native backend: this scanner always polls."""
        return "process events: the pure-Python backend polls"

    def wait(self, timeout: float) -> tuple[list[RawProcess], Woke]:
        """Sleeps ``timeout`` seconds, then scans (``ProcessScanner::wait`` when polling)."""
        time.sleep(timeout)
        return self.scan(), "polled"

    def _is_wrapper(self, argv: list[str]) -> bool:
        """A wrapper running a command, not an interactive or login shell (as ``is_wrapper``)."""
        return (
            bool(argv)
            and not argv[0].startswith("-")
            and basename(argv[0]) in self._wrappers
            and any(a == "-c" or not a.startswith("-") for a in argv[1:])
        )

    def scan(self) -> list[RawProcess]:
        """Every engine server now running, by pid (``Scanner::scan_at`` in scan.rs)."""
        now = time.monotonic()
        first = self._generation == 0
        self._counts = counts = _Counts()
        self._engine_appeared = False
        # No fork anywhere since the last listing began: no process can have appeared and no pid
        # can have been reused, so the listing is skipped.
        before = self._source.cursor()
        if before is not None and before[1] == self._forks_listed:
            scanned = len(self._known)
            self._quiet_scan(now)
            return self._finish(now, quiet=True, scanned=scanned, full_recheck=False)
        self._forks_listed = None if before is None else before[1]
        self._generation += 1
        self._cold = time.time() if first else None
        self._cold_cursor = before[0] if first and before is not None else None
        pids = self._source.list_pids()
        # Read after listing, so any pid reused before the listing falls inside the window.
        cursor = self._source.cursor()
        everything, may_reuse = _reuse(self._cursor, cursor, self._source.pid_max)
        old, known = self._known, {}
        listed = 0
        for pid, inode in pids:
            entry = old.get(pid)
            if entry is None:
                counts.new += 1
                cls = self._classify(pid, not first, now)
            else:
                listed += 1
                # Only a changed inode restarts the young watch (see `born_again` in scan.rs).
                born_again = entry[0] != inode
                maybe_reused = born_again or may_reuse(pid)
                # The common case on every poll: a settled process, trusted without any read.
                if not maybe_reused and entry[1] is _SETTLED:
                    known[pid] = entry
                    continue
                cls = self._revisit(pid, entry[1], maybe_reused, born_again, now)
            if cls is not None:
                known[pid] = (inode, cls)
        counts.vanished += len(old) - listed
        self._cold = None
        self._known = known
        self._cursor = cursor
        return self._finish(now, quiet=False, scanned=len(pids), full_recheck=not first and everything)

    def _quiet_scan(self, now: float) -> None:
        """A scan without listing: processes that vanished are dropped when next read; the
        others, which nothing can have replaced, stay as they are, and those whose argv could not
        be read are counted as in a listing scan."""
        for pid, (inode, cls) in list(self._known.items()):
            if cls is _SETTLED:
                continue
            if cls is _UNREADABLE:
                self._counts.unreadable += 1
                continue
            revisited = self._revisit(pid, cls, False, False, now)
            if revisited is None:
                del self._known[pid]
            else:
                self._known[pid] = (inode, revisited)

    def _finish(self, now: float, quiet: bool, scanned: int, full_recheck: bool) -> list[RawProcess]:
        found = self._collect(now, quiet)
        c = self._counts
        self._stats = (
            scanned,
            c.new,
            c.vanished,
            c.unreadable,
            c.restricted,
            c.reread,
            full_recheck,
            len(self._known),
        )
        return found

    def _read_cmdline(self, pid: int) -> bytes | _Unreadable | None:
        """A process's cmdline. A failure is counted, and gives what the process is then: gone
        (None) or unreadable."""
        try:
            return self._source.cmdline(pid)
        except _Denied:
            self._counts.unreadable += 1
            return _UNREADABLE
        except _Gone:
            self._counts.vanished += 1
            return None

    def _classify(self, pid: int, young: bool, now: float) -> _Class | None:
        """Reads and classifies a process; None when it vanished."""
        data = self._read_cmdline(pid)
        return self._classify_cmdline(pid, data, young, now) if isinstance(data, bytes) else data

    def _classify_cmdline(self, pid: int, data: bytes, young: bool, now: float) -> _Class | None:
        argv, cut = capped_argv(data)
        parsed = self._matcher.parse(argv)
        if parsed is not None:
            return self._engine_state(pid, data, [*argv, ARGV_CUT] if cut else argv, parsed)
        if self._is_wrapper(argv):
            return _Other((data, None))
        # Empty argv: a kernel thread, a zombie, or a process caught inside execve.
        if young or not argv or self._born_before_cold_scan(pid):
            return _Other((data, now + self._young))
        return _SETTLED

    def _born_before_cold_scan(self, pid: int) -> bool:
        """Whether the first listing is under way and the process started less than ``young``
        before it: caught between its fork and its exec, it may still become an engine."""
        if self._cold is None:
            return False
        if self._cold_cursor is not None and not _near_cursor(pid, self._cold_cursor, self._source.pid_max):
            return False
        stat = self._source.stat(pid)
        return stat is not None and self._cold - stat.start_time < self._young

    def _engine_state(self, pid: int, cmdline: bytes, argv: list[str], facts: RawInvocation) -> _Class | None:
        stat = self._source.stat(pid)
        if stat is None:
            self._counts.vanished += 1
            return None
        if _is_dead(stat.state):
            return _SETTLED
        self._engine_appeared = True
        exe, exe_denied = self._source.exe(pid)
        return _Engine(pid, cmdline, stat, argv, facts, exe, exe_denied, self._parent_argv(stat.ppid))

    def _parent_argv(self, ppid: int) -> list[str]:
        try:
            return capped_argv(self._source.cmdline(ppid))[0]
        except (_Gone, _Denied):
            return []

    def _revisit(
        self, pid: int, cls: _Class, maybe_reused: bool, born_again: bool, now: float
    ) -> _Class | None:
        """A known process, as ``Scanner::revisit`` in scan.rs."""
        if isinstance(cls, _Engine):
            return self._recheck_engine(pid, cls, maybe_reused, now)
        if maybe_reused:
            self._counts.reread += 1
            return self._classify(pid, born_again, now)
        if isinstance(cls, _Unreadable):
            self._counts.unreadable += 1
            return cls
        if cls.watch is None:
            return cls
        cmdline, until = cls.watch
        if until is not None and now >= until:
            return _SETTLED
        self._counts.reread += 1
        data = self._read_cmdline(pid)
        if not isinstance(data, bytes):
            return data
        if data == cmdline:
            return cls
        # It exec'd: classify the new program, watching it for the rest of its window.
        classified = self._classify_cmdline(pid, data, until is not None, now)
        watch = classified.watch if isinstance(classified, _Other) else None
        if watch is not None and watch[1] is not None:
            return _Other((watch[0], until))
        return classified

    def _recheck_engine(self, pid: int, engine: _Engine, maybe_reused: bool, now: float) -> _Class | None:
        """Same start time, alive, and the same argv (``Scanner::recheck_engine`` in scan.rs)."""
        stat = self._source.stat(pid)
        if stat is None:
            self._counts.vanished += 1
            return None
        if _is_dead(stat.state):
            return _SETTLED
        if stat.start_time != engine.stat.start_time:
            # Same pid, another process: classify it from scratch.
            self._counts.new += 1
            return self._classify(pid, True, now)
        if (
            maybe_reused
            or stat.comm != engine.stat.comm
            or stat.args != engine.stat.args
            or not self._source.ends_match(pid, engine.cmdline)
        ):
            self._counts.reread += 1
            data = self._read_cmdline(pid)
            if not isinstance(data, bytes):
                return data
            if data != engine.cmdline:
                if maybe_reused:
                    self._counts.new += 1
                return self._classify_cmdline(pid, data, True, now)
        if stat.ppid != engine.stat.ppid:
            engine.parent_argv = self._parent_argv(stat.ppid)
            engine.built = None
        engine.stat = stat
        return engine

    def _collect(self, now: float, quiet: bool) -> list[RawProcess]:
        """The engines' records, their trees brought up to date (``Scanner::collect``)."""
        engines = [cls for _inode, cls in self._known.values() if isinstance(cls, _Engine)]
        out: list[RawProcess] = []
        tables: dict[int, list[tuple[int, int]]] = {}
        for engine in sorted(engines, key=lambda e: e.pid):
            pid = engine.pid
            # The tree is re-read when a new engine appeared (a forked child keeping the server's
            # argv must be folded at once) and otherwise at most once per refresh period.
            if self._engine_appeared or engine.tree_read is None or now - engine.tree_read >= self._refresh:
                descendants = _descendants(self._source, pid) if self._fold[engine.facts.engine] else []
                ports: list[int] = []
                denied = False
                if self._listen_ports:
                    ports, denied = self._source.listen_ports([pid, *descendants], tables)
                engine.tree_read, engine.tree_denied = now, denied
                if descendants != engine.descendants or ports != engine.ports:
                    engine.descendants, engine.ports, engine.built = descendants, ports, None
            else:
                # Between refreshes, workers that exited are dropped at once.
                alive = [
                    d
                    for d in engine.descendants
                    if d in self._known and (not quiet or self._source.exists(d))
                ]
                if len(alive) != len(engine.descendants):
                    engine.descendants, engine.built = alive, None
            if engine.exe_denied or engine.tree_denied:
                self._counts.restricted += 1
            out.append(engine.record())
        return out
