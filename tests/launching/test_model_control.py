"""Loading, unloading, sleeping and waking through each engine's own API (issue 40): the requests
the engines' sources take (cited at each), sent to fake servers that a real process with the exact
argv and environment holds the socket of; each call waits until the model list shows it done.
Refusals: no API, a server started without what turns it on, another user's engine, a port the
engine's tree does not hold. Both backends."""

from __future__ import annotations

import json
import os
import pwd
import select
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import enginespec.cli.app as cli
from enginespec import (
    ControlFailed,
    ControlRefused,
    ControlUnsupported,
    EngineProcess,
    InvalidInputError,
    load_model,
    sleep,
    unload_model,
    wake,
)
from enginespec.scanning.scanner import Scanner
from helpers.engineanswers import mlx_vlm_health
from helpers.fakeserver import Answer, FakeEngine, bound_socket, serving
from helpers.procs import Procs, wait_for


def _json(document: object) -> Answer:
    return Answer(200, json.dumps(document).encode())


def _router(*states: tuple[str, str]) -> Answer:
    """llama.cpp router's GET /models (tools/server/server-models.cpp get_router_models)."""
    data = [{"id": name, "object": "model", "status": {"value": value, "args": []}} for name, value in states]
    return _json({"object": "list", "data": data})


@contextmanager
def _engine(
    procs: Procs, argv: list[str], routes: dict[str, list[Answer]], **env: str
) -> Iterator[tuple[EngineProcess, FakeEngine]]:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving(routes, sock=sock, origins=True) as server:
        filled = {name: value.format(port=port) for name, value in env.items()}
        proc = procs.start([a.format(port=port) for a in argv], pass_fds=(sock.fileno(),), **filled)

        def scanned() -> EngineProcess | None:
            return next((p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid), None)

        wait_for(lambda: scanned() is not None, timeout=20)
        process = scanned()
        assert process is not None
        yield process, server


def _posted(server: FakeEngine) -> list[tuple[str, object]]:
    return [
        (path, json.loads(body) if body else None)
        for method, path, body in server.script.bodies
        if method == "POST"
    ]


ROUTER = ["llama-server", "--models-dir", "/m", "--host", "127.0.0.1", "--port", "{port}"]


def test_the_llamacpp_router_loads_and_unloads_a_model(procs: Procs) -> None:
    routes = {
        # router mode's management API: POST /models/load|unload {"model": NAME} -> {"success": true}
        "/models/load": [_json({"success": True})],
        "/models/unload": [_json({"success": True})],
        "/models": [
            _router(("qwen", "loading"), ("phi", "unloaded")),
            _router(("qwen", "loaded"), ("phi", "unloaded")),
            _router(("qwen", "loaded"), ("phi", "unloaded")),
            _router(("qwen", "unloaded"), ("phi", "unloaded")),
        ],
    }
    with _engine(procs, ROUTER, routes) as (process, server):
        loaded = load_model(process, "qwen", timeout=30)
        assert [(m.name, m.state) for m in loaded.models] == [("qwen", "loaded"), ("phi", "unloaded")]
        unloaded = unload_model(process, "qwen", timeout=30)
        assert [(m.name, m.state) for m in unloaded.models] == [("qwen", "unloaded"), ("phi", "unloaded")]
        assert _posted(server) == [("/models/load", {"model": "qwen"}), ("/models/unload", {"model": "qwen"})]


def test_a_state_never_reached_fails_with_the_last_reading(procs: Procs) -> None:
    routes = {"/models/load": [_json({"success": True})], "/models": [_router(("qwen", "loading"))]}
    with (
        _engine(procs, ROUTER, routes) as (process, _server),
        pytest.raises(ControlFailed, match=r"load qwen: not done within 1s \(qwen loading\)") as failed,
    ):
        load_model(process, "qwen", timeout=1)
    assert failed.value.last is not None


def test_a_read_cut_short_at_the_deadline_does_not_hide_what_the_engine_said(procs: Procs) -> None:
    # the first reading answers; every later one hangs until its time is up (a busy host)
    routes = {
        "/models/load": [_json({"success": True})],
        "/models": [_router(("qwen", "loading")), Answer(hang=True)],
    }
    with (
        _engine(procs, ROUTER, routes) as (process, _server),
        pytest.raises(ControlFailed, match=r"load qwen: not done within 1s \(qwen loading\)") as failed,
    ):
        load_model(process, "qwen", timeout=1)
    assert failed.value.last is not None
    assert failed.value.last.available


def test_an_engine_error_is_said(procs: Procs) -> None:
    # Ollama's error answer (server/routes.go: {"error": "..."}), here for a model not pulled
    routes = {"/api/generate": [Answer(404, b'{"error":"model \\"nope\\" not found, try pulling it first"}')]}
    said = r'HTTP 404: model "nope" not found, try pulling it first'
    with (
        _engine(procs, ["ollama", "serve"], routes, OLLAMA_HOST="127.0.0.1:{port}") as (process, _server),
        pytest.raises(ControlFailed, match=said),
    ):
        load_model(process, "nope", timeout=10)


def test_ollama_loads_and_unloads_through_generate(procs: Procs) -> None:
    # a generate request with no prompt loads (done_reason "load"), with keep_alive 0 unloads
    # (v0.32.15 server/routes.go GenerateHandler); /api/ps lists what is loaded
    loaded = {"models": [{"name": "qwen3:latest", "model": "qwen3:latest", "size_vram": 1}]}
    routes = {
        "/api/generate": [
            _json({"model": "qwen3", "done": True, "done_reason": "load"}),
            _json({"model": "qwen3", "done": True, "done_reason": "unload"}),
        ],
        "/api/ps": [_json(loaded), _json({"models": []})],
        "/api/tags": [_json({"models": [{"name": "qwen3:latest"}]})],
    }
    with _engine(procs, ["ollama", "serve"], routes, OLLAMA_HOST="127.0.0.1:{port}") as (process, server):
        assert [(m.name, m.state) for m in load_model(process, "qwen3", timeout=30).models] == [
            ("qwen3:latest", "loaded")
        ]
        assert [(m.name, m.state) for m in unload_model(process, "qwen3", timeout=30).models] == [
            ("qwen3:latest", "unloaded")
        ]
        assert _posted(server) == [
            ("/api/generate", {"model": "qwen3", "stream": False}),
            ("/api/generate", {"model": "qwen3", "keep_alive": 0, "stream": False}),
        ]


VLLM = ["vllm", "serve", "/models/q", "--served-model-name", "qwen", "--port", "{port}"]


def _vllm_routes() -> dict[str, list[Answer]]:
    # vllm/entrypoints/serve/sleep/api_router.py: POST /sleep?level=N and /wake_up answer 200
    # with no body; GET /is_sleeping {"is_sleeping": bool}
    return {
        "/sleep?level=1": [Answer(200, b"")],
        "/wake_up": [Answer(200, b"")],
        "/v1/models": [_json({"object": "list", "data": [{"id": "qwen", "object": "model"}]})],
        "/is_sleeping": [
            _json({"is_sleeping": False}),
            _json({"is_sleeping": True}),
            _json({"is_sleeping": True}),
            _json({"is_sleeping": False}),
        ],
    }


def test_vllm_sleeps_and_wakes_in_dev_mode(procs: Procs) -> None:
    argv = [*VLLM, "--enable-sleep-mode"]
    with _engine(procs, argv, _vllm_routes(), VLLM_SERVER_DEV_MODE="1") as (process, server):
        assert [m.state for m in sleep(process, timeout=30).models] == ["sleeping"]
        assert [m.state for m in wake(process, timeout=30).models] == ["loaded"]
        assert [path for path, _ in _posted(server)] == ["/sleep?level=1", "/wake_up"]


def test_lmdeploy_sleeps_and_wakes_with_json_requests(procs: Procs) -> None:
    # lmdeploy/serve/openai/endpoints/management.py v0.16.0: /sleep?level=N and /wakeup always
    # there, each refusing a request that is not JSON (validate_json_request); /is_sleeping
    routes = _vllm_routes()
    routes["/wakeup"] = routes.pop("/wake_up")
    argv = ["lmdeploy", "serve", "api_server", "/models/q", "--model-name", "qwen", "--server-port", "{port}"]
    with _engine(procs, argv, routes) as (process, server):
        assert process.engine == "lmdeploy"
        assert [m.state for m in sleep(process, timeout=30).models] == ["sleeping"]
        assert [m.state for m in wake(process, timeout=30).models] == ["loaded"]
        assert _posted(server) == [("/sleep?level=1", {}), ("/wakeup", {})]
        kinds = [
            {k.lower(): v for k, v in h.items()}.get("content-type")
            for method, _, h in server.script.seen
            if method == "POST"
        ]
        assert kinds == ["application/json", "application/json"]


def test_aphrodite_sleeps_and_wakes_in_its_own_dev_mode(procs: Procs) -> None:
    # Aphrodite v0.20.0 (a vLLM derivative): the same routes, behind APHRODITE_SERVER_DEV_MODE
    # (aphrodite/entrypoints/serve/sleep/api_router.py attach_router); vLLM's variable is not it
    argv = ["aphrodite", "run", "/models/q", "--served-model-name", "qwen", "--port", "{port}"]
    argv.append("--enable-sleep-mode")
    with _engine(procs, argv, _vllm_routes(), VLLM_SERVER_DEV_MODE="1") as (process, server):
        with pytest.raises(ControlUnsupported, match="without APHRODITE_SERVER_DEV_MODE=1"):
            sleep(process, timeout=5)
        assert _posted(server) == []
    with _engine(procs, argv, _vllm_routes(), APHRODITE_SERVER_DEV_MODE="1") as (process, server):
        assert process.engine == "aphrodite"
        assert [m.state for m in sleep(process, timeout=30).models] == ["sleeping"]
        assert [m.state for m in wake(process, timeout=30).models] == ["loaded"]
        assert [path for path, _ in _posted(server)] == ["/sleep?level=1", "/wake_up"]


def test_mlx_vlm_unloads_only_when_nothing_else_would_go(procs: Procs) -> None:
    """mlx-vlm's POST /unload frees every model it holds (mlx_vlm/server/app.py
    unload_model_endpoint, v0.6.15): sent when the one named is all it holds, refused otherwise."""

    argv = ["mlx_vlm.server", "--port", "{port}"]
    both = mlx_vlm_health(text_generation=("gemma", None), embedding=("bge", None))
    routes = {"/health": [both], "/v1/models": [_json({"object": "list", "data": []})]}
    with _engine(procs, argv, routes) as (process, server):
        with pytest.raises(ControlRefused, match="every model it holds, and 'bge' would go too"):
            unload_model(process, "gemma", timeout=5)
        assert _posted(server) == []
    one = mlx_vlm_health(text_generation=("gemma", None))
    none = mlx_vlm_health(text_generation=(None, None))
    unloaded = _json({"status": "success", "message": "Model unloaded successfully", "unloaded": {}})
    routes = {
        "/health": [one, one, none],
        "/v1/models": [_json({"object": "list", "data": []})],
        "/unload": [unloaded],
    }
    with _engine(procs, argv, routes) as (process, server):
        done = unload_model(process, "gemma", timeout=30)
        assert done.models == ()
        assert _posted(server) == [("/unload", None)]
        with pytest.raises(ControlUnsupported, match="mlx-vlm has no API for it"):
            load_model(process, "gemma", timeout=5)


@pytest.mark.parametrize(
    ("flags", "env", "said"),
    [
        ((), {"VLLM_SERVER_DEV_MODE": "1"}, "the server was started without --enable-sleep-mode"),
        (
            ("--enable-sleep-mode",),
            {},
            "the server was started without VLLM_SERVER_DEV_MODE=1 (VLLM_SERVER_DEV_MODE is unset)",
        ),
        (("--enable-sleep-mode",), {"VLLM_SERVER_DEV_MODE": "0"}, "(VLLM_SERVER_DEV_MODE is '0')"),
    ],
)
def test_vllm_without_sleep_mode_says_what_it_needs(
    procs: Procs, flags: tuple[str, ...], env: dict[str, str], said: str
) -> None:
    with _engine(procs, [*VLLM, *flags], _vllm_routes(), **env) as (process, server):
        with pytest.raises(ControlUnsupported) as refused:
            sleep(process, timeout=5)
        assert said in str(refused.value)
        assert _posted(server) == []  # nothing sent


def test_sglang_releases_and_resumes_its_memory(procs: Procs) -> None:
    # http_server.py release_memory_occupation / resume_memory_occupation (--enable-memory-saver):
    # an empty 200; no request says whether it is released, so the answer is taken
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/m",
        "--enable-memory-saver",
        "--port",
        "{port}",
    ]
    routes = {
        "/release_memory_occupation": [Answer(200, b"")],
        "/resume_memory_occupation": [Answer(200, b"")],
        "/get_model_info": [_json({"model_path": "/models/m", "is_generation": True})],
    }
    with _engine(procs, argv, routes) as (process, server):
        asleep = sleep(process, timeout=10)
        assert [(m.name, m.state) for m in asleep.models] == [("/models/m", "sleeping")]
        assert "the engine reports no such state" in asleep.models[0].reason
        assert [m.state for m in wake(process, timeout=10).models] == ["loaded"]
        assert _posted(server) == [("/release_memory_occupation", {}), ("/resume_memory_occupation", {})]


def test_what_cannot_be_asked_is_refused_before_anything_is_sent(procs: Procs) -> None:
    with _engine(procs, ["llama-server", "-m", "/m/a.gguf", "--port", "{port}"], {}) as (fixed, server):
        with pytest.raises(ControlUnsupported, match="serves the one model its argv names"):
            load_model(fixed, "other", timeout=5)
        assert server.script.bodies == []
    with (
        _engine(procs, ["text-generation-launcher", "--model-id", "org/m", "--port", "{port}"], {}) as (
            tgi,
            _,
        ),
        pytest.raises(ControlUnsupported, match="tgi has no API for it"),
    ):
        sleep(tgi, timeout=5)
    with _engine(procs, ROUTER, {}) as (router, _):
        # `.` and `..` would name another route as a path segment (/v1/models/..)
        for bad in ("", "a\x1b[31m", "x" * 600, ".", ".."):
            with pytest.raises(InvalidInputError):
                load_model(router, bad, timeout=5)


def test_a_port_the_engines_tree_does_not_hold_is_not_sent_to(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/models/load": [_json({"success": True})]}, sock=sock, origins=True) as server:
        liar = procs.start(["llama-server", "--models-dir", "/m", "--host", "127.0.0.1", "--port", str(port)])
        wait_for(lambda: any(p.pid == liar.pid for p in Scanner(listen_ports=False).scan()), timeout=20)
        process = next(p for p in Scanner(listen_ports=False).scan() if p.pid == liar.pid)
        with pytest.raises(ControlRefused):
            load_model(process, "qwen", timeout=5)
        assert server.script.bodies == []


def test_another_users_engine_is_refused(procs: Procs) -> None:
    """Run as `nobody` (a child that drops root), control of root's engine is refused unsent."""
    nobody = pwd.getpwnam("nobody")
    routes = {"/models/load": [_json({"success": True})], "/models": [_router(("qwen", "loaded"))]}
    with _engine(procs, ROUTER, routes) as (process, server):
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                try:
                    load_model(process, "qwen", timeout=5)
                    said = "sent"
                except ControlRefused as refused:
                    said = f"refused: {refused}"
                except BaseException as other:
                    said = f"{type(other).__name__}: {other}"
                os.write(write_end, said.encode()[:4000])
            finally:
                os._exit(0)
        os.close(write_end)
        try:
            ready, _, _ = select.select([read_end], [], [], 60)
            said = os.read(read_end, 4096).decode() if ready else "no answer"
        finally:
            os.close(read_end)
            os.waitpid(child, 0)
        assert said.startswith("refused: "), said
        assert "another user's engine (uid 0): only root or its owner may" in said
        assert server.script.bodies == []


def test_the_models_command_acts(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    routes = {
        "/models/load": [_json({"success": True})],
        "/models": [_router(("qwen", "loaded"))],
    }
    with _engine(procs, ROUTER, routes) as (process, _server):
        assert cli.main(["models", "load", str(process.pid), "qwen"]) == 0
        captured = capsys.readouterr()
        assert f"llamacpp pid {process.pid}: qwen loaded" in captured.err
        assert captured.out.splitlines()[1].split()[:4] == ["llamacpp", str(process.pid), "qwen", "loaded"]
        assert cli.main(["models", "sleep", str(process.pid)]) == 1
        assert "llamacpp has no API for it" in capsys.readouterr().err
        assert cli.main(["models", "load", str(process.pid)]) == 2
        assert "usage: enginespec models load TARGET MODEL" in capsys.readouterr().err
