"""Which engine answers at a URL (enginespec.health.identity, `enginespec identify`): each engine's
identity probe asked of real HTTP servers on loopback answering as the engines' sources do, and as
hostile servers do (answers of several engines at once, huge, hanging, redirecting); both backends."""

from __future__ import annotations

import json

import pytest

from enginespec.errors import InvalidInputError
from enginespec.health.identity import MAX_PROBE_BYTES, identify
from helpers.cli import run
from helpers.fakeserver import Answer, bound_socket, serving

PROPS = b'{"default_generation_settings": {}, "total_slots": 1, "build_info": "b6520-2fbd4cde"}'
OLLAMA = Answer(200, b"Ollama is running", content_type="text/plain; charset=utf-8")
TGI_INFO = b'{"model_id": "m", "router": "text-generation-router", "version": "3.3.7"}'
KOBOLD = b'{"result": "KoboldCpp", "version": "1.116.1", "protected": false}'


@pytest.mark.parametrize(
    ("routes", "engine"),
    [
        ({"/props": [Answer(200, PROPS)], "/health": [Answer(200, b'{"status":"ok"}')]}, "llamacpp"),
        ({"/": [OLLAMA]}, "ollama"),
        ({"/info": [Answer(200, TGI_INFO)]}, "tgi"),
        ({"/api/extra/version": [Answer(200, KOBOLD)]}, "koboldcpp"),
    ],
)
def test_each_engine_is_told_by_its_own_answer(routes: dict[str, list[Answer]], engine: str) -> None:
    with serving(routes) as server:
        found = identify(server.url, timeout=5)
        asked = [path for _method, path, _headers in server.script.seen]
    assert (found.engine, found.matched, found.reason) == (engine, (engine,), "")
    assert {"llamacpp", "ollama", "tgi", "koboldcpp"} <= set(found.asked)
    assert len(asked) == len(set(asked))  # one request a path, however many engines probe it


def test_a_server_of_no_known_engine_is_none_of_them() -> None:
    with serving({"/v1/models": [Answer(200, b'{"data": []}')]}) as server:
        found = identify(server.url, timeout=5)
    assert found.engine is None
    assert found.matched == ()
    assert found.reason.startswith("answers as none of ")


def test_a_server_answering_as_several_engines_is_not_taken_for_one() -> None:
    routes = {"/": [OLLAMA], "/props": [Answer(200, PROPS)]}
    with serving(routes) as server:
        found = identify(server.url, timeout=5)
    assert found.engine is None
    assert set(found.matched) == {"ollama", "llamacpp"}
    assert "not told apart" in found.reason


@pytest.mark.parametrize(
    "answer",
    [
        Answer(200, b'{"build_info": "b1", "pad": "' + b"x" * MAX_PROBE_BYTES + b'"}'),  # past the bound
        Answer(200, b"[" * 100_000),  # deep, not an object
        Answer(200, PROPS, hang=True),  # never answers
        Answer(200, PROPS, close_mid_response=True),
        Answer(302, b"", content_type="text/plain"),  # a redirect is not followed
    ],
)
def test_a_hostile_answer_identifies_nothing(answer: Answer) -> None:
    with serving({"/props": [answer]}) as server:
        found = identify(server.url, timeout=1)
    assert found.engine is None
    assert "llamacpp" not in found.matched


def test_nothing_listening() -> None:
    # a port this test holds bound and never listens on: refused, and no other process of a busy
    # host can take it meanwhile (a closed server's port could be)
    with bound_socket() as held:
        found = identify(f"http://127.0.0.1:{held.getsockname()[1]}", timeout=2)
    assert found.engine is None
    assert found.reason.startswith("no answer")


@pytest.mark.parametrize("url", ["ftp://x", "http://", "not a url", "http://127.0.0.1:99999"])
def test_not_a_url_is_refused(url: str) -> None:
    with pytest.raises(InvalidInputError, match="url"):
        identify(url)


def test_the_command() -> None:
    with serving({"/": [OLLAMA]}) as server:
        shown = run("identify", server.url)
        as_json = run("identify", "--json", server.url)
    assert (shown.returncode, shown.stdout.split()) == (0, [server.url, "ollama"]), shown.stderr
    assert json.loads(as_json.stdout)["engine"] == "ollama"
    with serving({}) as server:
        unknown = run("identify", server.url)
    assert unknown.returncode == 1
    assert unknown.stdout.startswith(f"{server.url} -: answers as none of ")
    refused = run("identify", "ftp://x")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.count("\n") == 1
