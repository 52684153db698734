"""A fake TabbyAPI server: the routes enginespec asks of it, with the shapes and the key checks of
theroyallab/tabbyAPI at e632af41 (cited at each), on a socket a real process with TabbyAPI's argv
holds (see :func:`tabby_checkout`).

- auth (common/auth.py): ``check_api_key`` takes ``x-api-key``, else ``Authorization`` (``Bearer
  KEY``); ``check_admin_key`` the same with ``x-admin-key``; an admin key opens api routes too;
  a wrong or missing key is FastAPI's HTTPException answer, ``401 {"detail": "..."}``;
- ``GET /v1/model`` (endpoints/core/router.py current_model): the ModelCard of the loaded model,
  or 503 ``{"detail": "No models are currently loaded."}`` (common/model.py check_model_container);
- ``GET /v1/models`` (list_models): every folder of model_dir to an admin key
  (get_permission), only the loaded one to an api key (get_current_model_list);
- ``POST /v1/model/load`` ``{"model_name": ...}``: 400 for a name without a folder, else an SSE
  stream (sse_starlette, ``data: ...`` lines ended by ``\\r\\n\\r\\n``, chunked) of ModelLoadResponse
  progress events and a final ``finished`` (endpoints/core/utils/model.py stream_model_load), or
  an error event ``{"error": {"message", "trace"}}`` (common/networking.py get_generator_error);
- ``POST /v1/model/unload``: 503 when none is loaded, else 200 ``null`` (FastAPI's body of a
  route returning None).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from helpers.stateserver import StateHandler, serving_state

NONE_LOADED = "No models are currently loaded."


@dataclass
class TabbyState:
    api_key: str = "api-0123456789abcdef"
    admin_key: str = "admin-fedcba9876543210"
    disable_auth: bool = False
    folders: list[str] = field(default_factory=lambda: ["Qwen3-8B-exl3", "Llama-3.1-8B-exl3"])
    loaded: str | None = None
    modules: int = 3
    #: what the load stream does instead of loading: ``error`` (an error event), ``endless``
    #: (keep-alive comments forever), ``huge`` (progress events without end), ``long_line``
    load_mode: str = "ok"
    load_error: str = "Model load failed: CUDA out of memory"
    #: every request this test process made: (method, path, headers (lower-cased names), body).
    #: On a busy host other scanners (an exporter, a CI run beside) ask the same server: not kept.
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _card(name: str) -> dict[str, object]:
    # endpoints/core/types/model.py ModelCard; model_info's parameters (backends/exllamav3/model.py)
    return {
        "id": name,
        "object": "model",
        "created": 1765000000,
        "owned_by": "tabbyAPI",
        "logging": None,
        "parameters": {
            "max_seq_len": 4096,
            "cache_size": 4096,
            "cache_mode": "FP16",
            "rope_scale": 1.0,
            "rope_alpha": 1.0,
            "max_batch_size": 256,
            "chunk_size": 2048,
            "prompt_template": None,
            "prompt_template_content": None,
            "use_vision": False,
            "draft": None,
        },
    }


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        self.status, self.detail = status, detail


class _Handler(StateHandler):
    state: TabbyState

    # -- common/auth.py --------------------------------------------------------------------------

    def _check(self, kind: str) -> None:
        """check_api_key / check_admin_key."""
        s = self.state
        if s.disable_auth:
            return
        header = self.headers.get("x-admin-key" if kind == "admin" else "x-api-key")
        label = "admin key" if kind == "admin" else "API key"
        valid = {s.admin_key} if kind == "admin" else {s.api_key, s.admin_key}
        if header:
            if header not in valid:
                raise _Refused(401, f"Invalid {label}")
            return
        authorization = self.headers.get("authorization")
        if authorization:
            split = authorization.split(" ")
            if len(split) < 2 or split[0].lower() != "bearer" or split[1] not in valid:
                raise _Refused(401, f"Invalid {label}")
            return
        raise _Refused(401, f"Please provide an {label}")

    def _permission(self) -> str:
        """get_key_permission."""
        s = self.state
        if s.disable_auth:
            return "admin"
        key = (
            self.headers.get("x-admin-key")
            or self.headers.get("x-api-key")
            or self.headers.get("authorization")
        )
        if key is None:
            raise ValueError("The provided authentication key is missing.")
        if key.lower().startswith("bearer"):
            key = key.split(" ")[1]
        return "admin" if key == s.admin_key else "api"

    # -- answers ---------------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, document: object) -> None:
        self._chunk(b"data: " + json.dumps(document).encode() + b"\r\n\r\n")

    def _stream_load(self, name: str) -> None:
        s = self.state
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if s.load_mode == "error":
            self._event({"error": {"message": s.load_error, "trace": None}})
        elif s.load_mode == "endless":
            while not s.stop.wait(0.05):
                self._chunk(b": ping - 2026-12-07 11:00:00.000000+00:00\r\n\r\n")
        elif s.load_mode == "huge":
            event = {"model_type": "model", "module": 1, "modules": 10**9, "status": "processing"}
            many = (b"data: " + json.dumps(event).encode() + b"\r\n\r\n") * 1000
            while not s.stop.is_set():
                self._chunk(many)
        elif s.load_mode == "long_line":
            while not s.stop.is_set():
                self._chunk(b"data: " + b"x" * 4096)
        else:
            # module 0 says nothing; each next one "processing", the last one "finished" too
            for module in range(1, s.modules + 1):
                progress = {
                    "model_type": "model",
                    "module": module,
                    "modules": s.modules,
                    "status": "processing",
                }
                self._event(progress)
                if module == s.modules:
                    self._event({**progress, "status": "finished"})
            with s.lock:
                s.loaded = name.strip("/").rsplit("/", 1)[-1]
        self._chunk(b"")

    def _route(self, method: str, path: str, body: bytes) -> None:
        try:
            self._answer(method, path, body)
        except _Refused as refused:
            self._send(refused.status, {"detail": refused.detail})

    def _answer(self, method: str, path: str, body: bytes) -> None:
        s = self.state
        if (method, path) == ("GET", "/health"):
            self._send(200, {"status": "healthy", "issues": []})
        elif (method, path) == ("GET", "/v1/model"):
            self._check("api")
            if s.loaded is None:
                raise _Refused(503, NONE_LOADED)
            self._send(200, _card(s.loaded))
        elif (method, path) == ("GET", "/v1/models"):
            self._check("api")
            admin = self._permission() == "admin"
            names = list(s.folders) if admin else [s.loaded] if s.loaded else []
            # ModelCard(id=folder name): no parameters
            data = [{**_card(name), "parameters": None} for name in names]
            self._send(200, {"object": "list", "data": data})
        elif (method, path) == ("POST", "/v1/model/load"):
            self._check("admin")
            name = json.loads(body or b"{}").get("model_name")
            if not name:
                raise _Refused(400, "A model name was not provided for load.")
            if name.split("/")[0] not in s.folders:
                raise _Refused(400, "Could not find the model path for load. Check model name or config.yml?")
            self._stream_load(name)
        elif (method, path) == ("POST", "/v1/model/unload"):
            self._check("admin")
            if s.loaded is None:
                raise _Refused(503, NONE_LOADED)
            with s.lock:
                s.loaded = None
            self._send(200, None)
        else:
            self._send(404, {"detail": "Not Found"})


@contextmanager
def fake_tabby(sock: socket.socket, state: TabbyState) -> Iterator[TabbyState]:
    """Serves ``state`` on ``sock`` (bound, see ``fakeserver.bound_socket``) until the block ends."""
    with serving_state(sock, _Handler, state):
        try:
            yield state
        finally:
            state.stop.set()


def tabby_checkout(root: Path, tokens: str | None = None) -> Path:
    """A directory TabbyAPI's launch form takes for its checkout (``checkout_files`` next to
    ``main.py``), with ``api_tokens.yml`` holding ``tokens`` (as TabbyAPI writes it: common/auth.py
    load_auth_keys dumps AuthKeys with ruamel.yaml)."""
    for name in (
        "main.py",
        "start.py",
        "common/args.py",
        "common/tabby_config.py",
        "endpoints/core/router.py",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("# test checkout\n")
    if tokens is not None:
        (root / "api_tokens.yml").write_text(tokens)
    return root


def tokens_of(state: TabbyState) -> str:
    return f"api_key: {state.api_key}\nadmin_key: {state.admin_key}\n"
