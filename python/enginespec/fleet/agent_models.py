"""The agent's routes of what each engine serves, in the shapes of llama.cpp's router management
API (tools/server/server-models.cpp: ``GET /models``, ``POST /models/load`` and ``/models/unload``
with ``{"model": NAME}``, answering ``{"success": true}``; errors as its server's
``format_error_response``: ``{"error": {"code", "message", "type"}}``), per engine, so a client
written for that API (Open WebUI, Unsloth Studio) drives any engine the agent sees:

- ``GET /v1/engines/TARGET/models``: what the engine serves now, one entry per model with its
  ``status.value`` (``loaded``, ``loading``, ``sleeping``, ``unloaded``; a failed one ``unloaded``
  with ``failed``) and enginespec's own reading beside it (``enginespec``);
- with ``--allow-control``: ``POST /v1/engines/TARGET/models/load`` and ``/models/unload``
  (``{"model": NAME}``), ``POST /v1/engines/TARGET/sleep`` and ``/wake`` (no body), each done
  through the engine's own API (:mod:`enginespec.lifecycle.modelcontrol`) and answered once done.
"""

from __future__ import annotations

import re
from typing import Any

from enginespec.errors import ControlFailed, ControlRefused, ControlUnsupported, InvalidInputError
from enginespec.health.servedmodels import ServedModels, served_models
from enginespec.lifecycle.modelcontrol import Action
from enginespec.process.record import EngineProcess
from enginespec.untrusted.documents import DocumentError, parse_json

#: The paths, TARGET an engine id or a pid as ``/v1/engines`` names it.
ROUTE = re.compile(
    r"/v1/engines/(?P<target>[A-Za-z0-9._-]{1,200})/(?P<action>models(?:/load|/unload)?|sleep|wake)"
)
#: The most of a request's body read (``{"model": NAME}``).
MAX_BODY_BYTES = 16 * 1024
#: How long a load may take before the answer says it failed (a large model loads in minutes).
CONTROL_SECONDS = 600.0

_Answer = tuple[int, dict[str, Any]]
_VERBS: dict[str, Action] = {
    "models/load": "load",
    "models/unload": "unload",
    "sleep": "sleep",
    "wake": "wake",
}


def error(code: int, message: str) -> _Answer:
    """An error in llama.cpp server's shape (tools/server/utils.hpp format_error_response)."""
    kinds = {
        400: "invalid_request_error",
        403: "permission_error",
        404: "not_found_error",
        413: "invalid_request_error",
        501: "not_supported_error",
        503: "unavailable_error",
    }
    return code, {"error": {"code": code, "message": message, "type": kinds.get(code, "server_error")}}


def listing(reading: ServedModels) -> _Answer:
    """``GET .../models``: the reading in the router's list shape."""
    if not reading.available:
        return error(503, reading.reason or "the engine does not say what it serves")
    data = []
    for model in reading.models:
        status: dict[str, Any] = {"value": "unloaded" if model.state == "failed" else model.state}
        if model.state == "failed":
            status["failed"] = True
        data.append(
            {
                "id": model.name,
                "object": "model",
                "owned_by": reading.engine,
                "created": int(reading.read_at),
                "status": status,
                "enginespec": model.model_dump(mode="json"),
            }
        )
    return 200, {"object": "list", "data": data}


def model_named(body: bytes) -> str | None:
    """The ``model`` of a load or unload request's JSON body, or ``None``."""
    try:
        document = parse_json(body, max_bytes=MAX_BODY_BYTES)
    except DocumentError:
        return None
    name = document.get("model") if isinstance(document, dict) else None
    return name if isinstance(name, str) and name else None


def answer(process: EngineProcess, action: str, body: bytes) -> _Answer:
    """What a model route answers for ``process`` (run on a worker thread: it waits on the engine)."""
    from enginespec.lifecycle.modelcontrol import control

    if action == "models":
        return listing(served_models(process))
    name = None
    if action in ("models/load", "models/unload"):
        name = model_named(body)
        if name is None:
            return error(400, 'the body must be a JSON object with "model": the model\'s name')
    try:
        control(process, _VERBS[action], name, timeout=CONTROL_SECONDS)
    except InvalidInputError as err:
        return error(400, str(err))
    except ControlUnsupported as err:
        return error(501, str(err))
    except ControlRefused as err:
        return error(403, str(err))
    except ControlFailed as err:
        return error(500, str(err))
    return 200, {"success": True}
