"""One view over many hosts: the engines that agents (``enginespec agent``) report, fetched
concurrently, each host within its own timeout, so one slow or dead host never holds the others.

What an agent answers is another host's data, untrusted like a process's: it is size-capped and
validated into the same models, shown literally, and never read against this host's ``/proc``
(a remote pid names no process here).
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from enginespec.errors import InvalidInputError
from enginespec.health.load import EngineLoad
from enginespec.health.reaching import blocking
from enginespec.health.servedmodels import ServedModels
from enginespec.healthrecord import Health
from enginespec.process.record import EngineProcess
from enginespec.scanning.watch import Stopped, WatchEvent, parse_event
from enginespec.untrusted.documents import parse_json

#: The most an agent's answer may be (100,000 engines of a few KB each would be a lot of hosts).
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class _FromAgent(BaseModel):
    """Something an agent said: ``agent`` is its address, as given. (The engine's own listen
    host stays ``process.host``; ``host`` was this field's name before, kept as an alias.)"""

    model_config = ConfigDict(frozen=True)

    agent: str

    @property
    def host(self) -> str:
        """The agent's address: the old name of :attr:`agent`."""
        return self.agent


class RemoteEngine(_FromAgent):
    """An engine an agent reported."""

    process: EngineProcess
    health: Health | None = None
    load: EngineLoad | None = None
    #: what it serves now, where the agent read it and this client may see it
    models: ServedModels | None = None


class HostReport(_FromAgent):
    """What one agent answered: its engines, or why there are none (``error``: it could not be
    reached, or said something no agent says, such as a number that is not finite or not in
    range: one host's bad answer is that host's error, never the others')."""

    engines: tuple[RemoteEngine, ...] = ()
    error: str | None = None
    seconds: float


#: Where a number an agent sends must lie, by field name (anywhere in an engine's document): pids
#: (the kernel's pid_max is at most 2**22), ports, a start in epoch seconds (before year 5000).
#: Every other number must be finite and fit in 64 bits.
_RANGES: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("pid", "ppid", "server_pid", "worker_pids", "runner_pid"), (0, 1 << 22)),
    **dict.fromkeys(("port", "effective_port", "listen_ports", "port_conflicts"), (0, 65535)),
    **dict.fromkeys(("host_port", "container_port"), (0, 65535)),
    "start_time": (0, 95_617_584_000),
}
_LIMIT = 1 << 63


def number_problem(document: object, where: str = "") -> str | None:
    """The first number in ``document`` (parsed JSON or a model's dump) that no agent sends, named
    with its path (``engines[3].start_time: inf is not a finite number``), or ``None``."""
    stack: list[tuple[str, str, object]] = [(where, "", document)]
    while stack:
        path, name, value = stack.pop()
        if isinstance(value, dict):
            named = ((str(key)[:40], item) for key, item in value.items())  # a key is the agent's
            stack.extend((f"{path}.{key}" if path else key, key, item) for key, item in named)
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", name, item) for i, item in enumerate(value))
        elif isinstance(value, float | int) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                return f"{path}: {value!r} is not a finite number"
            low, high = _RANGES.get(name, (-_LIMIT, _LIMIT - 1))
            if not low <= value <= high:
                bits = value.bit_length() if isinstance(value, int) else 0
                shown = f"an integer of {bits} bits" if bits > 64 else repr(value)
                return f"{path}: {shown} is out of range ({int(low)} to {int(high)})"
    return None


def agent_url(text: str) -> str:
    """An agent's address: ``http(s)://HOST:PORT`` or ``unix:/path``; :class:`InvalidInputError`
    naming ``--remote`` otherwise."""
    if text.startswith("unix:"):
        if not text[len("unix:") :].startswith("/") or not text.isprintable():
            raise InvalidInputError(f"--remote: {text!r}: a unix socket is unix:/absolute/path")
        return text
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None or not text.isprintable():
        raise InvalidInputError(
            f"--remote: {text!r} is not http://HOST:PORT, https://HOST:PORT or unix:/path"
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidInputError("--remote: credentials in the URL are refused: give --token-file")
    return f"{parts.scheme}://{parts.netloc}"


def _engines(host: str, data: bytes) -> tuple[RemoteEngine, ...]:
    # the one bounded reader: a non-finite or 65-bit number, a nesting of 100,000 is this
    # host's error (a ValueError), never the other hosts' end
    documents = parse_json(data, max_values=MAX_ANSWER_BYTES // 8, where="engines", surrogates=True)
    if not isinstance(documents, list):
        raise ValueError("not a list of engines")
    problem = number_problem(documents, "engines")
    if problem is not None:
        raise ValueError(problem)
    found = []
    for document in documents:
        if not isinstance(document, dict):
            raise ValueError("an engine is not an object")
        health, load = document.pop("health", None), document.pop("load", None)
        models = document.pop("models", None)
        process = EngineProcess.model_validate(document)
        process._local = False
        found.append(
            RemoteEngine(
                agent=host,
                process=process,
                health=None if health is None else Health.model_validate(health),
                load=None if load is None else EngineLoad.model_validate(load),
                models=None if models is None else ServedModels.model_validate(models),
            )
        )
    return tuple(found)


def _headers(token: str | None) -> dict[str, str]:
    # identity: a compressed answer would be inflated before any cap could apply
    headers = {"accept-encoding": "identity"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return headers


#: How much of a refusal's body is read, for its reason.
_REASON_BYTES = 200


def _refused(status: int, start: bytes) -> _Refused:
    reason = start[:_REASON_BYTES].decode("utf-8", "replace").strip()
    return _Refused(f"HTTP {status}" + (f": {reason}" if reason else ""))


async def _fetch_one(url: str, token: str | None) -> bytes:
    import httpx

    if url.startswith("unix:"):
        transport = httpx.AsyncHTTPTransport(uds=url[len("unix:") :])
        base = "http://agent"
    else:
        transport, base = httpx.AsyncHTTPTransport(), url
    async with (
        httpx.AsyncClient(transport=transport, timeout=None, trust_env=False) as client,
        client.stream("GET", f"{base}/v1/engines", headers=_headers(token)) as answer,
    ):
        chunks, size = [], 0
        async for chunk in answer.aiter_raw():
            if answer.status_code != 200:
                raise _refused(answer.status_code, chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise _Refused(f"the answer is over {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
        if answer.status_code != 200:
            raise _refused(answer.status_code, b"")
        return b"".join(chunks)


class _Refused(Exception):
    """The agent answered, but not with engines."""


async def _report(url: str, token: str | None, timeout: float) -> HostReport:
    import httpx

    started = time.monotonic()

    def report(error: str | None = None, engines: tuple[RemoteEngine, ...] = ()) -> HostReport:
        return HostReport(agent=url, engines=engines, error=error, seconds=time.monotonic() - started)

    try:
        data = await asyncio.wait_for(_fetch_one(url, token), timeout)
        # parsed on a thread: a large answer never delays the other hosts' reports
        return report(engines=await asyncio.to_thread(_engines, url, data))
    except asyncio.TimeoutError:
        return report(f"no answer within {timeout:g}s")
    except _Refused as err:
        return report(str(err))
    except httpx.HTTPError as err:
        return report(f"cannot reach it: {err or type(err).__name__}")
    except (ValueError, ValidationError, RecursionError, ArithmeticError) as err:
        summary = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        return report(f"not an agent's answer: {summary}")


async def fetch_remote_async(
    urls: Sequence[str], *, timeout: float = 2.0, token: str | None = None
) -> list[HostReport]:
    """Every agent's engines, asked at once, in the order of ``urls``; each host gets ``timeout``
    seconds (its own, not a share), and its failure is its report's ``error``."""
    if not timeout > 0:
        raise InvalidInputError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    checked = [agent_url(url) for url in urls]
    return list(await asyncio.gather(*(_report(url, token, timeout) for url in checked)))


def fetch_remote(urls: Sequence[str], *, timeout: float = 2.0, token: str | None = None) -> list[HostReport]:
    """Sync form of :func:`fetch_remote_async`."""
    return blocking(fetch_remote_async(urls, timeout=timeout, token=token))


#: The most one event of an agent may be (an engine's JSON is a few KB; one whose argv is at the
#: scan's cap, all control bytes shown as escapes, about 1.6 MB).
MAX_EVENT_BYTES = 8 * 1024 * 1024
#: Seconds between tries to reach an agent again after it was lost (doubled up to the last).
RECONNECT_SECONDS = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


class RemoteEvent(_FromAgent):
    """A watch event an agent streamed (``GET /v1/events``)."""

    event: WatchEvent


class HostLost(_FromAgent):
    """An agent could not be reached, its stream ended, or it said something no agent says (a
    number not finite or out of range): what was known of its engines is stale until it is
    reached again (it then tells every engine it runs anew)."""

    error: str


def watch_remote(
    urls: Sequence[str], *, timeout: float = 2.0, token: str | None = None
) -> Generator[RemoteEvent | HostLost, None, None]:
    """The events of every agent, merged as they come, each host on its own thread: one that is
    slow or gone never holds the others. A host that cannot be reached (within ``timeout``, or
    silent for longer than its keep-alive) is a :class:`HostLost`, then tried again. Runs until
    the iterator is closed. Bad ``urls`` or ``timeout`` raise :class:`InvalidInputError` here."""
    if not timeout > 0:
        raise InvalidInputError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    return _merged([agent_url(url) for url in urls], timeout, token)


def _merged(
    urls: list[str], timeout: float, token: str | None
) -> Generator[RemoteEvent | HostLost, None, None]:
    merged: queue.Queue[RemoteEvent | HostLost] = queue.Queue(maxsize=10_000)
    stop = threading.Event()
    for url in urls:
        threading.Thread(
            target=_follow,
            args=(url, token, timeout, merged, stop),
            name=f"enginespec-remote {url}",
            daemon=True,
        ).start()
    try:
        while True:
            yield merged.get()
    finally:
        stop.set()


def _put(
    merged: queue.Queue[RemoteEvent | HostLost], item: RemoteEvent | HostLost, stop: threading.Event
) -> bool:
    """Hands ``item`` on, waiting while the reader is behind; ``False`` once it has stopped."""
    while not stop.is_set():
        try:
            merged.put(item, timeout=0.5)
            return True
        except queue.Full:
            continue
    return False


def _follow(
    url: str,
    token: str | None,
    timeout: float,
    merged: queue.Queue[RemoteEvent | HostLost],
    stop: threading.Event,
) -> None:
    import httpx

    attempt = 0
    while not stop.is_set():
        try:
            for event in _stream(url, token, timeout):
                attempt = 0
                if not _put(merged, RemoteEvent(agent=url, event=event), stop):
                    return
            error = "the event stream ended"
        except httpx.TimeoutException:
            error = f"no answer within {timeout:g}s"
        except _Refused as err:
            error = str(err)
        except httpx.HTTPError as err:
            error = f"cannot reach it: {err or type(err).__name__}"
        except (ValueError, ValidationError, RecursionError, ArithmeticError) as err:
            error = (
                f"not an agent's event: {str(err).splitlines()[0][:200] if str(err) else type(err).__name__}"
            )
        if not _put(merged, HostLost(agent=url, error=error), stop):
            return
        stop.wait(RECONNECT_SECONDS[min(attempt, len(RECONNECT_SECONDS) - 1)])
        attempt += 1


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The lines of a byte stream, each refused once it passes MAX_EVENT_BYTES (before it is whole)."""
    partial: list[bytes] = []
    size = 0
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            partial.append(chunk[start:end])
            yield b"".join(partial).rstrip(b"\r")
            partial, size, start = [], 0, end + 1
        if start < len(chunk):
            partial.append(chunk[start:])
            size += len(chunk) - start
        if size > MAX_EVENT_BYTES:
            raise ValueError(f"an event is over {MAX_EVENT_BYTES} bytes")
    if partial:
        yield b"".join(partial)


def _stream(url: str, token: str | None, timeout: float) -> Iterator[WatchEvent]:
    import httpx

    from enginespec.fleet.agent import KEEPALIVE_SECONDS

    if url.startswith("unix:"):
        transport, base = httpx.HTTPTransport(uds=url[len("unix:") :]), "http://agent"
    else:
        transport, base = httpx.HTTPTransport(), url
    # the agent says something at least every KEEPALIVE_SECONDS: silence beyond that is a lost host
    limits = httpx.Timeout(timeout, read=KEEPALIVE_SECONDS + timeout)
    with (
        httpx.Client(transport=transport, timeout=limits, trust_env=False) as client,
        client.stream("GET", f"{base}/v1/events", headers=_headers(token)) as answer,
    ):
        if answer.status_code != 200:
            raise _refused(answer.status_code, next(answer.iter_raw(_REASON_BYTES), b""))
        data: list[bytes] = []
        size = 0
        for line in _lines(answer.iter_raw()):
            size += len(line)
            if size > MAX_EVENT_BYTES:
                raise ValueError(f"an event is over {MAX_EVENT_BYTES} bytes")
            if line.startswith(b"data: "):
                data.append(line[len(b"data: ") :])
            elif not line and data:
                event = parse_event(b"\n".join(data))
                problem = number_problem(event.model_dump(), "event")
                if problem is not None:
                    raise ValueError(problem)
                if not isinstance(event, Stopped):
                    event.process._local = False
                yield event
                data, size = [], 0
            elif not line:
                size = 0
