"""The Grafana dashboard in deploy/grafana (issue 42): valid JSON of a dashboard whose every panel
queries enginespec's series alike for every engine, and every query, run by a real Prometheus
(Debian's package) that scrapes a real `enginespec exporter --load` beside fake engines (a vLLM
with moving latency histograms and a served model, a llama-server with moving counters, a GPU
from the test NVML library with its power, energy and per-process utilisation), gives a series:
no panel names a series the exporter does not give. Both backends."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from helpers.cli import enginespec_in_background
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.gpuhost import GIB, Host, build_nvml
from helpers.loadkit import TEXT, vllm_metrics
from helpers.procs import Procs, stop_child
from helpers.prometheus import needs_prometheus, query, running_prometheus, until

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "enginespec-dashboard.json"
#: What Grafana puts in the queries' place when they run: every engine, a window of a few scrapes.
VARIABLES = {"$engine_id": ".+", "$__rate_interval": "30s"}


def _queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboard_is_a_dashboard_of_enginespecs_series_alone() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "engine_id"}
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for title, expression in _queries():
        names = set(re.findall(r"\b[a-z_]+_[a-z_]+\b(?=\{|\[|\)| ==|$)", expression))
        series = {n for n in names if n.startswith("enginespec_")}
        assert series, f"{title}: {expression} queries no enginespec series"
        # every engine alike: no query names an engine's own metrics or an engine kind
        assert "vllm:" not in expression
        assert "llamacpp:" not in expression
        assert 'engine="' not in expression


def _vllm_answer(step: int) -> Answer:
    """vLLM's exposition (two engine cores) with every latency histogram moving by one request a
    step (vllm/v1/metrics/loggers.py), and its time to first token's."""
    lines = [vllm_metrics(100.0 * step).decode()]
    for family, le in (
        ("inter_token_latency_seconds", "0.05"),
        ("request_queue_time_seconds", "0.5"),
        ("e2e_request_latency_seconds", "5.0"),
    ):
        lines += [
            f"# TYPE vllm:{family} histogram",
            f'vllm:{family}_bucket{{engine="0",le="{le}",model_name="m"}} {step}.0',
            f'vllm:{family}_bucket{{engine="0",le="+Inf",model_name="m"}} {step}.0',
            f'vllm:{family}_count{{engine="0",model_name="m"}} {step}.0',
            f'vllm:{family}_sum{{engine="0",model_name="m"}} {float(le) * step / 2}',
        ]
    return Answer(200, ("\n".join(lines) + "\n").encode(), content_type=TEXT)


def _llama_answer(step: int) -> Answer:
    text = (
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {100 * step}\n"
        "# TYPE llamacpp:tokens_predicted_seconds_total counter\n"
        f"llamacpp:tokens_predicted_seconds_total {2.0 * step}\n"
    )
    return Answer(200, text.encode(), content_type=TEXT)


@pytest.fixture
def engines(procs: Procs) -> Iterator[list[int]]:
    """A vLLM and a llama-server (real processes, exact argv) answering on loopback: their pids."""
    served = Answer(200, b'{"object": "list", "data": [{"id": "qwen", "object": "model"}]}')
    with ExitStack() as stack:
        pids = []
        for argv, metrics, more in (
            (
                ["vllm", "serve", "/models/m", "--served-model-name", "qwen"],
                _vllm_answer,
                {"/v1/models": [served]},
            ),
            (["llama-server", "-m", "/models/t.gguf", "--metrics"], _llama_answer, {}),
        ):
            sock = stack.enter_context(bound_socket())
            routes = {
                "/health": [Answer(200)],
                "/metrics": [metrics(step) for step in range(1, 2000)],
                **more,
            }
            stack.enter_context(serving(routes, sock=sock))
            port = str(sock.getsockname()[1])
            pids.append(procs.start([*argv, "--port", port], pass_fds=(sock.fileno(),)).pid)
        yield pids


@needs_prometheus
def test_every_query_of_the_dashboard_gives_a_series_in_a_real_prometheus(
    engines: list[int], tmp_path: Path
) -> None:
    host = Host(tmp_path / "host")
    host.nvml_gpu(
        "GPU-8a3e5d2c-1b4f-4c6d-9e7a-0123456789ab", "01:00.0", "NVIDIA H100 80GB HBM3", 80 * GIB, 40 * GIB
    )
    host.nvml_power("0", 300_000)
    host.nvml_energy("0", 5_000_000)
    for pid in engines:
        host.nvml_process("0", pid, 18 * GIB)
        host.nvml_util("0", pid, 40)
    library = build_nvml(tmp_path, 3)
    port = free_port()
    exporter = enginespec_in_background(
        "exporter",
        "--port",
        str(port),
        "--interval",
        "500ms",
        "--load",
        env={"ENGINESPEC_NVML_LIBRARY": str(library), "ENGINESPEC_TEST_NVML_HOST": str(host.nvml_file())},
    )
    config = (
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: enginespec\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    try:
        with running_prometheus(tmp_path, config) as api:
            for title, expression in _queries():
                for variable, value in VARIABLES.items():
                    expression = expression.replace(variable, value)
                until(
                    f"{title}: {expression} gives a series", lambda e=expression: query(api, e), timeout=120
                )
    finally:
        stop_child(exporter)
