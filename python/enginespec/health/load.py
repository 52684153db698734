"""What each engine is doing right now: its load, read from the engine's own metrics and
normalized into one :class:`EngineLoad` whatever the engine.

Where an engine reports its load and what each figure is called there is data in its EngineSpec
(:class:`enginespec.definition.records.LoadMetrics`); this module reads it: one size- and time-capped
request (the answer is streamed and cut at :data:`MAX_ANSWER_BYTES`), parsed with
prometheus-client's text parser, only the lines of the names wanted. A figure the engine does
not expose is ``None``, never 0. ``tokens_per_second`` needs two readings: give the previous one
(``check_load(proc, previous=load)``); after one reading it is ``None``.

A reading also says whether the engine looks ``stalled``: requests pending and none of its token
counters moved for ``stall_after`` seconds (the engine's data, 60 s unless it says otherwise;
``ENGINESPEC_STALL_AFTER`` or the ``stall_after`` argument change it). Time with nothing pending
never counts towards a stall.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Iterable, Sequence

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr

import enginespec.health.latency as latency
import enginespec.health.reaching as reaching
from enginespec.definition.records import EngineDefinition, LoadMetrics
from enginespec.errors import InvalidInputError, warn_renamed
from enginespec.health.latency import Latency, LatencyReading
from enginespec.process.liveness import process_alive
from enginespec.process.record import INSTANCE_ID_WHY, WIRE_INSTANCE_ID, EngineProcess
from enginespec.untrusted.boundary import contained_async

#: The most of a metrics answer read (vLLM's, with every histogram of 8 engine cores, is ~1 MB).
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: The most samples of the wanted names parsed from one answer.
MAX_SAMPLES = 10_000
#: Environment variable overriding every engine's ``stall_after`` (seconds).
STALL_ENV = "ENGINESPEC_STALL_AFTER"


class EngineLoad(BaseModel):
    """One reading of one engine's load. ``source`` is where it came from (the URL read, or
    ``none``); ``available`` says a reading came, else ``reason`` says why not (for a reading, it
    notes how the engine counts, where that matters: Ollama's, llama-server's). Counters are as
    the engine reports them (since it started); ``kv_cache_usage`` is a fraction 0..1.
    ``progress_at`` is the ``time.monotonic()`` since which the engine had requests pending and
    no counter moved (``None`` when unknown); ``stalled`` is set when that lasted ``stall_after``."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    engine: str
    #: the key of the engine read (``None`` for a URL no scan found); ``engine_id`` in the JSON form.
    instance_id: str | None = Field(
        None,
        validation_alias=AliasChoices(WIRE_INSTANCE_ID, "instance_id"),
        serialization_alias=WIRE_INSTANCE_ID,
    )
    pid: int | None = None
    base_url: str | None = None
    source: str
    available: bool = False
    reason: str = ""
    #: ``time.time()`` of the reading.
    read_at: float
    requests_running: int | None = None
    requests_waiting: int | None = None
    kv_cache_usage: float | None = None
    prompt_tokens_total: float | None = None
    generated_tokens_total: float | None = None
    tokens_per_second: float | None = None
    #: how many models the server has loaded (Ollama), when that is what it reports.
    models_loaded: int | None = None
    #: CPU seconds (user + system) of the server and its workers, from /proc/PID/stat.
    cpu_seconds: float | None = None
    progress_at: float | None = None
    stall_after: float | None = None
    stalled: bool = False
    #: ``time.monotonic()`` of the reading.
    monotonic: float
    #: request latency over the window since the previous reading (``None`` after one reading,
    #: or for an engine that reports none): see :mod:`enginespec.health.latency`.
    latency: Latency | None = None
    #: the GPU energy attributed to the engine's tree over the window since the previous reading
    #: (the growth of its GPUs' ``GpuUse.energy_joules``, as the records read carried them) per
    #: token it generated in that window, joules. ``None`` after one reading, when a GPU the tree
    #: holds has no energy figure (or it holds none), or when no token was generated.
    joules_per_token: float | None = None
    #: the engine's other progress counters, summed (TGI's decode steps).
    _progress: float | None = PrivateAttr(default=None)
    #: this reading's latency metrics, for the next reading's window.
    _latency: LatencyReading | None = PrivateAttr(default=None)
    #: the GPU energy attributed to the tree when read (see ``tree_energy``), for the next window.
    _energy: float | None = PrivateAttr(default=None)
    #: whether a counter moved since the previous reading (``None``: not known).
    _moved: bool | None = PrivateAttr(default=None)

    @property
    def pending(self) -> int | None:
        """Requests running or waiting, when the engine reports both (or either)."""
        if self.requests_running is None and self.requests_waiting is None:
            return None
        return (self.requests_running or 0) + (self.requests_waiting or 0)

    @property
    def moved(self) -> bool | None:
        """Whether a token or progress counter moved since the previous reading."""
        return self._moved

    @property
    def engine_id(self) -> str | None:
        """Deprecated: :attr:`instance_id`."""
        warn_renamed("EngineLoad.engine_id", "EngineLoad.instance_id", INSTANCE_ID_WHY)
        return self.instance_id

    def counters(self) -> tuple[float | None, ...]:
        return (self.prompt_tokens_total, self.generated_tokens_total, self._progress)


def checked_stall_after(value: float) -> float:
    """``value``, when it is a positive finite number of seconds (else InvalidInputError)."""
    if not (value > 0 and math.isfinite(value)):
        raise InvalidInputError(f"stall_after: must be a positive number of seconds, not {value!r}")
    return value


def stall_seconds(spec: EngineDefinition, stall_after: float | None = None) -> float:
    """The stall time for an engine: ``stall_after`` when given, else ``$ENGINESPEC_STALL_AFTER``,
    else the engine's own (``LoadMetrics.stall_after``)."""
    if stall_after is not None:
        return checked_stall_after(stall_after)
    text = os.environ.get(STALL_ENV)
    if text:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not (value > 0 and math.isfinite(value)):
            raise InvalidInputError(f"{STALL_ENV}: must be a positive number of seconds, not {text!r}")
        return value
    return spec.load.stall_after


def tree_cpu_seconds(process: EngineProcess) -> float | None:
    """User + system CPU seconds of the server and its workers now (those that still run), from
    ``/proc/PID/stat`` of the host it was scanned on; ``None`` when the server's own cannot be
    read."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for index, member in enumerate((process.pid, *process.worker_pids)):
        found = process._root.stat(member)
        if found is not None:
            total += (found.utime + found.stime) / ticks
        elif index == 0:
            return None
    return total


def tree_energy(process: EngineProcess) -> float | None:
    """The GPU energy attributed to ``process``'s tree while its reader watched (joules, summed
    over the GPUs it holds), ``None`` unless every one of them has a figure."""
    figures = [use.energy_joules for use in process.gpus]
    if not figures or any(figure is None for figure in figures):
        return None
    total = math.fsum(figure for figure in figures if figure is not None)
    return total if math.isfinite(total) else None


def _joules_per_token(before: EngineLoad, after: EngineLoad) -> float | None:
    """The energy growth over the tokens generated between two readings (see the field)."""
    counted = (before._energy, after._energy, before.generated_tokens_total, after.generated_tokens_total)
    if counted[0] is None or counted[1] is None or counted[2] is None or counted[3] is None:
        return None
    joules, tokens = counted[1] - counted[0], counted[3] - counted[2]
    # a counter that went back is a restart (of the engine's counting, or of the GPU reader's)
    if tokens <= 0 or joules < 0:
        return None
    ratio = joules / tokens
    return ratio if math.isfinite(ratio) else None


def _wanted(metrics: LoadMetrics) -> tuple[str, ...]:
    return (
        *metrics.requests_running,
        *metrics.requests_waiting,
        *metrics.kv_cache_usage,
        *metrics.prompt_tokens,
        *metrics.generated_tokens,
        *metrics.progress,
        *latency.counter_names(metrics.latency),
    )


def parse_metrics(
    text: str,
    names: Iterable[str],
    *,
    deadline: float | None = None,
    cut: list[str] | None = None,
    labelled: Iterable[str] = (),
    series: dict[str, list[tuple[dict[str, str], float]]] | None = None,
) -> dict[str, list[float]]:
    """The values of the samples named ``names`` in a Prometheus text exposition (every series
    of a name: engine cores, data-parallel ranks), parsed by prometheus-client. Only the lines of
    those names are parsed; values that are not finite numbers are dropped. Stops at
    :data:`MAX_SAMPLES` samples or at ``deadline`` (``time.monotonic()``), and then says so in
    ``cut`` (when given): a reading cut at a cap is never shown as whole. The samples named
    ``labelled`` (histograms' ``_bucket``, ``_sum`` and ``_count``) go to ``series`` with their
    labels, whatever their value (the latency reading judges them)."""
    from prometheus_client.parser import text_string_to_metric_families

    kept_labels = frozenset(labelled) if series is not None else frozenset()
    wanted = frozenset(names) | kept_labels
    if not wanted:
        return {}
    prefixes = tuple(wanted)
    kept = []
    for line in text.splitlines():
        # A sample's line starts with its name; its TYPE/HELP lines name its family.
        if line.startswith(prefixes) or (line.startswith("# TYPE ") and line[7:].startswith(prefixes)):
            kept.append(line)
    found: dict[str, list[float]] = {}
    count = 0
    try:
        for family in text_string_to_metric_families("\n".join(kept) + "\n"):
            for sample in family.samples:
                count += 1
                if count > MAX_SAMPLES or (deadline is not None and time.monotonic() > deadline):
                    why = "the cap" if count > MAX_SAMPLES else "out of time"
                    if cut is not None:
                        cut.append(f"cut after {count - 1} samples ({why})")
                    return found
                if sample.name in kept_labels and series is not None:
                    series.setdefault(sample.name, []).append((dict(sample.labels), _number(sample.value)))
                elif sample.name in wanted and (value := _finite(sample.value)) is not None:
                    found.setdefault(sample.name, []).append(value)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError):
        # A malformed line ends the parse: what was read before it stands.
        pass
    return found


def _finite(value: object) -> float | None:
    """A sample's value as a finite float; ``None`` for ``NaN``, ``+Inf`` and an integer of 400
    digits (which the parser gives as an int: no float holds it)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (OverflowError, ValueError, TypeError):
        return None
    return number if math.isfinite(number) else None


def _number(value: object) -> float:
    """A sample's value as a float, ``NaN`` when it is none (an integer of 400 digits)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (OverflowError, ValueError, TypeError):
        return math.nan


def _first(found: dict[str, list[float]], names: Sequence[str]) -> list[float] | None:
    for name in names:
        values = found.get(name)
        if values:
            return values
    return None


#: The largest count or total a reading shows: what a float holds exactly. Two samples of
#: ``1e308`` add up to infinity (an OverflowError in ``round``, ``Infinity`` in JSON): a sum
#: beyond this is out of range, the field ``None`` and the reading's reason names it.
MAX_TOTAL = float(1 << 53)


class _Sums:
    """The counts and totals of one answer, each kept only when in range; ``out_of_range``
    names the metrics that were not."""

    def __init__(self, found: dict[str, list[float]]) -> None:
        self.found = found
        self.out_of_range: list[str] = []

    def total(self, names: Sequence[str]) -> float | None:
        values = _first(self.found, names)
        if values is None or any(v < 0 for v in values):
            return None
        # each sample in range first (fsum of two 1e308 raises), then their sum (at most
        # MAX_SAMPLES of them: finite)
        result = math.fsum(values) if all(v <= MAX_TOTAL for v in values) else math.inf
        if not result <= MAX_TOTAL:
            self.out_of_range.append(next(n for n in names if self.found.get(n)))
            return None
        return result

    def count(self, names: Sequence[str]) -> int | None:
        result = self.total(names)
        return None if result is None else round(result)

    def reason(self, note: str) -> str:
        if not self.out_of_range:
            return note
        cut = f"{', '.join(self.out_of_range)}: out of range (over {MAX_TOTAL:.0f}), not shown"
        return f"{note}; {cut}" if note else cut


def _ratio(found: dict[str, list[float]], names: Sequence[str]) -> float | None:
    values = _first(found, names)
    if values is None or any(not 0 <= v <= 1 for v in values):
        return None
    # one gauge per engine core (data parallel): their mean is the whole server's use
    return sum(values) / len(values)


def not_owned(process: EngineProcess, base_url: str | None) -> str | None:
    """Why what answers at ``base_url`` may not be this engine (see health's
    ``ownership_problem``), or ``None``. The scan's tree first; the whole of ``/proc`` (workers
    forked since the scan) only when that is not enough."""
    if process.private_network:
        return None
    root = process._root
    problem = reaching.ownership_problem((process.pid, *process.worker_pids), base_url, root)
    if problem is not None:
        problem = reaching.ownership_problem(reaching.tree_of(process), base_url, root)
    return problem


def _missing_reason(t: reaching.CheckTarget, status: int | None, detail: str) -> str:
    metrics = t.spec.load
    path = metrics.path
    if status is None:
        return f"{path}: {detail}"
    if status in (404, 501) and metrics.enable_flag:
        return (
            f"{path}: HTTP {status}; the server reports its load only when started with {metrics.enable_flag}"
        )
    if status in (404, 501) and metrics.disable_flag:
        return f"{path}: HTTP {status}; the server may run with {metrics.disable_flag}"
    if status in (401, 403):
        return f"{path}: HTTP {status}; it needs an API key enginespec does not have"
    return f"{path}: HTTP {status}"


async def _read(
    t: reaching.CheckTarget,
    timeout: float,
    previous: EngineLoad | None,
    stall_after: float | None,
    owner: bool = True,
) -> EngineLoad:
    """One reading; ``owner``: check that the engine's tree holds the port (a caller that just
    checked it for the same engine, as a monitor's health check does, skips it)."""
    metrics = t.spec.load
    process = t.process
    pid = process.pid if process is not None else None
    if previous is not None and (previous.engine != t.spec.id or previous.pid != pid):
        raise InvalidInputError(
            f"previous: a reading of {previous.engine} pid {previous.pid}, not of this engine"
        )
    empty = EngineLoad(
        engine=t.spec.id,
        instance_id=process.instance_id if process is not None else None,
        pid=pid,
        base_url=t.base_url,
        source="none",
        read_at=time.time(),
        monotonic=time.monotonic(),
        cpu_seconds=tree_cpu_seconds(process) if process is not None else None,
        stall_after=stall_seconds(t.spec, stall_after),
    )

    def unread(reason: str, source: str = "none") -> EngineLoad:
        # A reading that failed keeps the stall clock: a server whose metrics stop answering has
        # not made progress, for all we know.
        progress_at = previous.progress_at if previous is not None and source != "none" else None
        return empty.model_copy(update={"source": source, "reason": reason, "progress_at": progress_at})

    if process is not None and not process_alive(process):
        return unread("process is gone")
    if process is not None and (why := reaching.not_serving(process)) is not None:
        return unread(f"{why}: not read")
    if metrics.kind == "none":
        return unread(metrics.note)
    if t.base_url is None:
        return unread("no usable listen address")
    source = t.base_url.rstrip("/") + metrics.path
    status, body, detail = await reaching.fetch(t, metrics.path, timeout, MAX_ANSWER_BYTES)
    if status != 200:
        return unread(_missing_reason(t, status, detail), source)
    problem = not_owned(process, t.base_url) if owner and process is not None else None
    if problem is not None:
        return unread(problem, source)
    if metrics.kind == "ollama_ps":
        names = t.spec.loaded_models(body)
        if names is None:
            return unread(f"{metrics.path}: unreadable answer", source)
        update = {"source": source, "available": True, "reason": metrics.note, "models_loaded": len(names)}
        return empty.model_copy(update=update)
    cut: list[str] = []
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    found = parse_metrics(
        body.decode("utf-8", "replace"),
        _wanted(metrics),
        deadline=time.monotonic() + timeout,
        cut=cut,
        labelled=latency.histogram_samples(metrics.latency),
        series=series,
    )
    if not found and not series:
        return unread(f"{metrics.path}: none of the engine's load metrics in the answer", source)
    sums = _Sums(found)
    update = {
        "source": source,
        "available": True,
        "requests_running": sums.count(metrics.requests_running),
        "requests_waiting": sums.count(metrics.requests_waiting),
        "kv_cache_usage": _ratio(found, metrics.kv_cache_usage),
        "prompt_tokens_total": sums.total(metrics.prompt_tokens),
        "generated_tokens_total": sums.total(metrics.generated_tokens),
    }
    progress = sums.total(metrics.progress) if metrics.progress else None
    reason = "; ".join(
        part for part in (sums.reason(metrics.note), *(f"{metrics.path}: {c}" for c in cut)) if part
    )
    load = empty.model_copy(update={**update, "reason": reason})
    load._progress = progress
    load._energy = tree_energy(process) if process is not None else None
    if latency.declared(metrics.latency):
        counters = {name: found[name] for name in latency.counter_names(metrics.latency) if name in found}
        load._latency = latency.reading(
            metrics.latency,
            series,
            counters,
            read_at=load.read_at,
            monotonic=load.monotonic,
            cut="; ".join(cut),
        )
    return _with_history(load, previous)


def _with_history(load: EngineLoad, previous: EngineLoad | None) -> EngineLoad:
    """The reading with its rate and stall clock, from the previous reading of the engine."""
    now = load.monotonic
    pending = load.pending
    before = previous if previous is not None and previous.available else None
    moved: bool | None = None
    rate = None
    if before is not None:
        pairs = [
            (a, b)
            for a, b in zip(before.counters(), load.counters(), strict=True)
            if a is not None and b is not None
        ]
        # a counter going back is a restart of the engine's counting: no rate, but movement
        moved = any(a != b for a, b in pairs) if pairs else None
        elapsed = now - before.monotonic
        old, new = before.generated_tokens_total, load.generated_tokens_total
        if old is not None and new is not None and new >= old and elapsed > 0:
            rate = (new - old) / elapsed
            # counters of 2**53 over a microsecond: more than a float holds is no rate
            rate = rate if math.isfinite(rate) else None
    if pending is None:
        progress_at = None
    elif pending == 0 or moved is not False or previous is None or previous.progress_at is None:
        # nothing pending, counters moving, or no earlier reading to compare: the clock restarts
        progress_at = now
    else:
        progress_at = previous.progress_at
    stall_after = load.stall_after
    stalled = (
        bool(pending)
        and progress_at is not None
        and stall_after is not None
        and now - progress_at >= stall_after
    )
    window = None
    if before is not None and before._latency is not None and load._latency is not None:
        window = latency.latency_between(before._latency, load._latency)
    per_token = _joules_per_token(before, load) if before is not None else None
    update = {
        "tokens_per_second": rate,
        "progress_at": progress_at,
        "stalled": stalled,
        "latency": window,
        "joules_per_token": per_token,
    }
    result = load.model_copy(update=update)
    result._progress = load._progress
    result._latency = load._latency
    result._energy = load._energy
    result._moved = moved
    return result


def not_read(process: EngineProcess, reason: str) -> EngineLoad:
    """The reading of an engine whose reading failed (the error boundary, see
    :mod:`enginespec.untrusted.boundary`): no figures, and why."""
    return EngineLoad(
        engine=process.engine,
        instance_id=process.instance_id,
        pid=process.pid,
        base_url=process.base_url,
        source="none",
        reason=reason,
        read_at=time.time(),
        monotonic=time.monotonic(),
    )


async def check_load_async(
    target: EngineProcess | str,
    base_url: str | None = None,
    *,
    previous: EngineLoad | None = None,
    timeout: float = 2.0,
    stall_after: float | None = None,
    api_key: str | None = None,
) -> EngineLoad:
    """Async twin of :func:`check_load`."""
    t = reaching.target_of(target, base_url, api_key)
    return await _read(t, timeout, previous, stall_after)


def check_load(
    target: EngineProcess | str,
    base_url: str | None = None,
    *,
    previous: EngineLoad | None = None,
    timeout: float = 2.0,
    stall_after: float | None = None,
    api_key: str | None = None,
) -> EngineLoad:
    """One reading of an engine's load: ``check_load(proc)`` or ``check_load("vllm",
    "http://127.0.0.1:8000")`` (one request to its metrics endpoint, bounded by ``timeout``).
    With ``previous`` (an earlier reading of the same engine) it has ``tokens_per_second`` and
    the stall clock. Never raises for what the server does."""
    t = reaching.target_of(target, base_url, api_key)
    return reaching.blocking(_read(t, timeout, previous, stall_after))


async def check_load_all_async(
    processes: Iterable[EngineProcess],
    *,
    previous: Sequence[EngineLoad | None] | None = None,
    concurrency: int = 64,
    timeout: float = 2.0,
    stall_after: float | None = None,
) -> list[EngineLoad]:
    """Reads many engines at once (at most ``concurrency`` in flight, each bounded by
    ``timeout``), in the order of ``processes``; ``previous``: their earlier readings, in order."""
    if concurrency < 1:
        raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
    listed = list(processes)
    earlier = list(previous) if previous is not None else [None] * len(listed)
    if len(earlier) != len(listed):
        raise InvalidInputError(f"previous: {len(earlier)} readings for {len(listed)} processes")
    gate = asyncio.Semaphore(concurrency)

    async def one(process: EngineProcess, before: EngineLoad | None) -> EngineLoad:
        async with gate:
            reading = check_load_async(process, previous=before, timeout=timeout, stall_after=stall_after)
            return await contained_async("load", reading, lambda reason: not_read(process, reason))

    return list(await asyncio.gather(*(one(p, b) for p, b in zip(listed, earlier, strict=True))))


def check_load_all(
    processes: Iterable[EngineProcess],
    *,
    previous: Sequence[EngineLoad | None] | None = None,
    concurrency: int = 64,
    timeout: float = 2.0,
    stall_after: float | None = None,
) -> list[EngineLoad]:
    """Sync form of :func:`check_load_all_async`."""
    job = check_load_all_async(
        list(processes), previous=previous, concurrency=concurrency, timeout=timeout, stall_after=stall_after
    )
    return reaching.blocking(job)
