"""RamaLama (issue 41): `ramalama [GLOBAL OPTIONS] serve [OPTIONS] [MODEL...]` recognised from argv
(the 2026 corpus's records, command lines from RamaLama's docs), global options before `serve`
passed over (`LaunchForm.leading_flags`), `--generate`, `--dryrun` and its other subcommands left
alone; the server it runs as its child (`--nocontainer`) is its runner, in a real process tree;
health through its port as llama-server answers. Both backends."""

from __future__ import annotations

from typing import Any

import pytest

from enginespec import Config, Recipe, Scanner, get_engine_spec, parse_argv, served_models
from enginespec.definition.signature import LaunchForm
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer, models
from helpers.procs import Procs, cmdline_of, descendants_of, wait_for
from helpers.simpleservers import Served, engine_process
from helpers.tabletests import launch_forms_test

SEP, ARG = "\x1e", "\x1f"
#: llama-server's /health (llama.cpp tools/server): loading, then ready
LOADING = Answer(503, b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}')
READY = Answer(200, b'{"status":"ok"}')


FORMS: list[tuple[list[str], tuple[Any, ...] | None]] = [
    # RamaLama's docs/ramalama-serve.1.md (v0.24.0)
    (["ramalama", "serve", "granite"], ("granite", None, None)),
    (["ramalama", "serve", "--port", "1234", "granite"], ("granite", None, 1234)),
    (
        ["ramalama", "serve", "-d", "-p", "8081", "--name", "mylama", "ollama://smollm:135m"],
        ("ollama://smollm:135m", None, 8081),
    ),
    (
        ["ramalama", "serve", "--host", "127.0.0.1", "--port=8082", "hf://ggml-org/gemma-3-1b-it-GGUF"],
        ("hf://ggml-org/gemma-3-1b-it-GGUF", "127.0.0.1", 8082),
    ),
    (["ramalama", "--runtime=vllm", "serve", "--max-model-len", "4096", "granite"], ("granite", None, None)),
    (["ramalama", "--nocontainer", "serve", "--ctx-size", "4096", "-t", "8", "tiny"], ("tiny", None, None)),
    (["ramalama", "--engine", "docker", "--debug", "serve", "--temp", "0.2", "tiny"], ("tiny", None, None)),
    (["ramalama", "--store=/srv/models", "-q", "serve", "--thinking", "false", "tiny"], ("tiny", None, None)),
    (["/usr/bin/python3", "/usr/local/bin/ramalama", "serve", "tiny"], ("tiny", None, None)),
    # no model, or several: llama.cpp's router over the store's models (container only)
    (["ramalama", "serve", "--models-max", "2"], (None, None, None)),
    (["ramalama", "serve", "granite", "tiny"], ("granite", None, None)),
    # not servers: files written, dry runs, help, version, other subcommands, look-alikes
    (["ramalama", "serve", "--generate", "kube", "granite"], None),
    (["ramalama", "serve", "--generate=quadlet/kube:/tmp/out", "granite"], None),
    (["ramalama", "--dryrun", "serve", "granite"], None),
    (["ramalama", "--dry-run", "--runtime", "vllm", "serve", "granite"], None),
    (["ramalama", "serve", "--help"], None),
    (["ramalama", "-v"], None),
    (["ramalama", "--version", "serve", "granite"], None),
    (["ramalama", "run", "granite"], None),
    (["ramalama", "--runtime=mlx", "run", "granite"], None),
    (["ramalama", "bench", "granite"], None),
    (["ramalama", "pull", "granite"], None),
    (["ramalama", "list"], None),
    (["ramalama", "ps"], None),
    (["ramalama", "stop", "mylama"], None),
    (["ramalama", "rag", "doc.pdf", "quay.io/me/rag"], None),
    (["ramalama", "chat", "--url", "http://127.0.0.1:8080/v1"], None),
    (["ramalama", "daemon", "start"], None),
    (["ramalama", "--unknown", "serve", "granite"], None),
    (["ramalama"], None),
    (["vim", "ramalama", "serve"], None),
]


test_launch_forms = launch_forms_test("ramalama", FORMS)


def test_its_default_address_is_the_loopback(procs: Procs) -> None:
    """ramalama 0.25.0 (PyPI, ramalama/config.py get_default_host) binds 127.0.0.1 without
    `--host` (v0.24.0 took "::" or "0.0.0.0"): tests/real/test_ramalama.py saw its llama-server
    child told `--host 127.0.0.1`. The port: config.py `port = "8080"`."""
    argv = ["/usr/bin/python3", "/usr/bin/ramalama", "--nocontainer", "serve", "granite"]
    parsed = parse_argv(argv)
    assert parsed is not None
    assert (parsed.host, parsed.effective_host, parsed.effective_port) == (None, "127.0.0.1", 8080)
    server = procs.start(argv)
    scanned = {p.pid: p for p in Scanner(listen_ports=False).scan()}[server.pid]
    assert (scanned.effective_host, scanned.base_url) == ("127.0.0.1", "http://127.0.0.1:8080")
    assert scanned.sources["host"] == "default"
    procs.stop(server)


@pytest.mark.parametrize(
    ("model", "argument"),
    [
        ("/srv/models/tiny.gguf", "file:///srv/models/tiny.gguf"),
        ("/srv/my models/t#1.gguf", "file:///srv/my%20models/t%231.gguf"),
        ("granite", "granite"),
        ("ollama://smollm:135m", "ollama://smollm:135m"),
        ("ggml-org/gemma-3-1b-it-GGUF", "ggml-org/gemma-3-1b-it-GGUF"),
        ("file:///srv/m.gguf", "file:///srv/m.gguf"),
    ],
)
def test_a_local_model_is_given_as_a_file_uri(model: str, argument: str) -> None:
    """RamaLama fetches a scheme-less model holding a "/" from Hugging Face
    (transports/transport_factory.py detect_model_model_type): a recipe's absolute path goes in as
    `file://` (unquoted by path_utils.py file_uri_to_path); references stay as given."""
    recipe = Recipe(engine="ramalama", model_path=model, port=8081)
    command = get_engine_spec("ramalama").plan(recipe, Config())
    assert command.argv[1:] == ("serve", argument, "--host", "127.0.0.1", "--port", "8081")
    # the command's model, as a scan reads it back
    parsed = parse_argv(command.argv)
    assert parsed is not None
    assert (parsed.engine, parsed.model) == ("ramalama", argument)


def test_leading_flags_need_a_subcommand() -> None:
    with pytest.raises(ValueError, match="leading"):
        LaunchForm(executables=("x",), leading_flags=("--runtime",))
    with pytest.raises(ValueError, match="flag name"):
        LaunchForm(executables=("x",), subcommand=("serve",), leading_switches=("debug",))


def _children_as(pid: int, argv: list[str]) -> bool:
    """The process has one descendant, which runs ``argv`` (it has exec'd)."""
    kids = descendants_of(pid)
    return len(kids) == 1 and all(cmdline_of(k) == argv for k in kids)


def test_its_child_server_is_its_runner(procs: Procs) -> None:
    """`ramalama --nocontainer serve` runs llama-server as its child (common.py exec_cmd); the
    vLLM runtime's `vllm serve` (the corpus's command) likewise: each is its runner."""
    for runtime, child in (
        ("llama.cpp", ["llama-server", "--host", "0.0.0.0", "--port", "8391", "--model", "/m/granite.gguf"]),
        ("vllm", ["vllm", "serve", "--port", "8392", "/run/model/model.file"]),
    ):
        server = procs.start(
            [
                "/usr/bin/python3",
                "/usr/bin/ramalama",
                f"--runtime={runtime}",
                "--nocontainer",
                "serve",
                "granite",
            ],
            HELPER_SPAWN=ARG.join(child),
        )
        wait_for(lambda pid=server.pid, argv=child: _children_as(pid, argv), timeout=20)
        found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
        top = found[server.pid]
        assert (top.engine, top.role, top.model, top.supervisor) == ("ramalama", "server", "granite", None)
        (kid,) = descendants_of(server.pid)
        assert (found[kid].role, found[kid].supervisor) == ("runner", "ramalama")
        assert found[kid].engine in ("llamacpp", "vllm")
        procs.stop(server)


def test_a_llama_server_of_another_parent_is_no_runner(procs: Procs) -> None:
    child = ["llama-server", "--port", "8393"]
    other = procs.start(["/usr/bin/some-daemon"], HELPER_SPAWN=ARG.join(child))
    wait_for(lambda: _children_as(other.pid, child), timeout=20)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    (kid,) = descendants_of(other.pid)
    assert (found[kid].engine, found[kid].role, found[kid].supervisor) == ("llamacpp", "server", None)


# -- over HTTP -----------------------------------------------------------------------------------


def _ramalama(procs: Procs, routes: dict[str, list[Answer]]) -> Served:
    argv = ["ramalama", "serve", "--host", "127.0.0.1", "--port", "{port}", "granite"]
    return engine_process(procs, argv, routes)


def test_health_through_its_port(procs: Procs) -> None:
    routes = {"/health": [LOADING, READY], "/v1/models": [models("granite")]}
    with _ramalama(procs, routes) as (process, _server):
        assert check_health(process).state == "loading"
        assert check_health(process).state == "ready"
        found = served_models(process)
    assert [m.name for m in found.models] == ["granite"], found


@pytest.mark.parametrize(
    "answer",
    [
        Answer(200, b"<html>ok</html>", content_type="text/html"),
        Answer(200, b"[" * 100_000),
        Answer(200, b'{"status": 5}'),
        Answer(503, b"not json"),
        Answer(200, b"x" * 3_000_000, content_type="text/plain"),
    ],
    ids=["html", "deep", "wrong-type", "not-json", "huge"],
)
def test_hostile_health_answers_are_said(procs: Procs, answer: Answer) -> None:
    """Its server is llama-server, vLLM (200, no body) or mlx_lm.server by its runtime: any 200
    is ready, as any engine's; a 503 that is no llama-server answer is unhealthy; a huge one is
    not read; none crashes."""
    with _ramalama(procs, {"/health": [answer]}) as (process, _server):
        health = check_health(process)
    if len(answer.body) > 1 << 20:
        assert (health.state, health.reason) == (
            "unknown",
            "/health: answer larger than 1048576 bytes: not read",
        )
        return
    assert health.state == ("ready" if answer.status == 200 else "unhealthy"), health
