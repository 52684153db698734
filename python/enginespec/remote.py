"""One view over many hosts: the engines that agents (``enginespec serve``) report, fetched
concurrently, each host within its own timeout, so one slow or dead host never holds the others.

What an agent answers is another host's data, untrusted like a process's: it is size-capped and
validated into the same models, shown literally, and never read against this host's ``/proc``
(a remote pid names no process here).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from enginespec.errors import InvalidInputError
from enginespec.load import EngineLoad
from enginespec.reaching import blocking
from enginespec.scanning import EngineProcess
from enginespec.status import Health

#: The most an agent's answer may be (100,000 engines of a few KB each would be a lot of hosts).
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class RemoteEngine(BaseModel):
    """An engine an agent reported: ``host`` is the agent it came from, as given."""

    model_config = ConfigDict(frozen=True)

    host: str
    process: EngineProcess
    health: Health | None = None
    load: EngineLoad | None = None


class HostReport(BaseModel):
    """What one agent answered: its engines, or why there are none (``error``)."""

    model_config = ConfigDict(frozen=True)

    host: str
    engines: tuple[RemoteEngine, ...] = ()
    error: str | None = None
    seconds: float


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
    return f"{parts.scheme}://{parts.netloc}"


def _engines(host: str, data: bytes) -> tuple[RemoteEngine, ...]:
    documents = json.loads(data)
    if not isinstance(documents, list):
        raise ValueError("not a list of engines")
    found = []
    for document in documents:
        if not isinstance(document, dict):
            raise ValueError("an engine is not an object")
        health, load = document.pop("health", None), document.pop("load", None)
        process = EngineProcess.model_validate(document)
        process._local = False
        found.append(
            RemoteEngine(
                host=host,
                process=process,
                health=None if health is None else Health.model_validate(health),
                load=None if load is None else EngineLoad.model_validate(load),
            )
        )
    return tuple(found)


async def _fetch_one(url: str, token: str | None) -> bytes:
    import httpx

    if url.startswith("unix:"):
        transport = httpx.AsyncHTTPTransport(uds=url[len("unix:") :])
        base = "http://agent"
    else:
        transport, base = httpx.AsyncHTTPTransport(), url
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx.AsyncClient(transport=transport, timeout=None, trust_env=False) as client,
        client.stream("GET", f"{base}/v1/engines", headers=headers) as answer,
    ):
        if answer.status_code != 200:
            reason = (await answer.aread())[:200].decode("utf-8", "replace").strip()
            raise _Refused(f"HTTP {answer.status_code}" + (f": {reason}" if reason else ""))
        chunks, size = [], 0
        async for chunk in answer.aiter_bytes():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise _Refused(f"the answer is over {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


class _Refused(Exception):
    """The agent answered, but not with engines."""


async def _report(url: str, token: str | None, timeout: float) -> HostReport:
    import httpx

    started = time.monotonic()

    def report(error: str | None = None, engines: tuple[RemoteEngine, ...] = ()) -> HostReport:
        return HostReport(host=url, engines=engines, error=error, seconds=time.monotonic() - started)

    try:
        data = await asyncio.wait_for(_fetch_one(url, token), timeout)
        return report(engines=_engines(url, data))
    except asyncio.TimeoutError:
        return report(f"no answer within {timeout:g}s")
    except _Refused as err:
        return report(str(err))
    except httpx.HTTPError as err:
        return report(f"cannot reach it: {err or type(err).__name__}")
    except (ValueError, ValidationError, RecursionError) as err:
        summary = str(err).splitlines()[0][:200]
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
