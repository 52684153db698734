"""Health and readiness against real HTTP servers on 127.0.0.1 (and a unix socket)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from enginespec import (
    EngineProcess,
    EngineSpec,
    HealthRule,
    Scanner,
    Serving,
    all_engine_specs,
    get_engine_spec,
)
from enginespec.health.checks import (
    EngineExited,
    NotReady,
    check_all,
    check_all_async,
    check_health,
    check_health_async,
    wait_ready,
)
from helpers.cli import run
from helpers.fakeserver import Answer, FakeEngine, bound_socket, free_port, models, serving
from helpers.procs import Procs, wait_for

LOADING = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
OK = b'{"status":"ok"}'


def _scanned(procs: Procs, argv: list[str], sock: socket.socket | None = None, **env: str) -> EngineProcess:
    """The scanned engine process for argv; ``sock``: the server socket it holds (see
    fakeserver.bound_socket), as a real engine holds the socket it answers on."""
    proc = procs.start(argv, pass_fds=(sock.fileno(),) if sock is not None else (), **env)
    return next(p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid)


def _me(engine: str, url: str, model: str = "m", served: tuple[str, ...] = ()) -> EngineProcess:
    """An EngineProcess for this (live) test process, pointed at a fake server."""
    return EngineProcess(
        pid=os.getpid(),
        start_time=psutil.Process().create_time(),
        ppid=os.getppid(),
        engine=engine,
        model=model,
        served_model_names=served,
        host="127.0.0.1",
        port=None,
        effective_host="127.0.0.1",
        effective_port=0,
        base_url=url,
        argv=(),
        exe=None,
        worker_pids=(),
        supervisor=None,
        listen_ports=(),
    )


@pytest.mark.parametrize(
    ("engine", "routes", "state"),
    [
        ("vllm", {"/health": [Answer(200, b"")]}, "ready"),
        ("vllm", {"/health": [Answer(503, b"")]}, "unhealthy"),
        ("sglang", {"/health": [Answer(503, b"")]}, "starting"),
        ("sglang", {"/health": [Answer(200, b"")]}, "ready"),
        ("llamacpp", {"/health": [Answer(503, LOADING)]}, "loading"),
        # older llama-server builds, which Ollama's runners still answer like
        ("llamacpp", {"/health": [Answer(503, b'{"status":"loading model"}')]}, "loading"),
        ("ollama", {"/": [Answer(200, b"Ollama is running")]}, "ready"),
        ("ollama", {"/": [Answer(200, b'{"status":"ok"}')]}, "ready"),
        ("ollama", {"/": [Answer(503, LOADING)]}, "loading"),
        ("ollama", {"/": [Answer(200, b"Ollama is not running")]}, "unknown"),
        ("llamacpp", {"/health": [Answer(200, OK)]}, "ready"),
        ("llamacpp", {"/health": [Answer(200, b"<html>garbage")]}, "unknown"),
        ("llamacpp", {"/health": [Answer(500, b"")]}, "unknown"),
        ("mlx", {"/health": [Answer(200, OK)], "/v1/models": [models("mlx/m")]}, "ready"),
        # mlx-lm 0.32: /health is 200 from the start (requests wait for the load); /v1/models lists
        # the Hugging Face cache and says nothing about readiness
        ("mlx", {"/health": [Answer(200, OK)], "/v1/models": [Answer(200, b"")]}, "ready"),
        ("mlx", {"/health": [Answer(503, b'{"status":"unavailable"}')]}, "unhealthy"),
        ("vllm", {"/health": [Answer(200, b"", close_mid_response=True)]}, "unknown"),
    ],
)
def test_states_by_engine(engine: str, routes: dict[str, list[Answer]], state: str) -> None:
    with serving(routes) as server:
        health = check_health(engine, server.url, timeout=2)
    assert health.state == state, health
    assert health.engine == engine


def test_nothing_listening_is_down_for_a_url_and_starting_for_a_live_process(procs: Procs) -> None:
    port = free_port()
    assert check_health("vllm", f"http://127.0.0.1:{port}").state == "down"
    proc = _scanned(procs, ["vllm", "serve", "m", "--port", str(port)])
    assert check_health(proc).state == "starting"
    procs.stop_all()
    down = check_health(proc)
    assert (down.state, down.reason) == ("down", "process is gone")


def test_start_up_sequence_refused_then_503_then_200(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    proc = _scanned(
        procs, ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)], sock
    )
    assert check_health(proc).state == "starting"
    # origins: another watcher on the host asking this engine must not use up the script
    with serving({"/health": [Answer(503), Answer(503), Answer(200)]}, sock=sock, origins=True):
        states = [check_health(proc).state for _ in range(3)]
    assert states == ["starting", "starting", "ready"]


def test_slow_and_hung_answers() -> None:
    with serving({"/health": [Answer(200, OK, delay=0.3)]}) as server:
        slow = check_health("llamacpp", server.url, timeout=2)
    assert slow.state == "ready"
    assert slow.latency is not None
    assert slow.latency >= 0.3
    with serving({"/health": [Answer(hang=True)]}) as server:
        started = time.monotonic()
        hung = check_health("llamacpp", server.url, timeout=0.5)
        assert time.monotonic() - started < 5
    assert hung.state == "unhealthy"
    assert "within 0.5s" in hung.reason


def test_a_trickling_server_cannot_stall_either_check() -> None:
    # 40 bytes, one every 0.25 s: each read is within the 0.5 s timeout, the whole answer is not.
    trickling = Answer(200, b'{"status": "ok", "padding": "xxxxxxxxx"}', trickle=0.25)
    for check in (check_health, lambda *a, **k: asyncio.run(check_health_async(*a, **k))):
        with serving({"/health": [trickling]}) as server:
            started = time.monotonic()
            result = check("llamacpp", server.url, timeout=0.5)
            assert time.monotonic() - started < 40 * 0.25  # it gave up before the answer was whole
        assert result.state == "unhealthy"
        assert "within 0.5s" in result.reason


def test_identity_is_verified_through_v1_models() -> None:
    routes = {"/health": [Answer(200)], "/v1/models": [models("other-model")]}
    with serving(routes) as server:
        wrong = check_health(_me("vllm", server.url, served=("mine",)), verify_identity=True)
        loose = check_health(_me("vllm", server.url, served=("mine",)))
    assert wrong.state == "unhealthy"
    assert wrong.reason == "serves other-model, expected mine"
    assert wrong.model_ids == ("other-model",)
    assert loose.state == "ready"
    with serving({"/health": [Answer(200)], "/v1/models": [models("a", "mine")]}) as server:
        right = check_health(_me("vllm", server.url, served=("mine",)), verify_identity=True)
    assert (right.state, right.model_ids) == ("ready", ("a", "mine"))
    with serving({"/health": [Answer(200)], "/v1/models": [Answer(200, b"not json")]}) as server:
        garbage = check_health(_me("vllm", server.url, served=("mine",)), verify_identity=True)
    assert garbage.state == "unknown"


def test_api_key_from_argv_and_environment_is_used_and_never_shown(procs: Procs) -> None:
    routes = {"/health": [Answer(200)], "/v1/models": [models("m")]}
    sock = bound_socket()
    with serving(routes, sock=sock, origins=True) as server:
        proc = _scanned(
            procs, ["vllm", "serve", "m", "--port", str(server.port), "--api-key", "sk-from-argv"], sock
        )
        health = check_health(proc, verify_identity=True)
        env_proc = _scanned(
            procs, ["vllm", "serve", "m", "--port", str(server.port)], sock, VLLM_API_KEY="sk-from-env"
        )
        check_health(env_proc, verify_identity=True)
    assert health.state == "ready"
    sent = [
        headers.get("Authorization") for method, path, headers in server.script.ours if path == "/v1/models"
    ]  # ours: a root watcher elsewhere on the host may ask this engine with the same key
    assert sent == ["Bearer sk-from-argv", "Bearer sk-from-env"]
    assert "sk-from-argv" not in proc.model_dump_json()
    assert "sk-from-argv" not in repr(proc)
    assert "sk-from" not in health.model_dump_json()


def test_deep_check_asks_for_one_token() -> None:
    routes = {
        "/health": [Answer(200)],
        "/v1/models": [models("mlx/m")],
        "/v1/completions": [Answer(200, b"{}")],
    }
    with serving(routes) as server:
        assert check_health("mlx", server.url, deep=True).state == "ready"
    assert server.script.seen[-1][:2] == ("POST", "/v1/completions")
    routes["/v1/completions"] = [Answer(500, b"{}")]
    with serving(routes) as server:
        assert check_health("mlx", server.url, deep=True).state == "unhealthy"


def test_unix_socket_servers(procs: Procs, tmp_path: Path) -> None:
    path = str(tmp_path / "llama.sock")
    with serving({"/health": [Answer(200, OK)]}, unix_path=path) as server:
        assert check_health("llamacpp", server.url).state == "ready"
        # The process holds the listening socket (as a server that made it does).
        held = server.server.socket  # type: ignore[attr-defined]
        proc = _scanned(procs, ["llama-server", "-m", "m", "--host", path], held)
        assert proc.base_url == server.url
        assert check_health(proc).state == "ready"
        # One that only names the socket gets nothing sent to it.
        seen = len(server.script.seen)
        stranger = _scanned(procs, ["llama-server", "-m", "m2", "--host", path])
        health = check_health(stranger)
        assert health.state == "starting"
        assert health.reason == f"process is up, holds no listening socket at {path}: not contacted"
        assert len(server.script.seen) == seen
    uds = str(tmp_path / "vllm.sock")
    with serving({"/health": [Answer(200)]}, unix_path=uds) as server:
        held = server.server.socket  # type: ignore[attr-defined]
        proc = _scanned(procs, ["vllm", "serve", "m", "--uds", uds], held)
        assert proc.base_url == server.url
        assert check_health(proc).state == "ready"


def _ruled(*rules: HealthRule) -> EngineSpec:
    return get_engine_spec("vllm").model_copy(update={"serving": Serving(health_rules=rules)})


def test_health_rules_are_read_in_order_and_the_first_that_matches_gives_the_state() -> None:
    spec = _ruled(
        HealthRule(status=200, field="status", equals="ok", state="ready", reason="said ok"),
        HealthRule(status=200, field="status", contains="load", state="loading", reason="a load"),
        HealthRule(status=503, equals="Warming up", state="starting", reason="warm"),
        HealthRule(status=503, contains="shard", state="unhealthy", reason="a shard"),
        HealthRule(status=200, field="status", equals="ok", state="unknown", reason="never reached"),
        HealthRule(status=429, state="busy", reason="any 429"),
    )
    answers = {
        (200, b'{"status": "ok"}'): ("ready", "said ok"),
        (200, b'{"status": "loading the model"}'): ("loading", "a load"),
        # a member that is no string, a body that is no JSON object: no field rule matches
        (200, b'{"status": ["ok"]}'): ("ready", ""),
        (200, b'["status", "ok"]'): ("ready", ""),
        (200, b"\xff\xfe not UTF-8"): ("ready", ""),
        (503, b"  Warming up\n"): ("starting", "warm"),
        (503, b"Warming up, please wait"): ("unhealthy", "HTTP 503"),
        (503, b'{"error": "a shard died"}'): ("unhealthy", "a shard"),
        (429, b""): ("busy", "any 429"),
        (500, b'{"status": "ok"}'): ("unknown", "unexpected HTTP 500"),
    }
    for (status, body), expected in answers.items():
        assert spec.classify_health(status, body) == expected, (status, body)


def test_a_health_rule_that_cannot_be_read_one_way_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="equals and contains"):
        HealthRule(status=200, equals="a", contains="b", state="ready")
    with pytest.raises(ValidationError, match="field: 'status' needs equals, contains or flag"):
        HealthRule(status=200, field="status", state="ready")
    with pytest.raises(ValidationError, match="status"):
        HealthRule(status=42, state="ready")
    with pytest.raises(ValidationError, match="state"):
        HealthRule(status=200, state="fine")  # type: ignore[arg-type]


def test_only_engines_whose_answers_need_more_than_rules_have_a_health_hook() -> None:
    """Health is data (``Serving.health_rules``) but where an answer needs real logic: a count
    in the reason (TabbyAPI), two members together (KoboldCpp), a member's JSON type
    (llama-cpp-python's model list)."""
    hooked = {
        spec.id for spec in all_engine_specs() if type(spec).classify_health is not EngineSpec.classify_health
    }
    assert hooked == {"tabbyapi", "koboldcpp", "llamacpp-python"}


def test_spec_health_url() -> None:
    spec = get_engine_spec("llamacpp")
    assert spec.health_url("0.0.0.0", 8080) == "http://127.0.0.1:8080/health"
    assert spec.health_url("::", 8080) == "http://[::1]:8080/health"
    assert spec.health_url("fd00::5", 1) == "http://[fd00::5]:1/health"
    assert spec.health_url("", 2) == "http://127.0.0.1:2/health"
    assert spec.health_url("/run/llama.sock", 0) == "http+unix://%2Frun%2Fllama.sock/health"


def test_bad_targets_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="base_url: needed"):
        check_health("vllm")
    with pytest.raises(ValueError, match="must start with http"):
        check_health("vllm", "127.0.0.1:8000")
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        check_health("nope", "http://127.0.0.1:1")


def test_async_twin() -> None:
    with serving({"/health": [Answer(503, LOADING), Answer(200, OK)]}) as server:
        first = asyncio.run(check_health_async("llamacpp", server.url))
        second = asyncio.run(check_health_async("llamacpp", server.url))
    assert (first.state, second.state) == ("loading", "ready")


def test_wait_ready_after_a_delay() -> None:
    with serving({"/health": [Answer(503, LOADING)] * 4 + [Answer(200, OK)]}) as server:
        health = wait_ready("llamacpp", server.url, timeout=10, poll=0.05)
    assert health.state == "ready"


def test_wait_ready_never_ready_times_out() -> None:
    with serving({"/health": [Answer(503, LOADING)]}) as server:
        started = time.monotonic()
        with pytest.raises(NotReady, match=r"not ready after 0\.6s") as info:
            wait_ready("llamacpp", server.url, timeout=0.6, poll=0.05)
    assert info.value.last is not None
    assert info.value.last.state == "loading"
    assert time.monotonic() - started < 3


def test_wait_ready_fails_fast_when_the_process_exits(procs: Procs) -> None:
    port = free_port()
    popen = procs.start(["vllm", "serve", "m", "--port", str(port)])
    proc = next(p for p in Scanner(listen_ports=False).scan() if p.pid == popen.pid)
    threading.Timer(0.4, popen.kill).start()
    started = time.monotonic()
    with pytest.raises(EngineExited, match="status -9") as info:
        wait_ready(proc, timeout=30, poll=0.05, process=popen)
    assert info.value.returncode == -9
    assert time.monotonic() - started < 5


def test_stall_timeout_resets_while_loading_progresses() -> None:
    # The body changes on every poll (a loading server reporting progress): never a stall.
    # (a stall timeout of many polls: on a loaded host one poll can take a second)
    steps = [Answer(503, LOADING[:-1] + f',"progress":{i}}}'.encode()) for i in range(12)]
    with serving({"/health": [*steps, Answer(200, OK)]}) as server:
        health = wait_ready("llamacpp", server.url, timeout=60, poll=0.1, stall_timeout=3)
    assert health.state == "ready"
    with (
        serving({"/health": [Answer(503, LOADING)]}) as server,
        pytest.raises(NotReady, match=r"no progress for 3s"),
    ):
        wait_ready("llamacpp", server.url, timeout=60, poll=0.1, stall_timeout=3)


def test_check_all_fifty_servers_ten_hung() -> None:
    # The 40 answering servers answer only once all 40 requests are in flight together, so they
    # are ready only if the checks run concurrently and the 10 hung ones stall none of them.
    together = threading.Barrier(40)
    servers = [
        FakeEngine({"/health": [Answer(hang=True)] if i % 5 == 0 else [Answer(200, OK, barrier=together)]})
        for i in range(50)
    ]
    try:
        processes = [_me("llamacpp", s.url) for s in servers]
        results = check_all(processes, timeout=5.0)
        assert [r.state for r in results].count("ready") == 40
        assert [r.state for r in results].count("unhealthy") == 10
        assert [r.base_url for r in results] == [s.url for s in servers]
        together.reset()
        results = asyncio.run(check_all_async(processes, timeout=5.0, concurrency=50))
        assert [r.state for r in results].count("ready") == 40
    finally:
        for server in servers:
            server.close()


def test_cli_health(procs: Procs) -> None:
    sock = bound_socket()
    with serving({"/health": [Answer(200, OK)]}, sock=sock) as server:
        out = run("health", "llamacpp", server.url)
        assert (out.returncode, out.stdout.split()[2]) == (0, "ready"), out.stderr
        proc = procs.start(["llama-server", "-m", "m", "--port", str(server.port)], pass_fds=(sock.fileno(),))
        assert run("health", str(proc.pid)).returncode == 0
        data = json.loads(run("health", str(proc.pid), "--json").stdout)
        assert data["state"] == "ready"
    with serving({"/health": [Answer(503, LOADING)]}) as server:
        out = run("health", "llamacpp", server.url)
        assert out.returncode == 1
        assert "loading" in out.stdout
    for bad in (["nope", "http://x"], ["vllm"], ["999999999"], ["vllm", "ftp://x"]):
        out = run("health", *bad)
        assert out.returncode == 2, bad
        assert out.stderr.count("\n") == 1


def test_identity_of_a_relative_model_path_is_resolved_against_the_process(
    helper: Path, tmp_path: Path
) -> None:
    # mlx_lm.server lists the model by its absolute path
    for listed, state in ((str(tmp_path / "tiny" / "hf"), "ready"), ("/elsewhere/tiny/hf", "unhealthy")):
        sock = bound_socket()
        engine = subprocess.Popen(
            ["mlx_lm.server", "--model", "tiny/hf", "--port", str(sock.getsockname()[1])],
            executable=helper,
            cwd=tmp_path,
            pass_fds=(sock.fileno(),),
        )
        try:
            cmdline = Path(f"/proc/{engine.pid}/cmdline")
            wait_for(lambda: cmdline.read_bytes() != b"")  # noqa: B023 (called in this iteration)
            proc = next(p for p in Scanner().scan() if p.pid == engine.pid)
            with serving({"/health": [Answer(200, OK)], "/v1/models": [models(listed)]}, sock=sock):
                health = check_health(proc, verify_identity=True)
            assert health.state == state, health.reason
        finally:
            engine.kill()
            engine.wait()


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "body",
    [DEEP, b'{"data":[{"id":"m","n":1e400}]}', b'{"data":[{"id":"m","n":NaN}]}', b'{"data":[{"id":1}]}'],
    ids=["deep", "infinite", "nan", "id-not-a-name"],
)
def test_a_model_list_no_reader_may_take_is_unreadable(body: bytes) -> None:
    """/v1/models nested 100,000 deep raised RecursionError out of the check (and `ps`, `watch`,
    the exporter); a non-finite number, or an id that is no name, is no list of served models."""
    routes = {"/health": [Answer(200, b'{"status":"ok"}')], "/v1/models": [Answer(200, body)]}
    with serving(routes) as server:
        health = check_health("llamacpp", server.url, verify_identity=True)
    assert (health.state, health.reason) == ("unknown", "/v1/models unreadable (HTTP 200)"), health


def test_a_health_body_nested_100000_deep_is_an_unexpected_body() -> None:
    with serving({"/health": [Answer(200, DEEP)]}) as server:
        health = check_health("llamacpp", server.url)
    assert (health.state, health.reason) == ("unknown", "unexpected /health body"), health
