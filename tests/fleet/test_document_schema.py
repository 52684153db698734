"""The published JSON Schema of the engine document (schema/engine-document.schema.json, issue 42):
the file is what the models generate, and what ps --json, the agent's /v1/engines and watch give
validates against it with a real validator; a document that breaks it is refused. Both backends."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import enginespec.cli.app as cli
from enginespec.fleet.documentschema import engine_document_schema, schema_text
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.loadkit import TEXT, vllm_metrics
from helpers.procs import Procs

SCHEMA_FILE = Path(__file__).parents[2] / "schema" / "engine-document.schema.json"


def test_the_published_file_is_what_the_models_generate() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "schema/engine-document.schema.json is stale: regenerate it with "
        "`python -m enginespec.fleet.documentschema > schema/engine-document.schema.json`"
    )
    jsonschema.Draft202012Validator.check_schema(engine_document_schema())


def test_what_ps_gives_validates_and_a_broken_document_does_not(
    procs: Procs, capsys: pytest.CaptureFixture[str]
) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    metrics = [Answer(200, vllm_metrics(g), content_type=TEXT) for g in (100.0, 400.0)]
    models = Answer(200, b'{"object": "list", "data": [{"id": "qwen", "object": "model"}]}')
    routes = {"/health": [Answer(200)], "/v1/models": [models], "/metrics": metrics}
    routes["/is_sleeping"] = [Answer(404)]
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving(routes, sock=sock):
        proc = procs.start(
            ["vllm", "serve", "/models/q", "--served-model-name", "qwen", "--port", str(port)],
            pass_fds=(sock.fileno(),),
        )
        assert cli.main(["ps", "--json", "--load", "--models", str(proc.pid)]) == 0
        (document,) = json.loads(capsys.readouterr().out)
    sock.close()
    validator.validate(document)
    assert document["health"]["checked_at"] is not None
    assert document["load"]["read_at"] > 0
    assert document["models"]["read_at"] > 0
    for broken in (
        {**document, "pid": "4242"},
        {**document, "health": {**document["health"], "state": "fine"}},
        {k: v for k, v in document.items() if k != "engine"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)
