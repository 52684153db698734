"""Launching, waiting for, stopping, restarting and adopting engines: :class:`RunningEngine`, which
composes the parts that do each.

A launched engine runs the planned argv (no shell) in a session and process group of its own
(:mod:`~enginespec.lifecycle.starting`), held through a pidfd
(:mod:`~enginespec.lifecycle.handle`) with its descendants known by identity
(:mod:`~enginespec.lifecycle.processtree`); its output is kept
(:mod:`~enginespec.lifecycle.logbook`; an adopted engine's is read where it goes,
:mod:`~enginespec.lifecycle.logsources`). Waiting and failures are
:mod:`~enginespec.lifecycle.readiness`; a stop is :mod:`~enginespec.lifecycle.stopping` (and
:mod:`~enginespec.lifecycle.containerstop` for a container), after a start refused on a taken port
(:mod:`~enginespec.lifecycle.ports`); restarts by a policy are
:mod:`~enginespec.lifecycle.supervising`. See ``docs/lifecycle.md``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from enginespec._host.root import HOST_ROOT
from enginespec.config import Config
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import find_engine
from enginespec.display import literal
from enginespec.errors import InvalidInputError, LaunchFailed, RestartRefused, warn_renamed
from enginespec.failures import Failure, ended
from enginespec.health.checks import check_health
from enginespec.healthrecord import Health
from enginespec.lifecycle.containerstop import ContainerStop, stop_container
from enginespec.lifecycle.handle import KILL_WAIT, ProcessHandle, open_pidfd
from enginespec.lifecycle.logbook import LogBook, LogLine, timestamp
from enginespec.lifecycle.logsources import LogSource, find_log_source, follow_source, source_lines
from enginespec.lifecycle.ports import port_holders, refuse_taken_ports
from enginespec.lifecycle.processtree import ProcessTree
from enginespec.lifecycle.readiness import (
    SETTLE_SECONDS,
    classify_failure,
    ended_failure,
    oom_kills,
    wait_ready,
)
from enginespec.lifecycle.recipe import Recipe
from enginespec.lifecycle.starting import Plan, plan_for, read_plan, spawn
from enginespec.lifecycle.stopping import Signalled, StopResult, end_tree, wait_ended
from enginespec.lifecycle.supervising import Supervision, Supervisor
from enginespec.process.argv import parse_argv, redact_argv
from enginespec.process.containers import Container
from enginespec.process.liveness import scanned_ticks
from enginespec.process.record import INSTANCE_ID_WHY, EngineProcess, make_instance_id
from enginespec.process.urls import base_url
from enginespec.untrusted.masking import REDACTED, is_secret_name

# the names this module has always given, wherever they live now
__all__ = [
    "ContainerStop",
    "LaunchFailed",
    "LogSource",
    "RunningEngine",
    "Signalled",
    "StopResult",
    "Supervision",
    "adopt",
    "classify_failure",
    "launch",
    "open_pidfd",
]


class RunningEngine:
    """An engine process enginespec started (:func:`launch`) or adopted (:func:`adopt`).

    ``argv`` and ``env`` (the environment delta applied) have their secrets masked; ``log_path``
    is the file of the current start; ``restart_count`` counts restarts of this object.
    ``instance_id`` is its key, as :attr:`EngineProcess.instance_id` (``engine`` the engine's id).
    """

    def __init__(
        self,
        spec: EngineDefinition,
        plan: Plan | None,
        *,
        log_dir: Path | None,
        api_key: str | None = None,
        port: int | None = None,
        host: str | None = None,
        model: str | None = None,
        ring_lines: int | None = None,
    ) -> None:
        self.spec = spec
        self.engine = spec.id
        self._plan = plan
        self._log_dir = log_dir
        self._api_key = api_key
        self.port = port
        self.host = host
        self.model = model
        self.instance_id = make_instance_id(spec.id, model, port)
        self.base_url = base_url(host, port) if host is not None else None
        self.restart_count = 0
        self.adopted = False
        self._ring_lines = ring_lines
        #: the current start's main process (none yet: pid 0) and the rest of its tree
        self._process = ProcessHandle()
        self._tree = ProcessTree(self._process)
        #: the host its processes are read on: this one (an adopted record's root, which
        #: :func:`adopt` takes only when it is this host's)
        self._root = HOST_ROOT
        self.log_path: Path | None = None
        self._book: LogBook | None = None
        self._oom_before: int | None = None
        self._stopped = threading.Event()
        self._supervisor: Supervisor | None = None
        self._lock = threading.RLock()
        self.log_source = LogSource(kind="enginespec")
        #: why an adopted engine cannot be restarted, when its command could not be read.
        self._unrestartable: str | None = None
        #: an adopted engine's container, and the runtimes' API sockets: stopped through them.
        self._container: Container | None = None
        self._runtime_sockets: Mapping[str, str] = {}
        self._runtime_timeout = 2.0

    # -- what is shown ---------------------------------------------------------------------------

    @property
    def argv(self) -> list[str]:
        return redact_argv(self._plan.argv, self.engine) if self._plan is not None else []

    @property
    def env(self) -> dict[str, str]:
        """The environment delta applied at launch, secret values masked."""
        if self._plan is None:
            return {}
        return {k: REDACTED if is_secret_name(k) else v for k, v in self._plan.delta.items()}

    @property
    def cwd(self) -> str | None:
        return self._plan.cwd if self._plan is not None else None

    @property
    def pid(self) -> int:
        """The pid of the engine's main process (of the current start)."""
        return self._process.pid

    @property
    def start_time(self) -> float:
        """When the engine's main process started (seconds since the epoch)."""
        return self._process.start_time

    @property
    def run_id(self) -> str:
        """The marker of the current start (``""``: none, an adopted engine not restarted)."""
        return self._tree.run_id

    @property
    def _known(self) -> dict[int, int]:
        """Each process seen in the engine's tree (pid to start ticks); the suite's fixtures read
        it to kill what a failed test left."""
        return self._tree.known

    @property
    def engine_id(self) -> str:
        """Deprecated: :attr:`instance_id`."""
        warn_renamed("RunningEngine.engine_id", "RunningEngine.instance_id", INSTANCE_ID_WHY)
        return self.instance_id

    def __repr__(self) -> str:
        return f"<RunningEngine {self.instance_id} pid {self.pid}>"

    # -- starting --------------------------------------------------------------------------------

    def _start(self) -> None:
        plan = self._plan
        assert plan is not None
        if self.host is not None:
            refuse_taken_ports(self.spec, self.host, self.port, plan.argv, plan.env)
        run_id = uuid.uuid4().hex
        started = time.time()
        if self._log_dir is not None:
            name = timestamp(started).replace(":", "-")
            self.log_path = self._log_dir / self.instance_id / f"{name}.log"
        self._book = LogBook(
            self.log_path, plan.secrets, *(() if self._ring_lines is None else (self._ring_lines,))
        )
        self._book.note(f"enginespec: starting {' '.join(map(literal, self.argv))}")
        self._process = spawn(plan, run_id, started)
        self._tree = ProcessTree(self._process, run_id)
        self._oom_before = oom_kills(self.pid)
        popen = self._process.popen
        assert popen is not None
        assert popen.stdout is not None
        assert popen.stderr is not None
        self._book.attach("stdout", popen.stdout)
        self._book.attach("stderr", popen.stderr)

    # -- state -----------------------------------------------------------------------------------

    def exit_status(self) -> tuple[int | None, int | None] | None:
        """(exit code, signal) once the engine's process ended, ``None`` while it runs."""
        return self._process.exit_status()

    def wait(self, timeout: float | None = None) -> tuple[int | None, int | None] | None:
        """Waits up to ``timeout`` seconds (``None``: for ever) for the engine to end; its (exit
        code, signal), or ``None`` when it still runs. The process is not reaped (see stop)."""
        return self._process.wait(timeout)

    @property
    def running(self) -> bool:
        return self.exit_status() is None

    def _sleep(self, seconds: float) -> None:
        """Sleeps up to ``seconds``; returns early when the process ends (its pidfd is readable)."""
        self._process.sleep(seconds)

    # -- logs ------------------------------------------------------------------------------------

    def logs(self, n: int = 100) -> list[LogLine]:
        """The last ``n`` lines of the engine's output (stdout and stderr, with their times)."""
        if self._book is not None:
            return self._book.lines(n)
        return source_lines(self.pid, self.log_source, n, self._root)

    def follow(self, n: int = 0, *, until: threading.Event | None = None) -> Iterator[LogLine]:
        """The last ``n`` lines, then each new one as it comes, until the engine has ended and
        its output was given (or ``until`` is set)."""
        if self._book is not None:
            yield from self._book.follow(n, until=until, ended=lambda: self.exit_status() is not None)
            return
        yield from follow_source(self.pid, self.log_source, n, ended=self.wait, root=self._root)

    # -- failure and readiness -------------------------------------------------------------------

    def failure(self) -> Failure | None:
        """Why the engine ended (classified from its output), ``None`` while it runs."""
        return ended_failure(self.spec, self.argv, self._process, self._book, self._oom_before)

    def wait_ready(
        self,
        timeout: float = 600.0,
        stall_timeout: float | None = None,
        *,
        poll: float = 0.25,
        request_timeout: float = 2.0,
    ) -> Health:
        """Returns once the engine answers ready on its own port. Raises :class:`LaunchFailed`
        with the classified :class:`Failure` as soon as the process exits (what is left of its
        tree is stopped), :class:`NotReady` after ``timeout``, or after ``stall_timeout`` seconds
        in which neither the health answer nor the output changed."""
        return wait_ready(
            self,
            self._api_key,
            owners=lambda: [self.pid, *self._tree.descendants()],
            output=lambda: self._book,
            sleep=self._sleep,
            timeout=timeout,
            stall_timeout=stall_timeout,
            poll=poll,
            request_timeout=request_timeout,
        )

    # -- stopping --------------------------------------------------------------------------------

    def stop(self, grace: float = 10.0, *, check_port: bool = True) -> StopResult:
        """SIGTERM to the process group and to each descendant outside it, up to ``grace``
        seconds for them to end, then SIGKILL; the engine is reaped. Every process is signalled
        through a pidfd checked against its start time. Ends with a scan of the tree and the
        port (see :class:`StopResult`; ``check_port=False`` leaves the port unchecked, ``None``)."""
        with self._lock:
            self._stopped.set()
            in_container = None
            if self._container is not None and self.exit_status() is None:
                in_container = stop_container(
                    self._container, self.pid, grace, self._runtime_sockets, self._runtime_timeout
                )
                if in_container.stopped:
                    # the runtime answers once it has killed the container; the kernel ends the
                    # killed processes a moment later, and a busy host makes that moment long
                    wait_ended(self._tree, KILL_WAIT)
            tree = end_tree(self._tree, grace)
            holders = port_holders(self.port) if check_port else None
            if self._book is not None:
                self._book.settle(SETTLE_SECONDS)
                self._book.note(f"enginespec: stopped ({ended(*tree.status)})")
            return StopResult(
                signals=tree.signals,
                killed=tree.killed,
                exit_code=tree.status[0],
                signal=tree.status[1],
                leftover=tree.leftover,
                port=self.port,
                port_holders=holders,
                container=in_container,
            )

    def close(self) -> None:
        """Stops an engine enginespec started if it still runs (an adopted one is left running),
        and releases its pidfd and log file."""
        self._stopped.set()
        if self._process.popen is not None and (self.running or self._tree.members()):
            self.stop(grace=10.0)
        else:
            self._process.reap()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        self._process.release()
        if self._book is not None:
            self._book.close()

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- restarting ------------------------------------------------------------------------------

    def restart(self, grace: float = 10.0) -> StopResult:
        """Stops the engine and starts the same argv, environment and working directory again (a
        new log file); ``restart_count`` goes up. An adopted engine's command is read from
        ``/proc`` (:class:`RestartRefused` when it cannot be)."""
        with self._lock:
            if self._plan is None:
                raise RestartRefused(self._unrestartable or f"pid {self.pid}: no command is known")
            result = self.stop(grace)
            self._process.release()
            if self._book is not None:
                self._book.close()
            self._stopped.clear()
            self.adopted = False
            self.log_source = LogSource(kind="enginespec")
            self._start()
            self.restart_count += 1
            if self._book is not None:
                self._book.note(f"enginespec: restart {self.restart_count}")
            return result

    def supervise(self, policy: Supervision) -> None:
        """Starts restarting the engine by ``policy`` in a background thread (until :meth:`stop`)."""
        self._stopped.clear()
        self._supervisor = Supervisor(
            policy,
            self._stopped,
            self._lock,
            exited=lambda: self.exit_status() is not None,
            unhealthy=self._unhealthy,
            restart=self.restart,
            sleep=self._sleep,
        )
        self._supervisor.start()

    def _unhealthy(self) -> bool | None:
        """Whether one health check finds the engine unhealthy, down or not serving (``None``: it
        has no address to check)."""
        if self.base_url is None:
            return None
        state = check_health(self.engine, self.base_url, api_key=self._api_key).state
        return state in ("unhealthy", "down", "not_serving")


def launch(
    recipe: Recipe,
    config: Config | None = None,
    *,
    log_dir: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    supervise: Supervision | None = None,
    ring_lines: int | None = None,
) -> RunningEngine:
    """Starts the recipe's engine: the planned argv (no shell), in a new session and process
    group, with the environment delta; its output kept in a ring and in
    ``<log_dir>/<instance_id>/<start time>.log`` (``log_dir`` defaults to the data dir's
    ``logs``). Raises :class:`LaunchFailed` (``port_in_use``, naming the holder) when another
    process listens on its port. Returns at once: see :meth:`RunningEngine.wait_ready`."""
    config = config or Config()
    spec = find_engine(recipe.engine)
    plan, api_key = plan_for(spec, recipe, config)
    if cwd is not None:
        plan = plan.model_copy(update={"cwd": os.fspath(cwd)})
    invocation = parse_argv(plan.argv)
    port = recipe.port or (invocation.effective_port if invocation is not None else None) or spec.default_port
    host = invocation.effective_host if invocation is not None and invocation.effective_host else recipe.host
    engine = RunningEngine(
        spec,
        plan,
        log_dir=Path(log_dir) if log_dir is not None else config.data_dir / "logs",
        api_key=api_key,
        port=port,
        host=host,
        model=invocation.model if invocation is not None else recipe.model_path,
        ring_lines=ring_lines,
    )
    engine._start()
    if supervise is not None:
        engine.supervise(supervise)
    return engine


def adopt(
    process: EngineProcess, *, log_dir: str | os.PathLike[str] | None = None, config: Config | None = None
) -> RunningEngine:
    """A :class:`RunningEngine` for an engine a scan found. Its identity is the pid and start
    time, pinned by a pidfd: stop and restart never signal a process that took its pid since.
    Once restarted, its output is kept as a launched engine's is, in
    ``<log_dir>/<instance_id>/<start time>.log`` (``log_dir`` defaults to the data dir's ``logs``).
    Raises :class:`InvalidInputError` when that process is gone already, or is not this host's
    (a record scanned under a fixture host's root: its pid here is another process or none)."""
    root = process._root
    if not root.is_host:
        raise InvalidInputError(
            f"pid {process.pid}: scanned under {literal(root.root)}, not this host's /: "
            "its process cannot be held or signalled from here"
        )
    spec = find_engine(process.engine)
    ticks = scanned_ticks(process)
    pidfd = None if ticks is None else open_pidfd(process.pid, ticks)
    if ticks is None or pidfd is None:
        raise InvalidInputError(
            f"pid {process.pid}: the process scanned (started {process.start_time}) is gone"
        )
    engine = RunningEngine(
        spec,
        None,
        log_dir=Path(log_dir) if log_dir is not None else (config or Config()).data_dir / "logs",
        api_key=process.secret_api_key(),
        port=process.effective_port,
        host=process.effective_host,
        model=process.model,
    )
    engine.instance_id = process.instance_id
    engine.base_url = process.base_url
    engine._process = ProcessHandle(process.pid, ticks, pidfd, start_time=process.start_time)
    engine.adopted = True
    settings = config or Config()
    engine._container = process.container if process._local else None
    engine._runtime_sockets = {"docker": str(settings.docker_socket), "podman": str(settings.podman_socket)}
    engine._runtime_timeout = settings.container_api_timeout
    engine._root = root
    workers = {pid: start for pid in process.worker_pids if (start := root.start_ticks(pid)) is not None}
    engine._tree = ProcessTree(engine._process, known=workers)
    engine.log_source = find_log_source(process.pid, root)
    try:
        plan = read_plan(process.pid, root)
    except RestartRefused as refused:
        engine._unrestartable = str(refused)
    else:
        # read while the pidfd's process still runs: its pid was not anyone else's meanwhile
        if engine.exit_status() is None:
            engine._plan = plan
        else:
            engine._unrestartable = "it exited while its command was read"
    return engine
