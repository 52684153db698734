"""Who listens on a TCP port: LISTEN sockets from ``/proc/PID/net/tcp`` and ``tcp6`` (the table of
the network namespace a process is in), matched to the processes holding them by the socket inodes
their ``/proc/PID/fd`` links name.

It answers what a port number alone cannot: whether the server that answers on an address is the
process tree that was started or scanned, and which other processes share its address and port
(vLLM before PR #47529 and llama-server with ``--reuse-port`` set SO_REUSEPORT, so the kernel
spreads connections between servers of different models). Linux only; every read that fails
leaves the answer unknown, never raised.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from enginespec._pyscanner import tcp_listen

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: At most this many processes' fd tables are read to name the holders of a socket (a host has a
#: few hundred to a few thousand; the walk stops as soon as every socket's holder is found).
MAX_HOLDER_WALK = 20_000
_WILDCARDS = (ipaddress.IPv4Address(0), ipaddress.IPv6Address(0))


@dataclass(frozen=True)
class Listener:
    """One LISTEN socket: its inode, local address and port."""

    inode: int
    address: IPAddress
    port: int


def _address(hex_address: bytes) -> IPAddress | None:
    """The address of a ``/proc/net/tcp{,6}`` local address column (host-order 32-bit words)."""
    try:
        raw = bytes.fromhex(hex_address.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if len(raw) not in (4, 16):
        return None
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def listeners(port: int, netns_pid: int | None = None) -> list[Listener]:
    """The LISTEN sockets on ``port`` in the network namespace of ``netns_pid`` (this process's
    when ``None``)."""
    where = f"/proc/{netns_pid}/net" if netns_pid is not None else "/proc/self/net"
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{where}/{table}", "rb") as file:
                data = file.read()
        except OSError:
            continue
        for inode, local, local_port in tcp_listen(data):
            address = _address(local)
            if local_port == port and address is not None:
                found.append(Listener(inode, address, local_port))
    return found


def socket_inodes(pid: int) -> set[int] | None:
    """The socket inodes a process holds; ``None`` when its fds cannot be read (gone, or another
    user's process)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit():
            inodes.add(int(target[8:-1]))
    return inodes


def holders(inodes: Collection[int], exclude: Collection[int] = ()) -> tuple[int, ...]:
    """The pids (sorted) of processes other than ``exclude`` that hold one of ``inodes``; those
    whose fds cannot be read are not found."""
    wanted, found = set(inodes), set()
    if not wanted:
        return ()
    try:
        pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return ()
    for pid in pids[:MAX_HOLDER_WALK]:
        if pid in exclude:
            continue
        held = socket_inodes(pid)
        if held and not held.isdisjoint(wanted):
            found.add(pid)
    return tuple(sorted(found))


def overlap(a: IPAddress, b: IPAddress) -> bool:
    """Whether two listening addresses take the same connections (equal, or one a wildcard of
    the same family; ``::`` also takes IPv4 unless the socket is IPV6_V6ONLY, unknown here)."""
    if a == b:
        return True
    if a.version == b.version:
        return a in _WILDCARDS or b in _WILDCARDS
    return ipaddress.IPv6Address(0) in (a, b)


def connect_addresses(host: str) -> tuple[IPAddress, ...]:
    """The addresses a client connecting to ``host`` may reach: an IP literal (brackets allowed)
    or ``localhost``; nothing for other names (no DNS is asked)."""
    if host == "localhost":
        return (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))
    try:
        return (ipaddress.ip_address(host.strip("[]")),)
    except ValueError:
        return ()


@dataclass(frozen=True)
class Ownership:
    """Who listens where a server should: whether its own process tree does (``None``: its fds
    could not be read), and the other processes that do."""

    ours: bool | None
    others: tuple[int, ...]


def ownership(tree: Iterable[int], addresses: Collection[IPAddress], port: int) -> Ownership:
    """Whether the process tree ``tree`` (the server first) holds a LISTEN socket that takes
    connections to one of ``addresses`` on ``port``, and which other processes hold one."""
    pids = list(tree)
    relevant = [
        listener
        for listener in listeners(port, pids[0])
        if any(overlap(listener.address, address) for address in addresses)
    ]
    if socket_inodes(pids[0]) is None:
        return Ownership(None, ())
    held: set[int] = set()
    for pid in pids:
        held |= socket_inodes(pid) or set()
    foreign = [listener.inode for listener in relevant if listener.inode not in held]
    return Ownership(any(listener.inode in held for listener in relevant), holders(foreign, pids))


def conflicts(tree: Iterable[int], port: int) -> tuple[int, ...]:
    """Pids of other processes listening on the same address and port as the tree ``tree`` (the
    server first): SO_REUSEPORT sharing, or a more specific address bound next to a wildcard."""
    pids = list(tree)
    found = listeners(port, pids[0])
    held: set[int] = set()
    for pid in pids:
        held |= socket_inodes(pid) or set()
    ours = [listener for listener in found if listener.inode in held]
    foreign = [
        listener.inode
        for listener in found
        if listener.inode not in held and any(overlap(listener.address, own.address) for own in ours)
    ]
    return holders(foreign, pids)
