"""Request latency over the window between two load readings (enginespec.health.latency), from
real HTTP servers on loopback answering with each engine's exposition, on both backends.

vLLM, SGLang and LMDeploy write their metrics with prometheus-client: the answers here are made
by prometheus-client's own ``generate_latest`` from histograms of the engines' names, buckets and
labels (cited at each), with observations made between the two readings, so each figure expected
is worked out by hand from which bucket each observation fell in. TGI's exposition is written by
metrics-exporter-prometheus and llama-server's by hand (both in the shape their sources write)."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

import enginespec.health.latency as latency
from enginespec.definition.records import LatencyMetric, LatencyMetrics
from enginespec.health.load import EngineLoad, check_load
from helpers.fakeserver import Answer, serving
from helpers.loadkit import TEXT


def answer(body: bytes) -> Answer:
    return Answer(200, body, content_type=TEXT)


def two_readings(engine: str, first: bytes, second: bytes) -> tuple[EngineLoad, EngineLoad]:
    with serving({"/metrics": [answer(first), answer(second)]}) as server:
        before = check_load(engine, server.url)
        after = check_load(engine, server.url, previous=before)
    return before, after


# vLLM 0.33.0, vllm/v1/metrics/buckets.py and loggers.py: the buckets of each histogram, labelled
# model_name and engine (one series per engine core).
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
VLLM_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0]


class VllmEngine:
    """vLLM's latency histograms, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        names = ["model_name", "engine"]

        def histogram(name: str, buckets: list[float]) -> Histogram:
            return Histogram(name, "", labelnames=names, buckets=buckets, registry=self.registry)

        self.ttft = histogram("vllm:time_to_first_token_seconds", VLLM_TTFT)
        self.itl = histogram("vllm:inter_token_latency_seconds", VLLM_ITL)
        self.queue = histogram("vllm:request_queue_time_seconds", VLLM_REQUEST)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", VLLM_REQUEST)
        # vLLM makes each engine core's series at start (loggers.py create_metric_per_engine)
        for one in (self.ttft, self.itl, self.queue, self.e2e):
            one.labels("m", "0")
            one.labels("m", "1")

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def observe(histogram: Histogram, labels: tuple[str, ...], *values: float) -> None:
    for value in values:
        histogram.labels(*labels).observe(value)


def test_vllm_figures_are_the_buckets_moved_in_the_window_to_the_bucket() -> None:
    engine = VllmEngine()
    # before the first reading: what the window must not count
    observe(engine.ttft, ("m", "0"), 0.03, 0.03, 0.03, 0.03, 0.03)
    observe(engine.e2e, ("m", "0"), 7.0, 7.0)
    first = engine.exposition()
    # the window: 6 in (0.04, 0.06] and 4 in (0.25, 0.5], over two engine cores
    observe(engine.ttft, ("m", "0"), 0.05, 0.05, 0.05, 0.3, 0.3)
    observe(engine.ttft, ("m", "1"), 0.05, 0.05, 0.05, 0.3, 0.3)
    observe(engine.itl, ("m", "0"), *[0.02] * 8, *[0.09] * 2)
    observe(engine.queue, ("m", "1"), *[0.1] * 10)
    observe(engine.e2e, ("m", "0"), 1.2, 1.2, 1.2)
    before, after = two_readings("vllm", first, engine.exposition())

    assert before.latency is None  # one reading: no window yet
    lat = after.latency
    assert lat is not None, after
    assert lat.window_seconds == pytest.approx(after.monotonic - before.monotonic)
    assert (lat.window_start, lat.window_end) == (before.read_at, after.read_at)
    ttft = lat.time_to_first_token
    assert (ttft.count, ttft.metric, ttft.estimated) == (10, "vllm:time_to_first_token_seconds", True)
    assert ttft.mean == pytest.approx((6 * 0.05 + 4 * 0.3) / 10)
    # p50: rank 5 of 10 falls in (0.04, 0.06], which holds the window's first 6
    assert ttft.p50 == pytest.approx(0.04 + (0.06 - 0.04) * 5 / 6)
    assert ttft.p50_bucket is not None
    assert (ttft.p50_bucket.lower, ttft.p50_bucket.upper) == (0.04, 0.06)
    # p95 and p99: ranks 9.5 and 9.9 fall in (0.25, 0.5], holding the 7th to the 10th
    assert ttft.p95 == pytest.approx(0.25 + 0.25 * 3.5 / 4)
    assert ttft.p99 == pytest.approx(0.25 + 0.25 * 3.9 / 4)
    assert ttft.p99_bucket is not None
    assert (ttft.p99_bucket.lower, ttft.p99_bucket.upper) == (0.25, 0.5)
    itl = lat.time_per_output_token
    assert itl.metric == "vllm:inter_token_latency_seconds"
    assert itl.count == 10
    assert itl.mean == pytest.approx((8 * 0.02 + 2 * 0.09) / 10)
    # 8 in (0.01, 0.025], 2 in (0.075, 0.1]: rank 5 in the first, 9.5 and 9.9 in the second
    assert itl.p50 == pytest.approx(0.01 + 0.015 * 5 / 8)
    assert itl.p95 == pytest.approx(0.075 + 0.025 * 1.5 / 2)
    assert itl.p99 == pytest.approx(0.075 + 0.025 * 1.9 / 2)
    # the lowest bucket interpolates from 0: all 10 at 0.1 are in (0, 0.3]
    queue = lat.queue_time
    assert queue.p50 == pytest.approx(0.3 * 0.5)
    assert queue.p99 == pytest.approx(0.3 * 0.99)
    assert queue.p50_bucket is not None
    assert (queue.p50_bucket.lower, queue.p50_bucket.upper) == (0.0, 0.3)
    # 3 requests finished in the window, all in (1.0, 1.5]
    assert lat.requests_finished == 3 == lat.end_to_end.count
    assert lat.end_to_end.p50 == pytest.approx(1.0 + 0.5 * 1.5 / 3)
    assert lat.end_to_end.mean == pytest.approx(1.2)
    # per model: vLLM labels every series with its served name
    assert [m.model for m in lat.models] == ["m"]
    assert lat.models[0].time_to_first_token == ttft
    json.loads(after.model_dump_json())["latency"]["time_to_first_token"]["p50_bucket"]


def test_the_older_vllm_name_of_the_inter_token_histogram_is_read() -> None:
    registry = CollectorRegistry()
    old = Histogram(
        "vllm:time_per_output_token_seconds",
        "",
        ["model_name", "engine"],
        buckets=VLLM_ITL,
        registry=registry,
    )
    old.labels("m", "0")
    first = generate_latest(registry)
    observe(old, ("m", "0"), 0.03, 0.03)
    _, after = two_readings("vllm", first, generate_latest(registry))
    assert after.latency is not None
    tpot = after.latency.time_per_output_token
    assert (tpot.metric, tpot.count) == ("vllm:time_per_output_token_seconds", 2)
    # both in (0.025, 0.05]: rank 1 of 2 is halfway
    assert tpot.p50 == pytest.approx(0.025 + 0.025 * 0.5)
    assert after.latency.time_to_first_token.reason.startswith("none of vllm:time_to_first_token_seconds")


def test_series_of_two_models_give_each_model_its_figures_and_the_server_their_sum() -> None:
    engine = VllmEngine()
    first = engine.exposition()
    observe(engine.ttft, ("big", "0"), 0.003, 0.003)  # (0.001, 0.005]
    observe(engine.ttft, ("small", "0"), 0.7, 0.7)  # (0.5, 0.75]
    _, after = two_readings("vllm", first, engine.exposition())
    assert after.latency is not None
    by_model = {m.model: m.time_to_first_token for m in after.latency.models}
    assert by_model["big"].p50 == pytest.approx(0.001 + 0.004 * 0.5)
    assert by_model["small"].p50 == pytest.approx(0.5 + 0.25 * 0.5)
    whole = after.latency.time_to_first_token
    # rank 2 of 4 is the last of big's bucket; rank 3.8 (p95) three fifths into small's
    assert whole.count == 4
    assert whole.p50 == pytest.approx(0.005)
    assert whole.p95 == pytest.approx(0.5 + 0.25 * 1.8 / 2)


def test_no_request_in_the_window_is_a_count_of_0_and_no_figures() -> None:
    engine = VllmEngine()
    observe(engine.ttft, ("m", "0"), 0.3)
    body = engine.exposition()
    _, after = two_readings("vllm", body, body)
    assert after.latency is not None
    ttft = after.latency.time_to_first_token
    assert (ttft.count, ttft.mean, ttft.p50, ttft.p95, ttft.p99) == (0, None, None, None, None)
    assert after.latency.requests_finished == 0


def test_a_count_going_back_gives_no_figure_and_says_why() -> None:
    engine = VllmEngine()
    observe(engine.ttft, ("m", "0"), 0.3, 0.3, 0.3)
    observe(engine.itl, ("m", "0"), 0.02)
    first = engine.exposition()
    restarted = VllmEngine()
    observe(restarted.ttft, ("m", "0"), 0.3)
    observe(restarted.itl, ("m", "0"), 0.02, 0.02)
    _, after = two_readings("vllm", first, restarted.exposition())
    assert after.latency is not None
    ttft = after.latency.time_to_first_token
    assert (ttft.count, ttft.p50, ttft.mean) == (None, None, None)
    assert "went back" in ttft.reason
    # a figure whose counts only grew still has its window
    assert after.latency.time_per_output_token.count == 1


def test_the_first_reading_and_an_engine_without_latency_metrics_have_none() -> None:
    engine = VllmEngine()
    with serving({"/metrics": [answer(engine.exposition())]}) as server:
        assert check_load("vllm", server.url).latency is None
    gauges = b"# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n"
    _, after = two_readings("tgi", gauges, gauges)
    assert after.latency is not None
    assert after.latency.end_to_end.reason.startswith("none of tgi_request_duration")


# SGLang 0.5.23, sglang/srt/observability/metrics_collector.py: TokenizerMetricsCollector labels its
# histograms model_name and engine_type (and is_streaming for TTFT and e2e); the scheduler's queue
# time buckets start at 0.
SGLANG_QUEUE = [0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]
SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]


def test_sglang_series_split_by_streaming_are_summed_and_a_bucket_at_0_gives_0() -> None:
    registry = CollectorRegistry()
    ttft = Histogram(
        "sglang:time_to_first_token_seconds",
        "",
        ["model_name", "engine_type", "is_streaming"],
        buckets=SGLANG_TTFT,
        registry=registry,
    )
    queue = Histogram(
        "sglang:queue_time_seconds",
        "",
        ["model_name", "engine_type"],
        buckets=SGLANG_QUEUE,
        registry=registry,
    )
    # the tokenizer's series appear with their first request; the scheduler's gauges are there
    gauge = b'# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="m"} 0.0\n'
    first = generate_latest(registry) + gauge
    observe(ttft, ("m", "unified", "true"), 0.5, 0.5, 0.5)  # (0.4, 0.6]
    observe(ttft, ("m", "unified", "false"), 3.0)  # (2.0, 4.0]
    observe(queue, ("m", "unified"), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.7)
    _, after = two_readings("sglang", first, generate_latest(registry) + gauge)
    assert after.latency is not None
    whole = after.latency.time_to_first_token
    assert whole.count == 4
    assert whole.p50 == pytest.approx(0.4 + 0.2 * 2 / 3)
    assert whole.p95 == pytest.approx(2.0 + 2.0 * (3.8 - 3))
    # rank 5 of 10 falls in the bucket le=0, whose bound is not above 0: the bound itself
    q = after.latency.queue_time
    assert q.p50 == 0.0
    assert q.p50_bucket is not None
    assert (q.p50_bucket.lower, q.p50_bucket.upper) == (0.0, 0.0)
    assert q.p99 == pytest.approx(0.5 + 0.5 * (9.9 - 9))
    assert [m.model for m in after.latency.models] == ["m"]
    assert after.latency.end_to_end.count is None  # the engine had not made that series yet


def test_lmdeploy_inter_token_latency_comes_first() -> None:
    # lmdeploy v0.16.0, lmdeploy/metrics/loggers.py: labelled model_name and engine
    registry = CollectorRegistry()
    buckets = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1]
    itl = Histogram(
        "lmdeploy:iter_token_latency", "", ["model_name", "engine"], buckets=buckets, registry=registry
    )
    tpot = Histogram(
        "lmdeploy:time_per_output_token_seconds",
        "",
        ["model_name", "engine"],
        buckets=buckets,
        registry=registry,
    )
    itl.labels("m", "0")
    tpot.labels("m", "0")
    first = generate_latest(registry)
    observe(itl, ("m", "0"), 0.007, 0.007, 0.007, 0.007)  # (0.005, 0.01]
    observe(tpot, ("m", "0"), 0.09)
    _, after = two_readings("lmdeploy", first, generate_latest(registry))
    assert after.latency is not None
    figure = after.latency.time_per_output_token
    assert (figure.metric, figure.count) == ("lmdeploy:iter_token_latency", 4)
    assert figure.p50 == pytest.approx(0.005 + 0.005 * 2 / 4)


def tgi_exposition(observed: dict[float, int], total: float) -> bytes:
    """tgi_request_duration as metrics-exporter-prometheus writes it: TGI's 35 buckets
    (router/src/server.rs, v3.3.7: 0.0001 * 1.5**k), cumulative, then +Inf, _sum, _count."""
    bounds = [0.0001 * 1.5**k for k in range(1, 36)]
    lines = ["# TYPE tgi_request_duration histogram"]
    count = 0
    for bound in bounds:
        count += sum(n for value, n in observed.items() if value <= bound and value > bound / 1.5)
        lines.append(f'tgi_request_duration_bucket{{le="{bound!r}"}} {count}')
    everything = sum(observed.values())
    lines += [
        f'tgi_request_duration_bucket{{le="+Inf"}} {everything}',
        f"tgi_request_duration_sum {total!r}",
        f"tgi_request_duration_count {everything}",
    ]
    return ("\n".join(lines) + "\n").encode()


def test_tgi_requests_past_the_last_bucket_give_its_bound() -> None:
    last = 0.0001 * 1.5**35
    first = tgi_exposition({2.0: 1}, 2.0)
    second = tgi_exposition({2.0: 1, 300.0: 2}, 602.0)
    _, after = two_readings("tgi", first, second)
    assert after.latency is not None
    e2e = after.latency.end_to_end
    assert (e2e.count, e2e.mean) == (2, pytest.approx(300.0))
    assert e2e.p50 == pytest.approx(last)
    assert e2e.p99 == pytest.approx(last)
    assert e2e.p99_bucket is not None
    assert e2e.p99_bucket.upper is None
    assert e2e.p99_bucket.lower == pytest.approx(last)
    assert after.latency.requests_finished == 2
    assert after.latency.time_to_first_token.reason == "the engine reports no such figure"
    assert after.latency.models == ()  # TGI labels nothing by model


def llamacpp(seconds: float, tokens: int) -> bytes:
    # tools/server/server-task.cpp to_metrics (llama.cpp vendored by llama-cpp-python 0.3.35)
    return (
        "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed\n"
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {tokens}\n"
        "# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens\n"
        "# TYPE llamacpp:tokens_predicted_seconds_total counter\n"
        f"llamacpp:tokens_predicted_seconds_total {seconds}\n"
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
    ).encode()


def test_llama_server_counters_give_the_mean_time_per_token_and_no_percentiles() -> None:
    _, after = two_readings("llamacpp", llamacpp(2.0, 100), llamacpp(5.0, 160))
    assert after.latency is not None
    tpot = after.latency.time_per_output_token
    assert (tpot.count, tpot.mean) == (60, pytest.approx(3.0 / 60))
    assert (tpot.p50, tpot.p95, tpot.p99, tpot.estimated) == (None, None, None, False)
    assert "counters only" in tpot.reason
    assert after.latency.requests_finished is None
    assert after.latency.time_to_first_token.count is None
    _, reset = two_readings("llamacpp", llamacpp(5.0, 160), llamacpp(1.0, 20))
    assert reset.latency is not None
    assert "went back" in reset.latency.time_per_output_token.reason


# -- the estimate itself, and the engine's unit ------------------------------------------------------


def test_bucket_quantile_follows_histogram_quantile() -> None:
    inf = math.inf
    assert latency.bucket_quantile(0.5, ((1.0, 0.0), (inf, 0.0))) is None
    assert latency.bucket_quantile(0.5, ((inf, 4.0),)) is None  # only +Inf: no estimate
    value, bounds = latency.bucket_quantile(0.5, ((1.0, 2.0), (2.0, 6.0), (inf, 8.0))) or (None, None)
    assert value == pytest.approx(1.0 + 1.0 * 2 / 4)
    assert bounds is not None
    assert (bounds.lower, bounds.upper) == (1.0, 2.0)


def _window(metric: LatencyMetric, before: str, after: str) -> latency.Latency | None:
    metrics = LatencyMetrics(end_to_end=metric)
    from enginespec.health.load import parse_metrics

    def read(text: str, at: float) -> latency.LatencyReading:
        series: dict[str, list[tuple[dict[str, str], float]]] = {}
        cut: list[str] = []
        parse_metrics(text, (), labelled=latency.histogram_samples(metrics), series=series, cut=cut)
        return latency.reading(metrics, series, {}, read_at=at, monotonic=at, cut="; ".join(cut))

    return latency.latency_between(read(before, 10.0), read(after, 15.0))


def hist(name: str, buckets: dict[str, float], total: float) -> str:
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{le}"}} {value}' for le, value in buckets.items()]
    count = buckets.get("+Inf", 0.0)
    return "\n".join([*lines, f"{name}_sum {total}", f"{name}_count {count}"]) + "\n"


def test_an_engine_in_milliseconds_gives_seconds() -> None:
    metric = LatencyMetric(histogram=("e2e_ms",), unit="milliseconds")
    before = hist("e2e_ms", {"100": 0, "500": 0, "+Inf": 0}, 0)
    after = hist("e2e_ms", {"100": 1, "500": 4, "+Inf": 4}, 900)
    lat = _window(metric, before, after)
    assert lat is not None
    assert lat.window_seconds == 5.0
    e2e = lat.end_to_end
    assert e2e.mean == pytest.approx(0.225)
    # rank 2 of 4: the second of (100, 500]'s 3 ms-buckets observations
    assert e2e.p50 == pytest.approx((100 + 400 * 1 / 3) / 1000)
    assert e2e.p50_bucket is not None
    assert (e2e.p50_bucket.lower, e2e.p50_bucket.upper) == (0.1, 0.5)


# -- hostile expositions: no crash, no figure made up, a reason ---------------------------------------

METRIC = LatencyMetric(histogram=("h",))
GOOD = hist("h", {"1": 0, "2": 0, "+Inf": 0}, 0)


@pytest.mark.parametrize(
    ("after", "why"),
    [
        (hist("h", {"1": math.nan, "2": 3, "+Inf": 3}, 3), "not a count"),
        (hist("h", {"1": 1, "2": math.inf, "+Inf": 3}, 3), "not a count"),
        (hist("h", {"1": 1, "2": 3, "+Inf": 3}, math.nan), "not a finite"),
        (hist("h", {"1": 1, "2": 3, "+Inf": 3}, 10**400), "not a finite"),
        (hist("h", {"1": 1, "2": -3, "+Inf": 3}, 3), "not a count"),
        (hist("h", {"1": 1, "NaN": 2, "+Inf": 3}, 3), "not a number"),
        (hist("h", {"1": 1, "abc\x1b[31m": 2, "+Inf": 3}, 3), "not a number"),
        (hist("h", {"1": 1, "2": 3}, 3), "+Inf"),
        (hist("h", {"1": 1, "1.0": 2, "+Inf": 3}, 3), "twice"),
        (hist("h", {"1": 1, "2": 2, "+Inf": 3, "5": 3}, 3), "not read whole"),
    ],
)
def test_hostile_buckets_give_no_figure_and_say_why(after: str, why: str) -> None:
    if why == "not read whole":
        after = 'h_bucket{le="1"} 1\n' * 20_000  # past the sample cap
    lat = _window(METRIC, GOOD, after)
    assert lat is not None
    e2e = lat.end_to_end
    assert (e2e.count, e2e.mean, e2e.p50, e2e.p99) == (None, None, None, None)
    assert why in e2e.reason or why in lat.reason
    assert "\x1b" not in e2e.reason


def test_non_monotonic_buckets_are_made_monotonic_as_prometheus_does_and_said() -> None:
    lat = _window(METRIC, GOOD, hist("h", {"1": 3, "2": 1, "+Inf": 4}, 4))
    assert lat is not None
    e2e = lat.end_to_end
    # bucket le=2 raised to 3: rank 2 of 4 in (0, 1] holding 3
    assert e2e.p50 == pytest.approx(2 / 3)
    assert "monotonic" in e2e.reason


def test_a_hundred_thousand_buckets_are_cut_not_read() -> None:
    body = GOOD + "".join(f'h_bucket{{le="{i}"}} {i}\n' for i in range(100_000))
    lat = _window(METRIC, GOOD, body)
    assert lat is not None
    assert lat.end_to_end.p50 is None
    assert "not read whole" in lat.reason


def test_hostile_histograms_from_a_server_do_not_break_the_reading() -> None:
    # 3000 buckets of 1e308 (past what a float counts exactly), with a model name holding an escape
    huge = "".join(
        f'vllm:e2e_request_latency_seconds_bucket{{le="{i}",model_name="m\x1b[2J"}} 1e308\n'
        for i in range(3000)
    )
    body = huge.encode() + b"vllm:num_requests_running 2\n"
    _, after = two_readings("vllm", body, body)
    assert after.requests_running == 2
    assert after.latency is not None
    assert after.latency.end_to_end.p50 is None
    assert "not a count" in after.latency.end_to_end.reason
    assert after.latency.models == ()


def test_models_past_the_cap_are_in_the_servers_figures_only() -> None:
    engine = VllmEngine()
    first = engine.exposition()
    names = [f"model-{i:03d}\x1b" for i in range(latency.MAX_MODELS + 6)]
    for name in names:
        observe(engine.ttft, (name, "0"), 0.003)
    _, after = two_readings("vllm", first, engine.exposition())
    assert after.latency is not None
    assert after.latency.time_to_first_token.count == len(names)
    # "m", vLLM's own (its series made at start, nothing moved), and the first of the others
    assert [m.model for m in after.latency.models] == sorted(["m", *names])[: latency.MAX_MODELS]
    assert after.latency.models[0].time_to_first_token.count == 0
    assert f"{len(names) + 1} models" in after.latency.reason
    # a name is shown as the engine gave it (its escape character literal, escaped in JSON)
    assert "\\u001b" in after.model_dump_json()
