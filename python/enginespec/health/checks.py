"""Health and readiness of engine servers over HTTP (httpx), understanding each engine's answers.

The probe logic is written once, as a generator that yields the requests it needs and receives
their replies (`_probe`), and is driven by one runner over `httpx.AsyncClient` that bounds each
whole request (a server that trickles bytes cannot stall it). The sync functions run that same
runner on a private event loop, so both forms behave alike. What each engine's answers mean lives
in its EngineSpec (`classify_health`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import enginespec.process.sockets as sockets
from enginespec._host.root import HOST_ROOT
from enginespec.errors import EngineExited, NotReady
from enginespec.health.engineworker import missing_engine_worker
from enginespec.health.reaching import (
    CheckTarget,
    PeerMismatch,
    Request,
    auth_headers,
    blocking,
    endpoint_of,
    engine_tree,
    not_serving,
    ownership_problem,
    target_of,
    transport,
    tree_of,
)
from enginespec.healthrecord import Health, HealthState
from enginespec.process.liveness import process_alive
from enginespec.process.record import EngineProcess
from enginespec.process.versions import told, wants_answer
from enginespec.untrusted.boundary import contained_async
from enginespec.untrusted.documents import json_object

#: What a round of checks gives for each engine (its Health, or the watch's Vitals).
_Checked = TypeVar("_Checked")

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class _Reply:
    status: int | None = None
    body: bytes = b""
    elapsed: float | None = None
    #: "refused", "timeout" or "broken" when no complete answer came.
    failure: str | None = None
    detail: str = ""


_Probe = Generator[Request, _Reply, Health]
#: The most bytes of one answer read (a health answer is a few bytes, /v1/models a few KB): a
#: larger one is not read further, so no server can make a check allocate what it sends.
MAX_ANSWER_BYTES = 1 << 20


def _model_ids(body: bytes) -> tuple[str, ...] | None:
    listed = (json_object(body, max_bytes=MAX_ANSWER_BYTES) or {}).get("data")
    if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
        return None
    ids = [item.get("id") for item in listed]
    # an id is a name: a number or an object in its place is not this answer's form
    return tuple(ids) if all(isinstance(i, str) for i in ids) else None


def _probe(t: CheckTarget, verify_identity: bool, deep: bool, timeout: float) -> _Probe:
    def health(
        state: HealthState, reason: str, reply: _Reply | None = None, ids: Sequence[str] = ()
    ) -> Health:
        result = Health(
            engine=t.spec.id,
            base_url=t.base_url,
            state=state,
            http_status=reply.status if reply else None,
            latency=reply.elapsed if reply else None,
            model_ids=tuple(ids),
            reason=reason,
            checked_at=time.time(),
        )
        result._answer = hash(reply.body) if reply else 0
        return result

    if t.process is not None and not process_alive(t.process):
        return health("down", "process is gone")
    if t.process is not None and (unasked := needs_no_request(t.process, t.base_url)) is not None:
        return health(*unasked)
    if t.base_url is None:
        return health("unknown", "no usable listen address: no address")
    where, verdict = endpoint_of(t)
    if where is None:
        return health(*verdict)
    path = t.spec.serving.health_path
    # A runner answers as the server it is, not as its supervisor (Ollama's are llama-servers).
    if t.process is not None and t.process.role == "runner" and t.spec.serving.runner_health_path:
        path = t.spec.serving.runner_health_path
    reply = yield Request("GET", path, where, authorized=t.spec.serving.health_authorized)
    if reply.failure is not None or reply.status is None:
        return health(*_unanswered(t, reply, timeout, path))
    if t.process is not None and not t.process.private_network:
        # An answer says nothing about this server when another process holds the port. (In its
        # own network namespace the port is another table's; a published port is the proxy's.)
        # Of the address connected to (the tree's own, for a URL from the process).
        connected = t.base_url if t.given_url else where.url
        problem = ownership_problem(tree_of(t.process), connected, t.process._root)
        if problem is not None:
            return health("unhealthy", problem, reply)
        # Gone since the check began, its fds cannot show who held the port: the answer may be
        # another server's (a second vLLM on a taken port exits 1 seconds after starting).
        if not process_alive(t.process):
            return health("down", "process is gone", reply)
    state, reason = t.spec.classify_health(reply.status, reply.body)
    first = reply
    if state == "ready" and t.process is not None and not t.given_url and wants_answer(t.spec, t.process):
        # A binary engine's release, asked once (KoboldCpp's health answer is its version's).
        version_path = str(t.spec.serving.version_path)
        said = reply if version_path == path else (yield Request("GET", version_path, where, authorized=True))
        if said.failure not in ("timeout", "refused"):
            # a request the deadline cut short, or a connection refused, is no answer: the next
            # check asks again
            told(t.spec, t.process, said.status, said.body)
    loaded = t.spec.serving.loaded_models_path
    if state == "ready" and loaded and path == t.spec.serving.health_path and not (verify_identity or deep):
        # Which models a ready server has loaded (Ollama's names): what it says, or nothing.
        listed = yield Request("GET", loaded, where, authorized=True)
        names = t.spec.loaded_models(listed.body) if listed.status == 200 else None
        return health(state, reason, first, names or ())
    if state != "ready" or not (verify_identity or deep):
        return health(state, reason, first)
    models = yield Request("GET", "/v1/models", where, authorized=True)
    ids = _model_ids(models.body) if models.status == 200 else None
    if ids is None:
        if models.status in (401, 403):
            if t.unusable_key:
                return health("unknown", "the API key found cannot be sent in an HTTP header", first)
            return health("unknown", "/v1/models needs an API key enginespec does not have", first)
        return health("unknown", f"/v1/models unreadable ({models.detail or f'HTTP {models.status}'})", first)
    if verify_identity and t.expected_names and not set(t.expected_names) & set(ids):
        reason = f"serves {', '.join(ids) or 'no model'}, expected {', '.join(t.expected_names)}"
        return health("unhealthy", reason, first, ids)
    if deep:
        model = t.expected_names[0] if t.expected_names else (ids[0] if ids else "")
        body = {"model": model, "prompt": "1", "max_tokens": 1}
        answer = yield Request("POST", "/v1/completions", where, authorized=True, body=body)
        if answer.status != 200:
            detail = answer.detail or f"HTTP {answer.status}"
            return health("unhealthy", f"a one-token completion failed ({detail})", first, ids)
    return health("ready", reason, first, ids)


def needs_no_request(process: EngineProcess, base_url: str | None) -> tuple[HealthState, str] | None:
    """The state and reason of an engine that is asked nothing (a follower, worker or orphan
    serves no HTTP API; an engine with no usable address cannot be asked), from its record
    alone: such an engine is never "not checked in time"."""
    if (why := not_serving(process)) is not None:
        return "not_serving", f"{why}: not checked"
    if base_url is None:
        return "unknown", f"no usable listen address: {'; '.join(process.problems)}"
    return None


def _unanswered(t: CheckTarget, reply: _Reply, timeout: float, path: str) -> tuple[HealthState, str]:
    """The state and reason of a health request that got no answer. A request that was made and
    not answered within its timeout is the server's doing (``unhealthy``), unlike a check the
    overall deadline cut before it could finish (``unknown``: see :func:`not_checked_in_time`)."""
    if reply.failure == "refused":
        if t.process is not None:
            return "starting", "process is up, not accepting connections yet"
        return "down", f"nothing listening ({reply.detail})"
    if reply.failure == "timeout":
        # to a hundredth: a timeout derived from what a refresh has left is no round number
        within = f"{round(timeout, 2):g}s"
        if reply.detail == "connect":
            return "unhealthy", f"did not accept the connection within {within}"
        if reply.detail == "read":
            return "unhealthy", f"accepted the connection, no answer from {path} within {within}"
        return "unhealthy", f"no answer from {path} within {within}"
    if reply.failure == "foreign":
        return "unhealthy", reply.detail
    return "unknown", f"{path}: {reply.detail}"


def _failure(err: httpx.HTTPError) -> tuple[str, str]:
    import httpx

    if isinstance(err, httpx.ConnectTimeout):
        return "timeout", "connect"
    if isinstance(err, httpx.ReadTimeout):
        return "timeout", "read"
    if isinstance(err, httpx.TimeoutException):
        return "timeout", "timed out"
    if isinstance(err, httpx.ConnectError):
        return "refused", str(err) or "connection refused"
    return "broken", f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _advance(probe: _Probe, reply: _Reply | None) -> Request | Health:
    """The probe's next request, or its verdict."""
    try:
        return next(probe) if reply is None else probe.send(reply)
    except StopIteration as done:
        result: Health = done.value
        return result


async def _fetch(client: httpx.AsyncClient, t: CheckTarget, step: Request) -> _Reply:
    """One request, its answer read up to MAX_ANSWER_BYTES (streamed: never allocated whole)."""
    started = time.perf_counter()
    # Not compressed: what is counted is what is kept (a small gzip can inflate to gigabytes).
    headers = {**auth_headers(t, step), "Accept-Encoding": "identity"}
    url = step.endpoint.url + step.path
    async with client.stream(step.method, url, headers=headers, json=step.body) as response:
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                return _Reply(
                    failure="broken", detail=f"answer larger than {MAX_ANSWER_BYTES} bytes: not read"
                )
        return _Reply(response.status_code, bytes(body), time.perf_counter() - started)


async def _run(t: CheckTarget, probe: _Probe, timeout: float) -> Health:
    # The first step finds the socket to use, reading /proc: in a thread, so the event loop (and
    # the overall deadline) never waits for it.
    step = await asyncio.to_thread(_advance, probe, None)
    if isinstance(step, Health):
        return step
    # httpx is imported on the first check, not with the package: `import enginespec` (whose
    # Scanner can watch health) stays light.
    import httpx

    async with httpx.AsyncClient(
        transport=transport(step.endpoint), timeout=httpx.Timeout(timeout)
    ) as client:
        while isinstance(step, Request):
            try:
                # httpx's timeouts are per phase; also bound the whole request (a trickling server).
                reply = await asyncio.wait_for(_fetch(client, t, step), timeout * 2)
            except httpx.HTTPError as err:
                failure, detail = _failure(err)
                reply = _Reply(failure=failure, detail=detail)
            except (httpx.InvalidURL, httpx.StreamError, ValueError) as err:
                reply = _Reply(failure="broken", detail=f"{type(err).__name__}: {err}")
            except PeerMismatch as err:
                reply = _Reply(failure="foreign", detail=str(err))
            except asyncio.TimeoutError:
                reply = _Reply(failure="timeout", detail="timed out")
            step = _advance(probe, reply)
    return await _judged(t, step)


async def _judged(t: CheckTarget, health: Health) -> Health:
    """``health``, or ``unhealthy`` for a scanned server that answers ready without the worker
    its engine always runs (see :mod:`enginespec.health.engineworker`; it reads ``/proc``: in a
    thread)."""
    if health.state != "ready" or t.process is None or t.given_url or t.spec.serving.engine_worker is None:
        return health
    why = await asyncio.to_thread(missing_engine_worker, t.spec, t.process)
    return health if why is None else health.model_copy(update={"state": "unhealthy", "reason": why})


async def _within(t: CheckTarget, job: Coroutine[Any, Any, Health], deadline: float | None) -> Health:
    """The check, or ``unknown`` when it is not done within ``deadline`` seconds, or when it
    failed (the error boundary: see :mod:`enginespec.untrusted.boundary`)."""

    async def bounded() -> Health:
        if deadline is None:
            return await job
        try:
            return await asyncio.wait_for(job, deadline)
        except asyncio.TimeoutError:
            return not_checked_in_time(t.spec.id, t.base_url, deadline)

    return await contained_async("health", bounded(), lambda reason: broken(t.spec.id, t.base_url, reason))


def not_checked_in_time(engine: str, base_url: str | None, deadline: float) -> Health:
    """The verdict of an engine whose check did not finish within the overall deadline: the
    deadline ran out (ours), not the engine's request timeout. ``checked_at`` is ``None``: a
    loop keeps the engine's last verdict instead (see :func:`kept`)."""
    reason = f"not checked within the overall deadline of {deadline:g}s"
    return Health(engine=engine, base_url=base_url, state="unknown", reason=reason)


def late_verdict(process: EngineProcess, deadline: float) -> Health:
    """What an engine not checked within ``deadline`` is: what its record says, for one that
    needs no request (:func:`needs_no_request`), else :func:`not_checked_in_time`."""
    unasked = needs_no_request(process, process.base_url)
    if unasked is None:
        return not_checked_in_time(process.engine, process.base_url, deadline)
    state, reason = unasked
    return Health(
        engine=process.engine, base_url=process.base_url, state=state, reason=reason, checked_at=time.time()
    )


def broken(engine: str, base_url: str | None, reason: str) -> Health:
    """The verdict of a check that failed (``reason`` from :func:`enginespec.untrusted.boundary.failed`)."""
    return Health(engine=engine, base_url=base_url, state="unknown", reason=reason, checked_at=time.time())


#: How long a loop keeps an engine's last verdict, marked ``stale``, while its checks do not
#: finish in time: past that, it is ``unknown`` (not checked) like any engine.
STALE_SECONDS = 60.0
#: The share of an overall deadline a request may take when a caller gives only the deadline
#: (the CLI's ``--timeout``, the exporter's refresh): a server that accepts and never answers
#: then times out (``unhealthy``, the server's doing) before the deadline would cut its check
#: (``unknown``, ours).
REQUEST_SHARE = 0.75


def request_timeout(deadline: float) -> float:
    """The timeout of each request within an overall ``deadline`` (see :data:`REQUEST_SHARE`)."""
    return deadline * REQUEST_SHARE


def kept(now: Health, before: Health | None) -> Health:
    """``now``; or, when ``now`` only says the engine was not checked in time and ``before``
    (the same engine's verdict of an earlier round) was reached within :data:`STALE_SECONDS`,
    ``before`` marked ``stale``."""
    if now.checked_at is not None or now.state != "unknown" or before is None or before.checked_at is None:
        return now
    if time.time() - before.checked_at > STALE_SECONDS:
        return now
    return before if before.stale else before.model_copy(update={"stale": True})


def check_health(
    target: EngineProcess | str,
    base_url: str | None = None,
    *,
    timeout: float = 2.0,
    verify_identity: bool = False,
    deep: bool = False,
    api_key: str | None = None,
    deadline: float | None = None,
) -> Health:
    """Checks one engine: ``check_health(proc)`` or ``check_health("llamacpp", "http://127.0.0.1:8080")``.

    ``verify_identity`` confirms through ``/v1/models`` that the server serves the model its argv
    names; ``deep`` also asks for a one-token completion. The API key comes from ``api_key``, the
    engine's ``--api-key`` or its environment (``VLLM_API_KEY``, ``LLAMA_API_KEY``); it is never
    printed or logged. ``timeout`` bounds each request, ``deadline`` (seconds) the whole check:
    not done by then, it is ``unknown`` with that reason. Never raises for what the server does.

    For a scanned process (no ``base_url``), requests go only to a socket the process's own tree
    holds, found before any request (see docs/health.md); a ``base_url`` given here is the
    caller's to choose and is used as given.
    """
    t = target_of(target, base_url, api_key)
    return blocking(_within(t, _run(t, _probe(t, verify_identity, deep, timeout), timeout), deadline))


async def check_health_async(
    target: EngineProcess | str,
    base_url: str | None = None,
    *,
    timeout: float = 2.0,
    verify_identity: bool = False,
    deep: bool = False,
    api_key: str | None = None,
    deadline: float | None = None,
) -> Health:
    """Async twin of :func:`check_health`."""
    t = target_of(target, base_url, api_key)
    return await _within(t, _run(t, _probe(t, verify_identity, deep, timeout), timeout), deadline)


def _progress_key(health: Health) -> tuple[object, ...]:
    return (health.state, health.http_status, health.reason, health.model_ids, health._answer)


class _Waiter:
    """The waiting policy shared by :func:`wait_ready` and :func:`wait_ready_async`."""

    def __init__(
        self,
        target: EngineProcess | str,
        timeout: float,
        poll: float,
        stall_timeout: float | None,
        process: subprocess.Popen[Any] | None,
    ) -> None:
        self.target, self.timeout, self.poll, self.stall_timeout = target, timeout, poll, stall_timeout
        self.process = process
        self.start = self.progress_at = time.monotonic()
        self.delay = poll
        self.last: Health | None = None

    def _exited(self, health: Health) -> None:
        """Raises EngineExited with the Popen's status once it has exited."""
        returncode = self.process.poll() if self.process is not None else None
        if returncode is not None:
            message = f"engine exited with status {returncode} before becoming ready"
            raise EngineExited(message, returncode, health)

    def after(self, health: Health) -> float | None:
        """None when ready; else the delay before the next check. Raises when waiting is over."""
        now = time.monotonic()
        # The Popen's status first: a server answering on the port may be another process's.
        self._exited(health)
        if (
            health.state == "ready"
            and self.process is not None
            and not isinstance(self.target, EngineProcess)
        ):
            # the Popen's, a process of this host
            problem = ownership_problem(
                engine_tree(self.process.pid, (), HOST_ROOT), health.base_url, HOST_ROOT
            )
            # Its sockets cannot be read once it is gone: an exit during the check is an exit.
            returncode = self.process.poll()
            if returncode is not None:
                raise EngineExited(
                    f"engine exited with status {returncode} before becoming ready", returncode, health
                )
            if problem is not None:
                health = health.model_copy(update={"state": "unhealthy", "reason": problem})
        # and again: a process that exited meanwhile had no sockets left to tell its own
        self._exited(health)
        if self.last is None or _progress_key(health) != _progress_key(self.last):
            self.progress_at, self.delay = now, self.poll
        self.last = health
        if health.state == "ready":
            return None
        gone = health.state == "down" and isinstance(self.target, EngineProcess)
        returncode = None
        if gone and self.process is not None:
            # The process is gone but not yet reaped (or its exit raced the check): collect its
            # status rather than report an exit without one.
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = self.process.wait(timeout=5)
        if returncode is not None or gone:
            status = f" with status {returncode}" if returncode is not None else ""
            raise EngineExited(f"engine exited{status} before becoming ready", returncode, health)
        if health.state == "not_serving":
            raise NotReady(f"never ready: {health.reason}", health)
        if now - self.start >= self.timeout:
            raise NotReady(
                f"not ready after {self.timeout:g}s (last: {health.state}: {health.reason})", health
            )
        if self.stall_timeout is not None and now - self.progress_at >= self.stall_timeout:
            raise NotReady(
                f"no progress for {self.stall_timeout:g}s (last: {health.state}: {health.reason})", health
            )
        delay = min(self.delay, self.timeout - (now - self.start))
        self.delay = min(self.delay * 1.5, max(self.poll, 2.0))
        return max(delay, 0.0)


def wait_ready(
    target: EngineProcess | str,
    base_url: str | None = None,
    *,
    timeout: float = 600.0,
    poll: float = 0.5,
    stall_timeout: float | None = None,
    process: subprocess.Popen[Any] | None = None,
    request_timeout: float = 2.0,
    verify_identity: bool = False,
) -> Health:
    """Polls with backoff until the engine is ready and returns that Health.

    Raises :class:`EngineExited` at once when the process ends (with its exit status when
    ``process`` is the ``Popen`` that started it), :class:`NotReady` after ``timeout`` or when
    nothing changed for ``stall_timeout`` seconds (a change of state or answer is progress, so a
    slow but steady model load is not cut off).
    """
    waiter = _Waiter(target, timeout, poll, stall_timeout, process)
    while True:
        health = check_health(target, base_url, timeout=request_timeout, verify_identity=verify_identity)
        delay = waiter.after(health)
        if delay is None:
            return health
        time.sleep(delay)


async def wait_ready_async(
    target: EngineProcess | str,
    base_url: str | None = None,
    *,
    timeout: float = 600.0,
    poll: float = 0.5,
    stall_timeout: float | None = None,
    process: subprocess.Popen[Any] | None = None,
    request_timeout: float = 2.0,
    verify_identity: bool = False,
) -> Health:
    """Async twin of :func:`wait_ready`."""
    waiter = _Waiter(target, timeout, poll, stall_timeout, process)
    while True:
        health = await check_health_async(
            target, base_url, timeout=request_timeout, verify_identity=verify_identity
        )
        delay = waiter.after(health)
        if delay is None:
            return health
        await asyncio.sleep(delay)


async def check_all_async(
    processes: Iterable[EngineProcess],
    *,
    concurrency: int = 64,
    timeout: float = 2.0,
    verify_identity: bool = False,
    deadline: float | None = None,
) -> list[Health]:
    """Checks many engines at once, at most ``concurrency`` in flight, each request bounded by
    ``timeout``: one hung server cannot stall the others, nor one user's hung servers another
    user's engines (the slots go to each owner's engines in turn). With ``deadline`` (seconds), the whole
    run ends by then: engines not checked in time (still waiting, or still in flight) are
    ``unknown`` with that reason. Results are in the order of ``processes``."""
    if concurrency < 1:
        raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
    if deadline is not None and not deadline > 0:
        raise ValueError(f"deadline: must be a positive number of seconds, got {deadline!r}")
    listed = list(processes)

    def check(proc: EngineProcess) -> Awaitable[Health]:
        return check_health_async(proc, timeout=timeout, verify_identity=verify_identity)

    def late(proc: EngineProcess) -> Health:
        return late_verdict(proc, deadline or 0.0)

    def failed(proc: EngineProcess, reason: str) -> Health:
        return broken(proc.engine, proc.base_url, reason)

    return await in_turn(listed, check, late, failed, concurrency=concurrency, deadline=deadline)


async def in_turn(
    processes: Sequence[EngineProcess],
    check: Callable[[EngineProcess], Awaitable[_Checked]],
    late: Callable[[EngineProcess], _Checked],
    failed: Callable[[EngineProcess, str], _Checked],
    *,
    concurrency: int,
    deadline: float | None,
    on_result: Callable[[int, _Checked], None] | None = None,
) -> list[_Checked]:
    """``check`` of every process, at most ``concurrency`` in flight, the slots going to each
    owner's engines in turn (see :func:`_owners_in_turn`); with ``deadline`` (seconds) the round
    ends by then and processes still waiting or in flight get ``late``; a check that raises
    gives ``failed(process, reason)`` (the error boundary: one engine's failure is its own).
    Each network namespace's socket table is read once for the round. Results are in the order
    of ``processes``; ``on_result(index, result)`` is told each one as it comes (a hung server's
    timeout does not hold back the others' results)."""
    gate = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    end = None if deadline is None else loop.time() + deadline

    async def gated(proc: EngineProcess) -> _Checked:
        async with gate:
            return await check(proc)

    async def timed(proc: EngineProcess) -> _Checked:
        if end is None:
            return await gated(proc)
        try:
            return await asyncio.wait_for(gated(proc), max(end - loop.time(), 0.0))
        except asyncio.TimeoutError:
            return late(proc)

    async def one(at: int) -> _Checked:
        process = processes[at]
        result = await contained_async("health", timed(process), lambda reason: failed(process, reason))
        if on_result is not None:
            on_result(at, result)
        return result

    with sockets.shared_tables():
        order = _owners_in_turn(processes)
        found = dict(zip(order, await asyncio.gather(*(one(at) for at in order)), strict=True))
    return [found[at] for at in range(len(processes))]


def _owners_in_turn(processes: Sequence[EngineProcess]) -> list[int]:
    """The indexes of ``processes``, each owner's next in turn: the checks take the ``concurrency``
    slots in this order, so one user's engines that accept and never answer (each holding a
    slot until its timeout) cannot keep every other user's engines waiting past the deadline."""
    queues: dict[int | None, list[int]] = {}
    for at, process in enumerate(processes):
        who = process._root.owner(process.pid)
        queues.setdefault(who.uid if who is not None else None, []).append(at)
    rounds = itertools.zip_longest(*queues.values())
    return [at for taken in rounds for at in taken if at is not None]


def check_all(
    processes: Iterable[EngineProcess],
    *,
    concurrency: int = 64,
    timeout: float = 2.0,
    verify_identity: bool = False,
    deadline: float | None = None,
) -> list[Health]:
    """Sync form of :func:`check_all_async` (runs its own event loop, in a thread if one is running)."""
    job = check_all_async(
        list(processes),
        concurrency=concurrency,
        timeout=timeout,
        verify_identity=verify_identity,
        deadline=deadline,
    )
    return blocking(job)
