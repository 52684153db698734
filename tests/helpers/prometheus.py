"""A real Prometheus (Debian's package, installed by .ci/run) started on loopback by a test, with
its HTTP API's queries."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from helpers.fakeserver import free_port
from helpers.procs import stop_child

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is installed by .ci/run"
)


@contextmanager
def running_prometheus(directory: Path, config: str) -> Iterator[str]:
    """Prometheus with ``config`` (its prometheus.yml; other files it names are in ``directory``,
    its working directory), on a free loopback port: its API's base URL. Stopped at the end."""
    (directory / "prometheus.yml").write_text(config)
    port = free_port()
    prometheus = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}/api/v1"
    finally:
        stop_child(prometheus, timeout=30)


def query(api: str, expression: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{api}/query", params={"query": expression}, timeout=5).json()
    return answer["data"]["result"]  # type: ignore[no-any-return]


def until(what: str, predicate: Callable[[], object], timeout: float = 90) -> None:
    """Waits until ``predicate()`` is true (Prometheus still starting or scraping: try again)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.25)
