"""What each engine serves now (issue 40): `served_models` and `enginespec models` against fake
servers answering with the shapes the engines' sources produce (cited at each), real processes
with exact argv and environment (a llama.cpp router and its runner, Ollama and its runner, vLLM,
SGLang), and hostile answers. Both backends."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import enginespec.cli.app as cli
from enginespec import ServedModels, served_models, served_models_all
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from helpers.engineanswers import mlx_vlm_health
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.ollamastore import ollama_store
from helpers.procs import Procs, children_of, wait_for

SEP, ARG = "\x1e", "\x1f"


def _json(document: object) -> Answer:
    return Answer(200, json.dumps(document).encode())


def _scanned(pid: int, children: int = 0) -> tuple[EngineProcess, list[EngineProcess]]:
    """The engine of ``pid`` and the whole scan, once its ``children`` runners show."""

    def scan() -> list[EngineProcess] | None:
        found = Scanner(listen_ports=False).scan()
        mine = [p for p in found if p.pid == pid]
        # a forked runner has its server's argv until it execs its own (a loaded host scans between)
        runners = [
            p for p in found if p.ppid == pid and p.role == "runner" and mine and p.argv != mine[0].argv
        ]
        return found if mine and len(runners) == children else None

    wait_for(lambda: scan() is not None, timeout=20)
    found = scan()
    assert found is not None
    return next(p for p in found if p.pid == pid), found


@contextmanager
def _engine(
    procs: Procs, argv: list[str], routes: dict[str, list[Answer]], **env: str
) -> Iterator[tuple[socket.socket, int]]:
    """A fake engine: a process with ``argv`` (``{port}`` filled in) holding the socket a fake
    server answers ``routes`` on; (the socket, the process's pid)."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving(routes, sock=sock, origins=True):
        proc = procs.start([a.format(port=port) for a in argv], pass_fds=(sock.fileno(),), **env)
        yield sock, proc.pid


# llama.cpp router (tools/server/server-models.cpp get_router_models; status values from
# server-models.h server_model_status_to_string): every model it knows, the child's argv in
# status.args, a failed load `unloaded` with exit_code and failed.
def _router_answer(runner_port: int) -> dict[str, object]:
    def entry(name: str, status: dict[str, object]) -> dict[str, object]:
        return {
            "id": name,
            "object": "model",
            "owned_by": "llamacpp",
            "created": 1765000000,
            "status": status,
        }

    args = ["/usr/bin/llama-server", "--host", "127.0.0.1", "--port", str(runner_port), "--alias", "qwen"]
    return {
        "object": "list",
        "data": [
            entry("qwen", {"value": "loaded", "args": args}),
            entry("gemma", {"value": "loading", "args": ["llama-server", "--port", "1"]}),
            entry("phi", {"value": "sleeping", "args": []}),
            entry("llama", {"value": "unloaded"}),
            entry("broken", {"value": "unloaded", "exit_code": 1, "failed": True}),
            entry("big", {"value": "downloading"}),
            entry("odd", {"value": "evicting"}),
        ],
    }


def test_the_llamacpp_router_lists_its_models_with_their_runners(procs: Procs) -> None:
    runner_port = free_port()
    child = ARG.join(
        [
            "llama-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(runner_port),
            "--alias",
            "qwen",
            "-m",
            "/m/qwen.gguf",
        ]
    )
    argv = ["llama-server", "--models-dir", "/m", "--host", "127.0.0.1", "--port", "{port}"]
    routes = {"/models": [_json(_router_answer(runner_port))]}
    with _engine(procs, argv, routes, HELPER_SPAWN=child, HELPER_SPAWN_ENV="LLAMA_SERVER_ROUTER_PORT=1") as (
        _,
        pid,
    ):
        wait_for(lambda: len(children_of(pid)) == 1)
        router, scan = _scanned(pid, children=1)
        (runner_pid,) = children_of(pid)
        found = served_models(router, processes=scan)
        # without a scan: its children, read now
        unscanned = {m.name: (m.runner_pid, m.port) for m in served_models(router).models}
    assert found.available, found.reason
    assert found.source == f"{router.base_url}/models"
    states = {m.name: (m.state, m.reason) for m in found.models}
    assert states == {
        "qwen": ("loaded", ""),
        "gemma": ("loading", ""),
        "phi": ("sleeping", ""),
        "llama": ("unloaded", ""),
        "broken": ("failed", "its server exited (1)"),
        "big": ("unloaded", "downloading"),
    }
    assert "odd: a status enginespec does not know ('evicting')" in found.reason
    (qwen,) = [m for m in found.models if m.name == "qwen"]
    assert (qwen.runner_pid, qwen.port) == (runner_pid, runner_port)
    assert unscanned["qwen"] == (runner_pid, runner_port)
    # JSON names the engine as every document does
    document = json.loads(found.model_dump_json())
    assert document["engine_id"] == router.instance_id


def test_a_llamacpp_server_started_with_a_model_serves_it_fixed(procs: Procs) -> None:
    argv = ["llama-server", "-m", "/m/tiny.gguf", "--alias", "tiny", "--port", "{port}"]
    with _engine(procs, argv, {"/models": [Answer(500)]}) as (_, pid):
        process, _scan = _scanned(pid)
        found = served_models(process)
    assert (found.available, found.source) == (True, "argv")
    assert [(m.name, m.state) for m in found.models] == [("tiny", "loaded")]


def test_ollama_lists_loaded_and_pulled_models(procs: Procs, tmp_path: Path) -> None:
    blob = ollama_store(tmp_path / "models")
    runner_port = free_port()
    # /api/ps (v0.32.15 api/types.go ProcessModelResponse; its OpenAPI document's example), expires_at
    # in Go's RFC 3339 with nanoseconds and a local offset; /api/tags (ListModelResponse)
    ps = {
        "models": [
            {
                "name": "qwen3:8b", "model": "qwen3:8b", "size": 6591830464, "digest": "c6eb" * 16,
                "details": {
                    "format": "gguf", "family": "qwen3", "parameter_size": "8.2B",
                    "quantization_level": "Q4_K_M",
                },
                "expires_at": "2026-12-07T16:47:07.933550123-07:00", "size_vram": 5333539264,
                "context_length": 4096,
            },
            {
                "name": "forever:1b", "model": "forever:1b", "size_vram": -5,
                "expires_at": "2318-01-01T00:00:00Z",
            },
        ]
    }  # fmt: skip
    tags = {"models": [{"name": n, "model": n, "size": 1} for n in ("qwen3:8b", "llama3.2:3b", "forever:1b")]}
    child = ARG.join(["/usr/lib/ollama/ollama", "runner", "--model", str(blob), "--port", str(runner_port)])
    argv = ["/usr/local/bin/ollama", "serve"]
    routes = {"/api/ps": [_json(ps)], "/api/tags": [_json(tags)]}
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving(routes, sock=sock):
        proc = procs.start(
            argv, pass_fds=(sock.fileno(),), HELPER_SPAWN=child, OLLAMA_HOST=f"127.0.0.1:{port}"
        )
        wait_for(lambda: len(children_of(proc.pid)) == 1)
        ollama, scan = _scanned(proc.pid, children=1)
        found = served_models(ollama, processes=scan)
        unscanned = {m.name: m.runner_pid for m in served_models(ollama).models}
    assert found.available, found.reason
    assert found.source == f"{ollama.base_url}/api/ps, {ollama.base_url}/api/tags"
    by_name = {m.name: m for m in found.models}
    assert [m.name for m in found.models] == ["qwen3:8b", "forever:1b", "llama3.2:3b"]
    qwen = by_name["qwen3:8b"]
    (runner_pid,) = children_of(proc.pid)
    assert (qwen.state, qwen.runner_pid, qwen.port) == ("loaded", runner_pid, runner_port)
    assert unscanned["qwen3:8b"] == runner_pid  # matched by its model's name, read now
    # the engine's own figure (no GPU here for the ledger to know better)
    assert (qwen.memory_bytes, qwen.memory_source) == (5333539264, "engine")
    assert qwen.expires_at == pytest.approx(1796687227.93355)  # 2026-12-07T23:47:07.93355Z
    assert (by_name["forever:1b"].memory_bytes, by_name["forever:1b"].memory_source) == (None, None)
    assert by_name["llama3.2:3b"].state == "unloaded"


@pytest.mark.parametrize("sleeping", [True, False])
def test_vllm_models_and_sleep(procs: Procs, sleeping: bool) -> None:
    # /v1/models (vllm/entrypoints/openai/serving_models.py show_available_models: a LoRA adapter
    # has its base as parent); /is_sleeping only in dev mode (else 404)
    listed = {
        "object": "list",
        "data": [
            {
                "id": "qwen", "object": "model", "created": 1, "owned_by": "vllm", "root": "/models/q",
                "parent": None, "max_model_len": 4096,
            },
            {
                "id": "sql-lora", "object": "model", "created": 1, "owned_by": "vllm",
                "root": "/adapters/sql", "parent": "qwen",
            },
        ],
    }  # fmt: skip
    asleep = _json({"is_sleeping": True}) if sleeping else Answer(404, b'{"detail":"Not Found"}')
    argv = ["vllm", "serve", "/models/q", "--served-model-name", "qwen", "--port", "{port}"]
    with _engine(procs, argv, {"/v1/models": [_json(listed)], "/is_sleeping": [asleep]}) as (_, pid):
        process, scan = _scanned(pid)
        found = served_models(process, processes=scan)
    assert found.available, found.reason
    state = "sleeping" if sleeping else "loaded"
    assert [(m.name, m.state, m.reason) for m in found.models] == [
        ("qwen", state, ""),
        ("sql-lora", state, "adapter of qwen"),
    ]


def test_mlx_vlm_says_what_it_holds_whatever_its_argv_names(procs: Procs) -> None:
    # /v1/models: the downloaded mlx models (its HF cache), and the loaded ones
    downloaded = _json(
        {
            "object": "list",
            "data": [
                {"id": "mlx-community/Qwen2.5-VL-3B-Instruct-4bit", "object": "model", "created": 1},
                {"id": "mlx-community/gemma-3-4b-it-4bit", "object": "model", "created": 1},
                {"id": "mlx-community/bge-small", "object": "model", "created": 1},
            ],
        }
    )
    health = mlx_vlm_health(
        text_generation=("mlx-community/gemma-3-4b-it-4bit", "/adapters/sql"),
        embedding=("mlx-community/bge-small", None),
        tts=(None, None),
    )
    # started with Qwen, but a request named gemma since: what it says wins
    argv = ["mlx_vlm.server", "--model", "mlx-community/Qwen2.5-VL-3B-Instruct-4bit", "--port", "{port}"]
    with _engine(procs, argv, {"/health": [health], "/v1/models": [downloaded]}) as (_, pid):
        process, scan = _scanned(pid)
        found = served_models(process, processes=scan)
    assert found.available, found.reason
    assert found.source == f"{process.base_url}/health, {process.base_url}/v1/models"
    assert [(m.name, m.state, m.reason) for m in found.models] == [
        ("mlx-community/gemma-3-4b-it-4bit", "loaded", "text_generation, adapter /adapters/sql"),
        ("mlx-community/bge-small", "loaded", "embedding"),
        ("mlx-community/Qwen2.5-VL-3B-Instruct-4bit", "unloaded", ""),
    ]


def test_mlx_lm_says_its_argv_model_is_only_what_it_started_with(procs: Procs) -> None:
    # mlx_lm/server.py ModelProvider.load: a request naming another model replaces it, unsaid
    proc = procs.start(["mlx_lm.server", "--model", "mlx-community/q", "--port", str(free_port())])
    process, _scan = _scanned(proc.pid)
    found = served_models(process)
    assert (found.available, found.source) == (True, "argv")
    (model,) = found.models
    assert (model.name, model.state) == ("mlx-community/q", "loaded")
    assert model.reason.startswith("the model it started with: a request naming another loads that one")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"status": "healthy"}', "unreadable answer (no object 'loaded_models')"),
        (b'{"loaded_models": [1, 2]}', "unreadable answer (no object 'loaded_models')"),
        (b"[" * 100_000, "unreadable answer"),
        (b'{"loaded_models": {"a": 1}}' + b" " * (1 << 20), "answer larger than 1048576 bytes"),
        (b"not json", "unreadable answer"),
    ],
)
def test_a_hostile_mlx_vlm_health_is_said_not_followed(procs: Procs, body: bytes, said: str) -> None:
    argv = ["mlx_vlm.server", "--port", "{port}"]
    routes = {"/health": [Answer(200, body)], "/v1/models": [_json({"data": [{"id": "x"}]})]}
    with _engine(procs, argv, routes) as (_, pid):
        process, scan = _scanned(pid)
        found = served_models(process, processes=scan)
    assert (found.available, found.models) == (False, ())
    assert said in found.reason, found.reason


def test_mlx_vlm_names_and_kinds_are_masked_bounded_and_literal(procs: Procs) -> None:
    evil = "\x1b]0;owned\x07 https://u:pw@h/m?token=s3cr3t"
    groups: dict[str, object] = {evil: {"model": evil, "adapter": evil}, "odd": "not an object"}
    groups.update({"none": {"model": None}, "a": {"model": "m1"}, "dup": {"model": "m1"}})
    groups.update({f"g{i}": {"model": f"m{i}"} for i in range(2, 2000)})
    argv = ["mlx_vlm.server", "--port", "{port}"]
    routes = {"/health": [_json({"status": "healthy", "loaded_models": groups})], "/v1/models": [Answer(404)]}
    with _engine(procs, argv, routes) as (_, pid):
        process, scan = _scanned(pid)
        found = served_models(process, processes=scan)
    assert found.available, found.reason
    # the first 1024 kinds are read (two of them no model, one a model already listed)
    assert len(found.models) == 1021
    assert len({m.name for m in found.models}) == 1021
    (shown,) = [m for m in found.models if "owned" in m.name]
    assert shown.name.endswith("https://u:***@h/m?token=***")
    assert shown.reason.endswith("adapter \x1b]0;owned\x07 https://u:***@h/m?token=***")
    assert "s3cr3t" not in found.model_dump_json()
    assert "pw@" not in found.model_dump_json()


def test_sglang_serves_its_one_model(procs: Procs) -> None:
    # python/sglang/srt/entrypoints/http_server.py get_model_info
    info = {
        "model_path": "/models/m",
        "tokenizer_path": "/models/m",
        "is_generation": True,
        "weight_version": "default",
    }
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", "{port}"]
    with _engine(procs, argv, {"/get_model_info": [_json(info)]}) as (_, pid):
        process, scan = _scanned(pid)
        found = served_models(process, processes=scan)
    assert found.available, found.reason
    assert [(m.name, m.state) for m in found.models] == [("/models/m", "loaded")]


def test_all_engines_at_once_and_the_models_command(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    listed = {"object": "list", "data": [{"id": "qwen", "object": "model"}]}
    vllm = ["vllm", "serve", "/models/q", "--served-model-name", "qwen", "--port", "{port}"]
    fixed = ["llama-server", "-m", "/m/tiny.gguf", "--port", "{port}"]
    with (
        _engine(procs, vllm, {"/v1/models": [_json(listed)], "/is_sleeping": [Answer(404)]}) as (_, first),
        _engine(procs, fixed, {}) as (_, second),
    ):
        _scanned(first)
        _scanned(second)
        scan = Scanner().scan()
        mine = [p for p in scan if p.pid in (first, second)]
        found = served_models_all(mine, timeout=2)
        assert [f.pid for f in found] == [p.pid for p in mine]
        assert all(f.available for f in found)
        assert cli.main(["models", str(first), str(second), "-o", "json"]) == 0
        documents = json.loads(capsys.readouterr().out)
        assert [[m["name"] for m in d["models"]] for d in documents] == [["qwen"], ["tiny.gguf"]]
        assert cli.main(["models", str(first), "-q"]) == 0
        assert capsys.readouterr().out == "qwen\n"
        assert cli.main(["models", str(second)]) == 0
        header, row = capsys.readouterr().out.splitlines()
        assert header.split()[:4] == ["ENGINE", "PID", "MODEL", "STATE"]
        assert row.split()[:4] == ["llamacpp", str(second), "tiny.gguf", "loaded"]
    assert cli.main(["models", "no-such-engine"]) == 2


# -- hostile ----------------------------------------------------------------------------------


def _read(procs: Procs, answer: Answer, timeout: float = 2.0) -> ServedModels:
    argv = ["vllm", "serve", "/models/q", "--port", "{port}"]
    with _engine(procs, argv, {"/v1/models": [answer], "/is_sleeping": [Answer(404)]}) as (_, pid):
        process, scan = _scanned(pid)
        return served_models(process, timeout=timeout, processes=scan)


def test_a_huge_answer_is_not_read(procs: Procs) -> None:
    found = _read(procs, Answer(200, b'{"data": [' + b'{"id": "x"},' * 200_000 + b'{"id": "y"}]}'))
    assert not found.available
    assert "answer larger than 1048576 bytes" in found.reason


def test_a_slow_answer_is_cut_at_the_timeout(procs: Procs) -> None:
    started = time.monotonic()
    found = _read(procs, Answer(200, b'{"data": []}', trickle=0.5), timeout=1.0)
    assert not found.available
    assert "no answer within 1s" in found.reason
    assert time.monotonic() - started < 30  # bounded, not a measurement


def test_too_many_models_are_cut_and_said(procs: Procs) -> None:
    data = [{"id": f"m{i}"} for i in range(1500)]
    found = _read(procs, _json({"object": "list", "data": data}))
    assert found.available
    assert len(found.models) == 1024
    assert "476 more models left out (at most 1024)" in found.reason


def test_names_with_escapes_and_secrets_are_masked_and_shown_literally(
    procs: Procs, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "\x1b]0;owned\x07\x1b[31mred https://u:pw@h/m.gguf?token=s3cr3t"
    argv = ["vllm", "serve", "/models/q", "--port", "{port}"]
    answers = {
        "/v1/models": [_json({"data": [{"id": evil}, {"id": 7}, "x", {"id": "y" * 5000}]})],
        "/is_sleeping": [Answer(404)],
    }
    with _engine(procs, argv, answers) as (_, pid):
        process, scan = _scanned(pid)
        found = served_models(process, processes=scan)
        assert cli.main(["models", str(pid), "-o", "wide"]) == 0
        table = capsys.readouterr().out
    names = [m.name for m in found.models]
    assert len(names) == 2  # not a string, not an object: left out
    assert "s3cr3t" not in names[0]
    assert "pw@" not in names[0]
    assert names[0].endswith("https://u:***@h/m.gguf?token=***")
    assert len(names[1]) == 512
    assert "\x1b" not in table
    assert "\x07" not in table
    assert "s3cr3t" not in table


def test_a_port_the_engines_tree_does_not_hold_is_not_asked(procs: Procs) -> None:
    """The argv names a port another process holds: nothing is sent there."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/v1/models": [_json({"data": [{"id": "impostor"}]})]}, sock=sock, origins=True) as server:
        liar = procs.start(["vllm", "serve", "/models/q", "--port", str(port)])
        process, scan = _scanned(liar.pid)
        found = served_models(process, processes=scan)
        asked = [path for _, path, _ in server.script.ours]
    assert not found.available
    assert asked == []
    assert "impostor" not in found.model_dump_json()


def test_a_runner_serves_the_one_model_its_argv_names(procs: Procs) -> None:
    router = procs.start(
        ["llama-server", "--models-dir", "/m", "--port", str(free_port())],
        HELPER_SPAWN=ARG.join(["llama-server", "-m", "/m/x.gguf", "--port", str(free_port())]),
    )
    wait_for(lambda: len(children_of(router.pid)) == 1)
    (child,) = children_of(router.pid)
    # forked, the child has the router's argv until it execs its own (a loaded host scans between)
    wait_for(lambda: b"/m/x.gguf" in Path(f"/proc/{child}/cmdline").read_bytes())
    _router, scan = _scanned(router.pid, children=1)
    (runner,) = [p for p in scan if p.ppid == router.pid]
    found = served_models(runner)
    assert (found.available, found.source) == (True, "argv")
    assert [(m.name, m.state) for m in found.models] == [("x.gguf", "loaded")]
