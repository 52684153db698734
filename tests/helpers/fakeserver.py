"""Real HTTP servers on loopback (or a unix socket) that answer as engine servers do.

Each route has a script: a list of answers served in turn (the last one repeats). An answer can
be slow, hang, close the socket mid-response or send garbage.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import socketserver
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    hang: bool = False
    close_mid_response: bool = False
    #: seconds between the body's bytes, sent one at a time (a server that trickles).
    trickle: float = 0.0
    content_type: str = "application/json"
    #: answer only once every party of the barrier has a request in flight (503 if it breaks):
    #: proves requests are concurrent without timing them.
    barrier: threading.Barrier | None = None


def models(*ids: str) -> Answer:
    body = '{"object":"list","data":[' + ",".join(f'{{"id":"{i}","object":"model"}}' for i in ids) + "]}"
    return Answer(200, body.encode())


@dataclass
class Script:
    routes: dict[str, list[Answer]]
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: with ``FakeEngine(origins=True)``: the requests this test process made itself. Only they
    #: move a route's script on: on a busy host other watchers and exporters ask the same engines
    #: (they get the answer in turn without using it up).
    ours: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    #: every request's method, path and body (a POST's JSON, for the tests of control requests)
    bodies: list[tuple[str, str, bytes]] = field(default_factory=list)
    #: with ``FakeEngine(peers=True)``: the pids holding each request's client socket.
    peers: list[set[int]] = field(default_factory=list)
    #: requests of each path being answered now (this test process's alone with ``origins``),
    #: and the most there ever were at once
    in_flight: dict[str, int] = field(default_factory=dict)
    most_in_flight: dict[str, int] = field(default_factory=dict)

    def next_answer(
        self, method: str, path: str, headers: dict[str, str], ours: bool | None = None
    ) -> Answer:
        """``ours``: ``None`` when origins are not told apart (every request moves the script)."""
        with self.lock:
            self.seen.append((method, path, headers))
            if ours:
                self.ours.append((method, path, headers))
            answers = self.routes.get(path)
            if not answers:
                return Answer(404, b'{"error":"not found"}')
            moves = ours is None or ours
            return answers.pop(0) if len(answers) > 1 and moves else answers[0]


def _client_inodes(client: object) -> set[str]:
    """The inodes of the connecting socket (its ``(host, port)``), from the kernel's TCP table."""
    if not isinstance(client, tuple) or len(client) < 2:
        return set()
    wanted = f":{int(client[1]):04X} "
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as rows:
                for row in rows:
                    fields = row.split()
                    if len(fields) > 9 and (fields[1] + " ").endswith(wanted):
                        inodes.add(fields[9])
        except OSError:
            continue
    return inodes


def _holds(pid: str, inodes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def from_this_process(client: object) -> bool:
    """Whether the connecting socket is one of this process's own: the kernel's TCP table names
    the socket's inode, this process's fds say whether it holds it."""
    inodes = _client_inodes(client)
    return bool(inodes) and _holds("self", inodes)


def client_pids(client: object) -> set[int]:
    """The processes holding the connecting socket (read while it is connected; as root)."""
    inodes = _client_inodes(client)
    if not inodes:
        return set()
    return {int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _holds(pid, inodes)}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: Script
    stop: threading.Event
    origins: bool = False
    peers: bool = False

    def _serve(self) -> None:
        ours = from_this_process(self.client_address) if self.origins else None
        counted = ours is not False
        script, path = self.script, self.path
        with script.lock:
            script.in_flight[path] = script.in_flight.get(path, 0) + counted
            script.most_in_flight[path] = max(script.most_in_flight.get(path, 0), script.in_flight[path])
        try:
            self._answer(ours)
        except (BrokenPipeError, ConnectionResetError):
            # the client gave up (its timeout passed while the answer was delayed): nothing to say
            self.close_connection = True
        finally:
            with script.lock:
                script.in_flight[path] -= counted

    def _answer(self, ours: bool | None) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.script.lock:
            self.script.bodies.append((self.command, self.path, body))
        if self.peers:
            pids = client_pids(self.client_address)
            with self.script.lock:
                self.script.peers.append(pids)
        answer = self.script.next_answer(self.command, self.path, dict(self.headers), ours)
        if answer.hang:
            self.stop.wait(60)
            return
        if answer.delay:
            time.sleep(answer.delay)
        status = answer.status
        if answer.barrier is not None:
            try:
                answer.barrier.wait(timeout=30)
            except threading.BrokenBarrierError:
                status = 503
        self.send_response(status)
        self.send_header("Content-Type", answer.content_type)
        if answer.close_mid_response:
            self.send_header("Content-Length", str(len(answer.body) + 100))
            self.end_headers()
            self.wfile.write(answer.body[:5])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if answer.trickle:
            for index in range(len(answer.body)):
                self.wfile.write(answer.body[index : index + 1])
                self.wfile.flush()
                if self.stop.wait(answer.trickle):
                    return
            return
        self.wfile.write(answer.body)

    do_GET = _serve
    do_POST = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "test-client"


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class FakeEngine:
    """A scripted server; ``url`` is its base URL (``http+unix://...`` on a unix socket)."""

    def __init__(
        self,
        routes: dict[str, Sequence[Answer]],
        *,
        port: int = 0,
        unix_path: str | None = None,
        sock: socket.socket | None = None,
        origins: bool = False,
        peers: bool = False,
    ) -> None:
        """``sock``: a bound socket (see :func:`bound_socket`) to listen on, which a process
        standing for the engine may hold too (then the answering socket is that process's).
        ``origins``: note which requests this test process made (``script.ours``); ``peers``:
        which processes made each request (``script.peers``)."""
        self.script = Script({path: list(answers) for path, answers in routes.items()})
        self.stop = threading.Event()
        attributes = {"script": self.script, "stop": self.stop, "origins": origins, "peers": peers}
        handler = type("Handler", (_Handler,), attributes)
        self.server: socketserver.BaseServer
        if unix_path:
            self.server = _UnixServer(unix_path, handler)
            from urllib.parse import quote

            self.url = "http+unix://" + quote(unix_path, safe="")
        elif sock is not None and sock.family == socket.AF_UNIX:
            unix = _UnixServer(sock.getsockname(), handler, bind_and_activate=False)
            unix.socket.close()
            unix.socket = sock
            unix.server_activate()
            self.server = unix
            self.url = ""  # bound at a path relative to some directory: no URL of its own
        elif sock is not None:
            server = ThreadingHTTPServer(sock.getsockname(), handler, bind_and_activate=False)
            server.socket.close()
            server.socket = sock
            server.server_activate()
            server.daemon_threads = True
            self.server = server
            self.port = server.server_address[1]
            self.url = f"http://127.0.0.1:{self.port}"
        else:
            server = ThreadingHTTPServer(("127.0.0.1", port), handler)
            server.daemon_threads = True
            self.server = server
            self.port = server.server_address[1]
            self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def serving(routes: dict[str, Sequence[Answer]], **kwargs: object) -> Iterator[FakeEngine]:
    engine = FakeEngine(routes, **kwargs)  # type: ignore[arg-type]
    try:
        yield engine
    finally:
        engine.close()


@functools.cache
def _test_ports() -> list[int]:
    """Ports below and above the kernel's ephemeral range (``net.ipv4.ip_local_port_range``),
    which ``bind(0)`` and every outgoing connection draw from: no process is handed one of them
    by chance between :func:`free_port`'s check and a child's bind. The whole range where a host
    leaves nothing outside it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as text:
            low, high = map(int, text.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    outside = [port for port in range(10000, 65536) if not low <= port <= high and port != _LMDEPLOY]
    return outside if len(outside) > 1000 else list(range(low, high + 1))


_LMDEPLOY = 23333  # LMDeploy's default port: a real engine on a busy host may hold it
_handed: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``host`` now, for a process the test starts: outside the
    ephemeral range (see :func:`_test_ports`) and never the same twice in a session, so that a
    port a finished test's child just left is not taken for this one's."""
    candidates = _test_ports()
    for _ in range(1000):
        port = random.choice(candidates)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port at {host} after 1000 tries")


def bound_unix_socket(directory: Path, name: str) -> socket.socket:
    """A unix socket bound at the relative path ``name`` from ``directory`` (as a server whose
    working directory that is binds it: the kernel lists it by that relative name), not
    listening yet; for :class:`FakeEngine` (``sock``) and the process standing for the engine."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chdir(directory)
        sock.bind(name)
    finally:
        os.fchdir(here)
        os.close(here)
    sock.set_inheritable(True)
    return sock


def bound_socket() -> socket.socket:
    """A TCP socket bound to a free loopback port, not listening yet: give it to the process that
    stands for an engine (``pass_fds``) and to :class:`FakeEngine` (``sock``), so the server
    answering on the port is that process's, as ownership checks require."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.set_inheritable(True)
    return sock
