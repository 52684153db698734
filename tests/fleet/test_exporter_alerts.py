"""`enginespec exporter` as node_exporter users expect it: it says where it listens, a stopped
engine stays as `enginespec_engine_up 0` (so `== 0` alerts fire, checked with a real Prometheus),
a stalled exporter can be alerted on, a hung engine does not hold a refresh, and its errors name
the address, the file and the flag."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet.test_exporter import _samples, _scrape_until
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.procs import Procs, stop_child
from helpers.prometheus import needs_prometheus, query, running_prometheus, until

Series = dict[str, list[tuple[dict[str, str], float]]]


def _exporter(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "enginespec.cli", "exporter", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def running_exporter() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = _exporter("--port", str(port), "--interval", "300ms")
    try:
        yield f"http://127.0.0.1:{port}/metrics", proc
    finally:
        stop_child(proc)


def _up(series: Series, engine_id: str) -> float | None:
    return next(
        (v for labels, v in series.get("enginespec_engine_up", []) if labels["engine_id"] == engine_id), None
    )


def _engine_id(series: Series, pid: int) -> str | None:
    return next(
        (
            labels["engine_id"]
            for labels, _ in series.get("enginespec_engine_info", [])
            if labels["pid"] == str(pid)
        ),
        None,
    )


def test_it_says_where_it_listens_and_keeps_a_stopped_engine_at_0(
    procs: Procs, running_exporter: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = running_exporter
    assert proc.stderr is not None
    first = proc.stderr.readline().decode()
    assert (
        first.strip()
        == f"enginespec exporter: Listening on address=127.0.0.1:{url.split(':')[2].split('/')[0]} (/metrics)"
    )
    engine = procs.start(["vllm", "serve", "/models/stops", "--port", str(free_port())])
    series = _scrape_until(url, lambda s: _engine_id(s, engine.pid) is not None)
    engine_id = _engine_id(series, engine.pid)
    assert engine_id is not None
    assert _up(series, engine_id) == 1
    refreshed = series["enginespec_last_refresh_timestamp_seconds"][0][1]
    assert abs(refreshed - time.time()) < 60
    procs.stop(engine)
    series = _scrape_until(url, lambda s: _up(s, engine_id) == 0)
    assert _engine_id(series, engine.pid) is None  # gone from _info: only up stays, at 0
    later = _scrape_until(url, lambda s: s["enginespec_last_refresh_timestamp_seconds"][0][1] > refreshed)
    assert _up(later, engine_id) == 0


def test_a_stopped_engine_goes_after_keep_stopped(procs: Procs) -> None:
    port = free_port()
    proc = _exporter("--port", str(port), "--interval", "200ms", "--keep-stopped", "1s", "--no-health")
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        engine = procs.start(["vllm", "serve", "/models/brief", "--port", str(free_port())])
        engine_id = _engine_id(
            _scrape_until(url, lambda s: _engine_id(s, engine.pid) is not None), engine.pid
        )
        assert engine_id is not None
        procs.stop(engine)
        _scrape_until(url, lambda s: _up(s, engine_id) == 0)
        _scrape_until(url, lambda s: _up(s, engine_id) is None)
    finally:
        stop_child(proc)


def test_a_hung_engine_is_reported_and_refreshes_go_on(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/health": [Answer(200, hang=True)]}, sock=sock):
        engine = procs.start(
            ["llama-server", "-m", "hung.gguf", "--port", str(port)], pass_fds=(sock.fileno(),)
        )
        exporter_port = free_port()
        proc = _exporter("--port", str(exporter_port), "--interval", "500ms")
        url = f"http://127.0.0.1:{exporter_port}/metrics"
        try:
            series = _scrape_until(url, lambda s: _engine_id(s, engine.pid) is not None)
            engine_id = _engine_id(series, engine.pid)
            # the check is cut at the refresh's deadline (80% of the interval): not ready, and the
            # next refreshes come while the engine still hangs
            states = {
                labels["state"]: v
                for labels, v in series["enginespec_engine_state"]
                if labels["engine_id"] == engine_id
            }
            assert states["ready"] == 0
            assert sum(states.values()) == 1
            seen = {series["enginespec_last_refresh_timestamp_seconds"][0][1]}
            while len(seen) < 4:
                seen.add(
                    _samples(httpx.get(url, timeout=5).text)["enginespec_last_refresh_timestamp_seconds"][0][
                        1
                    ]
                )
                time.sleep(0.1)
        finally:
            stop_child(proc)


def test_it_listens_before_a_hung_engine_holds_its_first_refresh(procs: Procs) -> None:
    """node_exporter says where it listens at once: the line and the bound port come before the
    first refresh, which waits on a hung engine; the first scrape then has that refresh's data."""
    sock = bound_socket()
    # every check hangs (another watcher on the host may ask this engine too): the exporter's
    # first refresh waits out its health timeout
    with serving({"/health": [Answer(200, hang=True)]}, sock=sock, peers=True) as fake:
        engine = procs.start(
            ["llama-server", "-m", "slow.gguf", "--port", str(sock.getsockname()[1])],
            pass_fds=(sock.fileno(),),
        )
        exporter_port = free_port()
        proc = _exporter("--port", str(exporter_port), "--interval", "10s")
        try:
            deadline = time.monotonic() + 60
            # the first refresh's health check (the exporter's own) hangs from here on
            while not any(proc.pid in pids for pids in fake.script.peers):
                assert time.monotonic() < deadline, "no health check came"
                time.sleep(0.01)
            with socket.create_connection(("127.0.0.1", exporter_port), timeout=5):
                pass  # bound while the refresh still waits
            assert proc.stderr is not None
            assert select.select([proc.stderr], [], [], 0)[0], "nothing said yet"
            said = proc.stderr.readline().decode().strip()
            assert said == f"enginespec exporter: Listening on address=127.0.0.1:{exporter_port} (/metrics)"
            series = _samples(httpx.get(f"http://127.0.0.1:{exporter_port}/metrics", timeout=30).text)
            assert _engine_id(series, engine.pid) is not None
        finally:
            stop_child(proc)


def test_port_0_needs_a_textfile() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "exporter", "--port", "0"],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 2
    (line,) = out.stderr.decode().splitlines()
    assert "--port 0" in line
    assert "--textfile" in line


def test_errors_name_the_address_the_file_and_the_flag(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        out = subprocess.run(
            [sys.executable, "-m", "enginespec.cli", "exporter", "--port", str(port), "--no-health"],
            capture_output=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert out.returncode == 1
    (line,) = out.stderr.decode().splitlines()
    assert f"cannot listen on 127.0.0.1:{port} (--host, --port)" in line
    assert "in use" in line
    target = tmp_path / "missing-dir" / "enginespec.prom"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "enginespec.cli",
            "exporter",
            "--port",
            "0",
            "--textfile",
            str(target),
            "--no-health",
        ],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 1
    lines = out.stderr.decode().splitlines()
    reason = f"cannot write in {target.parent}: No such file or directory"
    assert lines[-1] == f"enginespec exporter: --textfile {target}: {reason}"


PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: enginespec
    static_configs:
      - targets: ['127.0.0.1:{port}']
"""
RULES = """\
groups:
  - name: enginespec
    rules:
      - alert: EngineDown
        expr: enginespec_engine_up == 0
"""


@needs_prometheus
def test_a_real_prometheus_alert_fires_when_an_engine_stops(procs: Procs, tmp_path: Path) -> None:
    exporter_port = free_port()
    (tmp_path / "rules.yml").write_text(RULES)
    engine = procs.start(["vllm", "serve", "/models/alerted", "--port", str(free_port())])
    exporter = _exporter("--port", str(exporter_port), "--interval", "500ms", "--no-health")
    try:
        with running_prometheus(tmp_path, PROMETHEUS_CONFIG.format(port=exporter_port)) as api:
            series = _scrape_until(
                f"http://127.0.0.1:{exporter_port}/metrics", lambda s: _engine_id(s, engine.pid) is not None
            )
            engine_id = _engine_id(series, engine.pid)
            until(
                "prometheus scrapes the engine as up",
                lambda: query(api, f'enginespec_engine_up{{engine_id="{engine_id}"}} == 1'),
            )

            def firing() -> list[dict[str, object]]:
                alerts = httpx.get(f"{api}/alerts", timeout=5).json()["data"]["alerts"]
                return [
                    a for a in alerts if a["labels"].get("engine_id") == engine_id and a["state"] == "firing"
                ]

            assert not firing()
            procs.stop(engine)
            until("the EngineDown alert fires", firing)
            (alert,) = firing()
            assert alert["labels"]["alertname"] == "EngineDown"  # type: ignore[index]
    finally:
        stop_child(exporter)


def test_two_engines_sharing_an_id_keep_their_series_when_one_stops(procs: Procs) -> None:
    """Two servers of one model on one port (SO_REUSEPORT) share an engine id: the older has
    the bare one, the younger ``ID-pidPID``. When the older stops, the younger keeps its series:
    it is not renamed, so no ``up == 0`` fires for an engine that still runs."""
    port = free_port()
    proc = _exporter("--port", str(port), "--interval", "200ms", "--keep-stopped", "30s", "--no-health")
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        argv = ["vllm", "serve", "/models/shared", "--port", str(free_port())]
        older = procs.start(argv)
        time.sleep(0.05)  # two clock ticks at least: their start times differ
        younger = procs.start(argv)
        series = _scrape_until(
            url, lambda s: None not in (_engine_id(s, older.pid), _engine_id(s, younger.pid))
        )
        bare, suffixed = _engine_id(series, older.pid), _engine_id(series, younger.pid)
        assert bare is not None
        assert suffixed == f"{bare}-pid{younger.pid}"
        procs.stop(older)
        after = _scrape_until(url, lambda s: _up(s, bare) == 0)
        assert _engine_id(after, younger.pid) == suffixed
        assert _up(after, suffixed) == 1
        # and it stays so on the refreshes after
        refreshed = after["enginespec_last_refresh_timestamp_seconds"][0][1]
        later = _scrape_until(url, lambda s: s["enginespec_last_refresh_timestamp_seconds"][0][1] > refreshed)
        assert (_engine_id(later, younger.pid), _up(later, suffixed)) == (suffixed, 1)
    finally:
        stop_child(proc)
