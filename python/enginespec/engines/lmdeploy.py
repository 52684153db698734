"""LMDeploy: ``lmdeploy serve api_server MODEL`` (console script and ``python -m lmdeploy``).

Facts are from LMDeploy v0.16.0 (``1208bf00``): lmdeploy/cli/serve.py, lmdeploy/cli/utils.py and
lmdeploy/serve/openai/endpoints/management.py.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    Flags,
    HealthRule,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Package,
    Serving,
)
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="lmdeploy",
    launch_forms=(
        # `lmdeploy = lmdeploy.cli:run` (setup.py) and lmdeploy/__main__.py. Only `serve api_server`
        # serves the OpenAI API: `serve proxy` is a router holding no model, `serve gradio` a web
        # UI, `chat` a terminal REPL, `lite ...` quantization jobs; none of them matches this form.
        LaunchForm(
            executables=("lmdeploy",),
            modules=("lmdeploy",),
            subcommand=("serve", "api_server"),
            positional_model=True,
        ),
    ),
    # lmdeploy's FlexibleArgumentParser turns `_` into `-` in every `--` option name before argparse
    # sees it (lmdeploy/cli/utils.py FlexibleArgumentParser.parse_args); argparse's allow_abbrev
    # stays on.
    underscore_is_dash=True,
    abbreviations=True,
    served_name_flags=("--model-name",),
    host_flags=("--server-name",),
    port_flags=("--server-port",),
    no_value_flags=frozenset(
        {
            "--allow-credentials",
            "--ssl",
            "--disable-fastapi-docs",
            "--allow-terminate-by-client",
            "--enable-abort-handling",
            "--trust-remote-code",
            "--eager-mode",
            "--enable-return-routed-experts",
            "--language-model-only",
            "--enable-prefix-caching",
            "--disable-metrics",
            "--enable-microbatch",
            "--enable-eplb",
        }
    ),
    multi_value_flags=frozenset(
        {
            "--allow-origins",
            "--allow-methods",
            "--allow-headers",
            "--allowed-media-domains",
            "--api-keys",
            "--adapters",
            "--cudagraph-capture-batch-sizes",
        }
    ),
    exit_flags=frozenset({"-h", "--help", "-v", "--version"}),
    secret_flags=frozenset({"--api-keys"}),
    # The PyTorch engine runs in a spawned child (`mp.get_context('spawn')`,
    # lmdeploy/pytorch/engine/mp_engine/zmq_engine.py), and `--dp N` spawns one api_server per
    # rank: all of them are this server's workers.
    fold_workers=True,
    default_host="0.0.0.0",
    # --server-port defaults to None, meaning 23333 (lmdeploy/cli/serve.py). With `--dp N` on the
    # PyTorch backend the process spawns one api_server per rank on ports from there on.
    default_port=23333,
)


FAILURES = _libraries.PYTHON_SERVER
_NO_MONITOR = "the engine's health monitor has not reported yet (HTTP 503)"

SPEC = EngineSpec(
    id="lmdeploy",
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="lmdeploy",
        args=("serve", "api_server"),
        module_args=("-m", "lmdeploy", "serve", "api_server"),
    ),
    flags=Flags(
        fields={
            "tensor_parallel_size": ("--tp",),
            "data_parallel_size": ("--dp",),
            "max_model_len": ("--session-len",),
            # the share of free GPU memory the KV cache may take once the weights are loaded
            "gpu_memory_utilization": ("--cache-max-entry-count",),
            "max_num_seqs": ("--max-batch-size",),
            "dtype": ("--dtype",),
            # how the weights are quantized: hf, awq, gptq, compressed-tensors, fp8, mxfp4
            "quantization": ("--model-format",),
            "trust_remote_code": ("--trust-remote-code",),
            "tool_call_parser": ("--tool-call-parser",),
            "reasoning_parser": ("--reasoning-parser",),
            "chat_template": ("--chat-template",),
        }
    ),
    # PyPI's lmdeploy wheels are CUDA builds (setup.py: target device `cuda` unless
    # LMDEPLOY_TARGET_DEVICE says otherwise at build time).
    package=Package(distributions=("lmdeploy",), accelerator="cuda"),
    # The engine is built (and the model downloaded) before uvicorn binds, so the port refuses
    # connections while loading (lmdeploy/serve/openai/api_server.py serve()). Then GET /health is
    # 200 {"status": "healthy"|"sleeping", ...} or 503 {"status": "unhealthy"|"initializing", ...};
    # 503 "Engine health monitor is not initialized." before the monitor runs (management.py
    # `health`, lmdeploy/serve/core/health.py EngineHealthMonitor).
    serving=Serving(
        api_key_flag="--api-keys",
        health_rules=(
            HealthRule(status=200, field="status", equals="healthy", state="ready"),
            HealthRule(
                status=200,
                field="status",
                equals="sleeping",
                state="unhealthy",
                reason="the engine is asleep (weights released; POST /wakeup)",
            ),
            HealthRule(
                status=503, field="status", equals="initializing", state="starting", reason=_NO_MONITOR
            ),
            HealthRule(
                status=503, field="message", contains="not initialized", state="starting", reason=_NO_MONITOR
            ),
            HealthRule(
                status=503,
                field="status",
                equals="unhealthy",
                state="unhealthy",
                reason="the engine reports itself unhealthy (HTTP 503)",
            ),
            HealthRule(status=200, state="unknown", reason="unexpected /health body (HTTP 200)"),
            HealthRule(status=503, state="unknown", reason="unexpected /health body (HTTP 503)"),
        ),
    ),
    # /v1/models: its served name (endpoints/models.py available_models); /is_sleeping
    # {"is_sleeping": bool}, and POST /sleep?level=1 and /wakeup, registered always, each POST
    # with a JSON content type (validate_json_request, serve/utils/server_utils.py):
    # lmdeploy/serve/openai/endpoints/management.py, v0.16.0.
    models=ModelList(kind="openai", path="/v1/models", sleeping_path="/is_sleeping"),
    control=ModelControl(
        sleep=ControlRequest(path="/sleep?level=1", body={}),
        wake=ControlRequest(path="/wakeup", body={}),
    ),
    failures=FAILURES,
    # `/metrics` on the API port unless `--disable-metrics` (v0.16.0 1263d5cd:
    # lmdeploy/metrics/loggers.py, lmdeploy/serve/openai/api_server.py; metrics since v0.10.0).
    load=LoadMetrics(
        kind="prometheus",
        disable_flag="--disable-metrics",
        requests_running=("lmdeploy:num_requests_running",),
        requests_waiting=("lmdeploy:num_requests_waiting",),
        kv_cache_usage=("lmdeploy:gpu_cache_usage_perc",),
        prompt_tokens=("lmdeploy:prompt_tokens_total",),
        generated_tokens=("lmdeploy:generation_tokens_total",),
        # Latency histograms in seconds labelled model_name and engine (v0.16.0 1263d5cd,
        # lmdeploy/metrics/loggers.py): time to first token, inter-token latency (named
        # lmdeploy:iter_token_latency, no unit suffix; lmdeploy:time_per_output_token_seconds
        # is each request's mean), queue time and end to end of each finished request.
        latency=LatencyMetrics(
            time_to_first_token=LatencyMetric(histogram=("lmdeploy:time_to_first_token_seconds",)),
            time_per_output_token=LatencyMetric(
                histogram=("lmdeploy:iter_token_latency", "lmdeploy:time_per_output_token_seconds")
            ),
            queue_time=LatencyMetric(histogram=("lmdeploy:request_queue_time_seconds",)),
            end_to_end=LatencyMetric(histogram=("lmdeploy:e2e_request_latency_seconds",)),
            model_label="model_name",
        ),
    ),
)
