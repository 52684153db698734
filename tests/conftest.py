"""Every behavioural test runs on the backend chosen by ENGINESPEC_BACKEND; `.ci/run` runs the
suite once with `native` and once with `python`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import enginespec
from helpers.fakeserver import bound_socket
from helpers.procs import Procs, build_helper, running

# A suite started as a background job of a non-interactive shell (`.ci/run &`, nohup) inherits
# SIGINT ignored, and so would every CLI it starts: the Ctrl-C tests need the default, as a
# terminal gives it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header() -> str:
    return f"enginespec backend: {enginespec.BACKEND}"


@pytest.fixture(scope="session", autouse=True)
def _backend_is_the_one_asked_for() -> None:
    wanted = os.environ.get("ENGINESPEC_BACKEND")
    if wanted:
        assert wanted == enginespec.BACKEND


@pytest.fixture(scope="session")
def helper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled idle helper (tests/helpers/idle.c)."""
    return build_helper(tmp_path_factory.mktemp("helper"))


@pytest.fixture
def procs(helper: Path) -> Iterator[Procs]:
    with running(helper) as started:
        yield started


@pytest.fixture
def held_port() -> Iterator[Callable[[], int]]:
    """A loopback port no other process can listen on while the test runs: bound, never
    listening, closed after the test. For an engine that must find nothing answering on its port
    (a fixed port could be a real engine's of another user on a busy host)."""
    held: list[socket.socket] = []

    def hold() -> int:
        held.append(bound_socket())
        return int(held[-1].getsockname()[1])

    try:
        yield hold
    finally:
        for sock in held:
            sock.close()


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A directory user `nobody` can enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="enginespec-nobody-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nobody_idle(helper: Path, nobody_dir: Path) -> Path:
    """The idle helper where `nobody` can run it (``Procs.start(..., executable=this, user="nobody")``)."""
    program = Path(shutil.copy(helper, nobody_dir / "idle"))
    program.chmod(0o755)
    return program
