"""oMLX (on the active backend): `omlx serve` (console script and module), the retitled
`omlx-server`, its clients and argparse usage errors, the corpus's records (`brew services start omlx`
is not a server), the hidden API key, /health and the /v1/models/status identity probe against
loopback servers, and a real process (port from OMLX_PORT) found by a scan."""

from __future__ import annotations

from typing import Any

import pytest

from enginespec import parse_argv
from enginespec.health.checks import check_health
from enginespec.process.argv import redact_argv
from helpers.fakeserver import Answer
from helpers.procs import Procs
from helpers.simpleservers import engine_process, identify_answering
from helpers.tabletests import argv_tests, health_test, identity_probe_test

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # omlx/cli.py's docstring and help (jundot/omlx 01496518)
    (
        ["omlx", "serve", "--model-dir", "/path/to/models", "--max-model-memory", "32GB"],
        ("omlx", None, None, None, None, "server"),
    ),
    (
        ["/opt/homebrew/bin/omlx", "serve", "--host", "0.0.0.0", "--port", "8080", "--no-cache"],
        ("omlx", None, None, "0.0.0.0", 8080, "server"),
    ),
    (["omlx", "serve", "--port=9000", "--log-level", "debug"], ("omlx", None, None, None, 9000, "server")),
    (["python3", "-m", "omlx.cli", "serve", "--port", "8001"], ("omlx", None, None, None, 8001, "server")),
    # setproctitle: the title alone
    (["omlx-server"], ("omlx", None, None, None, None, "server")),
]

NOT_SERVERS: list[list[str]] = [
    ["brew", "services", "start", "omlx"],
    ["omlx"],
    ["omlx", "launch", "codex", "--model", "qwen3.5"],
    ["omlx", "launch", "list"],
    ["omlx", "diagnose", "menubar"],
    ["omlx", "serve", "--help"],
    # serve takes no positional argument (the epilog's example is a usage error)
    ["omlx", "serve", "mlx-community/Llama-3.2-3B-Instruct-4bit", "--port", "8000"],
    ["pip", "install", "omlx"],
    ["omlx-serve"],
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


@pytest.mark.parametrize(
    "argv",
    [
        ["omlx", "serve", "--api-key", "sk-SECRETkey"],
        ["omlx", "serve", "--api-key=sk-SECRETkey"],
        ["omlx", "serve", "--api-k", "sk-SECRETkey"],  # argparse abbreviation
    ],
)
def test_the_api_key_is_hidden(argv: list[str]) -> None:
    assert parse_argv(argv) is not None
    assert not any("SECRET" in part for part in redact_argv(argv))


test_health = health_test(
    "omlx",
    "/health",
    [
        (Answer(200, b'{"status":"healthy"}'), "ready"),
        (Answer(503, b""), "unhealthy"),
        (Answer(200, b"[" * 200_000), "ready"),
    ],
)


MODELS_STATUS = (
    b'{"models":[{"id":"qwen-7b","max_context_window":32768,"max_tokens":8192,"model_type":"llm"}]}'
)


test_the_identity_probe = identity_probe_test(
    "omlx",
    [
        (200, MODELS_STATUS, True),
        (200, b'{"models":[]}', True),
        (404, b'{"detail":"Not Found"}', False),  # vLLM's FastAPI on the same port
        (401, b"", False),
        (200, b"[" * 100_000, False),
    ],
)


def test_identify_tells_omlx() -> None:
    routes = {"/v1/models/status": [Answer(200, MODELS_STATUS)], "/health": [Answer(200, b"{}")]}
    assert identify_answering(routes) == ("omlx", ("omlx",))


def test_a_running_omlx_serve_is_found_on_its_environment_port(procs: Procs) -> None:
    argv = ["omlx", "serve", "--model-dir", "/srv/models"]
    routes = {"/health": [Answer(200, b'{"status":"healthy"}')]}
    with engine_process(procs, argv, routes, OMLX_PORT="{port}") as (process, _server):
        assert (process.engine, process.model, process.role) == ("omlx", None, "server")
        assert process.sources["port"] == "environment"
        assert check_health(process, timeout=5).state == "ready"
