"""A Prometheus exporter: scans and health checks run on their own schedule, and every scrape
(or textfile write, for node_exporter's textfile collector) reports the latest results.

Series follow Prometheus conventions: ``_info`` gauges valued 1, base units, no bare ``up``. The
``pid`` label is only on ``enginespec_engine_info``, so a restart does not multiply the others;
``engine_id`` is stable across restarts of the same engine, model and port.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import get_args

from prometheus_client import start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from enginespec.errors import ExporterError
from enginespec.health import check_all
from enginespec.scanning import EngineProcess, Scanner
from enginespec.status import Health, HealthState

_STATES: tuple[HealthState, ...] = get_args(HealthState)
_INFO_LABELS = (
    "engine_id",
    "engine",
    "model",
    "served_model_name",
    "host",
    "port",
    "role",
    "supervisor",
    "pid",
    "container_id",
)


@dataclass
class Snapshot:
    """The latest scan and health checks."""

    processes: list[EngineProcess] = field(default_factory=list)
    healths: list[Health] | None = None
    scan_seconds: float = 0.0
    #: processes that could not be read, summed over every scan so far.
    scan_errors: int = 0
    scans: int = 0
    #: engine_id -> when (wall clock) it was last seen running, for engines no longer running: kept
    #: as ``enginespec_engine_up 0`` for a while, so ``== 0`` alerts can fire.
    stopped: dict[str, float] = field(default_factory=dict)
    #: when the last refresh completed (wall clock); 0 before the first.
    refreshed_at: float = 0.0


def _label(value: str) -> str:
    """A label value prometheus-client can write: argv bytes that are not UTF-8 (surrogate
    escapes from /proc) become ``\\xNN`` escapes instead of failing the whole scrape."""
    return os.fsencode(value).decode("utf-8", "backslashreplace")


def _info_labels(process: EngineProcess) -> list[str]:
    # vLLM labels its own metrics with model_name = the first served name, else the model: the
    # same value here lets the two series join.
    served = process.served_model_name or process.model or ""
    values = [
        process.engine_id,
        process.engine,
        process.model or "",
        served,
        process.effective_host,
        "" if process.effective_port is None else str(process.effective_port),
        process.role,
        process.supervisor or "",
        str(process.pid),
        # the full id (empty on the host), as the runtime's API and cAdvisor's `id` name it
        process.container.id if process.container else "",
    ]
    return [_label(value) for value in values]


def _unique_ids(processes: list[EngineProcess]) -> list[str]:
    """Each process's engine_id; when two running engines have the same one (the same engine,
    model and port: sharing it through SO_REUSEPORT), the later ones get their pid appended, as
    two series with the same labels would make Prometheus reject the whole scrape."""
    seen: set[str] = set()
    ids = []
    for process in processes:
        engine_id = process.engine_id
        if engine_id in seen:
            engine_id = f"{engine_id}-pid{process.pid}"
        seen.add(engine_id)
        ids.append(engine_id)
    return ids


class EngineCollector(Collector):
    """Reports a :class:`Snapshot` (replaced whole by the scanning loop, so a scrape never sees
    half an update)."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        info = GaugeMetricFamily(
            "enginespec_engine_info", "An engine server on this host", labels=_INFO_LABELS
        )
        up = GaugeMetricFamily(
            "enginespec_engine_up", "Whether the engine's process runs", labels=["engine_id"]
        )
        ready = GaugeMetricFamily(
            "enginespec_engine_ready", "Whether the engine serves", labels=["engine_id"]
        )
        state = GaugeMetricFamily(
            "enginespec_engine_state", "The engine's health state", labels=["engine_id", "state"]
        )
        started = GaugeMetricFamily(
            "enginespec_engine_start_time_seconds", "When the engine's process started", labels=["engine_id"]
        )
        workers = GaugeMetricFamily(
            "enginespec_engine_workers", "Worker processes folded in", labels=["engine_id"]
        )
        conflict = GaugeMetricFamily(
            "enginespec_engine_port_conflict",
            "Whether another process listens on the engine's own address and port (SO_REUSEPORT)",
            labels=["engine_id"],
        )
        for index, (process, unique_id) in enumerate(
            zip(snapshot.processes, _unique_ids(snapshot.processes), strict=True)
        ):
            engine_id = [unique_id]
            info.add_metric([unique_id, *_info_labels(process)[1:]], 1)
            up.add_metric(engine_id, 1)
            started.add_metric(engine_id, process.start_time)
            workers.add_metric(engine_id, len(process.worker_pids))
            conflict.add_metric(engine_id, 1 if process.port_conflicts else 0)
            if snapshot.healths is not None:
                health = snapshot.healths[index]
                ready.add_metric(engine_id, 1 if health.ready else 0)
                for name in _STATES:
                    state.add_metric([unique_id, name], 1 if health.state == name else 0)
        for engine_id_ in sorted(snapshot.stopped):
            up.add_metric([engine_id_], 0)
        yield from (info, up, ready, state, started, workers, conflict)
        duration = GaugeMetricFamily("enginespec_scan_duration_seconds", "How long the last scan took")
        duration.add_metric([], snapshot.scan_seconds)
        yield duration
        errors = CounterMetricFamily("enginespec_scan_errors", "Processes a scan could not read")
        errors.add_metric([], snapshot.scan_errors)
        yield errors
        refreshed = GaugeMetricFamily(
            "enginespec_last_refresh_timestamp_seconds",
            "When the exporter last completed a scan and its health checks (Unix time): alert on "
            "time() - this, for an exporter that stalled",
        )
        if snapshot.refreshed_at:
            refreshed.add_metric([], snapshot.refreshed_at)
        yield refreshed


def _refresh(
    scanner: Scanner, collector: EngineCollector, health: bool, deadline: float, keep_stopped: float
) -> None:
    """One scan and its health checks, all within ``deadline`` seconds: a hung engine costs at
    most what is left of it (and is reported ``unknown``), never the next interval."""
    started = time.perf_counter()
    processes = scanner.scan()
    seconds = time.perf_counter() - started
    previous = collector.snapshot
    healths = None
    if health:
        timeout = max(deadline - seconds, 0.05)
        healths = check_all(processes, timeout=timeout)
    now = time.time()
    running = set(_unique_ids(processes))
    stopped = {
        engine_id: since
        for engine_id, since in previous.stopped.items()
        if engine_id not in running and now - since < keep_stopped
    }
    for engine_id in set(_unique_ids(previous.processes)) - running:
        stopped[engine_id] = now
    collector.snapshot = Snapshot(
        processes=processes,
        healths=healths,
        scan_seconds=seconds,
        scan_errors=previous.scan_errors + scanner.stats.unreadable,
        scans=previous.scans + 1,
        stopped=stopped,
        refreshed_at=now,
    )


def _write_textfile(textfile: str, registry: CollectorRegistry) -> None:
    try:
        write_to_textfile(textfile, registry)  # a temporary file beside it, then a rename: atomic
    except OSError as err:
        # prometheus-client's message names its temporary file: name the one asked for
        raise ExporterError(f"--textfile {textfile}: cannot write: {err.strerror or err}") from None


def run(
    *,
    host: str = "127.0.0.1",
    port: int | None = 9464,
    interval: float = 2.0,
    textfile: str | None = None,
    health: bool = True,
    keep_stopped: float = 300.0,
    stop: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
) -> None:
    """Serves ``/metrics`` on ``host:port`` (``port=None``: no server) and writes ``textfile``
    atomically after every refresh, until ``stop`` is set. Refreshes start every ``interval``
    (a slow one is cut at 80% of it: a health check not answered by then is not ready); an
    engine that stops stays as ``up 0`` for ``keep_stopped`` seconds. ``log`` gets a line when
    the server listens (node_exporter's ``Listening on address=...``).

    Raises :class:`ExporterError` naming the address or file when it cannot listen or write."""
    if port is None and not textfile:
        raise ExporterError("--port 0 serves no HTTP and no --textfile is given: nothing would be exported")
    stop = stop or threading.Event()
    registry = CollectorRegistry()
    collector = EngineCollector()
    registry.register(collector)
    scanner = Scanner()
    deadline = min(2.0, interval * 0.8)
    next_at = time.monotonic()
    _refresh(scanner, collector, health, deadline, keep_stopped)  # the first scrape has data
    if port is not None:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            server, _thread = start_http_server(port, addr=host, registry=registry)
        except OSError as err:
            raise ExporterError(f"cannot listen on {shown} (--host, --port): {err.strerror or err}") from None
        bound = server.server_address[1]
        if log is not None:
            log(f"enginespec exporter: Listening on address={shown.rsplit(':', 1)[0]}:{bound} (/metrics)")
    if textfile and log is not None:
        log(f"enginespec exporter: writing textfile={textfile}")
    while True:
        if textfile:
            _write_textfile(textfile, registry)
        # a fixed schedule: a slow refresh shortens the wait rather than stretching the period
        next_at = max(next_at + interval, time.monotonic())
        if stop.wait(next_at - time.monotonic()):
            return
        _refresh(scanner, collector, health, deadline, keep_stopped)
