"""Stub of the Rust extension module (rust/python.rs); checked against the built module by
``python -m mypy.stubtest enginespec._native`` (tests/run.sh).

Strings cross the boundary through the filesystem encoding (surrogateescape), so argv read from
``/proc`` with invalid UTF-8 round-trips as ``os.fsdecode`` gives it.
"""

from collections.abc import Sequence
from os import PathLike
from typing import Literal, TypeAlias, final

from enginespec._host.fallback.gguf import RawHeader
from enginespec._host.shapes import ContainerRuntime, Listening, RawInvocation, RawProcess, RawStats, ReadSet

__all__ = ["Matcher", "ProcRoot", "ProcessScanner", "parse_cgroup", "proxy_flags", "read_gguf"]

# The aliases are the stub's alone (private names: the module has no such attributes).

# The records are the named tuples of enginespec._host.shapes, built there for both backends.
_RawInvocation: TypeAlias = RawInvocation
_RawProcess: TypeAlias = RawProcess
_RawStats: TypeAlias = RawStats
_Listening: TypeAlias = Listening
_ReadSet: TypeAlias = ReadSet
_Change: TypeAlias = Literal["forked", "exec", "comm", "exited"]

#: What a cgroup path says runs a container.
_ContainerRuntime: TypeAlias = ContainerRuntime

@final
class Matcher:
    """Engine signatures (JSON from ``signatures_json``) compiled once; classifies argv.

    Raises ``ValueError`` for signatures that are not valid JSON or not valid signatures.
    """

    def __new__(cls, signatures_json: str) -> Matcher: ...
    def parse(self, argv: Sequence[str]) -> _RawInvocation | None:
        """The facts of a server's argv, or None when argv launches no known engine server."""

@final
class ProcessScanner:
    """Incremental scanner of every engine server on the host; the GIL is released during ``scan``.

    ``source`` is ``"procfs"`` (Linux's default: the incremental ``/proc`` reader) or
    ``"sysinfo"`` (the default elsewhere). ``root``: read ``ROOT/proc`` instead of ``/proc`` (a
    fixture host laid out in the kernel's formats, its clock given by ``scan_at``; procfs
    source only). Raises ``ValueError``
    for invalid signatures, a negative or non-finite duration, or an unknown source.
    ``read_set``: what else is read of each engine process (``_host.shapes.ReadSet``), once per record.
    """

    def __new__(
        cls,
        signatures_json: str,
        wrappers: Sequence[str],
        young_seconds: float,
        refresh_seconds: float,
        listen_ports: bool,
        source: Literal["procfs", "sysinfo"] | None = None,
        root: str | PathLike[str] | None = None,
        read_set: _ReadSet | None = None,
    ) -> ProcessScanner: ...
    @property
    def boot_time(self) -> float | None:
        """The boot time (epoch seconds) every start time is computed from (start ticks /
        CLK_TCK + boot time), fixed for the scanner's life; ``None`` when start times have no
        clock ticks behind them (the ``sysinfo`` source)."""
    def scan(self) -> list[_RawProcess]:
        """Every engine server now running, by pid. Never raises because of a process.

        An engine unchanged since the previous scan comes back as the very same tuple object (so
        its cost does not grow with its argv, and callers can tell it is unchanged by identity):
        treat the tuples and their lists as read-only."""
    def scan_at(self, elapsed: float) -> list[_RawProcess]:
        """``scan`` as if ``elapsed`` seconds had passed since the scanner was made (``scan`` is
        ``scan_at`` of the time since then): the clock the young and refresh windows are
        measured on, for a fixture host, whose files cannot say what time it is. Raises
        ``ValueError`` for a negative or non-finite ``elapsed``."""
    def subscribe_events(self, ack_timeout: float, full_rescan_seconds: float) -> str | None:
        """Subscribes to the kernel's process events (netlink proc connector; root in the initial
        namespaces, or any user on newer kernels), waiting up to ``ack_timeout`` seconds for the
        kernel's reply. ``None``: from now on ``wait`` reads ``/proc`` only where events point,
        and lists it at least every ``full_rescan_seconds`` and after any lost event. Otherwise
        the reason they cannot be used (the scanner keeps polling)."""
    def wait(
        self, timeout: float
    ) -> tuple[list[_RawProcess], Literal["polled", "events", "tick", "rescan", "fallback"]]:
        """The engines (as ``scan``) after waiting up to ``timeout`` seconds, GIL released, and
        what woke the scanner. Polling: sleeps, then scans (``"polled"``). Event-driven: returns
        as soon as an event started or ended an engine (``"events"``: the engines as the events
        left them), else when the engines' re-check comes due, at most ``timeout`` after the last
        one (``"tick"``: engines re-checked); ``"rescan"``: events were lost or the safety net came
        due, so ``/proc`` was listed; ``"fallback"``: the subscription failed, and the scanner polls
        from now on."""
    def set_event_driven(self) -> None:
        """Process events given by the caller instead of the kernel (a fixture host's, which no
        file can hold): nothing is watched for an exec from now on. Raises ``ValueError`` for
        the ``sysinfo`` source."""
    def set_polling(self) -> None:
        """Back to polling: everything is forgotten, so the next scan is a cold one."""
    def apply_events(self, changes: Sequence[tuple[int, _Change]]) -> bool:
        """Reads again the processes the events name, in order: one that exited is forgotten,
        one that forked, exec'd or renamed itself is classified from what its files say now.
        Whether an engine appeared, changed or is gone, or one of its folded workers exited.
        Raises ``ValueError`` for an unknown change."""
    def scan_after_events(self, recheck: bool) -> list[_RawProcess]:
        """The engines after the events applied since the last call: with ``recheck``, a scan
        without listing (engines re-checked); without, the engines as the events left them."""
    def stats(self) -> _RawStats:
        """What the last scan did, by name (a named tuple: scanned, new, vanished, unreadable,
        restricted, reread, full_recheck, known): ``unreadable`` processes whose argv could not
        be read, ``restricted`` engines whose executable, fds or sockets could not be read."""

@final
class ProcRoot:
    """The scanner's reads of sockets and process trees below one procfs root (``/proc``, or a
    fixture host's ``ROOT/proc``), for the facade's questions of who listens where and which
    processes an engine's tree holds; the GIL is released while it reads."""

    def __new__(cls, proc: str | PathLike[str]) -> ProcRoot: ...
    def list_pids(self) -> list[tuple[int, int]]:
        """(pid, inode of ``ROOT/PID``) of every process."""
    def descendants(self, pid: int) -> list[int]:
        """Every live descendant of the process (zombies left out), sorted, from the kernel's
        lists of each task's children."""
    def netns(self, pid: int) -> int | None:
        """The inode of the process's network namespace (the number its ``ns/net`` link names),
        ``None`` when it cannot be read."""
    def socket_inodes(self, pid: int) -> set[int] | None:
        """The socket inodes the process holds, ``None`` when its fds cannot be read."""
    def open_devices(self, pid: int) -> tuple[list[tuple[int, int, int]] | None, bool]:
        """The character devices among the process's open files as (fd, major, minor), sorted
        (only links into ``/dev`` are followed), ``None`` when its ``fd/`` cannot be listed;
        and whether some of it was refused for lack of permission."""
    def listen_table(self, pid: int) -> list[_Listening]:
        """The LISTEN sockets of the tables (``net/tcp``, ``net/tcp6``) of the process's network
        namespace."""

def parse_cgroup(data: bytes) -> tuple[_ContainerRuntime, str, str | None] | None:
    """(runtime, full id, pod uid) of the container the text of ``/proc/PID/cgroup`` places a
    process in, ``None`` on the host (``_host.fallback.cgroup.parse_cgroup`` is its twin)."""

def proxy_flags(argv: Sequence[str]) -> tuple[str, int, str, int] | None:
    """(host address, host port, container address, container port) a ``docker-proxy`` argv
    forwards, the addresses as given (``_host.fallback.proxy.proxy_flags`` is its twin)."""

def read_gguf(fd: int, max_header_bytes: int, max_string_bytes: int, max_array_items: int) -> RawHeader:
    """(version, big endian, metadata, tensors, data offset) of the GGUF file open at ``fd`` (a
    regular file, not closed): bounded reads of its header only, the GIL released. Raises
    ``ValueError`` naming the offset for anything the format or the limits refuse
    (``_host.fallback.gguf.read_gguf`` is its twin)."""
