"""Pure-Python twin of ``rust/procfs.rs``: pure parsers of what procfs gives, kept apart from
the reads (``_pyprocread``), each a function over bytes that never raises on hostile input (a
process chooses its own argv and ``comm``)."""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from enginespec._common import MAX_ARGV_ARGS, MAX_ARGV_BYTES


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
    fields = data[close + 1 :].split()
    try:
        state, ppid, start_ticks = chr(fields[0][0]), int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None
    try:
        args: tuple[int, int] | None = (int(fields[45]), int(fields[46]))
    except (IndexError, ValueError):
        args = None
    return ProcStat(state, ppid, start_ticks, data[open_ + 1 : close], args)


def is_dead(state: str) -> bool:
    """A zombie (``Z``) or dead (``X``) process: whatever its argv says, it serves nothing."""
    return state in ("Z", "X")


def proc_stat_value(data: bytes, key: bytes) -> int | None:
    """The value of the ``key`` line of ``/proc/stat`` (``btime``, ``processes``)."""
    for line in data.splitlines():
        name, _, value = line.partition(b" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def parse_u64(data: bytes) -> int | None:
    """A decimal number, surrounding whitespace allowed (procfs files end with a newline)."""
    try:
        value = int(data.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def parse_children(data: bytes) -> list[int]:
    """``/proc/PID/task/TID/children``: the pids, separated by spaces."""
    return [int(token) for token in data.split() if token.isdigit() and 0 < int(token) < 2**31]


def parse_socket_link(target: str) -> int | None:
    """The inode of an fd link ``socket:[INODE]``, ``None`` for any other link."""
    if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit():
        return int(target[8:-1])
    return None


#: SOCK_DIAG_BY_FAMILY and NLMSG_DONE (netlink), TCP_LISTEN (tcp_states.h)
_SOCK_DIAG_BY_FAMILY, _NLMSG_DONE, _TCP_LISTEN = 20, 3, 10


def diag_listen_request(family: int, seq: int) -> bytes:
    """The NETLINK_SOCK_DIAG dump request for every TCP socket of ``family`` in LISTEN state (an
    nlmsghdr, then an inet_diag_req_v2 asking for that state alone: the kernel walks its
    listening sockets only)."""
    header = struct.pack("=IHHII", 16 + 56, _SOCK_DIAG_BY_FAMILY, 0x1 | 0x300, seq, 0)
    return header + struct.pack("=BBBBI", family, 6, 0, 0, 1 << _TCP_LISTEN) + bytes(48)


def parse_diag_listen(datagram: bytes, seq: int, out: list[tuple[int, int]]) -> str:
    """Appends the (socket inode, local port) of each LISTEN socket in one datagram answering
    ``diag_listen_request``; ``"more"``, ``"done"`` (NLMSG_DONE) or ``"failed"`` (an error, a
    malformed message, another request's answer), as ``parse_diag_listen`` in procfs.rs."""
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
        if state == _TCP_LISTEN:
            out.append((inode, port))
        at += (length + 3) & ~3
    return "more"
