"""Lemonade (issue 41): `lemond`, `lemonade-router` and `lemonade-server serve|run` recognised from
argv (the 2026 corpus's records, real command lines from Lemonade's docs and issues, its clients
and look-alikes left alone); the backends it starts (a llama-server child) are its runners, still
llama.cpp, in a real process tree, not folded away; its /api/v1/health, version, identity and
models over a real HTTP server answering as Lemonade v11.7.0 does, hostile answers. Both
backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from enginespec import Scanner, served_models
from enginespec.definition.records import HealthAnswer
from enginespec.engines import get_engine_spec
from enginespec.health.checks import check_health
from enginespec.health.identity import identify
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, models, serving
from helpers.procs import Procs, children_of, wait_for
from helpers.simpleservers import Served, engine_process

SEP, ARG = "\x1e", "\x1f"
#: src/cpp/server/server.cpp handle_health (v11.7.0), one model loaded (nlohmann's dump: sorted keys)
HEALTH = json.dumps(
    {
        "all_models_loaded": [
            {
                "backend_url": "http://127.0.0.1:8001/v1",
                "checkpoint": "unsloth/Qwen3-0.6B-GGUF:Q4_0",
                "model_name": "Qwen3-0.6B-GGUF",
                "pid": 4242,
                "recipe": "llamacpp",
                "status": "ready",
                "type": "llm",
            }
        ],
        "max_models": {"audio": 1, "embedding": 1, "image": 1, "llm": 1, "reranking": 1},
        "model_loaded": "Qwen3-0.6B-GGUF",
        "status": "ok",
        "telemetry": {"enabled": False},
        "update_check_done": True,
        "version": "11.7.0",
    },
    separators=(",", ":"),
).encode()


FORMS: list[tuple[list[str], tuple[Any, ...] | None]] = [
    # Dockerfile (e385039e): CMD ["./lemond", "--host", "0.0.0.0"]; the systemd unit's lemond
    (["/usr/bin/lemond"], (None, None, None)),
    (["lemond", "--port", "13306", "--host", "127.0.0.1"], (None, "127.0.0.1", 13306)),
    (["lemond", "--port=9000", "--no-broadcast"], (None, None, 9000)),
    # its one positional is the cache directory, not a model
    (["lemond", "/var/lib/lemonade", "--broadcast", "--port", "9001"], (None, None, 9001)),
    # v9/v10.0: lemonade-router, every serve option at its top level
    (["lemonade-router", "--port", "8000", "--log-level", "info"], (None, None, 8000)),
    # README v8: `lemonade-server-dev serve`, as a console script under its Python
    (["/venv/bin/python3", "/venv/bin/lemonade-server-dev", "serve", "--port", "8020"], (None, None, 8020)),
    (["lemonade-server", "serve", "--no-tray", "--host", "0.0.0.0"], (None, "0.0.0.0", None)),
    # `lemonade-server run MODEL` starts the server if needed and opens the chat
    # (src/lemonade_server/cli.py v8.2.2)
    (["lemonade-server", "run", "Qwen3-0.6B-GGUF"], ("Qwen3-0.6B-GGUF", None, None)),
    (
        ["lemonade-server-dev", "run", "--no-tray", "Llama-3.2-1B-Instruct-Hybrid"],
        ("Llama-3.2-1B-Instruct-Hybrid", None, None),
    ),
    # clients and exits
    (["lemonade", "pull", "Gemma-4-E2B-it-GGUF"], None),
    (["lemonade", "run", "Qwen3-0.6B-GGUF"], None),
    (["lemonade", "list"], None),
    (["lemonade-server", "list"], None),
    (["lemonade-server", "pull", "Qwen3-0.6B-GGUF"], None),
    (["lemonade-server", "status"], None),
    (["lemonade-server", "stop"], None),
    (["lemonade-server", "--version"], None),
    (["lemonade-server", "serve", "--help"], None),
    (["lemond", "--version"], None),
    (["lemond", "-h"], None),
    # CLI11 refuses a second positional
    (["lemond", "/a", "/b"], None),
    (["tail", "-f", "lemond.log"], None),
    (["lemonade-tray"], None),
]


@pytest.mark.parametrize(
    ("argv", "facts"), FORMS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else ""
)
def test_launch_forms(argv: list[str], facts: tuple[Any, ...] | None) -> None:
    found = argv_facts(argv)
    if facts is None:
        assert found is None or found[0] != "lemonade"
        return
    assert found == ("lemonade", facts[0], (), facts[1], facts[2], "server")


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.add(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def test_backends_are_its_runners_in_a_real_tree(procs: Procs, tmp_path: Path) -> None:
    """`lemond` started a llama-server (from its cache's bin directory) and a whisper-server:
    each is Lemonade's runner, still of its own engine, listed on its own (not folded into
    lemond as a worker)."""
    runner = [
        str(tmp_path / ".cache/lemonade/bin/llamacpp/vulkan/llama-server"),
        "-m",
        "/root/.cache/huggingface/hub/models--unsloth--Qwen3-0.6B-GGUF/Qwen3-0.6B-Q4_0.gguf",
        "--ctx-size",
        "4096",
        "--port",
        "8001",
        "--jinja",
    ]
    server = procs.start(["/opt/lemonade/lemond", "--host", "0.0.0.0"], HELPER_SPAWN=ARG.join(runner))
    wait_for(lambda: [_cmdline(c) for c in _descendants(server.pid)] == [runner], timeout=20)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    top = found[server.pid]
    assert (top.engine, top.role, top.supervisor, top.host) == ("lemonade", "server", None, "0.0.0.0")
    (child,) = _descendants(server.pid)
    assert child in found, "a supervisor's runner must not be folded away"
    assert child not in top.worker_pids
    runner_record = found[child]
    assert (runner_record.engine, runner_record.role, runner_record.supervisor) == (
        "llamacpp",
        "runner",
        "lemonade",
    )
    assert runner_record.port == 8001


# -- over HTTP -----------------------------------------------------------------------------------


def _lemonade(procs: Procs, routes: dict[str, list[Answer]]) -> Served:
    return engine_process(procs, ["/usr/bin/lemond", "--host", "127.0.0.1"], routes)


def test_health_ready_and_version(procs: Procs) -> None:
    with _lemonade(procs, {"/api/v1/health": [Answer(200, HEALTH)]}) as (process, server):
        health = check_health(process)
        assert health.state == "ready", health
        assert any(p == "/api/v1/health" for _m, p, _h in server.script.seen)


@pytest.mark.parametrize(
    "answer",
    [
        Answer(200, b"<html>lemonade</html>", content_type="text/html"),
        Answer(200, b"[" * 100_000),
        Answer(200, b'{"status": 5}'),
        Answer(500, b"not json"),
        Answer(200, b'{"status": ["ok"]}'),
        Answer(200, b"x" * 3_000_000, content_type="text/plain"),
    ],
    ids=["html", "deep", "wrong-type", "not-json", "list", "huge"],
)
def test_hostile_health_answers_are_said(procs: Procs, answer: Answer) -> None:
    with _lemonade(procs, {"/api/v1/health": [answer]}) as (process, _server):
        health = check_health(process)
    assert health.state in ("unknown", "unhealthy"), health


def test_models(procs: Procs) -> None:
    routes = {
        "/api/v1/health": [Answer(200, HEALTH)],
        "/api/v1/models": [models("Qwen3-0.6B-GGUF", "whisper-v3-turbo-FLM")],
    }
    with _lemonade(procs, routes) as (process, _server):
        found = served_models(process)
    assert [m.name for m in found.models] == ["Qwen3-0.6B-GGUF", "whisper-v3-turbo-FLM"], found


def test_hostile_models_answer(procs: Procs) -> None:
    routes = {
        "/api/v1/health": [Answer(200, HEALTH)],
        "/api/v1/models": [Answer(200, b'{"data": [{"id": 7}]}')],
    }
    with _lemonade(procs, routes) as (process, _server):
        found = served_models(process)
    assert not found.models


def test_identity_probe() -> None:
    probe = get_engine_spec("lemonade").serving.identity
    assert probe is not None
    assert probe.matches(HealthAnswer(200, HEALTH))
    # llama-server's /v1/health, and a 404
    assert not probe.matches(HealthAnswer(200, b'{"status":"ok"}'))
    assert not probe.matches(HealthAnswer(404, b'{"error":"not found"}'))


def test_identify_tells_lemonade() -> None:
    with serving({"/api/v1/health": [Answer(200, HEALTH)]}) as server:
        found = identify(server.url, timeout=5)
    assert (found.engine, found.matched) == ("lemonade", ("lemonade",))
