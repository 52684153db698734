"""Launching, waiting for, stopping, restarting and adopting engines, and telling why one failed.

A launched engine runs the planned argv (no shell) in a session and process group of its own,
held through a pidfd; its output is kept (:mod:`enginespec.lifecycle.logbook`). Every signal goes through a
pidfd opened and checked against the process's start time, so a pid the kernel handed to another
process since is never signalled. See ``docs/lifecycle.md``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import signal as signals
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field

from enginespec._host.backend import parse_cgroup
from enginespec._host.namedfiles import Refused, open_as, open_held
from enginespec._host.procfiles import (
    PROC,
    SYS,
    Owner,
    held_path,
    proc_link,
    proc_path,
    process_state,
    read_kernel_file,
    read_proc,
    start_ticks,
)
from enginespec._host.shapes import parse_port
from enginespec.config import Config
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import find_engine
from enginespec.display import literal
from enginespec.errors import InvalidInputError, LaunchFailed, NotReady, RestartRefused
from enginespec.failures import Failure, ended
from enginespec.health.checks import check_health
from enginespec.health.reaching import ownership_problem
from enginespec.lifecycle import commands
from enginespec.lifecycle.logbook import LogBook, LogLine, follow_file, tail_file, timestamp
from enginespec.lifecycle.recipe import Recipe
from enginespec.process import sockets
from enginespec.process.argv import flag_value, parse_argv, redact_argv
from enginespec.process.containers import Container, api_inspect, api_stop, runs_in_lineage
from enginespec.process.liveness import scanned_ticks
from enginespec.process.record import EngineProcess, make_engine_id
from enginespec.process.urls import base_url
from enginespec.scanning.scanner import Scanner
from enginespec.status import Health
from enginespec.untrusted.masking import REDACTED, is_secret_name

#: The variable every launched process and its descendants carry: how a descendant that left the
#: process group and was re-parented is still found at stop.
RUN_ID_VARIABLE = "ENGINESPEC_RUN_ID"
#: Seconds a stop waits for SIGKILL to take effect before it reports what is left.
KILL_WAIT = 5.0
#: Seconds an ended engine's readers get to store what its pipes still hold (they need it only
#: when the host is too busy to run them; a pipe holds at most its capacity, 64 KiB by default).
SETTLE_SECONDS = 10.0


class Supervision(BaseModel):
    """Restart on exit (and, with ``on_unhealthy``, after ``unhealthy_checks`` failed health
    checks in a row), waiting ``backoff`` seconds doubled after each restart up to
    ``max_backoff``, at most ``max_restarts`` times. Off unless given to :func:`launch`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    on_exit: bool = True
    on_unhealthy: bool = False
    unhealthy_checks: int = Field(default=3, ge=1)
    check_interval: float = Field(default=5.0, gt=0)
    backoff: float = Field(default=1.0, ge=0)
    max_backoff: float = Field(default=60.0, ge=0)
    max_restarts: int | None = Field(default=5, ge=0)


class Signalled(BaseModel):
    """One signal a stop sent: to the process group ``pgid`` or to the process ``pid``."""

    model_config = ConfigDict(frozen=True)

    target: Literal["group", "process"]
    pid: int
    signal: str


class ContainerStop(BaseModel):
    """How a stop went through the engine's container runtime (an adopted engine in a Docker or
    Podman container): ``stopped`` when its API stopped the container; otherwise ``detail`` says
    why not, and the processes were signalled from the host."""

    model_config = ConfigDict(frozen=True)

    runtime: str
    container: str
    stopped: bool
    detail: str


class StopResult(BaseModel):
    """What a stop did and found: the signals sent, the processes that had to be killed, the
    engine's exit, and the scan at the end (``leftover``: pids of the tree still alive;
    ``port_holders``: pids still listening on the port, ``None`` when no port is known);
    ``container``: the stop through the container's runtime, for an engine in a container."""

    model_config = ConfigDict(frozen=True)

    signals: tuple[Signalled, ...]
    killed: tuple[int, ...]
    exit_code: int | None
    signal: int | None
    leftover: tuple[int, ...]
    port: int | None
    port_holders: tuple[int, ...] | None
    container: ContainerStop | None = None


LogSourceKind = Literal["enginespec", "file", "journald", "docker", "terminal", "pipe", "none"]


class LogSource(BaseModel):
    """Where an engine's output goes: enginespec's own ring and file (``enginespec``), a regular
    file its stdout/stderr point at (``file``), a systemd unit's journal (``journald``), a
    container's log (``docker``), or nowhere readable (``terminal``, ``pipe``, ``none``, with the
    reason)."""

    model_config = ConfigDict(frozen=True)

    kind: LogSourceKind
    path: str | None = None
    unit: str | None = None
    container: str | None = None
    reason: str | None = None


def classify_failure(
    engine: str | EngineDefinition,
    log_text: str,
    exit_code: int | None = None,
    signal: int | None = None,
    *,
    oom_kill: bool = False,
    argv: Sequence[str] = (),
) -> Failure:
    """Why an engine failed to start: its class, the log lines that show the cause (verbatim),
    the figures in them, a hint, and how the process ended. A pure function of its arguments,
    by the engine's failure vocabulary (``EngineSpec.failures``); ``oom_kill`` says the kernel's
    OOM killer killed a process of the engine's cgroup; ``argv`` (the engine's, secrets masked
    or not) picks the hints that depend on how it was started."""
    spec = find_engine(engine) if isinstance(engine, str) else engine
    return spec.classify_failure(log_text, exit_code, signal, oom_kill=oom_kill, argv=argv)


# -- processes --------------------------------------------------------------------------------


def _alive(pid: int, ticks: int) -> bool:
    """Whether the process with this identity (pid, start ticks) still runs (a zombie does not)."""
    state = process_state(pid)
    return state is not None and state[1] == ticks and state[0] not in ("Z", "X")


def open_pidfd(pid: int, ticks: int) -> int | None:
    """A pidfd of the process with this identity, or ``None`` when that process is gone (its pid
    may now be another process's). The start is checked after the pidfd is opened, so the pidfd
    is the checked process's for good. ``-1``: this kernel has no pidfds."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return -1 if _alive(pid, ticks) else None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    if not _alive(pid, ticks):
        os.close(fd)
        return None
    return fd


def _send(pidfd: int, pid: int, sig: int) -> bool:
    """Sends ``sig`` through the pidfd (``-1``: by pid, no pidfds here); False when it is gone."""
    try:
        if pidfd >= 0:
            signals.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True


def _exit_status(pid: int) -> tuple[int | None, int | None] | None:
    """(exit code, signal) of an exited child, without reaping it; ``None`` while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return (None, None)
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return (info.si_status, None)
    return (None, info.si_status)


def _descendants(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _marked(run_id: str, born_after: int) -> list[int]:
    """Processes whose environment carries this run's marker, born after the engine started."""
    needle = f"{RUN_ID_VARIABLE}={run_id}".encode()
    found = []
    for pid in psutil.pids():
        # the start time first: the environments of the (many) older processes are not read
        start = start_ticks(pid)
        if start is None or start < born_after:
            continue
        try:
            environ = read_proc(pid, "environ", 1 << 20)
        except OSError:
            continue
        if needle in environ.split(b"\0") and start_ticks(pid) == start:
            found.append(pid)
    return found


def _oom_kills(pid: int) -> int | None:
    """The OOM kills counted in the process's memory cgroup (v2 ``memory.events``, v1
    ``memory.oom_control``), ``None`` when unreadable."""
    try:
        lines = os.fsdecode(read_proc(pid, "cgroup", 1 << 16)).splitlines()
    except OSError:
        return None
    entries = [line.split(":", 2) for line in lines]
    for entry in entries:
        if len(entry) != 3:
            continue
        hierarchy, controllers, path = entry
        if hierarchy == "0" and controllers == "":
            candidate = os.path.join(SYS, "fs/cgroup", path.lstrip("/"), "memory.events")
        elif "memory" in controllers.split(","):
            candidate = os.path.join(SYS, "fs/cgroup/memory", path.lstrip("/"), "memory.oom_control")
        else:
            continue
        for line in (read_kernel_file(candidate, 1 << 16) or b"").splitlines():
            name, _, value = line.partition(b" ")
            if name == b"oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def holder_text(port: int, pids: Sequence[int]) -> str:
    """``port 8000 is held by pid 4242: vllm Qwen/Qwen3-8B`` (the engine a scan sees there, else
    the process's name), for each holder."""
    engines = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    for process in list(engines.values()):
        for worker in process.worker_pids:
            engines.setdefault(worker, process)
    parts = []
    for pid in pids:
        engine = engines.get(pid)
        if engine is not None:
            what = f"{engine.engine} {engine.model or '(model unknown)'}"
        else:
            try:
                what = psutil.Process(pid).name()
            except psutil.Error:
                what = "(gone)"
        parts.append(f"pid {pid}: {literal(what)}")
    return f"port {port} is held by " + ", ".join(parts)


def extra_ports(spec: EngineDefinition, argv: Sequence[str], env: Mapping[str, str]) -> list[tuple[str, int]]:
    """(flag, port) of each port the engine's data says it binds besides its API port, as this
    argv and environment set it (the flag first, as the engine reads them)."""
    found = []
    for extra in spec.serving.extra_ports:
        text = flag_value(argv, spec.signature, extra.flag)
        if text is None and extra.environment is not None:
            text = env.get(extra.environment)
        port = parse_port(text) if text is not None else extra.default
        if port is not None:
            found.append((extra.flag, port))
    return found


def port_preflight(engine: str, host: str, port: int, flag: str | None = None) -> Failure | None:
    """A ``port_in_use`` failure when another process listens where the engine would (its
    holders named), else ``None``. ``flag``: the flag that sets this port, when it is not the
    API port."""
    addresses = sockets.connect_addresses(host)
    taken = [
        listener
        for listener in sockets.listeners(port)
        if not addresses or any(sockets.overlap(listener.address, address) for address in addresses)
    ]
    if not taken:
        return None
    pids = sockets.holders([listener.inode for listener in taken], (os.getpid(),))
    line = holder_text(port, pids) if pids else f"port {port} is held by a process whose fds cannot be read"
    return Failure(
        engine=engine,
        kind="port_in_use",
        cause_lines=(line,),
        numbers={"port": port, **({"pid": pids[0]} if pids else {})},
        hint=f"port {port} is taken: choose another port or stop the process holding it"
        if flag is None
        else f"port {port} ({flag}) is taken: give {flag} another port or stop the process holding it",
    )


# -- the engine ---------------------------------------------------------------------------------


class _Plan(BaseModel):
    """What a start runs: the real argv and environment (never shown), the working directory."""

    model_config = ConfigDict(frozen=True)

    argv: tuple[str, ...]
    env: Mapping[str, str]
    delta: Mapping[str, str]
    cwd: str | None
    secrets: tuple[str, ...] = ()
    #: the program to run when it is not ``argv[0]`` (an adopted process's ``/proc/PID/exe``).
    executable: str | None = None
    #: the uid, gid and groups to run as (an adopted process's owner); ``None``: ours.
    user: int | None = None
    group: int | None = None
    groups: tuple[int, ...] | None = None


class RunningEngine:
    """An engine process enginespec started (:func:`launch`) or adopted (:func:`adopt`).

    ``argv`` and ``env`` (the environment delta applied) have their secrets masked; ``log_path``
    is the file of the current start; ``restart_count`` counts restarts of this object.
    """

    def __init__(
        self,
        spec: EngineDefinition,
        plan: _Plan | None,
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
        self.engine_id = make_engine_id(spec.id, model, port)
        self.base_url = base_url(host, port) if host is not None else None
        self.restart_count = 0
        self.adopted = False
        self._ring_lines = ring_lines
        self._popen: subprocess.Popen[bytes] | None = None
        self._pidfd = -1
        self.pid = 0
        self.start_time = 0.0
        self._ticks = 0
        self.run_id = ""
        self.log_path: Path | None = None
        self._book: LogBook | None = None
        self._oom_before: int | None = None
        self._known: dict[int, int] = {}
        self._stopped = threading.Event()
        self._supervisor: threading.Thread | None = None
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

    def __repr__(self) -> str:
        return f"<RunningEngine {self.engine_id} pid {self.pid}>"

    # -- starting --------------------------------------------------------------------------------

    def _start(self) -> None:
        plan = self._plan
        assert plan is not None
        if self.host is not None:
            ports = [(None, self.port)] if self.port is not None else []
            for flag, port in [*ports, *extra_ports(self.spec, plan.argv, plan.env)]:
                taken = port_preflight(self.engine, self.host, port, flag)
                if taken is not None:
                    raise LaunchFailed(taken)
        self.run_id = uuid.uuid4().hex
        started = time.time()
        if self._log_dir is not None:
            name = timestamp(started).replace(":", "-")
            self.log_path = self._log_dir / self.engine_id / f"{name}.log"
        self._book = LogBook(
            self.log_path, plan.secrets, *(() if self._ring_lines is None else (self._ring_lines,))
        )
        self._book.note(f"enginespec: starting {' '.join(map(literal, self.argv))}")
        held = self._owner_cwd(plan)
        try:
            self._popen = subprocess.Popen(
                list(plan.argv),
                executable=plan.executable,
                env={**plan.env, RUN_ID_VARIABLE: self.run_id},
                cwd=plan.cwd if held is None else held_path(held),
                user=plan.user,
                group=plan.group,
                extra_groups=plan.groups,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            if held is not None:
                os.close(held)
        self.pid = self._popen.pid
        # Our unreaped child: its pid cannot be handed out again before we wait for it.
        opener = getattr(os, "pidfd_open", None)
        self._pidfd = opener(self.pid) if opener is not None else -1
        self.start_time = started
        self._ticks = start_ticks(self.pid) or 0
        self._known = {}
        self._oom_before = _oom_kills(self.pid)
        assert self._popen.stdout is not None
        assert self._popen.stderr is not None
        self._book.attach("stdout", self._popen.stdout)
        self._book.attach("stderr", self._popen.stderr)

    @staticmethod
    def _owner_cwd(plan: _Plan) -> int | None:
        """For a start as another user (an adopted engine's owner), an ``O_PATH`` fd of the
        working directory the engine named, opened with that user's credentials: the child
        enters it through ``/proc/self/fd/N``, the very directory the owner reached. Python's
        own ``cwd=`` changes into a path before its setuid, as root, and a path swapped for a
        link would lead where the owner may not go (a root-only 0700 directory)."""
        if plan.user is None or plan.cwd is None:
            return None
        who = Owner(plan.user, plan.group if plan.group is not None else -1, plan.groups or ())
        try:
            return open_as(who, plan.cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except Refused as why:
            raise RestartRefused(
                f"its owner (uid {plan.user}) cannot enter its working directory {literal(plan.cwd)}: {why}"
            ) from None

    # -- state -----------------------------------------------------------------------------------

    def exit_status(self) -> tuple[int | None, int | None] | None:
        """(exit code, signal) once the engine's process ended, ``None`` while it runs."""
        if self._popen is not None:
            if self._popen.returncode is not None:
                code = self._popen.returncode
                return (code, None) if code >= 0 else (None, -code)
            return _exit_status(self.pid)
        if self._pidfd >= 0:
            # adopted: the pidfd turns readable when the process ends (no status: not our child)
            ready, _w, _x = select.select([self._pidfd], [], [], 0)
            return (None, None) if ready else None
        return None if _alive(self.pid, self._ticks) else (None, None)

    def wait(self, timeout: float | None = None) -> tuple[int | None, int | None] | None:
        """Waits up to ``timeout`` seconds (``None``: for ever) for the engine to end; its (exit
        code, signal), or ``None`` when it still runs. The process is not reaped (see stop)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.exit_status()
            if status is not None:
                return status
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            self._sleep(min(left, 1.0))

    @property
    def running(self) -> bool:
        return self.exit_status() is None

    def _sleep(self, seconds: float) -> None:
        """Sleeps up to ``seconds``; returns early when the process ends (its pidfd is readable)."""
        if seconds <= 0:
            return
        if self._pidfd >= 0:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            poller.poll(seconds * 1000)
        else:
            time.sleep(min(seconds, 0.05))

    # -- logs ------------------------------------------------------------------------------------

    def logs(self, n: int = 100) -> list[LogLine]:
        """The last ``n`` lines of the engine's output (stdout and stderr, with their times)."""
        if self._book is not None:
            return self._book.lines(n)
        return _source_lines(self.pid, self.log_source, n)

    def follow(self, n: int = 0, *, until: threading.Event | None = None) -> Iterator[LogLine]:
        """The last ``n`` lines, then each new one as it comes, until the engine has ended and
        its output was given (or ``until`` is set)."""
        if self._book is not None:
            yield from self._book.follow(n, until=until, ended=lambda: self.exit_status() is not None)
            return
        yield from _source_lines(self.pid, self.log_source, n)
        if self.log_source.kind == "file" and self.log_source.path is not None:
            try:
                fd = _open_log_file(self.pid, self.log_source.path)
            except Refused as why:
                yield LogLine(time=time.time(), stream="log", text=f"enginespec: not read: {why}")
                return
            until = threading.Event()
            watcher = threading.Thread(target=self._wait_gone, args=(until,), daemon=True)
            watcher.start()
            for text in follow_file(fd, until=until):
                yield LogLine(time=time.time(), stream="log", text=text)

    def _wait_gone(self, event: threading.Event) -> None:
        while self.exit_status() is None:
            self._sleep(1.0)
        event.set()

    # -- failure ---------------------------------------------------------------------------------

    def failure(self) -> Failure | None:
        """Why the engine ended (classified from its output), ``None`` while it runs."""
        status = self.exit_status()
        if status is None:
            return None
        code, sig = status
        text = ""
        if self._book is not None:
            # every byte it wrote, however slowly this host runs the readers (a descendant may
            # hold the pipes open: not waited for)
            self._book.settle(SETTLE_SECONDS)
            text = self._book.text()
        oom = False
        if sig == signals.SIGKILL and self._oom_before is not None:
            after = _oom_kills(os.getpid())
            oom = after is not None and after > self._oom_before
        return self.spec.classify_failure(text, code, sig, oom_kill=oom, argv=self.argv)

    # -- waiting ---------------------------------------------------------------------------------

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
        if self.base_url is None:
            raise InvalidInputError(
                f"{self.engine_id}: no address to check (host {self.host!r}, port {self.port})"
            )
        started = progress_at = time.monotonic()
        last: Health | None = None
        while True:
            self._raise_if_exited()
            health = check_health(self.engine, self.base_url, timeout=request_timeout, api_key=self._api_key)
            self._raise_if_exited()
            if health.state == "ready":
                problem = ownership_problem([self.pid, *self._tree()], self.base_url)
                if problem is None:
                    return health
                health = health.model_copy(update={"state": "unhealthy", "reason": problem})
            self._raise_if_failed_serving(health)
            now = time.monotonic()
            key = (health.state, health.http_status, health.reason)
            if last is None or key != (last.state, last.http_status, last.reason):
                progress_at = now
            if self._book is not None:
                progress_at = max(progress_at, self._book.last_activity)
            last = health
            if now - started >= timeout:
                raise NotReady(
                    f"not ready after {timeout:g}s (last: {health.state}: {health.reason})", health
                )
            if stall_timeout is not None and now - progress_at >= stall_timeout:
                raise NotReady(
                    f"no progress for {stall_timeout:g}s (last: {health.state}: {health.reason})", health
                )
            self._sleep(min(poll, timeout - (now - started)))

    def _raise_if_failed_serving(self, health: Health) -> None:
        """An engine that stays up after its model failed to load (mlx_lm.server answers 503
        ``unavailable``): when its health says so and its output shows a recognised failure, that
        failure is raised and the engine stopped."""
        if health.state not in ("unhealthy", "not_serving") or self._book is None:
            return
        failure = self.spec.classify_failure(self._book.text(), argv=self.argv)
        if failure.kind in ("other", "exited", "killed"):
            return
        with contextlib.suppress(Exception):
            self.stop(grace=2.0, check_port=False)
        status = self.exit_status() or (None, None)
        raise LaunchFailed(failure.model_copy(update={"exit_code": status[0], "signal": status[1]}))

    def _raise_if_exited(self) -> None:
        failure = self.failure()
        if failure is not None:
            with contextlib.suppress(Exception):
                self.stop(grace=2.0)
            raise LaunchFailed(failure)

    # -- stopping --------------------------------------------------------------------------------

    def _tree(self) -> list[int]:
        """The engine's descendants now, remembered by identity (a child that leaves the group and
        is re-parented is still signalled at stop)."""
        found = _descendants(self.pid)
        if self._popen is not None:
            found += [pid for pid in psutil.pids() if _in_group(pid, self.pid)]
        for pid in found:
            if pid != self.pid and pid not in self._known:
                start = start_ticks(pid)
                if start is not None and start >= self._ticks:
                    self._known[pid] = start
        return [pid for pid in self._known if pid != self.pid]

    def _members(self, *, marked: bool = False) -> dict[int, int]:
        """The live processes of the tree; with ``marked``, also every process that carries this
        start's marker (a descendant that left the group and was re-parented)."""
        self._tree()
        if marked and self.run_id:
            for pid in _marked(self.run_id, self._ticks):
                if pid != self.pid and pid not in self._known:
                    start = start_ticks(pid)
                    if start is not None:
                        self._known[pid] = start
        return {pid: start for pid, start in self._known.items() if _alive(pid, start)}

    def stop(self, grace: float = 10.0, *, check_port: bool = True) -> StopResult:
        """SIGTERM to the process group and to each descendant outside it, up to ``grace``
        seconds for them to end, then SIGKILL; the engine is reaped. Every process is signalled
        through a pidfd checked against its start time. Ends with a scan of the tree and the
        port (see :class:`StopResult`; ``check_port=False`` leaves the port unchecked, ``None``)."""
        with self._lock:
            self._stopped.set()
            sent: list[Signalled] = []
            killed: list[int] = []
            in_container = None
            if self._container is not None and self.exit_status() is None:
                in_container = self._stop_container(self._container, grace)
                if in_container.stopped:
                    # the runtime answers once it has killed the container; the kernel ends the
                    # killed processes a moment later, and a busy host makes that moment long
                    self._wait_tree_ended(KILL_WAIT)
            members = self._members(marked=True)
            leader_alive = self.exit_status() is None
            # nothing left (the engine ended and took its tree along): this scan is the last one
            rounds = range(3) if members or leader_alive else range(0)
            if rounds:
                self._signal_all(signals.SIGTERM, members, leader_alive, sent)
            if rounds:
                self._wait_tree_ended(grace)
            for round_ in rounds:
                members = self._members(marked=round_ == 0)
                leader_alive = self.exit_status() is None
                if not members and not leader_alive:
                    break
                killed += [self.pid] if leader_alive else []
                killed += list(members)
                self._signal_all(signals.SIGKILL, members, leader_alive, sent)
                end = time.monotonic() + KILL_WAIT
                while time.monotonic() < end and (self.exit_status() is None or self._members()):
                    time.sleep(0.02)
            status = self.exit_status() or (None, None)
            self._reap()
            leftover = tuple(sorted(self._members(marked=True))) if rounds else ()
            holders = self._port_holders() if check_port else None
            if self._book is not None:
                self._book.settle(SETTLE_SECONDS)
                self._book.note(f"enginespec: stopped ({ended(*status)})")
            return StopResult(
                signals=tuple(sent),
                killed=tuple(sorted(set(killed))),
                exit_code=status[0],
                signal=status[1],
                leftover=leftover,
                port=self.port,
                port_holders=holders,
                container=in_container,
            )

    def _stop_container(self, container: Container, grace: float) -> ContainerStop:
        """Stops the container through its runtime's API, once that API vouches that the
        container's first process is this engine or one of its parents (a cgroup's name alone
        is anyone's to choose). Docker and Podman speak the same API; other runtimes do not."""

        runtime = container.runtime
        signalled = "its processes were signalled"

        def result(stopped: bool, detail: str) -> ContainerStop:
            return ContainerStop(runtime=runtime, container=container.id, stopped=stopped, detail=detail)

        label = literal(container.label)
        socket_path = self._runtime_sockets.get(runtime)
        if socket_path is None:
            return result(False, f"{runtime} has no API enginespec speaks: {signalled}")
        inspected = api_inspect(socket_path, container.id, self._runtime_timeout)
        if inspected is None or not runs_in_lineage(self.pid, inspected.pid):
            said = "does not answer for" if inspected is None else "does not say this engine runs in"
            return result(False, f"{runtime}'s API ({literal(socket_path)}) {said} {label}: {signalled}")
        status = api_stop(socket_path, container.id, max(0, math.ceil(grace)), grace + KILL_WAIT + 30)
        if status in (204, 304):
            return result(True, f"{runtime} stopped {label} (HTTP {status})")
        answer = f"HTTP {status}" if isinstance(status, int) else status
        return result(False, f"{runtime} did not stop {label} ({answer}): {signalled}")

    def _wait_tree_ended(self, seconds: float) -> None:
        """Waits up to ``seconds`` for the engine and every member of its tree to end."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (self.exit_status() is None or self._members()):
            self._sleep(0.05)
            time.sleep(0.01)

    def _signal_all(
        self, sig: int, members: Mapping[int, int], leader_alive: bool, sent: list[Signalled]
    ) -> None:
        name = signals.Signals(sig).name
        group_signalled = False
        if self._popen is not None and self._popen.returncode is None:
            # the leader is our unreaped child: its pid, which is the group's id, is still ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
                group_signalled = True
                sent.append(Signalled(target="group", pid=self.pid, signal=name))
        elif leader_alive and _send(self._pidfd, self.pid, sig):
            sent.append(Signalled(target="process", pid=self.pid, signal=name))
        for pid, start in members.items():
            if group_signalled and _in_group(pid, self.pid):
                continue
            pidfd = open_pidfd(pid, start)
            if pidfd is None:
                continue
            try:
                if _send(pidfd, pid, sig):
                    sent.append(Signalled(target="process", pid=pid, signal=name))
            finally:
                if pidfd >= 0:
                    os.close(pidfd)

    def _reap(self) -> None:
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=KILL_WAIT)

    def _port_holders(self) -> tuple[int, ...] | None:
        if self.port is None:
            return None
        inodes = [listener.inode for listener in sockets.listeners(self.port)]
        return sockets.holders(inodes, (os.getpid(),)) if inodes else ()

    def close(self) -> None:
        """Stops an engine enginespec started if it still runs (an adopted one is left running),
        and releases its pidfd and log file."""
        self._stopped.set()
        if self._popen is not None and (self.running or self._members()):
            self.stop(grace=10.0)
        else:
            self._reap()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=5)
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
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
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
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
        self._supervisor = threading.Thread(target=self._supervise, args=(policy,), daemon=True)
        self._supervisor.start()

    def _supervise(self, policy: Supervision) -> None:
        backoff, restarts, bad = policy.backoff, 0, 0
        while not self._stopped.is_set():
            self._sleep(policy.check_interval)
            if self._stopped.is_set():
                return
            exited = self.exit_status() is not None
            if not exited and policy.on_unhealthy and self.base_url is not None:
                state = check_health(self.engine, self.base_url, api_key=self._api_key).state
                bad = bad + 1 if state in ("unhealthy", "down", "not_serving") else 0
            due = (exited and policy.on_exit) or bad >= policy.unhealthy_checks
            if not due:
                continue
            if policy.max_restarts is not None and restarts >= policy.max_restarts:
                return
            if self._stopped.wait(backoff):
                return
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    self.restart()
                    self._stopped.clear()
                except RestartRefused:  # will be refused again (its owner may not enter its cwd)
                    return
                except (LaunchFailed, OSError):
                    pass
            restarts, bad = restarts + 1, 0
            backoff = min(max(backoff * 2, policy.backoff), policy.max_backoff)


def _in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False


def _plan_for(spec: EngineDefinition, recipe: Recipe, config: Config) -> tuple[_Plan, str | None]:
    command = commands.plan(spec, recipe, config)
    if command.launcher == "docker":
        raise InvalidInputError("runtime: launch runs native engines; run a docker recipe with `docker run`")
    masked = command.redacted_argv()
    secrets = {real for real, shown in zip(command.argv, masked, strict=True) if real != shown}
    secrets |= {value for name, value in command.env.items() if is_secret_name(name)}
    api_key = recipe.api_key.get_secret_value() if recipe.api_key is not None else None
    if api_key:
        secrets.add(api_key)
    plan = _Plan(
        argv=command.argv,
        env={**os.environ, **command.env},
        delta=dict(command.env),
        cwd=os.getcwd(),
        secrets=tuple(sorted(secrets)),
    )
    return plan, api_key


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
    ``<log_dir>/<engine_id>/<start time>.log`` (``log_dir`` defaults to the data dir's
    ``logs``). Raises :class:`LaunchFailed` (``port_in_use``, naming the holder) when another
    process listens on its port. Returns at once: see :meth:`RunningEngine.wait_ready`."""
    config = config or Config()
    spec = find_engine(recipe.engine)
    plan, api_key = _plan_for(spec, recipe, config)
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


# -- adopting ------------------------------------------------------------------------------------


def _read_plan(pid: int) -> _Plan:
    """The command, environment, working directory, program and owner of a running process,
    from ``/proc``; :class:`RestartRefused` says which could not be read and why."""
    raw: dict[str, bytes] = {}
    for what in ("cmdline", "environ"):
        try:
            raw[what] = read_proc(pid, what, 4 << 20)
        except OSError as error:
            raise RestartRefused(f"pid {pid}: cannot read {proc_path(pid, what)}: {error.strerror}") from None
    links: dict[str, str] = {}
    for what in ("cwd", "exe"):
        try:
            links[what] = proc_link(pid, what)
        except OSError as error:
            raise RestartRefused(f"pid {pid}: cannot read {proc_path(pid, what)}: {error.strerror}") from None
    argv = tuple(os.fsdecode(part) for part in raw["cmdline"].split(b"\0") if part)
    if not argv:
        raise RestartRefused(f"pid {pid}: its command line is empty (a zombie, or it hides it)")
    env: dict[str, str] = {}
    for entry in raw["environ"].split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    env.pop(RUN_ID_VARIABLE, None)
    for what, path in links.items():
        if path.endswith(" (deleted)"):
            raise RestartRefused(f"pid {pid}: its {what} {literal(path)} was deleted or replaced")
    uid, gid, groups = _owner(pid)
    # the same program, run as its owner: never with more privilege than it had
    as_owner = uid != os.geteuid()
    return _Plan(
        argv=argv,
        env=env,
        delta={},
        cwd=links["cwd"],
        secrets=tuple(v for k, v in env.items() if is_secret_name(k)),
        executable=links["exe"],
        user=uid if as_owner else None,
        group=gid if as_owner else None,
        groups=groups if as_owner else None,
    )


def _owner(pid: int) -> tuple[int, int, tuple[int, ...]]:
    """The real uid, gid and supplementary groups of a process (``/proc/PID/status``)."""
    fields: dict[str, list[str]] = {}
    try:
        for line in os.fsdecode(read_proc(pid, "status", 1 << 16)).splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.split()
        return int(fields["Uid"][0]), int(fields["Gid"][0]), tuple(int(g) for g in fields.get("Groups", []))
    except (OSError, KeyError, IndexError, ValueError):
        raise RestartRefused(f"pid {pid}: cannot read its owner from {proc_path(pid, 'status')}") from None


def find_log_source(pid: int) -> LogSource:
    """Where the output of a process enginespec did not start goes (see :class:`LogSource`)."""
    targets = []
    for fd in (1, 2):
        try:
            targets.append(proc_link(pid, f"fd/{fd}"))
        except OSError:
            targets.append("")
    refused = None
    for fd, target in enumerate(targets, 1):
        if target.startswith("/") and not target.startswith(("/dev/", PROC + "/")):
            path = proc_path(pid, f"fd/{fd}")
            # tried as its owner: a file it holds but could not read (an O_PATH fd of a
            # root-only file) is not a log anyone reads through enginespec
            try:
                os.close(_open_log_file(pid, path))
            except Refused as why:
                refused = refused or LogSource(kind="none", path=path, reason=str(why))
                continue
            return LogSource(kind="file", path=path)
    if refused is not None:
        return refused
    container = _container_of(pid)
    if container is not None:
        return LogSource(kind="docker", container=container)
    unit = _unit_of(pid)
    if unit is not None and any(t.startswith("socket:") for t in targets):
        return LogSource(kind="journald", unit=unit)
    if any(t.startswith(("/dev/pts/", "/dev/tty")) for t in targets):
        return LogSource(kind="terminal", reason="its output goes to a terminal: nothing keeps it")
    if any(t.startswith("pipe:") for t in targets):
        return LogSource(kind="pipe", reason="its output goes to a pipe another process reads")
    if all(t in ("", "/dev/null") for t in targets):
        return LogSource(kind="none", reason="its output is discarded (/dev/null) or cannot be read")
    return LogSource(kind="none", reason=f"its output goes to {literal(targets[0] or targets[1])}")


def _container_of(pid: int) -> str | None:
    try:
        found = parse_cgroup(read_proc(pid, "cgroup", 1 << 16))
    except OSError:
        return None
    if found is None or found[0] not in ("docker", "podman"):
        return None
    return str(found[1])


_UNIT = re.compile(r"[A-Za-z0-9:_.@\\-]+\.(?:service|scope)")


def _unit_of(pid: int) -> str | None:
    """The systemd unit a process runs in, from its cgroup path (``.../ollama.service``)."""
    try:
        lines = os.fsdecode(read_proc(pid, "cgroup", 1 << 16)).splitlines()
    except OSError:
        return None
    paths = [line.split(":", 2)[-1] for line in lines]
    for path in paths:
        for part in reversed(path.split("/")):
            if _UNIT.fullmatch(part):
                return part
    return None


def _open_log_file(pid: int, path: str) -> int:
    """An fd for reading the file a process's output goes to (``path``: ``/proc/PID/fd/N``),
    opened as the process's owner could (:func:`enginespec._host.namedfiles.open_held`); raises
    :class:`Refused` with the reason."""
    fd = int(path.rsplit("/", 1)[1])
    try:
        return open_held(pid, fd)
    except Refused as why:
        raise Refused(f"the file its output goes to (fd {fd}) {why}") from None


def _source_lines(pid: int, source: LogSource, n: int) -> list[LogLine]:
    """The last ``n`` lines from where an adopted engine's output goes (a file its owner may no
    longer read gives one line that says so)."""
    now = time.time()
    texts: list[str] = []
    if source.kind == "file" and source.path is not None:
        try:
            texts = tail_file(_open_log_file(pid, source.path), n)
        except Refused as why:
            return [LogLine(time=now, stream="log", text=f"enginespec: not read: {why}")]
        except OSError:
            texts = []
    elif source.kind in ("journald", "docker") and n > 0:
        argv = (
            ["journalctl", "--no-pager", "-o", "cat", "-n", str(n), "-u", source.unit or ""]
            if source.kind == "journald"
            else ["docker", "logs", "--tail", str(n), source.container or ""]
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                argv, capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL
            )
            texts = (done.stdout + done.stderr).decode("utf-8", errors="replace").splitlines()[-n:]
    return [LogLine(time=now, stream="log", text=text) for text in texts]


def adopt(
    process: EngineProcess, *, log_dir: str | os.PathLike[str] | None = None, config: Config | None = None
) -> RunningEngine:
    """A :class:`RunningEngine` for an engine a scan found. Its identity is the pid and start
    time, pinned by a pidfd: stop and restart never signal a process that took its pid since.
    Once restarted, its output is kept as a launched engine's is, in
    ``<log_dir>/<engine_id>/<start time>.log`` (``log_dir`` defaults to the data dir's ``logs``).
    Raises :class:`InvalidInputError` when that process is gone already."""
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
    engine.engine_id = process.engine_id
    engine.base_url = process.base_url
    engine.pid, engine.start_time, engine._ticks, engine._pidfd = (
        process.pid,
        process.start_time,
        ticks,
        pidfd,
    )
    engine.adopted = True
    settings = config or Config()
    engine._container = process.container if process._local else None
    engine._runtime_sockets = {"docker": str(settings.docker_socket), "podman": str(settings.podman_socket)}
    engine._runtime_timeout = settings.container_api_timeout
    engine._known = {pid: start for pid in process.worker_pids if (start := start_ticks(pid)) is not None}
    engine.log_source = find_log_source(process.pid)
    try:
        plan = _read_plan(process.pid)
    except RestartRefused as refused:
        engine._unrestartable = str(refused)
    else:
        # read while the pidfd's process still runs: its pid was not anyone else's meanwhile
        if engine.exit_status() is None:
            engine._plan = plan
        else:
            engine._unrestartable = "it exited while its command was read"
    return engine
