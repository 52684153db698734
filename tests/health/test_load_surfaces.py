"""Where load shows: `enginespec load`, `ps --load`, the exporter's load series and its state gauge
(real processes and real HTTP servers on loopback, both backends)."""

from __future__ import annotations

import json
import socket

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

import enginespec.cli.app as cli
from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.health.vitals import EngineMonitor
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.loadkit import TEXT, vllm_metrics
from helpers.procs import Procs


def _advancing() -> list[Answer]:
    return [Answer(200, vllm_metrics(float(100 * i)), content_type=TEXT) for i in range(500)]


def _vllm(procs: Procs, sock: socket.socket) -> EngineProcess:
    port = sock.getsockname()[1]
    proc = procs.start(["vllm", "serve", "/models/m", "--port", str(port)], pass_fds=(sock.fileno(),))
    return next(p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid)


def test_load_command_prints_two_readings_as_json(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    sock = bound_socket()
    with serving({"/metrics": _advancing()}, sock=sock, origins=True) as server:
        process = _vllm(procs, sock)
        code = cli.main(["load", str(process.pid), "--json", "--interval", "100ms"])
        asked = [path for _, path, _ in server.script.ours]
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert asked == ["/metrics", "/metrics"]
    assert (document["requests_running"], document["requests_waiting"]) == (4, 1)
    assert document["kv_cache_usage"] == 0.5
    assert document["tokens_per_second"] > 0
    assert document["pid"] == process.pid
    assert document["engine_id"] == process.instance_id


def test_load_command_by_engine_id_and_text(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    sock = bound_socket()
    with serving({"/metrics": _advancing()}, sock=sock):
        process = _vllm(procs, sock)
        code = cli.main(["load", process.instance_id, "--interval", "100ms"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"{process.instance_id} pid {process.pid} http://")
    assert "running 4, waiting 1, KV cache 50%" in out


def test_load_command_says_why_there_is_no_reading(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    proc = procs.start(["llama-server", "-m", "/m.gguf", "--port", str(port)], pass_fds=(sock.fileno(),))
    with serving({"/metrics": [Answer(501, b"{}")]}, sock=sock):
        code = cli.main(["load", str(proc.pid), "--interval", "10ms"])
    assert code == 1
    assert "only when started with --metrics" in capsys.readouterr().out
    assert cli.main(["load", "no-such-engine"]) == 2


def test_ps_asks_for_no_load_unless_told(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    sock = bound_socket()
    # only this process's requests count: other watchers on the host may check the engine too
    with serving({"/health": [Answer(200)], "/metrics": _advancing()}, sock=sock, origins=True) as server:
        process = _vllm(procs, sock)
        assert cli.main(["ps", "--json"]) == 0
        plain = [path for _, path, _ in server.script.ours]
        server.script.ours.clear()
        assert cli.main(["ps", "--json", "--load", "--load-interval", "100ms"]) == 0
        loaded = [path for _, path, _ in server.script.ours]
    outputs = capsys.readouterr().out
    assert "/metrics" not in plain
    assert loaded.count("/metrics") == 2
    documents = json.loads(outputs[outputs.index("]\n[") + 2 :])
    mine = next(d for d in documents if d["pid"] == process.pid)
    assert mine["load"]["requests_running"] == 4
    assert mine["load"]["tokens_per_second"] > 0
    # the readings' window: requests of 1 s each, past vLLM's last bucket here (0.1)
    ttft = mine["load"]["latency"]["time_to_first_token"]
    assert ttft["count"] >= 1
    assert ttft["mean"] == pytest.approx(1.0)
    assert (ttft["p50"], ttft["p50_bucket"]) == (0.1, {"lower": 0.1, "upper": None})


def test_ps_load_columns(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    sock = bound_socket()
    with serving({"/health": [Answer(200)], "/metrics": _advancing()}, sock=sock):
        process = _vllm(procs, sock)
        assert cli.main(["ps", "--wide", "--load", "--load-interval", "100ms"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[-4:] == ["RUN", "WAIT", "KV%", "TOK/S"]
    row = next(r for r in rows if r.split()[0] == str(process.pid))
    running, waiting, kv, rate = row.split()[-4:]
    assert (running, waiting, kv) == ("4", "1", "50")
    assert float(rate) > 0


def _scrape(collector: EngineCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(collector)
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_exporter_load_series_and_new_states(procs: Procs) -> None:
    sock = bound_socket()
    with serving({"/health": [Answer(200)], "/metrics": _advancing()}, sock=sock):
        process = _vllm(procs, sock)
        scanner, collector, monitor = Scanner(), EngineCollector(), EngineMonitor(timeout=2)
        _refresh(scanner, collector, True, 2.0, 300.0, monitor)
        _refresh(scanner, collector, True, 2.0, 300.0, monitor)
        series = _scrape(collector)
    mine = {"engine_id": process.instance_id, "engine": "vllm", "model": "/models/m"}
    assert (mine, 4.0) in series["enginespec_engine_requests_running"]
    assert (mine, 1.0) in series["enginespec_engine_requests_waiting"]
    assert (mine, 0.5) in series["enginespec_engine_kv_cache_usage_ratio"]
    assert any(labels == mine for labels, _ in series["enginespec_engine_generated_tokens_total"])
    rates = [value for labels, value in series["enginespec_engine_tokens_per_second"] if labels == mine]
    assert len(rates) == 1
    assert rates[0] > 0
    states = {
        labels["state"]: value
        for labels, value in series["enginespec_engine_state"]
        if labels["engine_id"] == process.instance_id
    }
    assert {"busy", "stalled"} <= states.keys()
    assert states["ready"] == 1.0


def test_exporter_without_load_has_no_load_series(procs: Procs) -> None:
    sock = bound_socket()
    with serving({"/health": [Answer(200)], "/metrics": _advancing()}, sock=sock, origins=True) as server:
        _vllm(procs, sock)
        collector = EngineCollector()
        _refresh(Scanner(), collector, True, 2.0, 300.0)
        asked = [path for _, path, _ in server.script.ours]
    assert "/metrics" not in asked
    assert "enginespec_engine_requests_running" not in _scrape(collector)
