"""NVIDIA Dynamo: the OpenAI HTTP frontend ``python -m dynamo.frontend`` and the workers behind it,
``python -m dynamo.vllm|dynamo.sglang|dynamo.trtllm``, which serve no HTTP API to clients (they
register with the frontend through etcd or a file store and take requests over its request plane).

Facts from ai-dynamo/dynamo at the commits named beside each: components/src/dynamo/frontend/
frontend_args.py at ``0243c51b`` (the argparse flags, every one also read from a ``DYN_*``
variable) and main.py at ``0179043a`` (an older frontend, before its flags moved to an ArgGroup:
the same ``--http-host``/``--http-port`` and defaults), lib/llm/src/http/service/health.rs at
``0ab2b3f5``, the workers' parsers components/src/dynamo/vllm/args.py at ``000a36a7`` and
components/src/dynamo/trtllm/backend_args.py at ``0a6a115c``.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    HealthRule,
    IdentityProbe,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Package,
    Serving,
    Settings,
)
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import sglang, trtllm, vllm
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="dynamo",
    launch_forms=(
        # `python -m dynamo.frontend [args]`: "OpenAI HTTP server", model discovery, pre-processor
        # and router in one process (main.py's header). Its workers are found through discovery,
        # so argv names no model unless it is run with a static `--model-name`/`--model-path`.
        LaunchForm(modules=("dynamo.frontend",)),
        # The workers: `python -m dynamo.vllm --model M` (vLLM's AsyncEngineArgs flags, parsed after
        # Dynamo's own: vllm/args.py parse_args), `python -m dynamo.sglang --model-path M` (SGLang's
        # ServerArgs), `python -m dynamo.trtllm --model M` (`--model-path` its obsolete spelling,
        # trtllm/backend_args.py). They register with the frontend and serve it over the request
        # plane (TCP or NATS), never HTTP to clients: followers, with their model. They are not
        # vLLM's, SGLang's or TensorRT-LLM's own servers (those engines' forms name other modules).
        LaunchForm(modules=("dynamo.vllm", "dynamo.sglang", "dynamo.trtllm"), role="follower"),
    ),
    # SGLang's ServerArgs spells `--model-path` also `--model` (the worker passes its flags on).
    # The frontend's `--model-path` is a local directory (validate_model_path), its `--model-name`
    # the name it serves that model under (frontend_args.py); the workers' `--served-model-name`
    # (vLLM's takes several values, Dynamo refuses more than one: update_dynamo_config_with_engine).
    model_flags=("--model", "--model-path"),
    served_name_flags=("--served-model-name", "--model-name"),
    multi_value_flags=frozenset({"--served-model-name"}),
    # frontend_args.py: `--http-host` default "0.0.0.0" (DYN_HTTP_HOST), `--http-port` default
    # 8000 (DYN_HTTP_PORT); the same in main.py at 0179043a.
    host_flags=("--http-host",),
    port_flags=("--http-port",),
    # `-i/--interactive` (argparse.BooleanOptionalAction, DYN_INTERACTIVE): a text chat in the
    # terminal instead of the HTTP server (main.py: `run_input(runtime, "text", engine)`).
    aliases={"-i": "--interactive"},
    mode_flags={"--interactive": False, "--no-interactive": True},
    no_value_flags=frozenset({"--interactive", "--no-interactive"}),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    # `--dyn-preprocess-workers N` runs a process pool of the frontend's own; a worker's children
    # are its engine's (vLLM's EngineCore, SGLang's schedulers).
    fold_workers=True,
    default_host="0.0.0.0",
    default_port=8000,
)

SPEC = EngineSpec(
    id="dynamo",
    aliases=("ai-dynamo",),
    signature=SIGNATURE,
    # `pip install ai-dynamo[vllm|sglang|trtllm]` (the README's install); the frontend is what
    # serves, but it needs etcd/NATS (or `--discovery-backend file`) and a worker to answer.
    launch=Launch(kind="module", executable="python", module_args=("-m", "dynamo.frontend")),
    package=Package(distributions=("ai-dynamo",)),
    serving=Serving(
        # lib/llm/src/http/service/health.rs health_handler: `GET /health` answers 200
        # {"status": "healthy", ...} once the first model discovery is done, 503 {"status":
        # "not_ready", "message": "Initial model discovery in progress"} before, 503 "not_ready"
        # with the discovery's error when it failed, 503 "shutting_down" while it stops; every
        # answer lists the discovered `endpoints` and `instances`.
        health_path="/health",
        health_rules=(
            HealthRule(status=200, field="status", equals="healthy", state="ready"),
            HealthRule(
                status=503,
                field="message",
                equals="Initial model discovery in progress",
                state="loading",
                reason="initial model discovery in progress",
            ),
            HealthRule(
                status=503,
                field="status",
                equals="not_ready",
                state="unhealthy",
                reason="model discovery failed",
            ),
            HealthRule(
                status=503, field="status", equals="shutting_down", state="unhealthy", reason="shutting down"
            ),
            HealthRule(status=200, state="unknown", reason="not Dynamo's /health answer"),
        ),
        # vLLM, TensorRT-LLM's trtllm-serve and others also default to 8000: `GET /live` is the
        # frontend's own liveness route, 200 {"status": "live", "message": "Service is live"}
        # (health.rs live_handler).
        identity=IdentityProbe(path="/live", status=200, field="status", equals="live"),
    ),
    # The frontend lists the models its workers registered, OpenAI's `GET /v1/models` (the docs'
    # "Models Endpoint" of its LLM backends' README, components/backends/llm in its docs, as copied
    # in the vickiegpt/dynamo fork).
    models=ModelList(kind="openai", path="/v1/models"),
    # The frontend's own Prometheus registry, at GET /metrics on its HTTP port: the HTTP service
    # merges metrics::router(registry, DYN_HTTP_SVC_METRICS_PATH or "/metrics") with its OpenAI
    # routes (lib/llm/src/http/service/service_v2.rs @ a21a0c77), text from the `prometheus`
    # crate's TextEncoder. Names are `dynamo_frontend_` + lib/runtime/src/metrics/
    # prometheus_names.rs frontend_service (@ 04070c75), each series labelled `model` (the
    # served name, lowercased); lib/llm/src/http/service/metrics.rs @ 79a21ca4:
    # - inflight_requests (gauge): every request from the HTTP handler's start until its answer
    #   is done; queued_requests (gauge) counts those of them with no first token yet (prefill
    #   included: "HTTP queue time is a subset of inflight time"). So inflight is the whole of
    #   what the frontend holds, read as running; queued is NOT read as waiting (it is a part of
    #   inflight, and a request prefilling is no waiting one), so nothing is counted twice.
    # - output_tokens_total (counter): tokens as each chunk reaches the frontend.
    # - input_sequence_tokens (histogram): each request's prompt tokens, observed at its first
    #   token: its `_sum` is the prompt tokens of the requests answered so far.
    # - time_to_first_token_seconds, inter_token_latency_seconds (one observation per token
    #   after the first, its chunk's gap over its tokens), request_duration_seconds (handler
    #   start to answer done): histograms in seconds. No queue-time histogram; no KV cache
    #   gauge of the workers' (they report theirs on their own system port).
    # DYN_METRICS_PREFIX replaces `dynamo_frontend` (prometheus_names.rs: for NIM, to be removed):
    # a frontend started with it reports none of these names.
    load=LoadMetrics(
        kind="prometheus",
        requests_running=("dynamo_frontend_inflight_requests",),
        prompt_tokens=("dynamo_frontend_input_sequence_tokens_sum",),
        generated_tokens=("dynamo_frontend_output_tokens_total",),
        latency=LatencyMetrics(
            time_to_first_token=LatencyMetric(histogram=("dynamo_frontend_time_to_first_token_seconds",)),
            time_per_output_token=LatencyMetric(histogram=("dynamo_frontend_inter_token_latency_seconds",)),
            end_to_end=LatencyMetric(histogram=("dynamo_frontend_request_duration_seconds",)),
            model_label="model",
        ),
        note="Dynamo's frontend counts every request it holds as running (those before their first "
        "token too) and none as waiting; prompt tokens are those of requests past their first token",
    ),
    # frontend_args.py: each flag's default is read from its variable first (env_or_default).
    settings=Settings(environment={"DYN_HTTP_HOST": "host", "DYN_HTTP_PORT": "port"}),
    # The workers are vLLM, SGLang and TensorRT-LLM running in Dynamo's process (their engines'
    # messages), the frontend a Rust server (the native layers)
    failures=vllm.FAILURES + sglang.FAILURES + trtllm.FAILURES + _libraries.NATIVE_SERVER,
)
