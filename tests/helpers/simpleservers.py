"""A real process with an engine's exact argv holding the socket a fake server answers on, as a scan
finds it; and an engine's identity probe asked of a real server (issue 41's simple servers)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from enginespec import get_engine_spec
from enginespec.definition.records import HealthAnswer
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, FakeEngine, bound_socket, serving
from helpers.procs import Procs, wait_for


@contextmanager
def engine_process(
    procs: Procs, argv: list[str], routes: dict[str, list[Answer]], port_flag: str = "--port"
) -> Iterator[tuple[EngineProcess, FakeEngine]]:
    """A process of ``argv`` (``port_flag PORT`` appended) holding the socket a fake server answers
    on, as scanned."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving(routes, sock=sock) as server:
        proc = procs.start([*argv, port_flag, str(port)], pass_fds=(sock.fileno(),))

        def scanned() -> EngineProcess | None:
            found = [p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid]
            return found[0] if found else None

        wait_for(lambda: scanned() is not None, timeout=20)
        process = scanned()
        assert process is not None
        assert process.port == port
        yield process, server


def identified(engine: str, url: str) -> bool:
    """Whether the server at ``url`` answers ``engine``'s identity probe as only it does."""
    probe = get_engine_spec(engine).serving.identity
    assert probe is not None
    try:
        with urllib.request.urlopen(url + probe.path, timeout=5) as answer:
            status, body = answer.status, answer.read(1 << 20)
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read(1 << 20)
    return probe.matches(HealthAnswer(status, body))
