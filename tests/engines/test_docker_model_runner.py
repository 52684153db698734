"""Docker Model Runner (issue 41): the images' `/app/model-runner` and `dmr serve` recognised from
argv (the 2026 corpus's records), its clients left alone; the llama-server it starts on a unix
socket is its runner, still llama.cpp, in a real process tree; its greeting, version and identity
over a real HTTP server answering as docker/model-runner 642c7211 does, hostile answers. Both
backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from enginespec import Scanner
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer
from helpers.procs import Procs, children_of, wait_for
from helpers.simpleservers import engine_process, identify_answering
from helpers.tabletests import launch_forms_test

ARG = "\x1f"
#: pkg/server/server.go: the root handler's answer (v1.0.5 on)
GREETING = Answer(200, b"Docker Model Runner is running", content_type="text/plain; charset=utf-8")
#: pkg/inference/scheduling/http_handler.go GetBackendStatus: json.Marshal of each backend's
#: status (pkg/inference/backend.go FormatStatus), llama.cpp always among them
STATUS = Answer(200, b'{"llama.cpp":"Running: llama.cpp b6712-a1b2c3d","vllm":"Not Installed"}')


FORMS: list[tuple[list[str], tuple[Any, ...] | None]] = [
    (["/app/model-runner"], (None, None)),
    (["dmr", "serve"], (None, None)),
    (["./dmr", "serve", "--port", "13434", "--models-path", "/srv/models"], (None, 13434)),
    (["dmr", "serve", "--port=13435"], (None, 13435)),
    # clients, help, look-alikes
    (["dmr", "run", "ai/gemma3", "Hello"], None),
    (["dmr", "pull", "ai/smollm2"], None),
    (["dmr", "serve", "--help"], None),
    (["docker", "model", "run", "ai/gemma3"], None),
    (["/usr/local/bin/model-runner"], None),
    (["/app/model-runner", "extra"], None),
]


test_launch_forms = launch_forms_test("docker-model-runner", FORMS, fields=("host", "port"))


def test_llama_server_is_its_runner_in_a_real_tree(procs: Procs, tmp_path: Path) -> None:
    runner = [
        "/app/llama-server",
        "-ngl",
        "999",
        "--metrics",
        "--model",
        "/models/bundles/sha256/436b/model/model.gguf",
        "--host",
        "inference-runner-0.sock",
        "--ctx-size",
        "4096",
        "--jinja",
    ]
    server = procs.start(
        ["/app/model-runner"], cwd=tmp_path, HELPER_SPAWN=ARG.join(runner), MODEL_RUNNER_PORT="12434"
    )
    wait_for(lambda: len(children_of(server.pid)) == 1, timeout=20)
    (child,) = children_of(server.pid)
    wait_for(lambda: Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0] == b"/app/llama-server")
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    top = found[server.pid]
    assert (top.engine, top.role, top.port) == ("docker-model-runner", "server", 12434)
    assert top.sources["port"] == "environment"
    assert child in found
    assert child not in top.worker_pids
    record = found[child]
    assert (record.engine, record.role, record.supervisor) == ("llamacpp", "runner", "docker-model-runner")
    assert (record.host, record.port) == ("inference-runner-0.sock", None)
    # the daemon is asked on its own TCP port; the runner's socket path is relative to its
    # working directory (the daemon's, inherited): /proc/PID/cwd says where (its health over
    # that socket: tests/health/test_working_socket.py)
    assert top.base_url == "http://127.0.0.1:12434"
    assert record.base_url == "http+unix://" + quote(f"{tmp_path}/inference-runner-0.sock", safe="")


def _scanned(procs: Procs, answer: Answer) -> str:
    with engine_process(procs, ["dmr", "serve"], {"/engines/status": [answer], "/": [GREETING]}) as (
        process,
        _server,
    ):
        return check_health(process).state


@pytest.mark.parametrize(
    "answer",
    [STATUS, Answer(200, b'{"llama.cpp":"Installing: downloading llama.cpp b6712"}')],
    ids=["running", "installing"],
)
def test_engines_status_is_ready(procs: Procs, answer: Answer) -> None:
    # the daemon answers as soon as it listens, whatever its backends' state
    assert _scanned(procs, answer) == "ready"


@pytest.mark.parametrize(
    "answer",
    [
        GREETING,  # the greeting alone: not where its health is asked
        Answer(200, b'{"status":"ok"}'),
        Answer(200, b"[" * 100_000),
        Answer(404, b"404 page not found\n", content_type="text/plain"),
        Answer(500, b"not json"),
        Answer(200, b"x" * 3_000_000, content_type="text/plain"),
    ],
    ids=["greeting", "other-json", "deep", "404", "error", "huge"],
)
def test_hostile_answers_are_said(procs: Procs, answer: Answer) -> None:
    assert _scanned(procs, answer) in ("unknown", "unhealthy")


def test_identify_tells_it() -> None:
    # v1.0.0-v1.0.4 had no greeting at `/`: /engines/status tells them too
    dmr = "docker-model-runner"
    assert identify_answering({"/engines/status": [STATUS]}) == (dmr, (dmr,))
    # llama-server, Ollama, vLLM: no /engines/status
    other = {"/": [Answer(200, b"Ollama is running")], "/health": [Answer(200, b'{"status":"ok"}')]}
    assert identify_answering(other)[0] != dmr
