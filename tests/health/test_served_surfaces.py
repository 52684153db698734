"""Where what each engine serves shows (issue 40): `watch` events as models are loaded, put to
sleep and unloaded; the exporter's `enginespec_model_*` series (withheld from a scraper who may not
see all of the engine); `ps --models` and `describe`. A fake llama.cpp router (real process, exact
argv) whose `GET /models` answers change as a router's do; both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

import enginespec.cli.app as cli
from enginespec.fleet.disclosure import Viewer
from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.health.vitals import EngineMonitor
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from enginespec.scanning.watch import ModelChanged, WatchEvent
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs, wait_for

ROUTER = ["llama-server", "--models-dir", "/m", "--host", "127.0.0.1", "--port", "{port}"]


def _router(*states: tuple[str, str]) -> Answer:
    """llama.cpp router's GET /models (tools/server/server-models.cpp get_router_models)."""
    data = [{"id": name, "object": "model", "status": {"value": value, "args": []}} for name, value in states]
    return Answer(200, json.dumps({"object": "list", "data": data}).encode())


@contextmanager
def _router_engine(procs: Procs, answers: list[Answer]) -> Iterator[EngineProcess]:
    sock = bound_socket()
    port = sock.getsockname()[1]
    routes = {"/models": answers, "/health": [Answer(200, b'{"status":"ok"}')]}
    with serving(routes, sock=sock, origins=True):
        proc = procs.start([a.format(port=port) for a in ROUTER], pass_fds=(sock.fileno(),))

        def scanned() -> EngineProcess | None:
            return next((p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid), None)

        wait_for(lambda: scanned() is not None, timeout=20)
        process = scanned()
        assert process is not None
        yield process


def _model_events(
    events: Iterator[WatchEvent], pid: int, count: int, timeout: float = 60
) -> list[ModelChanged]:
    found: list[ModelChanged] = []
    deadline = time.monotonic() + timeout
    for event in events:
        if isinstance(event, ModelChanged) and event.process.pid == pid:
            found.append(event)
            if len(found) == count:
                return found
        assert time.monotonic() < deadline, f"only {found}"
    raise AssertionError("the watch ended")


def test_watch_tells_models_loaded_put_to_sleep_and_unloaded(procs: Procs) -> None:
    answers = [
        _router(("qwen", "unloaded"), ("phi", "loaded")),
        _router(("qwen", "loaded"), ("phi", "loaded")),
        _router(("qwen", "sleeping"), ("phi", "loaded")),
        _router(("qwen", "loaded"), ("phi", "loaded")),
        _router(("qwen", "loaded")),
    ]
    with _router_engine(procs, answers) as process:
        watch = Scanner().watch(0.2, health=True, health_interval=0.2, models=True, load=False)
        try:
            events = iter(watch)
            told = _model_events(events, process.pid, 5)
        finally:
            watch.close()
    assert [(e.type, e.model.name, e.previous, e.model.state) for e in told] == [
        ("model_loaded", "phi", None, "loaded"),  # the first reading: what is loaded is told
        ("model_loaded", "qwen", "unloaded", "loaded"),
        ("model_sleeping", "qwen", "loaded", "sleeping"),
        ("model_woke", "qwen", "sleeping", "loaded"),
        ("model_unloaded", "phi", "loaded", "unloaded"),  # no longer listed
    ]
    # the JSON form round-trips (an agent's stream carries them)
    from enginespec.scanning.watch import event_json, parse_event

    assert event_json(parse_event(event_json(told[1]))) == event_json(told[1])


def _series(
    collector: EngineCollector, viewer: Viewer | None = None
) -> dict[str, list[tuple[dict[str, str], float]]]:
    if viewer is None:
        registry = CollectorRegistry()
        registry.register(collector)
        text = generate_latest(registry).decode()
    else:
        from enginespec.fleet.metricsviews import MetricsViews

        text = MetricsViews(collector).text(viewer)[0].decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_the_exporter_gives_each_models_state(procs: Procs) -> None:
    with _router_engine(
        procs, [_router(("qwen", "loaded"), ("phi", "sleeping"), ("big", "downloading"))]
    ) as process:
        collector = EngineCollector()
        _refresh(Scanner(), collector, True, 5.0, 300.0, EngineMonitor(timeout=2, load=False, models=True))
        everything = _series(collector)
        # a scraper of another uid may not see the engine's served models
        restricted = _series(collector, Viewer(uid=12345))
    states = {
        (labels["model"], labels["state"]): value
        for labels, value in everything["enginespec_model_state"]
        if labels["engine_id"] == process.instance_id
    }
    assert {key for key, value in states.items() if value == 1.0} == {
        ("qwen", "loaded"),
        ("phi", "sleeping"),
        ("big", "unloaded"),
    }
    assert len(states) == 3 * 5  # every state of each model, 0 or 1
    # (a busy host's other engines whose models are read have series of their own)
    mine = [
        labels
        for labels, _ in everything["enginespec_model_state"]
        if labels["engine_id"] == process.instance_id
    ]
    assert {labels["engine"] for labels in mine} == {"llamacpp"}
    assert not [
        s for s in restricted.get("enginespec_model_state", []) if s[0]["engine_id"] == process.instance_id
    ]
    withheld = {
        labels["field"]
        for labels, _ in restricted["enginespec_engine_withheld"]
        if labels["engine_id"] == process.instance_id
    }
    assert "served_models" in withheld


def test_ps_models_and_describe_list_them(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    with _router_engine(
        procs, [_router(("qwen", "loaded"), ("phi", "sleeping"), ("big", "unloaded"))]
    ) as process:
        assert cli.main(["ps", str(process.pid), "--models", "-o", "wide"]) == 0
        _header, row = capsys.readouterr().out.splitlines()
        assert "2 loaded: qwen, phi (sleeping)" in row
        assert cli.main(["ps", str(process.pid), "--models", "--json"]) == 0
        (document,) = json.loads(capsys.readouterr().out)
        assert [m["name"] for m in document["models"]["models"]] == ["qwen", "phi", "big"]
        assert cli.main(["ps", str(process.pid), "--json"]) == 0  # not asked: not read
        assert "models" not in json.loads(capsys.readouterr().out)[0]
        assert cli.main(["describe", str(process.pid)]) == 0
        described = capsys.readouterr().out
    lines = described.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Models:"))
    assert lines[at].split() == ["Models:", "3", "from", f"{process.base_url}/models"]
    assert lines[at + 1 : at + 4] == ["  qwen  loaded", "  phi  sleeping", "  big  unloaded"]
