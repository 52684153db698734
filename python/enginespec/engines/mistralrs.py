"""mistral.rs: ``mistralrs serve`` (the ``mistralrs`` CLI, ``mistralrs-cli``), and the older
``mistralrs-server --port N <model kind> -m MODEL`` binary.

Facts from EricLBuehler/mistral.rs: the ``mistralrs`` CLI at tag ``v0.9.2`` (``d184053f``), the
``mistralrs-server`` binary at tag ``v0.8.4``, its last release (``v0.8.5`` has only the CLI); the
files cited below are at those tags. Both parse argv with clap (derive).
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    Flags,
    IdentityProbe,
    Launch,
    LoadMetrics,
    Serving,
)
from enginespec.definition.signature import Evidence, LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

# Flags that take no value: every `bool` field (clap's SetTrue) and every `ArgAction::Count` of
# the options `serve` takes (mistralrs-cli/src/args/{mod,model,server,paged_attn,sandbox}.rs at
# v0.9.2: ServerOptions, RuntimeOptions, AgentCliOptions, the model options, GlobalOptions) and
# of `mistralrs-server` (mistralrs-server/src/main.rs Args and mistralrs-core/src/
# model_selected.rs ModelSelected at v0.8.4). Left out on purpose, as taking a value: `--thinking`
# (`num_args = 0..=1`, an optional value), `--paged-attn` (a value in the CLI, a bool in
# mistralrs-server) and `-i` (mistralrs-server's `--interactive-mode`, but `--imatrix` inside a
# model kind): a flag wrongly taken to have a value can only hide a positional, never invent one.
_NO_VALUE_FLAGS = frozenset(
    {
        # mistralrs serve (v0.9.2)
        "--no-ui",
        "--disable-access-log",
        "--access-log-health",
        "--disable-request-id-header",
        "--disable-metrics",
        "--no-kv-cache",
        "--mtp",
        "--agent",
        "--enable-search",
        "--enable-code-execution",
        "--enable-shell",
        "--enable-lora",
        "--cpu",
        "--verbose",
        # mistralrs-server (v0.8.4)
        "--interactive-mode",
        "--no-paged-attn",
    }
)

SIGNATURE = Signature(
    engine="mistralrs",
    launch_forms=(
        # `mistralrs serve [OPTIONS] [auto|text|multimodal|diffusion|speech|embedding] ...`
        # (mistralrs-cli/src/args/mod.rs Command::Serve; the binary is `mistralrs`,
        # mistralrs-cli/Cargo.toml [[bin]]). Its other commands (run, tune, bench, quantize, uqff,
        # doctor, login, cache, completions, update, uninstall) serve nothing; `from-config`
        # serves when its TOML says so, with the address in the file: not recognised. No command
        # takes a positional argument but the optional model kind, so a second one is a clap
        # usage error.
        LaunchForm(executables=("mistralrs",), subcommand=("serve",), max_positionals=1),
        # `mistralrs-server [OPTIONS] <plain|gguf|vision-plain|run|...> [KIND OPTIONS]`
        # (mistralrs-server/src/main.rs Args, `#[clap(subcommand)] model: ModelSelected`): the
        # model kind is its one positional. It serves HTTP only with `--port`: without one it
        # bails ("Interactive mode was not specified, so expected port to be specified") or, with
        # only `--mcp-port`, serves MCP alone (main.rs main).
        LaunchForm(
            executables=("mistralrs-server",),
            max_positionals=1,
            evidence=Evidence(any_flags=("--port",)),
        ),
    ),
    aliases={
        "-m": "--model-id",
        "-f": "--quantized-file",
        "-p": "--port",
        "-v": "--verbose",
        "--agentic": "--agent",
    },
    # `-m/--model-id` (DefaultModelOptions, ModelSourceOptions; `plain -m`), mistralrs-server's
    # GGUF kinds' `-m/--quantized-model-id` (a repo or directory) and, when no `-m` names one,
    # the CLI's `-f/--quantized-file` (its local GGUF file: FormatOptions::derive_local_model_root)
    # or mistralrs-server's `--quantized-filename`. No served-name flag: clients name the model by
    # its model id, or `default` (mistralrs-server-core/src/handlers.rs models).
    model_flags=("--model-id", "--quantized-model-id", "--quantized-file", "--quantized-filename"),
    # `--host` (server.rs ServerOptions), mistralrs-server's `--serve-ip`.
    host_flags=("--host", "--serve-ip"),
    port_flags=("--port",),
    no_value_flags=_NO_VALUE_FLAGS,
    # `--lora` (num_args = 1.., mistralrs-cli/src/args/model.rs AdapterOptions).
    multi_value_flags=frozenset({"--lora"}),
    exit_flags=frozenset({"-h", "--help", "-V", "--version"}),
    # `--interactive-mode` runs a chat in the terminal instead of the server, even with `--port`
    # (mistralrs-server/src/main.rs main returns after interactive_mode).
    mode_flags={"--interactive-mode": False},
    # `--token-source literal:<token>` carries a Hugging Face token (TokenSource, parse_token_source;
    # GlobalOptions in the CLI, Args in mistralrs-server): the whole value is hidden.
    secret_flags=frozenset({"--token-source"}),
    # ServerOptions: `port` default_value_t = 1234, `host` default_value = "0.0.0.0"
    # (mistralrs-cli/src/args/server.rs); mistralrs-server has no default port (see above) and
    # binds `serve_ip.unwrap_or_else(|| "0.0.0.0")`.
    default_host="0.0.0.0",
    default_port=1234,
)

SPEC = EngineSpec(
    id="mistralrs",
    aliases=("mistral.rs", "mistralrs-server"),
    signature=SIGNATURE,
    # Install is left to mistral.rs's own install.sh (a prebuilt binary per platform, else a
    # source build: README.md "Install"); the `mistralrs` PyPI package is the Python binding,
    # not the server. `mistralrs --version` prints `mistralrs <version>` (clap `version`,
    # `propagate_version`).
    launch=Launch(kind="binary", executable="mistralrs", args=("serve",)),
    flags=Flags(
        # clap: an option given several values is given once per value
        list_style="repeat",
        fields={
            # RuntimeOptions `--max-seqs` (default 32), DefaultModelOptions `--dtype`.
            "max_num_seqs": ("--max-seqs",),
            "dtype": ("--dtype",),
        },
    ),
    serving=Serving(
        # `GET /health` answers 200 `OK` (mistralrs-server-core/src/handlers.rs health, routed in
        # mistralrs_server_router_builder.rs). The model loads before the listener is bound
        # (mistralrs-cli/src/commands/serve.rs: builder.build() then TcpListener::bind), so the
        # port refuses connections until the server is ready.
        # LM Studio also defaults to 1234: `GET /v1/system/info` (SYSTEM_INFO_ROUTE,
        # handlers.rs system_info, since v0.7.0) is mistral.rs's own route, a SystemInfo whose
        # `hf_cache_path` member (mistralrs-core/src/diagnostics.rs) no other server writes.
        identity=IdentityProbe(path="/v1/system/info", status=200, contains='"hf_cache_path"'),
    ),
    # `GET /metrics`, Prometheus text, on unless `--disable-metrics` (server.rs ServerOptions,
    # observability_config). Names from v0.9 on (mistralrs-core/src/engine/logger.rs):
    # sequences running and waiting are gauges; `mistralrs_tokens_processed_total` counts prompt
    # and generated tokens together, so it is progress, neither of the token figures.
    load=LoadMetrics(
        kind="prometheus",
        disable_flag="--disable-metrics",
        requests_running=("mistralrs_sequences_running",),
        requests_waiting=("mistralrs_sequences_waiting",),
        progress=("mistralrs_tokens_processed_total",),
    ),
    # clap usage errors; a taken port fails `TcpListener::bind(..).await?`, which anyhow prints as
    # `Error: Address already in use (os error 98)` (serve.rs run_server).
    failures=_libraries.CLAP
    + Failures(
        patterns=(
            # mistralrs-core's GGUF loader (src/gguf/mod.rs, GGUFArchitecture::from_value:
            # format!("Unknown GGUF architecture `{value}`"), through anyhow and an unwrap)
            FailurePattern(
                kind="unsupported_architecture",
                pattern=r"Unknown GGUF architecture `",
                hint="this mistral.rs release cannot load that architecture from GGUF: upgrade, or load the "
                "safetensors model",
            ),
            # candle-core's GGUF reader (src/quantized/mod.rs, GgmlDType::from_u32: `unknown dtype for
            # tensor {u}`): a quantization type this build does not know
            FailurePattern(kind="unsupported_architecture", pattern=r"unknown dtype for tensor \d+"),
            # mistralrs-core's get_paths! macro (src/pipeline/macros.rs: panic!("File \"{}\" not found at
            # model id {:?}", ...)): a file of the model neither local nor given by the hub
            FailurePattern(kind="model_not_found", pattern=r'^File "[^"]+" not found at model id '),
        )
    )
    # then candle's and cudarc's CUDA errors and the layers every process passes through
    + _libraries.NATIVE_SERVER,
)
