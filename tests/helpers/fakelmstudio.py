"""A fake LM Studio server: the routes enginespec asks of it, with the shapes of LM Studio's
published REST docs (lmstudio-ai/docs, the commit cited at each), on a socket a real process with
LM Studio's argv holds.

- ``GET /api/v1/models`` (0.4.0 on; 1_developer/2_rest/list.md @ 35ec6d3d): ``{"models": [{"type",
  "publisher", "key", "display_name", "loaded_instances": [{"id", "config"}], ...}]}``;
- ``GET /api/v0/models`` (0.3.6 on; 1_developer/2_rest-api/endpoints.md @ 8ec2b227): ``{"object":
  "list", "data": [{"id", "object", "type", "state": "loaded"|"not-loaded", ...}]}``; with
  ``older`` the v1 routes answer 404, as a release before 0.4.0 does;
- ``POST /api/v1/models/load`` ``{"model": KEY}`` → ``{"model_instance_id", "config",
  "load_time_seconds"}`` (1_developer/2_rest/load.md @ 35ec6d3d);
- ``POST /api/v1/models/unload`` ``{"instance_id": ID}`` → ``{"instance_id": ID}``
  (1_developer/2_rest/unload.md @ 15ed6982);
- with ``token``, every route wants ``Authorization: Bearer TOKEN`` (the docs' examples send
  ``$LM_API_TOKEN`` so: 1_developer/2_rest/unload.md).

Not documented, made up here: the error answers (a status with ``{"error": {"message"}}``) and
the id of a second instance of a model already loaded (``KEY:2``).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from helpers.stateserver import StateHandler, serving_state


@dataclass
class LmState:
    #: each downloaded model's key, its type, and its loaded instances' ids
    models: dict[str, tuple[str, list[str]]] = field(
        default_factory=lambda: {
            "openai/gpt-oss-20b": ("llm", []),
            "text-embedding-nomic-embed-text-v1.5": ("embedding", []),
        }
    )
    older: bool = False
    token: str | None = None
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(StateHandler):
    state: LmState

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message}})

    def _v1_models(self) -> object:
        return {
            "models": [
                {
                    "type": kind,
                    "publisher": key.split("/")[0] if "/" in key else "lmstudio-community",
                    "key": key,
                    "display_name": key.rsplit("/", 1)[-1],
                    "size_bytes": 241410208,
                    "loaded_instances": [{"id": i, "config": {"context_length": 4096}} for i in ids],
                    "max_context_length": 32768,
                    "format": "gguf",
                }
                for key, (kind, ids) in self.state.models.items()
            ]
        }

    def _v0_models(self) -> object:
        return {
            "object": "list",
            "data": [
                {
                    "id": key,
                    "object": "model",
                    "type": "embeddings" if kind == "embedding" else kind,
                    "compatibility_type": "gguf",
                    "state": "loaded" if ids else "not-loaded",
                    "max_context_length": 32768,
                }
                for key, (kind, ids) in self.state.models.items()
            ],
        }

    def _route(self, method: str, path: str, body: bytes) -> None:
        s = self.state
        if s.token is not None and self.headers.get("authorization") != f"Bearer {s.token}":
            self._error(401, "Invalid or missing API token")
            return
        if (method, path) == ("GET", "/api/v0/models"):
            self._send(200, self._v0_models())
            return
        if s.older or not path.startswith("/api/v1/"):
            self._error(404, f"Unexpected endpoint or method. ({method} {path})")
            return
        if (method, path) == ("GET", "/api/v1/models"):
            self._send(200, self._v1_models())
        elif (method, path) == ("POST", "/api/v1/models/load"):
            key = json.loads(body).get("model")
            with s.lock:
                if key not in s.models:
                    self._error(404, f"Model not found: {key}")
                    return
                ids = s.models[key][1]
                instance = key if not ids else f"{key}:{len(ids) + 1}"
                ids.append(instance)
            self._send(
                200,
                {"model_instance_id": instance, "config": {"context_length": 4096}, "load_time_seconds": 0.1},
            )
        elif (method, path) == ("POST", "/api/v1/models/unload"):
            instance = json.loads(body).get("instance_id")
            with s.lock:
                held = [ids for _kind, ids in s.models.values() if instance in ids]
                if not held:
                    self._error(404, f"No loaded model instance with id {instance}")
                    return
                held[0].remove(instance)
            self._send(200, {"instance_id": instance})
        else:
            self._error(404, f"Unexpected endpoint or method. ({method} {path})")


@contextmanager
def fake_lmstudio(sock: socket.socket, state: LmState) -> Iterator[LmState]:
    """Serves ``state`` on ``sock`` (bound, see ``fakeserver.bound_socket``) until the block ends."""
    with serving_state(sock, _Handler, state):
        yield state
