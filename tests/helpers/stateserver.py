"""A loopback HTTP server whose answers a test's state object decides (the fake LM Studio, the fake
TabbyAPI): JSON answers, the requests this test process made recorded in the state, served on a
socket a real process with the engine's argv holds."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from helpers.fakeserver import from_this_process


class StateHandler(BaseHTTPRequestHandler):
    """Answers GET and POST by ``_route``; its ``state`` has a ``lock`` and a ``requests`` list of
    (method, path, headers (lower-cased names), body) this test process sent. On a busy host other
    scanners (an exporter, a CI run beside) ask the same server: theirs are not kept."""

    protocol_version = "HTTP/1.1"
    state: Any

    def _send(self, status: int, document: object) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, method: str, path: str, body: bytes) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        if from_this_process(self.client_address):
            with self.state.lock:
                self.state.requests.append((self.command, self.path, headers, body))
        try:
            self._route(self.command, self.path, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = _serve
    do_POST = _serve

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving_state(sock: socket.socket, handler: type[StateHandler], state: object) -> Iterator[None]:
    """Serves ``handler`` answering from ``state`` on ``sock`` (bound, see
    ``fakeserver.bound_socket``) until the block ends."""
    bound = type("Handler", (handler,), {"state": state})
    server = ThreadingHTTPServer(sock.getsockname(), bound, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_activate()
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
