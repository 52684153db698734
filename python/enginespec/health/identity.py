"""Which engine answers at an address no process of this host explains (another host's, a
container's without its processes in view): each engine's identity probe (``Serving.identity``, a
request only that engine answers so) asked once, at the same time, of the URL a caller gives.

Engines share default ports (1234: LM Studio and mistral.rs; 8080: llama-server, LocalAI, RamaLama;
8000: vLLM, Lemonade up to v9), so a port says nothing; an answer only one engine gives does. What
the server answers is untrusted: each answer is bounded in size and time, redirects are not
followed, nothing of it is shown, and a server whose answers match several engines' probes (a
proxy, or one built to) is said to be ambiguous rather than taken for the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from enginespec.definition.records import EngineDefinition, HealthAnswer, IdentityProbe
from enginespec.definition.registry import all_engines
from enginespec.health import reaching
from enginespec.process.urls import checked_url

#: The most bytes of one probe's answer read (a probe's answer is a greeting or a short document;
#: llama-server's ``/props`` carries its chat template).
MAX_PROBE_BYTES = 1 << 20


class Identification(BaseModel):
    """What answered at ``url``: ``engine`` when exactly one engine's probe matched, else ``None``
    with ``reason`` (none matched, several did, or the address could not be reached); ``matched``
    every engine whose probe matched, ``asked`` every engine whose probe was sent."""

    model_config = ConfigDict(frozen=True)

    url: str
    engine: str | None
    matched: tuple[str, ...] = ()
    asked: tuple[str, ...] = ()
    reason: str = ""


async def _answer(
    definition: EngineDefinition, url: str, api_key: str | None, timeout: float
) -> tuple[int | None, bytes, str]:
    target = reaching.target_of(definition.id, url, api_key)
    return await reaching.fetch(target, _probe(definition).path, timeout, MAX_PROBE_BYTES)


async def identify_async(
    url: str,
    *,
    timeout: float = 2.0,
    api_key: str | None = None,
    engines: Sequence[EngineDefinition] | None = None,
) -> Identification:
    """Asks every engine's identity probe of ``url`` at once (one request per distinct path),
    each within ``timeout`` seconds; ``api_key`` is sent as the engines' checks send theirs.
    Raises :class:`~enginespec.errors.InvalidInputError` for a URL that is not one."""
    shown = checked_url(url, "url")
    candidates = [d for d in (engines if engines is not None else all_engines()) if d.serving.identity]
    asked = tuple(d.id for d in candidates)
    by_path: dict[str, EngineDefinition] = {}
    for definition in candidates:
        by_path.setdefault(_probe(definition).path, definition)
    answers = await asyncio.gather(*(_answer(d, shown, api_key, timeout) for d in by_path.values()))
    replies = dict(zip(by_path, answers, strict=True))
    matched = tuple(
        d.id
        for d in candidates
        if (reply := replies[_probe(d).path])[0] is not None
        and _probe(d).matches(HealthAnswer(reply[0], reply[1]))
    )
    if len(matched) == 1:
        return Identification(url=shown, engine=matched[0], matched=matched, asked=asked)
    unanswered = [detail or "no answer" for status, _body, detail in answers if status is None]
    if matched:
        reason = f"answers as {', '.join(matched)} at once: not told apart"
    elif answers and len(unanswered) == len(answers):
        reason = f"no answer: {unanswered[0]}"
    else:
        reason = f"answers as none of {', '.join(asked)}"
    return Identification(url=shown, engine=None, matched=matched, asked=asked, reason=reason)


def _probe(definition: EngineDefinition) -> IdentityProbe:
    probe = definition.serving.identity
    if probe is None:  # only engines with a probe are asked
        raise ValueError(f"{definition.id}: no identity probe")
    return probe


def identify(
    url: str,
    *,
    timeout: float = 2.0,
    api_key: str | None = None,
    engines: Sequence[EngineDefinition] | None = None,
) -> Identification:
    """Blocking :func:`identify_async`."""
    return reaching.blocking(identify_async(url, timeout=timeout, api_key=api_key, engines=engines))
