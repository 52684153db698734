"""SGLang: ``python -m sglang.launch_server`` and the ``sglang serve`` console script."""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    FamilyDefault,
    Flags,
    HealthRule,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Package,
    Serving,
    Settings,
)
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="sglang",
    launch_forms=(
        LaunchForm(modules=("sglang.launch_server",)),
        LaunchForm(executables=("sglang",), subcommand=("serve",)),
        # sglang_router.launch_server starts the router together with its SGLang workers and takes
        # the server's own arguments (sglang-router 0.3.2, sglang_router/launch_server.py).
        LaunchForm(modules=("sglang_router.launch_server",)),
    ),
    # Registered aliases (SGLang 0.5.23, python/sglang/srt/arg_groups/fields/). SGLang's plain
    # argparse does not read `_` as `-`; `--tp 2` works only as an abbreviation of --tp-size.
    aliases={
        "--model": "--model-path",
        "--tensor-parallel-size": "--tp-size",
        "--pipeline-parallel-size": "--pp-size",
        "--data-parallel-size": "--dp-size",
    },
    model_flags=("--model-path",),
    served_name_flags=("--served-model-name",),
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    # Multi-node tensor parallelism: the node with `--node-rank 0` serves the API; the others run
    # scheduler workers only (python/sglang/srt/entrypoints/engine.py _launch_subprocesses; newer
    # releases answer a dummy /health on --host/--port there, but serve no API).
    follower_rank_flags=("--node-rank",),
    secret_flags=frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password", "--watermark-config"}),
    abbreviations=True,
    fold_workers=True,
    # Subprocesses retitle themselves `sglang::scheduler_TP0`, `sglang::detokenizer`,
    # `sglang::server` (a router's DP worker), diffusion ones `sgl_diffusion::scheduler...`
    # (their setproctitle calls in SGLang 0.5.23; docs/engine-facts.md §2).
    worker_titles=("sglang::", "sgl_diffusion::"),
    default_host="127.0.0.1",
    default_port=30000,
)


# Why a start failed: SGLang's own messages (checked in the v0.4.9 release's source:
# python/sglang/srt/model_executor/model_runner.py init_memory_pool `Not enough memory. Please try
# to increase --mem-fraction-static.`, srt/entrypoints/http_server.py _wait_and_warmup
# `Initialization failed. warmup error: ...`), then its libraries'.
P = FailurePattern

FAILURES = (
    _libraries.ARGPARSE
    + _libraries.SOCKETS
    + Failures(
        patterns=(
            # A port of its own it waits for (python/sglang/srt/utils.py wait_port_available, from
            # memory, not checked here: `{port_name} at {port} is not available in {timeout}
            # seconds. {port_name} is used by a process already.`; its metrics, RPC and
            # data-parallel ports, `port_base`)
            P(
                kind="port_in_use",
                pattern=r"\b(?:\w+_port|port_base) at (?P<port>\d+) is not available in \d+ seconds",
                hint="port {port} is held by another process (often an earlier SGLang's child still "
                "running): stop it, or choose other ports",
            ),
            # The KV pool got no room: raised when max_total_num_tokens <= 0 after the weights
            # took their share of --mem-fraction-static (python/sglang/srt/model_executor/
            # model_runner.py init_memory_pool, v0.4.9; later mem_cache/pool_configurator.py
            # MemoryPoolConfig, `Current value: mem_fraction_static=...`, seen in logs only:
            # not in a release checked here).
            P(
                kind="kv_cache_too_small",
                pattern=r"Not enough memory\. Please try to increase --mem-fraction-static",
                hint="the KV cache got no memory: raise --mem-fraction-static (the share that holds the "
                "weights and the KV cache), or use a smaller model or quantization",
            ),
            P(kind="other", pattern=r"Initialization failed\. warmup error"),
            # python/sglang/srt/models/registry.py _ModelRegistry._raise_for_unsupported (at
            # sgl-project/sglang 04585cc5): `Model architectures {architectures} are not supported
            # for now. Supported architectures: {all_supported_archs}`
            P(
                kind="unsupported_architecture",
                pattern=r"Model architectures \[[^\]]*\] are not supported for now",
                hint="this SGLang release does not implement the model's architecture: upgrade SGLang",
            ),
        )
    )
    + _libraries.PYTHON_SERVER
).model_copy(
    # the consequences (v0.4.9): srt/entrypoints/engine.py `Rank {i} scheduler is dead. Please
    # check if there are relevant logs.`; engine.py and managers/tokenizer_manager.py `Received
    # sigquit from a child process. It usually means the child failed.`
    update={"wrappers": (r"Rank \d+ scheduler is dead", r"Received sigquit from a child")}
)

SPEC = EngineSpec(
    id="sglang",
    signature=SIGNATURE,
    # `sglang serve` exists from SGLang 0.5.5 (python/sglang/cli/main.py); the module works in
    # every release.
    launch=Launch(
        kind="module", executable="sglang", args=("serve",), module_args=("-m", "sglang.launch_server")
    ),
    flags=Flags(
        fields={
            "tensor_parallel_size": ("--tp-size",),
            "pipeline_parallel_size": ("--pp-size",),
            "data_parallel_size": ("--dp-size",),
            "max_model_len": ("--context-length",),
            "gpu_memory_utilization": ("--mem-fraction-static",),
            "max_num_seqs": ("--max-running-requests",),
            "kv_cache_dtype": ("--kv-cache-dtype",),
            "dtype": ("--dtype",),
            "quantization": ("--quantization",),
            "trust_remote_code": ("--trust-remote-code",),
            "tool_call_parser": ("--tool-call-parser",),
            "reasoning_parser": ("--reasoning-parser",),
            "chat_template": ("--chat-template",),
        },
        # Parser names as registered in SGLang 0.5.23 (python/sglang/srt/function_call/,
        # python/sglang/srt/parser/reasoning_parser_names.py).
        family_defaults=(
            FamilyDefault(
                pattern="qwen3", flags={"--reasoning-parser": "qwen3", "--tool-call-parser": "qwen25"}
            ),
            FamilyDefault(pattern="qwen3-coder", flags={"--tool-call-parser": "qwen3_coder"}),
            FamilyDefault(pattern="deepseek-r1", flags={"--reasoning-parser": "deepseek-r1"}),
            FamilyDefault(pattern="deepseek-v3", flags={"--tool-call-parser": "deepseekv3"}),
            FamilyDefault(pattern="kimi-k2", flags={"--tool-call-parser": "kimi_k2"}),
            FamilyDefault(
                pattern="glm-4.5", flags={"--tool-call-parser": "glm45", "--reasoning-parser": "glm45"}
            ),
            FamilyDefault(
                pattern="gpt-oss", flags={"--tool-call-parser": "gpt-oss", "--reasoning-parser": "gpt-oss"}
            ),
        ),
    ),
    package=Package(distributions=("sglang",)),
    # The port stays closed while the weights load (starting); then /health answers 503 until the
    # warm-up request went through, and 200 after (SGLang 0.5.1 to 0.5.23; 0.5.23:
    # python/sglang/srt/entrypoints/http_server.py health_generate()).
    serving=Serving(
        api_key_flag="--api-key",
        health_rules=(HealthRule(status=503, state="starting", reason="server is warming up (HTTP 503)"),),
    ),
    # `--config FILE.yaml`: keys are flag names; the command line wins (SGLang 0.5.23,
    # python/sglang/srt/utils/server_args_config_parser.py).
    settings=Settings(config_flag="--config"),
    failures=FAILURES,
    # `/metrics` only with `--enable-metrics` (python/sglang/srt/metrics/collector.py,
    # SchedulerMetricsCollector and TokenizerMetricsCollector; SGLang's
    # docs/references/production_metrics.md):
    # `sglang:token_usage` is the share of the KV pool's tokens in use, 0..1.
    # /get_model_info: `{"model_path", "tokenizer_path", "is_generation", ...}`, its one model
    # (python/sglang/srt/entrypoints/http_server.py get_model_info).
    models=ModelList(kind="sglang", path="/get_model_info"),
    # Memory release and resume (http_server.py release_memory_occupation and
    # resume_memory_occupation; `tags` null: weights and KV cache), only with
    # --enable-memory-saver; no request says whether it is released, so the answer is taken.
    control=ModelControl(
        sleep=ControlRequest(
            path="/release_memory_occupation", body={}, flags=("--enable-memory-saver",), shown=False
        ),
        wake=ControlRequest(
            path="/resume_memory_occupation", body={}, flags=("--enable-memory-saver",), shown=False
        ),
    ),
    load=LoadMetrics(
        kind="prometheus",
        enable_flag="--enable-metrics",
        requests_running=("sglang:num_running_reqs",),
        requests_waiting=("sglang:num_queue_reqs",),
        kv_cache_usage=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generated_tokens=("sglang:generation_tokens_total",),
        # Latency histograms in seconds labelled model_name (and is_streaming, priority or
        # custom labels, summed over): time to first token, inter-token latency and end to end
        # from the tokenizer manager, queue time from the scheduler (SGLang 0.5.23,
        # sglang/srt/observability/metrics_collector.py TokenizerMetricsCollector and
        # SchedulerMetricsCollector).
        latency=LatencyMetrics(
            time_to_first_token=LatencyMetric(histogram=("sglang:time_to_first_token_seconds",)),
            time_per_output_token=LatencyMetric(histogram=("sglang:inter_token_latency_seconds",)),
            queue_time=LatencyMetric(histogram=("sglang:queue_time_seconds",)),
            end_to_end=LatencyMetric(histogram=("sglang:e2e_request_latency_seconds",)),
            model_label="model_name",
        ),
    ),
)
