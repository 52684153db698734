"""What each engine serves right now: the models a server has loaded, is loading, sleeps with or
could load, read through its own API and normalized into one :class:`ServedModels` whatever the
engine.

Where a server says so and how its answers read is data in its definition
(:class:`enginespec.definition.servedrecords.ModelList`); this module drives a reading, each kind's
answers read in :mod:`enginespec.health.servedreaders`. An engine that serves
one model fixed at start says nothing to ask: its argv names the model (``source`` is ``argv``).
Every request goes only to a socket the engine's own tree holds (as a health check's, see
:mod:`enginespec.health.reaching`), each answer is bounded in bytes, time and entries, and every
name from it is masked and kept literally. A model's runner (the per-model child some engines
start) is found among the scanned processes: its pid, port and the GPU bytes its tree holds.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

import enginespec.health.reaching as reaching
from enginespec.gpus.reader import GpuReader, GpuUse
from enginespec.health.servedreaders import (
    MAX_MODELS,
    ModelState,
    Reader,
    ServedModel,
    by_argv,
    keys_of,
)
from enginespec.models.naming import model_name
from enginespec.process.argv import parse_argv
from enginespec.process.liveness import process_alive
from enginespec.process.record import INSTANCE_ID_WHY, WIRE_INSTANCE_ID, EngineProcess
from enginespec.untrusted.boundary import contained_async
from enginespec.untrusted.documents import DocumentError

#: What other modules import from here (the readers' own names live in servedreaders).
__all__ = [
    "ModelState",
    "ServedModel",
    "ServedModels",
    "by_argv",
    "served_models",
    "served_models_all",
    "served_models_all_async",
    "served_models_async",
]


class ServedModels(BaseModel):
    """What a server serves now. ``available``: the engine said (or, for a model fixed at start,
    its argv says); else ``reason`` says why not. ``source`` is what was read (the URLs, or
    ``argv``); ``reason`` also carries what was left out of an answer."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True, populate_by_name=True)

    engine: str
    #: the key of the engine read; ``engine_id`` in the JSON form (see ``INSTANCE_ID_WHY``).
    instance_id: str | None = Field(default=None, alias=WIRE_INSTANCE_ID, description=INSTANCE_ID_WHY)
    pid: int | None = None
    available: bool = False
    reason: str = ""
    source: str = "none"
    models: tuple[ServedModel, ...] = Field(default=(), max_length=MAX_MODELS)
    #: ``time.time()`` of the reading
    read_at: float


@dataclass(frozen=True)
class _Runner:
    """A child of a server that runs one of its models: its pid and port, the names of its model
    (as served, and as people name it), and the GPU bytes its tree holds (``None``: not known)."""

    pid: int
    port: int | None
    names: tuple[str, ...]
    memory_bytes: int | None


def _held(uses: Iterable[GpuUse]) -> int | None:
    held = [use.memory_bytes for use in uses if use.memory_bytes is not None]
    return sum(held) if held else None


def _scanned_runners(process: EngineProcess, processes: Sequence[EngineProcess]) -> list[_Runner]:
    """The runners of ``process`` a scan found (its children of role ``runner``, with their GPUs)."""
    return [
        _Runner(
            p.pid, p.effective_port, tuple(n for n in (p.served_model_name, p.model_name) if n), _held(p.gpus)
        )
        for p in processes
        if p.role == "runner" and p.ppid == process.pid
    ]


#: The most children of a server looked at as its runners.
MAX_RUNNERS = 256
#: One GPU reader per host root, kept: it remembers between readings (and loads NVML once).
_gpu_readers: dict[str, GpuReader] = {}
_gpu_lock = threading.Lock()


def _runners_now(process: EngineProcess) -> list[_Runner]:
    """The runners of ``process`` now, without a scan: its children (the kernel's lists) whose argv
    is an engine's, through the one reading door, and the GPU bytes each one's tree holds."""
    root = process._root
    found = []
    for pid in root.procfs.descendants(process.pid)[:MAX_RUNNERS]:
        stat = root.stat(pid)
        if stat is None or stat.ppid != process.pid:
            continue
        try:
            data = root.read(pid, "cmdline", 1 << 16)
        except OSError:
            continue
        invocation = parse_argv([os.fsdecode(arg) for arg in data.split(b"\0")[:-1]])
        if invocation is None:
            continue
        named = model_name(invocation.model, pid, invocation.engine, root)
        names = tuple(n for n in (invocation.served_model_name, named) if n)
        found.append(_Runner(pid, invocation.effective_port, names, None))
    if not found:
        return found
    with _gpu_lock:
        reader = _gpu_readers.setdefault(root.root, GpuReader(root.root))
        held = reader.read([(runner.pid, *root.procfs.descendants(runner.pid)) for runner in found])
    return [
        _Runner(runner.pid, runner.port, runner.names, _held(uses))
        for runner, (uses, _unknown) in zip(found, held, strict=True)
    ]


def _with_runners(models: list[ServedModel], runners: Sequence[_Runner]) -> list[ServedModel]:
    """Each model with its runner (matched by port, else by the model it runs): its pid, port,
    and the GPU bytes its tree holds when the GPU ledger knows them (they replace the engine's own
    figure)."""
    if not runners:
        return models
    by_port = {r.port: r for r in runners if r.port is not None}
    by_name: dict[str, _Runner] = {}
    for runner in runners:
        for name in runner.names:
            by_name.setdefault(name, runner)
            by_name.setdefault(name.removesuffix(":latest"), runner)
    shown = []
    for model in models:
        found = by_port.get(model.port) if model.port is not None else None
        found = found or by_name.get(model.name, by_name.get(model.name.removesuffix(":latest")))
        if found is None or model.state == "unloaded":
            shown.append(model)
            continue
        update: dict[str, object] = {"runner_pid": found.pid, "port": model.port or found.port}
        if found.memory_bytes is not None:
            update.update(memory_bytes=found.memory_bytes, memory_source="gpu_ledger")
        shown.append(model.model_copy(update=update))
    return shown


def _unread(process: EngineProcess, reason: str, source: str = "none") -> ServedModels:
    return ServedModels(
        engine=process.engine,
        instance_id=process.instance_id,
        pid=process.pid,
        reason=reason,
        source=source,
        read_at=time.time(),
    )


async def _served(
    process: EngineProcess, timeout: float, processes: Sequence[EngineProcess] | None
) -> ServedModels:
    if not process_alive(process):
        return _unread(process, "process is gone")
    if (why := reaching.not_serving(process)) is not None:
        return _unread(process, f"{why}: its server lists its model")
    t = reaching.target_of(process, None, None)
    # (only an engine with a key file costs a thread: every engine is read at each refresh)
    keyed = t.spec.serving.api_key_file is not None and not by_argv(t.spec.models, process)
    keys = await asyncio.to_thread(keys_of, process) if keyed else None
    reader = Reader(t, process, timeout, keys)
    try:
        said = await reader.read()
    except DocumentError as err:
        said = False
        reader.answer.notes.append(f"{reader.path or t.spec.models.path}: unreadable answer ({err})")
    answer = reader.answer
    if keys is not None:
        # a server may echo a key back: never shown
        answer.notes = [keys.scrub(note) for note in answer.notes]
        answer.models = [m.model_copy(update={"name": keys.scrub(m.name)}) for m in answer.models]
    source = ", ".join(answer.sources) or "none"
    if not said:
        why = (
            "; ".join(answer.notes)
            or "its argv names no model, and enginespec knows no API of it that lists them"
        )
        return _unread(process, why, source)
    models = answer.models
    if "argv" not in answer.sources:
        problem = await asyncio.to_thread(
            reaching.ownership_problem, reaching.tree_of(process), t.base_url, process._root
        )
        if problem is not None:
            return _unread(process, problem, source)
    if "argv" not in answer.sources and t.spec.models.runners:
        if processes is not None:
            found = _scanned_runners(process, processes)
        else:
            found = await asyncio.to_thread(_runners_now, process)
        models = _with_runners(models, found)
    return ServedModels(
        engine=process.engine,
        instance_id=process.instance_id,
        pid=process.pid,
        available=True,
        reason="; ".join(answer.notes),
        source=source,
        models=tuple(models),
        read_at=time.time(),
    )


def _failed(process: EngineProcess, reason: str) -> ServedModels:
    return _unread(process, reason)


async def served_models_async(
    process: EngineProcess, *, timeout: float = 2.0, processes: Sequence[EngineProcess] | None = None
) -> ServedModels:
    """Async twin of :func:`served_models`."""
    job = _served(process, timeout, processes)
    return await contained_async("served models", job, lambda reason: _failed(process, reason))


def served_models(
    process: EngineProcess, *, timeout: float = 2.0, processes: Sequence[EngineProcess] | None = None
) -> ServedModels:
    """What the server ``process`` serves now (see the module's docstring): each request bounded
    by ``timeout``. ``processes``: a scan of its host with GPUs (``Scanner(gpus=True)``), where its
    runners are found; by default they are its children whose argv is an engine's, read now.
    Never raises for what the server does."""
    return reaching.blocking(served_models_async(process, timeout=timeout, processes=processes))


async def served_models_all_async(
    processes: Iterable[EngineProcess],
    *,
    timeout: float = 2.0,
    concurrency: int = 64,
    scanned: Sequence[EngineProcess] | None = None,
    deadline: float | None = None,
) -> list[ServedModels]:
    """Reads every server of ``processes`` at once, at most ``concurrency`` in flight, each
    request bounded by ``timeout``; in the order given. Their runners are found among
    ``scanned`` (a scan of the host with GPUs; by default ``processes`` themselves, when they are
    one). ``deadline``: the most seconds for them all; an engine not read by then is unread,
    saying so."""
    if concurrency < 1:
        raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
    listed = list(processes)
    among = list(scanned) if scanned is not None else listed
    gate = asyncio.Semaphore(concurrency)

    async def one(process: EngineProcess) -> ServedModels:
        async with gate:
            job = served_models_async(process, timeout=timeout, processes=among)
            if deadline is None:
                return await job
            try:
                return await asyncio.wait_for(job, max(deadline - (time.monotonic() - started), 0.0))
            except asyncio.TimeoutError:
                return _unread(process, f"not read within the overall deadline of {deadline:g}s")

    started = time.monotonic()
    return list(await asyncio.gather(*(one(p) for p in listed)))


def served_models_all(
    processes: Iterable[EngineProcess],
    *,
    timeout: float = 2.0,
    concurrency: int = 64,
    scanned: Sequence[EngineProcess] | None = None,
    deadline: float | None = None,
) -> list[ServedModels]:
    """Sync form of :func:`served_models_all_async`."""
    job = served_models_all_async(
        list(processes), timeout=timeout, concurrency=concurrency, scanned=scanned, deadline=deadline
    )
    return reaching.blocking(job)
