"""How each kind of model list's answer is read (``ModelList.kind``): one :class:`Reader` per
reading, the requests it sends (with the key a server needs) and the answers it parses into
:class:`ServedModel` entries, each bounded in bytes and entries, every name masked and kept
literally. :mod:`enginespec.health.servedmodels` drives a reading and adds what is found among
processes (runners, their GPU bytes); here is only what one server says and how it reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import enginespec.health.reaching as reaching
from enginespec.definition.recordbase import KeyRole
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import find_engine
from enginespec.definition.servedrecords import ModelList, ModelListKind
from enginespec.display import literal
from enginespec.process.argv import flag_value
from enginespec.process.keyfile import FileKeys, read_keys
from enginespec.process.liveness import process_alive
from enginespec.process.mappedfiles import mapped_files
from enginespec.process.record import EngineProcess
from enginespec.process.settings import config_models
from enginespec.untrusted.documents import DocumentError, parse_json
from enginespec.untrusted.masking import mask_text

#: The most of one answer read (a router listing a few hundred models is ~200 KB).
MAX_ANSWER_BYTES = 1 << 20
#: The most models kept of one answer; the rest are counted in the reason.
MAX_MODELS = 1024
#: The most characters of a name kept (a longer one is cut, and says so).
MAX_NAME_CHARS = 512

ModelState = Literal["loaded", "loading", "sleeping", "unloaded", "failed"]
MemorySource = Literal["gpu_ledger", "engine"]


class ServedModel(BaseModel):
    """One model of a server. ``name`` is as the engine names it (what a client sends), masked;
    ``runner_pid`` and ``port`` are the per-model child's, where the engine runs one;
    ``memory_bytes`` the GPU bytes that child's tree holds (``memory_source`` ``gpu_ledger``) or
    the engine's own figure (``engine``); ``expires_at`` (Unix time) when the engine unloads it
    unless it is used, where the engine keeps a TTL."""

    model_config = ConfigDict(frozen=True)

    #: (an agent's answer is held to what a reading here makes: a masked name of at most
    #: MAX_NAME_CHARS, and the mask's few characters more)
    name: str = Field(max_length=2 * MAX_NAME_CHARS)
    state: ModelState
    reason: str = ""
    runner_pid: int | None = Field(default=None, ge=1, le=1 << 22)
    port: int | None = Field(default=None, ge=1, le=65535)
    memory_bytes: int | None = Field(default=None, ge=0, lt=1 << 63)
    memory_source: MemorySource | None = None
    expires_at: float | None = None


class _Answer(BaseModel):
    """What one reading found: the models, what was read, and what was left out."""

    models: list[ServedModel] = []
    sources: list[str] = []
    notes: list[str] = []


def _name(value: object) -> str | None:
    """A model name from an answer: a non-empty string, masked, cut at :data:`MAX_NAME_CHARS`."""
    if not isinstance(value, str) or not value:
        return None
    return mask_text(value[:MAX_NAME_CHARS])


def _entries(document: Any, key: str, notes: list[str]) -> list[dict[str, Any]]:
    """The objects of ``document[key]`` (at most :data:`MAX_MODELS`; what is left out noted)."""
    listed = document.get(key) if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise DocumentError(f"no list {key!r}")
    objects = [item for item in listed if isinstance(item, dict)]
    if len(objects) > MAX_MODELS:
        notes.append(f"{len(objects) - MAX_MODELS} more models left out (at most {MAX_MODELS})")
    return objects[:MAX_MODELS]


def _port_in(args: object) -> int | None:
    """The ``--port N`` of a child's argv as a router gives it (``status.args``)."""
    if not isinstance(args, list):
        return None
    for flag, value in itertools.pairwise(args):
        if flag == "--port" and isinstance(value, str) and value.isdigit() and 0 < int(value) < 65536:
            return int(value)
    return None


def _expiry(value: object) -> float | None:
    """An RFC 3339 time (Go's, up to nanoseconds) as Unix time; ``None`` when it is not one."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    # Python reads at most microseconds: the rest of the fraction goes
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        return None
    return found.timestamp() if found.tzinfo is not None else None


#: llama.cpp router's `status.value` (tools/server/server-models.h) -> state, reason
_ROUTER_STATES: dict[str, tuple[ModelState, str]] = {
    "loaded": ("loaded", ""),
    "loading": ("loading", ""),
    "sleeping": ("sleeping", ""),
    "unloaded": ("unloaded", ""),
    "downloading": ("unloaded", "downloading"),
    "downloaded": ("unloaded", "downloaded, not loaded"),
}


def _router_models(body: bytes, notes: list[str]) -> list[ServedModel]:
    found = []
    for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "data", notes):
        name, status = _name(entry.get("id")), entry.get("status")
        if name is None or not isinstance(status, dict):
            continue
        value = status.get("value")
        if not isinstance(value, str) or value not in _ROUTER_STATES:
            notes.append(f"{name}: a status enginespec does not know ({str(value)[:40]!r})")
            continue
        state, reason = _ROUTER_STATES[value]
        code = status.get("exit_code")
        if state == "unloaded" and (status.get("failed") is True or (isinstance(code, int) and code != 0)):
            state, reason = "failed", f"its server exited ({code})" if isinstance(code, int) else "failed"
        port = _port_in(status.get("args")) if state in ("loaded", "loading", "sleeping") else None
        found.append(ServedModel(name=name, state=state, reason=reason, port=port))
    return found


def _ollama_loaded(body: bytes, notes: list[str]) -> list[ServedModel]:
    found = []
    for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "models", notes):
        name, vram = _name(entry.get("name")), entry.get("size_vram")
        if name is None:
            continue
        held = vram if isinstance(vram, int) and not isinstance(vram, bool) and 0 <= vram < 1 << 53 else None
        found.append(
            ServedModel(
                name=name,
                state="loaded",
                memory_bytes=held,
                memory_source="engine" if held is not None else None,
                expires_at=_expiry(entry.get("expires_at")),
            )
        )
    return found


def _mlx_vlm_loaded(body: bytes) -> list[ServedModel]:
    """mlx-vlm's ``/health``: ``loaded_models`` maps each kind of model it holds (its cache group:
    ``text_generation``, ``embedding``...) to ``{"model", "adapter", "model_kind"}``, the model
    ``null`` when none is loaded (mlx_vlm/server/app.py _server_runtime_snapshot, v0.6.15)."""
    document = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
    groups = document.get("loaded_models") if isinstance(document, dict) else None
    if not isinstance(groups, dict):
        raise DocumentError("no object 'loaded_models'")
    found: dict[str, ServedModel] = {}
    for group, held in itertools.islice(groups.items(), MAX_MODELS):
        name = _name(held.get("model")) if isinstance(held, dict) else None
        if name is None or name in found:
            continue
        adapter = _name(held.get("adapter"))
        kind = _name(str(group)) or "?"
        found[name] = ServedModel(
            name=name, state="loaded", reason=f"{kind}" + (f", adapter {adapter}" if adapter else "")
        )
    return list(found.values())


def _names_in(body: bytes, key: str, member: str, notes: list[str]) -> list[str]:
    entries = _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), key, notes)
    return [name for entry in entries if (name := _name(entry.get(member))) is not None]


def _openai_models(body: bytes, notes: list[str]) -> list[ServedModel]:
    found = []
    for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "data", notes):
        name = _name(entry.get("id"))
        if name is None:
            continue
        parent = _name(entry.get("parent"))
        found.append(ServedModel(name=name, state="loaded", reason=f"adapter of {parent}" if parent else ""))
    return found


#: LM Studio's `state` of a model at /api/v0/models (lmstudio-ai/docs
#: 1_developer/2_rest-api/endpoints.md @ 8ec2b227: "loaded" or "not-loaded").
_LMSTUDIO_STATES: dict[str, ModelState] = {"loaded": "loaded", "not-loaded": "unloaded"}
#: The most characters of LM Studio's `type` of a model kept (llm, vlm, embeddings, embedding).
_LMSTUDIO_TYPE_CHARS = 40


def _lmstudio_type(entry: dict[str, Any]) -> str:
    kind = entry.get("type")
    return _name(kind[:_LMSTUDIO_TYPE_CHARS]) or "" if isinstance(kind, str) else ""


def _lmstudio_v1(body: bytes, notes: list[str]) -> list[ServedModel]:
    """LM Studio's ``GET /api/v1/models`` (0.4.0 on; lmstudio-ai/docs 1_developer/2_rest/list.md
    @ 35ec6d3d): ``{"models": [{"type", "key", "loaded_instances": [{"id", "config"}], ...}]}``,
    every model downloaded. Each loaded instance is ``loaded`` under its id (what a chat
    request's ``model`` and the unload request's ``instance_id`` name: the key for the first
    instance); a model with none is ``unloaded`` under its key."""
    found: list[ServedModel] = []
    for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "models", notes):
        key, kind = _name(entry.get("key")), _lmstudio_type(entry)
        instances = entry.get("loaded_instances", [])
        if key is None:
            continue
        if not isinstance(instances, list):
            notes.append(f"{key}: 'loaded_instances' is not a list: left out")
            continue
        ids = [i for item in instances if isinstance(item, dict) and (i := _name(item.get("id")))]
        if not ids:
            found.append(
                ServedModel(name=key, state="unloaded", reason=", ".join(filter(None, (kind, "not loaded"))))
            )
        for instance in dict.fromkeys(ids):
            of = f"an instance of {key}" if instance != key else ""
            found.append(
                ServedModel(name=instance, state="loaded", reason=", ".join(filter(None, (kind, of))))
            )
    if len(found) > MAX_MODELS:
        notes.append(f"{len(found) - MAX_MODELS} more models left out (at most {MAX_MODELS})")
    return found[:MAX_MODELS]


def _lmstudio_v0(body: bytes, notes: list[str]) -> list[ServedModel]:
    """LM Studio's ``GET /api/v0/models`` (0.3.6 on, deprecated since 0.4.0; lmstudio-ai/docs
    1_developer/2_rest-api/endpoints.md @ 8ec2b227): ``{"object": "list", "data": [{"id",
    "type": "llm"|"vlm"|"embeddings", "state": "loaded"|"not-loaded", ...}]}``, "all loaded and
    downloaded models"."""
    found = []
    for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "data", notes):
        name, state = _name(entry.get("id")), entry.get("state")
        if name is None:
            continue
        if not isinstance(state, str) or state not in _LMSTUDIO_STATES:
            notes.append(f"{name}: a state enginespec does not know ({str(state)[:40]!r})")
            continue
        found.append(ServedModel(name=name, state=_LMSTUDIO_STATES[state], reason=_lmstudio_type(entry)))
    return found


#: Lemonade's `status` of a loaded model (src/cpp/include/lemon/model_types.h
#: model_state_to_string, lemonade-sdk/lemonade v11.7.0) -> state, reason. `downsized`: its
#: llama-server shrunk on idle (llamacpp_server.h downsize), restored on the next request;
#: `evicting`: being unloaded, still held.
_LEMONADE_STATES: dict[str, tuple[ModelState, str]] = {
    "loading": ("loading", ""),
    "ready": ("loaded", ""),
    "in_use": ("loaded", "in use"),
    "downsizing": ("sleeping", "downsizing on idle"),
    "downsized": ("sleeping", "downsized on idle: restored on its next request"),
    "evicting": ("loaded", "being unloaded"),
    "unloaded": ("unloaded", ""),
}


def _lemonade_loaded(body: bytes, notes: list[str]) -> list[ServedModel]:
    """Lemonade's ``GET /api/v1/health``: ``all_models_loaded``, one entry per backend it runs,
    ``{"model_name", "backend_url": "http://127.0.0.1:PORT/v1", "pid", "status", ...}``
    (src/cpp/server/router.cpp get_all_loaded_models, v11.7.0). Before v11.0.0 an entry has no
    ``status`` (router.cpp v10.1.0): listed, it is loaded."""
    found: dict[str, ServedModel] = {}
    for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "all_models_loaded", notes):
        name, status = _name(entry.get("model_name")), entry.get("status", "ready")
        if name is None or name in found:
            continue
        if not isinstance(status, str) or status not in _LEMONADE_STATES:
            notes.append(f"{name}: a status enginespec does not know ({str(status)[:40]!r})")
            continue
        state, reason = _LEMONADE_STATES[status]
        url = entry.get("backend_url")
        port = None
        if isinstance(url, str) and (match := re.fullmatch(r"https?://[^/@]+:(\d{1,5})(?:/.*)?", url[:256])):
            port = int(match.group(1)) if 0 < int(match.group(1)) < 65536 else None
        found[name] = ServedModel(name=name, state=state, reason=reason, port=port)
    return list(found.values())


def _dmr_loaded(body: bytes, notes: list[str]) -> list[ServedModel]:
    """Docker Model Runner's ``GET /engines/ps``: a JSON list of its runners, each
    ``{"backend_name", "model_name", "mode", "last_used", "in_use", "loading", "keep_alive"}``,
    ``model_name`` the reference it was asked by, one entry per backend and mode
    (pkg/inference/scheduling/scheduler.go getLoaderStatus, api.go BackendStatus, 642c7211)."""
    listed = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
    found: dict[str, ServedModel] = {}
    for entry in _entries({"runners": listed}, "runners", notes):
        name = _name(entry.get("model_name"))
        if name is None:
            continue
        state: ModelState = "loading" if entry.get("loading") is True else "loaded"
        if name not in found or state == "loaded":
            found[name] = ServedModel(name=name, state=state)
    return list(found.values())


def _localai_loaded(body: bytes, notes: list[str]) -> list[ServedModel]:
    """LocalAI's ``GET /system``: ``{"backends": [...], "loaded_models": [{"id", "backend"}]}``,
    the models its loader holds (core/http/endpoints/localai/system.go SystemInformations,
    core/schema/localai.go SysInfoModel, 82c191afa)."""
    found = [
        name
        for entry in _entries(parse_json(body, max_bytes=MAX_ANSWER_BYTES), "loaded_models", notes)
        if (name := _name(entry.get("id"))) is not None
    ]
    return [ServedModel(name=name, state="loaded") for name in dict.fromkeys(found)]


def answer_detail(body: bytes) -> str | None:
    """The message of an error answer: FastAPI's ``{"detail": ...}``, or ``{"error": "..."}`` /
    ``{"error": {"message": ...}}``, else a bare ``{"message": "..."}`` (LocalAI's failed
    ``/backend/load``); ``None`` when it holds none (or is not JSON)."""
    try:
        document = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
    except DocumentError:
        return None
    if not isinstance(document, dict):
        return None
    said = document.get("detail", document.get("error", document.get("message")))
    if isinstance(said, dict):
        said = said.get("message")
    return None if said is None else str(said)[:300]


def keys_of(process: EngineProcess) -> FileKeys | None:
    """The keys of the server's key file (``Serving.api_key_file``), read now; ``None`` when its
    engine has none."""
    spec = find_engine(process.engine).serving.api_key_file
    if spec is None:
        return None
    if not process._local:
        return FileKeys(problem="an engine of another host: its key file is not read from here")
    return read_keys(spec, process.pid, process._root)


def with_key(t: reaching.CheckTarget, keys: FileKeys | None, role: KeyRole) -> reaching.CheckTarget:
    """``t`` sending the key of the key file a request needs (else the server's own)."""
    key = keys.key(role) if keys is not None else None
    return t if key is None else dataclasses.replace(t, api_key=key, unusable_key=False)


def started_with(process: EngineProcess, flag: str) -> bool:
    """Whether ``process`` was started with ``flag`` (alone, or as ``--flag=value``)."""
    return any(arg == flag or arg.startswith(f"{flag}=") for arg in process.argv)


def by_argv(listing: ModelList, process: EngineProcess) -> bool:
    """Whether ``process`` serves the one model its argv names, fixed at start (nothing to ask):
    its engine's list is ``fixed``; or it was started with a model where that one is fixed (a
    llama.cpp server; a router is started without one) and without what lets it change; or it
    serves a config's models (one at a time) and was started with a model instead."""
    if listing.kind == "fixed":
        return True
    if listing.kind == "one_of_config":
        return process.sources.get("model") != "config"
    return (
        listing.argv_model_fixed
        and process.model is not None
        and not any(started_with(process, flag) for flag in listing.asked_with)
    )


#: The most entries of a config file whose model files are looked for among the mapped ones.
MAX_CONFIG_ENTRIES = 256


def _mapped_of_config(spec: EngineDefinition, process: EngineProcess) -> tuple[set[str], str | None]:
    """The served names (masked, as in an answer) of the config entries whose model file the
    server maps now, and what could not be read (``None``: nothing)."""
    if not process._local:
        return set(), "an engine of another host: its files are not read from here"
    root = process._root
    entries, problem = config_models(spec, process.pid, process.argv, root)
    if problem is not None:
        return set(), problem
    mapped = mapped_files(process.pid, root)
    if mapped is None:
        return set(), "its memory maps cannot be read (another user's process?)"
    identities = {(m.device, m.inode) for m in mapped}
    paths = {m.path for m in mapped}
    found = set()
    for entry in entries[:MAX_CONFIG_ENTRIES]:
        if entry.model is None:
            continue
        identity = root.named_identity(process.pid, entry.model)
        held = (
            identity is not None
            and ((os.major(identity[0]), os.minor(identity[0])), identity[1]) in identities
        )
        if held or entry.model in paths:
            found.add(mask_text(entry.served_name[:MAX_NAME_CHARS]))
    return found, None


#: The most bytes of a server's argv or environment read for the key of a request.
MAX_KEY_SOURCE = 1 << 20


def keyed(t: reaching.CheckTarget, process: EngineProcess) -> tuple[reaching.CheckTarget, str]:
    """``t`` sending the key the definition's ``key_flag`` (else ``key_variable``) holds in the
    server's own argv (else environment), read now for this request alone and never kept or
    shown; ``t`` itself when it has none, and why not when one cannot be sent."""
    listing = t.spec.models
    if listing.key_flag is None or not process_alive(process):
        return t, ""
    root = process._root
    try:
        argv = [os.fsdecode(a) for a in root.read(process.pid, "cmdline", MAX_KEY_SOURCE).split(b"\0")[:-1]]
    except OSError:
        argv = []
    key = flag_value(argv, t.spec.signature, listing.key_flag)
    if key is None and listing.key_variable is not None:
        read = root.environ(process.pid, MAX_KEY_SOURCE)
        wanted = f"{listing.key_variable}=".encode()
        found = [item[len(wanted) :] for item in (read[0] if read else ()) if item.startswith(wanted)]
        key = found[-1].decode("utf-8", "replace") if found and found[-1] else None
    if key is None:
        return t, ""
    if reaching.HEADER_VALUE.fullmatch(key) is None:
        return t, f"its {listing.key_flag} cannot be sent in a header (control or non-ASCII characters)"
    return dataclasses.replace(t, api_key=key), ""


#: KoboldCpp's names (koboldcpp.py at v1.116.1, LostRuins/koboldcpp 0c163a9b): `friendlymodelname`
#: is "inactive" until a model loads (line 88); /api/v1/model says "koboldcpp/protected-model" to a
#: request without its password (line 6077); list_options adds two actions to its files (line 1488).
_KOBOLD_NONE = "inactive"
_KOBOLD_WITHHELD = "koboldcpp/protected-model"
_KOBOLD_ACTIONS = frozenset({"initial_model", "unload_model"})


class Reader:
    """One reading of ``t``'s models (its process scanned), each request bounded by ``timeout``."""

    def __init__(
        self, t: reaching.CheckTarget, process: EngineProcess, timeout: float, keys: FileKeys | None = None
    ) -> None:
        self.t, self.process, self.timeout, self.keys = t, process, timeout, keys
        self.answer = _Answer()
        #: the status of the last answer ``get`` had (``None``: none came), and its path
        self.status: int | None = None
        self.path: str | None = None

    async def get(self, path: str, key: KeyRole = "api") -> bytes | None:
        """The body of a 200 answer to ``path`` (``b""``: the server says it has no model
        loaded, ``ModelList.none_loaded``); ``None`` (and why, in the notes) otherwise. Sent with
        the key ``key`` of the server's key file, where it has one."""
        target = with_key(self.t, self.keys, key)
        status, body, detail = await reaching.fetch(target, path, self.timeout, MAX_ANSWER_BYTES)
        self.answer.sources.append(f"{(self.t.base_url or '').rstrip('/')}{path}")
        self.status, self.path = status, path
        if status == 200:
            return body
        said = answer_detail(body) if status is not None else None
        none_loaded = self.t.spec.models.none_loaded
        if none_loaded is not None and status == 503 and said == none_loaded:
            return b""
        note = f"{path}: {detail or f'HTTP {status}'}"
        if status in (401, 403):
            note += f" ({literal(mask_text(said))})" if said else ""
            if self.keys is not None and self.keys.problem:
                note += f"; {self.keys.problem}"
        self.answer.notes.append(note)
        return None

    def fixed(self) -> bool:
        """The one model the argv names, ``loaded`` (``False`` when it names none)."""
        p = self.process
        # as the engine names it where its rule is known (KoboldCpp's `koboldcpp/STEM`)
        served = self.t.spec.served_name(p.model) if p.model and not p.served_model_name else None
        name = p.served_model_name or served or p.model_name or p.model
        if not name:
            return False
        why = (
            "the model it started with: a request naming another loads that one in its place,"
            " and the server does not say which it holds"
            if self.t.spec.models.replaced_on_request
            else ""
        )
        self.answer.models.append(ServedModel(name=mask_text(name), state="loaded", reason=why))
        self.answer.sources.append("argv")
        return True

    async def read(self) -> bool:
        """Fills ``answer``; whether the engine said (or its argv says) what it serves."""
        listing = self.t.spec.models
        if by_argv(listing, self.process):
            return self.fixed()
        body = await self.get(listing.path)
        if body is None and self.status == 404 and listing.older_path is not None:
            # a release before `path`: its 404 is no problem, its older list is asked instead
            self.answer.notes.pop()
            body = await self.get(listing.older_path)
        if body is None:
            return False
        return await _READINGS[listing.kind](self, body)

    async def _router(self, body: bytes) -> bool:
        self.answer.models = _router_models(body, self.answer.notes)
        return True

    async def _ollama(self, body: bytes) -> bool:
        self.answer.models = _ollama_loaded(body, self.answer.notes)
        await self._could_load(self.t.spec.models.available_path, "models", "name")
        return True

    async def _mlx_vlm(self, body: bytes) -> bool:
        self.answer.models = _mlx_vlm_loaded(body)
        await self._could_load(self.t.spec.models.available_path, "data", "id")
        return True

    async def _openai(self, body: bytes) -> bool:
        self.answer.models = _openai_models(body, self.answer.notes)
        await self._sleeping(self.t.spec.models.sleeping_path)
        return True

    async def _sglang(self, body: bytes) -> bool:
        # its one model, under the name clients send
        document = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
        path = _name(document.get("model_path") if isinstance(document, dict) else None)
        name = self.process.served_model_name or path
        if name is None:
            raise DocumentError("no model_path")
        self.answer.models = [ServedModel(name=mask_text(name), state="loaded")]
        return True

    async def _one_of_config(self, body: bytes) -> bool:
        # the models of its config file, as it serves them; loaded is the one whose file it maps
        listed = _openai_models(body, self.answer.notes)
        loaded, problem = await asyncio.to_thread(_mapped_of_config, self.t.spec, self.process)
        if problem is None and not loaded:
            problem = "it maps no model file of its config (loaded without mmap, or loading one)"
        if problem is not None:
            counted = f"{len(listed)} model" + ("" if len(listed) == 1 else "s")
            self.answer.notes.append(f"which of its {counted} is loaded cannot be told: {problem}")
            return False
        shared = len([m for m in listed if m.name in loaded]) > 1
        why = "another of its names maps the same file: which of them is current cannot be told"
        self.answer.models = [
            m.model_copy(update={"state": "loaded", "reason": why if shared else ""})
            if m.name in loaded
            else m.model_copy(update={"state": "unloaded"})
            for m in listed
        ]
        return True

    async def _tabbyapi(self, body: bytes) -> bool:
        # the loaded model's card (ModelCard, `id` its folder's name), or none loaded (`get`)
        if body:
            document = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
            name = _name(document.get("id") if isinstance(document, dict) else None)
            if name is None:
                raise DocumentError("no model id")
            self.answer.models = [ServedModel(name=name, state="loaded")]
        listing = self.t.spec.models
        await self._could_load(listing.available_path, "data", "id", listing.available_key)
        return True

    async def _lmstudio(self, body: bytes) -> bool:
        older = self.path is not None and self.path == self.t.spec.models.older_path
        self.answer.models = (_lmstudio_v0 if older else _lmstudio_v1)(body, self.answer.notes)
        return True

    async def _lemonade(self, body: bytes) -> bool:
        self.answer.models = _lemonade_loaded(body, self.answer.notes)
        await self._could_load(self.t.spec.models.available_path, "data", "id")
        return True

    async def _docker_model_runner(self, body: bytes) -> bool:
        self.answer.models = _dmr_loaded(body, self.answer.notes)
        await self._could_load(self.t.spec.models.available_path, "data", "id")
        # a model asked by `ai/m` is listed as `ai/m:latest` among those it has: one model
        held = {m.name for m in self.answer.models if m.state != "unloaded"}
        self.answer.models = [
            m
            for m in self.answer.models
            if m.state != "unloaded" or not (m.name.endswith(":latest") and m.name[:-7] in held)
        ]
        return True

    async def _localai(self, body: bytes) -> bool:
        self.answer.models = _localai_loaded(body, self.answer.notes)
        await self._could_load(self.t.spec.models.available_path, "data", "id")
        return True

    async def _koboldcpp(self, body: bytes) -> bool:
        # {"result": NAME} (koboldcpp.py v1.116.1 line 6077): the one model it serves now
        document = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
        said = document.get("result") if isinstance(document, dict) else None
        if not isinstance(said, str):
            raise DocumentError("no string 'result'")
        if said == _KOBOLD_WITHHELD:
            raise DocumentError("KoboldCpp withholds its model's name from a request without its password")
        name = _name(said) if said != _KOBOLD_NONE else None
        listing = self.t.spec.models
        if listing.available_path is None or not any(
            started_with(self.process, f) for f in listing.asked_with
        ):
            self.answer.models = [ServedModel(name=name, state="loaded")] if name else []
            return True
        t, why = keyed(self.t, self.process)
        if why:
            self.answer.notes.append(f"{listing.available_path}: not asked: {why}")
            self.answer.models = [ServedModel(name=name, state="loaded")] if name else []
            return True
        options = await self._options(t, listing.available_path)
        # the file it serves now is not listed again: its name says which one it is
        loaded_from = [o for o in options if name is not None and self.t.spec.served_name(o) == name]
        reason = f"from {loaded_from[0]}" if loaded_from else ""
        shown = [ServedModel(name=name, state="loaded", reason=reason)] if name else []
        for option in options:
            if option not in loaded_from and len(shown) < MAX_MODELS:
                kind = "a model file" if self.t.spec.served_name(option) else "a config"
                shown.append(ServedModel(name=option, state="unloaded", reason=f"{kind} of its --admindir"))
        self.answer.models = shown
        return True

    async def _options(self, t: reaching.CheckTarget, path: str) -> list[str]:
        """What KoboldCpp's admin mode can switch to: a JSON list of file names of its admin
        directory, and two actions (left out); ``[]`` without admin mode or its password."""
        status, body, detail = await reaching.fetch(t, path, self.timeout, MAX_ANSWER_BYTES)
        self.answer.sources.append(f"{(self.t.base_url or '').rstrip('/')}{path}")
        if status != 200:
            self.answer.notes.append(f"{path}: {detail or f'HTTP {status}'}")
            return []
        try:
            listed = parse_json(body, max_bytes=MAX_ANSWER_BYTES)
        except DocumentError as err:
            self.answer.notes.append(f"{path}: unreadable answer ({err})")
            return []
        if not isinstance(listed, list):
            self.answer.notes.append(f"{path}: not a list")
            return []
        if not listed:
            self.answer.notes.append(
                f"{path}: none listed (KoboldCpp lists none to a request without its admin password)"
            )
        names = [n for item in listed if (n := _name(item)) is not None and item not in _KOBOLD_ACTIONS]
        if len(names) > MAX_MODELS:
            self.answer.notes.append(f"{len(names) - MAX_MODELS} more models left out (at most {MAX_MODELS})")
        return list(dict.fromkeys(names))[:MAX_MODELS]

    async def _could_load(self, path: str | None, key: str, member: str, role: KeyRole = "api") -> None:
        """The models listed at ``path`` (``document[key][*][member]``) not loaded: ``unloaded``."""
        body = None if path is None else await self.get(path, role)
        if not body or path is None:
            return
        loaded = {model.name for model in self.answer.models}
        names = _names_in(body, key, member, self.answer.notes)
        room = MAX_MODELS - len(self.answer.models)
        more = [
            ServedModel(name=name, state="unloaded") for name in dict.fromkeys(names) if name not in loaded
        ]
        self.answer.models += more[: max(room, 0)]

    async def _sleeping(self, path: str | None) -> None:
        # only a dev-mode server answers (else 404): what it does not say, it is not
        status, body, _detail = (
            (None, b"", "") if path is None else await reaching.fetch(self.t, path, self.timeout, 4096)
        )
        if status != 200 or path is None:
            return
        self.answer.sources.append(f"{(self.t.base_url or '').rstrip('/')}{path}")
        try:
            document = parse_json(body, max_bytes=4096)
        except DocumentError:
            self.answer.notes.append(f"{path}: not JSON")
            return
        if isinstance(document, dict) and document.get("is_sleeping") is True:
            self.answer.models = [
                m.model_copy(update={"state": "sleeping"}) if m.state == "loaded" else m
                for m in self.answer.models
            ]


#: How each kind of model list is read (see ``ModelList.kind``), after its ``path`` answered.
_READINGS: dict[ModelListKind, Callable[[Reader, bytes], Awaitable[bool]]] = {
    "llamacpp_router": Reader._router,
    "one_of_config": Reader._one_of_config,
    "mlx_vlm": Reader._mlx_vlm,
    "ollama": Reader._ollama,
    "openai": Reader._openai,
    "sglang": Reader._sglang,
    "tabbyapi": Reader._tabbyapi,
    "koboldcpp": Reader._koboldcpp,
    "lmstudio": Reader._lmstudio,
    "lemonade": Reader._lemonade,
    "docker_model_runner": Reader._docker_model_runner,
    "localai": Reader._localai,
}
