"""Helpers for the load tests: metrics answers as the engines write them, and an EngineProcess for
this test process pointed at a fake server (which this process runs, so the port is held by the
process checked)."""

from __future__ import annotations

import os

import psutil

from enginespec.process.record import EngineProcess


def engine_for(engine: str, url: str) -> EngineProcess:
    return EngineProcess(
        pid=os.getpid(),
        start_time=psutil.Process().create_time(),
        ppid=os.getppid(),
        engine=engine,
        model="m",
        served_model_names=(),
        host="127.0.0.1",
        port=None,
        effective_host="127.0.0.1",
        effective_port=0,
        base_url=url,
        argv=(),
        exe=None,
        worker_pids=(),
        supervisor=None,
        listen_ports=(),
    )


TEXT = "text/plain; version=0.0.4"


def vllm_metrics(
    generated: float, *, running: int = 2, waiting: int = 1, kv: str = "kv_cache_usage_perc"
) -> bytes:
    """vLLM's exposition with two engine cores (data parallel), as PrometheusStatLogger writes it."""
    done = 3 + generated / 100
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}.0',
        f'vllm:num_requests_running{{engine="1",model_name="m"}} {running}.0',
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0',
        'vllm:num_requests_waiting{engine="1",model_name="m"} 0.0',
        f"# TYPE vllm:{kv} gauge",
        f'vllm:{kv}{{engine="0",model_name="m"}} 0.25',
        f'vllm:{kv}{{engine="1",model_name="m"}} 0.75',
        "# TYPE vllm:prompt_tokens counter",
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0',
        'vllm:prompt_tokens_total{engine="1",model_name="m"} 24.0',
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}',
        'vllm:generation_tokens_total{engine="1",model_name="m"} 0.0',
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0',
        # one request of a 1 s time to first token (past the last bucket) per 100 tokens generated
        f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {done}',
        f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {done}',
        f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {0.15 + generated / 100}',
    ]
    return ("\n".join(lines) + "\n").encode()
