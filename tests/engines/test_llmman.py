"""llmman (on the active backend): `llmman serve [MODEL]`, its other commands and clap usage errors,
the corpus's record, the address from LLMMAN_HOST, health, version and identity on /api/version
against loopback servers answering as llmman's source does, and a real daemon whose llama-server
child is its runner."""

from __future__ import annotations

from typing import Any

import pytest

from enginespec import Scanner, get_engine_spec, parse_argv
from enginespec.definition.records import HealthAnswer
from enginespec.health.checks import check_health
from enginespec.health.identity import identify
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs, wait_for

SEP, ARG = "\x1e", "\x1f"


# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    (["llmman", "serve"], ("llmman", None, None, None, None, "server")),
    # ServeArgs: the model to pre-load (its doc comment's example); daemon.rs ensure_server's spawn
    (
        ["/usr/local/bin/llmman", "serve", "hf.co/unsloth/Qwen3.5-0.8B-GGUF:latest"],
        ("llmman", "hf.co/unsloth/Qwen3.5-0.8B-GGUF:latest", None, None, None, "server"),
    ),
    (
        ["llmman", "serve", "--ociman", "podman", "--llama-cpp-version", "b9994", "qwen3"],
        ("llmman", "qwen3", None, None, None, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    ["llmman", "run", "qwen3", "hello"],
    ["llmman", "launch", "claude"],
    ["llmman", "pull", "hf.co/unsloth/Qwen3.5-0.8B-GGUF"],
    ["llmman", "ps"],
    ["llmman", "stop", "qwen3"],
    ["llmman", "list"],
    ["llmman"],
    # download and exit (ServeArgs pull_oci, pull_bin)
    ["llmman", "serve", "--ociman", "docker", "--pull-oci"],
    ["llmman", "serve", "--pull-bin"],
    ["llmman", "serve", "--help"],
    ["llmman", "serve", "-V"],
    # clap: a second positional, an option without its value
    ["llmman", "serve", "a", "b"],
    ["llmman", "serve", "--ociman"],
    # look-alikes
    ["pkill", "-f", "llmman serve"],
    ["brew", "install", "llmmanorg/tap/llmman"],
]


@pytest.mark.parametrize(("argv", "facts"), GOLDEN, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_golden_forms(argv: list[str], facts: tuple[Any, ...]) -> None:
    assert argv_facts(argv, first_name=True) == facts


@pytest.mark.parametrize("argv", NOT_SERVERS, ids=lambda v: " ".join(v))
def test_look_alikes_are_not_servers(argv: list[str]) -> None:
    assert parse_argv(argv) is None


# daemon.rs DaemonIdentity: what llmman's /api/version answers
VERSION = b'{"version":"0.9.3","exe":"/usr/local/bin/llmman","pid":4242}'
OLLAMA_VERSION = b'{"version":"0.12.3"}'


@pytest.mark.parametrize(
    ("answer", "state"),
    [
        (Answer(200, VERSION), "ready"),
        (Answer(503, b""), "unhealthy"),
        (Answer(200, b"[" * 200_000), "ready"),
    ],
)
def test_health(answer: Answer, state: str) -> None:
    with serving({"/api/version": [answer]}) as server:
        health = check_health("llmman", server.url, timeout=10)
    assert health.state == state, health
    assert health.engine == "llmman"


@pytest.mark.parametrize(
    ("status", "body", "ours"),
    [
        (200, VERSION, True),
        (200, OLLAMA_VERSION, False),
        (401, b'{"error":"unauthorized"}', False),
        (200, b"[" * 100_000, False),
    ],
)
def test_the_identity_probe_tells_llmman_from_ollama(status: int, body: bytes, ours: bool) -> None:
    probe = get_engine_spec("llmman").serving.identity
    assert probe is not None
    assert probe.matches(HealthAnswer(status, body)) is ours


def test_identify() -> None:
    with serving({"/api/version": [Answer(200, VERSION)]}) as server:
        found = identify(server.url, timeout=5)
    assert (found.engine, found.matched) == ("llmman", ("llmman",))


def _scanned(pid: int) -> Any:
    found = [p for p in Scanner(listen_ports=False).scan() if p.pid == pid]
    return found[0] if found else None


def test_a_running_daemon_and_its_llama_server_runner(procs: Procs) -> None:
    sock = bound_socket()  # the daemon holds the socket the fake server answers on
    port = sock.getsockname()[1]
    runner = ["/home/u/.cache/llmman/llama-server", "--port", "39123", "-m", "/models/q.gguf"]
    with serving({"/api/version": [Answer(200, VERSION)]}, sock=sock):
        daemon = procs.start(
            ["llmman", "serve"],
            pass_fds=(sock.fileno(),),
            LLMMAN_HOST=f"127.0.0.1:{port}",
            HELPER_SPAWN=ARG.join(runner),
        )
        wait_for(lambda: _scanned(daemon.pid) is not None, timeout=20)
        top = _scanned(daemon.pid)
        assert (top.engine, top.role, top.host, top.port) == ("llmman", "server", "127.0.0.1", port)
        assert top.sources["port"] == "environment"
        assert check_health(top, timeout=5).state == "ready"

        def child() -> Any:
            found = [p for p in Scanner(listen_ports=False).scan() if p.ppid == daemon.pid]
            return found[0] if found else None

        wait_for(lambda: child() is not None, timeout=20)
        spawned = child()
        assert (spawned.engine, spawned.role, spawned.supervisor, spawned.port, spawned.model) == (
            "llamacpp",
            "runner",
            "llmman",
            39123,
            "/models/q.gguf",
        )
