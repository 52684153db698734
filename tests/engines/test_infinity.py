"""Infinity (``infinity_emb v2``, on the active backend): its launch forms (v2, the deprecated v1,
no command), facts and defaults, look-alikes, the 2026 corpus's records, and a real process with its
exact argv holding the socket a fake Infinity answers on (health, /models, hostile answers).
Facts: michaelfeil/infinity 0.0.77 (engines/infinity.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from enginespec import get_engine_spec, redact_argv, served_models
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer
from helpers.procs import Procs
from helpers.simpleservers import engine_process, scanned
from helpers.tabletests import argv_tests

INF = "infinity_emb"

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # public code search: a start script, a systemd unit, a Makefile target, a benchmark script
    (
        [
            INF,
            "v2",
            "--model-id",
            "BAAI/bge-small-en-v1.5",
            "--port",
            "7997",
            "--host",
            "127.0.0.1",
            "--batch-size",
            "32",
            "--engine",
            "torch",
            "--device",
            "cpu",
        ],
        ("infinity", "BAAI/bge-small-en-v1.5", None, "127.0.0.1", 7997, "server"),
    ),
    (
        [
            "/root/infinity_venv/bin/infinity_emb",
            "v2",
            "--model-id",
            "BAAI/bge-reranker-v2-m3",
            "--served-model-name",
            "rerank",
            "--host",
            "0.0.0.0",
            "--port",
            "8002",
            "--device",
            "cuda",
            "--dtype",
            "float32",
            "--url-prefix",
            "/v1",
        ],
        ("infinity", "BAAI/bge-reranker-v2-m3", "rerank", "0.0.0.0", 8002, "server"),
    ),
    (
        [INF, "v2", "--model-id", "BAAI/bge-m3", "--device", "mps"],
        ("infinity", "BAAI/bge-m3", None, None, None, "server"),
    ),
    (
        [INF, "v2", "--model-id", "sentence-transformers/all-MiniLM-L6-v2", "--port", "8080"],
        ("infinity", "sentence-transformers/all-MiniLM-L6-v2", None, None, 8080, "server"),
    ),
    # a console script run by its venv's interpreter; the module form
    (
        ["/opt/venv/bin/python3", "/opt/venv/bin/infinity_emb", "v2", "--model-id", "m", "--no-model-warmup"],
        ("infinity", "m", None, None, None, "server"),
    ),
    (
        ["python", "-m", "infinity_emb.cli", "v2", "--model-id", "m", "--port", "1"],
        ("infinity", "m", None, None, 1, "server"),
    ),
    # v1 (deprecated): --model-name-or-path; with no command (0.0.75 on: v2; up to 0.0.31: v1's options)
    (
        [
            INF,
            "v1",
            "--model-name-or-path",
            "BAAI/bge-small-en-v1.5",
            "--port",
            "7998",
            "--no-bettertransformer",
        ],
        ("infinity", "BAAI/bge-small-en-v1.5", None, None, 7998, "server"),
    ),
    ([INF, "--model-id", "m", "--host", "::"], ("infinity", "m", None, "::", None, "server")),
    (
        [INF, "--model-name-or-path", "m", "--trust-remote-code"],
        ("infinity", "m", None, None, None, "server"),
    ),
    # `--preload-only` then `--no-preload-only`: the last decides
    (
        [INF, "v2", "--preload-only", "--no-preload-only", "--model-id", "m"],
        ("infinity", "m", None, None, None, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    [INF, "--help"],
    [INF, "v2", "--help"],
    [INF, "help"],  # no such command of the typer app
    [INF, "v3", "--model-id", "m"],
    [INF, "v2", "BAAI/bge-m3"],  # options only: "Got unexpected extra argument"
    [INF, "v2", "--model-id", "m", "--port"],  # "Option '--port' requires an argument."
    [INF, "--install-completion"],
    # downloads the models and exits (the Dockerfiles' pre-caching step)
    [INF, "v2", "--model-id", "BAAI/bge-small-en-v1.5", "--preload-only"],
    ["infinity_client", "--help"],
    ["pip", "install", "infinity-emb[all]"],
    ["python", "-m", "infinity_emb", "v2"],  # no __main__ module
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


def test_defaults_and_secrets() -> None:
    spec = get_engine_spec("infinity")
    assert (spec.signature.default_host, spec.signature.default_port) == ("0.0.0.0", 7997)
    shown = " ".join(redact_argv([INF, "v2", "--model-id", "m", "--api-key", "s3cret"]))
    assert "s3cret" not in shown


def test_environment_gives_host_and_port(procs: Procs) -> None:
    proc = procs.start([INF, "v2", "--model-id", "m"], INFINITY_PORT="7123", INFINITY_HOST="127.0.0.1")
    found = scanned(proc.pid)
    assert (found.engine, found.model, found.host, found.port) == ("infinity", "m", "127.0.0.1", 7123)


# infinity_server.py `_models` (0.0.77), one entry per --model-id
MODELS = json.dumps(
    {
        "data": [
            {
                "id": "bge-small",
                "stats": {"queue_fraction": 0.0, "queue_absolute": 0, "results_pending": 0, "batch_size": 32},
                "capabilities": ["embed"],
                "backend": "torch",
                "embedding_dtype": "float32",
                "dtype": "auto",
                "revision": None,
                "lengths_via_tokenize": False,
                "device": "auto",
            },
            {"id": "BAAI/bge-reranker-v2-m3", "capabilities": ["rerank"], "backend": "torch"},
        ]
    }
).encode()


def test_health_and_served_models(procs: Procs) -> None:
    routes = {"/health": [Answer(200, b'{"unix":1765120000.5}')], "/models": [Answer(200, MODELS)]}
    argv = [
        INF,
        "v2",
        "--model-id",
        "BAAI/bge-small-en-v1.5",
        "--served-model-name",
        "bge-small",
        "--model-id",
        "BAAI/bge-reranker-v2-m3",
    ]
    with engine_process(procs, argv, routes) as (process, _server):
        assert check_health(process).state == "ready"
        found = served_models(process)
    assert found.available, found.reason
    assert [(m.name, m.state) for m in found.models] == [
        ("bge-small", "loaded"),
        ("BAAI/bge-reranker-v2-m3", "loaded"),
    ]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(200, b"<html>models</html>"), "not valid JSON"),
        (Answer(200, b'{"data": "bge"}'), "no list 'data'"),
        (Answer(200, b"[" * 100_000), "nested deeper"),
        (Answer(401, b'{"detail":"Unauthorized"}'), "HTTP 401"),
    ],
)
def test_hostile_model_lists_are_said_not_followed(procs: Procs, answer: Answer, said: str) -> None:
    routes = {"/health": [Answer(200, b'{"unix":1.0}')], "/models": [answer]}
    with engine_process(procs, [INF, "v2", "--model-id", "m"], routes) as (process, _server):
        assert check_health(process).state == "ready"
        found = served_models(process)
    assert not found.available
    assert said in found.reason
    assert found.models == ()


def test_a_model_whose_id_is_no_name_is_left_out(procs: Procs) -> None:
    body = b'{"data": [{"id": 7}, {"id": ["x"]}, {"id": "bge"}]}'
    routes = {"/health": [Answer(200, b'{"unix":1.0}')], "/models": [Answer(200, body)]}
    with engine_process(procs, [INF, "v2", "--model-id", "m"], routes) as (process, _server):
        found = served_models(process)
    assert [m.name for m in found.models] == ["bge"]


def test_a_failing_health_is_unhealthy(procs: Procs) -> None:
    routes = {"/health": [Answer(500, b"Internal Server Error")]}
    with engine_process(procs, [INF, "v2", "--model-id", "m"], routes) as (process, _server):
        assert check_health(process).state != "ready"
