"""llmman: ``llmman serve [MODEL]``, a daemon speaking the Ollama, OpenAI and Anthropic APIs that
starts one backend server per loaded model (``llama-server``, or ``vllm``, ``sglang``,
``mlx_lm.server`` for safetensors models) on a random loopback port.

Facts from llmmanorg/llmman (Rust, clap derive): src/main.rs at ``0e7a3ed8`` (``Cli``,
``Commands``), src/cmd/serve.rs at ``0b189328`` (``ServeArgs``), src/daemon.rs at ``00edca39``
(the address and ``/api/version``), its HTTP API doc at ``3801fbbb``
(routes, authentication).
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, IdentityProbe, Launch, Serving, Settings
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import llamacpp
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="llmman",
    launch_forms=(
        # `llmman serve [MODEL]` (Commands::Serve, ServeArgs): MODEL, optional, is pre-loaded at
        # start (`hf.co/unsloth/Qwen3.5-0.8B-GGUF:latest`); the CLI's clients (`run`, `launch`,
        # `pull`, ...) start the same `llmman serve` detached when none answers
        # (daemon.rs ensure_server, passing a model to pre-load only for `launch`). Every other
        # command (launch, run, build, login, logout, push, pull, resolve, transfer, verify,
        # list/ls, ps, providers, config, cp, rm, stop, show, gpu-discover) is a client or a tool.
        # clap: one positional at most, a long option without its value is an error.
        LaunchForm(executables=("llmman",), subcommand=("serve",), positional_model=True, max_positionals=1),
    ),
    # `--pull-oci` (with `--ociman`) and `--pull-bin` download the llama.cpp image or binary and
    # exit without binding the listener; `-V/--version` (`propagate_version`), `-h/--help`.
    no_value_flags=frozenset({"--pull-oci", "--pull-bin"}),
    exit_flags=frozenset({"--pull-oci", "--pull-bin", "-h", "--help", "-V", "--version"}),
    values_required=True,
    # No address flag: `LLMMAN_HOST` `[scheme://]host[:port]`, default 127.0.0.1:17434
    # (daemon.rs DEFAULT_HOST, DEFAULT_PORT, parse_host; serve binds bind_addr()).
    default_host="127.0.0.1",
    default_port=17434,
)

SPEC = EngineSpec(
    id="llmman",
    signature=SIGNATURE,
    # Release binaries, Homebrew tap, Scoop bucket (README); not installed by enginespec.
    launch=Launch(kind="binary", executable="llmman", args=("serve",)),
    # clap: an option given several values is given once per value
    flags=Flags(list_style="repeat"),
    serving=Serving(
        # No health route of its own (its API doc lists none): `GET /api/version` (Ollama's route)
        # answers {"version", "exe", "pid"} once it serves, what its own CLI checks a daemon by
        # (daemon.rs stale_daemon). Models load on request: an answering daemon is ready. With
        # `LLMMAN_API_KEYS` set every route but the web UI's files wants a key (its API doc
        # "Authentication"), sent as `Authorization: Bearer`.
        health_path="/api/version",
        health_authorized=True,
        version_path="/api/version",
        version_key="version",
        # Ollama's own /api/version has `version` alone; llmman's adds its executable (`exe`).
        identity=IdentityProbe(path="/api/version", status=200, contains='"exe"'),
        # a comma-separated list of keys (its HTTP API doc, "Authentication"): the first is sent
        api_key_env=("LLMMAN_API_KEYS",),
        api_key_separator=",",
        # The backend servers it starts (direct children, a random loopback port each; its API doc
        # "Model lifecycle") are its runners.
        starts_runners=True,
    ),
    settings=Settings(environment={"LLMMAN_HOST": "address"}),
    # A Rust daemon (clap) whose runners are llama-server and Python servers: llama.cpp's
    # messages, then the layers every process passes through
    failures=_libraries.CLAP + llamacpp.FAILURES + _libraries.BASE,
)
