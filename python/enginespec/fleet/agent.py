"""A read-only host agent: what enginespec knows of this host, over HTTP, for other hosts
(``enginespec ps --remote``), dashboards and scrapers.

``GET /v1/engines``: the ``ps --json`` objects, with health; ``GET /v1/gpus``: the host's GPUs and
what each engine holds; ``GET /metrics``: the exporter's series; ``GET /v1/events``: the watch's
events as server-sent events, in order (each ``id`` one more than the last; a client that
connects first gets a ``started`` event, and the last health event, of every engine running).
``GET /v1/engines/TARGET/models``: what the engine serves now, in the shape of llama.cpp's router
``GET /models`` (see :mod:`enginespec.fleet.agent_models`). Nothing changes anything, unless started
with ``allow_control`` (and a token): then ``POST /v1/engines/TARGET/stop`` and ``/restart`` stop
or restart an engine (see :meth:`Agent._act`), an engine restarted so being the agent's child,
stopped with it; and ``POST /v1/engines/TARGET/models/load`` and ``/models/unload``
(``{"model": NAME}``), ``/sleep`` and ``/wake`` act through the engine's own API.

It listens on loopback or a unix socket (mode 0600) unless told otherwise; any other address
needs a token (``Authorization: Bearer TOKEN``, compared in constant time), and says so at start.
A client without the token is shown no more than it could read on the host itself
(:mod:`enginespec.fleet.disclosure`).

Served by uvicorn (see :mod:`enginespec.fleet.agent_wire` for what it is taught): headers are capped at
16 KiB, a request head is due within ``HEAD_SECONDS``, connections and event streams are counted
per client (``MAX_CONNECTIONS_PER_PEER``, :data:`MAX_STREAMS_PER_PEER`), and a client that lets
more than :data:`MAX_QUEUED_BYTES` of events pile up, or takes more than :data:`SEND_SECONDS` to
take one, is disconnected. What is served is made once per refresh and shared by every client
(:class:`EngineViews`), each engine's document cut (``agentviews.ENGINE_DOCUMENT_BYTES``) (its argv
first, and saying so), so memory does not grow with other users' processes or with clients; a
request never waits on a refresh, and says how old its answer is (``Age``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import os
import re
import signal
import socket
import stat
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from enginespec.errors import InvalidInputError
from enginespec.fleet import agent_models
from enginespec.fleet.agent_views import EngineViews, SharedEvent, shared_event
from enginespec.fleet.agent_wire import STATE_KEY, Peer, Peers, protocol
from enginespec.fleet.disclosure import EVERYTHING, Viewer, owners
from enginespec.fleet.exporter import Refresher
from enginespec.fleet.metricsviews import MetricsViews, age_headers
from enginespec.fleet.metricsviews import ViewedSnapshot as Viewed
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from enginespec.untrusted.documents import dumps

if TYPE_CHECKING:
    from enginespec.lifecycle.running import RunningEngine
from enginespec.scanning.watch import (
    Changed,
    HealthChanged,
    Recovered,
    Started,
    Stopped,
    WatchEvent,
)

#: Event streams one client (see :class:`enginespec.fleet.agent_wire.Peer`) may hold open.
MAX_STREAMS_PER_PEER = 8
#: Event streams in all (memory): one client alone never reaches it.
MAX_EVENT_CLIENTS = 256
#: bytes of events held for one client before it counts as too slow and is disconnected (what is
#: held are the events every stream shares, so this bounds how long it may lag, not copies).
MAX_QUEUED_BYTES = 1024 * 1024
#: seconds one write to a client may take before it counts as gone.
SEND_SECONDS = 10.0
#: seconds between comments on an idle event stream (proxies close silent connections).
KEEPALIVE_SECONDS = 15.0
MAX_HEADER_BYTES = 16 * 1024

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Listen:
    """Where the agent listens: ``host`` and ``port``, or a unix socket ``path``."""

    host: str | None = None
    port: int | None = None
    path: str | None = None

    @property
    def loopback(self) -> bool:
        """Only this host can connect (a loopback address, or a unix socket)."""
        return self.path is not None or ipaddress.ip_address(self.host or "").is_loopback

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in (self.host or "") else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """``127.0.0.1:9465``, ``[::1]:9465``, ``0.0.0.0:9465`` or ``unix:/run/enginespec.sock``;
    :class:`InvalidInputError` naming ``--listen`` otherwise (host names are refused: an agent
    listens on an address, not on whatever a name resolves to)."""
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path.startswith("/") or not path.isprintable() or len(os.fsencode(path)) > 107:
            raise InvalidInputError(f"--listen: {text!r}: a unix socket is unix:/absolute/path")
        return Listen(path=path)
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise InvalidInputError(
            f"--listen: {text!r} is not ADDRESS:PORT (an IP address) or unix:PATH"
        ) from None
    if not colon or not port.isascii() or not 0 <= number <= 65535:
        raise InvalidInputError(f"--listen: {text!r}: the port must be 0-65535")
    return Listen(host=str(address), port=number)


#: The shortest token accepted (``openssl rand -hex 32`` makes 64 characters): a short one falls to
#: guessing, however it is compared.
MIN_TOKEN_CHARS = 32
#: The longest token file read.
MAX_TOKEN_BYTES = 4096


def read_token(path: str, flag: str = "--token-file") -> str:
    """The token in ``path`` (surrounding whitespace dropped). Refused, with
    :class:`InvalidInputError` naming ``flag``, the file and the problem, unless it is a regular
    file owned by root or this user, that neither its group nor others may read or write, and
    holding one printable ASCII token of at least :data:`MIN_TOKEN_CHARS` characters."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise InvalidInputError(f"{flag} {path}: cannot read: {err.strerror or err}") from None
    try:
        status = os.fstat(fd)  # of what was opened: a file swapped since is not what is checked
        if not stat.S_ISREG(status.st_mode):
            raise InvalidInputError(f"{flag} {path}: is not a regular file")
        if status.st_uid not in (0, os.geteuid()):
            raise InvalidInputError(
                f"{flag} {path}: owned by uid {status.st_uid}, not by root or this user "
                f"(uid {os.geteuid()}): anyone who owns it can change the token"
            )
        if status.st_mode & 0o077:
            raise InvalidInputError(
                f"{flag} {path}: mode {stat.S_IMODE(status.st_mode):04o} lets its group or others "
                "read or write it: make it 0600 or 0400"
            )
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    except OSError as err:
        raise InvalidInputError(f"{flag} {path}: cannot read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    token = data.strip()
    if len(data) > MAX_TOKEN_BYTES:
        raise InvalidInputError(f"{flag} {path}: is over {MAX_TOKEN_BYTES} bytes: not a token file")
    if not token or not token.isascii() or not token.decode().isprintable():
        raise InvalidInputError(f"{flag} {path}: holds no printable ASCII token")
    if len(token) < MIN_TOKEN_CHARS:
        raise InvalidInputError(
            f"{flag} {path}: the token is {len(token)} characters: at least {MIN_TOKEN_CHARS} are "
            "needed (openssl rand -hex 32 makes one)"
        )
    return token.decode()


class _Client:
    """One event stream: its queue lives in the server's event loop, and its ids are its own
    (each one more than the last it was sent). It holds the events every stream shares; each is
    made into this stream's bytes only as it is sent."""

    def __init__(self, loop: asyncio.AbstractEventLoop, peer: Peer, viewer: Viewer) -> None:
        self.loop = loop
        self.peer = peer
        self.viewer = viewer
        self.queue: asyncio.Queue[tuple[int, SharedEvent] | None] = asyncio.Queue()
        #: bytes queued and not yet sent: a client that lets them pile up is disconnected
        self.queued = 0
        self._next_id = 0
        self._closed = False

    def offer(self, event: SharedEvent, *, replay: bool = False) -> None:
        """In the loop: queue one event (``replay``: of what runs, when it connects, never
        counted against it); one over :data:`MAX_QUEUED_BYTES` ends the stream instead."""
        if self._closed:
            return
        self._next_id += 1
        size = len(event.shown(self.viewer))
        if not replay and self.queued + size > MAX_QUEUED_BYTES:
            self.end()
            return
        self.queued += size
        self.queue.put_nowait((self._next_id, event))

    def frame(self, queued: tuple[int, SharedEvent]) -> bytes:
        """In the loop: the bytes of an event taken from the queue (no longer counted as held)."""
        number, event = queued
        data = event.shown(self.viewer)
        self.queued -= len(data)
        return f"id: {number}\nevent: {event.kind}\ndata: {data}\n\n".encode()

    def end(self) -> None:
        """In the loop: nothing more is queued; the stream ends after what is (dropped: too slow)."""
        if not self._closed:
            self._closed = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


class EventHub:
    """The watch's events to every event stream; remembers each running engine's ``started``
    (with its latest facts) and last health event, serialised once, for clients that connect
    later."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: set[_Client] = set()
        #: open streams per client (:attr:`Peer.key`)
        self._streams: dict[str, int] = {}
        #: (pid, start time) -> [its started (or changed, as started) event, its last health event]
        self._running: dict[tuple[int, float], list[SharedEvent]] = {}
        #: why the watch ended, when it failed: no stream is served then
        self.failed: str | None = None

    def publish(self, event: WatchEvent) -> None:
        """From the watch's thread."""
        shared = shared_event(event)
        with self._lock:
            self._remember(event, shared)
            for client in self._clients:
                client.loop.call_soon_threadsafe(client.offer, shared)

    def _remember(self, event: WatchEvent, shared: SharedEvent) -> None:
        if isinstance(event, Stopped):
            self._running.pop((event.identity.pid, event.identity.start_time), None)
            return
        key = (event.process.pid, event.process.start_time)
        if isinstance(event, Started):
            self._running[key] = [shared]
        elif isinstance(event, Changed) and key in self._running:
            self._running[key][0] = shared_event(Started(monotonic=event.monotonic, process=event.process))
        elif isinstance(event, HealthChanged | Recovered) and key in self._running:
            self._running[key][1:] = [shared]

    def subscribe(self, peer: Peer, viewer: Viewer) -> _Client | str:
        """In the loop: a new stream, its queue holding what is running now; why not when
        ``peer`` holds :data:`MAX_STREAMS_PER_PEER` streams (or all hold :data:`MAX_EVENT_CLIENTS`)."""
        client = _Client(asyncio.get_running_loop(), peer, viewer)
        with self._lock:
            if self._streams.get(peer.key, 0) >= MAX_STREAMS_PER_PEER:
                return f"too many event streams from your address or user (at most {MAX_STREAMS_PER_PEER})"
            if len(self._clients) >= MAX_EVENT_CLIENTS:
                return "too many event streams"
            for remembered in self._running.values():
                for shared in remembered:
                    client.offer(shared, replay=True)
            self._clients.add(client)
            self._streams[peer.key] = self._streams.get(peer.key, 0) + 1
        return client

    def unsubscribe(self, client: _Client) -> None:
        with self._lock:
            if client in self._clients:
                self._clients.discard(client)
                left = self._streams.pop(client.peer.key, 1) - 1
                if left:
                    self._streams[client.peer.key] = left

    def close(self, failed: str | None = None) -> None:
        """Ends every stream (the agent stops, or the watch failed: ``failed`` says why)."""
        with self._lock:
            self.failed = failed
            for client in self._clients:
                client.loop.call_soon_threadsafe(client.end)


class Agent:
    """The ASGI application: the refresher's latest results, and the hub's events; with
    ``control``, ``POST /v1/engines/TARGET/stop`` and ``/restart`` too."""

    def __init__(
        self,
        refresher: Refresher,
        views: EngineViews,
        hub: EventHub,
        token: str | None,
        *,
        control: bool = False,
    ) -> None:
        self._refresher = refresher
        self._views = views
        self._metrics = MetricsViews(refresher.collector)
        self._hub = hub
        self._token = None if token is None else f"Bearer {token}".encode()
        self._control = control
        #: engines restarted through the agent: its children, stopped with it (see ``close``)
        self._children: list[RunningEngine] = []
        self._acting = asyncio.Lock()

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return
        # h11 caps an incomplete head at MAX_HEADER_BYTES; one that came whole is checked here
        if sum(len(name) + len(value) for name, value in scope["headers"]) > MAX_HEADER_BYTES:
            await _respond(send, 431, b"request headers too large\n", "text/plain")
            return
        controlled = self._control and scope["method"] == "POST" and _CONTROL.fullmatch(scope["path"])
        routed = agent_models.ROUTE.fullmatch(scope["path"])
        reading = routed is not None and routed["action"] == "models" and scope["method"] in ("GET", "HEAD")
        acting = (
            routed is not None
            and routed["action"] != "models"
            and self._control
            and scope["method"] == "POST"
        )
        if scope["method"] not in ("GET", "HEAD") and not (controlled or acting):
            await _respond(send, 405, b"only GET\n", "text/plain", [(b"allow", b"GET, HEAD")])
            return
        if self._token is not None:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._token):
                await _respond(
                    send, 401, b"a token is required\n", "text/plain", [(b"www-authenticate", b"Bearer")]
                )
                return
        path = scope["path"]
        peer: Peer = scope["state"][STATE_KEY]
        # with a token, every request holds it (checked above): it sees everything
        viewer = EVERYTHING if self._token is not None else peer.viewer
        if controlled:
            await self._act(scope, send)
        elif routed is not None and (reading or acting):
            await self._models(routed["target"], routed["action"], receive, send, viewer)
        elif path in ("/v1/engines", "/v1/gpus"):
            body, snapshot = self._views.engines(viewer) if path == "/v1/engines" else self._views.gpus()
            await _respond(send, 200, body, "application/json", _aged(snapshot))
        elif path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST

            # made once per snapshot and kind of client, off the event loop
            body, viewed = await asyncio.to_thread(self._metrics.text, viewer)
            await _respond(send, 200, body, CONTENT_TYPE_LATEST, _aged(viewed))
        elif path == "/v1/events" and scope["method"] == "HEAD":
            await _respond(send, 200, b"", "text/event-stream")
        elif path == "/v1/events":
            await self._events(receive, send, peer, viewer)
        else:
            body = (
                b"not found: GET /v1/engines, /v1/engines/TARGET/models, /v1/events, /v1/gpus or /metrics\n"
            )
            await _respond(send, 404, body, "text/plain")

    async def _act(self, scope: _Scope, send: _Send) -> None:
        """``POST /v1/engines/TARGET/stop|restart[?grace=SECONDS]``: TARGET is an engine id (as
        ``/v1/engines`` and the exporter name it) or a pid of the latest refresh. The engine is
        adopted (pinned by its pid and start time: a process that took its pid since is never
        signalled) and stopped, or restarted with the command, environment and owner it ran with."""
        from urllib.parse import parse_qs

        match = _CONTROL.fullmatch(scope["path"])
        assert match is not None
        target, action = match["target"], match["action"]
        query = parse_qs(scope.get("query_string", b"").decode("ascii", "replace"))
        try:
            grace = float(query.get("grace", ["10"])[0])
        except ValueError:
            grace = -1.0
        if not 0 <= grace <= MAX_GRACE:
            await _respond(send, 400, f"grace: 0 to {MAX_GRACE:g} seconds\n".encode(), "text/plain")
            return
        snapshot = self._refresher.collector.snapshot
        found = [
            p
            for p, name in zip(snapshot.processes, snapshot.ids, strict=True)
            if target in (name, str(p.pid))
        ]
        if not found:
            await _respond(
                send, 404, f"no engine {target!r} (GET /v1/engines lists them)\n".encode(), "text/plain"
            )
            return
        async with self._acting:  # one at a time: two restarts never start two copies
            status, document, child = await asyncio.to_thread(_control, found[0], action, grace)
        if child is not None:
            self._children.append(child)
        await _respond(send, status, _json(document), "application/json")

    async def _models(self, target: str, action: str, receive: _Receive, send: _Send, viewer: Viewer) -> None:
        """The model routes (:mod:`enginespec.fleet.agent_models`): what the engine ``target``
        serves, shown to a client who may see all of it; load, unload, sleep and wake."""
        snapshot = self._refresher.collector.snapshot
        found = [
            (p, owner)
            for p, name, owner in zip(
                snapshot.processes, snapshot.ids, owners(snapshot.processes), strict=True
            )
            if target in (name, str(p.pid))
        ]
        if not found:
            status, document = agent_models.error(404, f"no engine {target!r} (GET /v1/engines lists them)")
        elif not viewer.sees_all_of(found[0][1]):
            status, document = agent_models.error(
                403, "what an engine serves is shown to root, its owner or a client with the token"
            )
        else:
            body = await _body(receive, agent_models.MAX_BODY_BYTES)
            if body is None:
                status, document = agent_models.error(413, f"a body over {agent_models.MAX_BODY_BYTES} bytes")
            else:
                status, document = await asyncio.to_thread(agent_models.answer, found[0][0], action, body)
        await _respond(send, status, _json(document), "application/json")

    def close(self) -> None:
        """Stops the engines restarted through the agent: they are its children, their output
        read through pipes it holds."""
        for child in self._children:
            child.close()

    async def _events(self, receive: _Receive, send: _Send, peer: Peer, viewer: Viewer) -> None:
        if self._hub.failed is not None:
            await _respond(send, 503, f"the watch failed: {self._hub.failed}\n".encode(), "text/plain")
            return
        client = self._hub.subscribe(peer, viewer)
        if isinstance(client, str):
            await _respond(send, 503, f"{client}\n".encode(), "text/plain")
            return
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        gone = asyncio.ensure_future(_disconnected(receive))

        async def write(body: bytes, more: bool = True) -> bool:
            """Sends a part; ``False`` when the client took longer than SEND_SECONDS (gone)."""
            try:
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": body, "more_body": more}), SEND_SECONDS
                )
            except asyncio.TimeoutError:
                return False
            return True

        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                taken = asyncio.ensure_future(client.queue.get())
                done, _ = await asyncio.wait(
                    {taken, gone}, timeout=KEEPALIVE_SECONDS, return_when="FIRST_COMPLETED"
                )
                if gone in done:
                    taken.cancel()
                    return
                if taken not in done:
                    taken.cancel()
                    if not await write(b": keepalive\n\n"):
                        return
                    continue
                queued = taken.result()
                if queued is None:  # too slow, or the agent stops
                    await write(b"", more=False)
                    return
                if not await write(client.frame(queued)):
                    return
        finally:
            gone.cancel()
            self._hub.unsubscribe(client)


#: The control paths (``--allow-control``).
_CONTROL = re.compile(r"/v1/engines/(?P<target>[A-Za-z0-9._-]{1,200})/(?P<action>stop|restart)")
#: The longest grace a control request may give between SIGTERM and SIGKILL.
MAX_GRACE = 300.0


def _control(
    process: EngineProcess, action: str, grace: float
) -> tuple[int, dict[str, Any], RunningEngine | None]:
    """Stops or restarts ``process`` (on a worker thread): the HTTP status, what was done, and
    the engine restarted (now the agent's child). A failure is the answer, never an exception."""
    from enginespec.errors import EngineSpecError
    from enginespec.lifecycle.running import adopt

    try:
        engine = adopt(process)
    except EngineSpecError as err:  # gone since the refresh
        return 409, {"error": str(err)}, None
    try:
        if action == "stop":
            stopped = engine.stop(grace).model_dump(mode="json")
            engine.close()
            return 200, {"action": "stop", "pid": process.pid, "result": stopped}, None
        restarted = engine.restart(grace).model_dump(mode="json")
    except (EngineSpecError, OSError) as err:  # its command unreadable, or it failed to start again
        engine.close()
        return 409, {"error": str(err)}, None
    return 200, {"action": "restart", "pid": engine.pid, "result": restarted}, engine


def _aged(snapshot: Viewed) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode(), value.encode()) for name, value in age_headers(snapshot)]


async def _body(receive: _Receive, limit: int) -> bytes | None:
    """A request's body, ``None`` when it is over ``limit`` bytes (not read further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _disconnected(receive: _Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _respond(
    send: _Send, status: int, body: bytes, content_type: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    start = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": start + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def _json(document: object) -> bytes:
    return dumps(document, indent=None, ensure_ascii=True).encode("ascii")


def _bind(where: Listen) -> socket.socket:
    """The listening socket, made here so its address (a port 0 chosen) is known before serving and a
    unix socket is 0600 from the start."""
    if where.path is not None:
        with contextlib.suppress(FileNotFoundError):
            if not _is_socket(where.path):
                raise InvalidInputError(f"--listen unix:{where.path}: exists and is not a socket")
            if _answers(where.path):
                raise InvalidInputError(f"--listen unix:{where.path}: another process listens there")
            os.unlink(where.path)  # a socket left by an agent that is gone
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(where.path)
        finally:
            os.umask(old)
    else:
        family = socket.AF_INET6 if ":" in (where.host or "") else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((where.host, where.port))
    sock.listen(128)
    return sock


def _answers(path: str) -> bool:
    """Whether something accepts connections on the unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _is_socket(path: str) -> bool:
    return stat.S_ISSOCK(os.lstat(path).st_mode)


def serve(
    listen: str = "127.0.0.1:9465",
    *,
    token_file: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    interval: float = 2.0,
    allow_control: bool = False,
    log: Callable[[str], None] | None = None,
) -> None:
    """Runs the agent until SIGINT or SIGTERM; ``allow_control`` (which needs a token, even on
    loopback) adds ``POST /v1/engines/TARGET/stop`` and ``/restart``. Raises
    :class:`InvalidInputError` naming the flag for a bad ``listen``, a missing token off loopback
    or with control, an unreadable token, certificate or key, or an address that cannot be
    listened on."""
    import uvicorn

    where = parse_listen(listen)
    token = read_token(token_file) if token_file is not None else None
    if token is None and not where.loopback:
        raise InvalidInputError(f"--listen {where}: not loopback, so a token is required: give --token-file")
    if allow_control and token is None:
        raise InvalidInputError("--allow-control: stopping and restarting engines requires --token-file")
    if (certfile is None) != (keyfile is None):
        raise InvalidInputError("--certfile and --keyfile go together")
    for flag, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        if path is not None and not os.access(path, os.R_OK):
            raise InvalidInputError(f"{flag} {path}: cannot read")
    try:
        sock = _bind(where)
    except OSError as err:
        raise InvalidInputError(f"--listen {where}: cannot listen: {err.strerror or err}") from None
    if where.port == 0:
        where = Listen(host=where.host, port=sock.getsockname()[1])
    refresher = Refresher(interval=interval, models=True)
    views = EngineViews(refresher.collector)
    views.update()
    hub = EventHub()
    stop = threading.Event()
    watch = Scanner().watch(health=True, models=True)

    def relay() -> None:
        try:
            for event in watch:
                hub.publish(event)
        except Exception as err:  # said, and every stream ends: remote watchers see the host lost
            if not stop.is_set():
                if log is not None:
                    log(f"enginespec agent: the watch failed: {err}")
                hub.close(failed=str(err) or type(err).__name__)

    threads = [
        threading.Thread(
            target=refresher.run, args=(stop, views.update), name="enginespec-refresh", daemon=True
        ),
        threading.Thread(target=relay, name="enginespec-events", daemon=True),
    ]
    for thread in threads:
        thread.start()
    app = Agent(refresher, views, hub, token, control=allow_control)
    config = uvicorn.Config(
        app,
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        # connections are counted per client, and a request head is due in time: agentwire
        http=protocol(Peers()),
        # X-Forwarded-For from a loopback client would otherwise pass for its address
        proxy_headers=False,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=1,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
    )
    if log is not None:
        scheme = "https" if certfile else "http"
        guard = "token required" if token is not None else "no token: loopback only"
        guard += "; control: stop, restart and models allowed" if allow_control else ""
        log(f"enginespec agent: Listening on address={where} ({scheme}; {guard})")
    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises the signal that stopped it once it has: end by an exception, so the
        # socket is removed below, rather than by the default action
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.default_int_handler)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        stop.set()
        hub.close()
        app.close()
        watch.close()
        # none may still be in the native scanner (without the GIL) when the interpreter ends
        threads[0].join(timeout=interval + 5.0)
        sock.close()
        if where.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(where.path)
