"""Who listens on a TCP port: LISTEN sockets from ``/proc/PID/net/tcp`` and ``tcp6`` (the table of
the network namespace a process is in), matched to the processes holding them by the socket inodes
their ``/proc/PID/fd`` links name.

It answers what a port number alone cannot: whether the server that answers on an address is the
process tree that was started or scanned, and which other processes share its address and port
(vLLM before PR #47529 and llama-server with ``--reuse-port`` set SO_REUSEPORT, so the kernel
spreads connections between servers of different models). Every read is the scanner's own (the
backend's ``ProcRoot``: procread.rs, or its twin), so a scan's listening ports and these answers
come from one reading of the kernel's tables. Linux only; every read that fails leaves the
answer unknown, never raised.
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from enginespec._host import backend as _backend
from enginespec._host.namedfiles import Refused
from enginespec._host.root import HOST_ROOT, proc_host
from enginespec._host.shapes import kernel_fields, kernel_int, tcp_address
from enginespec.display import literal
from enginespec.process.containers import netns_addresses
from enginespec.process.urls import connect_host, socket_in, usable_socket_path

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: This host's process files, where the readers below look unless given a fixture host's
#: (``ROOT/proc``, as the backend's ``ProcRoot`` is keyed).
PROC = HOST_ROOT.proc
#: At most this many processes' fd tables are read to name the holders of a socket (a host has a
#: few hundred to a few thousand).
MAX_HOLDER_WALK = 20_000
_WILDCARDS = (ipaddress.IPv4Address(0), ipaddress.IPv6Address(0))
#: At most this much of each ``net/tcp{,6}`` table is read to find a connection's owner (a row is
#: 150 bytes: some 50,000 sockets); a connection past it has no owner found.
MAX_CONNECTION_TABLE = 8 * 1024 * 1024


@dataclass(frozen=True)
class Listener:
    """One LISTEN socket: its inode, local address and port."""

    inode: int
    address: IPAddress
    port: int


def _address(raw: bytes) -> IPAddress:
    """An address of the kernel's tables (an IPv4-mapped IPv6 address is its IPv4 address)."""
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass
class _Round:
    """What one run of checks or one scan reads once (see :func:`shared_tables`): the LISTEN
    sockets of each network namespace (by its inode; a socket table can take 10 ms to read, and
    1,024 engines of one namespace need it once, not 1,024 times) and, per process root, which
    processes hold each socket (one walk of every process's fds, not one per engine that shares
    a port: 80 servers on one port cost 80 walks, a second in the pure-Python fallback)."""

    tables: dict[int, list[Listener]] = field(default_factory=dict)
    holders: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    #: the walk is built once though the checks that ask for it run on several threads
    walking: threading.Lock = field(default_factory=threading.Lock)


_ROUND: ContextVar[_Round | None] = ContextVar("enginespec_socket_round", default=None)


@contextmanager
def shared_tables() -> Iterator[None]:
    """Within it (and in the tasks and threads it starts), each namespace's table is read once,
    and every process's sockets once to name a socket's holders."""
    token = _ROUND.set(_Round())
    try:
        yield
    finally:
        _ROUND.reset(token)


def _table(pid: int, proc: str) -> list[Listener]:
    return [
        Listener(row.inode, _address(row.address), row.port)
        for row in _backend.proc_root(proc).listen_table(pid)
    ]


def listeners(port: int, netns_pid: int | None = None, proc: str = PROC) -> list[Listener]:
    """The LISTEN sockets on ``port`` in the network namespace of ``netns_pid`` (this process's
    when ``None``), read from ``proc``."""
    pid = os.getpid() if netns_pid is None else netns_pid
    shared = _ROUND.get()
    tables = None if shared is None else shared.tables
    netns = _backend.proc_root(proc).netns(pid) if tables is not None else None
    if tables is None or netns is None:
        return [listener for listener in _table(pid, proc) if listener.port == port]
    if netns not in tables:
        tables[netns] = _table(pid, proc)
    return [listener for listener in tables[netns] if listener.port == port]


def connection_owner(local: tuple[str, int], remote: tuple[str, int], proc: str = PROC) -> int | None:
    """The uid owning the TCP socket of this network namespace whose own end is ``local`` and whose
    peer is ``remote``: for the agent, ``local`` is a client's address and ``remote`` its own, so
    the answer is who connected. Asked of the kernel for that one socket (NETLINK_SOCK_DIAG, as
    ``ss`` asks); where it cannot be asked, found in ``/proc/self/net/tcp{,6}`` (which lists every
    socket of the host with its owner: tens of milliseconds on a busy one). ``None`` when there is
    no such socket (the client is gone, or not on this host) or it cannot be found out."""
    try:
        wanted = (_address(ipaddress.ip_address(local[0]).packed), local[1])
        peer = (_address(ipaddress.ip_address(remote[0]).packed), remote[1])
    except ValueError:
        return None
    asked = _diag_owner(wanted, peer)
    if asked is not False:
        return asked
    for table in ("net/tcp", "net/tcp6"):
        try:
            data = proc_host(proc).read("self", table, MAX_CONNECTION_TABLE)
        except OSError:
            continue
        for line in data.split(b"\n")[1:]:
            fields = kernel_fields(line)
            if len(fields) < 8 or fields[3] == b"0A":  # a listening socket has no peer
                continue
            if _endpoint(fields[1]) == wanted and _endpoint(fields[2]) == peer:
                return kernel_int(fields[7], 0xFFFFFFFF)
    return None


#: NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, NLMSG_ERROR, INET_DIAG_NOCOOKIE
_SOCK_DIAG, _BY_FAMILY, _REQUEST, _ERROR, _NO_COOKIE = 4, 20, 1, 2, 0xFFFFFFFF
#: where the uid is in an answer: nlmsghdr (16), then inet_diag_msg's family, state, timer and
#: retrans (4), its sockid (48), expires, rqueue and wqueue (12)
_UID_AT = 16 + 4 + 48 + 12


def _diag_owner(local: tuple[IPAddress, int], remote: tuple[IPAddress, int]) -> int | bool | None:
    """The owner of the one TCP socket ``local`` -> ``remote``, asked of the kernel (an exact
    lookup: an ``inet_diag_req_v2`` naming the socket, answered by one ``inet_diag_msg`` or an
    error); ``None`` when there is none, ``False`` when the kernel cannot be asked."""
    import socket
    import struct

    if local[0].version != remote[0].version:
        return None
    family = socket.AF_INET if local[0].version == 4 else socket.AF_INET6
    ends = struct.pack("!HH16s16s", local[1], remote[1], local[0].packed, remote[0].packed)
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + ends
    request += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    header = struct.pack("=IHHII", 16 + len(request), _BY_FAMILY, _REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.send(header + request)
            answer = diag.recv(8192)
    except OSError:
        return False
    kind = struct.unpack_from("=H", answer, 4)[0] if len(answer) >= 20 else None
    if kind == _ERROR:  # ENOENT: no such socket; any other error: not asked
        return None if struct.unpack_from("=i", answer, 16)[0] == -2 else False
    if kind == _BY_FAMILY and len(answer) >= _UID_AT + 4:
        return int(struct.unpack_from("=I", answer, _UID_AT)[0])
    return False


def _endpoint(text: bytes) -> tuple[IPAddress, int] | None:
    """``ADDRESS:PORT`` of a ``net/tcp`` row (hex, as the kernel prints them)."""
    colon = text.rfind(b":")
    raw = tcp_address(text[:colon]) if colon >= 0 else None
    port = kernel_int(text[colon + 1 :], 0xFFFF, base=16)
    return None if raw is None or port is None else (_address(raw), port)


def socket_inodes(pid: int, proc: str = PROC) -> set[int] | None:
    """The socket inodes a process holds; ``None`` when its fds cannot be read (gone, or another
    user's process)."""
    return _backend.proc_root(proc).socket_inodes(pid)


def _held(tree: Sequence[int], proc: str) -> set[int] | None:
    """The socket inodes the tree (the server first) holds, ``None`` when the server's fds
    cannot be read (a worker's that cannot be are left out)."""
    if socket_inodes(tree[0], proc) is None:
        return None
    held: set[int] = set()
    for pid in tree:
        held |= socket_inodes(pid, proc) or set()
    return held


def _holder_walk(proc: str) -> dict[int, tuple[int, ...]]:
    """Each socket inode held by the processes under ``proc`` (the first MAX_HOLDER_WALK pids),
    with the pids holding it, sorted; those whose fds cannot be read hold nothing here."""
    reader = _backend.proc_root(proc)
    held: dict[int, list[int]] = {}
    for pid in sorted(pid for pid, _inode in reader.list_pids())[:MAX_HOLDER_WALK]:
        for inode in reader.socket_inodes(pid) or ():
            held.setdefault(inode, []).append(pid)
    return {inode: tuple(pids) for inode, pids in held.items()}


def holders(inodes: Collection[int], exclude: Collection[int] = (), proc: str = PROC) -> tuple[int, ...]:
    """The pids (sorted) of processes other than ``exclude`` that hold one of ``inodes``; those
    whose fds cannot be read are not found. Within :func:`shared_tables`, from one walk."""
    if not inodes:
        return ()
    shared = _ROUND.get()
    if shared is None:
        walk = _holder_walk(proc)
    else:
        with shared.walking:
            if proc not in shared.holders:
                shared.holders[proc] = _holder_walk(proc)
        walk = shared.holders[proc]
    found = {pid for inode in set(inodes) for pid in walk.get(inode, ())}
    return tuple(sorted(found.difference(exclude)))


def overlap(a: IPAddress, b: IPAddress) -> bool:
    """Whether two listening addresses take the same connections (equal, or one a wildcard of
    the same family; ``::`` also takes IPv4 unless the socket is IPV6_V6ONLY, unknown here)."""
    if a == b:
        return True
    if a.version == b.version:
        return a in _WILDCARDS or b in _WILDCARDS
    return ipaddress.IPv6Address(0) in (a, b)


def connect_addresses(host: str) -> tuple[IPAddress, ...]:
    """The addresses a client connecting to ``host`` may reach: a canonical IP literal (brackets
    allowed; an IPv4-mapped IPv6 address is its IPv4 address) or ``localhost``; nothing for other
    names (no DNS is asked)."""
    if host == "localhost":
        return (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return ()
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    return (address,)


def listen_addresses(host: str) -> tuple[IPAddress, ...] | None:
    """The addresses a server told to listen on ``host`` may hold a socket on: ``None`` for any
    (a wildcard, or a name, which is never looked up: the server's own sockets tell), nothing for
    a host that is no address."""
    if host in ("", "0.0.0.0", "::"):
        return None
    found = connect_addresses(host)
    if found or host == "localhost":
        return found
    return None if connect_host(host) is not None else ()


def _local(address: IPAddress) -> bool:
    """Whether connecting to ``address`` stays on this host: loopback, or an address of one of
    this network namespace's interfaces (a socket bound with IP_FREEBIND may name any address)."""
    if address.is_loopback:
        return True
    return str(address) in netns_addresses(os.getpid(), HOST_ROOT)


@dataclass(frozen=True)
class TreeAddress:
    """Where a server's own process tree can be connected to on a port, found before any request:
    ``address`` is a canonical loopback or local literal of a LISTEN socket the tree holds
    (a wildcard socket is reached through loopback), ``None`` with ``problem`` saying why not;
    ``held_by`` are other processes holding a LISTEN socket there (SO_REUSEPORT, or the port is
    theirs), ``readable`` is false when the tree's fds cannot be read."""

    address: IPAddress | None
    problem: str | None = None
    held_by: tuple[int, ...] = ()
    readable: bool = True


def _reach(address: IPAddress) -> IPAddress:
    if address in _WILDCARDS:
        return ipaddress.IPv4Address("127.0.0.1") if address.version == 4 else ipaddress.IPv6Address("::1")
    return address


def target(tree: Sequence[int], host: str, port: int, proc: str = PROC) -> TreeAddress:
    """The address to connect to a server of the process tree ``tree`` (the server first) told
    to listen on ``host:port``: one of the LISTEN sockets on ``port`` that the tree holds, in the
    socket table of its network namespace, matching ``host`` (a name matches any: it is never
    resolved). Nothing else is ever a target: another process's socket on the port, a remote
    address, a socket bound to an address that is not this host's. Read from ``proc``."""
    pids = list(tree)
    wanted = listen_addresses(host)
    if wanted == ():
        return TreeAddress(None, f"host '{host}' is not an address")
    held = _held(pids, proc)
    if held is None:
        return TreeAddress(None, "its sockets cannot be read (another user's process?)", readable=False)
    found = listeners(port, pids[0], proc)
    mine = [
        listener
        for listener in found
        if listener.inode in held
        and (wanted is None or any(overlap(listener.address, address) for address in wanted))
    ]
    relevant = [
        listener
        for listener in found
        if wanted is None or any(overlap(listener.address, address) for address in wanted)
    ]
    shared = [
        listener.inode
        for listener in relevant
        if listener.inode not in held and any(overlap(listener.address, own.address) for own in mine)
    ]
    foreign = [listener.inode for listener in relevant if listener.inode not in held]
    if not mine:
        return TreeAddress(None, None, holders(foreign, pids, proc))
    # Loopback first: the same server, without leaving the loopback interface.
    mine.sort(key=lambda listener: (not _reach(listener.address).is_loopback, listener.address.version))
    address = _reach(mine[0].address)
    if not _local(address):
        return TreeAddress(None, f"it listens on {address}, which is no address of this host: not contacted")
    return TreeAddress(address, None, holders(shared, pids, proc))


def working_socket(pid: int, path: str, proc: str = PROC) -> tuple[str | None, str | None]:
    """Where the unix socket ``path`` that process ``pid`` names relative to its working
    directory is, as an absolute path inside the process's root (its ``cwd`` link, read through
    the host's door): ``(path, None)``, or ``(None, why)`` when that directory cannot be read or
    reached, ``path`` leaves it (``..``), or the whole is no path a client can connect to (over
    107 bytes, or not printable). Whether the process holds a socket there is asked when it is
    contacted (:func:`unix_listeners`), not here: a server still starting has bound none yet."""
    shown = literal(path)
    try:
        directory = proc_host(proc).working_directory(pid)
    except Refused as why:
        return None, f"socket path '{shown}' {why}: no URL"
    found = socket_in(directory, path)
    if found is None:
        return None, f"socket path '{shown}' leaves the working directory ('..'): no URL"
    if not usable_socket_path(found):
        return None, (
            f"socket path '{shown}' in the working directory is '{literal(found[:200])}', which is no"
            " path a client can connect to (over 107 bytes, or not printable): no URL"
        )
    return found, None


def unix_listeners(tree: Sequence[int], path: str, proc: str = PROC) -> frozenset[int] | None:
    """The inodes of the listening unix sockets bound at ``path`` that the process tree ``tree``
    (the server first) holds (``/proc/PID/net/unix`` matched to the tree's fds, read from
    ``proc``); ``None`` when its fds cannot be read. A socket bound at a relative path is listed
    by the kernel as given: it is at ``path`` when that name resolves against the server's
    working directory (:func:`working_socket`) to ``path``."""
    pids = list(tree)
    held = _held(pids, proc)
    if held is None:
        return None
    try:
        lines = proc_host(proc).read(pids[0], "net/unix", -1).splitlines()[1:]
    except OSError:
        return frozenset()
    wanted = os.fsencode(path)
    found = set()
    for line in lines:
        fields = line.split(maxsplit=7)
        # Num RefCount Protocol Flags Type St Inode Path; __SO_ACCEPTCON (0x10000) marks a listener.
        listening = len(fields) == 8 and fields[3] == b"00010000" and fields[6].isdigit()
        if not listening or int(fields[6]) not in held:
            continue
        name = fields[7]
        # "@": an abstract socket, which no path reaches
        relative = not name.startswith((b"/", b"@"))
        if name == wanted or (relative and working_socket(pids[0], os.fsdecode(name), proc)[0] == path):
            found.add(int(fields[6]))
    return frozenset(found)


def is_peer(pid: int, tree: Collection[int], inodes: Collection[int], proc: str = PROC) -> bool:
    """Whether ``pid``, the process that listens on a unix socket connected to (SO_PEERCRED),
    is the tree's: one of ``tree``, or a process holding one of the tree's listening sockets
    ``inodes`` (one that made it and handed it over: socket activation)."""
    if pid in tree:
        return True
    held = socket_inodes(pid, proc)
    return held is not None and not held.isdisjoint(inodes)


@dataclass(frozen=True)
class Ownership:
    """Who listens where a server should: whether its own process tree does (``None``: its fds
    could not be read), and the other processes that do."""

    ours: bool | None
    others: tuple[int, ...]


def ownership(
    tree: Iterable[int], addresses: Collection[IPAddress], port: int, proc: str = PROC
) -> Ownership:
    """Whether the process tree ``tree`` (the server first) holds a LISTEN socket that takes
    connections to one of ``addresses`` on ``port``, and which other processes hold one (read
    from ``proc``)."""
    pids = list(tree)
    relevant = [
        listener
        for listener in listeners(port, pids[0], proc)
        if any(overlap(listener.address, address) for address in addresses)
    ]
    held = _held(pids, proc)
    if held is None:
        return Ownership(None, ())
    foreign = [listener.inode for listener in relevant if listener.inode not in held]
    return Ownership(any(listener.inode in held for listener in relevant), holders(foreign, pids, proc))


def conflicts(tree: Iterable[int], port: int, proc: str = PROC) -> tuple[int, ...]:
    """Pids of other processes listening on the same address and port as the tree ``tree`` (the
    server first): SO_REUSEPORT sharing, or a more specific address bound next to a wildcard."""
    pids = list(tree)
    found = listeners(port, pids[0], proc)
    held: set[int] = set()
    for pid in pids:
        held |= socket_inodes(pid, proc) or set()
    ours = [listener for listener in found if listener.inode in held]
    foreign = [
        listener.inode
        for listener in found
        if listener.inode not in held and any(overlap(listener.address, own.address) for own in ours)
    ]
    return holders(foreign, pids, proc)
