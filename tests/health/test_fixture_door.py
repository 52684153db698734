"""One door for reading a process: a record carries the host it was scanned on, so a fixture host
drives health, load, vitals and liveness, not only the scan. The engine's server is a real HTTP
server on 127.0.0.1 (this test's); everything else is the fixture's: the process, its start, its
CPU time, the socket its fds hold and the TCP table that lists it. Its pid is beyond any kernel's
(``PID_MAX_LIMIT``, 2**22), so a read of this host's ``/proc`` finds no such process. On the
backend the suite runs on."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from enginespec import Config, EngineProcess, Scanner
from enginespec.health import check_health
from enginespec.health.load import check_load
from enginespec.health.vitals import EngineMonitor
from enginespec.process.liveness import process_alive
from helpers.fakeserver import Answer, FakeEngine, serving
from helpers.fixturehost import FixtureHost, Stat, later
from helpers.loadkit import TEXT, vllm_metrics

NETNS = "net:[4026531840]"
#: no kernel hands out this pid (PID_MAX_LIMIT is 2**22)
PID = 2**22 + 100
SOCKET = 7001


def _engine(tmp_path: Path, port: int) -> tuple[FixtureHost, EngineProcess, Stat]:
    """A vLLM server of the fixture host listening on 127.0.0.1:``port``, as scanned there."""
    host = FixtureHost(tmp_path / "host")
    (host.proc / "sys" / "kernel" / "pid_max").write_text(f"{2**23}\n")
    host.create(1, ["/sbin/init"], Stat(ppid=0))
    host.link(1, "ns/net", NETNS)
    stat = host.spawn(PID, ["vllm", "serve", "org/m", "--host", "127.0.0.1", "--port", str(port)])
    host.link(PID, "ns/net", NETNS)
    host.add_socket(PID, 3, SOCKET)
    host.set_tcp(PID, "tcp", [(SOCKET, port, "0A")])
    config = Config(
        data_dir=tmp_path, docker_socket=tmp_path / "none.sock", podman_socket=tmp_path / "none.sock"
    )
    found = {p.pid: p for p in Scanner(root=host.root, config=config, gpus=False).scan()}
    assert sorted(found) == [PID]
    return host, found[PID], stat


@pytest.fixture
def server() -> Iterator[FakeEngine]:
    routes = {
        "/health": [Answer(200, b"")],
        "/metrics": [Answer(200, vllm_metrics(100.0), content_type=TEXT)],
    }
    with serving(routes) as engine:
        yield engine


def test_health_load_and_liveness_read_the_host_the_record_was_scanned_on(
    tmp_path: Path, server: FakeEngine
) -> None:
    host, engine, stat = _engine(tmp_path, server.port)
    assert engine.base_url == f"http://127.0.0.1:{server.port}"
    assert process_alive(engine)
    health = check_health(engine)
    assert (health.state, health.http_status) == ("ready", 200), health
    load = check_load(engine)
    assert load.available, load
    assert (load.requests_running, load.requests_waiting) == (4, 1)
    # the CPU time is the fixture's (utime 10 + stime 5 ticks), not this test's
    assert load.cpu_seconds == pytest.approx(15 / os.sysconf("SC_CLK_TCK"))
    vitals = EngineMonitor(timeout=2.0).check([engine])[0]
    assert (vitals.health.state, vitals.load is not None and vitals.load.available) == ("ready", True)
    assert [path for _method, path, _headers in server.script.seen].count("/health") == 2

    # The same record built elsewhere (from JSON) carries this host's root: no such pid here.
    elsewhere = EngineProcess.model_validate_json(engine.model_dump_json())
    assert not process_alive(elsewhere)
    assert check_health(elsewhere).state == "down"

    # What the fixture says of the process is what the checks see, though the server answers.
    host.set_stat(PID, later(stat, 1))  # the pid is another process's now
    assert not process_alive(engine)
    assert check_health(engine).state == "down"
    host.set_stat(PID, dataclasses.replace(stat, state="Z"))  # a zombie
    assert not process_alive(engine)
    host.set_stat(PID, stat)
    assert check_health(engine).state == "ready"
    host.kill(PID)
    assert (process_alive(engine), check_health(engine).state) == (False, "down")


def test_the_tree_holding_the_port_is_read_on_the_fixture_host(tmp_path: Path, server: FakeEngine) -> None:
    """Requests go only to a socket the tree holds, in the fixture's tables: without the socket
    among its fds the server is not contacted, however it answers."""
    host, engine, _stat = _engine(tmp_path, server.port)
    (host.proc / str(PID) / "fd" / "3").unlink()
    health = check_health(engine)
    assert health.state == "starting", health  # up, holding no listening socket on its port
    assert check_load(engine).available is False
    assert server.script.seen == []
