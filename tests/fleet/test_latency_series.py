"""The exporter's latency histograms (issue 42): each engine's own histograms passed on as
Prometheus histograms under enginespec's names in seconds, summed over the engine's series (two
vLLM engine cores), llama-server's counters as one +Inf bucket and a sum; the whole exposition
checked by promtool (the Debian prometheus package's) and read back by Prometheus's own parser;
an engine's malformed histogram leaves its series out, never the scrape. Real processes with
exact argv, real HTTP servers on loopback; both backends."""

from __future__ import annotations

import shutil
import subprocess
from contextlib import ExitStack

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.health.vitals import EngineMonitor
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.loadkit import TEXT
from helpers.procs import Procs

# vLLM's time to first token, two engine cores (vllm/v1/metrics/loggers.py PrometheusStatLogger:
# one series per engine index and model, its buckets cumulative): summed by bound, 0.1 s -> 3,
# 1 s -> 6, +Inf -> 8, sum 7.5 s.
VLLM = b"""# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 6.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 6.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 4.5
"""
# llama-server's counters (tools/server/server.cpp metrics, as llama-cpp-python 0.3.35 vendors it)
LLAMA = b"""# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 400
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 8.0
"""
# a histogram without its +Inf bucket: not one Prometheus could read
BROKEN = b"""# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.1
"""


def _exposition(procs: Procs, engines: dict[str, tuple[list[str], bytes]]) -> tuple[str, dict[str, str]]:
    """The exporter's text after two refreshes with load, and each named engine's engine_id."""
    pids: dict[str, str] = {}
    with ExitStack() as stack:
        for name, (argv, body) in engines.items():
            sock = stack.enter_context(bound_socket())
            routes = {"/health": [Answer(200)], "/metrics": [Answer(200, body, content_type=TEXT)]}
            stack.enter_context(serving(routes, sock=sock))
            port = sock.getsockname()[1]
            proc = procs.start([a.format(port=port) for a in argv], pass_fds=(sock.fileno(),))
            pids[name] = str(proc.pid)
        scanner, collector, monitor = Scanner(), EngineCollector(), EngineMonitor(timeout=2)
        for _ in range(2):
            _refresh(scanner, collector, True, 2.0, 300.0, monitor)
        by_pid = {str(p.pid): p.instance_id or "" for p in collector.snapshot.processes}
        registry = CollectorRegistry()
        registry.register(collector)
        return generate_latest(registry).decode(), {name: by_pid[pid] for name, pid in pids.items()}


def _histogram(text: str, name: str, engine_id: str) -> dict[str, float]:
    """The samples of family ``name`` of one engine: ``le`` -> count, and ``sum``, ``count``."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        assert family.type == "histogram"
        for sample in family.samples:
            if sample.labels.get("engine_id") != engine_id:
                continue
            key = sample.labels["le"] if sample.name.endswith("_bucket") else sample.name.rsplit("_", 1)[-1]
            found[key] = sample.value
    return found


def test_engines_histograms_are_passed_on_summed_and_in_seconds(procs: Procs) -> None:
    text, ids = _exposition(
        procs,
        {
            "vllm": (["vllm", "serve", "/models/m", "--port", "{port}"], VLLM),
            "llama": (["llama-server", "-m", "/models/t.gguf", "--port", "{port}", "--metrics"], LLAMA),
            "broken": (["vllm", "serve", "/models/b", "--port", "{port}"], BROKEN),
        },
    )
    assert _histogram(text, "enginespec_engine_time_to_first_token_seconds", ids["vllm"]) == {
        "0.1": 3.0,
        "1.0": 6.0,
        "+Inf": 8.0,
        "count": 8.0,
        "sum": 7.5,
    }
    # vLLM's other figures are not in its answer: no series, never a zero
    assert _histogram(text, "enginespec_engine_end_to_end_seconds", ids["vllm"]) == {}
    # llama-server keeps counters only: one +Inf bucket and the seconds, for rate(_sum)/rate(_count)
    assert _histogram(text, "enginespec_engine_time_per_output_token_seconds", ids["llama"]) == {
        "+Inf": 400.0,
        "count": 400.0,
        "sum": 8.0,
    }
    # a histogram Prometheus could not read is left out; the scrape and the other engines stand
    assert _histogram(text, "enginespec_engine_time_to_first_token_seconds", ids["broken"]) == {}
    up = [
        line
        for line in text.splitlines()
        if line.startswith("enginespec_engine_up{") and ids["broken"] in line
    ]
    assert len(up) == 1
    assert up[0].endswith(" 1.0")


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not installed"
)
def test_promtool_finds_nothing_wrong_with_the_exposition(procs: Procs) -> None:
    text, _ids = _exposition(
        procs,
        {
            "vllm": (["vllm", "serve", "/models/m", "--port", "{port}"], VLLM),
            "llama": (["llama-server", "-m", "/models/t.gguf", "--port", "{port}", "--metrics"], LLAMA),
        },
    )
    assert "enginespec_engine_time_to_first_token_seconds_bucket" in text
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "", checked.stdout
