"""FastFlowLM (on the active backend): `flm serve [MODEL]` and its other commands (clients that exit),
Boost's usage errors, /health and the /api/npu/status identity probe against loopback servers
answering as FastFlowLM's source does, and a real process (port from FLM_SERVE_PORT) found by a
scan."""

from __future__ import annotations

from typing import Any

from enginespec.health.checks import check_health
from helpers.fakeserver import Answer
from helpers.procs import Procs
from helpers.simpleservers import engine_process, identify_answering
from helpers.tabletests import argv_tests, health_test, identity_probe_test

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # FastFlowLM/FastFlowLM: its CLI guide (instructions/cli.md of its docs site) and vm_args.hpp
    # print_help's examples
    (["flm", "serve", "llama3.2:1b"], ("fastflowlm", "llama3.2:1b", None, None, None, "server")),
    (["flm", "serve"], ("fastflowlm", None, None, None, None, "server")),
    (
        ["flm", "serve", "llama3.2:1b", "--port", "8000"],
        ("fastflowlm", "llama3.2:1b", None, None, 8000, "server"),
    ),
    (
        ["flm", "serve", "llama3.2:1b", "-p", "8000"],
        ("fastflowlm", "llama3.2:1b", None, None, 8000, "server"),
    ),
    (
        ["flm", "serve", "llama3.2:1b", "--host", "0.0.0.0"],
        ("fastflowlm", "llama3.2:1b", None, "0.0.0.0", None, "server"),
    ),
    (
        ["flm", "serve", "gemma3:4b", "--pmode", "balanced"],
        ("fastflowlm", "gemma3:4b", None, None, None, "server"),
    ),
    (["flm", "serve", "gemma3:4b", "--asr", "1"], ("fastflowlm", "gemma3:4b", None, None, None, "server")),
    (["flm", "serve", "--cors", "0"], ("fastflowlm", None, None, None, None, "server")),
    (
        ["flm", "serve", "FastFlowLM/Qwen3.5-0.8B-NPU2", "--hf"],
        ("fastflowlm", "FastFlowLM/Qwen3.5-0.8B-NPU2", None, None, None, "server"),
    ),
    # a value-less switch before the model; options before the model
    (
        ["/usr/bin/flm", "serve", "--quiet", "qwen3:4b", "--ctx-len", "8192"],
        ("fastflowlm", "qwen3:4b", None, None, None, "server"),
    ),
    (
        ["flm", "serve", "-c", "8192", "--port=52626", "llama3.2:3b"],
        ("fastflowlm", "llama3.2:3b", None, None, 52626, "server"),
    ),
    # Lemonade's FastFlowLM backend starts `flm serve MODEL --port P ...` (its runner: told by
    # the parent, Serving.starts_runners of the lemonade engine)
    (
        ["flm", "serve", "qwen3:4b", "--ctx-len", "32768", "--port", "8001", "-s", "32", "-q", "32"],
        ("fastflowlm", "qwen3:4b", None, None, 8001, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    # the other commands (main.cpp main, vm_args.hpp print_help)
    ["flm", "run", "llama3.2:1b"],
    ["flm", "pull", "llama3.2:3b", "--force"],
    ["flm", "list", "--filter", "installed", "--quiet"],
    ["flm", "validate", "--json"],
    ["flm", "remove", "llama3.2:3b"],
    ["flm", "check", "llama3.2:3b"],
    ["flm", "bench", "llama3.2:1b"],
    ["flm", "port"],
    ["flm", "version"],
    ["flm", "help"],
    ["flm"],
    ["flm", "serve", "--help"],
    ["flm", "serve", "-v"],
    # Boost: too many positional options
    ["flm", "serve", "llama3.2:1b", "extra"],
    # look-alikes
    ["flm-serve", "llama3.2:1b"],
    ["sudo", "apt", "install", "fastflowlm"],
    ["tail", "-f", "flm.log"],
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


test_health = health_test(
    "fastflowlm",
    "/health",
    [
        (Answer(200, b'{"status":"ok"}'), "ready"),
        (Answer(503, b""), "unhealthy"),
        (Answer(200, b"OK", content_type="text/plain"), "unknown"),
        (Answer(200, b"[" * 200_000), "unknown"),
        (Answer(200, b'{"status": true}'), "unknown"),
    ],
)


NPU_STATUS = b'{"active_requests":0,"message":"NPU is available","npu_available":true}'


test_the_identity_probe = identity_probe_test(
    "fastflowlm",
    [
        (200, NPU_STATUS, True),
        (200, b'{"active_requests":1,"message":"NPU is currently in use","npu_available":false}', True),
        (404, b"", False),
        (200, b'{"version":"0.9.24"}', False),
        (200, b"[" * 100_000, False),
    ],
)


def test_identify_tells_fastflowlm_from_ollama_look_alike_routes() -> None:
    routes = {
        "/api/npu/status": [Answer(200, NPU_STATUS)],
        "/api/version": [Answer(200, b'{"version":"0.9.24"}')],
        "/health": [Answer(200, b'{"status":"ok"}')],
    }
    assert identify_answering(routes) == ("fastflowlm", ("fastflowlm",))


def test_a_running_flm_serve_is_found_on_its_environment_port(procs: Procs) -> None:
    argv = ["flm", "serve", "qwen3:4b", "--pmode", "balanced"]
    routes = {"/health": [Answer(200, b'{"status":"ok"}')]}
    with engine_process(procs, argv, routes, FLM_SERVE_PORT="{port}") as (process, _server):
        assert (process.engine, process.model, process.role) == ("fastflowlm", "qwen3:4b", "server")
        assert process.sources["port"] == "environment"
        assert check_health(process, timeout=5).state == "ready"
