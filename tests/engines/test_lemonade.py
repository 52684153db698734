"""Lemonade (issue 41): `lemond`, `lemonade-router` and `lemonade-server serve|run` recognised from
argv (the 2026 corpus's records, real command lines from Lemonade's docs and issues, its clients
and look-alikes left alone); the backends it starts (a llama-server child) are its runners, still
llama.cpp, in a real process tree, not folded away; its /api/v1/health, version, identity and
models over a real HTTP server answering as Lemonade v11.7.0 does, hostile answers. Both
backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import enginespec.cli.app as cli
from enginespec import ControlFailed, Scanner, load_model, served_models, unload_model
from enginespec.definition.records import HealthAnswer
from enginespec.engines import get_engine_spec
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer, FakeEngine, models
from helpers.procs import Procs, cmdline_of, descendants_of, wait_for
from helpers.simpleservers import Served, engine_process, identify_answering
from helpers.tabletests import hostile_health_test, launch_forms_test

SEP, ARG = "\x1e", "\x1f"
#: src/cpp/server/server.cpp handle_health (v11.7.0), one model loaded (nlohmann's dump: sorted keys)
HEALTH = json.dumps(
    {
        "all_models_loaded": [
            {
                "backend_url": "http://127.0.0.1:8001/v1",
                "checkpoint": "unsloth/Qwen3-0.6B-GGUF:Q4_0",
                "model_name": "Qwen3-0.6B-GGUF",
                "pid": 4242,
                "recipe": "llamacpp",
                "status": "ready",
                "type": "llm",
            }
        ],
        "max_models": {"audio": 1, "embedding": 1, "image": 1, "llm": 1, "reranking": 1},
        "model_loaded": "Qwen3-0.6B-GGUF",
        "status": "ok",
        "telemetry": {"enabled": False},
        "update_check_done": True,
        "version": "11.7.0",
    },
    separators=(",", ":"),
).encode()


FORMS: list[tuple[list[str], tuple[Any, ...] | None]] = [
    # Dockerfile (e385039e): CMD ["./lemond", "--host", "0.0.0.0"]; the systemd unit's lemond
    (["/usr/bin/lemond"], (None, None, None)),
    (["lemond", "--port", "13306", "--host", "127.0.0.1"], (None, "127.0.0.1", 13306)),
    (["lemond", "--port=9000", "--no-broadcast"], (None, None, 9000)),
    # its one positional is the cache directory, not a model
    (["lemond", "/var/lib/lemonade", "--broadcast", "--port", "9001"], (None, None, 9001)),
    # v9/v10.0: lemonade-router, every serve option at its top level
    (["lemonade-router", "--port", "8000", "--log-level", "info"], (None, None, 8000)),
    # README v8: `lemonade-server-dev serve`, as a console script under its Python
    (["/venv/bin/python3", "/venv/bin/lemonade-server-dev", "serve", "--port", "8020"], (None, None, 8020)),
    (["lemonade-server", "serve", "--no-tray", "--host", "0.0.0.0"], (None, "0.0.0.0", None)),
    # `lemonade-server run MODEL` starts the server if needed and opens the chat
    # (src/lemonade_server/cli.py v8.2.2)
    (["lemonade-server", "run", "Qwen3-0.6B-GGUF"], ("Qwen3-0.6B-GGUF", None, None)),
    (
        ["lemonade-server-dev", "run", "--no-tray", "Llama-3.2-1B-Instruct-Hybrid"],
        ("Llama-3.2-1B-Instruct-Hybrid", None, None),
    ),
    # clients and exits
    (["lemonade", "pull", "Gemma-4-E2B-it-GGUF"], None),
    (["lemonade", "run", "Qwen3-0.6B-GGUF"], None),
    (["lemonade", "list"], None),
    (["lemonade-server", "list"], None),
    (["lemonade-server", "pull", "Qwen3-0.6B-GGUF"], None),
    (["lemonade-server", "status"], None),
    (["lemonade-server", "stop"], None),
    (["lemonade-server", "--version"], None),
    (["lemonade-server", "serve", "--help"], None),
    (["lemond", "--version"], None),
    (["lemond", "-h"], None),
    # CLI11 refuses a second positional
    (["lemond", "/a", "/b"], None),
    (["tail", "-f", "lemond.log"], None),
    (["lemonade-tray"], None),
]


test_launch_forms = launch_forms_test("lemonade", FORMS)


def test_backends_are_its_runners_in_a_real_tree(procs: Procs, tmp_path: Path) -> None:
    """`lemond` started a llama-server (from its cache's bin directory) and a whisper-server:
    each is Lemonade's runner, still of its own engine, listed on its own (not folded into
    lemond as a worker)."""
    runner = [
        str(tmp_path / ".cache/lemonade/bin/llamacpp/vulkan/llama-server"),
        "-m",
        "/root/.cache/huggingface/hub/models--unsloth--Qwen3-0.6B-GGUF/Qwen3-0.6B-Q4_0.gguf",
        "--ctx-size",
        "4096",
        "--port",
        "8001",
        "--jinja",
    ]
    server = procs.start(["/opt/lemonade/lemond", "--host", "0.0.0.0"], HELPER_SPAWN=ARG.join(runner))
    wait_for(lambda: [cmdline_of(c) for c in descendants_of(server.pid)] == [runner], timeout=20)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    top = found[server.pid]
    assert (top.engine, top.role, top.supervisor, top.host) == ("lemonade", "server", None, "0.0.0.0")
    (child,) = descendants_of(server.pid)
    assert child in found, "a supervisor's runner must not be folded away"
    assert child not in top.worker_pids
    runner_record = found[child]
    assert (runner_record.engine, runner_record.role, runner_record.supervisor) == (
        "llamacpp",
        "runner",
        "lemonade",
    )
    assert runner_record.port == 8001


# -- over HTTP -----------------------------------------------------------------------------------


def _lemonade(procs: Procs, routes: dict[str, list[Answer]]) -> Served:
    return engine_process(procs, ["/usr/bin/lemond", "--host", "127.0.0.1"], routes)


def test_health_ready_and_version(procs: Procs) -> None:
    with _lemonade(procs, {"/api/v1/health": [Answer(200, HEALTH)]}) as (process, server):
        health = check_health(process)
        assert health.state == "ready", health
        assert any(p == "/api/v1/health" for _m, p, _h in server.script.seen)


test_hostile_health_answers_are_said = hostile_health_test(
    _lemonade,
    "/api/v1/health",
    [
        Answer(200, b"<html>lemonade</html>", content_type="text/html"),
        Answer(200, b"[" * 100_000),
        Answer(200, b'{"status": 5}'),
        Answer(500, b"not json"),
        Answer(200, b'{"status": ["ok"]}'),
        Answer(200, b"x" * 3_000_000, content_type="text/plain"),
    ],
    ids=["html", "deep", "wrong-type", "not-json", "list", "huge"],
)


def test_models(procs: Procs) -> None:
    # loaded: the health answer's all_models_loaded; the rest of /api/v1/models downloaded
    routes = {
        "/api/v1/health": [Answer(200, HEALTH)],
        "/api/v1/models": [models("Qwen3-0.6B-GGUF", "whisper-v3-turbo-FLM")],
    }
    with _lemonade(procs, routes) as (process, _server):
        found = served_models(process)
    assert [(m.name, m.state, m.port) for m in found.models] == [
        ("Qwen3-0.6B-GGUF", "loaded", 8001),
        ("whisper-v3-turbo-FLM", "unloaded", None),
    ], found


def _loaded(*entries: dict[str, object]) -> Answer:
    """Lemonade's health answer with ``entries`` as its all_models_loaded (router.cpp
    get_all_loaded_models v11.7.0: model_name, backend_url, pid, status, ...)."""
    document = json.loads(HEALTH)
    document["all_models_loaded"] = list(entries)
    return Answer(200, json.dumps(document).encode())


def _entry(name: str, status: str | None = "ready", port: int = 8001) -> dict[str, object]:
    entry: dict[str, object] = {"model_name": name, "backend_url": f"http://127.0.0.1:{port}/v1", "pid": 7}
    if status is not None:
        entry["status"] = status
    return entry


def test_model_states(procs: Procs) -> None:
    # model_types.h model_state_to_string (v11.7.0); before v11.0.0 an entry has no status
    health = _loaded(
        _entry("a", "loading", 8002),
        _entry("b", "in_use", 8003),
        _entry("c", "downsized", 8004),
        _entry("d", "evicting", 8005),
        _entry("old", None, 8006),
        _entry("odd", "exploding"),
        {"model_name": 7, "status": "ready"},
        {"model_name": "e", "backend_url": "http://127.0.0.1:99999/v1", "status": "ready"},
        "not an object",
    )
    routes = {"/api/v1/health": [health], "/api/v1/models": [models("a", "z")]}
    with _lemonade(procs, routes) as (process, _server):
        found = served_models(process)
    assert [(m.name, m.state, m.port) for m in found.models] == [
        ("a", "loading", 8002),
        ("b", "loaded", 8003),
        ("c", "sleeping", 8004),
        ("d", "loaded", 8005),
        ("old", "loaded", 8006),
        ("e", "loaded", None),
        ("z", "unloaded", None),
    ], found
    assert "odd: a status enginespec does not know ('exploding')" in found.reason


@pytest.mark.parametrize(
    "health",
    [
        Answer(200, b'{"status": "ok", "all_models_loaded": {"a": 1}}'),
        Answer(200, b"[" * 100_000),
        Answer(200, b"<html>", content_type="text/html"),
        Answer(200, b'{"all_models_loaded": [' + b'{"model_name": "m"},' * 5000 + b'{"x": 1}]}'),
    ],
    ids=["wrong-type", "deep", "html", "many"],
)
def test_hostile_models_answers(procs: Procs, health: Answer) -> None:
    routes = {"/api/v1/health": [health], "/api/v1/models": [Answer(200, b'{"data": [{"id": 7}]}')]}
    with _lemonade(procs, routes) as (process, _server):
        found = served_models(process)
    assert [m.name for m in found.models] in ([], ["m"]), found
    assert found.available == (found.models != ()), found


def test_identity_probe() -> None:
    probe = get_engine_spec("lemonade").serving.identity
    assert probe is not None
    assert probe.matches(HealthAnswer(200, HEALTH))
    # llama-server's /v1/health, and a 404
    assert not probe.matches(HealthAnswer(200, b'{"status":"ok"}'))
    assert not probe.matches(HealthAnswer(404, b'{"error":"not found"}'))


def test_identify_tells_lemonade() -> None:
    assert identify_answering({"/api/v1/health": [Answer(200, HEALTH)]}) == ("lemonade", ("lemonade",))


# -- control: load and unload through its own API -------------------------------------------------


def _controlled(procs: Procs, routes: dict[str, list[Answer]], **env: str) -> Served:
    """`lemond --host 127.0.0.1 --port P` (with ``env``) holding the socket a scripted Lemonade
    answers on; only this test's own requests move its scripts on."""
    return engine_process(procs, ["/usr/bin/lemond", "--host", "127.0.0.1"], routes, origins=True, **env)


def _posted(server: FakeEngine) -> list[tuple[str, object]]:
    return [
        (path, json.loads(body) if body else None)
        for method, path, body in server.script.bodies
        if method == "POST"
    ]


#: server.cpp handle_load / handle_unload (v11.7.0): their answers on success
LOADED = Answer(
    200,
    b'{"checkpoint":"unsloth/Qwen3-0.6B-GGUF:Q4_0","model_name":"Qwen3-0.6B-GGUF",'
    b'"recipe":"llamacpp","status":"success"}',
)
UNLOADED = Answer(
    200, b'{"message":"Model unloaded successfully","model_name":"Qwen3-0.6B-GGUF","status":"success"}'
)


def test_loads_and_unloads_a_model(procs: Procs) -> None:
    qwen = "Qwen3-0.6B-GGUF"
    routes = {
        "/api/v1/load": [LOADED],
        "/api/v1/unload": [UNLOADED],
        "/api/v1/health": [
            _loaded(_entry(qwen, "loading")),
            _loaded(_entry(qwen, "ready")),
            _loaded(_entry(qwen, "evicting")),
            _loaded(),
        ],
        "/api/v1/models": [models(qwen, "whisper-v3-turbo-FLM")],
    }
    with _controlled(procs, routes) as (process, server):
        loaded = load_model(process, qwen, timeout=30)
        assert [(m.name, m.state) for m in loaded.models] == [
            (qwen, "loaded"),
            ("whisper-v3-turbo-FLM", "unloaded"),
        ]
        unloaded = unload_model(process, qwen, timeout=30)
        assert [(m.name, m.state) for m in unloaded.models] == [
            (qwen, "unloaded"),
            ("whisper-v3-turbo-FLM", "unloaded"),
        ]
        assert _posted(server) == [
            ("/api/v1/load", {"model_name": qwen}),
            ("/api/v1/unload", {"model_name": qwen}),
        ]


def test_its_errors_are_said(procs: Procs) -> None:
    # create_model_error (server.cpp v11.7.0) for a model it does not know; router.cpp
    # unload_model's "Model not loaded: NAME" as handle_unload answers it
    unknown = (
        b'{"error":{"code":"model_not_found","message":"Model \'nope\' was not found. ","param":"model"}}'
    )
    routes = {
        "/api/v1/load": [Answer(404, unknown)],
        "/api/v1/unload": [Answer(404, b'{"error":"Model not loaded: nope"}')],
        "/api/v1/health": [_loaded()],
    }
    with _controlled(procs, routes) as (process, _server):
        with pytest.raises(ControlFailed, match=r"load nope: HTTP 404: Model 'nope' was not found"):
            load_model(process, "nope", timeout=10)
        with pytest.raises(ControlFailed, match=r"unload nope: HTTP 404: Model not loaded: nope"):
            unload_model(process, "nope", timeout=10)


def test_its_api_key_is_sent(procs: Procs) -> None:
    # server.cpp: LEMONADE_API_KEY guards every /api/ route, health and load alike
    qwen = "Qwen3-0.6B-GGUF"
    routes = {
        "/api/v1/load": [LOADED],
        "/api/v1/health": [_loaded(_entry(qwen))],
        "/api/v1/models": [models(qwen)],
    }
    with _controlled(procs, routes, LEMONADE_API_KEY="sk-lemon-123") as (process, server):
        assert [m.state for m in load_model(process, qwen, timeout=30).models] == ["loaded"]
        sent = {
            (method, path): {k.lower(): v for k, v in headers.items()}.get("authorization")
            for method, path, headers in server.script.ours
        }
    assert sent[("POST", "/api/v1/load")] == "Bearer sk-lemon-123"
    assert sent[("GET", "/api/v1/health")] == "Bearer sk-lemon-123"


def test_the_models_command_loads(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    qwen = "Qwen3-0.6B-GGUF"
    routes = {
        "/api/v1/load": [LOADED],
        "/api/v1/health": [_loaded(_entry(qwen))],
        "/api/v1/models": [models(qwen)],
    }
    with _controlled(procs, routes) as (process, _server):
        assert cli.main(["models", "load", str(process.pid), qwen]) == 0
        assert f"lemonade pid {process.pid}: {qwen} loaded" in capsys.readouterr().err
        assert cli.main(["models", str(process.pid)]) == 0
        row = capsys.readouterr().out.splitlines()[1].split()
        assert row[:4] == ["lemonade", str(process.pid), qwen, "loaded"]
