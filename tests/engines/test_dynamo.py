"""NVIDIA Dynamo (on the active backend): the OpenAI frontend `python -m dynamo.frontend` and its
workers `python -m dynamo.vllm|sglang|trtllm` (followers, not vLLM's own server), look-alikes, the
corpus's labelled records, /health's states and the /live identity probe against loopback servers
answering as Dynamo's source does, and real processes found by a scan."""

from __future__ import annotations

import json
from typing import Any

import pytest

from enginespec import parse_argv
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer
from helpers.procs import Procs
from helpers.simpleservers import engine_process, identify_answering, scanned
from helpers.tabletests import argv_tests, health_test, identity_probe_test

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # examples/backends/vllm/launch/agg.sh and the README's quick start (ai-dynamo/dynamo)
    (["python", "-m", "dynamo.frontend", "--http-port=8000"], ("dynamo", None, None, None, 8000, "server")),
    (
        ["python3", "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", "8787"],
        ("dynamo", None, None, "127.0.0.1", 8787, "server"),
    ),
    (
        ["/opt/dynamo/venv/bin/python", "-m", "dynamo.frontend", "--router-mode", "kv", "--no-interactive"],
        ("dynamo", None, None, None, None, "server"),
    ),
    # a static frontend: the model directory it tokenizes with, the name it serves it under
    (
        ["python", "-m", "dynamo.frontend", "--model-name", "qwen", "--model-path", "/models/qwen"],
        ("dynamo", "/models/qwen", "qwen", None, None, "server"),
    ),
    # workers: docs' quick starts (`--discovery-backend file`), the parsers' README examples
    (
        ["python", "-m", "dynamo.vllm", "--model", "Qwen/Qwen3-0.6B", "--discovery-backend", "file"],
        ("dynamo", "Qwen/Qwen3-0.6B", None, None, None, "follower"),
    ),
    (
        ["python", "-m", "dynamo.sglang", "--model-path", "Qwen/Qwen3-0.6B", "--discovery-backend", "file"],
        ("dynamo", "Qwen/Qwen3-0.6B", None, None, None, "follower"),
    ),
    (
        ["python", "-m", "dynamo.sglang", "--model", "Qwen/Qwen3-0.6B", "--dyn-tool-call-parser", "hermes"],
        ("dynamo", "Qwen/Qwen3-0.6B", None, None, None, "follower"),
    ),
    (
        [
            "python",
            "-m",
            "dynamo.trtllm",
            "--model-path",
            "/model",
            "--served-model-name",
            "openai/gpt-oss-120b",
            "--dyn-reasoning-parser",
            "gpt_oss",
        ],
        ("dynamo", "/model", "openai/gpt-oss-120b", None, None, "follower"),
    ),
    (
        ["python3", "-m", "dynamo.vllm", "--model", "m", "--enforce-eager", "--served-model-name", "s"],
        ("dynamo", "m", "s", None, None, "follower"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    # interactive text chat instead of HTTP (main.py run_input "text")
    ["python", "-m", "dynamo.frontend", "-i"],
    ["python", "-m", "dynamo.frontend", "--interactive"],
    ["python", "-m", "dynamo.frontend", "--no-interactive", "--interactive"],
    ["python", "-m", "dynamo.frontend", "--version"],
    ["python", "-m", "dynamo.vllm", "--help"],
    # other Dynamo modules and look-alikes
    ["python", "-m", "dynamo.planner", "--environment", "kubernetes"],
    ["python", "-m", "dynamo.router", "--endpoint", "dynamo.backend.generate"],
    ["python", "-m", "dynamo.frontend_x"],
    ["python", "-m", "dynamo"],
    ["pip", "install", "ai-dynamo[vllm]"],
    ["tail", "-f", "dynamo.frontend.log"],
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


@pytest.mark.parametrize(
    ("argv", "engine"),
    [
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
        (["python", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
        (["python", "-m", "dynamo.vllm", "--model", "m"], "dynamo"),
        (["python", "-m", "dynamo.sglang", "--model-path", "m"], "dynamo"),
    ],
)
def test_a_dynamo_worker_is_not_the_engine_it_wraps(argv: list[str], engine: str) -> None:
    inv = parse_argv(argv)
    assert inv is not None
    assert inv.engine == engine


def _health_body(status: str, message: str) -> bytes:
    # health.rs health_handler's json! object, serde_json's order (keys sorted)
    return json.dumps(
        {
            "endpoints": ["dyn://dynamo.backend.generate"],
            "initial_discovery_complete": status == "healthy",
            "initial_discovery_error": None,
            "instances": [],
            "message": message,
            "status": status,
        },
        separators=(",", ":"),
    ).encode()


test_health = health_test(
    "dynamo",
    "/health",
    [
        (Answer(200, _health_body("healthy", "Service is healthy")), "ready"),
        (Answer(503, _health_body("not_ready", "Initial model discovery in progress")), "loading"),
        (Answer(503, _health_body("not_ready", "Initial model discovery failed: etcd")), "unhealthy"),
        (Answer(503, _health_body("shutting_down", "Service is shutting down")), "unhealthy"),
        (Answer(200, b"OK", content_type="text/plain"), "unknown"),
        (Answer(200, b"[" * 200_000), "unknown"),
        (Answer(200, b'{"status": ["healthy"]}'), "unknown"),
    ],
)


LIVE = b'{"message":"Service is live","status":"live"}'


test_the_identity_probe = identity_probe_test(
    "dynamo",
    [
        (200, LIVE, True),
        (503, b'{"message":"Service is shutting down","status":"shutting_down"}', False),
        (200, b'{"status":"ok"}', False),
        (404, b"", False),
        (200, b"live", False),
        (200, b"[" * 100_000, False),
        (200, b'{"status": 1}', False),
    ],
    path="/live",
)


def test_identify_tells_dynamo_on_its_port() -> None:
    # vLLM on the same default port answers /live with 404 (no such route)
    routes = {"/live": [Answer(200, LIVE)], "/health": [Answer(200, _health_body("healthy", "x"))]}
    assert identify_answering(routes) == ("dynamo", ("dynamo",))


def test_a_running_frontend_and_worker_are_found_and_checked(procs: Procs) -> None:
    frontend = ["python3", "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", "{port}"]
    worker = ["python3", "-m", "dynamo.vllm", "--model", "Qwen/Qwen3-0.6B", "--discovery-backend", "file"]
    routes = {"/health": [Answer(200, _health_body("healthy", "Service is healthy"))]}
    with engine_process(procs, frontend, routes) as (server, _fake):
        follower = scanned(procs.start(worker).pid)
        assert (server.engine, server.model, server.host, server.role) == (
            "dynamo",
            None,
            "127.0.0.1",
            "server",
        )
        assert check_health(server, timeout=5).state == "ready"
        assert (follower.engine, follower.model, follower.role) == ("dynamo", "Qwen/Qwen3-0.6B", "follower")
        health = check_health(follower, timeout=5)
        assert health.state == "not_serving"


def test_the_frontend_port_from_its_environment(procs: Procs) -> None:
    # frontend_args.py: `--http-port` defaults to DYN_HTTP_PORT (env_or_default)
    proc = procs.start(["python3", "-m", "dynamo.frontend"], DYN_HTTP_PORT="8123", DYN_HTTP_HOST="127.0.0.1")
    process = scanned(proc.pid)
    assert (process.engine, process.host, process.port) == ("dynamo", "127.0.0.1", 8123)
    assert process.sources["port"] == "environment"
