"""LocalAI (issue 41): `local-ai [run] [MODELS...]` recognised from argv (the 2026 corpus's
records, real command lines from LocalAI's docs, look-alikes and its CLI's other commands); the
workers as followers; the gRPC backends it starts as its runners, found in a real process tree;
its secrets masked; its /readyz states, version, models and API key over a real HTTP server
answering as LocalAI v4.9.0 does, hostile answers. Both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from enginespec import Scanner, check_load, served_models
from enginespec.engines import get_engine_spec
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, models
from helpers.procs import Procs, cmdline_of, descendants_of, wait_for
from helpers.simpleservers import Served, engine_process, scanned
from helpers.tabletests import hostile_health_test, launch_forms_test

SEP, ARG = "\x1e", "\x1f"
#: core/http/routes/health.go: /readyz while the startup preload runs
STARTING = b'{"reason":"startup preload in progress","status":"starting"}'


#: The corpus says `worker` for a distributed-mode worker; in enginespec a launch form's process
#: that serves no HTTP API is a `follower` (a `worker` is a retitled child, an `orphan` without its
#: server): `local-ai worker` serves gRPC backends to a frontend, no OpenAI API.
_ROLE_NAMES = {"worker": "follower"}


FORMS: list[tuple[list[str], tuple[Any, ...] | None]] = [
    # README.md / docs quickstart (mudler/LocalAI 82c191af): `local-ai run MODEL`, URLs too
    (["local-ai", "run", "llama-3.2-1b-instruct:q4_k_m"], ("llama-3.2-1b-instruct:q4_k_m", None, None)),
    (
        ["local-ai", "run", "huggingface://TheBloke/phi-2-GGUF/phi-2.Q8_0.gguf"],
        ("huggingface://TheBloke/phi-2-GGUF/phi-2.Q8_0.gguf", None, None),
    ),
    (["local-ai", "run", "ollama://gemma:2b"], ("ollama://gemma:2b", None, None)),
    (
        ["local-ai", "run", "https://gist.githubusercontent.com/.../phi-2.yaml"],
        ("https://gist.githubusercontent.com/.../phi-2.yaml", None, None),
    ),
    # several models: each is installed and loaded; the first is the model
    (["local-ai", "run", "phi-2", "bert-embeddings"], ("phi-2", None, None)),
    # `run` is the default command (kong `default:"withargs"`): the image's `./local-ai "$@"`
    (["/local-ai"], (None, None, None)),
    (["./local-ai", "phi-2"], ("phi-2", None, None)),
    (["local-ai", "--models-path", "/models", "--address", "0.0.0.0:9090"], (None, "0.0.0.0", 9090)),
    (["local-ai", "run", "--address", ":8081", "--threads", "4", "phi-2"], ("phi-2", None, 8081)),
    (["local-ai", "run", "--address=127.0.0.1:8082", "--f16", "phi-2"], ("phi-2", "127.0.0.1", 8082)),
    (["local-ai", "run", "--p2p", "--debug", "--cors", "phi-2"], ("phi-2", None, None)),
    (["local-ai", "run", "-t", "8", "--context-size", "4096", "m"], ("m", None, None)),
    (["local-ai", "--log-level", "debug"], (None, None, None)),
    # not servers: its other commands, help and version, and look-alikes
    (["local-ai", "models", "list"], None),
    (["local-ai", "models", "install", "hermes-2-pro-mistral"], None),
    (["local-ai", "backends", "install", "llama-cpp"], None),
    (["local-ai", "tts", "--model", "voice-en-us-amy-low", "hello"], None),
    (["local-ai", "transcript", "--model", "whisper-1", "a.wav"], None),
    (["local-ai", "util", "gguf-info", "m.gguf"], None),
    (["local-ai", "chat"], None),
    (["local-ai", "explorer"], None),
    (["local-ai", "completion", "bash"], None),
    (["local-ai", "agent-worker", "--nats-url", "nats://nats:4222"], None),
    (["local-ai", "federated", "--address", ":8080"], None),
    (["local-ai", "--help"], None),
    (["local-ai", "run", "--help"], None),
    (["local-ai", "--version"], None),
    (["local-ai", "--debug", "models", "list"], None),
    (["local-ai-launcher"], None),
    (["tail", "-f", "local-ai.log"], None),
    (["vim", "local-ai"], None),
]


test_launch_forms = launch_forms_test("localai", FORMS)


WORKERS = [
    # LocalAI's distributed-mode docs page (mudler/LocalAI 82c191af)
    ["local-ai", "worker", "--register-to", "http://frontend:8080", "--nats-url", "nats://nats:4222"],
    ["local-ai", "worker", "--addr", "0.0.0.0:50051"],
    # v2/v3 docs: `local-ai worker p2p-llama-cpp-rpc`, `local-ai worker llama-cpp-rpc`
    ["local-ai", "worker", "p2p-llama-cpp-rpc", "--llama-cpp-args=-m 4096"],
    ["local-ai", "worker", "llama-cpp-rpc", "--llama-cpp-args=-H 0.0.0.0 -p 50052"],
    ["local-ai", "p2p-worker", "p2p-llama-cpp-rpc"],
    ["local-ai", "p2p-worker", "mlx-distributed", "--hostfile", "h.json", "--rank", "1"],
]


@pytest.mark.parametrize("argv", WORKERS, ids=lambda a: " ".join(a)[:60])
def test_workers_are_followers(argv: list[str]) -> None:
    assert argv_facts(argv) == ("localai", None, (), None, None, "follower")
    assert argv_facts([*argv, "--help"]) is None


RUNNERS = [
    # backend/cpp/llama-cpp/run.sh: exec "$CURDIR"/$BINARY "$@", with `--addr 127.0.0.1:N`
    (["/backends/cpu-llama-cpp/llama-cpp-cpu-all", "--addr", "127.0.0.1:37001"], 37001),
    (["/backends/cuda12-llama-cpp/llama-cpp-fallback", "--addr", "127.0.0.1:37002"], 37002),
    (["/build/backend-assets/grpc/llama-cpp-avx2", "--addr", "127.0.0.1:37003"], 37003),
    # ... or through its own loader: exec "$CURDIR"/lib/ld.so "$CURDIR"/$BINARY "$@"
    (["/backends/x/lib/ld.so", "/backends/x/llama-cpp-grpc", "--addr", "127.0.0.1:37004"], 37004),
]


@pytest.mark.parametrize(("argv", "port"), RUNNERS, ids=lambda v: str(v)[:60])
def test_backend_runners(argv: list[str], port: int) -> None:
    assert argv_facts(argv) == ("localai", None, (), "127.0.0.1", port, "runner")


def test_a_llama_cpp_named_program_without_addr_is_none() -> None:
    assert argv_facts(["/usr/bin/llama-cpp-python", "--port", "8000"]) is None
    assert argv_facts(["/opt/llama-cpp-tools", "convert", "x"]) is None


def test_secrets_are_secret_flags() -> None:
    flags = get_engine_spec("localai").signature.secret_flags
    assert {"--api-keys", "--registration-token", "--p2p-token"} <= flags


def test_server_runners_and_masked_keys_in_a_real_tree(procs: Procs, tmp_path: Path) -> None:
    """`local-ai run` started two backends (llama.cpp's binary, a Python backend.py next to its
    gRPC stubs): both are its runners; its API keys never show."""
    backend = tmp_path / "backends" / "vllm"
    backend.mkdir(parents=True)
    for name in ("backend.py", "backend_pb2.py", "backend_pb2_grpc.py", "run.sh"):
        (backend / name).write_text("")
    runners = [
        ["/srv/backends/cpu-llama-cpp/llama-cpp-cpu-all", "--addr", "127.0.0.1:37011"],
        [str(backend / "venv/bin/python"), str(backend / "backend.py"), "--addr", "127.0.0.1:37012"],
    ]
    server = procs.start(
        ["/usr/bin/local-ai", "run", "--api-keys", "sk-very-secret,sk-other", "phi-2"],
        HELPER_SPAWN=SEP.join(ARG.join(r) for r in runners),
        LOCALAI_ADDRESS="127.0.0.1:9311",
    )
    wanted = {tuple(r) for r in runners}
    wait_for(lambda: {tuple(cmdline_of(c)) for c in descendants_of(server.pid)} == wanted, timeout=20)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    top = found[server.pid]
    assert (top.engine, top.role, top.model, top.supervisor) == ("localai", "server", "phi-2", None)
    assert (top.host, top.port) == ("127.0.0.1", 9311)
    assert top.sources["port"] == "environment"
    shown = top.model_dump_json() + repr(top)
    assert "sk-very-secret" not in shown
    assert "sk-other" not in shown
    children = [found[c] for c in descendants_of(server.pid) if c in found]
    assert sorted((c.engine, c.role, c.supervisor, c.port) for c in children) == [
        ("localai", "runner", "localai", 37011),
        ("localai", "runner", "localai", 37012),
    ]
    # they speak gRPC to the server alone: no health, load or models request is sent them
    for child in children:
        health = check_health(child)
        assert health.state == "not_serving"
        assert health.reason == "a runner of localai speaks only to its supervisor, not HTTP: not checked"
        assert (
            check_load(child).reason
            == "a runner of localai speaks only to its supervisor, not HTTP: not read"
        )
        assert served_models(child).available is False


def test_python_backend_needs_its_stubs(procs: Procs, tmp_path: Path) -> None:
    """A `backend.py --addr` with no LocalAI gRPC stubs beside it is some other program."""
    (tmp_path / "backend.py").write_text("")
    proc = procs.start(["python3", str(tmp_path / "backend.py"), "--addr", "127.0.0.1:37013"])
    wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().count(b"\0") >= 3)
    assert proc.pid not in {p.pid for p in Scanner(listen_ports=False).scan()}


def test_worker_token_is_masked(procs: Procs) -> None:
    proc = procs.start(
        [
            "/usr/bin/local-ai",
            "worker",
            "--register-to",
            "http://frontend:8080",
            "--registration-token",
            "tok-hush",
        ]
    )
    found = scanned(proc.pid)
    assert (found.engine, found.role) == ("localai", "follower")
    assert "tok-hush" not in found.model_dump_json() + repr(found)
    assert check_health(found).state == "not_serving"


# -- over HTTP -----------------------------------------------------------------------------------


def _localai(procs: Procs, routes: dict[str, list[Answer]], *extra: str) -> Served:
    argv = ["/usr/bin/local-ai", "run", "--address", "127.0.0.1:{port}", *extra, "phi-2"]
    return engine_process(procs, argv, routes)


def test_readyz_starting_then_ready(procs: Procs) -> None:
    routes = {"/readyz": [Answer(503, STARTING), Answer(200, b"", content_type="text/plain")]}
    with _localai(procs, routes) as (process, server):
        first = check_health(process)
        assert first.state == "loading", first
        second = check_health(process)
        assert second.state == "ready", second
        # /readyz is public: no key is needed, and the health check sends none
        assert all("Authorization" not in h for _m, p, h in server.script.seen if p == "/readyz")


def test_identity_probe_answer() -> None:
    """LocalAI's discovery document (trimmed, as core/http/routes/localai.go builds it) passes
    the identity probe; llama-server's 404 and a look-alike 200 do not."""
    from enginespec.definition.records import HealthAnswer

    probe = get_engine_spec("localai").serving.identity
    assert probe is not None
    assert probe.path == "/.well-known/localai.json"
    body = json.dumps(
        {
            "version": "v4.9.0 (f7ad3f70)",
            "endpoints": {"models": "/v1/models"},
            "endpoint_groups": {"monitoring": {"backend_monitor": "/backend/monitor"}},
        }
    ).encode()
    assert probe.matches(HealthAnswer(200, body))
    assert not probe.matches(HealthAnswer(404, b'{"error":{"code":404,"message":"File Not Found"}}'))
    assert not probe.matches(HealthAnswer(200, b'{"endpoints": {"models": "/v1/models"}}'))


test_hostile_readyz_answers_are_said = hostile_health_test(
    _localai,
    "/readyz",
    [
        Answer(200, b"<html>llama.cpp</html>", content_type="text/html"),
        Answer(200, b"[" * 100_000),
        Answer(200, b'{"status": 5}'),
        Answer(503, b"not json"),
        Answer(503, b'{"status": ["starting"]}'),
        Answer(200, b"x" * 3_000_000, content_type="text/plain"),
    ],
    ids=["html", "deep", "wrong-type", "not-json", "list", "huge"],
)


#: core/http/endpoints/localai/system.go SystemInformations (82c191afa): phi-2 held
SYSTEM = Answer(200, b'{"backends":["llama-cpp"],"loaded_models":[{"id":"phi-2","backend":"llama-cpp"}]}')


def test_models_with_the_api_key(procs: Procs) -> None:
    # loaded: /system's loaded_models; the rest of /v1/models configured, not loaded
    routes = {
        "/readyz": [Answer(200, b"")],
        "/system": [SYSTEM],
        "/v1/models": [models("phi-2", "bert-embeddings")],
    }
    with _localai(procs, routes, "--api-keys", "sk-key-1") as (process, server):
        found = served_models(process)
        assert [(m.name, m.state) for m in found.models] == [
            ("phi-2", "loaded"),
            ("bert-embeddings", "unloaded"),
        ], found
        sent = [h.get("Authorization") for _m, p, h in server.script.seen if p in ("/system", "/v1/models")]
    assert len(sent) == 2
    assert all(s == "Bearer sk-key-1" for s in sent), server.script.seen
    assert "sk-key-1" not in found.model_dump_json()


@pytest.mark.parametrize(
    ("system", "read"),
    [
        # entries of the wrong type are left out: it holds none that can be named
        (Answer(200, b'{"loaded_models": [{"id": 7}, "x", null]}'), True),
        (Answer(200, b'{"loaded_models": {"id": "phi-2"}}'), False),
        (Answer(200, b"[" * 100_000, content_type="text/plain"), False),
        (Answer(200, b"<html>", content_type="text/html"), False),
        # more values than a document may hold: unread, and said
        (Answer(200, b'{"loaded_models": [' + b'{"id": "m"},' * 5000 + b'{"x": 1}]}'), False),
    ],
    ids=["wrong-types", "not-a-list", "deep", "html", "many"],
)
def test_hostile_models_answers(procs: Procs, system: Answer, read: bool) -> None:
    routes = {
        "/readyz": [Answer(200, b"")],
        "/system": [system],
        "/v1/models": [Answer(200, b'{"data": [{"id": 7}]}')],
    }
    with _localai(procs, routes) as (process, _server):
        found = served_models(process)
    assert [m.name for m in found.models] in ([], ["m"]), found
    assert found.available is read, found
    assert read or found.reason, found
