"""mistral.rs (on the active backend): `mistralrs serve` and the older `mistralrs-server`, their
look-alikes and clap usage errors, the corpus's labelled records, the hidden HF token, health,
the identity probe and load metrics against loopback servers answering as mistral.rs does, and a
real process found by a scan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from enginespec import Config, Recipe, get_engine_spec, parse_argv
from enginespec.health.checks import check_health
from enginespec.health.load import check_load
from enginespec.process.argv import redact_argv
from helpers.fakeserver import Answer, serving
from helpers.procs import Procs
from helpers.simpleservers import engine_process
from helpers.tabletests import argv_tests, health_test, identity_probe_test

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # README.md and docs/ at v0.9.2
    (
        ["mistralrs", "serve", "--agent", "-p", "1234", "-m", "Qwen/Qwen3-4B"],
        ("mistralrs", "Qwen/Qwen3-4B", None, None, 1234, "server"),
    ),
    (
        ["mistralrs", "serve", "-p", "1234", "--quant", "4", "-m", "Qwen/Qwen3-4B"],
        ("mistralrs", "Qwen/Qwen3-4B", None, None, 1234, "server"),
    ),
    (
        ["mistralrs", "serve", "multimodal", "-m", "Qwen/Qwen3.5-27B"],
        ("mistralrs", "Qwen/Qwen3.5-27B", None, None, None, "server"),
    ),
    # a model kind after options that take no value (ServerOptions, AgentCliOptions)
    (
        [
            "/usr/local/bin/mistralrs",
            "serve",
            "--no-ui",
            "--host",
            "127.0.0.1",
            "--port=8080",
            "text",
            "-m",
            "m",
        ],
        ("mistralrs", "m", None, "127.0.0.1", 8080, "server"),
    ),
    # `-f` alone: the local GGUF file is the model (FormatOptions::derive_local_model_root)
    (
        ["mistralrs", "serve", "-v", "-f", "/models/q.gguf"],
        ("mistralrs", "/models/q.gguf", None, None, None, "server"),
    ),
    # `--lora` takes several values; a global option after the model kind
    (
        ["mistralrs", "serve", "--lora", "a=org/x", "b=org/y", "-m", "org/base", "--token-source", "none"],
        ("mistralrs", "org/base", None, None, None, "server"),
    ),
    # mistralrs-server (v0.8.4): the repository or directory of `gguf -m` is the model, not `-f`
    (
        ["mistralrs-server", "-p", "1234", "gguf", "-m", "/models/dir", "-f", "q4.gguf"],
        ("mistralrs", "/models/dir", None, None, 1234, "server"),
    ),
    (
        ["./mistralrs-server", "--port", "1234", "--isq", "Q4K", "--no-paged-attn", "plain", "-m", "a/b"],
        ("mistralrs", "a/b", None, None, 1234, "server"),
    ),
    (
        ["mistralrs-server", "--serve-ip", "::1", "--port", "9", "vision-plain", "-m", "v", "-a", "idefics2"],
        ("mistralrs", "v", None, "::1", 9, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    # the CLI's other commands (mistralrs-cli/src/args/mod.rs Command)
    ["mistralrs", "run", "-m", "Qwen/Qwen3-4B"],
    ["mistralrs", "tune", "-m", "Qwen/Qwen3-4B"],
    ["mistralrs", "bench", "-m", "Qwen/Qwen3-4B"],
    ["mistralrs", "doctor"],
    ["mistralrs", "login", "--token", "hf_x"],
    ["mistralrs", "cache", "list"],
    ["mistralrs", "quantize", "-m", "x", "--isq", "4"],
    ["mistralrs", "from-config", "-f", "serve.toml"],
    ["mistralrs"],
    ["mistralrs", "serve", "--help"],
    ["mistralrs", "serve", "-V"],
    # clap usage errors: a second positional
    ["mistralrs", "serve", "text", "multimodal", "-m", "x"],
    # mistralrs-server without --port: interactive or an error (main.rs main)
    ["mistralrs-server", "plain", "-m", "x"],
    ["mistralrs-server", "-i", "plain", "-m", "x"],
    ["mistralrs-server", "--mcp-port", "4321", "plain", "-m", "x"],
    ["mistralrs-server", "--port", "1234", "--interactive-mode", "plain", "-m", "x"],
    ["mistralrs-server", "--port", "1234", "--help"],
    # look-alikes
    ["pip", "install", "mistralrs"],
    ["mistralrs-serve", "-m", "x"],
    ["tail", "-f", "mistralrs-server.log"],
    ["vim", "mistralrs-server"],
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


@pytest.mark.parametrize(
    "argv",
    [
        ["mistralrs", "serve", "--token-source", "literal:hf_SECRETtoken", "-m", "m"],
        ["mistralrs", "serve", "--token-source=literal:hf_SECRETtoken", "-m", "m"],
        ["mistralrs-server", "--port", "1", "--token-source", "literal:hf_SECRETtoken", "plain", "-m", "m"],
    ],
)
def test_a_literal_hf_token_is_hidden(argv: list[str]) -> None:
    inv = parse_argv(argv)
    assert inv is not None
    assert inv.engine == "mistralrs"
    shown = redact_argv(argv)
    assert not any("SECRET" in part for part in shown), shown
    assert "m" in shown


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1"])
def test_commands_parse_back(host: str, tmp_path: Path) -> None:
    recipe = Recipe(engine="mistralrs", model_path="Qwen/Qwen3-4B", host=host, port=7123, max_num_seqs=8)
    argv = get_engine_spec("mistralrs").build_command(recipe, Config(data_dir=tmp_path))
    assert argv[:2] == ["mistralrs", "serve"]
    inv = parse_argv(argv)
    assert inv is not None, argv
    assert (inv.engine, inv.model, inv.host, inv.port, inv.role) == (
        "mistralrs",
        "Qwen/Qwen3-4B",
        host,
        7123,
        "server",
    )


# mistralrs-core/src/diagnostics.rs SystemInfo, as /v1/system/info serialises it (trimmed)
SYSTEM_INFO = (
    b'{"os":"Ubuntu 24.04","kernel":"6.8.0","cpu":{"brand":"x","cores":8},"memory":{"total_bytes":1},'
    b'"devices":[],"build":{"version":"0.9.2","cuda":true,"metal":false},"hf_cache_path":null}'
)
# LM Studio, on the same default port, answers any unknown route with 200 and an error
LMSTUDIO_UNKNOWN = b'{"error":"Unexpected endpoint or method. (GET /v1/system/info). Returning 200 anyway"}'


test_the_identity_probe_tells_mistralrs_from_lm_studio = identity_probe_test(
    "mistralrs",
    [
        (200, SYSTEM_INFO, True),
        (200, LMSTUDIO_UNKNOWN, False),
        (404, b"", False),
        (200, b"not json at all", False),
        (200, b"[" * 100_000, False),
        (200, b'{"hf_cache_path_x": 1}' * 50_000, False),
        (500, SYSTEM_INFO, False),
    ],
    path="/v1/system/info",
)


test_health = health_test(
    "mistralrs",
    "/health",
    [
        # handlers.rs health: 200 "OK"
        (Answer(200, b"OK", content_type="text/plain"), "ready"),
        (Answer(503, b""), "unhealthy"),
        (Answer(200, b"[" * 200_000), "ready"),
    ],
)


METRICS = b"""# TYPE mistralrs_sequences_running gauge
mistralrs_sequences_running 3
# TYPE mistralrs_sequences_waiting gauge
mistralrs_sequences_waiting 2
# TYPE mistralrs_tokens_processed_total counter
mistralrs_tokens_processed_total 4096
# TYPE http_requests_total counter
http_requests_total{method="POST",path="/v1/chat/completions",status="200"} 7
"""


def test_load_is_read_from_its_prometheus_metrics() -> None:
    with serving({"/metrics": [Answer(200, METRICS, content_type="text/plain; version=0.0.4")]}) as server:
        load = check_load("mistralrs", server.url, timeout=10)
    assert load.available, load
    assert (load.requests_running, load.requests_waiting) == (3, 2)
    assert (load.prompt_tokens_total, load.generated_tokens_total) == (None, None)


@pytest.mark.parametrize("body", [b"garbage \x00\xff", b"mistralrs_sequences_running nope\n" * 10_000])
def test_hostile_metrics_never_crash(body: bytes) -> None:
    with serving({"/metrics": [Answer(200, body)]}) as server:
        load = check_load("mistralrs", server.url, timeout=10)
    assert load.requests_running is None


def test_a_running_mistralrs_serve_is_found_and_checked(procs: Procs) -> None:
    argv = ["mistralrs", "serve", "-p", "{port}", "--host", "127.0.0.1", "-m", "google/gemma-4-E4B-it"]
    with engine_process(procs, argv, {"/health": [Answer(200, b"OK")]}) as (process, _server):
        assert (process.engine, process.model, process.role) == (
            "mistralrs",
            "google/gemma-4-E4B-it",
            "server",
        )
        assert check_health(process, timeout=5).state == "ready"
