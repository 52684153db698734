"""The model a running engine serves: its model as its argv names it, resolved inside the
process's root (relative paths from its working directory; a Hugging Face id through its owner's
cache; an Ollama blob named through Ollama's manifests), read as ``modelfacts`` reads files, with
the memory its engine allocates for it by the engine's own rule.

Computed on request only (``EngineProcess.model_facts``, ``enginespec model PID``), never by a
scan: reading a header costs file reads a poll of hundreds of processes a second must not pay.
The result is cached by the process's identity (pid, start time) and the argv it was computed
from, so a ``watch`` that asks again each refresh reads each model once."""

from __future__ import annotations

import os
import pwd
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Literal

from enginespec._host.namedfiles import Refused
from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.definition.modelrecords import ModelFacts
from enginespec.definition.registry import definition_of
from enginespec.models.facts import model_facts
from enginespec.models.files import ModelError
from enginespec.models.huggingface import hf_cache_folder
from enginespec.untrusted.boundary import failed

#: Processes whose facts are kept (the least recently asked for go first).
CACHE_SIZE = 256
#: How long reading one engine's model may take (a file on a FUSE mount whose daemon never
#: answers blocks in the kernel); a read that misses it is abandoned in its thread, and after
#: MAX_STUCK abandoned reads none is begun until one of them ends.
DEADLINE_SECONDS = 2.0
MAX_STUCK = 4
_stuck = 0
_cache: OrderedDict[tuple[HostRoot, int, float, tuple[str, ...]], ModelFacts | str] = OrderedDict()
_lock = threading.Lock()


#: Bytes of a process's environment read for the Hugging Face cache variables.
_ENVIRON_BYTES = 1 << 20


class ProcessFiles:
    """A running process's files as ``modelfacts`` reads them: resolved inside its root (a
    relative path from its working directory) and opened as its owner, one bounded step each,
    on the host it runs on (``root``): a model path any user names (``-m /root/secret``, a FIFO,
    a symlink out of a container) is read only as far as its owner could read it."""

    def __init__(self, pid: int, root: HostRoot = HOST_ROOT) -> None:
        self.pid = pid
        self.root = root

    def open(self, path: str) -> int:
        try:
            return self.root.open_named(self.pid, path)
        except Refused as why:
            raise ModelError(f"{path}: {why}") from None

    def kind(self, path: str) -> Literal["file", "directory", "other"] | None:
        return self.root.named_kind(self.pid, path)

    def names(self, path: str, limit: int) -> list[str] | None:
        return self.root.list_named(self.pid, path, limit)

    def environ(self) -> dict[str, str]:
        """The process's environment, as text (for the Hugging Face cache's variables)."""
        found = self.root.environ(self.pid, _ENVIRON_BYTES)
        pairs = (item.partition(b"=") for item in (found[0] if found else ()) if b"=" in item)
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, _eq, v in pairs}

    def home(self) -> str | None:
        """The home directory of the process's owner (this host's account of that uid)."""
        who = self.root.owner(self.pid)
        try:
            return pwd.getpwuid(who.uid).pw_dir if who is not None else None
        except KeyError:
            return None


def _locate(model: str, fs: ProcessFiles) -> str:
    """Where ``model`` (as the argv names it) is inside the process's root: the path itself, or
    the snapshot of a Hugging Face id in its owner's cache."""
    pid = fs.pid
    try:
        path = fs.root.in_root(pid, model)
    except Refused as refused:
        raise ModelError(f"pid {pid}: model {model!r} {refused}") from None
    if fs.kind(path) is not None:
        return path
    cached = hf_cache_folder(model, fs.environ(), fs.home(), fs)
    if cached is None:
        try:  # to say why the path is not read (or read it, if it has just appeared)
            os.close(fs.open(path))
        except ModelError as e:
            reason = str(e).removeprefix(f"{path}: ")
            raise ModelError(
                f"pid {pid}: model {model!r} {reason}, and is not in its owner's Hugging Face cache"
            ) from None
        return path
    return cached


def compute(
    pid: int, engine: str, model: str | None, argv: Sequence[str], root: HostRoot = HOST_ROOT
) -> ModelFacts:
    """The facts of the model of engine server ``pid`` (of the host under ``root``) with its
    memory estimate; raises ``ModelError`` naming what could not be read."""
    if not model:
        raise ModelError(f"pid {pid}: its argv names no model")
    fs = ProcessFiles(pid, root)
    facts = model_facts(_locate(model, fs), fs)
    definition = definition_of(engine)
    if definition is None:
        return facts
    facts = facts.model_copy(update={"registry_name": definition.registry_name(facts.files[0], fs)})
    try:
        estimate = definition.estimate_memory(facts, argv)
    except ModelError as why:  # an argv number out of range (`--max-model-len 1e400`): the
        # files' facts stand, the estimate is a problem naming the flag
        return facts.model_copy(update={"problems": (*facts.problems, f"no memory estimate: {why}")})
    return facts.model_copy(update={"estimate": estimate})


def cached(
    pid: int,
    start_time: float,
    engine: str,
    model: str | None,
    argv: Sequence[str],
    root: HostRoot = HOST_ROOT,
) -> ModelFacts | str:
    """:func:`compute`'s facts, or the reason they are not known, cached per process identity
    (on the host under ``root``)."""
    key = (root, pid, start_time, tuple(argv))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    result = _with_deadline(lambda: compute(pid, engine, model, argv, root))
    with _lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def peek(pid: int, start_time: float, argv: Sequence[str], root: HostRoot = HOST_ROOT) -> ModelFacts | None:
    """The facts already cached for this process, never reading anything (for a scrape)."""
    with _lock:
        found = _cache.get((root, pid, start_time, tuple(argv)))
    return found if isinstance(found, ModelFacts) else None


def _with_deadline(action: Callable[[], ModelFacts]) -> ModelFacts | str:
    """``action``'s facts, or why not: its error, or that it missed the deadline. Never raises
    because of a process's files (a polling loop must not die of one odd engine): the thread
    hands back a result or whatever it raised through a future, so there is no outcome the
    caller cannot read (an exception nobody foresaw is counted by the error boundary)."""
    global _stuck
    with _lock:
        if _stuck >= MAX_STUCK:
            return f"not read: {_stuck} earlier reads of model files are still blocked"
    done: Future[ModelFacts] = Future()
    late = threading.Event()

    def run() -> None:
        global _stuck
        try:
            done.set_result(action())
        except BaseException as e:  # handed to the caller, which decides
            done.set_exception(e)
        finally:
            with _lock:
                if late.is_set():
                    _stuck -= 1

    thread = threading.Thread(target=run, name="enginespec-model-facts", daemon=True)
    thread.start()
    thread.join(DEADLINE_SECONDS)
    with _lock:
        if not done.done():
            late.set()
            _stuck += 1
            return f"reading its model took longer than {DEADLINE_SECONDS:g} s (abandoned)"
    try:
        return done.result()
    except ModelError as e:
        return str(e)
    except (OSError, ValueError, RecursionError, MemoryError) as e:
        return f"model files unreadable: {type(e).__name__}: {e}"
    except Exception as e:  # the error boundary of this engine's model facts
        return failed("model facts", e)


def beside_log(facts: ModelFacts, engine: str, log: str) -> ModelFacts:
    """``facts`` with what the engine printed about its memory in ``log`` (its start-up output)."""
    definition = definition_of(engine)
    logged = definition.logged_memory(log) if definition is not None else None
    return facts.model_copy(update={"logged": logged}) if logged is not None else facts


def measured(gpus: object) -> dict[str, int]:
    """Bytes by device from ``EngineProcess.gpus`` (entries with ``device`` and ``memory_bytes``)."""
    held: dict[str, int] = {}
    for use in gpus if isinstance(gpus, tuple | list) else ():
        device, nbytes = getattr(use, "device", None), getattr(use, "memory_bytes", None)
        if isinstance(device, str) and isinstance(nbytes, int):
            held[device] = held.get(device, 0) + nbytes
    return held
