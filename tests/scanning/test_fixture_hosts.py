"""Both backends' scanners on the same fixture hosts (tests/helpers/fixturehost.py: ``ROOT/proc`` in the
kernel's formats, read through ``root``): each scenario of rust/scan/tests.rs ported here runs on
the Rust scanner and on the pure-Python one, which must find the same records."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import enginespec._pyscanner as _pyscanner
from enginespec._common import RawProcess
from helpers.fixturehost import BOOT_TIME, SIGNATURES, FixtureHost, Stat, later

try:
    import enginespec._native as _native
except ImportError:  # the fallback as users meet it: the extension deleted
    _native = None  # type: ignore[assignment]

Make = Callable[..., Any]
BACKENDS: dict[str, Make] = {"python": _pyscanner.ProcessScanner}
if _native is not None:
    BACKENDS["native"] = _native.ProcessScanner


@pytest.fixture(params=sorted(BACKENDS))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[FixtureHost, Make]:
    """A fixture host, and a scanner of the backend the test runs on, reading it."""
    host = FixtureHost(tmp_path / "host")
    backend = BACKENDS[request.param]

    def scanner(listen_ports: bool = True) -> Any:
        return backend(SIGNATURES, ["sh", "env"], 5.0, 2.0, listen_ports, root=str(host.root))

    return host, scanner


def _pids(found: list[RawProcess]) -> list[int]:
    return sorted(p.pid for p in found)


def _find(found: list[RawProcess], pid: int) -> RawProcess:
    return next(p for p in found if p.pid == pid)


def test_a_cold_scan_finds_engines_and_not_look_alikes(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    demo = host.spawn(100, ["demo", "serve", "/m/a", "--port", "8001"])
    host.spawn(101, ["tail", "-f", "/var/log/demo.log"])
    host.spawn(102, ["grep", "demo serve"])
    host.spawn(103, ["vim", "/src/demo/serve/README.md"])
    host.spawn(104, ["demo", "bench", "serve"])
    host.spawn(105, ["/opt/venv/bin/solo-server", "-m", "/m/b.gguf"])
    host.spawn(106, ["python3", "/opt/demo/serve.py"])
    host.spawn(107, ["sh", "-c", "demo serve /m/x"])
    found = scanner().scan()
    assert _pids(found) == [100, 105]
    a = _find(found, 100)
    assert (a.facts.engine, a.ppid, a.facts.port, a.facts.model) == (0, 1, 8001, "/m/a")
    assert a.argv == ["demo", "serve", "/m/a", "--port", "8001"]
    assert a.exe == "/usr/bin/demo"
    assert a.parent_argv == ["/sbin/init"]
    assert a.start_time == pytest.approx(demo.start_ticks / os.sysconf("SC_CLK_TCK") + BOOT_TIME)
    b = _find(found, 105)
    assert (b.facts.engine, b.facts.model) == (1, "/m/b.gguf")


def test_scanners_of_other_signatures_classify_by_their_own(make: tuple[FixtureHost, Make]) -> None:
    # The native backend keeps the last signatures it compiled for the next scanner: one of other
    # signatures, made in between, must not get them, nor leave its own behind.
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(101, ["solo-server", "-m", "/m/b"])
    backend = type(scanner())
    solo_only = json.dumps([json.loads(SIGNATURES)[1]])
    assert _pids(scanner().scan()) == [100, 101]
    solo = backend(solo_only, ["sh"], 5.0, 2.0, True, root=str(host.root)).scan()
    assert [(p.pid, p.facts.engine) for p in solo] == [(101, 0)]
    assert _pids(scanner().scan()) == [100, 101]


def test_an_unchanged_engine_is_the_very_same_record_and_a_killed_one_goes(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(101, ["solo-server", "-m", "/m/b"])
    s = scanner()
    first = s.scan()
    again = s.scan()
    assert _find(again, 100) is _find(first, 100)
    host.kill(101)
    host.spawn(300, ["sleep", "1"])  # a fork, so the next scan lists the host again
    assert _pids(s.scan()) == [100]


def test_workers_are_folded_with_their_listen_ports(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(110, ["demo::Worker_TP0"], ppid=100)
    host.spawn(111, ["demo::Worker_TP1"], ppid=100)
    host.spawn(112, ["demo::helper"], ppid=110)
    host.set_children(100, 100, [110])
    host.set_children(100, 105, [111])  # forked by a second thread of 100
    host.set_children(110, 110, [112])
    host.add_socket(100, 3, 5001)
    host.add_socket(110, 4, 5002)
    host.add_socket(111, 5, 5003)
    host.add_socket(111, 6, 5999)
    host.set_tcp(100, "tcp", [(5001, 8001, "0A"), (5003, 40000, "01"), (5004, 7777, "0A")])
    host.set_tcp(100, "tcp6", [(5002, 9001, "0A")])
    host.spawn(120, ["sleep", "1000"])
    host.add_socket(120, 3, 5004)
    host.spawn(200, ["solo-server", "-m", "/m/s"])
    host.spawn(210, ["solo-helper"], ppid=200)
    host.set_children(200, 200, [210])
    host.add_socket(200, 3, 6001)
    host.add_socket(210, 3, 6002)
    host.set_tcp(200, "tcp", [(6001, 8080, "0A"), (6002, 8081, "0A")])
    found = scanner().scan()
    assert _pids(found) == [100, 200]
    demo = _find(found, 100)
    assert demo.descendants == [110, 111, 112]
    # 5003 is a connection, 5004 another process's listener, 5999 in no table
    assert demo.listen_ports == [8001, 9001]
    solo = _find(found, 200)
    assert solo.descendants == []  # solo does not fold workers
    assert solo.listen_ports == [8080]  # its child's socket is not its own
    assert all(p.listen_ports == [] for p in scanner(listen_ports=False).scan())


def test_a_socket_table_is_read_as_far_as_its_listening_sockets(make: tuple[FixtureHost, Make]) -> None:
    # The kernel prints a table's listeners first, then walks its whole connection hash (costly
    # however few connections there are): the listeners are read, over several reads, and the
    # connections only up to the first of them. No kernel prints a listener after a connection;
    # the one placed there shows where the reading stopped.
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.add_socket(100, 3, 5299)
    host.add_socket(100, 4, 7001)
    host.add_socket(100, 5, 7003)
    others = [(5000 + n, 10000 + n, "0A") for n in range(299)]
    rows = [*others, (5299, 8001, "0A"), (7001, 40000, "01"), (7002, 40001, "06"), (7003, 8002, "0A")]
    host.set_tcp(100, "tcp", rows)
    host.set_tcp(100, "tcp6", [])
    assert _find(scanner().scan(), 100).listen_ports == [8001]


@pytest.mark.parametrize("settled", [_pyscanner.SETTLED_RUN - 1, _pyscanner.SETTLED_RUN])
def test_a_first_scan_looks_for_recent_births_back_from_the_cursor(
    make: tuple[FixtureHost, Make], settled: int
) -> None:
    # 200 was born 1 s before the first scan (which watches it for an exec), and long-lived
    # processes have the pids after it (as when the cursor wrapped around pid_max and skipped
    # them). Newest first, the first scan reads stats until SETTLED_RUN in a row started earlier.
    host, scanner = make
    ticks = os.sysconf("SC_CLK_TCK")
    now = time.time() - BOOT_TIME  # seconds since the fixture host's boot
    (host.proc / "uptime").write_text(f"{now:.2f} 0.00\n")
    host.spawn(1, ["/sbin/init"])
    host.create(200, ["python3", "-m", "launcher"], Stat(start_ticks=int((now - 1) * ticks)))
    for n in range(settled):
        host.spawn(201 + n, ["sleep", "1000"])
    s = scanner()
    assert s.scan() == []
    host.exec(200, ["demo", "serve", "/m/early"])
    assert _pids(s.scan()) == ([200] if settled < _pyscanner.SETTLED_RUN else [])


def test_an_engine_that_rewrites_its_argv_is_read_anew(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a", "--port", "8001"])
    s = scanner()
    assert _find(s.scan(), 100).facts.port == 8001
    host.exec(100, ["demo", "serve", "/m/a", "--port", "8002"])
    host.spawn(300, ["sleep", "1"])
    assert _find(s.scan(), 100).facts.port == 8002


def test_a_pid_handed_to_another_process_is_another_process(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    stat = host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(101, ["solo-server", "-m", "/m/b"])
    s = scanner()
    before = _find(s.scan(), 100)
    host.replace(100, ["demo", "serve", "/m/new"], later(stat, 500))
    host.replace(101, ["sleep", "9"], later(stat, 501))
    host.spawn(300, ["sleep", "1"])
    found = s.scan()
    assert _pids(found) == [100]  # the engine that took 101's pid is no engine
    after = _find(found, 100)
    assert after.facts.model == "/m/new"
    assert after.start_time == pytest.approx(before.start_time + 500 / os.sysconf("SC_CLK_TCK"))


def test_zombies_and_malformed_files_are_no_engines_and_never_raise(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.set_stat(100, Stat(state="Z", start_ticks=5002))
    host.spawn(101, ["demo", "serve", "/m/b"])
    (host.proc / "101" / "stat").write_text("101 (demo")  # cut short
    host.spawn(102, ["demo", "serve", "/m/c"])
    (host.proc / "102" / "cmdline").write_bytes(b"")  # a kernel thread's empty argv
    host.spawn(103, ["solo-server", "-m", "/m/d"])
    assert _pids(scanner().scan()) == [103]


def test_a_missing_root_scans_nothing(make: tuple[FixtureHost, Make], tmp_path: Path) -> None:
    _host, _scanner = make
    for name, backend in BACKENDS.items():
        assert backend(SIGNATURES, [], 5.0, 2.0, True, root=str(tmp_path / "nowhere")).scan() == [], name
