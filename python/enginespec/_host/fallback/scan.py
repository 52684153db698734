"""Pure-Python twin of the Rust scanner (``rust/scan.rs``, and ``ProcessScanner`` of
``rust/backend.rs``): the same state machine, the same results and the same counts. Its reads are
``procread``'s (procread.rs), their parsers ``procfs``'s (procfs.rs), and off Linux
``scan_sysinfo``'s (scan_sysinfo.rs).

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
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, get_args

from enginespec._host.fallback.matcher import Matcher
from enginespec._host.fallback.procfs import capped_argv, environ_entries, is_dead
from enginespec._host.fallback.procread import Denied, Gone, ProcRoot, Stat
from enginespec._host.fallback.scan_sysinfo import PsutilSource
from enginespec._host.shapes import (
    ARGV_CUT,
    MAX_CGROUP_BYTES,
    MAX_ENVIRON_BYTES,
    Environ,
    Listening,
    RawInvocation,
    RawProcess,
    RawStats,
    ReadSet,
    Woke,
    basename,
)
from enginespec.definition.signature import Signature

_LINUX = sys.platform.startswith("linux")

_Source: TypeAlias = "ProcRoot | PsutilSource"


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
    stat: Stat
    argv: list[str]
    facts: RawInvocation
    exe: str | None
    exe_denied: bool
    parent_argv: list[str]
    environ: Environ | None
    cgroup: bytes | None
    netns: int | None
    in_checkout: bool | None
    descendants: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    devices: dict[int, list[tuple[int, int, int]]] | None = None
    tree_denied: bool = False
    tree_read: float | None = None
    #: the tuple returned while nothing above changes; None once something did
    built: RawProcess | None = None

    def record(self) -> RawProcess:
        if self.built is None:
            s = self.stat
            self.built = RawProcess(
                pid=self.pid,
                start_time=s.start_time,
                ppid=s.ppid,
                argv=self.argv,
                facts=self.facts,
                exe=self.exe,
                descendants=self.descendants,
                parent_argv=self.parent_argv,
                listen_ports=self.ports,
                environ=self.environ,
                cgroup=self.cgroup,
                netns=self.netns,
                in_checkout=self.in_checkout,
                devices=self.devices,
            )
        return self.built


_Class: TypeAlias = "_Engine | _Other | _Unreadable"
#: What one process event says of one process (``proc_events::Change``).
Change: TypeAlias = Literal["forked", "exec", "comm", "exited"]
_CHANGES: Final = frozenset(get_args(Change))


@dataclass
class _Counts:
    new: int = 0
    vanished: int = 0
    unreadable: int = 0
    restricted: int = 0
    reread: int = 0


#: rust/scan.rs RECENT_PIDS: pids within this many of the cursor are the recently handed out ones.
RECENT_PIDS = 4096


#: rust/scan.rs SETTLED_RUN: a first scan walks the pids near the cursor newest first and stops at
#: this many processes in a row that started before the young window.
SETTLED_RUN = 64


def _near_cursor(pid: int, last: int, pid_max: int) -> bool:
    """Whether ``pid`` lies within RECENT_PIDS of the cursor ``last``, either side, cyclically."""
    span = max(pid_max, 1)
    return (last - pid) % span < RECENT_PIDS or (pid - last) % span < RECENT_PIDS


class ProcessScanner:
    """The incremental scanner (``ProcessScanner`` in backend.rs, over ``Scanner`` in scan.rs).
    Keep one per polling loop.

    ``root``: read ``ROOT/proc`` instead of ``/proc`` (a fixture host laid out in the kernel's
    formats, on any system); its clock, which no file can give, is ``scan_at``'s."""

    def __init__(
        self,
        signatures_json: str,
        wrappers: list[str],
        young_seconds: float,
        refresh_seconds: float,
        listen_ports: bool,
        root: str | os.PathLike[str] | None = None,
        read_set: ReadSet | None = None,
    ) -> None:
        self._matcher = Matcher(signatures_json)
        self._fold = [Signature.model_validate(doc).fold_workers for doc in json.loads(signatures_json)]
        self._wrappers = frozenset(wrappers)
        self._young = young_seconds
        self._refresh = refresh_seconds
        self._listen_ports = listen_ports
        read_set = read_set or ReadSet([], cgroup=False, netns=False)
        #: per engine, the environment variables read (as the bytes ``environ`` holds)
        self._environ = [frozenset(os.fsencode(name) for name in names) for names in read_set.environ]
        self._read_set = read_set
        #: the origin of ``scan_at``'s clock: when the scanner was made
        self._origin = time.monotonic()
        # ``root``: a fixture host (ROOT/proc laid out as the kernel's), read on any system
        self._source: _Source = (
            ProcRoot(os.path.join(root or "/", "proc")) if _LINUX or root is not None else PsutilSource()
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
        #: during the first listing, seconds since boot when it began (the host's ``uptime``),
        #: and the processes it found started less than ``young`` before (None: the cursor could
        #: not be read, each stat is read to tell; see ``cold_uptime`` and ``recent_births`` in
        #: scan.rs)
        self._cold: float | None = None
        self._cold_births: set[int] | None = None
        self._counts = _Counts()
        #: whether this scan classified a process as an engine for the first time
        self._engine_appeared = False
        #: the caller reports every process change (``apply_events``): nothing is watched for an
        #: exec, and a new engine refreshes only the trees above it
        self._event_driven = False
        #: events were applied since the last scan, whose counts they started
        self._events_pending = False
        #: in event mode, the parents of the engines that appeared since the last scan
        self._appeared_parents: list[int] = []
        self._stats = RawStats(0, 0, 0, 0, 0, 0, False, 0)

    @property
    def boot_time(self) -> float | None:
        """The boot time every start time is computed from (``None`` with psutil)."""
        return self._source.boot_time

    def stats(self) -> RawStats:
        """What the last scan did: (scanned, new, vanished, unreadable, restricted, reread,
        full_recheck, known)."""
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
        """Every engine server now running, by pid (``Scanner::scan`` in scan.rs)."""
        return self.scan_at(time.monotonic() - self._origin)

    def scan_at(self, elapsed: float) -> list[RawProcess]:
        """``scan`` as if ``elapsed`` seconds had passed since the scanner was made (``scan`` is
        ``scan_at`` of the time since then): the clock the young and refresh windows are
        measured on, for a fixture host (``Scanner::scan_at`` in scan.rs)."""
        if not (math.isfinite(elapsed) and elapsed >= 0):
            raise ValueError(f"elapsed: invalid {elapsed}")
        now = elapsed
        first = self._generation == 0
        self._counts = counts = _Counts()
        self._engine_appeared = False
        self._events_pending = False
        # No fork anywhere since the last listing began: no process can have appeared and no pid
        # can have been reused, so the listing is skipped.
        before = self._source.cursor()
        if before is not None and before[1] == self._forks_listed:
            scanned = len(self._known)
            self._quiet_scan(now)
            return self._finish(now, quiet=True, scanned=scanned, full_recheck=False)
        self._forks_listed = None if before is None else before[1]
        self._generation += 1
        self._cold = self._source.uptime() if first else None
        pids = self._source.list_pids()
        # Read after listing, so any pid reused before the listing falls inside the window.
        cursor = self._source.cursor()
        if self._cold is not None and before is not None and cursor is not None:
            self._cold_births = self._recent_births(pids, before[0], cursor[0], self._cold)
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
        self._cold_births = None
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
        self._stats = RawStats(
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
        except Denied:
            self._counts.unreadable += 1
            return _UNREADABLE
        except Gone:
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
        if self._event_driven and argv:
            return _SETTLED  # an exec will be reported
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
        if self._cold_births is not None:
            return pid in self._cold_births
        stat = self._source.stat(pid)
        return stat is not None and self._cold - stat.since_boot < self._young

    def _recent_births(self, pids: list[tuple[int, int]], before: int, after: int, cold: float) -> set[int]:
        """The processes among ``pids`` that started less than ``young`` before ``cold``: the
        ``stat`` of those near the pid cursor (``before`` the listing or ``after`` it) read newest
        first (counting back from ``after``), until SETTLED_RUN in a row started earlier
        (``recent_births`` in scan.rs)."""
        span = max(self._source.pid_max, 1)
        near = sorted(
            ((after - pid) % span, pid)
            for pid, _inode in pids
            if _near_cursor(pid, before, span) or _near_cursor(pid, after, span)
        )
        births: set[int] = set()
        settled = 0
        for _distance, pid in near:
            stat = self._source.stat(pid)
            if stat is None:
                continue
            if cold - stat.since_boot < self._young:
                births.add(pid)
                settled = 0
            else:
                settled += 1
                if settled == SETTLED_RUN:
                    break
        return births

    def _engine_state(self, pid: int, cmdline: bytes, argv: list[str], facts: RawInvocation) -> _Class | None:
        stat = self._source.stat(pid)
        if stat is None:
            self._counts.vanished += 1
            return None
        if is_dead(stat.state):
            return _SETTLED
        self._engine_appeared = True
        if self._event_driven:
            self._appeared_parents.append(stat.ppid)
        exe, exe_denied = self._source.exe(pid)
        source = self._source
        paths = self._read_set.checkout_paths(facts.engine_index, argv)
        if not isinstance(source, ProcRoot):  # the read set is procfs's (as in scan_sysinfo.rs)
            environ, cgroup, netns = None, None, None
            in_checkout = None if paths is False else False  # nothing is looked at as another user
        else:
            environ = self._environ_of(source, pid, facts.engine_index)
            cgroup = self._cgroup_of(source, pid)
            netns = source.netns(pid) if self._read_set.netns else None
            in_checkout = None if paths is False else paths is not None and source.all_regular(pid, paths)
        parent_argv = self._parent_argv(stat.ppid)
        return _Engine(
            pid, cmdline, stat, argv, facts, exe, exe_denied, parent_argv, environ, cgroup, netns, in_checkout
        )

    def _environ_of(self, source: ProcRoot, pid: int, engine_index: int) -> Environ | None:
        """The variables of ``pid``'s environment its engine's read set names."""
        names = self._environ[engine_index] if engine_index < len(self._environ) else frozenset()
        if not names:
            return None
        try:
            data, cut = source.read_capped(pid, "environ", MAX_ENVIRON_BYTES)
        except (Gone, Denied):
            return None
        found = environ_entries(data, cut, names)
        return Environ([(os.fsdecode(name), os.fsdecode(value)) for name, value in found], cut)

    def _cgroup_of(self, source: ProcRoot, pid: int) -> bytes | None:
        if not self._read_set.cgroup:
            return None
        try:
            return source.read_capped(pid, "cgroup", MAX_CGROUP_BYTES)[0]
        except (Gone, Denied):
            return None

    def _parent_argv(self, ppid: int) -> list[str]:
        try:
            return capped_argv(self._source.cmdline(ppid))[0]
        except (Gone, Denied):
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
        if is_dead(stat.state):
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

    def set_event_driven(self) -> None:
        """From now on the caller reports every process change through :meth:`apply_events`, so
        processes are no longer watched for an exec (``Scanner::set_event_driven``). Raises
        ``ValueError`` for the psutil source, which has no event mode."""
        self._procfs()
        self._event_driven = True

    def set_polling(self) -> None:
        """Back to polling: everything is forgotten, so the next scan is a cold one
        (``Scanner::set_polling``)."""
        self._procfs()
        self._event_driven = self._events_pending = False
        self._known = {}
        self._cursor = self._forks_listed = None
        self._generation = 0

    def apply_events(self, changes: list[tuple[int, Change]]) -> bool:
        """Reads again the processes the events name, in order (``Scanner::apply_events``):
        whether an engine appeared, changed or is gone, or a folded worker exited."""
        source = self._procfs()
        for pid, change in changes:  # all checked before any is applied, as in python.rs
            if change not in _CHANGES:
                raise ValueError(f"changes: unknown change {change!r} of pid {pid}")
        now = time.monotonic() - self._origin
        if not self._events_pending:
            self._counts = _Counts()
            self._engine_appeared = False
            self._events_pending = True
        changed = False
        for pid, change in changes:
            previous = self._known.pop(pid, None)
            was_engine = previous is not None and isinstance(previous[1], _Engine)
            if change == "exited":
                # A folded worker's exit matters at once too (a server that lost its engine core).
                changed |= was_engine or self._is_folded_worker(pid)
                self._counts.vanished += previous is not None
                continue
            # A fork gives the pid a new ROOT/PID (and inode); an exec or rename keeps it.
            inode = previous[0] if previous is not None and change in ("exec", "comm") else source.inode(pid)
            if previous is not None:
                self._counts.reread += 1
                cls = self._revisit(pid, previous[1], True, change == "forked", now)
            else:
                self._counts.new += 1
                cls = self._classify(pid, False, now)
            if cls is None or inode is None:
                changed |= was_engine
                continue
            changed |= was_engine or isinstance(cls, _Engine)
            self._known[pid] = (inode, cls)
        c = self._counts
        self._stats = RawStats(
            0, c.new, c.vanished, c.unreadable, c.restricted, c.reread, False, len(self._known)
        )
        return changed

    def _procfs(self) -> ProcRoot:
        """The procfs source; ``ValueError`` for the psutil source, which has no event mode."""
        if not isinstance(self._source, ProcRoot):
            raise ValueError("source: the psutil source has no event mode")
        return self._source

    def _is_folded_worker(self, pid: int) -> bool:
        return any(
            isinstance(cls, _Engine) and pid in cls.descendants for _inode, cls in self._known.values()
        )

    def scan_after_events(self, recheck: bool) -> list[RawProcess]:
        """The engines after the events applied since the last call: with ``recheck``, a scan
        without listing; without, the engines as the events left them
        (``Scanner::scan_after_events``)."""
        self._procfs()
        now = time.monotonic() - self._origin
        if not self._events_pending:
            self._counts = _Counts()
            self._engine_appeared = False
        self._events_pending = False
        scanned = 0
        if recheck:
            scanned = len(self._known)
            self._quiet_scan(now)
        return self._finish(now, quiet=True, scanned=scanned, full_recheck=False)

    def _engines_above(self, pids: list[int]) -> set[int]:
        """The known engines among ``pids`` and their ancestors (``engines_above`` in scan.rs)."""
        found: set[int] = set()
        for start in pids:
            pid = start
            for _ in range(64):  # a cycle cannot happen, but a bound costs nothing
                if pid <= 1:
                    break
                entry = self._known.get(pid)
                if entry is not None and isinstance(entry[1], _Engine):
                    found.add(pid)
                stat = self._source.stat(pid)
                if stat is None:
                    break
                pid = stat.ppid
        return found

    def _collect(self, now: float, quiet: bool) -> list[RawProcess]:
        """The engines' records, their trees brought up to date (``Scanner::collect``)."""
        parents, self._appeared_parents = self._appeared_parents, []
        folding = self._engines_above(parents)
        engines = [cls for _inode, cls in self._known.values() if isinstance(cls, _Engine)]
        out: list[RawProcess] = []
        tables: dict[int, list[Listening]] = {}
        for engine in sorted(engines, key=lambda e: e.pid):
            pid = engine.pid
            # The tree is re-read when a new engine appeared (a forked child keeping the server's
            # argv must be folded at once) and otherwise at most once per refresh period; in event
            # mode, only the trees above the new engine.
            appeared = pid in folding if self._event_driven else self._engine_appeared
            if appeared or engine.tree_read is None or now - engine.tree_read >= self._refresh:
                descendants = self._source.descendants(pid) if self._fold[engine.facts.engine_index] else []
                files = self._source.tree_files(
                    [pid, *descendants], self._listen_ports, self._read_set.devices, tables
                )
                engine.tree_read, engine.tree_denied = now, files.denied
                tree = (descendants, files.listen_ports, files.devices)
                if tree != (engine.descendants, engine.ports, engine.devices):
                    engine.descendants, engine.ports, engine.devices = tree
                    engine.built = None
            else:
                # Between refreshes, workers that exited are dropped at once.
                alive = [
                    d
                    for d in engine.descendants
                    if d in self._known and (not quiet or self._source.exists(d))
                ]
                if len(alive) != len(engine.descendants):
                    engine.descendants, engine.built = alive, None
                    if engine.devices is not None:  # the engine itself, then the workers still alive
                        engine.devices = {p: d for p, d in engine.devices.items() if p == pid or p in alive}
            if engine.exe_denied or engine.tree_denied:
                self._counts.restricted += 1
            out.append(engine.record())
        return out
