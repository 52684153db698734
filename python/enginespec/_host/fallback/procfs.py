"""Pure-Python twin of ``rust/procfs.rs``: pure parsers of what procfs gives, kept apart from
the reads (``procread``), each a function over bytes that never raises on hostile input (a
process chooses its own argv and ``comm``)."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from enginespec._host.shapes import (
    MAX_ARGV_ARGS,
    MAX_ARGV_BYTES,
    U64_MAX,
    Listening,
    kernel_fields,
    kernel_int,
    tcp_address,
)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


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


class ProcStat(NamedTuple):
    """What the scanner needs from ``/proc/PID/stat`` (``ProcStat`` in procfs.rs)."""

    state: str
    ppid: int
    #: start time in clock ticks since boot
    start_ticks: int
    comm: bytes
    #: where argv lies in memory (arg_start, arg_end); None when unknown
    args: tuple[int, int] | None


def parse_stat(data: bytes) -> ProcStat | None:
    """``/proc/PID/stat``, ``None`` when it cannot be parsed. The command name between the
    parentheses is chosen by the process and may hold spaces and ``)``: fields are counted from
    the last ``)``."""
    open_, close = data.find(b"("), data.rfind(b")")
    if open_ < 0 or close <= open_:
        return None
    fields = kernel_fields(data[close + 1 :])
    if len(fields) < 20:
        return None
    # state is field 3, ppid field 4, starttime field 22, arg_start and arg_end fields 48 and 49
    ppid, start_ticks = kernel_int(fields[1], I32_MAX, I32_MIN), parse_u64(fields[19])
    if ppid is None or start_ticks is None:
        return None
    arg_start, arg_end = (parse_u64(fields[i]) if i < len(fields) else None for i in (45, 46))
    args = None if arg_start is None or arg_end is None else (arg_start, arg_end)
    return ProcStat(chr(fields[0][0]), ppid, start_ticks, data[open_ + 1 : close], args)


def is_dead(state: str) -> bool:
    """A zombie (``Z``) or dead (``X``) process: whatever its argv says, it serves nothing."""
    return state in ("Z", "X")


def proc_stat_value(data: bytes, key: bytes) -> int | None:
    """The value of the first ``key`` line of ``/proc/stat`` that has one (``btime``,
    ``processes``)."""
    for line in data.split(b"\n"):
        rest = line[len(key) :]
        # the key, then whitespace (kernel_fields of it is empty)
        if line.startswith(key) and rest and not kernel_fields(rest[:1]):
            value = parse_u64(rest)
            if value is not None:
                return value
    return None


def parse_uptime(data: bytes) -> float | None:
    """Seconds since boot, the first field of ``/proc/uptime`` (``parse_uptime`` in scan.rs)."""
    try:
        first = data.decode().split()[0]
        # Rust's f64 parser takes neither digit separators nor other scripts' digits
        return float(first) if first.isascii() and "_" not in first else None
    except (UnicodeDecodeError, IndexError, ValueError):
        return None


def parse_u64(data: bytes) -> int | None:
    """A decimal ``u64``, surrounding whitespace allowed (procfs files end with a newline)."""
    return kernel_int(data.strip(), U64_MAX)


def parse_pid_name(name: str) -> int | None:
    """The pid an entry of the ``/proc`` listing names (``parse_pid_dirents`` in procfs.rs):
    ASCII digits within an ``i32``, ``None`` for any other name."""
    if not (name.isascii() and name.isdigit()):
        return None
    pid = int(name)
    return pid if pid < 2**31 else None


def parse_children(data: bytes) -> list[int]:
    """``/proc/PID/task/TID/children``: the pids, separated by spaces."""
    return [int(token) for token in kernel_fields(data) if token.isdigit() and 0 < int(token) <= I32_MAX]


def environ_entries(data: bytes, cut: bool, names: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """The ``NAME=value`` entries of an ``environ`` read whose name is one of ``names``, in order,
    repeats kept; ``cut``: the read stopped short, so its last entry is left out
    (``environ_entries`` in procfs.rs)."""
    if cut:
        end = data.rfind(b"\0")
        data = data[:end] if end >= 0 else b""
    found = []
    for entry in data.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and name in names:
            found.append((name, value))
    return found


def parse_socket_link(target: str) -> int | None:
    """The inode of an fd link ``socket:[INODE]``, ``None`` for any other link."""
    if target.startswith("socket:[") and target.endswith("]"):
        return parse_u64(os.fsencode(target[8:-1]))
    return None


def parse_tcp_listen(table: bytes) -> Iterator[Listening]:
    """Every LISTEN socket of one ``/proc/PID/net/tcp`` or ``tcp6`` table, read as
    ``parse_tcp_listen`` in procfs.rs reads them; the header and malformed lines are skipped."""
    for line in table.split(b"\n")[1:]:
        fields = kernel_fields(line)
        if len(fields) < 10 or fields[3] != b"0A":
            continue
        local = fields[1]
        colon = local.rfind(b":")
        port, inode = kernel_int(local[colon + 1 :], 0xFFFF, base=16), kernel_int(fields[9], U64_MAX)
        address = tcp_address(local[:colon])
        if colon >= 0 and port is not None and inode is not None and address is not None:
            yield Listening(inode, address, port)


#: The address families a NETLINK_SOCK_DIAG request names.
AF_INET, AF_INET6 = 2, 10
#: SOCK_DIAG_BY_FAMILY and NLMSG_DONE (netlink), TCP_LISTEN (tcp_states.h)
_SOCK_DIAG_BY_FAMILY, _NLMSG_DONE, _TCP_LISTEN = 20, 3, 10


def diag_listen_request(family: int, seq: int) -> bytes:
    """The NETLINK_SOCK_DIAG dump request for every TCP socket of ``family`` in LISTEN state (an
    nlmsghdr, then an inet_diag_req_v2 asking for that state alone: the kernel walks its
    listening sockets only)."""
    header = struct.pack("=IHHII", 16 + 56, _SOCK_DIAG_BY_FAMILY, 0x1 | 0x300, seq, 0)
    return header + struct.pack("=BBBBI", family, 6, 0, 0, 1 << _TCP_LISTEN) + bytes(48)


def parse_diag_listen(datagram: bytes, seq: int, out: list[Listening]) -> str:
    """Appends each LISTEN socket in one datagram answering ``diag_listen_request`` (its inode,
    port and address, 4 or 16 bytes by family); ``"more"``, ``"done"`` (NLMSG_DONE) or
    ``"failed"`` (an error, a malformed message, another request's answer), as
    ``parse_diag_listen`` in procfs.rs."""
    at = 0
    while at < len(datagram):
        if len(datagram) - at < 16:
            return "failed"
        length, kind, _flags, got_seq, _pid = struct.unpack_from("=IHHII", datagram, at)
        if length < 16 or at + length > len(datagram) or got_seq != seq:
            return "failed"
        if kind == _NLMSG_DONE:
            return "done"
        if kind != _SOCK_DIAG_BY_FAMILY or length < 16 + 72:
            return "failed"
        state = datagram[at + 17]
        (port,) = struct.unpack_from(">H", datagram, at + 20)
        (inode,) = struct.unpack_from("=I", datagram, at + 16 + 68)
        address_len = 16 if datagram[at + 16] == AF_INET6 else 4
        if state == _TCP_LISTEN:
            out.append(Listening(inode, datagram[at + 24 : at + 24 + address_len], port))
        at += (length + 3) & ~3
    return "more"


#: The states of the rows the kernel prints first in a ``/proc/PID/net/tcp{,6}`` table, its
#: listening sockets (``LISTENING_PART`` in procfs.rs): LISTEN, a listener's pending requests
#: (SYN_RECV, kernels before 4.4) or one being closed (CLOSE), left in for safety.
_LISTENING_PART = (b"0A", b"03", b"07")


def tcp_row_after_listening(row: bytes) -> bool:
    """Whether a row of a ``/proc/PID/net/tcp{,6}`` table is in a state its listening part never
    shows: no socket listed from that row on listens. A malformed row says nothing (False)."""
    fields = kernel_fields(row)
    return len(fields) > 3 and fields[3] not in _LISTENING_PART
