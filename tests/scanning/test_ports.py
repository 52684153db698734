"""Who holds a server's port, with real processes and real sockets on 127.0.0.0/8: two servers
sharing one address and port (SO_REUSEPORT) are each other's port conflicts and unhealthy; a server
whose port another process holds is never ready, whether checked as a scanned process or waited
for through its Popen; a Popen that exited is reported with its status although the port answers."""

from __future__ import annotations

import ipaddress
import json
import os
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from enginespec import EngineExited, EngineProcess, NotReady, Scanner
from enginespec.health.checks import check_health, wait_ready
from helpers.cli import enginespec
from helpers.fakeserver import Answer, serving
from helpers.procs import wait_for

FAKE = Path(__file__).parents[1] / "data" / "fake_llama_cpp"
#: a loopback address of its own, so no other test's server is on it
HOST = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def _start(
    started: list[subprocess.Popen[bytes]],
    port: int,
    alias: str,
    listens: bool = True,
    pass_fds: tuple[int, ...] = (),
    **env: str,
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--host",
        HOST,
        "--port",
        str(port),
        "--model_alias",
        alias,
    ]
    proc = subprocess.Popen(
        argv,
        env={**os.environ, "PYTHONPATH": str(FAKE), **env},
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        pass_fds=pass_fds,
    )
    started.append(proc)
    if listens:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"listening\n"
    return proc


def _scanned(scanner: Scanner, pid: int) -> EngineProcess:
    return next(p for p in scanner.scan() if p.pid == pid)


def test_servers_sharing_a_port_are_each_others_conflicts(servers: list[subprocess.Popen[bytes]]) -> None:
    port = _free_port()
    first = _start(servers, port, "one", FAKE_REUSEPORT="1")
    second = _start(servers, port, "two", FAKE_REUSEPORT="1")
    scanner = Scanner()
    a, b = _scanned(scanner, first.pid), _scanned(scanner, second.pid)
    assert (a.listen_ports, b.listen_ports) == ((port,), (port,))
    assert (a.port_conflicts, b.port_conflicts) == ((second.pid,), (first.pid,))
    health = check_health(a)
    assert health.state == "unhealthy"
    assert f"shared with pid {second.pid}" in health.reason
    # `ps` shows them
    listed = json.loads(enginespec("ps", "--json", "--no-health").stdout)
    shown = {p["pid"]: p["port_conflicts"] for p in listed if p["pid"] in (first.pid, second.pid)}
    assert shown == {first.pid: [second.pid], second.pid: [first.pid]}
    table = enginespec("ps", "--no-health", "--wide").stdout.decode()
    assert "PORT SHARED WITH" in table
    # once the other is gone, the next scan after the refresh has no conflict and health is ready
    second.kill()
    second.wait()
    wait_for(lambda: _scanned(scanner, first.pid).port_conflicts == (), timeout=10)
    assert check_health(_scanned(scanner, first.pid), verify_identity=True).state == "ready"


def test_a_server_whose_port_another_process_holds_is_never_ready(
    servers: list[subprocess.Popen[bytes]],
) -> None:
    port = _free_port()
    holder = _start(servers, port, "holder")
    # a second server whose bind failed but that stays up (mlx_lm.server does), on the same port
    clashing = _start(servers, port, "clashing", listens=False, FAKE_NO_LISTEN="1")
    wait_for(lambda: Path(f"/proc/{clashing.pid}/cmdline").read_bytes().count(b"\0") > 3)
    scanner = Scanner()
    process = _scanned(scanner, clashing.pid)
    assert (process.listen_ports, process.port_conflicts) == ((), ())
    health = check_health(process)
    assert health.state == "unhealthy"
    assert f"held by pid {holder.pid}, not by this server (pid {clashing.pid})" in health.reason
    with pytest.raises(NotReady) as waited:
        wait_ready(process, timeout=1.5, poll=0.1)
    assert waited.value.last is not None
    assert f"pid {holder.pid}" in waited.value.last.reason
    # the same through the Popen and the URL only
    url = f"http://{HOST}:{port}"
    assert check_health("llamacpp-python", url).state == "ready"  # the holder answers
    with pytest.raises(NotReady) as through_popen:
        wait_ready("llamacpp-python", url, timeout=1.5, poll=0.1, process=clashing)
    assert through_popen.value.last is not None
    assert through_popen.value.last.state == "unhealthy"
    # the holder itself is ready
    assert check_health(_scanned(scanner, holder.pid), verify_identity=True).state == "ready"


def test_a_server_that_ends_while_its_port_answers_is_not_ready(
    servers: list[subprocess.Popen[bytes]],
) -> None:
    """A second vLLM on a taken port exits 1 after some seconds: a check that began while it was up
    and got the holder's answer after it ended must not call it ready (its fds, gone, cannot show
    that another process holds the port)."""
    port = _free_port()
    holder_socket = socket.socket()
    holder_socket.bind((HOST, port))
    holder_socket.set_inheritable(True)
    # It holds the listening socket when the check begins (else nothing is sent to the port),
    # and has gone when the answer comes.
    fds = (holder_socket.fileno(),)
    clashing = _start(servers, port, "clashing", listens=False, pass_fds=fds, FAKE_NO_LISTEN="1")
    wait_for(lambda: Path(f"/proc/{clashing.pid}/cmdline").read_bytes().count(b"\0") > 3)
    process = _scanned(Scanner(), clashing.pid)
    # the holder answers only after the clashing server is gone and reaped
    with serving({"/v1/models": [Answer(200, b'{"data": []}', delay=2.0)]}, sock=holder_socket) as holder:

        def end_when_asked() -> None:
            wait_for(lambda: holder.script.seen)
            clashing.kill()
            clashing.wait()

        ender = threading.Thread(target=end_when_asked)
        ender.start()
        health = check_health(process, timeout=10)
        ender.join()
    assert holder.script.seen
    assert (health.state, health.reason) == ("down", "process is gone"), health


def test_a_popen_that_exited_is_reported_with_its_status_though_the_port_answers(
    servers: list[subprocess.Popen[bytes]],
) -> None:
    port = _free_port()
    _start(servers, port, "holder")
    # a second llama-server exits 1 within milliseconds when its port is taken
    exiting = _start(servers, port, "second", listens=False, FAKE_EXIT="1", FAKE_EXIT_AFTER="0.3")
    with pytest.raises(EngineExited) as exited:
        wait_ready("llamacpp-python", f"http://{HOST}:{port}", timeout=10, poll=0.05, process=exiting)
    assert exited.value.returncode == 1


def test_listening_addresses_overlap_as_the_kernel_routes_them() -> None:
    # (how the kernel's tables are read: tests/scanning/test_proc_root.py)
    from enginespec.process.sockets import connect_addresses, overlap

    loopback, any4, any6, other = (
        ipaddress.ip_address(a) for a in ("127.0.0.1", "0.0.0.0", "::", "127.0.0.2")
    )
    assert overlap(loopback, any4)
    assert overlap(loopback, any6)  # `::` takes IPv4 too unless IPV6_V6ONLY
    assert not overlap(loopback, other)
    assert not overlap(ipaddress.ip_address("::1"), any4)
    assert [str(a) for a in connect_addresses("localhost")] == ["127.0.0.1", "::1"]
    assert [str(a) for a in connect_addresses("[::1]")] == ["::1"]
    assert connect_addresses("example.org") == ()
