"""What the agent serves, made once and shared by every client: ``/v1/engines`` and ``/v1/gpus``
per refresh (:class:`EngineViews`), each event once for every stream (:func:`shared_event`).

Memory must not grow with what other users' processes look like, nor with clients: an engine's
JSON is cut to :data:`ENGINE_DOCUMENT_BYTES` (its argv first; :func:`bounded` says what was cut in
``cut``), ``/v1/engines`` stays under :data:`MAX_ENGINES_BYTES` (under ``ps --remote``'s 64 MiB
cap: argv is cut, engines stay), and what a client may not see of an engine
(:mod:`enginespec.fleet.disclosure`) is a second serialisation made once, not one per request.
"""

from __future__ import annotations

import threading
from typing import Any

from enginespec.fleet.disclosure import Viewer, owners, public_document
from enginespec.fleet.exporter import EngineCollector, Snapshot
from enginespec.gpus.energy import CpuEnergy
from enginespec.health.load import EngineLoad
from enginespec.health.servedmodels import ServedModels
from enginespec.healthrecord import Health
from enginespec.scanning.scanner import engine_document
from enginespec.scanning.watch import WatchEvent
from enginespec.untrusted.documents import dumps

#: The most one engine's JSON (in ``/v1/engines``, or in an event) may take: a longer one has its
#: argv cut to :data:`ARGV_SHOWN` characters and other long values to :data:`VALUE_SHOWN`, and
#: says so in ``cut``.
ENGINE_DOCUMENT_BYTES = 64 * 1024
ARGV_SHOWN = 8 * 1024
VALUE_SHOWN = 1024
#: The most ``/v1/engines`` may take, under ``ps --remote``'s cap (64 MiB): past it, every engine is
#: cut to its share (argv, not engines, go).
MAX_ENGINES_BYTES = 48 * 1024 * 1024
#: The least one engine is cut to, to keep ``/v1/engines`` under :data:`MAX_ENGINES_BYTES`.
MIN_ENGINE_BYTES = 2 * 1024


class SharedEvent:
    """One event as every stream sends it, serialised once: its type, its JSON, the JSON a client
    that may not see all of its engine gets (``None``: the same), and the engine's owner."""

    __slots__ = ("data", "kind", "owner", "public")

    def __init__(self, kind: str, data: str, public: str | None = None, owner: int | None = None) -> None:
        self.kind, self.data, self.public, self.owner = kind, data, public, owner

    def shown(self, viewer: Viewer) -> str:
        return self.data if self.public is None or viewer.sees_all_of(self.owner) else self.public


def shared_event(event: WatchEvent) -> SharedEvent:
    """``event`` serialised once for every stream: its engine's document cut as ``/v1/engines``
    cuts it, and as anyone may see it (see :mod:`enginespec.fleet.disclosure`)."""
    document = event.model_dump(mode="json")
    process = getattr(event, "process", None)
    if process is None:  # stopped: its identity alone, nothing withheld
        return SharedEvent(event.type, _text(document))
    full = bounded(document["process"], ENGINE_DOCUMENT_BYTES)
    public = public_document(full, process)
    shown = {**document, "process": full}
    hidden = {**document, "process": public}
    if isinstance(document.get("model"), dict):
        # a model event: which model is what the engine's API said, with its key (see disclosure)
        hidden["model"] = {**document["model"], "name": ""}
        hidden["withheld"] = ["model.name"]
    elif "withheld" not in public:
        return SharedEvent(event.type, _text(shown))
    return SharedEvent(event.type, _text(shown), _text(hidden), owners([process])[0])


def _text(document: object) -> str:
    """Compact ASCII JSON (argv's surrogate escapes become ``\\udcXX``), as events have it."""
    return dumps(document, separators=(",", ":"), ensure_ascii=True)  # strict: no NaN/Infinity


#: The most items of one list kept in a document that is cut.
_ITEMS_SHOWN = 64


def _shorten(value: Any, chars: int) -> Any:
    if isinstance(value, str):
        return value[:chars]
    if isinstance(value, list):
        return [_shorten(item, chars) for item in value[:_ITEMS_SHOWN]]
    if isinstance(value, dict):
        return {key: _shorten(item, chars) for key, item in value.items()}
    return value


def bounded(document: dict[str, Any], limit: int) -> dict[str, Any]:
    """``document`` (an engine's) as it is when its JSON takes at most ``limit`` bytes; else with its
    argv cut to :data:`ARGV_SHOWN` characters (the arguments past it dropped), every other value
    to :data:`VALUE_SHOWN` and lists to 64 items, less again until it fits (argv down to 64
    characters), and ``cut`` saying so. The engine stays; what it says is cut."""
    if len(_text(document)) <= limit:
        return document
    argv: list[str] = document.get("argv") or []
    total = sum(len(arg) for arg in argv)
    argv_chars, value_chars = ARGV_SHOWN, VALUE_SHOWN
    while True:
        shown, left = [], argv_chars
        for arg in argv:
            if left <= 0:
                break
            shown.append(arg[:left])
            left -= len(arg)
        cut = {key: _shorten(value, value_chars) for key, value in document.items() if key != "argv"}
        cut["argv"] = shown
        cut["cut"] = (
            f"argv of {len(argv)} arguments ({total} characters) shown to {argv_chars} characters, "
            f"other values to {value_chars}: one engine is kept under {limit} bytes"
        )
        if len(_text(cut)) <= limit or argv_chars <= 64:
            return cut
        argv_chars, value_chars = argv_chars // 4, max(value_chars // 4, 64)


class _Served:
    """One snapshot's ``/v1/engines`` and ``/v1/gpus``, serialised: each engine's document (cut),
    and as anyone may see it where that differs (``None``: the same), with its owner."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        count = len(snapshot.processes)
        healths: list[Health | None] = [*snapshot.healths] if snapshot.healths else [None] * count
        loads: list[EngineLoad | None] = [*snapshot.loads] if snapshot.loads else [None] * count
        models: list[ServedModels | None] = [*snapshot.models] if snapshot.models else [None] * count
        energy: list[CpuEnergy | None] = [*snapshot.cpu_energy] if snapshot.cpu_energy else [None] * count
        documents = [
            engine_document(p, h, load, served, cpu)
            for p, h, load, served, cpu in zip(
                snapshot.processes, healths, loads, models, energy, strict=True
            )
        ]
        cut = [bounded(document, ENGINE_DOCUMENT_BYTES) for document in documents]
        if sum(len(_text(document)) + 2 for document in cut) > MAX_ENGINES_BYTES:
            share = max(MAX_ENGINES_BYTES // count, MIN_ENGINE_BYTES)
            cut = [bounded(document, share) for document in documents]
        self.owners = owners(snapshot.processes)
        self.pieces = [_text(document).encode("ascii") for document in cut]
        public = [public_document(document, p) for document, p in zip(cut, snapshot.processes, strict=True)]
        self.public = [_text(d).encode("ascii") if "withheld" in d else None for d in public]
        self.everything = b"[" + b", ".join(self.pieces) + b"]"
        self.gpus = _text([d.model_dump(mode="json") for d in snapshot.gpus]).encode("ascii")
        self.by_viewer: dict[str, bytes] = {}


class EngineViews:
    """What ``/v1/engines`` and ``/v1/gpus`` serve: made once per refresh, in the refresh thread
    (:meth:`update`), and shared by every request: a request never serialises the host, nor
    waits for a refresh."""

    #: kinds of client (besides those who see everything) whose ``/v1/engines`` is kept
    MAX_KEPT = 4

    def __init__(self, collector: EngineCollector) -> None:
        self._collector = collector
        self._lock = threading.Lock()
        self._served: _Served | None = None

    def update(self) -> None:
        """After a refresh: serialise its snapshot (once)."""
        snapshot = self._collector.snapshot
        if self._served is None or self._served.snapshot is not snapshot:
            self._served = _Served(snapshot)

    def _current(self) -> _Served:
        served = self._served
        if served is None:
            raise RuntimeError("EngineViews.update() was not called after the first refresh")
        return served

    def engines(self, viewer: Viewer) -> tuple[bytes, Snapshot]:
        """The JSON of ``/v1/engines`` ``viewer`` may see, and the snapshot it is of."""
        served = self._current()
        if viewer.key == "all":
            return served.everything, served.snapshot
        with self._lock:
            body = served.by_viewer.get(viewer.key)
        if body is None:
            pieces = zip(served.pieces, served.public, served.owners, strict=True)
            body = (
                b"["
                + b", ".join(
                    full if public is None or viewer.sees_all_of(owner) else public
                    for full, public, owner in pieces
                )
                + b"]"
            )
            with self._lock:
                if len(served.by_viewer) < self.MAX_KEPT:
                    served.by_viewer[viewer.key] = body
        return body, served.snapshot

    def gpus(self) -> tuple[bytes, Snapshot]:
        served = self._current()
        return served.gpus, served.snapshot
