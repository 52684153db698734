"""The agent's connections: who each client is, how many connections one client may hold, and how
long it has to send a request.

Why uvicorn, taught two things, rather than a server of our own: uvicorn (with h11) is the
maintained HTTP/1.1 parser and ASGI server the agent already relies on for headers, keep-alive,
pipelining and TLS, and its protocol class is a documented setting (``Config(http=...)``). What
it lacks is small and sits at the connection's edges: its ``limit_concurrency`` counts every
connection of every client together (64 idle connections of one user made every request 503,
before the token was even looked at), and its keep-alive timer only runs between requests, is
cancelled by any byte, and never runs before the first request (a connection that sends nothing,
or half a request head, was held forever). :func:`protocol` subclasses its h11 protocol to count
connections per client (:class:`Peers`) and to close a connection that has not sent a whole
request head within :data:`HEAD_SECONDS` of opening or of its last answer.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from enginespec.fleet.disclosure import Viewer, tcp_viewer, unix_viewer

if TYPE_CHECKING:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

#: Seconds a client has to send a whole request head, once connected or answered.
HEAD_SECONDS = 5.0
#: Connections one client (one uid on this host, else one address; one /64 for IPv6) may hold.
MAX_CONNECTIONS_PER_PEER = 32
#: Connections in all: what the process's file descriptors and memory allow. One client alone
#: never reaches it; it takes :data:`MAX_CONNECTIONS` / :data:`MAX_CONNECTIONS_PER_PEER` of them.
MAX_CONNECTIONS = 768
#: The key ``scope["state"]`` holds the client's :class:`Peer` under (the ASGI state extension).
STATE_KEY = "enginespec_peer"

_BUSY = b"too many connections from your address or user\n"
_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\n"
    b"content-length: " + str(len(_BUSY)).encode() + b"\r\n\r\n" + _BUSY
)


@dataclass(frozen=True)
class Peer:
    """One client as the agent counts it: ``key`` (``uid:N`` on this host, else its address) and
    who it is for what it may be shown (``viewer``)."""

    key: str
    viewer: Viewer


def identify(transport: asyncio.BaseTransport) -> Peer:
    """Who is at the other end of ``transport``: a unix socket's client by ``SO_PEERCRED``, a
    loopback TCP client by the owner of its socket, any other by its address."""
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX:
        viewer = unix_viewer(sock)
        return Peer(f"uid:{viewer.uid}", viewer)
    client = transport.get_extra_info("peername")
    server = transport.get_extra_info("sockname")
    if not client:
        return Peer("unknown", Viewer())
    viewer = tcp_viewer(client[:2], server[:2] if server else None)
    if viewer.uid is not None:
        return Peer(f"uid:{viewer.uid}", viewer)
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:  # a scoped IPv6 address (fe80::1%eth0): counted by its text
        return Peer(f"address:{client[0]}", viewer)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv6Address):
        # one host holds a whole /64: counted as one client
        return Peer(f"net:{ipaddress.IPv6Network((address, 64), strict=False)}", viewer)
    return Peer(f"address:{address}", viewer)


class Peers:
    """Open connections per client, shared by the server's connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._total = 0

    def admit(self, peer: Peer) -> bool:
        """Counts one more connection of ``peer``; ``False`` (not counted) over a limit."""
        with self._lock:
            held = self._open.get(peer.key, 0)
            if held >= MAX_CONNECTIONS_PER_PEER or self._total >= MAX_CONNECTIONS:
                return False
            self._open[peer.key] = held + 1
            self._total += 1
            return True

    def release(self, peer: Peer) -> None:
        with self._lock:
            left = self._open.get(peer.key, 0) - 1
            if left > 0:
                self._open[peer.key] = left
            else:
                self._open.pop(peer.key, None)
            self._total -= 1


def protocol(peers: Peers) -> type[H11Protocol]:
    """uvicorn's h11 protocol, with connections counted per client in ``peers`` (one over the
    limit is answered 503 and closed at once) and a deadline for each request head."""

    class Guarded(H11Protocol):
        def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any], **kw: Any):
            super().__init__(config, server_state, app_state, **kw)
            self._peer: Peer | None = None
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            peer = identify(transport)
            if not peers.admit(peer):
                transport.write(_REFUSED)
                transport.close()
                return
            self._peer = peer
            # a state of its own for this connection, which uvicorn copies into each request's scope
            self.app_state = {**self.app_state, STATE_KEY: peer}
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._peer is None:
                return  # refused: never counted, nothing of uvicorn's was set up
            peers.release(self._peer)
            self._peer = None
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._peer is not None:
                super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            """A whole request head is due within HEAD_SECONDS from now."""
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_due)

        def _head_due(self) -> None:
            """Closes a connection that is not in a request (answered, and no whole head since):
            idle, or sending its head (or a body after its answer) too slowly."""
            self._head_timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return Guarded
