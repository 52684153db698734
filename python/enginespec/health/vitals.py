"""Whether an engine is really alive: health checks with memory (:class:`EngineMonitor`).

One health check sees one answer. A monitor keeps what earlier checks saw, per engine process
(pid, start time), and corrects the verdict of the health endpoint with it:

- **worker-tree integrity**: once a server is ready, its workers (the children that retitle
  themselves as the engine's workers: ``VLLM::EngineCore``, ``VLLM::Worker_TP0``,
  ``sglang::scheduler_TP0``; or that run a program the engine's data names: TGI's
  ``text-generation-server serve`` shards and ``text-generation-router``) are remembered; when
  one of them exits, the server is ``unhealthy`` with the reason (``VLLM::EngineCore pid 4300
  exited (SIGKILL) while the API server still answers``) whatever ``/health`` says, until that server is gone.
  How it exited is read from its zombie while its parent has not reaped it, and after that from
  the pidfd kept for each remembered worker (Linux 6.15+: ``PIDFD_GET_INFO`` with
  ``PIDFD_INFO_EXIT``), so a server that reaps its workers at once still shows the signal;
- **busy**: the health request timed out, but the engine's token counters advanced since the
  previous reading (or, when it reports no load, its tree's CPU time did: a weaker signal, said
  in the reason): saturated, never ``unhealthy`` for that;
- **stalled**: requests pending and no token counter moved for ``stall_after`` seconds.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from enginespec._host.root import HostRoot
from enginespec._host.shapes import basename, is_python, looks_like_flag, python_target
from enginespec.definition.registry import find_engine
from enginespec.health.checks import broken, check_health_async, in_turn, late_verdict
from enginespec.health.load import EngineLoad, _read, checked_stall_after, not_owned, tree_cpu_seconds
from enginespec.health.reaching import blocking, engine_tree, target_of
from enginespec.health.servedmodels import ServedModels, by_argv, served_models_async
from enginespec.healthrecord import Health, HealthState
from enginespec.process.argv import parse_argv

# the budget of pidfds is the process's (exits.py); docs/load.md shows this path
from enginespec.process.exits import MAX_PIDFDS as MAX_PIDFDS
from enginespec.process.exits import HeldProcess
from enginespec.process.record import EngineProcess

#: Below this share of one CPU, a tree's CPU time is not taken as a sign of work.
CPU_BUSY_SHARE = 0.1
#: The most characters of a worker's title kept.
_TITLE_CHARS = 64

_Key = tuple[int, float]


class WorkerExit(BaseModel):
    """A remembered worker of a server that exited. ``status`` is its exit status and
    ``signal`` the signal that ended it, when they could still be read (a zombie not yet reaped
    by its parent shows them); both ``None`` otherwise."""

    model_config = ConfigDict(frozen=True)

    pid: int
    title: str
    status: int | None = None
    signal: int | None = None
    #: ``time.monotonic()`` when the exit was seen.
    seen_at: float

    def describe(self) -> str:
        """``VLLM::EngineCore pid 4300 exited (SIGKILL)``."""
        how = ""
        if self.signal is not None:
            try:
                how = f" ({signal.Signals(self.signal).name})"
            except ValueError:
                how = f" (signal {self.signal})"
        elif self.status is not None:
            how = f" (status {self.status})"
        return f"{self.title} pid {self.pid} exited{how}"


class Vitals(BaseModel):
    """What a monitor found for one engine: its health (corrected as the module says), its load
    reading (``None`` when load is not read) and the workers it lost."""

    model_config = ConfigDict(frozen=True)

    health: Health
    load: EngineLoad | None = None
    lost_workers: tuple[WorkerExit, ...] = ()
    #: what it serves now (a monitor with ``models``, for an engine that says at runtime)
    models: ServedModels | None = None


def _argv(root: HostRoot, pid: int) -> list[str] | None:
    """The start of a process's argv (its title, for a worker that retitled itself)."""
    try:
        data = root.read(pid, "cmdline", 4096)
    except OSError:
        return None
    argv = [arg.decode("utf-8", "backslashreplace") for arg in data.split(b"\0")]
    return argv[:-1] if argv and argv[-1] == "" else argv


def _worker_title(argv: Sequence[str], titles: tuple[str, ...], programs: frozenset[str]) -> str | None:
    """How a worker is named (``VLLM::EngineCore``, ``text-generation-server serve``), or
    ``None`` for a descendant that is none of the engine's workers."""
    if not argv or not argv[0]:
        return None
    if titles and argv[0].startswith(titles):
        return argv[0][:_TITLE_CHARS]
    if programs:
        program = argv[0]
        at = 1
        if is_python(basename(program)):
            target = python_target(argv)
            if target is None or target[0] != "script":
                return None
            program, at = target[1], target[2]
        if basename(program) in programs:
            # with its subcommand (`serve`), when one follows
            words = [basename(program), *(arg for arg in argv[at : at + 1] if not looks_like_flag(arg))]
            return " ".join(words)[:_TITLE_CHARS]
    return None


class _Worker(HeldProcess):
    """A remembered worker of a server, with the title it runs under."""

    __slots__ = ("title",)

    def __init__(self, root: HostRoot, pid: int, started: int, title: str) -> None:
        super().__init__(root, pid, started)
        self.title = title

    def exit(self, now: float) -> WorkerExit | None:
        """How it exited, or ``None`` while it runs (a zombie has exited)."""
        found = self.ended()
        if found is None:
            return None
        return WorkerExit(
            pid=self.pid, title=self.title, status=found.status, signal=found.signal, seen_at=now
        )


class _Engine:
    """What the monitor remembers of one engine process."""

    def __init__(self) -> None:
        self.workers: list[_Worker] | None = None
        self.lost: list[WorkerExit] = []
        #: exits of runners (``Serving.runners_are_workers``) not yet judged by the server's list
        self.pending: list[WorkerExit] = []
        #: why a runner's loss makes the server unhealthy, while its list still says so
        self.missing: str | None = None
        self.reported = 0
        self.load: EngineLoad | None = None


def _remember(process: EngineProcess) -> list[_Worker]:
    spec = find_engine(process.engine)
    titles, programs = spec.signature.worker_titles, spec.serving.worker_programs
    if not titles and not programs:
        return []
    root = process._root
    workers = []
    for pid in process.worker_pids:
        argv = _argv(root, pid)
        title = _worker_title(argv, titles, programs) if argv is not None else None
        found = root.stat(pid)
        if title is None or found is None or found.state == "Z":
            continue
        workers.append(_Worker(root, pid, found.start_ticks, title))
    return workers


def _runners(process: EngineProcess) -> list[_Worker]:
    """The runners a server runs now: its children whose argv is its engine's runner's."""
    root = process._root
    workers = []
    for pid in engine_tree(process.pid, (), root)[1:]:
        argv = _argv(root, pid)
        invocation = parse_argv(argv) if argv else None
        found = root.stat(pid)
        if (
            invocation is None
            or (invocation.engine, invocation.role) != (process.engine, "runner")
            or found is None
            or found.state == "Z"
            or found.ppid != process.pid
        ):
            continue
        model = basename(invocation.model) if invocation.model else "(model unknown)"
        workers.append(_Worker(root, pid, found.start_ticks, f"runner of {model}"[:_TITLE_CHARS]))
    return workers


def _timed_out(health: Health) -> bool:
    # The probe gives `unhealthy` without an HTTP status only when its request timed out.
    return health.state == "unhealthy" and health.http_status is None


class EngineMonitor:
    """Health (and load) checks that remember what earlier ones saw (see the module's
    docstring). Keep one monitor and check through it repeatedly: ``check(processes)`` every few
    seconds, ``lost_workers(processes)`` as often as wanted (it reads ``/proc`` only). Thread-safe.

    ``stall_after``: seconds with requests pending and no counter moving before an engine is
    ``stalled`` (default: ``$ENGINESPEC_STALL_AFTER``, else each engine's own, 60 s). ``load``:
    also read each engine's load (one more request per engine and check); without it there is
    no ``busy`` or ``stalled`` from token counters, only from CPU time. ``verify_identity``: a
    ``ready`` server must also serve the model its argv names (see :func:`check_health`).
    ``models``: also read what each engine whose models come and go serves now
    (:mod:`enginespec.health.servedmodels`; not one that serves the model its argv names)."""

    def __init__(
        self,
        *,
        timeout: float = 2.0,
        stall_after: float | None = None,
        load: bool = True,
        concurrency: int = 64,
        verify_identity: bool = False,
        models: bool = False,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
        if stall_after is not None:
            checked_stall_after(stall_after)
        self.timeout = timeout
        self.stall_after = stall_after
        self.load = load
        self.concurrency = concurrency
        self.verify_identity = verify_identity
        self.models = models
        self._engines: dict[_Key, _Engine] = {}
        self._lock = threading.Lock()

    def _engine(self, process: EngineProcess) -> _Engine:
        key = (process.pid, process.start_time)
        with self._lock:
            found = self._engines.get(key)
            if found is None:
                found = self._engines[key] = _Engine()
            return found

    def forget(self, alive: Iterable[EngineProcess]) -> None:
        """Drops what is remembered of engines not in ``alive``."""
        keep = {(p.pid, p.start_time) for p in alive}
        with self._lock:
            dropped = [engine for key, engine in self._engines.items() if key not in keep]
            self._engines = {key: engine for key, engine in self._engines.items() if key in keep}
            for engine in dropped:
                for worker in engine.workers or ():
                    worker.release()

    def lost_workers(self, processes: Iterable[EngineProcess]) -> list[tuple[EngineProcess, WorkerExit]]:
        """The remembered workers that exited since the previous call, with their server (a
        few ``/proc`` reads per remembered worker; no request). Each exit is reported once here,
        whoever noticed it first (a check notices too, and says so in its verdict)."""
        found: list[tuple[EngineProcess, WorkerExit]] = []
        for process in processes:
            engine = self._engine(process)
            with self._lock:
                self._look(engine, find_engine(process.engine).serving.runners_are_workers)
                fresh = engine.lost[engine.reported :]
                engine.reported = len(engine.lost)
            found.extend((process, gone) for gone in fresh)
        return found

    @staticmethod
    def _look(engine: _Engine, runners: bool = False) -> None:
        """Moves the remembered workers that exited to ``engine.lost`` (lock held); with
        ``runners``, to ``engine.pending``, for the server's own list to judge."""
        if not engine.workers:
            return
        now = time.monotonic()
        running = []
        for worker in engine.workers:
            gone = worker.exit(now)
            if gone is None:
                running.append(worker)
            else:
                (engine.pending if runners else engine.lost).append(gone)
        engine.workers = running

    @staticmethod
    def _judge_runners(engine: _Engine, health: Health, asked: float) -> None:
        """Which runner exits were losses (lock held): those seen before the server was asked,
        when its answer still lists more loaded models than it runs runners (an unload takes the
        model off the list before it ends the runner). A loss lasts while the list says so."""
        running = len(engine.workers or ())
        short = health.state == "ready" and len(health.model_ids) > running
        due = [gone for gone in engine.pending if gone.seen_at < asked]
        if due:
            engine.pending = [gone for gone in engine.pending if gone.seen_at >= asked]
            if short:
                engine.lost.extend(due)
                engine.missing = (
                    "; ".join(gone.describe() for gone in due)
                    + f" while the server still lists {len(health.model_ids)} loaded model(s)"
                    + f" and runs {running} runner(s)"
                )
        if not short:
            engine.missing = None

    def _lists_models(self, process: EngineProcess) -> bool:
        return self.models and not by_argv(find_engine(process.engine).models, process)

    async def _one(self, process: EngineProcess) -> Vitals:
        """The engine's vitals, with what it serves beside them (read at the same time)."""
        if not self._lists_models(process):
            return await self._vitals(process)
        found, models = await asyncio.gather(
            self._vitals(process), served_models_async(process, timeout=self.timeout)
        )
        return found.model_copy(update={"models": models})

    async def _vitals(self, process: EngineProcess) -> Vitals:
        engine = self._engine(process)
        # The tree's CPU time over the check: the weaker sign of work of an engine whose
        # health request times out and that reports no load.
        cpu = (time.monotonic(), tree_cpu_seconds(process))
        if not self.load:
            health = await check_health_async(
                process, timeout=self.timeout, verify_identity=self.verify_identity
            )
            return self._judge(process, engine, health, None, cpu)
        # The health check verifies who holds the port; the load reading need not again.
        target = target_of(process, None, None)
        health, load = await asyncio.gather(
            check_health_async(process, timeout=self.timeout, verify_identity=self.verify_identity),
            _read(target, self.timeout, engine.load, self.stall_after, owner=False),
        )
        # A ready verdict checked who holds the port; any other one may not have.
        problem = not_owned(process, load.base_url) if load.available and health.state != "ready" else None
        if problem is not None:
            load = load.model_copy(update={"available": False, "reason": problem})
        elif _timed_out(health) and load.available and load.moved is None:
            # No earlier reading to tell movement by: a second one, a health timeout later.
            load = await _read(target, self.timeout, load, self.stall_after, owner=False)
        return self._judge(process, engine, health, load, cpu)

    def _judge(
        self,
        process: EngineProcess,
        engine: _Engine,
        health: Health,
        load: EngineLoad | None,
        cpu: tuple[float, float | None],
    ) -> Vitals:
        now = time.monotonic()
        runners = find_engine(process.engine).serving.runners_are_workers
        with self._lock:
            self._look(engine, runners)
            if load is not None:
                engine.load = load
            if health.state == "ready" and (runners or not engine.lost):
                # remembered at the first ready check; workers seen later join (a tree re-read)
                known = {worker.pid for worker in engine.workers or ()}
                seen = _runners(process) if runners else _remember(process)
                added = [worker for worker in seen if worker.pid not in known]
                for worker in added:
                    worker.hold()
                engine.workers = [*(engine.workers or ()), *added]
            if runners:
                self._judge_runners(engine, health, cpu[0])
            missing = engine.missing
            lost = tuple(engine.lost)

        def verdict(state: HealthState, reason: str) -> Vitals:
            update = {"state": state, "reason": reason}
            return Vitals(health=health.model_copy(update=update), load=load, lost_workers=lost)

        if missing is not None:
            return verdict("unhealthy", missing)
        if lost and not runners and health.state not in ("down", "not_serving"):
            answering = " while the API server still answers" if health.http_status is not None else ""
            return verdict("unhealthy", "; ".join(gone.describe() for gone in lost) + answering)
        if load is not None and load.stalled:
            reason = (
                f"{load.pending} request(s) pending and no token counter moved for "
                f"{now - (load.progress_at or now):.0f}s (stall_after {load.stall_after:g}s)"
            )
            return verdict("stalled", reason + (f"; health: {health.reason}" if health.reason else ""))
        if not _timed_out(health):
            return Vitals(health=health, load=load)
        if load is not None and load.available:
            if load.moved:
                rate = f" ({load.tokens_per_second:.1f} tok/s)" if load.tokens_per_second is not None else ""
                return verdict("busy", f"{health.reason}, but its token counters advance{rate}")
            return Vitals(health=health, load=load)
        used = tree_cpu_seconds(process)
        started, before = cpu
        if used is not None and before is not None and now > started:
            share = (used - before) / (now - started)
            if share >= CPU_BUSY_SHARE:
                reason = (
                    f"{health.reason}, but its processes use CPU ({share:.0%} of a core; a weaker "
                    "sign than token counters, which it does not report)"
                )
                return verdict("busy", reason)
        return Vitals(health=health, load=load)

    async def check_async(
        self,
        processes: Iterable[EngineProcess],
        *,
        deadline: float | None = None,
        on_result: Callable[[EngineProcess, Vitals], None] | None = None,
    ) -> list[Vitals]:
        """Checks every engine at once (at most ``concurrency`` in flight), in the order given.
        With ``deadline`` (seconds) the whole round ends by then: engines not checked in time
        are ``unknown`` with that reason. ``on_result(process, vitals)`` is told each engine's as
        it comes."""
        if deadline is not None and not deadline > 0:
            raise ValueError(f"deadline: must be a positive number of seconds, got {deadline!r}")

        def late(process: EngineProcess) -> Vitals:
            return Vitals(health=late_verdict(process, deadline or 0.0))

        def failed(process: EngineProcess, reason: str) -> Vitals:
            return Vitals(health=broken(process.engine, process.base_url, reason))

        listed = list(processes)
        told = None if on_result is None else (lambda at, found: on_result(listed[at], found))
        return await in_turn(
            listed, self._one, late, failed, concurrency=self.concurrency, deadline=deadline, on_result=told
        )

    def check(self, processes: Iterable[EngineProcess], *, deadline: float | None = None) -> list[Vitals]:
        """Sync form of :meth:`check_async`."""
        return blocking(self.check_async(list(processes), deadline=deadline))
