"""Load readings of the 2026 engines that report one (issue #41): a real process with the engine's
exact argv holds the socket a fake server answers on with metric text in the engine's own format
(names, labels, types, as its exporter writes them), read through the scan; hostile answers give
no numbers and never raise. Both backends."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from enginespec import get_engine_spec
from enginespec.health.load import check_load
from helpers.fakeserver import Answer
from helpers.loadkit import TEXT
from helpers.procs import Procs
from helpers.simpleservers import engine_process

# ---- Hugging Face text-embeddings-inference v1.9.3 ---------------------------------------------
# metrics-exporter-prometheus 0.15.3 (Cargo.lock) renders what router/src and core/src record:
# `# TYPE` lines, no HELP, a blank line between families, counters under their own names, f64
# written as Rust's Display writes them (no exponent). Durations in seconds, buckets
# 0.00001 * 1.5**k, k = 1..35 (router/src/prometheus.rs); input lengths 2**k up to the model's
# maximum input length.


def _rust(value: float) -> str:
    """A float as Rust's ``Display`` writes it: shortest round-trip digits, never an exponent."""
    if value == int(value):
        return str(int(value))
    return format(Decimal(repr(value)), "f")


_DURATION_BUCKETS = [0.00001 * 1.5**k for k in range(1, 36)]


def _histogram(name: str, bounds: list[float], observations: list[float]) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    for bound in bounds:
        lines.append(f'{name}_bucket{{le="{_rust(bound)}"}} {sum(1 for o in observations if o <= bound)}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {len(observations)}')
    lines.append(f"{name}_sum {_rust(sum(observations))}")
    lines.append(f"{name}_count {len(observations)}")
    return lines


def tei_metrics(done: int, queued: int = 3) -> bytes:
    """TEI's /metrics after ``done`` single embed requests of 0.02 s each (0.005 s queued), each
    of 12 input tokens, with ``queued`` inputs waiting."""
    families = [
        ["# TYPE te_request_count counter", f'te_request_count{{method="single"}} {done + queued}'],
        ["# TYPE te_request_success counter", f'te_request_success{{method="single"}} {done}'],
        ["# TYPE te_embed_count counter", f"te_embed_count {done + queued}"],
        ["# TYPE te_queue_size gauge", f"te_queue_size {queued}"],
        _histogram("te_request_input_length", [2.0**k for k in range(0, 10)], [12.0] * (done + queued)),
        _histogram("te_batch_next_size", [2.0**k for k in range(0, 13)], [1.0] * done),
        _histogram("te_request_queue_duration", _DURATION_BUCKETS, [0.005] * done),
        _histogram("te_request_duration", _DURATION_BUCKETS, [0.02] * done),
    ]
    return ("\n\n".join("\n".join(f) for f in families) + "\n").encode()


TEI_ARGV = ["text-embeddings-router", "--model-id", "BAAI/bge-m3", "--hostname", "127.0.0.1"]


def test_tei_reading_from_a_real_router_process(procs: Procs) -> None:
    answers = [Answer(200, tei_metrics(done), content_type=TEXT) for done in (10, 14)]
    with engine_process(procs, TEI_ARGV, {"/metrics": answers}) as (process, server):
        assert process.engine == "tei"
        first = check_load(process, timeout=10)
        second = check_load(process, previous=first, timeout=10)
        assert "/metrics" in [seen[1] for seen in server.script.seen]
    assert first.available, first
    assert first.source == f"{process.base_url}/metrics"
    assert (first.requests_running, first.requests_waiting) == (None, 3)
    assert first.prompt_tokens_total == 12 * 13
    assert first.generated_tokens_total is None
    assert first.kv_cache_usage is None
    assert "queued inputs" in first.reason
    assert second.latency is not None
    assert second.latency.queue_time.count == 4
    assert second.latency.queue_time.mean == pytest.approx(0.005)
    assert second.latency.end_to_end.mean == pytest.approx(0.02)
    assert second.latency.time_to_first_token.count is None
    # the success counter moved: with inputs queued, not stalled
    assert second.moved is True
    assert not second.stalled


def test_tei_metrics_are_asked_on_the_api_port_not_the_prometheus_port() -> None:
    load = get_engine_spec("tei").load
    assert (load.kind, load.path) == ("prometheus", "/metrics")


# ---- Docker Model Runner 642c7211 --------------------------------------------------------------
# pkg/metrics/aggregated_handler.go: each active runner's own text, parsed and re-encoded by
# expfmt (HELP and TYPE kept), each series given backend, model and mode labels.

_DMR_LABELS = 'backend="llama.cpp",model="ai/smollm2:latest",mode="completion"'


def dmr_metrics(predicted: int, seconds: float) -> bytes:
    lines = [
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
        "# TYPE llamacpp:prompt_tokens_total counter",
        f"llamacpp:prompt_tokens_total{{{_DMR_LABELS}}} 1024",
        "# HELP llamacpp:prompt_seconds_total Prompt process time",
        "# TYPE llamacpp:prompt_seconds_total counter",
        f"llamacpp:prompt_seconds_total{{{_DMR_LABELS}}} 0.512",
        "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
        "# TYPE llamacpp:tokens_predicted_total counter",
        f"llamacpp:tokens_predicted_total{{{_DMR_LABELS}}} {predicted}",
        "# HELP llamacpp:tokens_predicted_seconds_total Predict process time",
        "# TYPE llamacpp:tokens_predicted_seconds_total counter",
        f"llamacpp:tokens_predicted_seconds_total{{{_DMR_LABELS}}} {seconds}",
        "# HELP llamacpp:n_decode_total Total number of llama_decode() calls",
        "# TYPE llamacpp:n_decode_total counter",
        f"llamacpp:n_decode_total{{{_DMR_LABELS}}} {predicted}",
        "# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.",
        "# TYPE llamacpp:kv_cache_usage_ratio gauge",
        f"llamacpp:kv_cache_usage_ratio{{{_DMR_LABELS}}} 0.25",
        "# HELP llamacpp:requests_processing Number of requests processing.",
        "# TYPE llamacpp:requests_processing gauge",
        f"llamacpp:requests_processing{{{_DMR_LABELS}}} 2",
        "# HELP llamacpp:requests_deferred Number of requests deferred.",
        "# TYPE llamacpp:requests_deferred gauge",
        f"llamacpp:requests_deferred{{{_DMR_LABELS}}} 1",
    ]
    return ("\n".join(lines) + "\n").encode()


def test_docker_model_runner_reads_its_runners_through_the_daemon(procs: Procs) -> None:
    answers = [Answer(200, dmr_metrics(100, 2.0), content_type=TEXT), Answer(200, dmr_metrics(300, 6.0))]
    with engine_process(procs, ["dmr", "serve"], {"/metrics": answers}) as (process, _server):
        assert process.engine == "docker-model-runner"
        first = check_load(process, timeout=10)
        second = check_load(process, previous=first, timeout=10)
    assert first.available, first
    assert (first.requests_running, first.requests_waiting) == (2, 1)
    assert first.kv_cache_usage == 0.25
    assert (first.prompt_tokens_total, first.generated_tokens_total) == (1024, 100)
    assert "runners' metrics" in first.reason
    assert second.tokens_per_second is not None
    assert second.tokens_per_second > 0
    assert second.latency is not None
    assert second.latency.time_per_output_token.mean == pytest.approx(0.02)


def test_docker_model_runner_with_no_runner_active_has_no_figures(procs: Procs) -> None:
    idle = Answer(200, b"# No active runners\n", content_type="text/plain; version=0.0.4; charset=utf-8")
    with engine_process(procs, ["dmr", "serve"], {"/metrics": [idle]}) as (process, _server):
        load = check_load(process, timeout=10)
    assert not load.available
    assert load.requests_running is None
    assert "none of the engine's load metrics" in load.reason


def test_docker_model_runner_with_metrics_disabled_says_how(procs: Procs) -> None:
    with engine_process(procs, ["dmr", "serve"], {"/metrics": [Answer(404, b"404 page not found\n")]}) as (
        process,
        _server,
    ):
        load = check_load(process, timeout=10)
    assert not load.available
    assert "DISABLE_METRICS" in load.reason


# ---- NVIDIA Dynamo's frontend 79a21ca4 ---------------------------------------------------------
# lib/llm/src/http/service/metrics.rs: the `prometheus` crate's TextEncoder (HELP and TYPE lines,
# series labelled `model`, histogram buckets log-spaced from 0 at 2 significant figures,
# generate_log_buckets with each histogram's default (min, max, count)).


def _log_buckets(low: float, high: float, count: int) -> list[float]:
    """generate_log_buckets: 0, then ``count - 1`` log-spaced values at 2 significant figures."""
    bounds = [0.0]
    for i in range(1, count):
        value = math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (count - 1))
        scale = 10 ** (1 - math.floor(math.log10(value)))
        rounded = round(value * scale) / scale
        if rounded != bounds[-1]:
            bounds.append(rounded)
    return bounds


def _dynamo_histogram(name: str, about: str, bounds: list[float], observations: list[float]) -> list[str]:
    label = 'model="qwen/qwen3-0.6b"'
    lines = [f"# HELP {name} {about}", f"# TYPE {name} histogram"]
    for bound in bounds:
        count = sum(1 for o in observations if o <= bound)
        lines.append(f'{name}_bucket{{{label},le="{_rust(bound)}"}} {count}')
    lines.append(f'{name}_bucket{{{label},le="+Inf"}} {len(observations)}')
    lines.append(f"{name}_sum{{{label}}} {_rust(sum(observations))}")
    lines.append(f"{name}_count{{{label}}} {len(observations)}")
    return lines


def dynamo_metrics(done: int, inflight: int = 3, queued: int = 1) -> bytes:
    """The frontend's /metrics after ``done`` requests of 20 prompt tokens and 50 generated
    tokens each (first token at 0.25 s, 0.02 s between tokens, 1.25 s in all), with ``inflight``
    requests held, ``queued`` of them before their first token."""
    m = 'model="qwen/qwen3-0.6b"'
    p = "dynamo_frontend"
    families = [
        [
            f"# HELP {p}_inflight_requests Number of inflight requests",
            f"# TYPE {p}_inflight_requests gauge",
            f"{p}_inflight_requests{{{m}}} {inflight}",
        ],
        [
            f"# HELP {p}_queued_requests Number of requests in HTTP processing queue",
            f"# TYPE {p}_queued_requests gauge",
            f"{p}_queued_requests{{{m}}} {queued}",
        ],
        [
            f"# HELP {p}_output_tokens_total Total number of output tokens generated (updates in real-time)",
            f"# TYPE {p}_output_tokens_total counter",
            f"{p}_output_tokens_total{{{m}}} {50 * done}",
        ],
        [
            f"# HELP {p}_requests_total Total number of LLM requests processed",
            f"# TYPE {p}_requests_total counter",
            f'{p}_requests_total{{endpoint="chat_completions",{m},request_type="stream",'
            f'status="success"}} {done}',
        ],
        _dynamo_histogram(
            f"{p}_input_sequence_tokens",
            "Input sequence length in tokens",
            _log_buckets(50, 128000, 12),
            [20.0] * done,
        ),
        _dynamo_histogram(
            f"{p}_time_to_first_token_seconds",
            "Time to first token in seconds",
            _log_buckets(0.001, 480, 18),
            [0.25] * done,
        ),
        _dynamo_histogram(
            f"{p}_inter_token_latency_seconds",
            "Inter-token latency in seconds",
            _log_buckets(0.001, 2, 13),
            [0.02] * (49 * done),
        ),
        _dynamo_histogram(
            f"{p}_request_duration_seconds",
            "Duration of LLM requests",
            _log_buckets(1, 256, 10),
            [1.25] * done,
        ),
    ]
    return ("\n".join(line for family in families for line in family) + "\n").encode()


DYNAMO_ARGV = ["python3", "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", "{port}"]


def test_dynamo_frontend_reading_from_a_real_frontend_process(procs: Procs) -> None:
    answers = [Answer(200, dynamo_metrics(done), content_type=TEXT) for done in (4, 10)]
    with engine_process(procs, DYNAMO_ARGV, {"/metrics": answers}) as (process, server):
        assert process.engine == "dynamo"
        first = check_load(process, timeout=10)
        second = check_load(process, previous=first, timeout=10)
        assert "/metrics" in [seen[1] for seen in server.script.seen]
    assert first.available, first
    assert first.source == f"{process.base_url}/metrics"
    # inflight is all the frontend holds; queued_requests is a part of it, never added
    assert (first.requests_running, first.requests_waiting) == (3, None)
    assert first.pending == 3
    assert (first.prompt_tokens_total, first.generated_tokens_total) == (80, 200)
    assert first.kv_cache_usage is None
    assert "none as waiting" in first.reason
    assert second.tokens_per_second is not None
    assert second.tokens_per_second > 0
    assert second.latency is not None
    assert second.latency.time_to_first_token.count == 6
    assert second.latency.time_to_first_token.mean == pytest.approx(0.25)
    assert second.latency.time_per_output_token.mean == pytest.approx(0.02)
    assert second.latency.end_to_end.mean == pytest.approx(1.25)
    assert second.latency.queue_time.count is None
    assert second.moved is True
    assert not second.stalled


def test_dynamo_frontend_under_another_prefix_has_no_figures(procs: Procs) -> None:
    # DYN_METRICS_PREFIX=nim_llm renames every family: none of the names read is there
    renamed = dynamo_metrics(4).replace(b"dynamo_frontend_", b"nim_llm_")
    with engine_process(procs, DYNAMO_ARGV, {"/metrics": [Answer(200, renamed, content_type=TEXT)]}) as (
        process,
        _server,
    ):
        load = check_load(process, timeout=10)
    assert not load.available
    assert load.requests_running is None
    assert "none of the engine's load metrics" in load.reason


# ---- Lemonade v11.7.0 ---------------------------------------------------------------------------
# src/cpp/server/prometheus_metrics.cpp build_prometheus_metrics: its own families (HELP and TYPE
# written once, counters as integers), then each loaded llama.cpp runner's /metrics with the
# `llamacpp:` names sanitized to `lemonade_llamacpp_` and the model's labels appended.

_LEMONADE_LABELS = (
    'checkpoint="unsloth/Qwen3-0.6B-GGUF:Q4_0",device="gpu",model_name="Qwen3-0.6B-GGUF",'
    'recipe="llamacpp",type="llm"'
)


def lemonade_metrics(output: int, running: int = 1, deferred: int = 2) -> bytes:
    runner = f'tokens_max="0",{_LEMONADE_LABELS}'
    lines = [
        "# HELP lemonade_server_up Whether the Lemonade server is running.",
        "# TYPE lemonade_server_up gauge",
        "lemonade_server_up 1",
        "# HELP lemonade_loaded_models Number of models currently loaded in Lemonade.",
        "# TYPE lemonade_loaded_models gauge",
        "lemonade_loaded_models 1",
        "# HELP lemonade_model_output_tokens_total Cumulative output tokens observed for a model.",
        "# TYPE lemonade_model_output_tokens_total counter",
        f"lemonade_model_output_tokens_total{{{_LEMONADE_LABELS}}} {output}",
        "# HELP lemonade_llamacpp_requests_processing Number of requests processing.",
        "# TYPE lemonade_llamacpp_requests_processing gauge",
        f"lemonade_llamacpp_requests_processing{{{_LEMONADE_LABELS}}} {running}",
        "# HELP lemonade_llamacpp_requests_deferred Number of requests deferred.",
        "# TYPE lemonade_llamacpp_requests_deferred gauge",
        f"lemonade_llamacpp_requests_deferred{{{_LEMONADE_LABELS}}} {deferred}",
        "# HELP lemonade_llamacpp_kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.",
        "# TYPE lemonade_llamacpp_kv_cache_usage_ratio gauge",
        f"lemonade_llamacpp_kv_cache_usage_ratio{{{_LEMONADE_LABELS}}} 0.125",
        "# HELP lemonade_llamacpp_tokens_predicted_total Number of generation tokens processed.",
        "# TYPE lemonade_llamacpp_tokens_predicted_total counter",
        f"lemonade_llamacpp_tokens_predicted_total{{{runner}}} {output}",
        "# HELP lemonade_requests_total Cumulative inference requests observed by Lemonade.",
        "# TYPE lemonade_requests_total counter",
        "lemonade_requests_total 7",
        "# HELP lemonade_input_tokens_total Cumulative input tokens observed by Lemonade.",
        "# TYPE lemonade_input_tokens_total counter",
        "lemonade_input_tokens_total 900",
        "# HELP lemonade_output_tokens_total Cumulative output tokens observed by Lemonade.",
        "# TYPE lemonade_output_tokens_total counter",
        f"lemonade_output_tokens_total {output}",
        "# HELP lemonade_prompt_tokens_total Cumulative prompt tokens observed by Lemonade.",
        "# TYPE lemonade_prompt_tokens_total counter",
        "lemonade_prompt_tokens_total 1000",
    ]
    return ("\n".join(lines) + "\n").encode()


LEMONADE_ARGV = ["/usr/bin/lemond", "--host", "127.0.0.1"]


def test_lemonade_reading_from_a_real_lemond_process(procs: Procs) -> None:
    answers = [Answer(200, lemonade_metrics(output), content_type=TEXT) for output in (300, 700)]
    with engine_process(procs, LEMONADE_ARGV, {"/metrics": answers}) as (process, server):
        assert process.engine == "lemonade"
        first = check_load(process, timeout=10)
        second = check_load(process, previous=first, timeout=10)
        assert "/metrics" in [seen[1] for seen in server.script.seen]
    assert first.available, first
    assert first.source == f"{process.base_url}/metrics"
    assert (first.requests_running, first.requests_waiting) == (1, 2)
    assert first.kv_cache_usage == 0.125
    # its own totals, not the per-model copies nor the runner's
    assert (first.prompt_tokens_total, first.generated_tokens_total) == (1000, 300)
    assert "llama.cpp backends" in first.reason
    assert second.tokens_per_second is not None
    assert second.tokens_per_second > 0
    assert second.latency is None


def test_lemonade_with_nothing_loaded_reads_its_totals(procs: Procs) -> None:
    body = b"".join(
        line + b"\n"
        for line in lemonade_metrics(0).splitlines()
        if not line.startswith(
            (b"lemonade_llamacpp", b"# HELP lemonade_llamacpp", b"# TYPE lemonade_llamacpp")
        )
    )
    with engine_process(procs, LEMONADE_ARGV, {"/metrics": [Answer(200, body, content_type=TEXT)]}) as (
        process,
        _server,
    ):
        load = check_load(process, timeout=10)
    assert load.available
    assert (load.requests_running, load.requests_waiting, load.kv_cache_usage) == (None, None, None)
    assert load.generated_tokens_total == 0


def test_lemonade_with_an_api_key_says_so(procs: Procs) -> None:
    refused = Answer(401, b'{"error": "Invalid or missing API key"}', content_type="application/json")
    with engine_process(procs, LEMONADE_ARGV, {"/metrics": [refused]}) as (process, _server):
        load = check_load(process, timeout=10)
    assert not load.available
    assert "API key" in load.reason


def test_localai_reads_no_load() -> None:
    load = get_engine_spec("localai").load
    assert load.kind == "none"
    assert "no request counts" in load.note


# ---- hostile answers, for every engine here ----------------------------------------------------

_HOSTILE = [
    b"garbage \x00\xff\n",
    b"te_queue_size nope\nllamacpp:requests_processing nope\ndynamo_frontend_inflight_requests nope\n"
    * 20_000,
    b"# TYPE te_queue_size gauge\nte_queue_size -4\n# TYPE llamacpp:requests_processing gauge\n"
    b"llamacpp:requests_processing -4\n# TYPE dynamo_frontend_inflight_requests gauge\n"
    b'dynamo_frontend_inflight_requests{model="m"} -4\n',
    b"te_queue_size NaN\nllamacpp:requests_processing +Inf\nllamacpp:kv_cache_usage_ratio 7\n"
    b"dynamo_frontend_inflight_requests NaN\nlemonade_llamacpp_requests_deferred NaN\n"
    b"lemonade_llamacpp_requests_processing -1\nlemonade_llamacpp_kv_cache_usage_ratio +Inf\n",
    b"te_queue_size 1e308\nte_queue_size 1e308\nllamacpp:requests_processing 1e308\n"
    b"llamacpp:requests_processing 1e308\ndynamo_frontend_inflight_requests 1e308\n"
    b"dynamo_frontend_inflight_requests 1e308\n"
    b"lemonade_llamacpp_requests_processing 1e308\nlemonade_llamacpp_requests_processing 1e308\n"
    b"lemonade_llamacpp_kv_cache_usage_ratio -0.5\n",
    # a histogram whose buckets go down and whose count is negative
    b"# TYPE dynamo_frontend_time_to_first_token_seconds histogram\n"
    b'dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="0.1"} 9\n'
    b'dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="+Inf"} 2\n'
    b'dynamo_frontend_time_to_first_token_seconds_sum{model="m"} -1\n'
    b'dynamo_frontend_time_to_first_token_seconds_count{model="m"} -2\n',
    b'te_queue_size{le="' + b"x" * 100_000 + b'"} nope\n',
    b"{" * 200_000,
]


@pytest.mark.parametrize(
    ("argv", "engine"),
    [
        (TEI_ARGV, "tei"),
        (["dmr", "serve"], "docker-model-runner"),
        (DYNAMO_ARGV, "dynamo"),
        (LEMONADE_ARGV, "lemonade"),
    ],
    ids=["tei", "docker-model-runner", "dynamo", "lemonade"],
)
@pytest.mark.parametrize("body", _HOSTILE, ids=range(len(_HOSTILE)))
def test_hostile_metrics_answers_give_no_numbers(
    procs: Procs, argv: list[str], engine: str, body: bytes
) -> None:
    routes = {"/metrics": [Answer(200, body, content_type=TEXT)]}
    with engine_process(procs, argv, routes) as (process, _server):
        assert process.engine == engine
        load = check_load(process, timeout=10)
    assert load.requests_running is None
    assert load.requests_waiting is None
    assert load.kv_cache_usage is None
