"""Whether a started engine came up, and why it did not: waiting until it answers ready on its own
port, and the failure of an engine that ended (classified from its output, the OOM killer's
count of its cgroup, how it ended)."""

from __future__ import annotations

import contextlib
import os
import signal as signals
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from enginespec._host.root import HOST_ROOT
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import find_engine
from enginespec.errors import InvalidInputError, LaunchFailed, NotReady
from enginespec.failures import Failure
from enginespec.health.checks import check_health
from enginespec.health.reaching import ownership_problem
from enginespec.healthrecord import Health
from enginespec.lifecycle.handle import ProcessHandle
from enginespec.lifecycle.logbook import LogBook
from enginespec.lifecycle.ports import with_port_holder

#: Seconds an ended engine's readers get to store what its pipes still hold (they need it only
#: when the host is too busy to run them; a pipe holds at most its capacity, 64 KiB by default).
SETTLE_SECONDS = 10.0


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


def oom_kills(pid: int) -> int | None:
    """The OOM kills counted in the memory cgroup of a process of this host (one launched here,
    or this one) (v2 ``memory.events``, v1 ``memory.oom_control``), ``None`` when unreadable."""
    lines = HOST_ROOT.cgroup_lines(pid)
    if lines is None:
        return None
    for cgroup in lines:
        if cgroup.hierarchy == 0 and not cgroup.controllers:
            candidate = ("sys", "fs/cgroup", cgroup.path.lstrip("/"), "memory.events")
        elif "memory" in cgroup.controllers:
            candidate = ("sys", "fs/cgroup/memory", cgroup.path.lstrip("/"), "memory.oom_control")
        else:
            continue
        for line in (HOST_ROOT.kernel_file(*candidate, limit=1 << 16) or b"").splitlines():
            name, _, value = line.partition(b" ")
            if name == b"oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def ended_failure(
    spec: EngineDefinition,
    argv: Sequence[str],
    process: ProcessHandle,
    book: LogBook | None,
    oom_before: int | None,
) -> Failure | None:
    """Why the engine ended (classified from its output, ``book``), ``None`` while it runs.
    ``oom_before``: the OOM kills its cgroup had counted when it started."""
    status = process.exit_status()
    if status is None:
        return None
    code, sig = status
    text = ""
    if book is not None:
        # every byte it wrote, however slowly this host runs the readers (a descendant may
        # hold the pipes open: not waited for)
        book.settle(SETTLE_SECONDS)
        text = book.text()
    oom = False
    if sig == signals.SIGKILL and oom_before is not None:
        after = oom_kills(os.getpid())
        oom = after is not None and after > oom_before
    return with_port_holder(spec.classify_failure(text, code, sig, oom_kill=oom, argv=argv))


class Starting(Protocol):
    """The engine waited for, as a :class:`~enginespec.lifecycle.running.RunningEngine` is."""

    @property
    def engine(self) -> str: ...
    @property
    def instance_id(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def spec(self) -> EngineDefinition: ...
    @property
    def argv(self) -> list[str]: ...
    def failure(self) -> Failure | None: ...
    def exit_status(self) -> tuple[int | None, int | None] | None: ...
    def stop(self, grace: float = 10.0, *, check_port: bool = True) -> object: ...


def wait_ready(
    starting: Starting,
    api_key: str | None,
    *,
    owners: Callable[[], list[int]],
    output: Callable[[], LogBook | None],
    sleep: Callable[[float], None],
    timeout: float,
    stall_timeout: float | None,
    poll: float,
    request_timeout: float,
) -> Health:
    """Returns once the engine (``starting``) answers ready on its own port, held by one of its processes
    (``owners``). Raises :class:`LaunchFailed` with the classified :class:`Failure` as soon as the
    process exits (what is left of its tree is stopped), :class:`NotReady` after ``timeout``, or
    after ``stall_timeout`` seconds in which neither the health answer nor the output (``output``:
    its log book, whose lines count as progress) changed. ``sleep``: until the next check, cut
    short when the engine ends. Each is asked anew every round: a restart replaces them."""
    url = starting.base_url
    if url is None:
        raise InvalidInputError(
            f"{starting.instance_id}: no address to check (host {starting.host!r}, port {starting.port})"
        )
    started = progress_at = time.monotonic()
    last: Health | None = None
    while True:
        _raise_if_exited(starting)
        health = check_health(starting.engine, url, timeout=request_timeout, api_key=api_key)
        _raise_if_exited(starting)
        if health.state == "ready":
            problem = ownership_problem(owners(), url)
            if problem is None:
                return health
            health = health.model_copy(update={"state": "unhealthy", "reason": problem})
        _raise_if_failed_serving(starting, output(), health)
        now = time.monotonic()
        key = (health.state, health.http_status, health.reason)
        if last is None or key != (last.state, last.http_status, last.reason):
            progress_at = now
        book = output()
        if book is not None:
            progress_at = max(progress_at, book.last_activity)
        last = health
        if now - started >= timeout:
            raise NotReady(f"not ready after {timeout:g}s (last: {health.state}: {health.reason})", health)
        if stall_timeout is not None and now - progress_at >= stall_timeout:
            raise NotReady(
                f"no progress for {stall_timeout:g}s (last: {health.state}: {health.reason})", health
            )
        sleep(min(poll, timeout - (now - started)))


def _raise_if_failed_serving(starting: Starting, book: LogBook | None, health: Health) -> None:
    """An engine that stays up after its model failed to load (mlx_lm.server answers 503
    ``unavailable``): when its health says so and its output shows a recognised failure, that
    failure is raised and the engine stopped."""
    if health.state not in ("unhealthy", "not_serving") or book is None:
        return
    failure = starting.spec.classify_failure(book.text(), argv=starting.argv)
    if failure.kind in ("other", "exited", "killed"):
        return
    with contextlib.suppress(Exception):
        starting.stop(grace=2.0, check_port=False)
    status = starting.exit_status() or (None, None)
    raise LaunchFailed(failure.model_copy(update={"exit_code": status[0], "signal": status[1]}))


def _raise_if_exited(starting: Starting) -> None:
    failure = starting.failure()
    if failure is not None:
        with contextlib.suppress(Exception):
            starting.stop(grace=2.0)
        raise LaunchFailed(failure)
