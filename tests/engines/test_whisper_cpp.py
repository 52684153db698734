"""whisper.cpp's ``whisper-server`` (on the active backend): its launch form, facts and defaults,
the options that take no value (so a value-less flag never hides the next one), look-alikes, the
2026 corpus's record, and a real process with its exact argv holding the socket a fake
whisper-server answers on (health and its states, identity against llama-server on 8080, hostile
answers). Facts: ggml-org/whisper.cpp v1.9.3 (engines/whisper_cpp.py)."""

from __future__ import annotations

from typing import Any

from enginespec import get_engine_spec, parse_argv
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer, serving
from helpers.procs import Procs
from helpers.simpleservers import engine_process, identified
from helpers.tabletests import argv_tests

WS = "whisper-server"

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # public code search: READMEs, a start script, a proxy config's command
    (
        [
            WS,
            "-m",
            "/path/to/ggml-large-v3-turbo-q5_0.bin",
            "--host",
            "127.0.0.1",
            "--port",
            "8090",
            "-l",
            "ja",
            "--convert",
        ],
        ("whisper-cpp", "/path/to/ggml-large-v3-turbo-q5_0.bin", None, "127.0.0.1", 8090, "server"),
    ),
    (
        ["./whisper-server", "-m", "models/ggml-large-v3.bin", "--port", "2022"],
        ("whisper-cpp", "models/ggml-large-v3.bin", None, None, 2022, "server"),
    ),
    (
        ["/bin/whisper-server", "-m", "/home/x/models/w/w.bin", "--request-path", "/v1/audio"],
        ("whisper-cpp", "/home/x/models/w/w.bin", None, None, None, "server"),
    ),
    (
        [
            "./build/bin/whisper-server",
            "-m",
            "models/ggml-large-v3-turbo.bin",
            "--inference-path",
            "/audio/transcriptions",
            "-l",
            "ja",
        ],
        ("whisper-cpp", "models/ggml-large-v3-turbo.bin", None, None, None, "server"),
    ),
    (
        [
            "./build/bin/whisper-server",
            "-m",
            "models/ggml-base.en.bin",
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--convert",
        ],
        ("whisper-cpp", "models/ggml-base.en.bin", None, "0.0.0.0", 8080, "server"),
    ),
    (
        ["/app/whisper-server", "-m", "/models/w.bin", "--host", "0.0.0.0", "--port", "8081"],
        ("whisper-cpp", "/models/w.bin", None, "0.0.0.0", 8081, "server"),
    ),
    # value-less options, short and long, before the facts; `-p` is --processors, not the port
    ([WS, "-nt", "-m", "m.bin", "-fa", "--port", "9"], ("whisper-cpp", "m.bin", None, None, 9, "server")),
    (
        [WS, "--vad", "-vm", "vad.bin", "--model", "m.bin", "-p", "4", "-t", "8"],
        ("whisper-cpp", "m.bin", None, None, None, "server"),
    ),
    ([WS, "-su", "-nc", "-tdrz", "-m", "m.bin"], ("whisper-cpp", "m.bin", None, None, None, "server")),
    # no model: the default models/ggml-base.en.bin is not argv's
    ([WS, "--host", "::", "--port", "1"], ("whisper-cpp", None, None, "::", 1, "server")),
]

NOT_SERVERS: list[list[str]] = [
    [WS, "-h"],
    [WS, "-m", "m.bin", "--help"],
    [WS, "models/ggml-base.en.bin"],  # "error: unknown argument", usage, exit
    ["whisper-cli", "-m", "models/ggml-base.en.bin", "-f", "samples/jfk.wav"],
    ["./build/bin/whisper-stream", "-m", "models/ggml-base.en.bin", "-t", "8"],
    ["whisper", "audio.mp3", "--model", "small"],  # openai-whisper's CLI
    ["bash", "./models/download-ggml-model.sh", "base.en"],
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


def test_every_value_less_option_leaves_the_next_option_alone() -> None:
    signature = get_engine_spec("whisper-cpp").signature
    spellings = [f for f in signature.no_value_flags] + [
        a for a, f in signature.aliases.items() if f != "--model"
    ]
    for flag in spellings:
        inv = parse_argv([WS, flag, "-m", "m.bin", "--port", "5"])
        assert inv is not None, flag
        assert (inv.model, inv.port) == ("m.bin", 5), flag


def test_defaults() -> None:
    spec = get_engine_spec("whisper-cpp")
    assert (spec.signature.default_host, spec.signature.default_port) == ("127.0.0.1", 8080)


def test_health_states(procs: Procs) -> None:
    routes = {
        "/health": [
            Answer(200, b'{"status":"ok"}'),
            Answer(503, b'{"status":"loading model"}'),
            Answer(404, b"File Not Found (/health)", content_type="text/plain"),
            Answer(503, b"[" * 100_000),
        ]
    }
    with engine_process(procs, [WS, "-m", "models/ggml-base.en.bin", "--host", "127.0.0.1"], routes) as (
        process,
        _server,
    ):
        assert check_health(process).state == "ready"
        assert check_health(process).state == "loading"  # POST /load swapping the model
        old = check_health(process)  # a build before /health (v1.7.6)
        assert old.state == "ready"
        assert "v1.7.6" in old.reason
        assert check_health(process).state == "unhealthy"  # hostile: said, not followed


# the page whisper-server answers at GET / (server.cpp default_content, trimmed)
PAGE = b"""
    <html>
    <head>
        <title>Whisper.cpp Server</title>
        <meta charset="utf-8">
    </head>
    <body>
        <h1>Whisper.cpp Server</h1>
"""
# llama-server's web UI at GET / (its index.html, trimmed)
LLAMA_PAGE = (
    b'<!doctype html><html lang="en"><head><meta charset="UTF-8"><title>llama.cpp - chat</title></head>'
)


def test_identity_tells_whisper_server_from_llama_server_on_8080() -> None:
    with serving({"/": [Answer(200, PAGE, content_type="text/html")]}) as whisper:
        assert identified("whisper-cpp", whisper.url)
    with serving({"/": [Answer(200, LLAMA_PAGE, content_type="text/html")]}) as llama:
        assert not identified("whisper-cpp", llama.url)
    for hostile in (Answer(404, PAGE), Answer(200, b"[" * 100_000), Answer(200, b"\xff\xfe" * 1000)):
        with serving({"/": [hostile]}) as other:
            assert not identified("whisper-cpp", other.url)
