"""Loading and unloading models, and putting a server to sleep and waking it, through the
engine's own API: the request is the engine's data (:class:`~enginespec.definition.records.
ModelControl`), sent only to a socket the engine's own tree holds, only for root or the engine's
owner, and only when the server was started with what the request needs (the flag or variable is
named otherwise). Each call waits, within its ``timeout``, until the server's model list (see
:mod:`enginespec.health.servedmodels`) shows the state asked for, and returns that list.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Literal
from urllib.parse import quote

import enginespec.health.reaching as reaching
from enginespec.definition.registry import find_engine
from enginespec.definition.servedrecords import ControlRequest
from enginespec.display import literal
from enginespec.errors import ControlFailed, ControlRefused, ControlUnsupported, InvalidInputError
from enginespec.health.servedmodels import ServedModels, served_models_async
from enginespec.health.servedreaders import (
    ServedModel,
    answer_detail,
    by_argv,
    keyed,
    keys_of,
    started_with,
    with_key,
)
from enginespec.process.keyfile import FileKeys
from enginespec.process.liveness import process_alive
from enginespec.process.record import EngineProcess
from enginespec.untrusted.documents import DocumentError, parse_json
from enginespec.untrusted.masking import mask_text

Action = Literal["load", "unload", "sleep", "wake"]
#: The most of a control request's answer read (an error message; Ollama's is its final status).
MAX_ANSWER_BYTES = 64 * 1024
#: The most of a streamed answer read (TabbyAPI's load: one ~90-byte event per module loaded,
#: and a keep-alive comment every 15 s).
MAX_STREAM_BYTES = 8 << 20
#: The most characters of a model name sent.
MAX_NAME_CHARS = 512
#: How long between two readings of the model list while waiting.
POLL_SECONDS = 0.2
#: The timeout of each reading of the model list while waiting (within the call's own).
READ_SECONDS = 2.0


def _checked_name(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise InvalidInputError(f"model: {name!r} is not a model name (1 to {MAX_NAME_CHARS} characters)")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidInputError(f"model: {name!r} has control characters")
    if name in (".", ".."):
        # a path segment (Xinference's DELETE /v1/models/{model}) that would name another route
        raise InvalidInputError(f"model: {name!r} is no model name")
    return name


def _filled(body: Mapping[str, object], name: str) -> dict[str, object]:
    """``body`` with each ``"{model}"`` value, or item of a list value, the model's name
    (Docker Model Runner's unload takes ``{"models": [NAME]}``)."""

    def filled(value: object) -> object:
        if isinstance(value, (list, tuple)):
            return [filled(item) for item in value]
        return name if value == "{model}" else value

    return {key: filled(value) for key, value in body.items()}


def _allowed(process: EngineProcess, what: str) -> None:
    """Refuses what may not be sent: an engine of another host or root, another user's."""
    root = process._root
    if not process._local or not root.is_host:
        raise ControlRefused(f"{what}: not this host's process: nothing is sent")
    owner = root.owner(process.pid)
    if owner is None:
        raise ControlRefused(f"{what}: its owner cannot be read (gone?): nothing is sent")
    if os.geteuid() not in (0, owner.uid):
        raise ControlRefused(f"{what}: another user's engine (uid {owner.uid}): only root or its owner may")


def _needs(process: EngineProcess, request: ControlRequest, what: str) -> None:
    """Says which flag or variable the server was started without, for the request to exist."""
    missing = [flag for flag in request.flags if not started_with(process, flag)]
    if missing:
        raise ControlUnsupported(f"{what}: the server was started without {', '.join(missing)}")
    if request.any_flags and not any(started_with(process, flag) for flag in request.any_flags):
        raise ControlUnsupported(f"{what}: the server was started without {' or '.join(request.any_flags)}")
    if not request.environment:
        return
    read = process._root.environ(process.pid, 1 << 20)
    found: dict[str, str] = {}
    for item in read[0] if read else ():
        name, _, setting = item.partition(b"=")
        found[name.decode("utf-8", "replace")] = setting.decode("utf-8", "replace")
    for variable, wanted in request.environment.items():
        if found.get(variable) != wanted:
            had = "unset" if variable not in found else repr(literal(found[variable][:40]))
            raise ControlUnsupported(
                f"{what}: the server was started without {variable}={wanted} ({variable} is {had})"
            )


def _error_of(answer: bytes, scrub: Callable[[str], str] = str) -> str:
    """The error an engine's answer carries (``{"error": "..."}``, ``{"error": {"message": ...}}``,
    FastAPI's ``{"detail": ...}``), ``scrub``bed of secrets, masked, shown literally."""
    try:
        parse_json(answer, max_bytes=MAX_ANSWER_BYTES)
    except DocumentError:
        return literal(mask_text(scrub(answer[:200].decode("utf-8", "replace"))))
    said = answer_detail(answer)
    return literal(mask_text(scrub(said))) if said is not None else ""


class _Events:
    """The server-sent events of a streamed answer (``ControlRequest.answer`` ``sse``), read line
    by line: the error the first event that carries one says (TabbyAPI's load stream: progress
    events ``{"model_type", "module", "modules", "status"}``, an error ``{"error": {"message",
    "trace"}}``: endpoints/core/utils/model.py stream_model_load, common/networking.py
    get_generator_error at e632af41)."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.error: str | None = None

    def line(self, line: bytes) -> bool:
        """Takes one line; whether to stop reading (an error was said)."""
        if line.startswith(b"data:"):
            self.data.append(line[5:].removeprefix(b" "))
        elif not line and self.data:  # a blank line ends an event
            event, self.data = b"\n".join(self.data), []
            self.error = self._error(event)
        return self.error is not None

    @staticmethod
    def _error(event: bytes) -> str | None:
        try:
            document = parse_json(event, max_bytes=MAX_ANSWER_BYTES)
        except DocumentError:
            return None
        if not isinstance(document, dict) or "error" not in document:
            return None
        return answer_detail(event) or "an error event"


def _named(model: ServedModel, name: str, leaf: bool = False) -> bool:
    # Ollama adds `:latest` to a name without a tag; TabbyAPI lists `a/b` as `b` (`leaf`)
    if leaf and "/" in name.strip("/"):
        name = name.strip("/").rsplit("/", 1)[-1]
    return model.name == name or (":" not in name and model.name == f"{name}:latest")


def reached(
    reading: ServedModels,
    action: Action,
    name: str | None,
    served: str | None = None,
    *,
    any_model: bool = False,
    leaf: bool = False,
) -> bool:
    """Whether ``reading`` shows the state ``action`` asked for. ``served``: the name the engine
    serves ``name`` under once loaded, where they differ; ``any_model``: a load is shown by any
    model loaded (an engine that does not say which of its configs it runs); ``leaf``: the server
    lists a model by the last component of the name it was loaded by."""
    if not reading.available:
        return False
    if action == "load":
        return any(
            (any_model or _named(m, name or "", leaf) or m.name == served) and m.state == "loaded"
            for m in reading.models
        )
    if action == "unload":
        return not any(
            _named(m, name or "", leaf) and m.state in ("loaded", "loading", "sleeping")
            for m in reading.models
        )
    if action == "sleep":
        return bool(reading.models) and all(m.state in ("sleeping", "unloaded") for m in reading.models)
    return not any(m.state == "sleeping" for m in reading.models)


def _as_answered(reading: ServedModels, action: Action) -> ServedModels:
    """For a server whose list does not show the state: the state its answer said it reached."""
    state: Literal["sleeping", "loaded"] = "sleeping" if action == "sleep" else "loaded"
    why = "as its answer said: the engine reports no such state"
    models = tuple(
        m.model_copy(update={"state": state, "reason": why}) if m.state in ("loaded", "sleeping") else m
        for m in reading.models
    )
    return reading.model_copy(update={"models": models})


async def control_async(
    process: EngineProcess, action: Action, name: str | None = None, *, timeout: float = 120.0
) -> ServedModels:
    """Does ``action`` (to the model ``name``, for ``load`` and ``unload``) through the engine's
    own API and waits, within ``timeout`` seconds, until its model list shows it done; that list.
    Raises :class:`~enginespec.errors.ControlUnsupported`, :class:`~enginespec.errors.ControlRefused`
    or :class:`~enginespec.errors.ControlFailed` (see the module's docstring)."""
    if not timeout > 0:
        raise InvalidInputError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    if action in ("load", "unload"):
        name = _checked_name(name or "")
    spec = find_engine(process.engine)
    what = f"{spec.id} pid {process.pid}: {action}" + (f" {literal(name)}" if name else "")
    request: ControlRequest | None = getattr(spec.control, action)
    if request is None:
        raise ControlUnsupported(f"{what}: {spec.id} has no API for it")
    if by_argv(spec.models, process):
        needed = request.flags or request.any_flags
        without = f" (started without {' or '.join(needed)})" if needed else ""
        raise ControlUnsupported(f"{what}: it serves the one model its argv names, fixed at start{without}")
    _allowed(process, what)
    _needs(process, request, what)
    deadline = time.monotonic() + timeout
    t = reaching.target_of(process, None, None)
    await _reachable(t, what)
    keys = await asyncio.to_thread(keys_of, process) if spec.serving.api_key_file else None
    leaf = spec.models.listed_by_leaf
    if request.every_model:
        await _alone(process, name, what, timeout)
    if request.on_loaded:
        # it unloads whatever is loaded: only when that is the model named
        before = await served_models_async(process, timeout=min(READ_SECONDS, timeout))
        if not before.available:
            raise ControlFailed(f"{what}: {_said(before, name)}: nothing is sent", last=before)
        if reached(before, action, name, leaf=leaf):
            return before
    if spec.models.key_flag is not None:
        t, why = await asyncio.to_thread(keyed, t, process)
        if why:
            raise ControlFailed(f"{what}: {why}: nothing is sent")
    running = set(_descendants(process)) if request.restarts else set()
    await _send(with_key(t, keys, request.key), request, what, name, timeout, keys)
    if request.restarts:
        await _restarted(process, running, what, timeout, deadline)
    reading = await served_models_async(
        process, timeout=min(READ_SECONDS, max(deadline - time.monotonic(), 0.1))
    )
    if not request.shown:
        return _as_answered(reading, action) if reading.available else reading
    served = spec.served_name(name) if action == "load" and name else None
    # a config (KoboldCpp's .kcpps) names its model inside it: after the restart, what loaded
    any_model = request.restarts and served is None
    told = reading
    while not reached(reading, action, name, served, any_model=any_model, leaf=leaf):
        left = deadline - time.monotonic()
        if left <= 0:
            raise ControlFailed(f"{what}: not done within {timeout:g}s ({_said(told, name)})", last=told)
        await asyncio.sleep(min(POLL_SECONDS, left))
        reading = await served_models_async(process, timeout=min(READ_SECONDS, max(left, 0.1)))
        told = _latest(reading, told)
    return reading


def _latest(reading: ServedModels, told: ServedModels) -> ServedModels:
    """The reading to report when the time is up: the newest that answered, so that a last
    read cut short by the deadline (on a busy host) does not hide what the engine said."""
    return reading if reading.available or not told.available else told


async def _send(
    t: reaching.CheckTarget,
    request: ControlRequest,
    what: str,
    name: str | None,
    timeout: float,
    keys: FileKeys | None,
) -> None:
    """Sends ``request``; raises :class:`~enginespec.errors.ControlFailed` with what the engine
    said when it failed (a key of its key file never in it)."""
    body = None if request.body is None else json.dumps(_filled(request.body, name or "")).encode()
    path = request.path.replace("{model}", quote(name or "", safe=""))
    events = _Events()
    if request.answer == "sse":
        status, answer, detail = await reaching.fetch_lines(
            t, path, timeout, MAX_STREAM_BYTES, events.line, method=request.method, body=body
        )
    else:
        status, answer, detail = await reaching.fetch(
            t, path, timeout, MAX_ANSWER_BYTES, method=request.method, body=body
        )
    scrub = keys.scrub if keys is not None else str
    if status is None:
        raise ControlFailed(scrub(f"{what}: {detail}"))
    if not 200 <= status < 300:
        error = _error_of(answer, scrub)
        said = f"{what}: HTTP {status}" + (f": {error}" if error else "")
        if status in (401, 403) and keys is not None and keys.problem:
            said += f" ({keys.problem})"
        raise ControlFailed(scrub(said))
    if events.error is not None:
        raise ControlFailed(f"{what}: {literal(mask_text(scrub(events.error)))}")
    if request.answer == "json" and _refused(answer):
        raise ControlFailed(f"{what}: the engine answered that it did not (success: false)")


async def _alone(process: EngineProcess, name: str | None, what: str, timeout: float) -> None:
    """Refuses a request that unloads every model the server holds while another one is held:
    it would go too (mlx-vlm's ``/unload``)."""
    reading = await served_models_async(process, timeout=min(READ_SECONDS, timeout))
    if not reading.available:
        raise ControlFailed(f"{what}: {reading.reason or 'its model list cannot be read'}: nothing is sent")
    others = [
        m.name
        for m in reading.models
        if not _named(m, name or "") and m.state in ("loaded", "loading", "sleeping")
    ]
    if others:
        held = ", ".join(f"'{literal(other)}'" for other in others[:5])
        raise ControlRefused(
            f"{what}: its API unloads every model it holds, and {held} would go too: nothing is sent"
        )


def _refused(answer: bytes) -> bool:
    """An answer of success that says it did nothing: ``{"success": false}`` (KoboldCpp's reload
    of a file not in its admin directory, or without its admin password)."""
    try:
        document = parse_json(answer, max_bytes=MAX_ANSWER_BYTES)
    except DocumentError:
        return False
    return isinstance(document, dict) and document.get("success") is False


def _descendants(process: EngineProcess) -> list[int]:
    """The processes under the server now (the kernel's lists; not the scan's workers, which
    may have ended since)."""
    return process._root.procfs.descendants(process.pid)


async def _restarted(
    process: EngineProcess, before: set[int], what: str, timeout: float, deadline: float
) -> None:
    """Waits until a process of the server's tree from before the request has ended: the old
    server, which a restarting engine ends before a new one serves (its answers until then are
    the old server's, read meanwhile to say what it serves when the time is up)."""
    if not before:
        return
    told: ServedModels | None = None
    while before <= set(await asyncio.to_thread(_descendants, process)):
        if not process_alive(process):
            raise ControlFailed(f"{what}: the server exited")
        left = deadline - time.monotonic()
        reading = await served_models_async(process, timeout=min(READ_SECONDS, max(left, 0.1)))
        told = reading if told is None else _latest(reading, told)
        if deadline - time.monotonic() <= 0:
            raise ControlFailed(
                f"{what}: not done within {timeout:g}s (its old server still runs: {_said(told, None)})",
                last=told,
            )
        await asyncio.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))


async def _reachable(t: reaching.CheckTarget, what: str) -> None:
    """Refuses a server whose port is not its own tree's alone (another process holds or shares
    it), and fails one with no socket to send to: nothing is sent either way."""
    if t.base_url is None:
        raise ControlFailed(f"{what}: no usable listen address: nothing is sent")
    where, (state, why) = await asyncio.to_thread(reaching.endpoint_of, t)
    if where is None:
        # `unhealthy` here: the port is another process's, or shared with one
        raise (ControlRefused if state == "unhealthy" else ControlFailed)(f"{what}: {why}: nothing is sent")


def _said(reading: ServedModels, name: str | None) -> str:
    if not reading.available:
        return reading.reason or "its model list cannot be read"
    shown = [m for m in reading.models if name is None or _named(m, name)]
    return ", ".join(f"{literal(m.name)} {m.state}" for m in shown) or "not listed"


def control(
    process: EngineProcess, action: Action, name: str | None = None, *, timeout: float = 120.0
) -> ServedModels:
    """Sync form of :func:`control_async`."""
    return reaching.blocking(control_async(process, action, name, timeout=timeout))


def load_model(process: EngineProcess, name: str, *, timeout: float = 300.0) -> ServedModels:
    """Loads the model ``name`` into the server ``process`` through its own API (llama.cpp's
    router, Ollama, TabbyAPI, KoboldCpp, LM Studio, Lemonade, LocalAI) and waits until it is
    loaded; what it serves then."""
    return control(process, "load", name, timeout=timeout)


async def load_model_async(process: EngineProcess, name: str, *, timeout: float = 300.0) -> ServedModels:
    """Async twin of :func:`load_model`."""
    return await control_async(process, "load", name, timeout=timeout)


def unload_model(process: EngineProcess, name: str, *, timeout: float = 60.0) -> ServedModels:
    """Unloads the model ``name`` from the server ``process`` and waits until it is gone."""
    return control(process, "unload", name, timeout=timeout)


async def unload_model_async(process: EngineProcess, name: str, *, timeout: float = 60.0) -> ServedModels:
    """Async twin of :func:`unload_model`."""
    return await control_async(process, "unload", name, timeout=timeout)


def sleep(process: EngineProcess, *, timeout: float = 60.0) -> ServedModels:
    """Puts the server ``process`` to sleep (its weights and KV cache freed: vLLM's sleep mode,
    SGLang's memory release) and waits until it says it sleeps."""
    return control(process, "sleep", timeout=timeout)


async def sleep_async(process: EngineProcess, *, timeout: float = 60.0) -> ServedModels:
    """Async twin of :func:`sleep`."""
    return await control_async(process, "sleep", timeout=timeout)


def wake(process: EngineProcess, *, timeout: float = 120.0) -> ServedModels:
    """Wakes the sleeping server ``process`` and waits until it says it is awake."""
    return control(process, "wake", timeout=timeout)


async def wake_async(process: EngineProcess, *, timeout: float = 120.0) -> ServedModels:
    """Async twin of :func:`wake`."""
    return await control_async(process, "wake", timeout=timeout)
