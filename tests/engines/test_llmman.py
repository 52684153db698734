"""llmman (on the active backend): `llmman serve [MODEL]`, its other commands and clap usage errors,
the corpus's record, the address from LLMMAN_HOST, health, version and identity on /api/version
against loopback servers answering as llmman's source does, and a real daemon whose llama-server
child is its runner."""

from __future__ import annotations

from typing import Any

from enginespec import Scanner
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer
from helpers.procs import Procs, wait_for
from helpers.simpleservers import engine_process, identify_answering
from helpers.tabletests import argv_tests, health_test, identity_probe_test

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


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


# daemon.rs DaemonIdentity: what llmman's /api/version answers
VERSION = b'{"version":"0.9.3","exe":"/usr/local/bin/llmman","pid":4242}'
OLLAMA_VERSION = b'{"version":"0.12.3"}'


test_health = health_test(
    "llmman",
    "/api/version",
    [
        (Answer(200, VERSION), "ready"),
        (Answer(503, b""), "unhealthy"),
        (Answer(200, b"[" * 200_000), "ready"),
    ],
)


test_the_identity_probe_tells_llmman_from_ollama = identity_probe_test(
    "llmman",
    [
        (200, VERSION, True),
        (200, OLLAMA_VERSION, False),
        (401, b'{"error":"unauthorized"}', False),
        (200, b"[" * 100_000, False),
    ],
)


def test_identify() -> None:
    assert identify_answering({"/api/version": [Answer(200, VERSION)]}) == ("llmman", ("llmman",))


def test_a_running_daemon_and_its_llama_server_runner(procs: Procs) -> None:
    runner = ["/home/u/.cache/llmman/llama-server", "--port", "39123", "-m", "/models/q.gguf"]
    with engine_process(
        procs,
        ["llmman", "serve"],
        {"/api/version": [Answer(200, VERSION)]},
        LLMMAN_HOST="127.0.0.1:{port}",
        HELPER_SPAWN=ARG.join(runner),
    ) as (top, _server):
        assert (top.engine, top.role, top.host) == ("llmman", "server", "127.0.0.1")
        assert top.sources["port"] == "environment"
        assert check_health(top, timeout=5).state == "ready"

        def child() -> Any:
            found = [p for p in Scanner(listen_ports=False).scan() if p.ppid == top.pid]
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
