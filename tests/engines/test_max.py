"""Modular MAX (``max serve``, on the active backend): its launch forms, facts and defaults, its
other commands (not servers), `--headless` (a follower), the 2026 corpus's record, and a real
process with its exact argv holding the socket a fake MAX answers on (health, /v1/models, identity
against vLLM on 8000, hostile answers). Facts: modular/modular at the commits engines/max.py names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from enginespec import Config, Recipe, get_engine_spec, parse_argv, served_models
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer, models, serving
from helpers.procs import Procs
from helpers.simpleservers import engine_process, identified, scanned
from helpers.tabletests import argv_tests

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # MAX's docs (max serve reference) and public code search: READMEs, a lm-eval how-to, a script
    (
        [
            "max",
            "serve",
            "--model",
            "google/gemma-3-12b-it",
            "--custom-architectures",
            "path/to/module1:module1",
            "--custom-architectures",
            "path/to/module2:module2",
        ],
        ("max", "google/gemma-3-12b-it", None, None, None, "server"),
    ),
    (["max", "serve", "--model-path", "Qwen/Qwen3-8B"], ("max", "Qwen/Qwen3-8B", None, None, None, "server")),
    (
        ["max", "serve", "--model-path=modularai/Llama-3.1-8B-Instruct-GGUF"],
        ("max", "modularai/Llama-3.1-8B-Instruct-GGUF", None, None, None, "server"),
    ),
    (["max", "serve", "--model-path=./model", "--port=8080"], ("max", "./model", None, None, 8080, "server")),
    (
        ["max", "serve", "--model-path", "m", "--enable-prefix-caching"],
        ("max", "m", None, None, None, "server"),
    ),
    (
        ["max-pipelines", "serve", "--model-path", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"],
        ("max", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", None, None, None, "server"),
    ),
    # a venv's console script under its interpreter; the module form; a served name
    (
        [
            "/opt/venv/bin/python3",
            "/opt/venv/bin/max",
            "serve",
            "--model-path",
            "m",
            "--served-model-name",
            "llama",
        ],
        ("max", "m", "llama", None, None, "server"),
    ),
    (
        ["python", "-m", "max.entrypoints.pipelines", "serve", "--model", "m", "--port", "8100"],
        ("max", "m", None, None, 8100, "server"),
    ),
    # bool config fields are --x/--no-x pairs; --headless serves no HTTP API
    (
        ["max", "serve", "--no-enable-prefix-caching", "--model-path", "m"],
        ("max", "m", None, None, None, "server"),
    ),
    (["max", "serve", "--headless", "--model-path", "m"], ("max", "m", None, None, None, "follower")),
]

NOT_SERVERS: list[list[str]] = [
    ["max", "--version"],
    ["max", "serve", "--help"],
    ["max", "generate", "--model-path", "m", "--prompt", "hi"],
    ["max", "encode", "--model-path", "m"],
    ["max", "warm-cache", "--model-path", "m"],
    ["max", "list", "--json"],
    ["max", "benchmark", "--model", "m", "--backend", "modular"],
    ["max", "diffusion", "generate", "--model-path", "m"],
    ["max", "--log-level", "DEBUG", "list"],
    ["max", "10", "20"],  # some other program called max
    ["pip", "install", "modular"],
]


test_golden_forms, test_other_commands_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


def test_defaults() -> None:
    spec = get_engine_spec("max")
    assert (spec.signature.default_host, spec.signature.default_port) == ("0.0.0.0", 8000)


def test_environment_gives_host_and_port(procs: Procs) -> None:
    # the host has no flag: MAX_SERVE_HOST; MAX_SERVE_PORT unless --port
    proc = procs.start(
        ["max", "serve", "--model-path", "m"], MAX_SERVE_HOST="127.0.0.1", MAX_SERVE_PORT="8123"
    )
    found = scanned(proc.pid)
    assert (found.engine, found.model, found.host, found.port) == ("max", "m", "127.0.0.1", 8123)


def test_health_and_served_model(procs: Procs) -> None:
    routes = {"/health": [Answer(200, b"")], "/v1/models": [models("llama")]}
    argv = [
        "max",
        "serve",
        "--model-path",
        "modularai/Llama-3.1-8B-Instruct-GGUF",
        "--served-model-name",
        "llama",
    ]
    with engine_process(procs, argv, routes) as (process, _server):
        assert check_health(process).state == "ready"
        found = served_models(process)
    assert found.available, found.reason
    assert [(m.name, m.state) for m in found.models] == [("llama", "loaded")]


@pytest.mark.parametrize(
    "answer", [Answer(200, b"<html>"), Answer(200, b"[" * 100_000), Answer(200, b'{"data": {"id": 1}}')]
)
def test_hostile_model_lists_are_said(procs: Procs, answer: Answer) -> None:
    routes = {"/health": [Answer(200, b"")], "/v1/models": [answer]}
    with engine_process(procs, ["max", "serve", "--model-path", "m"], routes) as (process, _server):
        assert check_health(process).state == "ready"
        found = served_models(process)
    assert not found.available
    assert found.models == ()
    assert found.reason


# MAX's /openapi.json (FastAPI(title="MAX Serve"), Starlette's compact JSON), trimmed
MAX_OPENAPI = b'{"openapi":"3.1.0","info":{"title":"MAX Serve","version":"0.1.0"},"paths":{"/health":{}}}'
# vLLM's: FastAPI's default title
VLLM_OPENAPI = b'{"openapi":"3.1.0","info":{"title":"FastAPI","version":"0.1.0"},"paths":{"/health":{}}}'


def test_identity_tells_max_from_vllm_on_8000() -> None:
    with serving({"/openapi.json": [Answer(200, MAX_OPENAPI)]}) as modular:
        assert identified("max", modular.url)
    with serving({"/openapi.json": [Answer(200, VLLM_OPENAPI)]}) as vllm:
        assert not identified("max", vllm.url)
    for hostile in (Answer(404, MAX_OPENAPI), Answer(200, b"[" * 100_000), Answer(200, b"\xff" * 100)):
        with serving({"/openapi.json": [hostile]}) as other:
            assert not identified("max", other.url)


def test_a_command_puts_the_host_in_max_serve_host(tmp_path: Path) -> None:
    recipe = Recipe(engine="max", model_path="Qwen/Qwen3-8B", host="127.0.0.1", port=8123)
    command = get_engine_spec("max").plan(recipe, Config(data_dir=tmp_path))
    assert command.argv[-5:] == ("serve", "--model-path", "Qwen/Qwen3-8B", "--port", "8123")
    assert command.env == {"MAX_SERVE_HOST": "127.0.0.1"}
    assert command.warnings == ()
    inv = parse_argv(command.argv)
    assert inv is not None
    assert (inv.engine, inv.model, inv.port) == ("max", "Qwen/Qwen3-8B", 8123)
