"""LM Studio's models and their control through its own REST API (issue 41): real processes with
LM Studio's exact argv (the AppImage app `lm-studio --run-as-service`, the `llmster` daemon),
their port in the http-server-config.json of their owner's home, holding the socket a fake LM
Studio answers on (tests/helpers/fakelmstudio.py: the shapes of LM Studio's published REST docs).
Hostile answers are said, never followed. Both backends."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from enginespec import ControlFailed, EngineProcess, load_model, served_models, unload_model
from enginespec.health.servedmodels import ServedModels
from helpers.fakelmstudio import LmState, fake_lmstudio
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs
from helpers.simpleservers import scanned

APP = ["/tmp/.mount_lmstuda4m8BB/lm-studio", "--run-as-service"]  # lmstudio-bug-tracker#1068
DAEMON = ["{home}/.lmstudio/llmster/0.0.6-1/llmster"]  # lms#502: started with no arguments
GPT = "openai/gpt-oss-20b"
NOMIC = "text-embedding-nomic-embed-text-v1.5"


@pytest.fixture
def home(nobody_dir: Path) -> Path:
    """A home directory any user can enter."""
    return nobody_dir


def _start(procs: Procs, home: Path, argv: list[str], sock: socket.socket) -> EngineProcess:
    """``argv`` run with ``home`` as its HOME, whose LM Studio config names ``sock``'s port, holding
    ``sock``; its record once a scan finds it."""
    internal = home / ".lmstudio" / ".internal"
    internal.mkdir(parents=True, exist_ok=True)
    config = {"port": sock.getsockname()[1], "networkInterface": "127.0.0.1"}
    (internal / "http-server-config.json").write_text(json.dumps(config))
    proc = procs.start([a.format(home=home) for a in argv], pass_fds=(sock.fileno(),), HOME=str(home))
    process = scanned(proc.pid)
    assert (process.engine, process.role, process.port) == ("lmstudio", "server", sock.getsockname()[1])
    return process


@contextmanager
def _lmstudio(procs: Procs, home: Path, state: LmState, argv: list[str] = DAEMON) -> Iterator[EngineProcess]:
    sock = bound_socket()
    with fake_lmstudio(sock, state):
        yield _start(procs, home, argv, sock)


@contextmanager
def _answering(procs: Procs, home: Path, routes: dict[str, Sequence[Answer]]) -> Iterator[EngineProcess]:
    """The daemon holding the socket a scripted server answers ``routes`` on."""
    sock = bound_socket()
    with serving(routes, sock=sock, origins=True):
        yield _start(procs, home, DAEMON, sock)


def _pairs(found: ServedModels) -> list[tuple[str, str, str]]:
    return [(m.name, m.state, m.reason) for m in found.models]


@pytest.mark.parametrize("argv", [APP, DAEMON], ids=["app", "daemon"])
def test_what_it_has_downloaded_and_each_loaded_instance(procs: Procs, home: Path, argv: list[str]) -> None:
    # a second instance's id (`KEY:2`) is made up: the docs show only a first one, named by its key
    state = LmState()
    state.models[GPT] = ("llm", [GPT, f"{GPT}:2"])
    with _lmstudio(procs, home, state, argv) as process:
        found = served_models(process)
    assert found.available, found.reason
    assert found.reason == ""
    assert found.source == f"{process.base_url}/api/v1/models"
    assert _pairs(found) == [
        (GPT, "loaded", "llm"),
        (f"{GPT}:2", "loaded", f"llm, an instance of {GPT}"),
        (NOMIC, "unloaded", "embedding, not loaded"),
    ]


def test_a_release_before_the_v1_api_is_read_at_v0(procs: Procs, home: Path) -> None:
    state = LmState(older=True)
    state.models[GPT] = ("llm", [GPT])
    with _lmstudio(procs, home, state) as process:
        found = served_models(process)
        # nor can it load: LM Studio 0.3 has no REST load, and says 404
        with pytest.raises(ControlFailed, match="HTTP 404"):
            load_model(process, NOMIC, timeout=10)
    assert found.available, found.reason
    # its 404 at /api/v1/models is no problem: it is older
    assert found.reason == ""
    assert found.source == f"{process.base_url}/api/v1/models, {process.base_url}/api/v0/models"
    assert _pairs(found) == [(GPT, "loaded", "llm"), (NOMIC, "unloaded", "embeddings")]


def test_load_then_unload_through_its_api(procs: Procs, home: Path) -> None:
    state = LmState()
    with _lmstudio(procs, home, state) as process:
        loaded = load_model(process, GPT, timeout=30)
        assert (GPT, "loaded", "llm") in _pairs(loaded)
        # another model: each loaded instance is listed under its id (the key, for a first one)
        again = load_model(process, NOMIC, timeout=30)
        assert (NOMIC, "loaded", "embedding") in _pairs(again)
        unloaded = unload_model(process, GPT, timeout=30)
        assert _pairs(unloaded) == [(GPT, "unloaded", "llm, not loaded"), (NOMIC, "loaded", "embedding")]
        with pytest.raises(ControlFailed, match=r"HTTP 404: Model not found: nope/nothing"):
            load_model(process, "nope/nothing", timeout=10)
        with pytest.raises(ControlFailed, match="HTTP 404: No loaded model instance"):
            unload_model(process, GPT, timeout=10)
    posts = [(path, json.loads(body)) for method, path, _, body in state.requests if method == "POST"]
    assert posts == [
        ("/api/v1/models/load", {"model": GPT}),
        ("/api/v1/models/load", {"model": NOMIC}),
        ("/api/v1/models/unload", {"instance_id": GPT}),
        ("/api/v1/models/load", {"model": "nope/nothing"}),
        ("/api/v1/models/unload", {"instance_id": GPT}),
    ]


def test_a_second_instance_is_unloaded_by_the_id_its_list_shows(procs: Procs, home: Path) -> None:
    state = LmState()
    state.models[GPT] = ("llm", [GPT, f"{GPT}:2"])
    with _lmstudio(procs, home, state) as process:
        found = unload_model(process, f"{GPT}:2", timeout=30)
    assert _pairs(found) == [(GPT, "loaded", "llm"), (NOMIC, "unloaded", "embedding, not loaded")]
    assert state.models[GPT][1] == [GPT]


def test_api_tokens_on_are_said_not_guessed(procs: Procs, home: Path) -> None:
    # LM Studio's API token is kept by the app: enginespec has none to send
    state = LmState(token="sk-lm-0123456789abcdef")
    with _lmstudio(procs, home, state) as process:
        found = served_models(process)
        with pytest.raises(ControlFailed, match="HTTP 401: Invalid or missing API token"):
            load_model(process, GPT, timeout=10)
    assert (found.available, found.models) == (False, ())
    assert "/api/v1/models: HTTP 401" in found.reason
    # a 401 is not a release without v1: v0 is not asked
    assert [path for _, path, _, _ in state.requests if path == "/api/v0/models"] == []


def _json(document: object) -> Answer:
    return Answer(200, json.dumps(document).encode())


V1 = "/api/v1/models"
V0 = "/api/v0/models"
NOT_THERE = Answer(404, b'{"error": "Unexpected endpoint or method."}')


@pytest.mark.parametrize(
    ("routes", "said"),
    [
        ({V1: [Answer(200, b"not json")]}, "/api/v1/models: unreadable answer"),
        ({V1: [Answer(200, b"[" * 100_000)]}, "/api/v1/models: unreadable answer"),
        ({V1: [_json({"data": []})]}, "no list 'models'"),
        ({V1: [_json({"models": {"key": GPT}})]}, "no list 'models'"),
        (
            {V1: [Answer(200, b'{"models": [' + b'{"key": "m"},' * 100_000 + b'{"key": "z"}]}')]},
            "larger than",
        ),
        ({V1: [NOT_THERE], V0: [Answer(200, b"<html>")]}, "/api/v0/models: unreadable answer"),
        ({V1: [NOT_THERE], V0: [_json({"models": []})]}, "no list 'data'"),
        ({V1: [NOT_THERE], V0: [NOT_THERE]}, "/api/v0/models: HTTP 404"),
        ({V1: [Answer(500, b'{"error": "boom"}')], V0: [_json({"data": []})]}, "/api/v1/models: HTTP 500"),
    ],
)
def test_hostile_lists_are_said_not_followed(
    procs: Procs, home: Path, routes: dict[str, Sequence[Answer]], said: str
) -> None:
    with _answering(procs, home, routes) as process:
        found = served_models(process)
    assert (found.available, found.models) == (False, ())
    assert said in found.reason, found.reason


def test_wrong_types_in_a_list_are_left_out(procs: Procs, home: Path) -> None:
    models: list[object] = [
        "a string",
        {"key": 7, "loaded_instances": [{"id": "x"}]},
        {"key": "a", "loaded_instances": "all of them"},
        {"key": "b", "type": ["llm"], "loaded_instances": [{"id": 5}, "b", {"id": ""}, None]},
        {"key": "c", "type": "llm" * 100, "loaded_instances": [{"id": "c"}, {"id": "c"}]},
        {"key": "d"},
    ]
    with _answering(procs, home, {V1: [_json({"models": models})]}) as process:
        found = served_models(process)
    assert found.available, found.reason
    assert "a: 'loaded_instances' is not a list: left out" in found.reason
    assert [(m.name, m.state) for m in found.models] == [
        ("b", "unloaded"),
        ("c", "loaded"),
        ("d", "unloaded"),
    ]
    assert len(found.models[1].reason) == 40


def test_v0_states_it_does_not_know_are_said(procs: Procs, home: Path) -> None:
    data = [
        {"id": "m1", "type": "llm", "state": "loaded"},
        {"id": "m2", "type": "vlm", "state": "not-loaded"},
        {"id": "m3", "state": "loading"},
        {"id": "m4", "state": None},
        {"id": None, "state": "loaded"},
    ]
    with _answering(procs, home, {V1: [NOT_THERE], V0: [_json({"object": "list", "data": data})]}) as process:
        found = served_models(process)
    assert found.available, found.reason
    assert _pairs(found) == [("m1", "loaded", "llm"), ("m2", "unloaded", "vlm")]
    assert "m3: a state enginespec does not know ('loading')" in found.reason
    assert "m4: a state enginespec does not know ('None')" in found.reason


def test_too_many_models_or_instances_are_cut_and_said(procs: Procs, home: Path) -> None:
    many = [{"key": f"m{i}", "loaded_instances": []} for i in range(2000)]
    with _answering(procs, home, {V1: [_json({"models": many})]}) as process:
        found = served_models(process)
    assert len(found.models) == 1024
    assert "976 more models left out (at most 1024)" in found.reason
    instances = [{"key": "k", "loaded_instances": [{"id": f"k:{i}"} for i in range(3000)]}]
    with _answering(procs, home, {V1: [_json({"models": instances})]}) as process:
        found = served_models(process)
    assert len(found.models) == 1024
    assert "1976 more models left out (at most 1024)" in found.reason


def test_names_are_masked_and_kept_literally(procs: Procs, home: Path) -> None:
    evil = "\x1b]0;owned\x07 https://u:pw@h/m.gguf?token=s3cr3t"
    models = [{"key": evil, "type": evil, "loaded_instances": [{"id": evil + ":2"}]}, {"key": "y" * 5000}]
    with _answering(procs, home, {V1: [_json({"models": models})]}) as process:
        found = served_models(process)
    assert found.available, found.reason
    (first, second) = found.models
    assert first.name.startswith("\x1b]0;owned\x07 https://u:***@h/")
    assert len(second.name) == 512
    assert "s3cr3t" not in found.model_dump_json()
    assert "pw@" not in found.model_dump_json()
