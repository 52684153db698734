"""How an engine is reached: the target of a check (its spec, URL, key and the names it may
list), the socket of its own process tree that requests go to (never just the address a process
gives), the tree itself, and the transport that checks a unix socket's peer before a byte is
sent. Health checks and load readings share it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import socket
import ssl
import stat
import struct
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit

import enginespec.process.sockets as sockets
from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import definition_of, find_engine
from enginespec.definition.signature import NOT_SERVING_REASONS, NOT_SERVING_ROLES
from enginespec.errors import InvalidInputError
from enginespec.healthrecord import HealthState
from enginespec.process.record import EngineProcess
from enginespec.process.urls import UNIX_SCHEME, checked_url

if TYPE_CHECKING:
    import httpx

# What an Authorization header value may hold (visible ASCII, RFC 9110 field-vchar).
HEADER_VALUE = re.compile(r"[\x21-\x7e]+")
_Result = TypeVar("_Result")


@dataclass(frozen=True)
class CheckTarget:
    spec: EngineDefinition
    base_url: str | None
    process: EngineProcess | None
    api_key: str | None = field(repr=False)
    expected_names: tuple[str, ...]
    #: an API key was found but cannot be sent in a header (control or non-ASCII characters).
    unusable_key: bool = False
    #: the caller gave the URL (it is theirs to choose); else it comes from the process and is
    #: only connected to through a socket the process's own tree holds.
    given_url: bool = True

    def endpoint(self) -> tuple[str, str | None]:
        """(http base URL, unix socket path or None); the probe asks for no request without one."""
        url = self.base_url or ""
        if url.startswith(UNIX_SCHEME):
            return "http://localhost", unquote(urlsplit(url).netloc)
        return url.rstrip("/"), None


@dataclass(frozen=True)
class Endpoint:
    """Where the requests of one check go: an http(s) base URL, or a unix socket path (with the
    pids one of which must be the peer of the connection, ``()`` for a caller's own socket)."""

    url: str
    socket: str | None = None
    peers: tuple[int, ...] = ()
    #: the tree's listening sockets at that path
    inodes: frozenset[int] = frozenset()
    #: the host the tree was scanned on, where who holds those sockets is read
    root: HostRoot = HOST_ROOT


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    endpoint: Endpoint
    authorized: bool = False
    body: dict[str, Any] | None = None


def target_of(target: EngineProcess | str, base_url: str | None, api_key: str | None) -> CheckTarget:
    if isinstance(target, EngineProcess):
        spec = find_engine(target.engine)
        expected = target.served_model_names or _model_names(target)
        key = api_key or target.secret_api_key()
        url = checked_url(base_url) if base_url is not None else target.base_url
    else:
        if base_url is None:
            raise InvalidInputError(f"base_url: needed to check engine {target!r} without a process")
        spec, url, key, expected = find_engine(target), checked_url(base_url), api_key, ()
    # A key with a newline or non-ASCII characters is never put in a header: httpx would raise
    # with the header (and so the key) in its message.
    usable = key is None or HEADER_VALUE.fullmatch(key) is not None
    process = target if isinstance(target, EngineProcess) else None
    given = process is None or base_url is not None
    return CheckTarget(spec, url, process, key if usable else None, expected, not usable, given)


def not_serving(process: EngineProcess) -> str | None:
    """Why ``process`` serves no HTTP API and is asked nothing (a follower, worker or orphan; a
    runner of an engine whose runners speak to their supervisor alone), or ``None``."""
    if process.role in NOT_SERVING_ROLES:
        return NOT_SERVING_REASONS[process.role]
    if process.role == "runner":
        definition = definition_of(process.engine)
        if definition is not None and not definition.serving.runners_serve_http:
            return f"a runner of {definition.id} speaks only to its supervisor, not HTTP"
    return None


def _model_names(process: EngineProcess) -> tuple[str, ...]:
    """The names a server may list its model under: as argv gives it, a relative path also
    resolved against the process's working directory (mlx_lm.server lists the absolute path), and
    a path's last component (TensorRT-LLM lists a model directory by its name: openai_server.py
    OpenAIServer.__init__ at 00057725)."""
    if not process.model:
        return ()
    model = process.model
    names = [model]
    # A repository id (`org/name`) gets candidates too: harmless, they only widen the match.
    if "/" in model or model.startswith("."):
        leaf = model.rstrip("/").rsplit("/", 1)[-1]
        if not model.startswith("/"):
            with contextlib.suppress(OSError):
                cwd = process._root.link(process.pid, "cwd")
                names.append(os.path.normpath(os.path.join(cwd, model)))
        if leaf not in ("", ".", ".."):
            names.append(leaf)
    return tuple(dict.fromkeys(names))


def endpoint_of(t: CheckTarget) -> tuple[Endpoint | None, tuple[HealthState, str]]:
    """Where to send the check's requests, decided before any is sent; or, when there is no
    socket of the engine's own process tree to send them to, its state and why it is not
    contacted. An address from a process is only ever a hint: the connection goes to a LISTEN
    socket the tree holds (by a canonical literal address of this host), to a unix socket it
    has bound and listens on, or to the root-run proxy that publishes its port."""
    assert t.base_url is not None
    if t.given_url or t.process is None:
        url, path = t.endpoint()
        return Endpoint(url, path), ("unknown", "")
    process = t.process
    root = process._root
    tree = tuple(tree_of(process))
    if t.base_url.startswith(UNIX_SCHEME):
        return _unix_endpoint(tree, unquote(urlsplit(t.base_url).netloc), root)
    if process.private_network and not process.published:
        return None, (
            "unknown",
            f"it runs in a private network namespace with no published port, so {t.base_url} may be"
            " unreachable from this host: not contacted",
        )
    parts = urlsplit(t.base_url)
    host, port = parts.hostname or "", parts.port
    if process.published:
        # Its own socket is in its own namespace, on the port the proxy forwards to.
        host, port = process.effective_host or "", process.published[0].container_port
    if port is None:
        return None, ("unknown", "no usable listen address: no port")
    found = sockets.target(tree, host, port, root.proc)
    if not found.readable or found.problem is not None:
        return None, ("unknown", f"{found.problem}: not contacted")
    if found.address is None:
        if found.held_by:
            others = ", ".join(map(str, found.held_by))
            return None, (
                "unhealthy",
                f"port {port} is held by pid {others}, not by this server (pid {tree[0]}),"
                " which listens on nothing there",
            )
        return None, ("starting", "process is up, not accepting connections yet")
    if found.held_by:
        others = ", ".join(map(str, found.held_by))
        return None, (
            "unhealthy",
            f"port {port} is shared with pid {others} (SO_REUSEPORT): requests are split between them",
        )
    if process.published:
        # Its own socket is in its own namespace; the host reaches it through root's proxy.
        return Endpoint(t.base_url.rstrip("/")), ("unknown", "")
    literal = f"[{found.address}]" if found.address.version == 6 else str(found.address)
    return Endpoint(f"{parts.scheme}://{literal}:{port}"), ("unknown", "")


def _unix_endpoint(
    tree: tuple[int, ...], path: str, root: HostRoot
) -> tuple[Endpoint | None, tuple[HealthState, str]]:
    """A unix socket the tree listens on, reached as seen from the server's root."""
    held = sockets.unix_listeners(tree, path, root.proc)
    if held is None:
        return None, ("unknown", "its sockets cannot be read (another user's process?): not contacted")
    if not held:
        return None, ("starting", f"process is up, holds no listening socket at {path}: not contacted")
    where = root.inside(path)
    with contextlib.suppress(OSError):
        if os.stat(root.path(tree[0], "root")) != os.stat(root.root):
            where = root.path(tree[0], "root") + path
    if len(os.fsencode(where)) > 107:
        return None, ("unknown", f"{where} is too long a socket path to connect to: not contacted")
    # What is there now, the last component not followed: a socket the tree bound stays a socket
    # (bind makes the file); a link or another file was put there since, and is not followed
    # (a file that is gone fails the connection, as it would anyway).
    with contextlib.suppress(OSError):
        if not stat.S_ISSOCK(os.lstat(where).st_mode):
            return None, ("unknown", f"{path} is no longer a socket (a link or another file): not contacted")
    return Endpoint("http://localhost", where, tree, held, root), ("unknown", "")


def engine_tree(pid: int, workers: Sequence[int], root: HostRoot) -> list[int]:
    """A server and its descendants now (workers may have been forked since the scan) on the
    host under ``root``, found by the backend's reading layer through the kernel's lists of each
    task's children: the cost is the tree's, not the host's (a walk of every process per engine
    made 1,024 engines cost minutes)."""
    found = root.procfs.descendants(pid)
    return [pid, *dict.fromkeys([*workers, *found])]


def tree_of(process: EngineProcess) -> list[int]:
    """An engine's tree now (:func:`engine_tree`), on the host it was scanned on."""
    return engine_tree(process.pid, process.worker_pids, process._root)


def ownership_problem(tree: Sequence[int], base_url: str | None, root: HostRoot = HOST_ROOT) -> str | None:
    """Why the server answering at ``base_url`` is not (only) the process tree ``tree`` (the
    server first): another process holds the port and the tree listens on nothing there, or
    others share its address and port (SO_REUSEPORT). ``None`` when the tree alone listens there,
    or when it cannot be told (a unix socket, a host name, fds that cannot be read). Read on the
    host under ``root``, where the tree runs."""
    if base_url is None or base_url.startswith(UNIX_SCHEME):
        return None
    parts = urlsplit(base_url)
    addresses = sockets.connect_addresses(parts.hostname or "")
    if not addresses or parts.port is None:
        return None
    owner = sockets.ownership(tree, addresses, parts.port, root.proc)
    if owner.ours is None or not owner.others:
        return None
    others = ", ".join(map(str, owner.others))
    if not owner.ours:
        return (
            f"port {parts.port} is held by pid {others}, not by this server (pid {tree[0]}),"
            " which listens on nothing there"
        )
    return f"port {parts.port} is shared with pid {others} (SO_REUSEPORT): requests are split between them"


def auth_headers(t: CheckTarget, request: Request) -> dict[str, str]:
    if request.authorized and t.api_key:
        return {"Authorization": f"Bearer {t.api_key}"}
    return {}


@functools.cache
def tls_context() -> ssl.SSLContext:
    # Built once: loading the CA bundle for every client costs tens of milliseconds of CPU, which
    # would serialise `check_all` behind the event loop.
    return ssl.create_default_context()


class PeerMismatch(Exception):
    """The unix socket connected to is not the engine tree's (its file was replaced)."""


def _backend(where: Endpoint) -> Any:
    """An httpcore network backend that, for a unix socket, checks before any byte is sent that
    the listening end is the tree's (SO_PEERCRED: the pid that listens, see sockets.is_peer), so
    a socket file swapped for another service's (a root-only one) is never sent a request."""
    import httpcore

    class Checked(httpcore.AnyIOBackend):
        async def connect_unix_socket(self, path: str, *args: Any, **kwargs: Any) -> Any:
            stream = await super().connect_unix_socket(path, *args, **kwargs)
            sock = stream.get_extra_info("socket")
            pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            if not sockets.is_peer(pid, where.peers, where.inodes, where.root.proc):
                await stream.aclose()
                raise PeerMismatch(f"the socket at {path} is held by pid {pid}, not by this server's tree")
            return stream

    return Checked()


def transport(where: Endpoint) -> httpx.AsyncHTTPTransport:
    import httpcore
    import httpx

    transport = httpx.AsyncHTTPTransport(uds=where.socket, verify=tls_context())
    if where.peers:
        # httpx takes no network backend: its pool is rebuilt with one that checks the peer.
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls_context(), uds=where.socket, network_backend=_backend(where)
        )
    return transport


def blocking(job: Coroutine[Any, Any, _Result]) -> _Result:
    """Runs a coroutine to completion from sync code (in a worker thread if this thread already
    runs an event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(job)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, job).result()


async def fetch(
    t: CheckTarget, path: str, timeout: float, limit: int, *, method: str = "GET", body: bytes | None = None
) -> tuple[int | None, bytes, str]:
    """(status, body, failure detail) of one request to ``path``, the whole request bounded by
    ``timeout`` (a server that trickles cannot hold it longer) and its answer by ``limit`` bytes
    (a larger one is a failure, not read further). Sent only to a socket the engine's own tree
    holds, found as a health check finds it (:func:`endpoint_of`): an address from a process is
    never contacted on its word."""
    return await _send(t, path, timeout, limit, method, body, None)


#: The most bytes of one line of a streamed answer (an event of server-sent events).
MAX_LINE_BYTES = 64 * 1024


async def fetch_lines(
    t: CheckTarget,
    path: str,
    timeout: float,
    limit: int,
    on_line: Callable[[bytes], bool],
    *,
    method: str = "POST",
    body: bytes | None = None,
) -> tuple[int | None, bytes, str]:
    """As :func:`fetch`, for an answer that streams lines (server-sent events): each line of a
    2xx answer (its end of line taken off) is given to ``on_line`` as it arrives, until the
    answer ends or ``on_line`` says to stop (``True``); at most ``limit`` bytes in all, and
    :data:`MAX_LINE_BYTES` a line, within ``timeout``. The body returned is an error answer's
    (a 2xx one's lines went to ``on_line``)."""
    return await _send(t, path, timeout, limit, method, body, on_line)


async def _send(
    t: CheckTarget,
    path: str,
    timeout: float,
    limit: int,
    method: str,
    body: bytes | None,
    on_line: Callable[[bytes], bool] | None,
) -> tuple[int | None, bytes, str]:
    import httpx

    if t.base_url is None:
        return None, b"", "no usable listen address: not contacted"
    where, (_state, why) = await asyncio.to_thread(endpoint_of, t)
    if where is None:
        return None, b"", why
    request = Request(method, path, where, authorized=True)
    headers = {**auth_headers(t, request), "Accept-Encoding": "identity"}
    if body is not None:
        headers["Content-Type"] = "application/json"

    async def read(client: httpx.AsyncClient) -> tuple[int, bytes]:
        async with client.stream(method, where.url + path, headers=headers, content=body) as response:
            if on_line is not None and 200 <= response.status_code < 300:
                await _lines(response, limit, on_line)
                return response.status_code, b""
            chunks, size = [], 0
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise _TooLarge
            return response.status_code, b"".join(chunks)

    try:
        async with httpx.AsyncClient(transport=transport(where), timeout=httpx.Timeout(timeout)) as client:
            status, answer = await asyncio.wait_for(read(client), timeout)
            return status, answer, ""
    except _TooLarge:
        return None, b"", f"answer larger than {limit} bytes"
    except _LineTooLong:
        return None, b"", f"a line of its answer is longer than {MAX_LINE_BYTES} bytes"
    except (asyncio.TimeoutError, httpx.TimeoutException):
        return None, b"", f"no answer within {timeout:g}s"
    except PeerMismatch as err:
        return None, b"", str(err)
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, ValueError) as err:
        return None, b"", f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


async def _lines(response: httpx.Response, limit: int, on_line: Callable[[bytes], bool]) -> None:
    """Gives each line of ``response`` to ``on_line`` (see :func:`fetch_lines`)."""
    pending, size = b"", 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE_BYTES or any(len(line) > MAX_LINE_BYTES for line in lines):
            raise _LineTooLong
        for line in lines:
            if on_line(line.removesuffix(b"\r")):
                return
    if pending:
        on_line(pending.removesuffix(b"\r"))


class _LineTooLong(Exception):
    """A line of a streamed answer over :data:`MAX_LINE_BYTES`."""


class _TooLarge(Exception):
    """An answer over its limit."""
