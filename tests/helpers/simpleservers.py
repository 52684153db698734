"""A real process with an engine's exact argv holding the socket a fake server answers on, as a scan
finds it; and an engine's identity probe asked of a real server (issue 41's simple servers)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from enginespec import get_engine_spec
from enginespec.definition.records import HealthAnswer
from enginespec.health.identity import identify
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, FakeEngine, bound_socket, serving
from helpers.procs import Procs, wait_for

#: A scanned engine process and the fake server answering on its socket, while in use.
Served = AbstractContextManager[tuple[EngineProcess, FakeEngine]]


def scanned(pid: int, argv0: str | None = None, timeout: float = 20) -> EngineProcess:
    """The record a scan gives of the process ``pid``, once a scan finds it (waiting up to
    ``timeout`` seconds); with ``argv0``, once its argv starts so (a forked child is scanned before
    it execs on a loaded host)."""

    def found() -> EngineProcess | None:
        mine = [p for p in Scanner(listen_ports=False).scan() if p.pid == pid]
        return mine[0] if mine and (argv0 is None or mine[0].argv[0] == argv0) else None

    wait_for(lambda: found() is not None, timeout=timeout)
    process = found()
    assert process is not None
    return process


@contextmanager
def engine_process(
    procs: Procs,
    argv: list[str],
    routes: dict[str, list[Answer]],
    port_flag: str = "--port",
    executable: Path | None = None,
    origins: bool = False,
    **env: str,
) -> Iterator[tuple[EngineProcess, FakeEngine]]:
    """A process of ``argv`` (with environment ``env``) holding the socket a fake server answers
    on, as scanned: the socket's port replaces ``{port}`` in its arguments (``--address
    127.0.0.1:{port}``) and environment (``OMLX_PORT={port}``) or, where none holds it, is
    appended after ``port_flag``. ``executable``: the program run under that argv (the helper by
    default); ``origins``: only this test process's requests move the server's scripts on."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    given = [arg.replace("{port}", str(port)) for arg in argv]
    environment = {name: value.replace("{port}", str(port)) for name, value in env.items()}
    if given == argv and environment == env:
        given += [port_flag, str(port)]
    with serving(routes, sock=sock, origins=origins) as server:
        proc = procs.start(given, pass_fds=(sock.fileno(),), executable=executable, **environment)
        process = scanned(proc.pid, argv0=given[0])
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


def identify_answering(routes: dict[str, list[Answer]]) -> tuple[str | None, tuple[str, ...]]:
    """What ``enginespec identify`` tells of a server answering ``routes``: the engine, and every
    engine whose probe matched."""
    with serving(routes) as server:
        found = identify(server.url, timeout=5)
    return found.engine, found.matched
