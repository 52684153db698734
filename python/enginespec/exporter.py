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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import get_args

from prometheus_client import start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from enginespec.health import check_all
from enginespec.modelfacts import ModelFacts
from enginespec.processmodels import cached, peek
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
    "architecture",
    "quantization",
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


#: How long one refresh may spend reading models' files (new engines only; see processmodels).
MODEL_FACTS_SECONDS = 1.0


def _facts(process: EngineProcess) -> ModelFacts | None:
    """What the loop has read of the model of ``process`` (a scrape reads nothing)."""
    return peek(process.pid, process.start_time, process.argv)


def _label(value: str) -> str:
    """A label value prometheus-client can write: argv bytes that are not UTF-8 (surrogate
    escapes from /proc) become ``\\xNN`` escapes instead of failing the whole scrape."""
    return os.fsencode(value).decode("utf-8", "backslashreplace")


def _info_labels(process: EngineProcess) -> list[str]:
    # vLLM labels its own metrics with model_name = the first served name, else the model: the
    # same value here lets the two series join.
    served = process.served_model_name or process.model or ""
    facts = _facts(process)
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
        # from the model's files (empty when they cannot be read): see processmodels
        (facts.architecture or "") if facts else "",
        (facts.quantization or "") if facts else "",
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
        weights = GaugeMetricFamily(
            "enginespec_engine_model_weight_bytes",
            "Bytes of the model's weights, from its files",
            labels=["engine_id"],
        )
        kv_cache = GaugeMetricFamily(
            "enginespec_engine_kv_cache_bytes_estimated",
            "The KV cache the engine allocates for its arguments, by its own rule (an estimate)",
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
            facts = _facts(process)
            if facts is not None and facts.weight_bytes is not None:
                weights.add_metric(engine_id, facts.weight_bytes)
            if facts is not None and facts.estimate is not None and facts.estimate.kv_cache:
                kv_cache.add_metric(engine_id, facts.estimate.kv_cache_bytes)
            if snapshot.healths is not None:
                health = snapshot.healths[index]
                ready.add_metric(engine_id, 1 if health.ready else 0)
                for name in _STATES:
                    state.add_metric([unique_id, name], 1 if health.state == name else 0)
        yield from (info, up, ready, state, started, workers, conflict, weights, kv_cache)
        duration = GaugeMetricFamily("enginespec_scan_duration_seconds", "How long the last scan took")
        duration.add_metric([], snapshot.scan_seconds)
        yield duration
        errors = CounterMetricFamily("enginespec_scan_errors", "Processes a scan could not read")
        errors.add_metric([], snapshot.scan_errors)
        yield errors


def _refresh(scanner: Scanner, collector: EngineCollector, health: bool, timeout: float) -> None:
    started = time.perf_counter()
    processes = scanner.scan()
    seconds = time.perf_counter() - started
    # the models' facts are read here, in the loop, never in a scrape: cached per process, so
    # once per engine, and at most MODEL_FACTS_SECONDS a refresh (the rest in the next ones)
    budget = time.monotonic() + MODEL_FACTS_SECONDS
    for process in processes:
        if time.monotonic() > budget:
            break
        cached(process.pid, process.start_time, process.engine, process.model, process.argv)
    previous = collector.snapshot
    healths = check_all(processes, timeout=timeout) if health else None
    collector.snapshot = Snapshot(
        processes=processes,
        healths=healths,
        scan_seconds=seconds,
        scan_errors=previous.scan_errors + scanner.stats.unreadable,
        scans=previous.scans + 1,
    )


def run(
    *,
    host: str = "127.0.0.1",
    port: int | None = 9464,
    interval: float = 2.0,
    textfile: str | None = None,
    health: bool = True,
    stop: threading.Event | None = None,
) -> None:
    """Serves ``/metrics`` on ``host:port`` (``port=None``: no server) and writes ``textfile``
    atomically after every refresh, until ``stop`` is set."""
    stop = stop or threading.Event()
    registry = CollectorRegistry()
    collector = EngineCollector()
    registry.register(collector)
    scanner = Scanner()
    _refresh(scanner, collector, health, min(2.0, interval))
    if port is not None:
        start_http_server(port, addr=host, registry=registry)
    while True:
        if textfile:
            write_to_textfile(textfile, registry)  # a temporary file, then a rename: atomic
        if stop.wait(interval):
            return
        _refresh(scanner, collector, health, min(2.0, interval))
