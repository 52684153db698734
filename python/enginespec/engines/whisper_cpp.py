"""whisper.cpp's HTTP server: ``whisper-server`` (examples/server/server.cpp).

Facts from ggml-org/whisper.cpp tag v1.9.3 (``371b5a75``), examples/server/server.cpp
(``whisper_params_parse``, ``main``) and examples/server/CMakeLists.txt; older tags where a line
says so.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, HealthRule, IdentityProbe, Launch, Serving
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

# Every option that sets a bool and takes no argument, short and long, in whisper_params_parse at
# v1.9.3, with `-su/--speed-up` (v1.6.0) and `-nc/--no-context` (v1.7.6 to v1.8.x) of older tags.
# Every other option reads `argv[++i]`, whatever it is (`-lpt -1`).
_NO_VALUE = {
    "--debug-mode": "-debug",
    "--translate": "-tr",
    "--diarize": "-di",
    "--tinydiarize": "-tdrz",
    "--split-on-word": "-sow",
    "--no-fallback": "-nf",
    "--print-special": "-ps",
    "--print-colors": "-pc",
    "--print-realtime": "-pr",
    "--print-progress": "-pp",
    "--no-timestamps": "-nt",
    "--detect-language": "-dl",
    "--no-gpu": "-ng",
    "--flash-attn": "-fa",
    "--no-flash-attn": "-nfa",
    "--suppress-nst": "-sns",
    "--no-language-probabilities": "-nlp",
    "--speed-up": "-su",
    "--no-context": "-nc",
}

SIGNATURE = Signature(
    engine="whisper-cpp",
    launch_forms=(
        # CMake target `whisper-server` since v1.7.4 (`server` before, a name left to llama.cpp's
        # own pre-rename server: not claimed), built as build/bin/whisper-server. Its parser
        # takes no positional: anything it does not know is "error: unknown argument", after
        # which it prints the usage and exits.
        LaunchForm(executables=("whisper-server",), max_positionals=0),
    ),
    # `-m/--model`; `-p` is --processors and `-d` --duration: the server's address has no short
    # spelling (`--host`, `--port` only).
    aliases={"-m": "--model", **{short: long for long, short in _NO_VALUE.items()}},
    model_flags=("--model",),
    host_flags=("--host",),
    port_flags=("--port",),
    no_value_flags=frozenset({*_NO_VALUE, "--carry-initial-prompt", "--convert", "--vad"}),
    # `-h/--help` prints the usage and exits; so does an unknown argument (not modelled).
    exit_flags=frozenset({"-h", "--help"}),
    # server_params: hostname "127.0.0.1", port 8080 (llama-server's too: see the identity).
    default_host="127.0.0.1",
    default_port=8080,
)


SPEC = EngineSpec(
    id="whisper-cpp",
    aliases=("whisper.cpp", "whisper-server"),
    signature=SIGNATURE,
    # No --version; not on PyPI: built from the repository with CMake (a configured command).
    launch=Launch(kind="binary", executable="whisper-server", version_args=("--help",)),
    # each option reads one argument (`argv[++i]`): a list is the option repeated
    flags=Flags(list_style="repeat"),
    serving=Serving(
        # main() loads the model (whisper_init_from_file_with_params) before bind_to_port, so the
        # port refuses until then. GET /health (since v1.7.6; under --request-path): 200
        # {"status":"ok"}, or 503 {"status":"loading model"} while POST /load swaps the model.
        # Before v1.7.6 there is no /health: its error handler answers 404 "File Not Found
        # (/health)", from a server that listens only with its model loaded.
        health_path="/health",
        health_rules=(
            HealthRule(
                status=503,
                field="status",
                equals="loading model",
                state="loading",
                reason="whisper-server is loading a model (POST /load)",
            ),
            HealthRule(
                status=404,
                contains="File Not Found (/health)",
                state="ready",
                reason="a whisper-server before v1.7.6 (no /health) listens only once its model is loaded",
            ),
        ),
        # llama-server also defaults to 127.0.0.1:8080 and also answers /health {"status":"ok"};
        # GET / here is whisper's own page, `<title>Whisper.cpp Server</title>` (default_content,
        # since v1.6.0 at least), which llama-server's web UI is not.
        identity=IdentityProbe(path="/", status=200, contains="<title>Whisper.cpp Server</title>"),
    ),
    # its model loader (src/whisper.cpp whisper_init_from_file_with_params_no_state at 233fe1fc9:
    # `%s: failed to open '%s'`), and the NPU builds' Vitis AI encoder (AMD's, in Lemonade's
    # releases; seen in logs only: `Failed to open rai file '...'`, `failed to load Vitis AI model
    # from '...'`), then ggml's layers
    failures=Failures(
        patterns=(
            FailurePattern(
                kind="model_not_found",
                pattern=r"whisper_init_from_file\w*: failed to open '|Failed to open rai file '|"
                r"failed to load Vitis AI model from '",
            ),
        )
    )
    + _libraries.LLAMA_CPP,
)
