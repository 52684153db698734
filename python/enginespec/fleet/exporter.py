"""A Prometheus exporter: scans and health checks run on their own schedule, and every scrape
(or textfile write, for node_exporter's textfile collector) reports the latest results.

Series follow Prometheus conventions: ``_info`` gauges valued 1, base units, no bare ``up``. The
``pid`` label is only on ``enginespec_engine_info``, so a restart does not multiply the others;
``engine_id`` is stable across restarts of the same engine, model and port.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from enginespec.definition.modelrecords import ModelFacts
from enginespec.definition.registry import find_engine as definition_of_engine
from enginespec.errors import ExporterError, FileWriteError
from enginespec.fleet.disclosure import EVERYTHING, Viewer, withheld_facts
from enginespec.fleet.gpuseries import gpu_label, gpu_metrics, gpu_samples, label_value
from enginespec.fleet.latencyseries import SERVED_MODEL, by_model, latency_families
from enginespec.fleet.metricsviews import MetricsViews, serve_metrics
from enginespec.gpus.energy import CpuEnergy, CpuEnergyReader
from enginespec.gpus.reader import GpuDevice
from enginespec.health.checks import check_all, kept, request_timeout
from enginespec.health.load import EngineLoad
from enginespec.health.servedmodels import ModelState, ServedModels, by_argv, served_models_all
from enginespec.health.vitals import EngineMonitor
from enginespec.healthrecord import Health, HealthState
from enginespec.models.processes import cached, peek
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner, gpu_ledger, trees, unique_instance_ids
from enginespec.untrusted.boundary import contained, failed
from enginespec.untrusted.boundary import failures as failures_by_stage
from enginespec.untrusted.safewrite import replace_file

_STATES: tuple[HealthState, ...] = get_args(HealthState)
#: The labels every per-engine series carries, so any two join without ``group_left``: the engine's
#: id (stable across restarts), its engine, and its model as people name it (``Qwen/Qwen3-0.6B``:
#: ``EngineProcess.model_name``). The rest is on ``enginespec_engine_info``, joined on ``engine_id``.
IDENTITY = ("engine_id", "engine", "model")
_INFO_LABELS = (
    *IDENTITY,
    # the exact model argument (a snapshot's path, a blob), as the engine was given it
    "model_path",
    "served_model_name",
    "host",
    "port",
    "role",
    "supervisor",
    "pid",
    "container_id",
    "architecture",
    "quantization",
    # the engine's release (EngineProcess.engine_version): a binary engine's is empty until a
    # health check found it ready and it said (one change of this series' labels, then none)
    "engine_version",
    # the fork of the engine (EngineProcess.fork: ik_llama.cpp), empty for the engine itself
    "fork",
)

_Kind = Literal["gauge", "counter"]
#: The series of each engine: (name, help, labels after the identity, kind), served in this order.
_ENGINE_FAMILIES: tuple[tuple[str, str, tuple[str, ...], _Kind], ...] = (
    ("enginespec_engine_info", "An engine server on this host", _INFO_LABELS[len(IDENTITY) :], "gauge"),
    ("enginespec_engine_up", "Whether the engine's process runs", (), "gauge"),
    ("enginespec_engine_ready", "Whether the engine serves", (), "gauge"),
    ("enginespec_engine_state", "The engine's health state", ("state",), "gauge"),
    ("enginespec_engine_start_time_seconds", "When the engine's process started", (), "gauge"),
    ("enginespec_engine_workers", "Worker processes folded in", (), "gauge"),
    (
        "enginespec_engine_port_conflict",
        "Whether another process listens on the engine's own address and port (SO_REUSEPORT)",
        (),
        "gauge",
    ),
    ("enginespec_engine_model_weight_bytes", "Bytes of the model's weights, from its files", (), "gauge"),
    (
        "enginespec_engine_kv_cache_bytes_estimated",
        "The KV cache the engine allocates for its arguments, by its own rule (an estimate)",
        (),
        "gauge",
    ),
    (
        "enginespec_engine_health_stale",
        "Whether the engine's health is an earlier refresh's, kept because this one's check did "
        "not finish in time (a loaded host)",
        (),
        "gauge",
    ),
    (
        "enginespec_engine_health_checked_timestamp_seconds",
        "When (Unix time) the engine's health verdict was reached",
        (),
        "gauge",
    ),
    (
        "enginespec_engine_withheld",
        "A fact of the engine this client may not read on the host (its owner's environment, "
        "config file or model files), left out: 1 per label or series",
        ("field",),
        "gauge",
    ),
    ("enginespec_engine_gpu_memory_bytes", "GPU memory the engine's process tree holds", ("gpu",), "gauge"),
    (
        "enginespec_engine_cpu_power_watts",
        "Its share of the CPU packages' power, by CPU time",
        ("rule",),
        "gauge",
    ),
    (
        "enginespec_engine_cpu_energy_joules",
        "CPU packages' energy given it by CPU time",
        ("rule",),
        "counter",
    ),
    (
        "enginespec_engine_power_watts",
        "The engine's share of a GPU's power (its mean over the last window between two readings), "
        "by the rule named in rule (utilization or memory)",
        ("gpu", "rule"),
        "gauge",
    ),
    (
        "enginespec_engine_energy_joules",
        "A GPU's energy attributed to the engine while the exporter watched, by the rule named in rule",
        ("gpu", "rule"),
        "counter",
    ),
    ("enginespec_engine_requests_running", "Requests the engine runs", (), "gauge"),
    ("enginespec_engine_requests_waiting", "Requests waiting in its queue", (), "gauge"),
    ("enginespec_engine_kv_cache_usage_ratio", "Share of the KV cache in use (0 to 1)", (), "gauge"),
    ("enginespec_engine_generated_tokens", "Tokens generated, as the engine counts them", (), "counter"),
    ("enginespec_engine_tokens_per_second", "Tokens generated per second between two readings", (), "gauge"),
    # what a server whose models come and go serves (`--models`): `model` is the served model's name
    (
        "enginespec_model_state",
        "A model a server serves now: 1 for its state, 0 for the others",
        ("state",),
        "gauge",
    ),
    (
        "enginespec_model_gpu_memory_bytes",
        "GPU memory a served model's runner holds, or the engine's own figure",
        (),
        "gauge",
    ),
    (
        "enginespec_model_expiry_timestamp_seconds",
        "When (Unix time) the engine unloads the model unless it is used",
        (),
        "gauge",
    ),
)
_MODEL_STATES: tuple[ModelState, ...] = get_args(ModelState)
#: The load series (``--load``), in the order of their figures (see :func:`_load_samples`).
_LOAD_FAMILIES = (
    "enginespec_engine_requests_running",
    "enginespec_engine_requests_waiting",
    "enginespec_engine_kv_cache_usage_ratio",
    "enginespec_engine_generated_tokens",
    "enginespec_engine_tokens_per_second",
)


@dataclass(frozen=True)
class StoppedEngine:
    """An engine no longer running, kept as ``enginespec_engine_up 0`` for ``--keep-stopped``
    under the labels it had (its owner unknown once it is gone: a private model is shown only to
    a client that sees everything)."""

    since: float
    engine: str
    model: str
    model_private: bool


@dataclass
class Snapshot:
    """The latest scan and health checks."""

    processes: list[EngineProcess] = field(default_factory=list)
    #: each process's instance id in the series, its ``engine_id`` label (see
    #: :func:`unique_instance_ids`), kept while it runs.
    ids: list[str] = field(default_factory=list)
    healths: list[Health] | None = None
    #: each engine's load reading, with ``--load`` (``run(load=True)``).
    loads: list[EngineLoad | None] | None = None
    #: what each engine whose models come and go serves, with ``--models``.
    models: list[ServedModels | None] | None = None
    scan_seconds: float = 0.0
    #: processes that could not be read, summed over every scan so far.
    scan_errors: int = 0
    scans: int = 0
    #: the host's GPUs, when it has any.
    gpus: tuple[GpuDevice, ...] = ()
    #: each engine's share of the CPU packages' energy (by CPU time), when RAPL says.
    cpu_energy: list[CpuEnergy] | None = None
    #: instance id -> when (wall clock) it was last seen running and its labels, for engines no
    #: longer running: kept as ``enginespec_engine_up 0`` for a while, so ``== 0`` alerts can fire.
    stopped: dict[str, StoppedEngine] = field(default_factory=dict)
    #: when the last refresh completed (wall clock); 0 before the first.
    refreshed_at: float = 0.0
    #: refreshes that failed as a whole, summed: each kept the snapshot before it (this one).
    refresh_failures: int = 0
    #: why the latest refresh failed, when it did ("" once one succeeds again).
    refresh_problem: str = ""

    def age(self, now: float | None = None) -> float | None:
        """Seconds since this snapshot's refresh completed (``now``: ``time.time()``), ``None``
        before the first: what a server of it says, rather than make a request wait on a refresh."""
        return None if not self.refreshed_at else max((now or time.time()) - self.refreshed_at, 0.0)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.processes):
            self.ids = unique_instance_ids(self.processes)
        if self.cpu_energy is not None and len(self.cpu_energy) != len(self.processes):
            self.cpu_energy = None


#: How long a scrape waits for the first refresh (which the server listens before): longer than
#: a refresh's deadline (2 s) and its scan, shorter than Prometheus's default scrape timeout.
FIRST_REFRESH_WAIT = 8.0
#: How long one refresh may spend reading models' files (new engines only; see processmodels).
MODEL_FACTS_SECONDS = 1.0


def _facts(process: EngineProcess) -> ModelFacts | None:
    """What the loop has read of the model of ``process`` (a scrape reads nothing)."""
    return peek(process.pid, process.start_time, process.argv, process._root)


#: The labels a withheld fact empties (see :mod:`enginespec.fleet.disclosure`); ``served_model_name``
#: falls back to the model, so it goes with either. The model's facts are read from its files as
#: the engine's owner: they go to whoever may not see all of it.
_WITHHELD_LABELS = {
    "model": ("model", "model_path", "served_model_name"),
    "served_model_name": ("served_model_name",),
    "host": ("host",),
    "port": ("port",),
}
_MODEL_FACT_LABELS = ("architecture", "quantization")


def _withheld_labels(process: EngineProcess) -> tuple[str, ...]:
    """The info labels (and ``model_facts``, for the model's gauges) a client that may not see
    all of ``process`` is not shown."""
    names = {name for fact in withheld_facts(process) for name in _WITHHELD_LABELS[fact]}
    return (*sorted(names), *_MODEL_FACT_LABELS, "model_facts")


def _info_labels(process: EngineProcess, instance_id: str, withheld: tuple[str, ...] = ()) -> list[str]:
    """The values of :data:`_INFO_LABELS` (its first ones are :data:`IDENTITY`; ``instance_id`` is
    the engine's in the series, see :func:`unique_instance_ids`), less the withheld."""
    # vLLM labels its own metrics with model_name = the first served name, else the model: the
    # same value here lets the two series join.
    served = process.served_model_name or process.model or ""
    facts = None if "model_facts" in withheld else _facts(process)
    values = [
        instance_id,
        process.engine,
        "" if "model" in withheld else process.model_name or "",
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
        process.engine_version or "",
        process.fork or "",
    ]
    return [
        "" if name in withheld else label_value(value)
        for name, value in zip(_INFO_LABELS, values, strict=True)
    ]


class EngineCollector(Collector):
    """Reports a :class:`Snapshot` (replaced whole by the scanning loop, so a scrape never sees
    half an update)."""

    def __init__(self) -> None:
        self._snapshot = Snapshot()
        self._filled = threading.Event()
        #: attributes the CPU packages' energy between refreshes (per root scanned)
        self.cpu_energy: dict[str, CpuEnergyReader] = {}

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @snapshot.setter
    def snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._filled.set()

    @property
    def filled(self) -> bool:
        """Whether a refresh has given it a snapshot."""
        return self._filled.is_set()

    def wait_filled(self) -> None:
        """A scrape that comes while the first refresh runs (the server listens before it) waits
        for it rather than reading an empty host."""
        self._filled.wait(FIRST_REFRESH_WAIT)

    def collect(self) -> Iterator[Metric]:
        self.wait_filled()
        yield from self.series(self._snapshot, EVERYTHING, [])

    def series(self, snapshot: Snapshot, viewer: Viewer, owned: list[int | None]) -> Iterator[Metric]:
        """The series of ``snapshot`` as ``viewer`` may see them (``owned``: each process's owner;
        empty for a viewer who sees everything): what it may not is emptied, and named in
        ``enginespec_engine_withheld``."""
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            name: (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                name, documentation, labels=[*IDENTITY, *labels]
            )
            for name, documentation, labels, kind in _ENGINE_FAMILIES
        }
        gpu_labels = {device.device: gpu_label(device) for device in snapshot.gpus}
        for index in range(len(snapshot.processes)):
            sees_all = viewer.sees_all_of(owned[index] if owned else None)
            for name, labels, value in _samples_of(snapshot, index, sees_all, gpu_labels):
                families[name].add_metric(labels, value)
        for instance_id, gone in sorted(snapshot.stopped.items()):
            model = gone.model if viewer.sees_all_of(None) or not gone.model_private else ""
            families["enginespec_engine_up"].add_metric([instance_id, gone.engine, model], 0)
        yield from families.values()
        if snapshot.loads is not None:
            identity = functools.partial(_identity, snapshot, viewer, owned)
            yield from latency_families(snapshot.loads, identity, IDENTITY)
        yield from gpu_metrics(snapshot.gpus, gpu_labels)
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
        failures = CounterMetricFamily(
            "enginespec_refresh_failures",
            "Refreshes that failed as a whole (each kept the results of the one before)",
        )
        failures.add_metric([], snapshot.refresh_failures)
        yield failures
        contained = CounterMetricFamily(
            "enginespec_engine_failures",
            "Computations for one engine that failed and were contained (that engine's facts "
            "unknown, with the reason; the others unaffected), by stage",
            labels=["stage"],
        )
        for stage, count in sorted(failures_by_stage().items()):
            contained.add_metric([stage], count)
        yield contained


_Sample = tuple[str, list[str], float]


def _samples_of(snapshot: Snapshot, index: int, sees_all: bool, gpu_labels: dict[str, str]) -> list[_Sample]:
    """The samples of one engine (:func:`_engine_samples`, its GPU memory and its load), with what
    a viewer who may not see all of it is not shown withheld, or none when they cannot be made:
    one engine's odd facts (what is withheld of it included) never fail the whole scrape, and
    never show what was to be withheld."""
    process = snapshot.processes[index]

    def samples() -> list[_Sample]:
        hidden = () if sees_all else _withheld_labels(process)
        identity = _info_labels(process, snapshot.ids[index], hidden)[: len(IDENTITY)]

        def extras() -> list[_Sample]:
            return (
                gpu_samples(process, identity, gpu_labels)
                + _cpu_samples(snapshot, index, identity)
                + _load_samples(snapshot, index, identity)
                + _model_samples(snapshot, index, identity, sees_all)
                + _served_model_withheld(snapshot, index, identity, hidden)
            )

        # a load that cannot be shown leaves the engine's own series
        return _engine_samples(snapshot, index, hidden) + contained("load metrics", extras, lambda _r: [])

    return contained("metrics", samples, lambda _reason: [])


def _engine_samples(snapshot: Snapshot, index: int, hidden: tuple[str, ...]) -> list[_Sample]:
    """The samples of engine ``index`` of ``snapshot``, by family name, every value a float (a
    value that is none fails here, not in the exposition), less the ``hidden`` labels and series
    (see :func:`_withheld_labels`), each named in ``enginespec_engine_withheld``."""
    process = snapshot.processes[index]
    info = _info_labels(process, snapshot.ids[index], hidden)
    id_label = info[: len(IDENTITY)]  # the labels of every series of the engine
    samples: list[_Sample] = [("enginespec_engine_withheld", [*id_label, name], 1.0) for name in hidden]
    samples += [
        ("enginespec_engine_info", info, 1.0),
        ("enginespec_engine_up", id_label, 1.0),
        ("enginespec_engine_start_time_seconds", id_label, float(process.start_time)),
        ("enginespec_engine_workers", id_label, float(len(process.worker_pids))),
        ("enginespec_engine_port_conflict", id_label, 1.0 if process.port_conflicts else 0.0),
    ]
    facts = None if hidden else _facts(process)
    if facts is not None and facts.weight_bytes is not None:
        samples.append(("enginespec_engine_model_weight_bytes", id_label, float(facts.weight_bytes)))
    if facts is not None and facts.estimate is not None and facts.estimate.kv_cache:
        samples.append(
            ("enginespec_engine_kv_cache_bytes_estimated", id_label, float(facts.estimate.kv_cache_bytes))
        )
    if snapshot.healths is not None:
        health = snapshot.healths[index]
        samples.append(("enginespec_engine_ready", id_label, 1.0 if health.ready else 0.0))
        samples.extend(
            ("enginespec_engine_state", [*id_label, name], 1.0 if health.state == name else 0.0)
            for name in _STATES
        )
        samples.append(("enginespec_engine_health_stale", id_label, 1.0 if health.stale else 0.0))
        if health.checked_at is not None:
            samples.append(
                ("enginespec_engine_health_checked_timestamp_seconds", id_label, float(health.checked_at))
            )
    return samples


def _cpu_samples(snapshot: Snapshot, index: int, identity: list[str]) -> list[_Sample]:
    """The engine's share of the CPU packages' power and energy, where known."""
    share = None if snapshot.cpu_energy is None else snapshot.cpu_energy[index]
    figures = (("power_watts", share.power_watts), ("energy_joules", share.energy_joules)) if share else ()
    return [(f"enginespec_engine_cpu_{n}", [*identity, "cpu_time"], v) for n, v in figures if v is not None]


def _load_samples(snapshot: Snapshot, index: int, identity: list[str]) -> list[_Sample]:
    """The load of engine ``index``, when it reports it (``--load``); a figure the engine does not
    report has no sample, never 0."""
    load = None if snapshot.loads is None else snapshot.loads[index]
    if load is None or not load.available:
        return []
    figures = (
        load.requests_running,
        load.requests_waiting,
        load.kv_cache_usage,
        load.generated_tokens_total,
        load.tokens_per_second,
    )
    return [
        (name, identity, float(value))
        for name, value in zip(_LOAD_FAMILIES, figures, strict=True)
        if value is not None
    ]


def _identity(
    snapshot: Snapshot, viewer: Viewer, owned: list[int | None], index: int
) -> tuple[list[str], bool]:
    """The identifying labels of engine ``index`` as ``viewer`` may see them, and whether it may
    see the names of its served models (see :func:`_served_model_withheld`)."""
    process = snapshot.processes[index]
    hidden = () if viewer.sees_all_of(owned[index] if owned else None) else _withheld_labels(process)
    return _info_labels(process, snapshot.ids[index], hidden)[
        : len(IDENTITY)
    ], "served_model_name" not in hidden


def _served_model_withheld(
    snapshot: Snapshot, index: int, identity: list[str], hidden: tuple[str, ...]
) -> list[_Sample]:
    """The latency series name served models as the engine labels them (vLLM's ``model_name``:
    its ``served_model_name``, else its model): from a viewer the ``served_model_name`` label is
    withheld from, the label too, and this says so."""
    load = None if snapshot.loads is None else snapshot.loads[index]
    if "served_model_name" not in hidden or not by_model(load):
        return []
    return [("enginespec_engine_withheld", [*identity, SERVED_MODEL], 1.0)]


def _served(processes: list[EngineProcess], budget: float) -> list[ServedModels | None]:
    """What each engine whose models come and go serves (``None`` for the others), read at once
    within ``budget`` seconds: one not read by then is unread, saying so."""
    listing = [
        index
        for index, process in enumerate(processes)
        if process.role == "server" and not by_argv(definition_of_engine(process.engine).models, process)
    ]
    found: list[ServedModels | None] = [None] * len(processes)
    readings = served_models_all(
        [processes[index] for index in listing], timeout=request_timeout(budget), deadline=budget
    )
    for index, reading in zip(listing, readings, strict=True):
        found[index] = reading
    return found


def _gone(process: EngineProcess, now: float) -> StoppedEngine:
    """What is kept of ``process`` once it stopped: the labels its series had."""
    return StoppedEngine(
        since=now,
        engine=label_value(process.engine),
        model=contained("metrics", lambda: label_value(process.model_name or ""), lambda _reason: ""),
        model_private="model" in withheld_facts(process),
    )


def _model_samples(snapshot: Snapshot, index: int, identity: list[str], sees_all: bool) -> list[_Sample]:
    """The models engine ``index`` serves (``--models``), each under its own name in ``model``:
    withheld, whole, from a scraper who may not see all of the engine (the list was read with its
    API key, from its owner's environment where that is where the key came from)."""
    served = None if snapshot.models is None else snapshot.models[index]
    if served is None or not served.available or not served.models:
        return []
    if not sees_all:
        return [("enginespec_engine_withheld", [*identity, "served_models"], 1.0)]
    found: list[_Sample] = []
    for model in served.models:
        labels = [*identity[:2], label_value(model.name)]
        found += [
            ("enginespec_model_state", [*labels, state], float(model.state == state))
            for state in _MODEL_STATES
        ]
        if model.memory_bytes is not None:
            found.append(("enginespec_model_gpu_memory_bytes", labels, float(model.memory_bytes)))
        if model.expires_at is not None:
            found.append(("enginespec_model_expiry_timestamp_seconds", labels, model.expires_at))
    return found


def _refresh(
    scanner: Scanner,
    collector: EngineCollector,
    health: bool,
    deadline: float,
    keep_stopped: float,
    monitor: EngineMonitor | None = None,
    models: bool = False,
) -> None:
    """One scan and its health checks, within ``deadline`` seconds when the scan leaves at least
    half of it: a hung engine costs at most that (its request times out first: ``unhealthy``),
    never the next interval. On a loaded host, where even that is not enough, an engine not
    checked in time keeps its last verdict, marked ``stale`` (see :func:`enginespec.health.checks.kept`);
    one that needs no request is never "not checked"."""
    started = time.perf_counter()
    processes = scanner.scan()
    seconds = time.perf_counter() - started
    # the models' facts are read here, in the loop, never in a scrape: cached per process, so
    # once per engine, and at most MODEL_FACTS_SECONDS a refresh (the rest in the next ones)
    budget = time.monotonic() + MODEL_FACTS_SECONDS
    for process in processes:
        if time.monotonic() > budget:
            break
        cached(process.pid, process.start_time, process.engine, process.model, process.argv, process._root)
    previous = collector.snapshot
    healths: list[Health] | None = None
    loads = None
    served: list[ServedModels | None] | None = None
    # The checks keep at least half the deadline, however long the scan took: a slow scan (a
    # loaded host) made them 50 ms, and every engine `unknown`.
    budget = max(deadline - seconds, deadline / 2)
    if monitor is not None:
        monitor.forget(processes)
        vitals = monitor.check(processes, deadline=budget)
        healths = [v.health for v in vitals]
        loads = [v.load for v in vitals]
        served = [v.models for v in vitals] if monitor.models else None
    elif health:
        healths = check_all(processes, timeout=request_timeout(budget), deadline=budget)
    if models and (monitor is None or not monitor.models):
        # after the checks, within a budget of its own: what an engine serves never delays, nor
        # cuts short, its health verdict (a loaded host, a refresh's deadline of 160 ms)
        served = _served(processes, budget)
    if healths is not None and previous.healths is not None:
        earlier = zip(previous.processes, previous.healths, strict=True)
        before = {(p.pid, p.start_time): h for p, h in earlier}
        healths = [
            kept(h, before.get((p.pid, p.start_time))) for p, h in zip(processes, healths, strict=True)
        ]
    now = time.time()
    ids = unique_instance_ids(
        processes,
        {(p.pid, p.start_time): name for p, name in zip(previous.processes, previous.ids, strict=True)},
    )
    running = set(ids)
    stopped = {
        instance_id: gone
        for instance_id, gone in previous.stopped.items()
        if instance_id not in running and now - gone.since < keep_stopped
    }
    for process, instance_id in zip(previous.processes, previous.ids, strict=True):
        if instance_id not in running:
            stopped[instance_id] = _gone(process, now)
    collector.snapshot = Snapshot(
        processes=processes,
        ids=ids,
        healths=healths,
        loads=loads,
        models=served,
        scan_seconds=seconds,
        scan_errors=previous.scan_errors + scanner.stats.unreadable,
        scans=previous.scans + 1,
        gpus=contained(
            "GPU ledger", lambda: gpu_ledger(processes, all_processes=False, reread=False), lambda _reason: ()
        ),
        cpu_energy=contained("CPU energy", lambda: _cpu_energy(collector, processes), lambda _reason: None),
        stopped=stopped,
        refreshed_at=now,
        refresh_failures=previous.refresh_failures,
    )


def _cpu_energy(collector: EngineCollector, processes: Sequence[EngineProcess]) -> list[CpuEnergy] | None:
    """Each engine tree's share of the CPU packages' energy since the last refresh (none on a
    host without RAPL packages)."""
    if not processes:
        return None
    root = processes[0]._root.root
    reader = collector.cpu_energy.setdefault(root, CpuEnergyReader(root))
    return reader.read(trees(processes))


def _write_textfile(textfile: str, registry: CollectorRegistry) -> None:
    try:
        replace_file(textfile, generate_latest(registry), field="--textfile")
    except FileWriteError as err:
        raise ExporterError(str(err)) from None


class Refresher:
    """The exporter's refreshing half, for whoever serves its results (the exporter, the agent):
    a scan and health checks (with ``load``, through an :class:`EngineMonitor` that also reads
    each engine's load) every ``interval`` seconds on a fixed schedule, each cut at 80% of it,
    into ``collector.snapshot``; ``registry`` holds the collector. The first refresh is done at
    construction (unless not ``refresh_now``: then by the first :meth:`run`), and a scrape
    before it waits for it, so the first request has data."""

    def __init__(
        self,
        *,
        interval: float = 2.0,
        health: bool = True,
        keep_stopped: float = 300.0,
        load: bool = False,
        stall_after: float | None = None,
        refresh_now: bool = True,
        models: bool = False,
    ) -> None:
        self.interval = interval
        self.registry = CollectorRegistry()
        self.collector = EngineCollector()
        self.registry.register(self.collector)
        self._scanner = Scanner()
        self._health = health
        self._keep_stopped = keep_stopped
        self._deadline = min(2.0, interval * 0.8)
        self._monitor = (
            EngineMonitor(timeout=request_timeout(self._deadline), stall_after=stall_after) if load else None
        )
        self._models = models
        if refresh_now:
            self.refresh()

    def refresh(self) -> bool:
        """One refresh; whether it succeeded. One that fails keeps the last snapshot (and says
        so in it: ``refresh_failures``, ``refresh_problem``), the failure logged once per cause
        (see :mod:`enginespec.untrusted.boundary`): the loop serving it never ends because of it."""
        try:
            _refresh(
                self._scanner,
                self.collector,
                self._health,
                self._deadline,
                self._keep_stopped,
                self._monitor,
                models=self._models,
            )
        except Exception as err:  # the loop's boundary: the last good snapshot stays served
            reason = failed("refresh", err, loud=True)
            last = self.collector.snapshot
            self.collector.snapshot = dataclasses.replace(
                last, refresh_failures=last.refresh_failures + 1, refresh_problem=reason
            )
            return False
        return True

    def run(self, stop: threading.Event, after: Callable[[], None] | None = None) -> None:
        """Refreshes until ``stop`` is set, calling ``after`` once now and after each refresh."""
        if not self.collector.filled:
            self.refresh()
        next_at = time.monotonic()
        while True:
            if after is not None:
                after()
            # a fixed schedule: a slow refresh shortens the wait rather than stretching the period
            next_at = max(next_at + self.interval, time.monotonic())
            if stop.wait(next_at - time.monotonic()):
                return
            self.refresh()


def run(
    *,
    host: str = "127.0.0.1",
    port: int | None = 9464,
    interval: float = 2.0,
    textfile: str | None = None,
    health: bool = True,
    keep_stopped: float = 300.0,
    load: bool = False,
    stall_after: float | None = None,
    stop: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
    token: str | None = None,
    models: bool = False,
) -> None:
    """Serves ``/metrics`` on ``host:port`` (``port=None``: no server) and writes ``textfile``
    atomically after every refresh, until ``stop`` is set. Refreshes start every ``interval``
    (a slow one is cut at 80% of it: a health check not answered by then is not ready); an
    engine that stops stays as ``up 0`` for ``keep_stopped`` seconds. ``load``: health checks
    through an :class:`enginespec.health.vitals.EngineMonitor` that also reads each engine's load (one
    more request per engine and refresh): the ``enginespec_engine_requests_*`` series, and the
    ``busy`` and ``stalled`` states (after ``stall_after`` seconds). ``models``: also what each
    server whose models come and go serves (``enginespec_model_*``). ``log`` gets a line when
    the server listens (node_exporter's ``Listening on address=...``). A scraper is shown what it
    could read on the host itself (:mod:`enginespec.fleet.disclosure`), everything when it sends
    ``token``.

    Raises :class:`ExporterError` naming the address or file when it cannot listen or write."""
    if port is None and not textfile:
        raise ExporterError("--port 0 serves no HTTP and no --textfile is given: nothing would be exported")
    stop = stop or threading.Event()
    # The server listens (and says so) before the first refresh, which a hung engine can hold
    # for the refresh's deadline; a scrape meanwhile waits for it.
    refresher = Refresher(
        interval=interval,
        health=health,
        keep_stopped=keep_stopped,
        load=load,
        stall_after=stall_after,
        refresh_now=False,
        models=models,
    )
    if port is not None:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = serve_metrics(host, port, MetricsViews(refresher.collector), token)
        except OSError as err:
            raise ExporterError(f"cannot listen on {shown} (--host, --port): {err.strerror or err}") from None
        if log is not None:
            log(f"enginespec exporter: Listening on address={shown.rsplit(':', 1)[0]}:{bound} (/metrics)")
    if textfile and log is not None:
        log(f"enginespec exporter: writing textfile={textfile}")
    write = (lambda: _write_textfile(textfile, refresher.registry)) if textfile else None
    refresher.run(stop, write)
