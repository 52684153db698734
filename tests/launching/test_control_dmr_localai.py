"""Served models and control through their own APIs of Docker Model Runner (docker/model-runner
642c7211) and LocalAI (mudler/LocalAI 82c191afa): real processes of their exact argv holding the
socket a scripted server answers on as their sources answer."""

from __future__ import annotations

import json

import pytest

import enginespec.cli.app as cli
from enginespec import ControlFailed, ControlUnsupported, load_model, served_models, unload_model
from helpers.fakeserver import Answer, FakeEngine, models
from helpers.procs import Procs
from helpers.simpleservers import Served, engine_process


def _posted(server: FakeEngine) -> list[tuple[str, object]]:
    return [
        (path, json.loads(body) if body else None)
        for method, path, body in server.script.bodies
        if method == "POST"
    ]


# -- Docker Model Runner ----------------------------------------------------------------------------


def _dmr(procs: Procs, routes: dict[str, list[Answer]]) -> Served:
    """`dmr serve --port P` (cmd/dmr/serve.go) holding the socket a scripted daemon answers on."""
    return engine_process(procs, ["/usr/local/bin/dmr", "serve"], routes, origins=True)


def _ps(*entries: dict[str, object]) -> Answer:
    """GET /engines/ps as json.Encoder writes []BackendStatus (pkg/inference/scheduling/api.go:
    in_use and loading omitted when false), with its newline."""
    return Answer(200, json.dumps(list(entries), separators=(",", ":")).encode() + b"\n")


def _runner(name: str, mode: str = "completion", loading: bool = False) -> dict[str, object]:
    entry: dict[str, object] = {"backend_name": "llama.cpp", "model_name": name, "mode": mode}
    if loading:
        entry["loading"] = True
    else:
        entry["last_used"] = "2026-12-07T19:00:00Z"
    return entry


def test_dmr_models_loaded_loading_and_available(procs: Procs) -> None:
    routes = {
        "/engines/ps": [
            _ps(_runner("ai/smollm2"), _runner("ai/smollm2", "embedding"), _runner("ai/gemma3", loading=True))
        ],
        "/engines/v1/models": [models("ai/smollm2:latest", "ai/gemma3:latest", "ai/qwen3:latest")],
    }
    with _dmr(procs, routes) as (process, _server):
        found = served_models(process)
    assert [(m.name, m.state) for m in found.models] == [
        ("ai/smollm2", "loaded"),
        ("ai/gemma3", "loading"),
        ("ai/qwen3:latest", "unloaded"),
    ], found


def test_dmr_unloads_through_engines_unload(procs: Procs) -> None:
    # http_handler.go Unload: UnloadResponse {"unloaded_runners": N}, N the runners left
    routes = {
        "/engines/unload": [Answer(200, b'{"unloaded_runners":0}\n')],
        "/engines/ps": [_ps(_runner("ai/smollm2")), _ps()],
        "/engines/v1/models": [models("ai/smollm2:latest")],
    }
    with _dmr(procs, routes) as (process, server):
        unloaded = unload_model(process, "ai/smollm2", timeout=30)
        assert _posted(server) == [("/engines/unload", {"models": ["ai/smollm2"]})]
    assert [(m.name, m.state) for m in unloaded.models] == [("ai/smollm2:latest", "unloaded")]


def test_dmr_has_no_load_route(procs: Procs) -> None:
    # a model loads on its first inference request: no route loads one
    with _dmr(procs, {"/engines/ps": [_ps()]}) as (process, server):
        with pytest.raises(ControlUnsupported, match="has no API for it"):
            load_model(process, "ai/smollm2", timeout=5)
        assert _posted(server) == []


def test_dmr_error_is_said(procs: Procs) -> None:
    # http.Error(w, "invalid request", 400): text, with its newline
    routes = {
        "/engines/unload": [Answer(400, b"invalid request\n", content_type="text/plain")],
        "/engines/ps": [_ps(_runner("ai/smollm2"))],
    }
    with (
        _dmr(procs, routes) as (process, _server),
        pytest.raises(ControlFailed, match=r"unload ai/smollm2: HTTP 400: invalid request"),
    ):
        unload_model(process, "ai/smollm2", timeout=5)


@pytest.mark.parametrize(
    "ps",
    [
        Answer(200, b'[{"model_name": 7}, "x", null, {"model_name": "m", "loading": "yes"}]'),
        Answer(200, b'{"model_name": "m"}'),
        Answer(200, b"[" * 100_000, content_type="text/plain"),
        Answer(200, b"<html>", content_type="text/html"),
        Answer(200, b"[" + b'{"model_name": "m"},' * 5000 + b'{"x": 1}]'),
    ],
    ids=["wrong-types", "not-a-list", "deep", "html", "many"],
)
def test_dmr_hostile_ps_answers(procs: Procs, ps: Answer) -> None:
    with _dmr(procs, {"/engines/ps": [ps], "/engines/v1/models": [Answer(200, b"nope")]}) as (process, _s):
        found = served_models(process)
    assert [(m.name, m.state) for m in found.models] in ([], [("m", "loaded")]), found
    assert found.available == (found.models != ()), found


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        # a success that is no JSON is not taken for done: the list says it is not
        (Answer(200, b"\x00garbage", content_type="text/plain"), r"not done within 1s \(ai/smollm2 loaded\)"),
        # a huge answer is not read past its bound
        (Answer(200, b"\x00" * 70_000, content_type="text/plain"), r"answer larger than 65536 bytes"),
    ],
    ids=["not-json", "huge"],
)
def test_dmr_hostile_unload_answers_are_said(procs: Procs, answer: Answer, said: str) -> None:
    routes = {"/engines/unload": [answer], "/engines/ps": [_ps(_runner("ai/smollm2"))]}
    with (
        _dmr(procs, routes) as (process, _server),
        pytest.raises(ControlFailed, match=rf"unload ai/smollm2: {said}"),
    ):
        unload_model(process, "ai/smollm2", timeout=1)


# -- LocalAI ----------------------------------------------------------------------------------------


def _localai(procs: Procs, routes: dict[str, list[Answer]], *extra: str) -> Served:
    argv = ["/usr/bin/local-ai", "run", "--address", "127.0.0.1:{port}", *extra]
    return engine_process(procs, argv, routes, origins=True)


def _system(*ids: str) -> Answer:
    """GET /system (core/http/endpoints/localai/system.go SystemInformations)."""
    held = [{"id": i, "backend": "llama-cpp"} for i in ids]
    return Answer(200, json.dumps({"backends": ["llama-cpp"], "loaded_models": held}).encode() + b"\n")


def test_localai_loads_and_unloads_with_its_key(procs: Procs) -> None:
    # backend_load.go: 200 ModelLoadResponse; backend_monitor.go: 200 {"message": "model stopped"}
    routes = {
        "/backend/load": [Answer(200, b'{"loaded":["phi-2"],"message":"model loaded"}\n')],
        "/backend/shutdown": [Answer(200, b'{"message":"model stopped"}\n')],
        "/system": [_system(), _system("phi-2"), _system("phi-2"), _system()],
        "/v1/models": [models("phi-2", "bert-embeddings")],
    }
    with _localai(procs, routes, "--api-keys", "sk-local-1") as (process, server):
        loaded = load_model(process, "phi-2", timeout=30)
        assert [(m.name, m.state) for m in loaded.models] == [
            ("phi-2", "loaded"),
            ("bert-embeddings", "unloaded"),
        ]
        unloaded = unload_model(process, "phi-2", timeout=30)
        assert [(m.name, m.state) for m in unloaded.models] == [
            ("phi-2", "unloaded"),
            ("bert-embeddings", "unloaded"),
        ]
        assert _posted(server) == [
            ("/backend/load", {"model": "phi-2"}),
            ("/backend/shutdown", {"model": "phi-2"}),
        ]
        sent = {
            (method, path): {k.lower(): v for k, v in headers.items()}.get("authorization")
            for method, path, headers in server.script.ours
        }
    # admin routes: a legacy --api-keys key is a synthetic admin (core/http/auth/middleware.go)
    assert sent[("POST", "/backend/load")] == "Bearer sk-local-1"
    assert sent[("POST", "/backend/shutdown")] == "Bearer sk-local-1"
    assert sent[("GET", "/system")] == "Bearer sk-local-1"
    assert "sk-local-1" not in loaded.model_dump_json() + unloaded.model_dump_json()


def test_localai_errors_are_said(procs: Procs) -> None:
    # backend_load.go: 500 {"loaded": [...], "message": "failed to load model: ..."}; a shutdown of
    # a model not loaded is echo's 404, answered by render.go notFoundHandler
    routes = {
        "/backend/load": [
            Answer(500, b'{"loaded":[],"message":"failed to load model: backend not found: llama-cpp"}\n')
        ],
        "/backend/shutdown": [Answer(404, b'{"error":{"code":404,"message":"Resource not found"}}\n')],
        "/system": [_system()],
    }
    with _localai(procs, routes) as (process, _server):
        with pytest.raises(ControlFailed, match=r"load phi-2: HTTP 500: failed to load model: backend not"):
            load_model(process, "phi-2", timeout=5)
        with pytest.raises(ControlFailed, match=r"unload phi-2: HTTP 404: Resource not found"):
            unload_model(process, "phi-2", timeout=5)


def test_localai_admin_refusal_is_said(procs: Procs) -> None:
    # auth/middleware.go RequireAdmin with --auth-enabled: a user's key that is not an admin's
    refused = b'{"error":{"code":403,"message":"Admin access required","type":"authorization_error"}}'
    routes = {"/backend/load": [Answer(403, refused)], "/system": [_system()]}
    with (
        _localai(procs, routes) as (process, _server),
        pytest.raises(ControlFailed, match=r"HTTP 403: Admin access required"),
    ):
        load_model(process, "phi-2", timeout=5)


def test_localai_hostile_answers_are_not_followed(procs: Procs) -> None:
    # a load answered with HTML and a list that never shows the model: not done, and said
    routes = {
        "/backend/load": [Answer(200, b"<html>" * 20, content_type="text/html")],
        "/system": [Answer(200, b'{"loaded_models": "phi-2"}')],
    }
    with (
        _localai(procs, routes) as (process, _server),
        pytest.raises(ControlFailed, match=r"load phi-2: not done within 1s"),
    ):
        load_model(process, "phi-2", timeout=1)


def test_the_models_command_shows_loaded_and_available(
    procs: Procs, capsys: pytest.CaptureFixture[str]
) -> None:
    routes = {
        "/engines/ps": [_ps(_runner("ai/smollm2"))],
        "/engines/v1/models": [models("ai/smollm2:latest", "ai/qwen3:latest")],
    }
    with _dmr(procs, routes) as (process, _server):
        assert cli.main(["models", str(process.pid)]) == 0
    rows = [line.split()[:4] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [
        ["docker-model-runner", str(process.pid), "ai/smollm2", "loaded"],
        ["docker-model-runner", str(process.pid), "ai/qwen3:latest", "unloaded"],
    ]
