"""The exporter's ``/metrics`` as each kind of client is shown it (:class:`MetricsViews`: made
once per snapshot and kind of client, see :mod:`enginespec.fleet.disclosure`), and the HTTP server
that serves it to whoever connects (the exporter's; the agent serves the same views itself)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from enginespec.fleet.disclosure import EVERYTHING, Viewer, owners, tcp_viewer
from enginespec.process.record import EngineProcess


class ViewedSnapshot(Protocol):
    """What a view is of (``enginespec.fleet.exporter.Snapshot``): the engines of one refresh,
    and when it completed (wall clock; 0 before the first)."""

    @property
    def processes(self) -> Sequence[EngineProcess]: ...

    @property
    def refreshed_at(self) -> float: ...


class ViewedCollector(Protocol):
    """What the views are made from (``enginespec.fleet.exporter.EngineCollector``)."""

    @property
    def snapshot(self) -> ViewedSnapshot: ...

    def wait_filled(self) -> None: ...

    def series(self, snapshot: Any, viewer: Viewer, owned: list[int | None]) -> Iterator[Metric]: ...


class _View(Collector):
    def __init__(
        self, collector: ViewedCollector, snapshot: ViewedSnapshot, viewer: Viewer, owned: list[int | None]
    ):
        self._args = (snapshot, viewer, owned)
        self._collector = collector

    def collect(self) -> Iterator[Metric]:
        return self._collector.series(*self._args)


class MetricsViews:
    """The exposition text of the latest snapshot, made once per snapshot for each kind of client
    (:attr:`Viewer.key`: everything, or what one uid may see), and served from then on as it is:
    a scrape never waits on a refresh, nor makes one (but the first, see ``wait_filled``)."""

    #: kinds of client kept per snapshot (each is one exposition text)
    MAX_KEPT = 16

    def __init__(self, collector: ViewedCollector) -> None:
        self._collector = collector
        self._lock = threading.Lock()
        self._of: ViewedSnapshot | None = None
        self._owners: list[int | None] | None = None
        self._texts: dict[str, bytes] = {}

    def text(self, viewer: Viewer) -> tuple[bytes, ViewedSnapshot]:
        """The text ``viewer`` is shown, and the snapshot it is of (its ``refreshed_at`` is its age)."""
        self._collector.wait_filled()
        snapshot = self._collector.snapshot
        with self._lock:
            if self._of is not snapshot:
                self._of, self._owners, self._texts = snapshot, None, {}
            if viewer.key not in self._texts:
                if viewer.key != "all" and self._owners is None:
                    self._owners = owners(snapshot.processes)
                registry = CollectorRegistry(auto_describe=False)
                registry.register(_View(self._collector, snapshot, viewer, self._owners or []))
                if len(self._texts) >= self.MAX_KEPT:
                    self._texts.pop(next(iter(self._texts)))
                self._texts[viewer.key] = generate_latest(registry)
            return self._texts[viewer.key], snapshot


def age_headers(snapshot: ViewedSnapshot) -> list[tuple[str, str]]:
    """How old what is served is: ``Age`` (whole seconds, RFC 9111) and the refresh's wall-clock
    time, for a client that wants the fraction."""
    if not snapshot.refreshed_at:
        return []
    age = max(time.time() - snapshot.refreshed_at, 0.0)
    return [("Age", str(int(age))), ("X-Enginespec-Refreshed-At", f"{snapshot.refreshed_at:.3f}")]


#: Seconds a client of the exporter's server has to send a request once connected (or between
#: requests): an idle connection holds a thread, so it is closed.
REQUEST_SECONDS = 5.0


def serve_metrics(host: str, port: int, views: MetricsViews, token: str | None = None) -> int:
    """Serves ``/metrics`` (every path but ``/favicon.ico``, as prometheus-client does) on a daemon
    thread; the port bound. Each client is shown what it may see (see
    :mod:`enginespec.fleet.disclosure`): prometheus-client's own server cannot say who asks. A client
    that sends ``token`` (``Authorization: Bearer``) sees everything; none is refused."""
    import hmac
    import socket
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer

    class Handler(WSGIRequestHandler):
        timeout = REQUEST_SECONDS

        def get_environ(self) -> dict[str, str]:
            environ = super().get_environ()
            environ["enginespec.client"] = self.client_address
            environ["enginespec.server"] = self.server.server_address
            return environ

        def log_message(self, format: str, *args: object) -> None:
            """Nothing: a scrape is no event."""

    expected = None if token is None else f"Bearer {token}".encode()

    def app(environ: dict[str, Any], start: Callable[..., object]) -> list[bytes]:
        if environ.get("PATH_INFO") == "/favicon.ico":
            start("200 OK", [("Content-Type", "text/plain")])
            return [b""]
        client, server = environ["enginespec.client"], environ["enginespec.server"]
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1")
        if expected is not None and hmac.compare_digest(given, expected):
            viewer = EVERYTHING
        else:
            viewer = tcp_viewer(client[:2], server[:2])
        body, snapshot = views.text(viewer)
        start("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), *age_headers(snapshot)])
        return [body]

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    httpd = make_server(host, port, app, Server, handler_class=Handler)
    threading.Thread(target=httpd.serve_forever, name="enginespec-exporter-http", daemon=True).start()
    return int(httpd.server_address[1])
