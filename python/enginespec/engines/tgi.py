"""Hugging Face Text Generation Inference: ``text-generation-launcher``.

Facts are from TGI v3.3.7 (``dfb3fbe7``): launcher/src/main.rs (struct ``Args``, clap 4),
router/src/server.rs and backends/llamacpp/src/main.rs. IBM's fork TGIS (IBM/text-generation-inference
at ``006006d``, the runtime Open Data Hub and OpenShift AI ship as ``text-generation-launcher``)
keeps the launcher's name and TGI v0.1's ``--model-name``.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    ExtraPort,
    Flags,
    HealthRule,
    IdentityProbe,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Serving,
    Settings,
)
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

# Every clap `bool` option, which takes no value (clap derive: ArgAction::SetTrue), of the
# launcher at any tag from v0.1 to v3.3.7 (launcher/src/main.rs `struct Args`), and of the llama.cpp
# backend's router (backends/llamacpp/src/main.rs). `--sharded` is an `Option<bool>` and takes one;
# `--quantize` was a bool in the first releases and takes a value since.
_BOOLEAN_FLAGS = frozenset(
    {
        "--trust-remote-code",
        "--disable-custom-kernels",
        "--json-output",
        "--ngrok",
        "--disable-grammar-support",
        "--env",
        "--enable-prefill-logprobs",
        "--enable-cuda-graphs",
        "--disable-usage-stats",
        "--disable-crash-reports",
        "--use-mmap",
        "--use-mlock",
        "--offload-kqv",
        "--flash-attention",
        # TGIS (launcher/src/main.rs at 006006d): its other bools are `--json-output` and
        # `--default-include-stop-seqs`, which takes a value (ArgAction::Set)
        "--output-special-tokens",
    }
)

SIGNATURE = Signature(
    engine="tgi",
    launch_forms=(
        # The image's ENTRYPOINT /tgi-entrypoint.sh ends in `exec text-generation-launcher $@`, so
        # the kernel shows the launcher's own argv (Dockerfile, tgi-entrypoint.sh). The launcher
        # starts `text-generation-server download-weights|serve` per shard and then
        # `text-generation-router`, which serves HTTP: those are its workers (fold_workers), never
        # servers of their own. The TensorRT-LLM backend's image names its binary
        # ./text-generation-launcher too (Dockerfile_trtllm).
        # clap: the launcher's Args has no positional, so any positional argument is "unexpected
        # argument '...' found" and the launcher exits 2 (`text-generation-launcher /bin/sh -c ...`
        # from an image whose ENTRYPOINT is the launcher, a lone " " after a `\ `).
        LaunchForm(executables=("text-generation-launcher",), max_positionals=0),
        # The llama.cpp backend's image runs this router directly (Dockerfile_llamacpp); it takes
        # the same --model-id/--hostname/--port (backends/llamacpp/src/main.rs; its --port default
        # there is 3001, not the launcher's 3000).
        LaunchForm(executables=("text-generation-router-llamacpp",), max_positionals=0),
    ),
    # Two options claim `-p` (port and prometheus_port); clap's MKeyMap::get returns the first
    # defined, which is --port (clap_builder 4.x, src/mkeymap.rs). `-e` is --env, `-g` the
    # graceful termination timeout. clap neither reads `_` as `-` nor takes abbreviations.
    aliases={"-p": "--port", "-e": "--env", "-g": "--graceful-termination-timeout"},
    # TGIS and TGI before v0.2 name the model `--model-name` (env MODEL_NAME); TGI's own
    # --model-id comes first. TGIS's HTTP port is --port (3000) too, its `-g` is --grpc-port (8033).
    model_flags=("--model-id", "--model-name"),
    host_flags=("--hostname",),
    port_flags=("--port",),
    no_value_flags=_BOOLEAN_FLAGS,
    # clap: an option that takes a value and is given none is a usage error, the launcher exits
    # ("a value is required for '--quantize <QUANTIZE>'").
    values_required=True,
    exit_flags=frozenset({"-h", "--help", "-V", "--version"}),
    secret_flags=frozenset({"--api-key", "--ngrok-authtoken"}),
    fold_workers=True,
    default_host="0.0.0.0",
    default_port=3000,
)


# Why a start failed: TGI's launcher is a clap CLI (clap 4: `error: invalid value 'X' for '--f'`,
# `error: unexpected argument '--f' found`); its Python shards raise the sharding constraints
# (v1.4: server/text_generation_server/layers/tensor_parallel.py `is not compatible with sharding
# on N shards`, custom_modeling `must be divisible by `num_shards``), then its libraries'.
# The sharding messages are not checked in source here (the first seen in logs:
# https://github.com/huggingface/text-generation-inference/issues/1354); the launcher's
# consequences are (launcher/src/main.rs at 009c4e0b: `Shard {rank} failed to start`, `Shutting
# down shards`, main's `Error: ShardCannotStart`, the Debug of LauncherError::ShardCannotStart).
P = FailurePattern

FAILURES = (
    _libraries.CLAP
    + Failures(
        patterns=(
            # the warm-up's out of memory for a prefill batch (FlashCausalLM.warmup in TGI's Python
            # server, from memory of TGI 1.x to 3.x: `Not enough memory
            # to handle {n} prefill tokens. You need to decrease `--max-batch-prefill-tokens``)
            P(
                kind="gpu_oom",
                pattern=r"Not enough memory to handle \d+ prefill tokens",
                hint="lower --max-batch-prefill-tokens (and --max-batch-total-tokens), or use a smaller "
                "model or more GPUs",
            ),
            P(
                kind="bad_flag",
                pattern=r"^\s*error: (?:invalid value '|unexpected argument '|a value is required for '|"
                r"the argument '[^']*' cannot be used|unrecognized subcommand|the following required)",
            ),
            P(
                kind="other",
                pattern=r"must be divisible by `num_shards` \(got `num_heads`: (?P<num_heads>\d+) and "
                r"`num_shards`: (?P<num_shards>\d+)",
                hint="choose a --num-shard that divides the model's head count",
            ),
            P(
                kind="other",
                pattern=r"size (?P<size>\d+) is not compatible with sharding on (?P<num_shard>\d+) shards",
                hint="choose a --num-shard that divides the model's dimensions",
            ),
            # launcher/src/main.rs shard_manager (read at commit 009c4e0b): `Shard process was
            # signaled to shutdown with signal {signal}`, the Unix number: 4 (SIGILL) is an instruction this
            # CPU lacks, any other the shard's end, whose cause (if any) is in the lines above
            P(
                kind="other",
                pattern=r"process was signaled to shutdown with signal (?P<signal>4)\b",
                hint="the shard died of SIGILL: this CPU lacks an instruction the build uses (AVX2, AVX-512)",
            ),
            P(
                kind="other",
                role="ending",
                pattern=r"process was signaled to shutdown with signal (?P<signal>\d+)",
                hint="the shard was killed by {signal}: SIGKILL is most often the OOM killer (dmesg)",
            ),
        )
    )
    + _libraries.PYTHON_SERVER
).model_copy(
    update={"wrappers": (r"Shard \d+ failed to start", r"ShardCannotStart", r"Shutting down shards")}
)

SPEC = EngineSpec(
    id="tgi",
    aliases=("text-generation-inference", "text-generation-launcher"),
    signature=SIGNATURE,
    # `text-generation-launcher --version` prints clap's `text-generation-launcher 3.3.6-dev0`: the
    # Cargo workspace version, which at tag v3.3.7 still says 3.3.6-dev0 (Cargo.toml).
    launch=Launch(kind="binary", executable="text-generation-launcher", docker=True),
    flags=Flags(
        fields={
            "tensor_parallel_size": ("--num-shard",),
            "max_model_len": ("--max-total-tokens",),
            "max_num_seqs": ("--max-batch-size",),
            "kv_cache_dtype": ("--kv-cache-dtype",),
            "dtype": ("--dtype",),
            "quantization": ("--quantize",),
            "trust_remote_code": ("--trust-remote-code",),
            "gpu_memory_utilization": ("--cuda-memory-fraction",),
        },
        # `Vec<String>` options take one value per occurrence (--cors-allow-origin a
        # --cors-allow-origin b); --cuda-graphs is one comma-delimited value.
        list_style="repeat",
    ),
    # Not on PyPI as a server (PyPI `text-generation` is the client): a configured command installs
    # it, or the ghcr.io/huggingface/text-generation-inference image runs it.
    # --api-key guards the generation routes only; /health, /info and /v1/models stay open
    # (router/src/server.rs).
    serving=Serving(
        # GET /info answers the router's Info, its crate version under "version" (router/src/lib.rs
        # struct Info, v3.3.7).
        version_path="/info",
        # Info's "router" is the router crate's name (env!("CARGO_PKG_NAME"), router/src/lib.rs)
        identity=IdentityProbe(path="/info", status=200, field="router", equals="text-generation-router"),
        api_key_flag="--api-key",
        api_key_env=("API_KEY",),
        # The router, which serves HTTP, starts only after every shard reported ready ("All shard
        # started" -> "Starting Webserver", launcher/src/main.rs), so the port refuses connections
        # while weights download and load (starting). Then GET /health runs infer.health(): 200
        # with an empty body, or 503 {"error":"unhealthy","error_type":"healthcheck"} when the
        # shards fail their check (router/src/server.rs `health`).
        health_rules=(
            HealthRule(
                status=503,
                field="error_type",
                equals="healthcheck",
                state="unhealthy",
                reason="the shards failed their health check (HTTP 503)",
            ),
        ),
        # Since v3.3.0 (02715dc5) the router also serves Prometheus on the API host at
        # --prometheus-port, default 9000, env PROMETHEUS_PORT (launcher/src/main.rs `Args`,
        # router/src/server.rs `p_addr.set_port(prometheus_port)`, v3.3.7): it cannot start
        # while that port is held either.
        extra_ports=(ExtraPort(flag="--prometheus-port", environment="PROMETHEUS_PORT", default=9000),),
        # The launcher's shards (`text-generation-server serve`, a console script) and its router
        # serve for it and keep their argv (launcher/src/main.rs `shard_manager`, `spawn_webserver`).
        worker_programs=frozenset({"text-generation-server", "text-generation-router"}),
    ),
    # Every option has a clap `env` twin named after its field (MODEL_ID, HOSTNAME, PORT, ...); the
    # command line wins. The CUDA image sets PORT=80 (Dockerfile), and Docker sets HOSTNAME to the
    # container id in every container, which the launcher then binds unless --hostname is given.
    settings=Settings(
        environment={"MODEL_ID": "model", "MODEL_NAME": "model", "HOSTNAME": "host", "PORT": "port"}
    ),
    failures=FAILURES,
    # The router serves `/metrics` on the API port, always (router/src/server.rs, v3.3.7-1
    # db931fcf): `tgi_batch_current_size` and `tgi_queue_size` gauges (backends/v3/src/backend.rs,
    # queue.rs), token counts only as per-request histograms whose `_sum` grows when a request is
    # validated (input) or finishes (generated), and `tgi_batch_inference_success{method=decode}`
    # counting decode steps: that is the progress a long request shows. No KV-cache gauge.
    load=LoadMetrics(
        kind="prometheus",
        requests_running=("tgi_batch_current_size",),
        requests_waiting=("tgi_queue_size",),
        prompt_tokens=("tgi_request_input_length_sum",),
        generated_tokens=("tgi_request_generated_tokens_sum",),
        progress=("tgi_batch_inference_success_total", "tgi_batch_inference_success"),
        # Per finished request, in seconds (router/src/server.rs generate and the stream's end,
        # v3.3.7-1 db931fcf): tgi_request_duration (end to end), tgi_request_queue_duration,
        # tgi_request_mean_time_per_token_duration (the request's mean time per generated
        # token); buckets 0.0001 * 1.5**k, k = 1..35. No time to first token; no model label
        # (one model per server).
        latency=LatencyMetrics(
            time_per_output_token=LatencyMetric(
                histogram=("tgi_request_mean_time_per_token_duration",),
                note="TGI's is each finished request's mean time per token",
            ),
            queue_time=LatencyMetric(histogram=("tgi_request_queue_duration",)),
            end_to_end=LatencyMetric(histogram=("tgi_request_duration",)),
        ),
    ),
)
