"""Load readings (enginespec.health.load) from real HTTP servers on loopback answering as each engine's
metrics endpoint does, on both backends."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from contextlib import ExitStack

import pytest

import enginespec.health.load as load_module
from enginespec.definition.registry import all_engines
from enginespec.errors import InvalidInputError
from enginespec.health.load import (
    STALL_ENV,
    EngineLoad,
    check_load,
    check_load_all,
    check_load_async,
    parse_metrics,
)
from helpers.fakeserver import Answer, serving
from helpers.loadkit import TEXT, engine_for, vllm_metrics


def metrics(answer: bytes) -> Answer:
    return Answer(200, answer, content_type=TEXT)


def test_vllm_reading_is_normalized_and_summed_over_engine_cores() -> None:
    with serving({"/metrics": [metrics(vllm_metrics(500.0))]}) as server:
        load = check_load("vllm", server.url)
    assert load.available, load
    assert (load.requests_running, load.requests_waiting) == (4, 1)
    assert load.kv_cache_usage == pytest.approx(0.5)
    assert (load.prompt_tokens_total, load.generated_tokens_total) == (1024.0, 500.0)
    # one reading: no rate yet
    assert load.tokens_per_second is None
    assert load.source == server.url + "/metrics"
    assert abs(load.read_at - time.time()) < 60


def test_tokens_per_second_comes_from_two_readings() -> None:
    answers = [metrics(vllm_metrics(100.0)), metrics(vllm_metrics(400.0))]
    with serving({"/metrics": answers}) as server:
        first = check_load("vllm", server.url)
        second = check_load("vllm", server.url, previous=first)
    elapsed = second.monotonic - first.monotonic
    assert second.tokens_per_second == pytest.approx(300.0 / elapsed)
    assert second.moved is True


def test_a_counter_going_back_gives_no_rate() -> None:
    answers = [metrics(vllm_metrics(400.0)), metrics(vllm_metrics(10.0))]
    with serving({"/metrics": answers}) as server:
        first = check_load("vllm", server.url)
        second = check_load("vllm", server.url, previous=first)
    assert second.tokens_per_second is None


def test_the_old_kv_cache_name_is_read_when_the_new_one_is_absent() -> None:
    with serving({"/metrics": [metrics(vllm_metrics(1.0, kv="gpu_cache_usage_perc"))]}) as server:
        assert check_load("vllm", server.url).kv_cache_usage == pytest.approx(0.5)


def test_the_new_kv_cache_name_wins_over_the_old_one() -> None:
    both = vllm_metrics(1.0) + b'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9\n'
    with serving({"/metrics": [metrics(both)]}) as server:
        assert check_load("vllm", server.url).kv_cache_usage == pytest.approx(0.5)


LLAMACPP = b"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 78
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
"""


def test_llamacpp_reading_and_a_metric_not_exposed_is_none_not_zero() -> None:
    with serving({"/metrics": [metrics(LLAMACPP)]}) as server:
        load = check_load("llamacpp", server.url)
    assert (load.requests_running, load.requests_waiting) == (2, 5)
    assert (load.prompt_tokens_total, load.generated_tokens_total) == (33.0, 78.0)
    # current llama-server builds have no KV-cache gauge
    assert load.kv_cache_usage is None


def test_llama_server_decode_calls_count_as_progress_and_the_reading_says_how_it_counts() -> None:
    """llama-server adds a request's tokens when the request ends: during a long generation its
    token counters stand still while ``n_decode_total`` moves, which is progress, not a stall."""

    def llamacpp(decodes: int) -> Answer:
        return metrics(
            LLAMACPP + f"# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total {decodes}\n".encode()
        )

    with serving({"/metrics": [metrics(LLAMACPP), llamacpp(10), llamacpp(90), llamacpp(90)]}) as server:
        old_build = check_load("llamacpp", server.url)  # no n_decode_total: moved is unknown
        first = check_load("llamacpp", server.url, previous=old_build)
        second = check_load("llamacpp", server.url, previous=first)
        frozen = check_load("llamacpp", server.url, previous=second, stall_after=0.001)
    assert "when it ends" in first.reason
    assert (second.tokens_per_second, second.moved, second.progress_at) == (0.0, True, second.monotonic)
    assert (frozen.moved, frozen.stalled) == (False, True)


def test_llama_server_without_metrics_says_which_flag_it_needs() -> None:
    body = (
        b'{"error":{"code":501,"message":"This server does not support metrics endpoint.",'
        b'"type":"not_supported_error"}}'
    )
    with serving({"/metrics": [Answer(501, body)]}) as server:
        load = check_load("llamacpp", server.url)
    assert not load.available
    assert load.generated_tokens_total is None
    assert load.requests_running is None
    assert "--metrics" in load.reason
    assert "501" in load.reason


def test_sglang_needs_enable_metrics_and_reads_its_names() -> None:
    with serving({"/metrics": [Answer(404, b"")]}) as server:
        assert "--enable-metrics" in check_load("sglang", server.url).reason
    body = b"""# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 7.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.28
# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{model_name="m"} 8.128902e+06
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{model_name="m"} 7.557572e+06
"""
    with serving({"/metrics": [metrics(body)]}) as server:
        load = check_load("sglang", server.url)
    assert (load.requests_running, load.requests_waiting, load.kv_cache_usage) == (3, 7, 0.28)
    assert (load.prompt_tokens_total, load.generated_tokens_total) == (8128902.0, 7557572.0)


def test_tgi_decode_steps_count_as_progress() -> None:
    def tgi(steps: int) -> bytes:
        return (
            "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 4\n"
            "# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n"
            "# TYPE tgi_request_generated_tokens histogram\n"
            'tgi_request_generated_tokens_bucket{le="+Inf"} 1\ntgi_request_generated_tokens_sum 10\n'
            "tgi_request_generated_tokens_count 1\n"
            "# TYPE tgi_batch_inference_success counter\n"
            f'tgi_batch_inference_success{{method="decode"}} {steps}\n'
            'tgi_batch_inference_success{method="prefill"} 3\n'
        ).encode()

    with serving({"/metrics": [metrics(tgi(100)), metrics(tgi(140))]}) as server:
        first = check_load("tgi", server.url)
        second = check_load("tgi", server.url, previous=first)
    assert (first.requests_running, first.requests_waiting, first.generated_tokens_total) == (4, 2, 10.0)
    assert first.kv_cache_usage is None
    # no request finished, so no generated tokens counted, but decode steps ran
    assert second.tokens_per_second == 0.0
    assert second.moved is True


def test_lmdeploy_names() -> None:
    body = b"""lmdeploy:num_requests_running{model_name="m"} 1.0
lmdeploy:num_requests_waiting{model_name="m"} 0.0
lmdeploy:gpu_cache_usage_perc{model_name="m"} 0.1
lmdeploy:prompt_tokens_total{model_name="m"} 5.0
lmdeploy:generation_tokens_total{model_name="m"} 6.0
"""
    with serving({"/metrics": [metrics(body)]}) as server:
        load = check_load("lmdeploy", server.url)
    assert (load.requests_running, load.requests_waiting, load.kv_cache_usage) == (1, 0, 0.1)
    assert (load.prompt_tokens_total, load.generated_tokens_total) == (5.0, 6.0)


def test_ollama_reports_its_loaded_models_and_no_request_counts() -> None:
    ps = b'{"models":[{"name":"llama3:8b","model":"llama3:8b"},{"name":"qwen3:4b","model":"qwen3:4b"}]}'
    with serving({"/api/ps": [Answer(200, ps)]}) as server:
        load = check_load("ollama", server.url)
    assert load.available
    assert load.models_loaded == 2
    assert load.requests_running is None
    assert load.generated_tokens_total is None
    assert load.source == server.url + "/api/ps"


def test_an_engine_without_metrics_says_so_and_is_not_asked() -> None:
    with serving({"/metrics": [metrics(LLAMACPP)]}) as server:
        load = check_load("mlx", server.url)
        assert server.script.seen == []
    assert (load.available, load.source) == (False, "none")
    assert load.reason


def test_every_engine_has_load_data_or_says_it_has_none() -> None:
    for spec in all_engines():
        metrics_ = spec.load
        if metrics_.kind == "prometheus":
            assert metrics_.generated_tokens or metrics_.progress, spec.id
            assert metrics_.requests_running or metrics_.requests_waiting, spec.id
        else:
            assert metrics_.note, spec.id


def test_an_answer_over_the_size_cap_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_module, "MAX_ANSWER_BYTES", 4096)
    huge = vllm_metrics(1.0) + b"# filler\n" * 2000
    with serving({"/metrics": [metrics(huge)]}) as server:
        load = check_load("vllm", server.url)
    assert not load.available
    assert "larger than 4096 bytes" in load.reason


def test_a_trickling_answer_is_cut_at_the_timeout() -> None:
    with serving({"/metrics": [Answer(200, vllm_metrics(1.0), trickle=0.05, content_type=TEXT)]}) as server:
        load = check_load("vllm", server.url, timeout=0.3)
    assert not load.available
    assert "no answer within 0.3s" in load.reason


def test_a_hung_metrics_endpoint_is_reported_not_raised() -> None:
    with serving({"/metrics": [Answer(hang=True)]}) as server:
        load = check_load("vllm", server.url, timeout=0.3)
    assert (load.available, load.requests_running) == (False, None)


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\xff garbage {{{ \n",
        b'vllm:num_requests_running{engine="0" 3\n',
        b"vllm:num_requests_running NaN\nvllm:generation_tokens_total +Inf\n",
        b"vllm:num_requests_running -4\nvllm:kv_cache_usage_perc 7.5\n",
        b"<html>not metrics</html>",
    ],
)
def test_hostile_or_broken_expositions_give_no_numbers(body: bytes) -> None:
    with serving({"/metrics": [metrics(body)]}) as server:
        load = check_load("vllm", server.url)
    assert load.requests_running is None
    assert load.kv_cache_usage is None
    assert load.generated_tokens_total is None


def test_a_malformed_line_keeps_what_was_read_before_it() -> None:
    text = 'vllm:num_requests_running 3\nvllm:num_requests_waiting{engine="0" 3\n'
    assert parse_metrics(text, ["vllm:num_requests_running", "vllm:num_requests_waiting"]) == {
        "vllm:num_requests_running": [3.0]
    }


def test_only_the_wanted_names_are_parsed() -> None:
    text = "other_metric 1\nvllm:num_requests_running_extra 9\nvllm:num_requests_running 2\n"
    assert parse_metrics(text, ["vllm:num_requests_running"]) == {"vllm:num_requests_running": [2.0]}


def stall_reading(server_url: str, previous: EngineLoad | None, stall_after: float) -> EngineLoad:
    return check_load("vllm", server_url, previous=previous, stall_after=stall_after)


def _until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_frozen_counters_with_requests_pending_are_stalled_after_stall_after() -> None:
    with serving({"/metrics": [metrics(vllm_metrics(100.0))]}) as server:
        readings = [stall_reading(server.url, None, 0.3)]
        assert not readings[0].stalled
        _until(lambda: readings.append(stall_reading(server.url, readings[-1], 0.3)) or readings[-1].stalled)
    stalled = readings[-1]
    assert stalled.pending == 5
    assert stalled.progress_at == readings[0].progress_at
    assert stalled.monotonic - stalled.progress_at >= 0.3


def test_nothing_pending_is_never_stalled_and_moving_counters_restart_the_clock() -> None:
    idle = [metrics(vllm_metrics(100.0, running=0, waiting=0))]
    with serving({"/metrics": idle}) as server:
        first = stall_reading(server.url, None, 0.1)
        time.sleep(0.3)
        later = stall_reading(server.url, first, 0.1)
    assert not later.stalled
    assert later.progress_at == later.monotonic
    moving = [metrics(vllm_metrics(100.0 + i)) for i in range(50)]
    with serving({"/metrics": moving}) as server:
        first = stall_reading(server.url, None, 0.1)
        time.sleep(0.3)
        later = stall_reading(server.url, first, 0.1)
    assert not later.stalled
    assert later.progress_at == later.monotonic


def test_a_failed_reading_keeps_the_stall_clock() -> None:
    with serving({"/metrics": [metrics(vllm_metrics(1.0)), Answer(hang=True)]}) as server:
        first = stall_reading(server.url, None, 60)
        failed = check_load("vllm", server.url, previous=first, timeout=0.2)
    assert not failed.available
    assert failed.progress_at == first.progress_at


def test_stall_after_comes_from_the_argument_the_environment_or_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serving({"/metrics": [metrics(vllm_metrics(1.0))]}) as server:
        assert check_load("vllm", server.url).stall_after == 60.0
        monkeypatch.setenv(STALL_ENV, "12.5")
        assert check_load("vllm", server.url).stall_after == 12.5
        assert check_load("vllm", server.url, stall_after=3).stall_after == 3
        monkeypatch.setenv(STALL_ENV, "soon")
        with pytest.raises(InvalidInputError, match=STALL_ENV):
            check_load("vllm", server.url)
        with pytest.raises(InvalidInputError, match="stall_after"):
            check_load("vllm", server.url, stall_after=-1)


def test_a_previous_reading_of_another_engine_is_refused() -> None:
    with serving({"/metrics": [metrics(vllm_metrics(1.0))]}) as server:
        first = check_load("vllm", server.url)
        with pytest.raises(InvalidInputError, match="previous"):
            check_load("sglang", server.url, previous=first)


def test_async_twin_reads_the_same() -> None:
    with serving({"/metrics": [metrics(vllm_metrics(7.0))]}) as server:
        sync = check_load("vllm", server.url)
        other = asyncio.run(check_load_async("vllm", server.url))
    assert (sync.requests_running, sync.generated_tokens_total) == (
        other.requests_running,
        other.generated_tokens_total,
    )


def test_check_load_all_keeps_the_order_and_is_concurrent() -> None:
    # every server answers only once all of them have a request in flight
    count = 6
    barrier = threading.Barrier(count)
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                serving(
                    {"/metrics": [Answer(200, vllm_metrics(float(i)), content_type=TEXT, barrier=barrier)]}
                )
            )
            for i in range(count)
        ]
        loads = check_load_all([engine_for("vllm", s.url) for s in servers], timeout=10)
    assert [load.generated_tokens_total for load in loads] == [float(i) for i in range(count)]
    assert all(load.pid == os.getpid() and load.cpu_seconds is not None for load in loads)


@pytest.mark.parametrize(
    ("value", "count"), [("1e308", 2), ("1.7976931348623157e308", 3), ("1" + "0" * 400, 1)]
)
def test_samples_past_what_a_float_holds_are_not_shown(value: str, count: int) -> None:
    """Two samples of 1e308 summed to inf (`round(inf)`: OverflowError, the end of `ps --load`);
    a 400-digit sample, which the parser gives as an int, raised in `math.isfinite`."""
    lines = [f'vllm:num_requests_running{{engine="{n}"}} {value}' for n in range(count)]
    body = ("\n".join([*lines, 'vllm:num_requests_waiting{engine="0"} 3']) + "\n").encode()
    with serving({"/metrics": [Answer(200, body, content_type="text/plain")]}) as server:
        load = check_load("vllm", server.url)
    assert load.available, load
    assert (load.requests_running, load.requests_waiting) == (None, 3)
    if value.startswith("1e") or value.startswith("1.7"):  # finite samples whose sum is not
        assert "vllm:num_requests_running: out of range (over 9007199254740992), not shown" in load.reason
    assert load.model_dump_json()  # pydantic's own strict JSON


def test_a_reading_cut_at_the_sample_cap_says_so() -> None:
    """Past MAX_SAMPLES samples the parse stops: before, the partial sum was shown as whole."""
    count = load_module.MAX_SAMPLES + 5
    lines = [f'vllm:num_requests_running{{engine="{n}"}} 1' for n in range(count)]
    with serving({"/metrics": [metrics(("\n".join(lines) + "\n").encode())]}) as server:
        load = check_load("vllm", server.url)
    assert load.requests_running == load_module.MAX_SAMPLES
    assert load.reason == f"/metrics: cut after {load_module.MAX_SAMPLES} samples (the cap)"
