"""Xinference (issue 41): `xinference-local`, `xinference-supervisor` (the REST API), the deprecated
`xinference` with no command, `xinference-worker` (a follower) recognised from argv (the 2026
corpus's records, command lines from Xinference's docs and compose files), its client commands
left alone; its model processes (retitled `Model: <uid>`) folded into the process that spawned
them, and such a title alone no engine; health, identity and running models over a real HTTP
server answering as xorbitsai/inference 7ecec16b does, hostile answers. Both backends."""

from __future__ import annotations

import json
from typing import Any

import pytest

from enginespec import (
    ControlFailed,
    ControlUnsupported,
    Scanner,
    load_model,
    parse_argv,
    served_models,
    unload_model,
)
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.fakeserver import Answer
from helpers.procs import Procs, children_of, descendants_of, wait_for
from helpers.simpleservers import Served, engine_process, identify_answering
from helpers.tabletests import hostile_health_test, launch_forms_test

#: api/routers/admin.py is_cluster_authenticated through Starlette's JSONResponse (compact JSON)
AUTH = Answer(200, b'{"auth":false}')
#: restful_api.py list_models: each running model by its uid, its registration's fields merged in
RUNNING = json.dumps(
    {
        "object": "list",
        "data": [
            {
                "id": "qwen2.5-instruct",
                "object": "model",
                "created": 0,
                "owned_by": "xinference",
                "model_type": "LLM",
                "address": "0.0.0.0:41231",
                "accelerators": ["0"],
                "model_name": "qwen2.5-instruct",
                "model_lang": ["en", "zh"],
                "model_ability": ["generate", "chat"],
                "model_format": "pytorch",
                "context_length": 32768,
                "replica": 1,
            },
            {
                "id": "bge-m3",
                "object": "model",
                "created": 0,
                "owned_by": "xinference",
                "model_type": "embedding",
                "model_name": "bge-m3",
                "replica": 1,
            },
        ],
    },
    separators=(",", ":"),
).encode()


FORMS: list[tuple[list[str], tuple[Any, ...] | None]] = [
    # README.md / doc/source/getting_started/using_xinference.rst (xorbitsai/inference 7ecec16b)
    (["xinference-local", "--host", "0.0.0.0", "--port", "9997"], ("0.0.0.0", 9997)),
    (["xinference-local"], (None, None)),
    (["xinference-supervisor", "-H", "192.168.1.10"], ("192.168.1.10", None)),
    (
        ["xinference-supervisor", "-H", "10.0.0.2", "-p", "9998", "--supervisor-port", "9999"],
        ("10.0.0.2", 9998),
    ),
    # the console script as the kernel shows it, and the options click takes
    (["/opt/venv/bin/python3", "/opt/venv/bin/xinference-local", "-p", "9100"], (None, 9100)),
    (["xinference-local", "--port=9101", "--log-level", "debug"], (None, 9101)),
    (["xinference-local", "-H", "0.0.0.0", "-MH", "0.0.0.0", "-mp", "9102"], ("0.0.0.0", None)),
    # the deprecated group with no command (cmdline.py cli, invoke_without_command=True)
    (["xinference"], (None, None)),
    (["xinference", "-H", "0.0.0.0", "-p", "9103"], ("0.0.0.0", 9103)),
    (["python", "-m", "xinference.deploy.cmdline", "--host", "0.0.0.0"], ("0.0.0.0", None)),
    # not servers: its client commands (doc/source/getting_started/using_xinference.rst), help,
    # version, usage errors, look-alikes, and a model process's title alone
    (
        [
            "xinference",
            "launch",
            "--model-engine",
            "vllm",
            "-n",
            "qwen2.5-instruct",
            "-s",
            "7",
            "-f",
            "pytorch",
        ],
        None,
    ),
    (["xinference", "list"], None),
    (["xinference", "terminate", "--model-uid", "qwen2.5-instruct"], None),
    (["xinference", "register", "--model-type", "LLM", "--file", "model.json", "--persist"], None),
    (["xinference", "-e", "http://127.0.0.1:9997", "list"], None),
    (["xinference", "--host", "0.0.0.0", "chat", "--model-uid", "q"], None),
    (["xinference", "engine", "-e", "http://127.0.0.1:9997", "--model-name", "qwen-chat"], None),
    (["xinference", "cached"], None),
    (["xinference", "--version"], None),
    (["xinference", "-v"], None),
    (["xinference-local", "--help"], None),
    (["xinference-local", "serve"], None),
    (["xinference-migrate-auth"], None),
    (["xinference-reset-auth-password"], None),
    (["Model: qwen2.5-instruct-0"], None),
    (["Xinf vLLM worker: 1 [qwen2.5-instruct]"], None),
    (["tail", "-f", "xinference-local.log"], None),
]


test_launch_forms = launch_forms_test("xinference", FORMS, fields=("host", "port"))


def test_effective_addresses() -> None:
    """xinference-local listens on loopback by default, the supervisor on every interface
    (constants.py XINFERENCE_DEFAULT_LOCAL_HOST, XINFERENCE_DEFAULT_DISTRIBUTED_HOST); 9997."""
    local = parse_argv(["xinference-local"])
    supervisor = parse_argv(["/venv/bin/python", "/venv/bin/xinference-supervisor"])
    assert local is not None
    assert supervisor is not None
    assert (local.effective_host, local.effective_port) == ("127.0.0.1", 9997)
    assert (supervisor.effective_host, supervisor.effective_port) == ("0.0.0.0", 9997)


WORKERS = [
    # xinference/deploy/docker/docker-compose-distributed.yml (7ecec16b)
    (
        [
            "xinference-worker",
            "-e",
            "http://xinference-supervisor:9997",
            "--host",
            "xinference-worker-1",
            "--worker-port",
            "30001",
        ],
        ("xinference-worker-1", 30001),
    ),
    # doc/source/getting_started/using_xinference.rst:
    # `xinference-worker -e "http://${SUPERVISOR_HOST}:9997" -H "${WORKER_HOST}"`
    (["xinference-worker", "-e", "http://192.168.1.10:9997", "-H", "192.168.1.11"], ("192.168.1.11", None)),
]


@pytest.mark.parametrize(
    ("argv", "address"), WORKERS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else ""
)
def test_workers_are_followers(argv: list[str], address: tuple[str, int | None]) -> None:
    assert argv_facts(argv) == ("xinference", None, (), *address, "follower")
    assert argv_facts([*argv, "--help"]) is None


def test_model_processes_are_its_workers(procs: Procs) -> None:
    """`xinference-local`'s actor pools (one retitled `Model: <uid>` by core/model.py, one left
    with the spawn argv) and what they start (a vLLM engine core) are folded into it: one engine."""
    server = procs.start(
        ["/venv/bin/python3", "/venv/bin/xinference-local", "-H", "0.0.0.0", "-p", "9311"],
        HELPER_CHILD_TITLES="Model: qwen2.5-instruct-0,VLLM::EngineCore,=",
    )
    wait_for(lambda: len(descendants_of(server.pid)) == 4, timeout=20)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    mine = [pid for pid in found if pid == server.pid or pid in descendants_of(server.pid)]
    assert mine == [server.pid]
    top = found[server.pid]
    assert (top.engine, top.role, top.host, top.port) == ("xinference", "server", "0.0.0.0", 9311)
    assert set(top.worker_pids) == descendants_of(server.pid)


def test_a_model_title_alone_is_no_engine(procs: Procs) -> None:
    """Another program retitled `Model: x` (or a model process whose cluster is gone) is not
    taken for Xinference: no worker title is declared for it."""
    alone = procs.start(["Model: qwen2.5-instruct-0"])
    other = procs.start(["/usr/bin/some-daemon"], HELPER_CHILD_TITLES="Model: x")
    wait_for(lambda: len(children_of(other.pid)) == 1)
    found = {p.pid for p in Scanner(listen_ports=False).scan()}
    assert alone.pid not in found
    assert not ({other.pid} | descendants_of(other.pid)) & found


def test_worker_is_a_follower_with_its_models(procs: Procs) -> None:
    worker = procs.start(
        ["xinference-worker", "-e", "http://127.0.0.1:9997", "-H", "127.0.0.1", "--worker-port", "30001"],
        HELPER_CHILD_TITLES="Model: bge-m3-0",
    )
    wait_for(lambda: len(descendants_of(worker.pid)) == 2, timeout=20)  # a grandchild too
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    assert (found[worker.pid].engine, found[worker.pid].role) == ("xinference", "follower")
    assert set(found[worker.pid].worker_pids) == descendants_of(worker.pid)
    assert not descendants_of(worker.pid) & set(found)
    assert check_health(found[worker.pid]).state == "not_serving"


# -- over HTTP -----------------------------------------------------------------------------------


def _xinference(procs: Procs, routes: dict[str, list[Answer]]) -> Served:
    return engine_process(procs, ["xinference-local", "-H", "127.0.0.1"], routes, port_flag="-p")


def test_health_and_running_models(procs: Procs) -> None:
    routes = {"/v1/cluster/auth": [AUTH], "/v1/models": [Answer(200, RUNNING)]}
    with _xinference(procs, routes) as (process, _server):
        health = check_health(process)
        assert health.state == "ready", health
        found = served_models(process)
    assert [m.name for m in found.models] == ["qwen2.5-instruct", "bge-m3"], found


def test_models_need_a_key_by_default(procs: Procs) -> None:
    """Advanced auth is on by default (constants.py is_auth_advanced): /v1/models answers 401 to
    a request without a key; said, not taken for no models."""
    detail = b'{"detail":"Not authenticated"}'
    routes = {"/v1/cluster/auth": [Answer(200, b'{"auth":true}')], "/v1/models": [Answer(401, detail)]}
    with _xinference(procs, routes) as (process, _server):
        assert check_health(process).state == "ready"
        found = served_models(process)
    assert not found.models
    assert found.reason, found


test_hostile_health_answers_are_said = hostile_health_test(
    _xinference,
    "/v1/cluster/auth",
    [
        Answer(200, b"<html>Xinference</html>", content_type="text/html"),
        Answer(200, b"[" * 100_000),
        Answer(200, b'{"auth": "yes"}'),
        Answer(404, b'{"detail":"Not Found"}'),
        Answer(500, b"not json"),
        Answer(200, b"x" * 3_000_000, content_type="text/plain"),
    ],
    ids=["html", "deep", "spaced", "404", "500", "huge"],
)


@pytest.mark.parametrize(
    "body",
    [b'{"data": [{"id": 7}]}', b'{"data": "x"}', b"[" * 100_000, b"not json"],
    ids=["wrong-type", "not-a-list", "deep", "not-json"],
)
def test_hostile_models_answers(procs: Procs, body: bytes) -> None:
    routes = {"/v1/cluster/auth": [AUTH], "/v1/models": [Answer(200, body)]}
    with _xinference(procs, routes) as (process, _server):
        found = served_models(process)
    assert not found.models


def test_identified_by_its_cluster_auth_route() -> None:
    assert identify_answering({"/v1/cluster/auth": [AUTH]}) == ("xinference", ("xinference",))
    # a server answering 404 there (llama-server, vLLM) is not Xinference
    _engine, matched = identify_answering({"/v1/models": [Answer(200, RUNNING)]})
    assert "xinference" not in matched


# -- control: terminate as unload ---------------------------------------------------------------


def _controlled(procs: Procs, routes: dict[str, list[Answer]]) -> Served:
    """`xinference-local -H 127.0.0.1 -p P` holding the socket a scripted Xinference answers on;
    only this test's own requests move its scripts on."""
    argv = ["xinference-local", "-H", "127.0.0.1"]
    return engine_process(procs, argv, routes, port_flag="-p", origins=True)


def _running(*uids: str) -> Answer:
    data = [{"id": uid, "object": "model", "owned_by": "xinference", "model_name": uid} for uid in uids]
    return Answer(200, json.dumps({"object": "list", "data": data}).encode())


def test_terminates_a_model_as_unload(procs: Procs) -> None:
    # api/routers/models.py v3.2.1: DELETE /v1/models/{model_uid}; restful_api.py
    # terminate_model answers JSONResponse(content=None) once the supervisor terminated it
    routes = {
        "/v1/cluster/auth": [AUTH],
        "/v1/models": [_running("qwen2.5-instruct", "bge-m3"), _running("bge-m3")],
        "/v1/models/qwen2.5-instruct": [Answer(200, b"null")],
    }
    with _controlled(procs, routes) as (process, server):
        done = unload_model(process, "qwen2.5-instruct", timeout=30)
        assert [(m.name, m.state) for m in done.models] == [("bge-m3", "loaded")]
        sent = [(method, path, body) for method, path, body in server.script.bodies if method != "GET"]
    assert sent == [("DELETE", "/v1/models/qwen2.5-instruct", b"")]


def test_its_refusals_are_said(procs: Procs) -> None:
    # a default cluster (auth on) answers 401 without a key; terminate_model's ValueError is a 400
    routes = {
        "/v1/cluster/auth": [AUTH],
        "/v1/models": [_running("m")],
        "/v1/models/m": [Answer(401, b'{"detail":"Not authenticated"}')],
        "/v1/models/a%2Fb%20c": [Answer(400, b'{"detail":"Model not found in the model list, uid: a/b c"}')],
    }
    with _controlled(procs, routes) as (process, server):
        with pytest.raises(ControlFailed, match=r"unload m: HTTP 401: Not authenticated"):
            unload_model(process, "m", timeout=10)
        # the name is one path segment, percent-encoded
        with pytest.raises(ControlFailed, match=r"HTTP 400: Model not found in the model list"):
            unload_model(process, "a/b c", timeout=10)
        # launching needs its engine, format and size: no load request
        with pytest.raises(ControlUnsupported, match="xinference has no API for it"):
            load_model(process, "m", timeout=5)
        assert [path for method, path, _ in server.script.bodies if method != "GET"] == [
            "/v1/models/m",
            "/v1/models/a%2Fb%20c",
        ]
