"""Watching the engines of this host: ``Scanner().watch()`` yields an event as each engine starts,
changes or stops and, when asked, as its health changes.

On Linux, with the privilege to subscribe (root in the initial user and pid namespaces; newer
kernels let others), the kernel's process events (fork, exec, exit, comm) tell the native scanner
which processes to read again: an engine is seen within milliseconds of its exec, and an idle host
costs nothing. Otherwise (no privilege, not Linux, the pure-Python backend, or ``poll=True`` /
``ENGINESPEC_WATCH_POLL=1``) the incremental scanner polls every ``interval``: the same events,
only later. ``/proc`` is the source of truth either way: events only say where to look.

The JSON form of an event (:func:`event_json`, parsed back by :func:`parse_event`; schema from
:func:`event_schema`) is stable: an object with a ``type`` (``started``, ``changed``,
``stopped``, ``worker_lost``, ``recovered``, or a health state), ``monotonic``
(``time.monotonic()`` seconds when it was seen), and ``process`` (an ``EngineProcess``;
``identity`` for ``stopped``, with ``exited``, ``status`` and ``signal``: how it ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias, TypedDict

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from enginespec._host.shapes import Woke
from enginespec.errors import InvalidInputError, warn_renamed
from enginespec.gpus.reader import holdings
from enginespec.health.checks import REQUEST_SHARE, kept
from enginespec.health.load import EngineLoad
from enginespec.health.servedmodels import ModelState, ServedModel, ServedModels
from enginespec.health.vitals import EngineMonitor, Vitals, WorkerExit
from enginespec.healthrecord import Health, HealthState
from enginespec.process.exits import HeldProcess, exit_words
from enginespec.process.record import INSTANCE_ID_WHY, WIRE_INSTANCE_ID, EngineProcess
from enginespec.untrusted.boundary import failed
from enginespec.untrusted.documents import dumps, parse_json

#: What a ``changed`` event can name, in this order.
ChangedField = Literal[
    "model",
    "served_model_names",
    "host",
    "port",
    "base_url",
    "role",
    "supervisor",
    "worker_pids",
    "listen_ports",
    "argv",
    "gpus",
]
CHANGED_FIELDS: tuple[ChangedField, ...] = (
    "model",
    "served_model_names",
    "host",
    "port",
    "base_url",
    "role",
    "supervisor",
    "worker_pids",
    "listen_ports",
    "argv",
    "gpus",
)
#: How long the kernel has to answer the subscription before the watch polls.
ACK_TIMEOUT = 1.0
#: With process events, ``/proc`` is still listed this often (and after any lost event).
FULL_RESCAN_SECONDS = 30.0
#: How often the remembered workers of ready servers are looked at (a ``stat`` read each): their
#: exit is seen within this, whatever a scan of a busy host costs.
WORKER_POLL_SECONDS = 0.05
#: Set to ``1`` to make every watch poll (tests, benchmarks).
POLL_ENV = "ENGINESPEC_WATCH_POLL"

_Key: TypeAlias = tuple[int, float]


class EngineIdentity(BaseModel):
    """Who an engine process was: enough to match a ``stopped`` event to its ``started``."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    #: ``engine_id`` in the JSON form, as events of earlier versions have it (see WIRE_INSTANCE_ID).
    instance_id: str = Field(
        validation_alias=AliasChoices(WIRE_INSTANCE_ID, "instance_id"), serialization_alias=WIRE_INSTANCE_ID
    )
    pid: int
    start_time: float
    engine: str

    @property
    def engine_id(self) -> str:
        """Deprecated: :attr:`instance_id`."""
        warn_renamed("EngineIdentity.engine_id", "EngineIdentity.instance_id", INSTANCE_ID_WHY)
        return self.instance_id


def identity(process: EngineProcess) -> EngineIdentity:
    return EngineIdentity(
        instance_id=process.instance_id, pid=process.pid, start_time=process.start_time, engine=process.engine
    )


class Started(BaseModel):
    """An engine server is running (every engine already running when the watch begins, too)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["started"] = "started"
    monotonic: float
    process: EngineProcess


class Changed(BaseModel):
    """A running engine's facts changed; ``fields`` says which (see :data:`CHANGED_FIELDS`)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["changed"] = "changed"
    monotonic: float
    process: EngineProcess
    fields: tuple[ChangedField, ...]


class Stopped(BaseModel):
    """An engine server's process is gone (or became a zombie), or runs on as something that is
    not an engine server. ``exited`` says it is gone; then ``status`` is its exit status or
    ``signal`` the signal that ended it, where they could still be read (its zombie, or the pidfd
    the watch held: :mod:`enginespec.process.exits`), both ``None`` otherwise."""

    model_config = ConfigDict(frozen=True)

    type: Literal["stopped"] = "stopped"
    monotonic: float
    identity: EngineIdentity
    exited: bool = False
    #: as a wait status holds them (another agent's event is held to that, too)
    status: int | None = Field(default=None, ge=0, le=255)
    signal: int | None = Field(default=None, ge=1, le=127)

    def describe(self) -> str:
        """``exited (SIGKILL)``, ``exited 1``, ``exited``, or ``stopped`` (no longer a server)."""
        return exit_words(self.status, self.signal) if self.exited else "stopped"


class HealthChanged(BaseModel):
    """An engine's health state changed (its first check, too: ``previous`` is then ``None``);
    ``type`` is the new state."""

    model_config = ConfigDict(frozen=True)

    type: HealthState
    monotonic: float
    process: EngineProcess
    health: Health
    previous: HealthState | None = None


class WorkerLost(BaseModel):
    """A remembered worker of a server that was ready exited (see :mod:`enginespec.health.vitals`);
    the server's health turns ``unhealthy`` with it."""

    model_config = ConfigDict(frozen=True)

    type: Literal["worker_lost"] = "worker_lost"
    monotonic: float
    process: EngineProcess
    worker: WorkerExit


class Recovered(BaseModel):
    """An engine that was ``stalled`` makes progress again (``health`` is its new state)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["recovered"] = "recovered"
    monotonic: float
    process: EngineProcess
    health: Health
    previous: HealthState


ModelEvent = Literal["model_loaded", "model_unloaded", "model_sleeping", "model_woke"]


class ModelChanged(BaseModel):
    """A model of a server changed state (a watch with ``models``): ``type`` says how, ``model``
    is its new reading (an unloaded one that the server no longer lists: as it was, ``state``
    ``unloaded``), ``previous`` its state before (``None``: not seen before)."""

    model_config = ConfigDict(frozen=True)

    type: ModelEvent
    monotonic: float
    process: EngineProcess
    model: ServedModel
    previous: ModelState | None = None


WatchEvent: TypeAlias = Annotated[
    Started | Changed | Stopped | HealthChanged | WorkerLost | Recovered | ModelChanged,
    Field(discriminator="type"),
]
_EVENTS: TypeAdapter[WatchEvent] = TypeAdapter(WatchEvent)


def event_json(event: WatchEvent) -> str:
    """The JSON form of an event, on one line, in ASCII. Argv read from ``/proc`` may hold bytes
    that are not UTF-8 (kept as surrogate escapes, as ``os.fsdecode`` gives them): they become
    ``\\udcXX`` JSON escapes, as in ``enginespec ps --json``, where pydantic's own JSON would fail."""
    return dumps(event.model_dump(mode="json"), separators=(",", ":"))


def parse_event(text: str | bytes) -> WatchEvent:
    """An event from its JSON form (one line of ``enginespec watch --json``)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return _EVENTS.validate_python(parse_json(data, max_values=1 << 20, where="event", surrogates=True))


def event_schema() -> dict[str, Any]:
    """The JSON schema of the events' JSON form."""
    return _EVENTS.json_schema()


#: the events of a model going from a state (``None``: not listed) to another, when one is told
_MODEL_EVENTS: dict[tuple[str, str], ModelEvent] = {
    **{(before, "loaded"): "model_loaded" for before in ("none", "unloaded", "loading", "failed")},
    ("sleeping", "loaded"): "model_woke",
    **{
        (before, "sleeping"): "model_sleeping"
        for before in ("none", "unloaded", "loading", "loaded", "failed")
    },
    **{(before, "unloaded"): "model_unloaded" for before in ("loaded", "loading", "sleeping")},
}


def model_events(
    before: ServedModels | None, after: ServedModels, process: EngineProcess, monotonic: float
) -> list[ModelChanged]:
    """What changed between two readings of what a server serves (``before`` ``None``: the first,
    whose loaded and sleeping models are told). A reading that failed tells nothing: the models
    it could not see have not changed for all anyone knows."""
    if not after.available or (before is not None and not before.available):
        return []
    was = {m.name: m for m in before.models} if before is not None else {}
    now = {m.name: m for m in after.models}
    events = []
    for name, model in now.items():
        previous = was[name].state if name in was else None
        kind = _MODEL_EVENTS.get((previous or "none", model.state))
        if kind is not None:
            events.append(
                ModelChanged(type=kind, monotonic=monotonic, process=process, model=model, previous=previous)
            )
    for name, model in was.items():
        if name not in now and model.state in ("loaded", "loading", "sleeping"):
            gone = model.model_copy(update={"state": "unloaded", "runner_pid": None, "memory_bytes": None})
            events.append(
                ModelChanged(
                    type="model_unloaded",
                    monotonic=monotonic,
                    process=process,
                    model=gone,
                    previous=model.state,
                )
            )
    return events


def changed_fields(before: EngineProcess, after: EngineProcess) -> tuple[ChangedField, ...]:
    """The fields that differ; ``gpus`` only when what the tree holds does (its share of the
    devices' power moves with every reading)."""
    return tuple(
        name
        for name in CHANGED_FIELDS
        if getattr(before, name) != getattr(after, name)
        and (name != "gpus" or holdings(before.gpus) != holdings(after.gpus))
    )


def diff(
    before: Mapping[_Key, EngineProcess], after: Sequence[EngineProcess], monotonic: float
) -> list[Started | Changed | Stopped]:
    """The events that take a host from ``before`` (by (pid, start time)) to ``after``: stopped
    first, then started and changed in pid order."""
    now = {(p.pid, p.start_time): p for p in after}
    events: list[Started | Changed | Stopped] = [
        Stopped(monotonic=monotonic, identity=identity(p)) for key, p in before.items() if key not in now
    ]
    for key, process in now.items():
        previous = before.get(key)
        if previous is None:
            events.append(Started(monotonic=monotonic, process=process))
        # An unchanged engine comes back as the very same object: nothing to compare.
        elif previous is not process and (fields := changed_fields(previous, process)):
            events.append(Changed(monotonic=monotonic, process=process, fields=fields))
    return events


class WatchOptions(TypedDict, total=False):
    """The options of ``Scanner.watch`` and ``Scanner.watch_async`` (see there), given by keyword;
    their defaults are :class:`Watch`'s."""

    health: bool
    health_interval: float
    health_timeout: float
    poll: bool
    load: bool
    stall_after: float | None
    verify_identity: bool
    models: bool


@dataclasses.dataclass(frozen=True)
class WatchSource:
    """What a watch needs of its scanner (``Scanner.watch`` gives it): a scan, the subscription to
    the kernel's process events (the reason they cannot be used, or ``None``), and a wait that
    gives the engines after what woke the scanner."""

    scan: Callable[[], list[EngineProcess]]
    subscribe: Callable[[float, float], str | None]
    wait: Callable[[float], tuple[list[EngineProcess], Woke]]


class Watch:
    """The events of one watch (iterate it, or ``async for`` over :meth:`Scanner.watch_async`).

    ``mode`` is ``"events"`` when the kernel's process events drive the scans, ``"polling"``
    otherwise, with the reason in ``polling_reason``. ``close()`` (or leaving the loop) stops it.
    """

    def __init__(
        self,
        source: WatchSource,
        interval: float = 1.0,
        *,
        health: bool = False,
        health_interval: float = 2.0,
        health_timeout: float = 2.0,
        poll: bool = False,
        load: bool = True,
        stall_after: float | None = None,
        verify_identity: bool = False,
        models: bool = False,
    ) -> None:
        if not interval > 0:
            raise InvalidInputError(f"interval: must be a positive number of seconds, not {interval!r}")
        if not health_interval > 0:
            raise InvalidInputError(
                f"health_interval: must be a positive number of seconds, not {health_interval!r}"
            )
        self._source = source
        self._interval = interval
        self._health_interval = health_interval
        self._health_timeout = health_timeout
        #: remembers each engine's workers and load between checks (worker loss, busy, stalled)
        self._monitor = EngineMonitor(
            timeout=health_timeout,
            stall_after=stall_after,
            load=load,
            verify_identity=verify_identity,
            models=models,
        )
        self._stop = threading.Event()
        #: set by a new engine (checked at once rather than a health interval later) and by close
        self._wake_health = threading.Event()
        #: set when the kernel's process events woke the scanner (a worker's exit among them) and by
        #: close: the remembered workers are looked at then, not a poll period later
        self._wake_workers = threading.Event()
        self._lock = threading.Lock()
        self._current: dict[_Key, EngineProcess] = {}
        #: each current engine's process, held to say how it ended (:mod:`enginespec.process.exits`)
        self._held: dict[_Key, HeldProcess] = {}
        self._states: dict[_Key, HealthState] = {}
        #: each engine's last verdict, kept (stale) while its checks do not finish in time
        self._healths: dict[_Key, Health] = {}
        #: each engine's last load reading (with ``load``), for whoever shows the engines
        self.loads: dict[_Key, EngineLoad | None] = {}
        #: what each engine whose models come and go served at its last reading (with ``models``)
        self.models: dict[_Key, ServedModels] = {}
        self._queue: queue.Queue[WatchEvent | BaseException] = queue.Queue()
        self._sink: Callable[[WatchEvent | BaseException], None] = self._queue.put
        reason = (
            f"process events: polling asked for ({POLL_ENV}=1 or poll=True)"
            if poll or os.environ.get(POLL_ENV) == "1"
            else source.subscribe(ACK_TIMEOUT, FULL_RESCAN_SECONDS)
        )
        self.polling_reason: str | None = reason
        self.mode: Literal["events", "polling"] = "polling" if reason else "events"
        #: what woke the scanner, counted (``polled``, ``events``, ``tick``, ``rescan``, ``fallback``).
        self.wakes: dict[str, int] = {}
        self._threads = [threading.Thread(target=self._scan_loop, name="enginespec-watch", daemon=True)]
        if health:
            self._threads.append(
                threading.Thread(target=self._health_loop, name="enginespec-health", daemon=True)
            )
            self._threads.append(
                threading.Thread(target=self._worker_loop, name="enginespec-workers", daemon=True)
            )
        self._started = False

    def _start(self, sink: Callable[[WatchEvent | BaseException], None]) -> None:
        if self._started:
            raise RuntimeError("a watch is iterated once")
        self._started = True
        self._sink = sink
        for thread in self._threads:
            thread.start()

    def _publish(self, processes: list[EngineProcess]) -> None:
        with self._lock:
            events = [self._how_it_ended(e) for e in diff(self._current, processes, time.monotonic())]
            self._current = {(p.pid, p.start_time): p for p in processes}
            self._states = {key: state for key, state in self._states.items() if key in self._current}
            self._healths = {key: found for key, found in self._healths.items() if key in self._current}
            self.loads = {key: load for key, load in self.loads.items() if key in self._current}
            self.models = {key: found for key, found in self.models.items() if key in self._current}
            for event in events:
                self._sink(event)
                if isinstance(event, Started):
                    self._hold(event.process)
                    self._wake_health.set()
            self._monitor.forget(processes)

    def _hold(self, process: EngineProcess) -> None:
        """Holds a new engine's process (lock held), so that its end can say how it ended; not
        once the watch is closing (a scan that outlived close's wait must not hold a pidfd
        nobody releases: the budget is the whole process's)."""
        if process._start_ticks is not None and process._local and not self._stop.is_set():
            held = self._held[(process.pid, process.start_time)] = HeldProcess(
                process._root, process.pid, process._start_ticks
            )
            held.hold()

    def _how_it_ended(self, event: Started | Changed | Stopped) -> Started | Changed | Stopped:
        """A ``stopped`` event with how its process ended (lock held); others as they are."""
        if not isinstance(event, Stopped):
            return event
        held = self._held.pop((event.identity.pid, event.identity.start_time), None)
        if held is None:
            return event
        ended = held.ended()
        held.release()  # one that runs on as something else is not held any longer
        if ended is None:
            return event
        return event.model_copy(update={"exited": True, "status": ended.status, "signal": ended.signal})

    def _scan_loop(self) -> None:
        try:
            self._survive("watch scan", lambda: self._publish(self._source.scan()))
            while not self._stop.is_set():
                self._survive("watch scan", self._scan_once)
        except BaseException as err:  # handed to the consumer, who raises it
            self._sink(err)

    def _scan_once(self) -> None:
        engines, woke = self._source.wait(self._interval)
        self.wakes[woke] = self.wakes.get(woke, 0) + 1
        if woke == "events":
            self._wake_workers.set()
        if woke == "fallback":
            self.mode = "polling"
            self.polling_reason = "process events: the subscription failed"
        if not self._stop.is_set():
            self._publish(engines)

    def _survive(self, stage: str, step: Callable[[], None]) -> None:
        """``step``; one that fails leaves the watch as it was (what it last published stands),
        counted and logged once per cause (see :mod:`enginespec.untrusted.boundary`), and is tried again
        an interval later: the watch never ends because of one engine."""

        try:
            step()
        except Exception as err:  # the loop's boundary
            failed(stage, err, loud=True)
            self._stop.wait(self._interval)

    def _worker_loop(self) -> None:
        """Reports each remembered worker's exit (see :mod:`enginespec.health.vitals`) as it happens."""
        try:
            while True:
                self._wake_workers.wait(WORKER_POLL_SECONDS)
                self._wake_workers.clear()
                if self._stop.is_set():
                    return
                self._survive("watch workers", self._tell_lost_workers)
        except BaseException as err:
            self._sink(err)

    def _tell_lost_workers(self) -> None:
        with self._lock:
            processes = list(self._current.values())
            for process, worker in self._monitor.lost_workers(processes):
                self._sink(WorkerLost(monotonic=time.monotonic(), process=process, worker=worker))

    def _health_loop(self) -> None:
        try:
            asyncio.run(self._health_checks())
        except BaseException as err:
            self._sink(err)

    async def _health_checks(self) -> None:
        """Checks each engine when it is first seen, then every health interval. A batch of
        checks runs beside the batches still in flight, and each engine's result is told as it
        comes: servers that accept and never answer (another user's, say) hold only their own
        checks until the timeout, never a new engine's."""
        # A refresh budget: one batch ends within it, however many engines hang (those not
        # checked in time keep their last state, or are `unknown`, saying so). A request times
        # out before it: a server that never answers is `unhealthy`, as in `ps` and `describe`.
        budget = max(self._health_timeout / REQUEST_SHARE, self._health_interval)
        checked_at: dict[_Key, float] = {}
        in_flight: set[_Key] = set()
        batches: set[asyncio.Task[None]] = set()

        async def batch(due: dict[_Key, EngineProcess]) -> None:
            waiting = set(due)

            def told(process: EngineProcess, found: Vitals) -> None:
                # Due again an interval after its check began, not after its batch ends: an
                # engine checked beside hung servers is not held to their timeout.
                self._tell_health(process, found)
                key = (process.pid, process.start_time)
                waiting.discard(key)
                in_flight.discard(key)
                self._wake_health.set()

            try:
                await self._monitor.check_async(due.values(), deadline=budget, on_result=told)
            except Exception as err:  # the round's boundary: the states told so far stand
                failed("watch health", err, loud=True)
            finally:
                # only those still waiting: one told already may be in a later batch's flight now
                in_flight.difference_update(waiting)
                self._wake_health.set()  # what is due next is counted again

        try:
            while not self._stop.is_set():
                self._wake_health.clear()  # before looking: an engine started meanwhile wakes the next look
                with self._lock:
                    current = dict(self._current)
                now = time.monotonic()
                for key in checked_at.keys() - current.keys():
                    del checked_at[key]
                # never checked, or checked an interval ago and not in flight still
                due = {
                    key: process
                    for key, process in current.items()
                    if key not in checked_at
                    or (key not in in_flight and now >= checked_at[key] + self._health_interval)
                }
                if due:
                    checked_at.update(dict.fromkeys(due, now))
                    in_flight.update(due)
                    task = asyncio.create_task(batch(due))
                    batches.add(task)
                    task.add_done_callback(batches.discard)
                waiting = [
                    at + self._health_interval for key, at in checked_at.items() if key not in in_flight
                ]
                pause = min([self._health_interval, *(at - now for at in waiting)])
                await asyncio.to_thread(self._wake_health.wait, max(pause, 0.0))
        finally:
            for task in batches:
                task.cancel()
            await asyncio.gather(*batches, return_exceptions=True)

    def _tell_health(self, process: EngineProcess, found: Vitals) -> None:
        """One engine's check: its load kept, a new state told (a stall's end as Recovered too)."""
        key = (process.pid, process.start_time)
        with self._lock:
            if key not in self._current:
                return
            # not checked in time (a loaded host): its last verdict stands, marked stale
            health = kept(found.health, self._healths.get(key))
            self._healths[key] = health
            self.loads[key] = found.load
            if found.models is not None:
                now = time.monotonic()
                for event in model_events(self.models.get(key), found.models, self._current[key], now):
                    self._sink(event)
                if found.models.available:
                    self.models[key] = found.models
            previous = self._states.get(key)
            if previous == health.state:
                return
            self._states[key] = health.state
            now = time.monotonic()
            current = self._current[key]
            self._sink(
                HealthChanged(
                    type=health.state, monotonic=now, process=current, health=health, previous=previous
                )
            )
            if previous == "stalled" and health.state in ("ready", "busy"):
                self._sink(Recovered(monotonic=now, process=current, health=health, previous=previous))

    def close(self) -> None:
        """Stops the watch and waits for its threads (at most about one interval or one health
        check): none may still be inside the native scanner, which runs without the GIL, when the
        interpreter shuts down (a thread coming back into a finalizing interpreter from Rust
        crashed `enginespec watch` on Ctrl-C)."""
        self._stop.set()
        self._wake_health.set()
        self._wake_workers.set()
        if self._started:
            bound = max(self._interval, self._health_timeout, self._health_interval) + 5.0
            for thread in self._threads:
                if thread is not threading.current_thread() and thread.is_alive():
                    thread.join(bound)
        with self._lock:
            for held in self._held.values():
                held.release()
            self._held.clear()

    def __iter__(self) -> Iterator[WatchEvent]:
        self._start(self._queue.put)
        try:
            while True:
                item = self._queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    async def _aiter(self) -> AsyncIterator[WatchEvent]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[WatchEvent | BaseException] = asyncio.Queue()

        def sink(item: WatchEvent | BaseException) -> None:
            # Called from the watch's threads; once the loop is closed there is no one to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(events.put_nowait, item)

        self._start(sink)
        try:
            while True:
                item = await events.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()
