"""Pure-Python twin of ``rust/procread.rs``: every read the scanner makes of procfs, below one
root (``/proc``, or a fixture host's ``ROOT/proc``), the bytes handed to ``procfs``'s parsers.
``Stat`` and the ``Gone``/``Denied`` errors are also what the psutil source (``scan_sysinfo``)
answers, so the scanner reads either the same way."""

from __future__ import annotations

import os
import socket
from typing import NamedTuple, Protocol

from enginespec._host.fallback.procfs import (
    AF_INET,
    AF_INET6,
    diag_listen_request,
    is_dead,
    parse_children,
    parse_diag_listen,
    parse_pid_name,
    parse_socket_link,
    parse_stat,
    parse_tcp_listen,
    parse_u64,
    parse_uptime,
    proc_stat_value,
    tcp_row_after_listening,
)
from enginespec._host.namedfiles import first_missing
from enginespec._host.procfiles import PROC, char_device, device_link
from enginespec._host.shapes import Listening, pread_all

#: NETLINK_SOCK_DIAG (the socket module names it on some Pythons only)
_NETLINK_SOCK_DIAG = 4
#: How much of each end of an engine's cmdline is compared on every scan (``CMDLINE_PEEK``).
CMDLINE_PEEK = 4096


class Gone(Exception):
    """The process exited while being read (``ReadError::Gone``)."""


class Denied(Exception):
    """The process's file may not be read: another user's process, hidepid (``ReadError::Denied``)."""


class Stat(NamedTuple):
    """A process's ``stat`` as the scanner uses it: its start time in epoch seconds, computed as
    scan.rs and psutil do (start ticks / CLK_TCK + btime)."""

    state: str
    ppid: int
    start_time: float
    comm: bytes
    #: where argv lies in memory (arg_start, arg_end); None when unknown
    args: tuple[int, int] | None
    #: seconds from boot to the process's start (start ticks / CLK_TCK)
    since_boot: float


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def _read_listening(path: str) -> bytes:
    """A ``/proc/PID/net/tcp{,6}`` table as far as it lists listening sockets (``read_listening``
    in procread.rs): the kernel prints those first, then walks every bucket of its
    established-connection hash (a millisecond or more even with few connections), which is read
    only up to its first row, in growing chunks. Raises OSError as ``open`` does."""
    data = b""
    chunk = 1024
    unchecked = None  # where the first row not yet looked at begins; the header is no row
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while True:
            part = os.read(fd, chunk)
            if not part:
                return data
            data += part
            if unchecked is None:
                header_end = data.find(b"\n")
                if header_end < 0:
                    continue
                unchecked = header_end + 1
            while (row_end := data.find(b"\n", unchecked)) >= 0:
                if tcp_row_after_listening(data[unchecked:row_end]):
                    return data[:unchecked]
                unchecked = row_end + 1
            chunk = min(chunk * 2, 16 * 1024)
    finally:
        os.close(fd)


def _diag_listening(family: int) -> list[Listening] | None:
    """Every TCP socket of ``family`` listening in this process's
    network namespace, asked of the kernel through NETLINK_SOCK_DIAG as ``ss -lt`` asks (it walks
    the listening sockets only; reading ``net/tcp{,6}`` walks every bucket of the connection hash
    too); None when it cannot be asked (``diag_listening`` in procread.rs)."""
    seq = 0x5EED
    found: list[Listening] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.send(diag_listen_request(family, seq))
            while True:
                datagram = diag.recv(32 * 1024)
                answer = parse_diag_listen(datagram, seq, found) if datagram else "failed"
                if answer != "more":
                    return found if answer == "done" else None
    except OSError:
        return None


class _Tree(Protocol):
    def children(self, pid: int) -> list[int]: ...
    def stat(self, pid: int) -> Stat | None: ...


def live_descendants(source: _Tree, pid: int) -> list[int]:
    """Every live descendant of ``pid``, sorted: zombies (exited, not yet reaped) serve nothing
    and have no children left, so each child's stat is read to leave them out."""
    seen: set[int] = set()
    queue = [pid]
    while queue:
        for child in source.children(queue.pop()):
            if child != pid and child not in seen:
                stat = source.stat(child)
                if stat is not None and not is_dead(stat.state):
                    seen.add(child)
                    queue.append(child)
    return sorted(seen)


class OpenFiles(NamedTuple):
    """What one process's ``fd/`` links name (``OpenFiles`` in procread.rs)."""

    sockets: set[int]
    #: (fd, major, minor) of each character device, sorted
    devices: list[tuple[int, int, int]]


class TreeFiles(NamedTuple):
    """What the fds of a process tree hold, read at one refresh (``TreeFiles`` in procread.rs)."""

    listen_ports: list[int]
    #: each pid whose ``fd/`` could be listed, with its character devices (``None``: not asked)
    devices: dict[int, list[tuple[int, int, int]]] | None
    #: some fd directory, fd link or socket table could not be read (another user's process)
    denied: bool


class ProcRoot:
    """Linux: every process file read where and as procread.rs reads it, below ``proc``
    (``/proc``, or a fixture host's ``ROOT/proc``)."""

    def __init__(self, proc: str = PROC) -> None:
        self._proc = proc
        #: where a fixture host's fd links name their /dev below (empty for the host's /proc)
        self._host = os.path.dirname(proc.rstrip("/")) if proc.rstrip("/") != PROC else ""
        self.boot_time = float(self._host_value("stat", b"btime") or 0)
        self._clock_ticks = float(os.sysconf("SC_CLK_TCK"))
        pid_max = _read(f"{proc}/sys/kernel/pid_max")
        parsed = None if pid_max is None else parse_u64(pid_max)
        self.pid_max = 4_194_304 if parsed is None else parsed

    def _host_value(self, name: str, key: bytes) -> int | None:
        data = _read(f"{self._proc}/{name}")
        return None if data is None else proc_stat_value(data, key)

    def all_regular(self, pid: int, paths: tuple[str, ...]) -> bool:
        """Whether every one of ``paths``, as process ``pid`` names them, is a regular file to its
        owner, inside its root (``namedfiles::first_missing``)."""
        return first_missing(pid, paths, self._proc) is None

    def list_pids(self) -> list[tuple[int, int]]:
        """(pid, inode of /proc/PID): the inode changes when a pid is handed to a new process."""
        try:
            with os.scandir(self._proc) as entries:
                return [(pid, e.inode()) for e in entries if (pid := parse_pid_name(e.name)) is not None]
        except OSError:
            return []

    def cursor(self) -> tuple[int, int] | None:
        """(last allocated pid, forks since boot)."""
        data = _read(f"{self._proc}/sys/kernel/ns_last_pid")
        last_pid = None if data is None else parse_u64(data)
        forks = self._host_value("stat", b"processes")
        return None if last_pid is None or forks is None else (last_pid, forks)

    def inode(self, pid: int) -> int | None:
        """The inode of ``ROOT/PID`` (as the listing gives it), ``None`` when it is gone."""
        try:
            return os.stat(f"{self._proc}/{pid}").st_ino
        except OSError:
            return None

    def stat(self, pid: int) -> Stat | None:
        """``None`` when the process is gone or its stat cannot be read or parsed."""
        data = _read(f"{self._proc}/{pid}/stat")
        parsed = None if data is None else parse_stat(data)
        if parsed is None:
            return None
        since_boot = parsed.start_ticks / self._clock_ticks
        start_time = since_boot + self.boot_time
        return Stat(parsed.state, parsed.ppid, start_time, parsed.comm, parsed.args, since_boot)

    def uptime(self) -> float | None:
        """Seconds since boot (``uptime``), ``None`` when it cannot be read."""
        data = _read(f"{self._proc}/uptime")
        return None if data is None else parse_uptime(data)

    def cmdline(self, pid: int) -> bytes:
        try:
            with open(f"{self._proc}/{pid}/cmdline", "rb") as file:
                return file.read()
        except PermissionError:
            raise Denied from None
        except OSError:
            raise Gone from None

    def read_capped(self, pid: int, name: str, limit: int) -> tuple[bytes, bool]:
        """At most ``limit`` bytes of ``ROOT/PID/NAME``, and whether the file goes on beyond them
        (``read_capped`` in procread.rs). Raises ``Denied`` or ``Gone``."""
        try:
            with open(f"{self._proc}/{pid}/{name}", "rb") as file:
                data = file.read(limit + 1)
        except PermissionError:
            raise Denied from None
        except OSError:
            raise Gone from None
        return data[:limit], len(data) > limit

    def ends_match(self, pid: int, known: bytes) -> bool:
        """Whether cmdline still holds ``known``, from its first and last ``CMDLINE_PEEK`` bytes
        and its length (``cmdline_holds`` in procread.rs); any failure answers False."""
        try:
            fd = os.open(f"{self._proc}/{pid}/cmdline", os.O_RDONLY)
        except OSError:
            return False
        try:
            # At the end one byte more is asked for, so that a cmdline that grew does not match.
            if len(known) <= 2 * CMDLINE_PEEK:
                return pread_all(fd, len(known) + 1, 0) == known
            tail_at = len(known) - CMDLINE_PEEK
            return (
                pread_all(fd, CMDLINE_PEEK, 0) == known[:CMDLINE_PEEK]
                and pread_all(fd, CMDLINE_PEEK + 1, tail_at) == known[tail_at:]
            )
        except OSError:
            return False
        finally:
            os.close(fd)

    def exe(self, pid: int) -> tuple[str | None, bool]:
        """The executable, and whether reading it was denied. readlink as procread.rs does
        (psutil strips " (deleted)")."""
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
            data = _read(f"{self._proc}/{pid}/task/{task}/children")
            if data is not None:
                found.extend(parse_children(data))
        return found

    def descendants(self, pid: int) -> list[int]:
        """Every live descendant of ``pid``, sorted (``ProcRoot::descendants`` of procread.rs)."""
        return live_descendants(self, pid)

    def exists(self, pid: int) -> bool:
        return os.path.exists(f"{self._proc}/{pid}")

    def _own_netns(self) -> int | None:
        """The inode of this process's network namespace when this root is the host's ``/proc``
        (``None`` for a fixture host: its tables are always read)."""
        if self._proc != PROC:
            return None
        try:
            return os.stat(f"{PROC}/self/ns/net").st_ino
        except OSError:
            return None

    def netns(self, pid: int) -> int | None:
        """The inode of the process's network namespace, from the number its ``ns/net`` link
        names (``net:[4026531840]``), which a fixture host's link can name too."""
        try:
            target = os.readlink(f"{self._proc}/{pid}/ns/net")
        except OSError:
            return None
        if not (target.startswith("net:[") and target.endswith("]")):
            return None
        return parse_u64(target[5:-1].encode())

    def _open_files(self, pid: int, devices: bool) -> tuple[OpenFiles | None, bool]:
        """What the process's ``fd/`` links name: its socket inodes and, with ``devices``, its
        character devices (only links into ``/dev`` are followed); ``None`` when the directory
        cannot be read, and whether some of it was refused (``ProcRoot::open_files``)."""
        directory = f"{self._proc}/{pid}/fd"
        try:
            fds = os.listdir(directory)
        except OSError as err:
            return None, isinstance(err, PermissionError)
        denied = False
        found = OpenFiles(set(), [])
        for fd in fds:
            try:
                target = os.readlink(f"{directory}/{fd}")
            except OSError as err:
                denied |= isinstance(err, PermissionError)
                continue
            inode = parse_socket_link(target)
            if inode is not None:
                found.sockets.add(inode)
            elif devices and fd.isdigit() and device_link(target, self._host):
                device = char_device(f"{directory}/{fd}")
                if device is not None:
                    found.devices.append((int(fd), *device))
        found.devices.sort()
        return found, denied

    def _socket_inodes(self, pid: int) -> tuple[set[int] | None, bool]:
        files, denied = self._open_files(pid, False)
        return (None if files is None else files.sockets), denied

    def socket_inodes(self, pid: int) -> set[int] | None:
        """The socket inodes the process holds, ``None`` when its fds cannot be read."""
        return self._socket_inodes(pid)[0]

    def open_devices(self, pid: int) -> tuple[list[tuple[int, int, int]] | None, bool]:
        """The character devices among the process's open files as (fd, major, minor), sorted,
        ``None`` when its ``fd/`` cannot be listed; and whether some of it was refused."""
        files, denied = self._open_files(pid, True)
        return (None if files is None else files.devices), denied

    def _listen_table(self, pid: int) -> tuple[list[Listening], bool]:
        own = self._own_netns()
        asked = own is not None and self.netns(pid) == own
        found: list[Listening] = []
        denied = False
        for table, family in (("tcp", AF_INET), ("tcp6", AF_INET6)):
            sockets = _diag_listening(family) if asked else None
            if sockets is not None:
                found.extend(sockets)
                continue
            try:
                data = _read_listening(f"{self._proc}/{pid}/net/{table}")
            except OSError as err:
                denied |= isinstance(err, PermissionError)
                continue
            found.extend(parse_tcp_listen(data))
        return found, denied

    def listen_table(self, pid: int) -> list[Listening]:
        """The LISTEN sockets of the process's network namespace: those of this process's own
        asked of the kernel (NETLINK_SOCK_DIAG), others read from its ``net/tcp{,6}``."""
        return self._listen_table(pid)[0]

    def tree_files(
        self, pids: list[int], ports: bool, devices: bool, tables: dict[int, list[Listening]] | None = None
    ) -> TreeFiles:
        """What the fds of ``pids`` (the engine first, then its descendants) hold: with ``ports``,
        the TCP ports in LISTEN state whose sockets they hold, sorted; with ``devices``, each
        listed pid's character devices (``None`` when not asked). And whether some fd directory,
        fd link or socket table could not be read for lack of permission. ``tables``: the
        listeners of each network namespace read so far in this scan (one read per namespace,
        not per engine: a socket table can take 10 ms to read) (``ProcRoot::tree_files``)."""
        denied = False
        inodes: set[int] = set()
        held: dict[int, list[tuple[int, int, int]]] | None = {} if devices else None
        if not ports and not devices:
            return TreeFiles([], held, denied)
        for pid in pids:
            files, refused = self._open_files(pid, devices)
            denied |= refused
            if files is not None:
                inodes |= files.sockets
                if held is not None:
                    held[pid] = files.devices
        if not ports or not inodes:
            return TreeFiles([], held, denied)
        netns = self.netns(pids[0])
        found = tables.get(netns) if tables is not None and netns is not None else None
        if found is None:
            found, refused = self._listen_table(pids[0])
            denied |= refused
            if tables is not None and netns is not None and not refused:
                tables[netns] = found
        listening = sorted({listener.port for listener in found if listener.inode in inodes})
        return TreeFiles(listening, held, denied)
