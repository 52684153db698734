"""Hugging Face Text Embeddings Inference (``text-embeddings-router``, on the active backend): its
launch form, facts and defaults, look-alikes, the 2026 corpus's records, and a real process with its
exact argv holding the socket a fake TEI answers on (health, /info version, identity against TGI's
/info, hostile answers). Facts: huggingface/text-embeddings-inference v1.9.3 (engines/tei.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from enginespec import get_engine_spec, parse_argv, redact_argv
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, serving
from helpers.procs import Procs
from helpers.simpleservers import engine_process, identified, scanned

TER = "text-embeddings-router"

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # at TEI v1.9.3: TEI's docs/source/en/local_gpu.md line 63, and its README line 509
    (
        [TER, "--model-id", "BAAI/bge-large-en-v1.5", "--dtype", "float16", "--port", "8080"],
        ("tei", "BAAI/bge-large-en-v1.5", "BAAI/bge-large-en-v1.5", None, 8080, "server"),
    ),
    (
        [TER, "--model-id", "BAAI/bge-large-en-v1.5", "--revision", "refs/pr/5", "--port", "8080"],
        ("tei", "BAAI/bge-large-en-v1.5", "BAAI/bge-large-en-v1.5", None, 8080, "server"),
    ),
    # public code search (a justfile, a shell alias, a PowerShell `docker ... -c 'exec ...'`)
    (
        [TER, "--model-id", "BAAI/bge-small-en-v1.5", "--port", "8090", "--json-output"],
        ("tei", "BAAI/bge-small-en-v1.5", "BAAI/bge-small-en-v1.5", None, 8090, "server"),
    ),
    (
        [TER, "--model-id", "BAAI/bge-reranker-v2-m3", "--revision", "12e9746", "--port", "8787"],
        ("tei", "BAAI/bge-reranker-v2-m3", "BAAI/bge-reranker-v2-m3", None, 8787, "server"),
    ),
    (
        [
            TER,
            "--model-id",
            "Qwen/Qwen3-Embedding-4B",
            "--huggingface-hub-cache",
            "/data",
            "--api-key",
            "k",
            "--port",
            "80",
            "--json-output",
        ],
        ("tei", "Qwen/Qwen3-Embedding-4B", "Qwen/Qwen3-Embedding-4B", None, 80, "server"),
    ),
    (
        [
            TER,
            "--model-id",
            "jinaai/jina-embeddings-v2-base-code",
            "--hostname",
            "127.0.0.1",
            "--port",
            "8080",
            "--max-batch-tokens",
            "1024",
        ],
        (
            "tei",
            "jinaai/jina-embeddings-v2-base-code",
            "jinaai/jina-embeddings-v2-base-code",
            "127.0.0.1",
            8080,
            "server",
        ),
    ),
    # served name, `-p`, `=` forms, the image's CMD `--json-output` after the args
    (
        [TER, "--model-id=/data/m", "--served-model-name", "emb", "-p", "3001", "--hostname", "::"],
        ("tei", "/data/m", "emb", "::", 3001, "server"),
    ),
    (
        ["/usr/local/bin/text-embeddings-router", "--json-output", "--model-id", "m"],
        ("tei", "m", "m", None, None, "server"),
    ),
    # v1.9: --auto-truncate takes an optional value; before, none
    (
        [TER, "--model-id", "m", "--auto-truncate", "false", "--port", "1"],
        ("tei", "m", "m", None, 1, "server"),
    ),
    ([TER, "--auto-truncate", "--model-id", "m"], ("tei", "m", "m", None, None, "server")),
    ([TER, "--disable-spans", "--model-id", "m"], ("tei", "m", "m", None, None, "server")),
]

# Not a TEI server: its clap exits (help, version, a positional, an option without its value), or
# another program.
NOT_SERVERS: list[list[str]] = [
    [TER, "--help"],
    [TER, "-V"],
    [TER, "--model-id", "m", "--version"],
    [TER, "BAAI/bge-large-en-v1.5"],  # no positional: "unexpected argument"
    [TER, "--model-id", "m", "--port"],  # "a value is required"
    [TER, "--port", "--model-id", "m"],
    ["text-embeddings", "--model-id", "m"],
    ["cargo", "install", "--path", "router", "-F", "candle"],
    ["pkill", TER],
    ["curl", "127.0.0.1:8080/embed", "-d", '{"inputs": "x"}'],
]


@pytest.mark.parametrize(("argv", "facts"), GOLDEN, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_golden_forms(argv: list[str], facts: tuple[Any, ...]) -> None:
    # the served name defaults to the model (main.rs), which argv_facts leaves to the invocation
    inv = parse_argv(argv)
    assert inv is not None
    assert argv_facts(argv, first_name=True) == (*facts[:2], inv.served_model_name, *facts[3:])
    assert (inv.served_model_name or inv.model) == facts[2]


@pytest.mark.parametrize("argv", NOT_SERVERS, ids=" ".join)
def test_look_alikes_are_not_servers(argv: list[str]) -> None:
    assert parse_argv(argv) is None


def test_defaults_and_secrets() -> None:
    spec = get_engine_spec("tei")
    assert (spec.signature.default_host, spec.signature.default_port) == ("0.0.0.0", 3000)
    shown = " ".join(redact_argv([TER, "--model-id", "m", "--api-key", "s3cret", "--hf-api-token", "hf_x"]))
    assert "s3cret" not in shown
    assert "hf_x" not in shown


def test_environment_gives_model_and_port(procs: Procs) -> None:
    # clap `env`: MODEL_ID, PORT (the image sets PORT=80), argv winning
    routes = {"/health": [Answer(200)]}
    with engine_process(procs, [TER], routes, port_flag="--port") as (process, _server):
        assert process.engine == "tei"
    proc = procs.start([TER, "--json-output"], MODEL_ID="BAAI/bge-m3", PORT="8123", SERVED_MODEL_NAME="bge")
    found = scanned(proc.pid)
    assert (found.engine, found.model, found.served_model_name, found.port) == (
        "tei",
        "BAAI/bge-m3",
        "bge",
        8123,
    )


INFO = json.dumps(
    {
        "model_id": "BAAI/bge-large-en-v1.5",
        "model_sha": None,
        "model_dtype": "float16",
        "served_model_name": "BAAI/bge-large-en-v1.5",
        "model_type": {"embedding": {"pooling": "cls"}},
        "max_concurrent_requests": 512,
        "max_input_length": 512,
        "max_batch_tokens": 16384,
        "max_batch_requests": None,
        "max_client_batch_size": 32,
        "auto_truncate": True,
        "tokenization_workers": 4,
        "version": "1.9.3",
        "sha": None,
        "docker_label": None,
    },
    separators=(",", ":"),
).encode()
UNHEALTHY = b'{"error":"unhealthy","error_type":"unhealthy"}'
# TGI's /info (router/src/lib.rs struct Info, v3.3.7): no model_type
TGI_INFO = (
    b'{"model_id":"m","model_sha":null,"model_pipeline_tag":"text-generation","max_concurrent_requests":128,'
    b'"max_best_of":2,"max_stop_sequences":4,"max_input_tokens":1024,"max_total_tokens":2048,'
    b'"validation_workers":2,"max_client_batch_size":4,"router":"text-generation-router","version":"3.3.7",'
    b'"sha":null,"docker_label":null}'
)


def test_health_version_and_unhealthy(procs: Procs) -> None:
    routes = {"/health": [Answer(200), Answer(503, UNHEALTHY)], "/info": [Answer(200, INFO)]}
    with engine_process(procs, [TER, "--model-id", "BAAI/bge-large-en-v1.5"], routes) as (process, _server):
        assert check_health(process).state == "ready"
        assert process.engine_version == "1.9.3"
        assert check_health(process).state == "unhealthy"


@pytest.mark.parametrize(
    "answer",
    [
        Answer(200, b"<html>info</html>"),
        Answer(200, b'{"version": 193}'),
        Answer(200, b'{"version": "' + b"9" * 5000 + b'"}'),
        Answer(200, b"[" * 100_000),
        Answer(401, b'{"error":"Unauthorized"}'),
    ],
)
def test_a_hostile_info_is_no_version_and_no_failure(procs: Procs, answer: Answer) -> None:
    routes = {"/health": [Answer(200)], "/info": [answer]}
    with engine_process(procs, [TER, "--model-id", "m"], routes) as (process, _server):
        assert check_health(process).state == "ready"
        assert process.engine_version is None


def test_a_hostile_health_answer_is_said_not_followed(procs: Procs) -> None:
    routes = {"/health": [Answer(503, b"[" * 100_000)], "/info": [Answer(200, INFO)]}
    with engine_process(procs, [TER, "--model-id", "m"], routes) as (process, _server):
        assert check_health(process).state == "unhealthy"


def test_identity_tells_tei_from_tgi_on_port_3000() -> None:
    with serving({"/info": [Answer(200, INFO)]}) as tei:
        assert identified("tei", tei.url)
    with serving({"/info": [Answer(200, TGI_INFO)]}) as tgi:
        assert not identified("tei", tgi.url)
    for hostile in (b"<html>", b"[" * 100_000, b'"model_type":' * 0 + b"{}"):
        with serving({"/info": [Answer(200, hostile)]}) as other:
            assert not identified("tei", other.url)
