"""A listen address from another user's argv never crashes a scan or health check and never
redirects a request: `--host` is a fact, used in a URL only when it is an address."""

from __future__ import annotations

import asyncio
import json

import pytest

from enginespec import Scanner, parse_argv
from enginespec.health.checks import check_all, check_health, check_health_async
from helpers.cli import enginespec
from helpers.fakeserver import serving
from helpers.procs import Procs

HOSTILE_HOSTS = [
    "127.0.0.1\n",
    "127.0.0.1:99",
    "[::1",
    "..",
    "a" * 300,
    "127.0.0.1 Host: evil",
    "user@127.0.0.1",
    "fe80::1%eth0",
]


def _mine(procs: Procs) -> dict[int, object]:
    pids = {p.pid for p in procs.started}
    return {p.pid: p for p in Scanner().scan() if p.pid in pids}


def test_hostile_hosts_give_no_url_and_nothing_raises(procs: Procs) -> None:
    with serving({}) as trap:
        smuggled = f"127.0.0.1:{trap.port}/internal/admin/delete?x="
        for host in [*HOSTILE_HOSTS, smuggled]:
            procs.start(["vllm", "serve", "/m", "--host", host, "--port", "8009"])
        found = _mine(procs)
        assert len(found) == len(HOSTILE_HOSTS) + 1
        for proc in found.values():
            assert proc.base_url is None  # type: ignore[attr-defined]
            assert proc.host in [*HOSTILE_HOSTS, smuggled]  # type: ignore[attr-defined]  # the fact, as given
            assert any("is not an address" in problem for problem in proc.problems)  # type: ignore[attr-defined]
        healths = check_all(found.values())  # type: ignore[arg-type]
        assert {h.state for h in healths} == {"unknown"}
        assert all(h.reason.startswith("no usable listen address") for h in healths)
        one = next(iter(found.values()))
        assert check_health(one).state == "unknown"  # type: ignore[arg-type]
        assert asyncio.run(check_health_async(one)).state == "unknown"  # type: ignore[arg-type]
        listed = enginespec("ps", "--json")
        assert listed.returncode == 0, listed.stderr
        shown = {p["pid"]: p for p in json.loads(listed.stdout)}
        assert set(found) <= set(shown)
        assert all(shown[pid]["health"]["state"] == "unknown" for pid in found)
        table = enginespec("ps")
        assert table.returncode == 0, table.stderr
        for pid in found:
            assert enginespec("health", str(pid)).returncode == 1
        assert trap.script.seen == []  # nothing reached the port smuggled into --host


def test_valid_addresses_still_work(procs: Procs) -> None:
    for host in ("127.0.0.1", "::1", "0.0.0.0", "::", "localhost", "my-host.example.", "10.0.0.7"):
        inv = parse_argv(["vllm", "serve", "m", "--host", host, "--port", "8000"])
        assert inv is not None
        assert inv.problems == (), host
    proc = procs.start(["llama-server", "-m", "m.gguf", "--host", "/tmp/engine-test.sock"])
    found = _mine(procs)[proc.pid]
    assert found.base_url == "http+unix://%2Ftmp%2Fengine-test.sock"  # type: ignore[attr-defined]
    # a socket path is only a socket for an engine that listens on one that way
    assert parse_argv(["vllm", "serve", "m", "--host", "/tmp/x.sock"]).problems  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1\n:8000", "control characters"),
        ("http://127.0.0.1:99999", "port outside 1-65535"),
        ("http://127.0.0.1:0", "port outside 1-65535"),
        ("ftp://127.0.0.1:80", "must start with http"),
        ("http://:80", "no usable host"),
        ("http://a b:80", "no usable host"),
    ],
)
def test_a_bad_url_on_the_command_line_exits_2_with_one_line(url: str, why: str) -> None:
    out = enginespec("health", "vllm", url)
    assert out.returncode == 2
    assert out.stdout == b""
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1
    assert why in lines[0]
    assert "Traceback" not in out.stderr.decode()


def test_an_invalid_argv_port_is_not_the_default() -> None:
    out = enginespec("parse", "--", "vllm", "serve", "--port", "99999", "m")
    assert out.returncode == 0
    document = json.loads(out.stdout)
    assert (document["port"], document["effective_port"]) == (None, None)
    assert document["problems"] == ["port '99999' is not a port number (1-65535)"]
