"""Docker Model Runner (docker/model-runner): the `model-runner` daemon of its images and the
standalone `dmr serve`, and the inference backends it starts (llama-server on a unix socket,
vLLM, MLX, ...) as its runners.

Facts from docker/model-runner `642c7211` (v1.2.6+18) unless a line says otherwise; the files
cited are at that commit.
"""

from __future__ import annotations

from enginespec.definition.records import (
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
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import _libraries, llamacpp, vllm
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="docker-model-runner",
    launch_forms=(
        # The images' `ENTRYPOINT ["/app/model-runner"]` (Dockerfile, WORKDIR /app): main.go
        # parses no arguments (server.Run with the environment's configuration). The name is
        # too common to take anywhere: only in a directory `app`.
        LaunchForm(executables=("model-runner",), directories=("app",), no_arguments=True),
        # `dmr serve [--port P | --socket PATH] [--models-path DIR]` (cmd/dmr/serve.go
        # newServeCmd, cobra); dmr's other commands are clients of a running daemon.
        LaunchForm(executables=("dmr",), subcommand=("serve",), max_positionals=0),
    ),
    port_flags=("--port",),
    exit_flags=frozenset({"-h", "--help"}),
    # pkg/server/server.go: `addr := ":" + tcpPort` (every interface); cmd/dmr/serve.go
    # `defaultPort = "12434"` and the images' `ENV MODEL_RUNNER_PORT=12434`. The bare binary
    # with no MODEL_RUNNER_PORT listens on the unix socket MODEL_RUNNER_SOCK, else
    # `model-runner.sock` (pkg/envconfig/envconfig.go SocketPath): not modelled.
    default_host="0.0.0.0",
    default_port=12434,
)


SPEC = EngineSpec(
    id="docker-model-runner",
    aliases=("model-runner", "dmr"),
    signature=SIGNATURE,
    # Not on PyPI: Docker Desktop, the docker-model-plugin package, the images, or the dmr
    # binary; a configured command.
    launch=Launch(kind="binary", executable="dmr", args=("serve",)),
    # cobra: a slice option is given once per value
    flags=Flags(list_style="repeat"),
    serving=Serving(
        # pkg/inference/scheduling/http_handler.go GetBackendStatus: `GET /engines/status`
        # answers 200 with a JSON object of each backend's status, Go's compact, sorted
        # `{"llama.cpp":"Running: llama.cpp b1-abc","vllm":"Not Installed"}` (pkg/inference/
        # backend.go FormatStatus: "Running", "Error", "Not Installed", "Installing" and its
        # details), as soon as it listens; llama.cpp is always one of them (pkg/routing/
        # backends.go DefaultBackendDefs "always includes llamacpp"). Since 2025-04 (bee54f59,
        # before v1.0.0), where the greeting of `GET /` ("Docker Model Runner is running",
        # pkg/server/server.go ExtraRoutes) came only with v1.0.5 (44f4df57): asked for health
        # and identity alike, so an older daemon (v1.0.0-v1.0.4, Docker Desktop's of 2025) is
        # told too. No other engine serves /engines/status.
        health_path="/engines/status",
        health_rules=(
            HealthRule(status=200, contains='"llama.cpp":"', state="ready"),
            HealthRule(
                status=200, state="unknown", reason="not Docker Model Runner's /engines/status answer"
            ),
        ),
        # `/version` answers {"version": cfg.Version} (pkg/server/server.go ExtraRoutes; v1.0.5 on)
        version_path="/version",
        version_key="version",
        identity=IdentityProbe(path="/engines/status", status=200, contains='"llama.cpp":"'),
        # Its backends (pkg/inference/backends/*): llama-server with `--host
        # inference-runner-<slot>.sock` (pkg/inference/scheduling/runner.go RunnerSocketPath,
        # backends/llamacpp/llamacpp_config.go GetArgs), vLLM, MLX, ...: its runners.
        starts_runners=True,
    ),
    # The daemon's GET /metrics (pkg/server/server.go, unless DISABLE_METRICS is truthy:
    # pkg/envconfig/envconfig.go) is pkg/metrics/aggregated_handler.go AggregatedMetricsHandler:
    # it asks every active runner's own /metrics over its unix socket, adds the labels backend,
    # model and mode to each series, and writes them all in Prometheus text (expfmt); with no
    # runner active it answers 200 "# No active runners". Its llama-server runners always run
    # with --metrics (pkg/inference/backends/llamacpp/llamacpp_config.go GetArgs), its vLLM
    # runners keep vLLM's default metrics: their names are read, llama.cpp's first (the
    # backend always installed). The first name present wins, so with runners of both
    # backends active at once only llama.cpp's are counted.
    load=LoadMetrics(
        kind="prometheus",
        disable_flag="DISABLE_METRICS=1",
        requests_running=(*llamacpp.SPEC.load.requests_running, *vllm.SPEC.load.requests_running),
        requests_waiting=(*llamacpp.SPEC.load.requests_waiting, *vllm.SPEC.load.requests_waiting),
        kv_cache_usage=(*llamacpp.SPEC.load.kv_cache_usage, *vllm.SPEC.load.kv_cache_usage),
        prompt_tokens=(*llamacpp.SPEC.load.prompt_tokens, *vllm.SPEC.load.prompt_tokens),
        generated_tokens=(*llamacpp.SPEC.load.generated_tokens, *vllm.SPEC.load.generated_tokens),
        progress=llamacpp.SPEC.load.progress,
        # llama-server's counters give the time per output token; vLLM's histograms the rest
        # (llama-server has none of those). Every series carries the daemon's `model` label.
        latency=LatencyMetrics(
            time_to_first_token=vllm.SPEC.load.latency.time_to_first_token,
            time_per_output_token=LatencyMetric(
                seconds_total=llamacpp.SPEC.load.latency.time_per_output_token.seconds_total,
                count_total=llamacpp.SPEC.load.latency.time_per_output_token.count_total,
                note=llamacpp.SPEC.load.latency.time_per_output_token.note,
            ),
            queue_time=vllm.SPEC.load.latency.queue_time,
            end_to_end=vllm.SPEC.load.latency.end_to_end,
            model_label="model",
        ),
        note="read from the daemon, which gathers its runners' metrics (llama.cpp's first): "
        + llamacpp.SPEC.load.note,
    ),
    # cmd/dmr/serve.go applyServeEnv: `--port` is set as MODEL_RUNNER_PORT, which the daemon
    # reads (pkg/envconfig/envconfig.go TCPPort).
    settings=Settings(environment={"MODEL_RUNNER_PORT": "port"}, runner_environment=False),
    # pkg/inference/scheduling/http_handler.go routeHandlers: `GET /engines/ps`
    # (GetRunningBackends) lists the runners it holds, each model_name with `loading: true` while
    # it starts (scheduler.go getLoaderStatus); `GET /engines/v1/models` the models it has
    # pulled, an OpenAI list (pkg/inference/models/api.go OpenAIModelList, `id` the model's
    # tag). pkg/routing/router.go: `/v1/` is an alias of /engines/.
    models=ModelList(kind="docker_model_runner", path="/engines/ps", available_path="/engines/v1/models"),
    # http_handler.go Unload: `POST /engines/unload` with api.go UnloadRequest `{"all": bool,
    # "backend": str, "models": [str]}` answers 200 UnloadResponse `{"unloaded_runners": N}`, N
    # the runners left (a body not JSON: 400 "invalid request"). loader.go Unload resolves
    # each model to its ID and evicts it from every backend when `backend` is empty
    # (evictRunner `allBackends := backend == ""`), but only a runner not busy with a
    # request; what it evicted the list at /engines/ps then shows. No load route: a model
    # loads on its first inference request (loader.go load), so `load` is unsupported.
    control=ModelControl(unload=ControlRequest(path="/engines/unload", body={"models": ["{model}"]})),
    # A Go daemon whose runners (llama-server by default, vLLM, mlx_lm.server) write to its log:
    # their engines' messages, then the layers every process passes through
    # Its own refusal of a model its llama.cpp backend cannot take
    # (pkg/inference/backends/llamacpp/llamacpp_config.go: `GGUF file required by llama.cpp
    # backend`: a safetensors model where no vLLM backend is installed).
    failures=Failures(
        patterns=(
            FailurePattern(
                kind="unsupported_architecture",
                pattern=r"GGUF file required by llama\.cpp backend",
                hint="the model is no GGUF and the llama.cpp backend reads only GGUF: install the vLLM "
                "backend, or pull a GGUF of the model",
            ),
        )
    )
    + _libraries.GO_FLAGS
    + llamacpp.FAILURES
    + vllm.FAILURES
    + _libraries.BASE,
)
