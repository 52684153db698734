"""Hugging Face Text Embeddings Inference: ``text-embeddings-router``.

Facts from huggingface/text-embeddings-inference tag v1.9.3 (``06670157``): router/src/main.rs
(struct ``Args``, clap 4 derive), router/src/http/server.rs, router/src/lib.rs, Dockerfile; older
tags where a line says so.
"""

from __future__ import annotations

import enginespec.engines._gpulayers as _gpulayers
import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    ExtraPort,
    Flags,
    IdentityProbe,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Serving,
    Settings,
)
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="tei",
    launch_forms=(
        # The images' ENTRYPOINT is `text-embeddings-router` (Dockerfile) or cuda-entrypoint.sh,
        # which ends in `exec text-embeddings-router "$@"` (Dockerfile-cuda): the kernel shows the
        # router's own argv. Its Args has no positional and no subcommand, so any positional is
        # clap's "unexpected argument" and it exits.
        LaunchForm(executables=("text-embeddings-router",), max_positionals=0),
    ),
    # `port` is the only option with a short (`#[clap(default_value = "3000", long, short, env)]`);
    # clap gives it `-p`. No abbreviations, no `_` for `-`.
    aliases={"-p": "--port"},
    # `model_id: String` (required); `served_model_name` "defaults to `--model-id`" (main.rs
    # `unwrap_or_else(|| args.model_id.clone())`), used by the OpenAI routes.
    model_flags=("--model-id",),
    served_name_flags=("--served-model-name",),
    host_flags=("--hostname",),
    port_flags=("--port",),
    # clap `bool` options (ArgAction::SetTrue): `json_output`, `disable_spans` (since v1.7.0), and
    # `auto_truncate` up to v1.8.x. From v1.9.0 `auto_truncate` takes zero or one value (`num_args
    # = 0..=1, default_missing_value = "true"`): `--auto-truncate false` is one option, and a bare
    # `--auto-truncate` no usage error; read as a flag taking none or more, it is both.
    no_value_flags=frozenset({"--json-output", "--disable-spans"}),
    multi_value_flags=frozenset({"--auto-truncate"}),
    # clap: an option given no value is "a value is required for ...": the router exits.
    values_required=True,
    # `#[clap(author, version, about)]`: -h/--help and -V/--version print and exit.
    exit_flags=frozenset({"-h", "--help", "-V", "--version"}),
    secret_flags=frozenset({"--api-key", "--hf-token", "--hf-api-token"}),
    # `hostname` default "0.0.0.0", `port` default "3000" (main.rs Args).
    default_host="0.0.0.0",
    default_port=3000,
)


SPEC = EngineSpec(
    id="tei",
    aliases=("text-embeddings-inference", "text-embeddings-router"),
    signature=SIGNATURE,
    # `text-embeddings-router --version` prints clap's `text-embeddings-router 1.9.3` (the
    # workspace version, Cargo.toml). Not on PyPI: the ghcr.io/huggingface/text-embeddings-inference
    # images or `cargo install` from a checkout (README) run it.
    launch=Launch(kind="binary", executable="text-embeddings-router", docker=True),
    flags=Flags(
        fields={
            "dtype": ("--dtype",),
            "max_num_seqs": ("--max-batch-requests",),
        },
        # `cors_allow_origin: Option<Vec<String>>` takes one value per occurrence.
        list_style="repeat",
    ),
    serving=Serving(
        # The model is downloaded, loaded and warmed up before the HTTP server is started
        # (lib.rs `run`: "Starting model backend", "Warming up model", then http::server::run),
        # so the port refuses connections until it is ready. GET /health (also `/` and `/ping`)
        # runs infer.health(): 200 with an empty body, or 503 {"error": "unhealthy",
        # "error_type": "unhealthy"} (http/server.rs `health`); it is open with --api-key set.
        health_path="/health",
        # GET /info answers struct Info (lib.rs): model_id, served_model_name, model_type,
        # max_batch_tokens, ..., `version` (the crate's), sha, docker_label. It sits behind
        # --api-key (http/server.rs: `routes`, not `public_routes`).
        version_path="/info",
        # TGI's default port is 3000 too, and TGI also answers GET /info (router/src/lib.rs): its
        # Info has no `model_type`, which TEI's always has (an object: {"embedding": {...}},
        # {"classifier": {...}}, {"reranker": ...}); axum's Json writes compact serde_json.
        identity=IdentityProbe(path="/info", status=200, contains='"model_type":'),
        api_key_flag="--api-key",
        api_key_env=("API_KEY",),
        # It binds a Prometheus listener on its host at --prometheus-port (env PROMETHEUS_PORT,
        # default 9000; lib.rs `prometheus_builer(addr, prometheus_port, ...)`), so that port must
        # be free. The HTTP build then drops the exporter that would serve it (http/server.rs
        # `let (recorder, _) = prom_builder.build()`, since dbeb3ab16 "fix: metrics unbounded
        # memory"; metrics-exporter-prometheus 0.15.3 binds in build() and the listener goes
        # with the dropped future) and serves the same registry at /metrics on the API port;
        # only the gRPC build (grpc/server.rs `prom_builder.install()`) serves the port.
        extra_ports=(ExtraPort(flag="--prometheus-port", environment="PROMETHEUS_PORT", default=9000),),
    ),
    # GET /metrics on the API port is a public route (open with --api-key; http/server.rs
    # `public_routes`), rendered by metrics-exporter-prometheus: counters and gauges under their
    # own names (no `_total` added), histograms in seconds with `_bucket`/`_sum`/`_count`.
    # core/src/queue.rs: te_queue_size, a gauge of the inputs queued and not yet batched (a
    # request of n inputs queues n entries). No gauge of the inputs in the batch running (
    # te_batch_next_size is a histogram of batch sizes). core/src/tokenization.rs encode_input:
    # te_request_input_length, a histogram of each queued input's tokens, whose `_sum` is the
    # prompt tokens. Embeddings generate no tokens: te_request_success (labelled method) counts
    # the requests answered. router/src/lib.rs ResponseMetadata::record_metrics, per finished
    # request, seconds: te_request_queue_duration and te_request_duration (end to end).
    load=LoadMetrics(
        kind="prometheus",
        requests_waiting=("te_queue_size",),
        prompt_tokens=("te_request_input_length_sum",),
        progress=("te_request_success",),
        latency=LatencyMetrics(
            queue_time=LatencyMetric(histogram=("te_request_queue_duration",)),
            end_to_end=LatencyMetric(histogram=("te_request_duration",)),
        ),
        note="TEI counts queued inputs, not requests, and reports none running nor tokens generated",
    ),
    # Every option has a clap `env` twin (MODEL_ID, SERVED_MODEL_NAME, HOSTNAME, PORT); argv wins.
    # The images set PORT=80 (Dockerfile `ENV ... PORT=80`), and Docker sets HOSTNAME to the
    # container id, which the router then binds unless --hostname is given.
    settings=Settings(
        environment={
            "MODEL_ID": "model",
            "SERVED_MODEL_NAME": "served_model_name",
            "HOSTNAME": "host",
            "PORT": "port",
        }
    ),
    # a Rust server on candle and cudarc (its Python backend's messages are PyTorch's)
    failures=_libraries.CLAP + _libraries.NATIVE_SERVER + _gpulayers.TORCH + _libraries.HUGGINGFACE,
)
