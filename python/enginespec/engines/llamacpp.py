"""llama.cpp's ``llama-server``."""

from __future__ import annotations

import json
import re

import enginespec.engines._libraries as _libraries
from enginespec.definition import Flags, Launch, LoadMetrics, Package, Serving, Settings, SourceBuild
from enginespec.failures import FailurePattern, Failures
from enginespec.signature import Evidence, LaunchForm, Signature
from enginespec.spec import EngineSpec
from enginespec.status import HealthState

SIGNATURE = Signature(
    engine="llamacpp",
    launch_forms=(
        LaunchForm(executables=("llama-server",)),
        # Renamed builds kept side by side (llama-swap's configs name them by build or backend:
        # `llama-server-b5678`, `llama-server-cuda`).
        LaunchForm(executable_prefixes=("llama-server-",)),
        # Builds before the June 2024 rename (ggml-org/llama.cpp#7809) called the server `server`
        # (`./server`, `server.exe`): a name far too common to trust alone, so only with a GGUF
        # model and a flag only llama.cpp has.
        LaunchForm(
            executables=("server",),
            evidence=Evidence(
                model_suffixes=(".gguf",),
                any_flags=("--n-gpu-layers", "--ctx-size", "--mlock", "--parallel"),
            ),
        ),
        # The unified `llama` binary (app/llama.cpp, ggml-org/llama.cpp#23459): `llama serve` (alias
        # `llama server`) runs llama-server's own main on the arguments that follow.
        LaunchForm(executables=("llama",), subcommand=("serve",)),
        LaunchForm(executables=("llama",), subcommand=("server",)),
        # The RPC backend a multi-host llama-server offloads layers to (`llama-server --rpc
        # host:50052`): it holds its machine's GPU and serves no HTTP API; its `-H`/`-p` are its RPC
        # socket's, `-d` its devices (tools/rpc/rpc-server.cpp of the llama.cpp that
        # llama-cpp-python 0.3.35 vendors). Its own parser (rpc_server_params_parse) takes the
        # next argument as the value of -H/--host and -p/--port and exits when there is none: the
        # listen address is what an operator needs to see (still no HTTP API, never probed).
        LaunchForm(
            executables=("rpc-server",),
            role="follower",
            facts=False,
            host_flags=("-H", "--host"),
            port_flags=("-p", "--port"),
        ),
    ),
    # Short and long spellings of the same option (llama.cpp 0c1e57098, common/arg.cpp).
    # `-md`/`--model-draft`, `-hfd`, `-mm`/`--mmproj` are other models and are deliberately absent.
    # Every `--` option's `_` is read as `-` (common_params_parse_ex).
    underscore_is_dash=True,
    aliases={
        "-m": "--model",
        "-hf": "--hf-repo",
        "-hfr": "--hf-repo",
        "-dr": "--docker-repo",
        "-mu": "--model-url",
        "-a": "--alias",
        "-c": "--ctx-size",
        "-ngl": "--n-gpu-layers",
        "--gpu-layers": "--n-gpu-layers",
        "-np": "--parallel",
        "-ctk": "--cache-type-k",
        "-ctv": "--cache-type-v",
        "-fa": "--flash-attn",
        "-hft": "--hf-token",
    },
    model_flags=("--model", "--hf-repo", "--docker-repo", "--model-url"),
    served_name_flags=("--alias",),
    # `--alias a,b` gives the model several names (llama.cpp 0c1e57098, common/arg.cpp splits it).
    served_name_separator=",",
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset(
        {"-h", "--help", "--usage", "--version", "--list-devices", "--completion-bash", "-cl", "--cache-list"}
    ),
    secret_flags=frozenset({"--api-key", "--hf-token"}),
    default_host="127.0.0.1",
    default_port=8080,
)


# `llama-server --version` prints on stderr: `version: 0.5.0-dev (build 1, commit 0c1e570)`
# (llama.cpp 0c1e57098, common/build-info.cpp.in), older builds `version: 9439 (47f6423ed)`
# (e3a74b299, common/arg.cpp). Without git, build 0 and commit `unknown` (cmake/build-info.cmake).
_VERSION_LINE = re.compile(r"version:\s*(\S+)(?:\s+\(([^)]*)\))?")
_NEW_DETAILS = re.compile(r"build (\d+), commit ([0-9A-Za-z]+)")
_OLD_DETAILS = re.compile(r"[0-9a-f]{4,40}")
_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(-dev)?")


def pep440_version(release: str, build: str | None, commit: str | None) -> str:
    """llama.cpp's version, build number and commit in one PEP 440 version, so that two builds
    compare unequal: ``0.5.0-dev`` build 1 commit ``0c1e570`` is ``0.5.0.dev0+b1.g0c1e570``, the
    old ``9439 (47f6423ed)`` is ``9439+g47f6423ed`` (the local label's ``g<commit>``, as
    setuptools-scm writes it, is what a source build is compared by)."""
    match = _RELEASE.fullmatch(release)
    version = (match.group(1) + (".dev0" if match.group(2) else "")) if match else release
    local = [f"b{build}"] if build is not None else []
    if commit and commit != "unknown":
        local.append(f"g{commit.lower()}")
    return version + ("+" + ".".join(local) if local else "")


class LlamaCppSpec(EngineSpec):
    # While the model loads every endpoint answers 503 {"error": {"message": "Loading model", ...}};
    # once ready /health is 200 {"status": "ok"} (llama.cpp 0c1e57098, tools/server/server-http.cpp
    # middleware_server_state and tools/server/server-context.cpp get_health).
    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        if status == 503 and b"Loading model" in body:
            return "loading", "loading model"
        if status == 200:
            try:
                ok = json.loads(body).get("status") == "ok"
            except (ValueError, AttributeError):
                ok = False
            return ("ready", "") if ok else ("unknown", "unexpected /health body")
        return super().classify_health(status, body)

    def parse_version(self, output: str) -> str | None:
        match = _VERSION_LINE.search(output)
        if not match:
            return None
        release, details = match.group(1), match.group(2) or ""
        new = _NEW_DETAILS.fullmatch(details)
        if new:
            return pep440_version(release, new.group(1), new.group(2))
        return pep440_version(release, None, details if _OLD_DETAILS.fullmatch(details) else None)


# Why a start failed: llama-server's own messages (b6000: common/arg.cpp `error: invalid
# argument: X`; tools/server/server.cpp `couldn't bind HTTP server socket, hostname: H, port: P`),
# then the GGML loader's.
P = FailurePattern

FAILURES = (
    Failures(
        patterns=(
            P(
                kind="bad_flag",
                pattern=r"^\s*error: (?:invalid argument|unknown argument|expected value for argument)|"
                r"error while handling (?:argument|environment variable)",
            ),
            P(
                kind="port_in_use",
                pattern=r"couldn't bind HTTP server socket, hostname: (?P<host>\S+), port: (?P<port>\d+)",
                hint="port {port} is taken: choose another --port or stop the process holding it",
            ),
        )
    )
    + _libraries.LLAMA_CPP
).model_copy(update={"wrappers": (r"exiting due to model loading error", r"failed to load model\s*$")})

SPEC = LlamaCppSpec(
    id="llamacpp",
    signature=SIGNATURE,
    launch=Launch(kind="binary", executable="llama-server"),
    flags=Flags(
        fields={
            "max_model_len": ("--ctx-size",),
            "gpu_layers": ("--n-gpu-layers",),
            "max_num_seqs": ("--parallel",),
            # one KV-cache type for both halves of the cache
            "kv_cache_dtype": ("--cache-type-k", "--cache-type-v"),
            "reasoning_parser": ("--reasoning-format",),
            "chat_template": ("--chat-template-file",),
        },
        # Repeated options (--lora a --lora b), never argparse-style nargs (llama.cpp 0c1e57098,
        # common/arg.cpp; other list options there also take one comma-separated value).
        list_style="repeat",
    ),
    # No wheel ships llama-server: a configured command, or a cmake build of llama.cpp's tree (its
    # root holds ggml/; llama-cpp-python's sdist vendors it under vendor/llama.cpp). Only the server;
    # no libcurl (models are given as paths); portable CPU code.
    package=Package(
        source_build=SourceBuild(
            marker="ggml",
            cmake_options=(
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=ON",
                "-DGGML_NATIVE=OFF",
            ),
            # CMakeLists.txt: `if (NOT DEFINED LLAMA_BUILD_COMMIT)` takes git's otherwise
            commit_variable="LLAMA_BUILD_COMMIT",
        )
    ),
    serving=Serving(
        api_key_flag="--api-key",
        api_key_env=("LLAMA_API_KEY",),
        # A --host ending in `.sock` is a unix socket (llama.cpp 0c1e57098, tools/server/server-http.cpp).
        socket_host=True,
        # Ollama and llama-swap start llama-server children on loopback ports; a llama-server in
        # router mode (given no model; llama.cpp 0c1e57098, tools/server/server-models.cpp) starts
        # one per model.
        supervisors={"ollama": "ollama", "llama-swap": "llama-swap"},
        nested_supervisor="llama-server",
    ),
    # Every option has an environment twin; the command line wins (llama.cpp 0c1e57098,
    # common/arg.cpp set_env and common_params_parse_ex).
    settings=Settings(
        environment={
            "LLAMA_ARG_MODEL": "model",
            "LLAMA_ARG_MODEL_URL": "model",
            "LLAMA_ARG_HF_REPO": "model",
            "LLAMA_ARG_DOCKER_REPO": "model",
            "LLAMA_ARG_ALIAS": "served_model_name",
            "LLAMA_ARG_HOST": "host",
            "LLAMA_ARG_PORT": "port",
        }
    ),
    failures=FAILURES,
    # `/metrics` only with `--metrics` (else HTTP 501; tools/server/server-context.cpp, the
    # metrics handler, and README "GET /metrics"): `requests_processing` and `requests_deferred`
    # gauges, `prompt_tokens_total` and `tokens_predicted_total` counters. Older builds (2024)
    # also had `llamacpp:kv_cache_usage_ratio`; current ones have no KV gauge (`/slots` then).
    load=LoadMetrics(
        kind="prometheus",
        enable_flag="--metrics",
        requests_running=("llamacpp:requests_processing",),
        requests_waiting=("llamacpp:requests_deferred",),
        kv_cache_usage=("llamacpp:kv_cache_usage_ratio",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generated_tokens=("llamacpp:tokens_predicted_total",),
    ),
)
