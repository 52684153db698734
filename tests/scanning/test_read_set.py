"""The read set: what a scan reads of each engine process beyond its argv (the environment
variables its engine names, its cgroup, its network namespace, whether it runs in its checkout),
declared by the caller and read by the backend, once per record, for engine processes only. Both
scanners read the same fixture host and must give the same records."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import enginespec._host.fallback.scan as _pyscanner
from enginespec._host.shapes import MAX_ENVIRON_BYTES, Environ, RawProcess, ReadSet
from helpers.fixturehost import SIGNATURES, FixtureHost, make_unreadable, without_read_override

try:
    import enginespec._native as _native
except ImportError:  # the fallback as users meet it: the extension deleted
    _native = None  # type: ignore[assignment]

SCANNERS: dict[str, Callable[..., Any]] = {"python": _pyscanner.ProcessScanner}
if _native is not None:
    SCANNERS["native"] = _native.ProcessScanner

#: ``demo`` (engine 0) reads two variables; ``solo`` (engine 1) none.
READ_SET = ReadSet([["DEMO_PORT", "DEMO_KEY"], []], cgroup=True, netns=True)
CGROUP = "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n"


def _environ(host: FixtureHost, pid: int, data: bytes) -> None:
    (host.proc / str(pid) / "environ").write_bytes(data)


@pytest.fixture
def host(tmp_path: Path) -> FixtureHost:
    """Engines whose environment, cgroup and namespace each try a reader's edge."""
    host = FixtureHost(tmp_path / "host")
    host.spawn(1, ["/sbin/init"])
    # repeats kept in order, an empty value, a value with '=' and a byte that is not UTF-8, a name
    # that only starts like one asked for, an entry without '='
    host.spawn(100, ["demo", "serve", "/m/a"])
    _environ(host, 100, b"PATH=/bin\0DEMO_PORT=1\0DEMO_KEY=\0DEMO_PORT\0DEMO_PORT=2=3\xff\0DEMO_PORTS=9\0")
    host.set_cgroup(100, CGROUP)
    host.link(100, "ns/net", "net:[4026532999]")
    # an environment larger than is read: the entry cut at the limit and the rest are left out
    host.spawn(200, ["demo", "serve", "/m/b"])
    filler = b"FILLER=" + b"x" * (MAX_ENVIRON_BYTES - len(b"DEMO_PORT=5\0FILLER=") - 3)
    _environ(host, 200, b"DEMO_PORT=5\0" + filler + b"\0DEMO_KEY=late\0")
    # exactly as large as is read: all of it
    host.spawn(250, ["demo", "serve", "/m/c"])
    exact = b"DEMO_KEY=k\0FILLER="
    _environ(host, 250, exact + b"y" * (MAX_ENVIRON_BYTES - len(exact) - 1) + b"\0")
    # nothing to read: no environ, cgroup or namespace link
    host.spawn(300, ["demo", "serve", "/m/d"])
    # an engine whose read set names no variable: its environment is not read
    host.spawn(400, ["solo-server", "-m", "/m/e"])
    _environ(host, 400, b"DEMO_PORT=7\0")
    # not an engine: nothing of it is read beyond its argv
    host.spawn(500, ["bash"])
    _environ(host, 500, b"DEMO_PORT=8\0")
    return host


def _scan(name: str, host: FixtureHost, read_set: ReadSet | None = READ_SET) -> dict[int, RawProcess]:
    scanner = SCANNERS[name](SIGNATURES, [], 5.0, 2.0, True, root=str(host.root), read_set=read_set)
    return {item.pid: item for item in scanner.scan_at(60.0)}


@pytest.mark.parametrize("name", sorted(SCANNERS))
def test_the_read_set_is_read_for_engines(name: str, host: FixtureHost) -> None:
    found = _scan(name, host)
    assert sorted(found) == [100, 200, 250, 300, 400]
    first = found[100]
    assert first.environ == Environ(
        [("DEMO_PORT", "1"), ("DEMO_KEY", ""), ("DEMO_PORT", "2=3" + os.fsdecode(b"\xff"))], cut=False
    )
    assert first.cgroup == CGROUP.encode()
    assert first.netns == 4026532999
    assert found[200].environ == Environ([("DEMO_PORT", "5")], cut=True)
    assert found[250].environ == Environ([("DEMO_KEY", "k")], cut=False)
    assert (found[300].environ, found[300].cgroup, found[300].netns) == (None, None, None)
    assert found[400].environ is None


@pytest.mark.parametrize("name", sorted(SCANNERS))
def test_nothing_is_read_that_was_not_asked(name: str, host: FixtureHost) -> None:
    found = _scan(name, host, None)
    assert all((p.environ, p.cgroup, p.netns) == (None, None, None) for p in found.values())
    found = _scan(name, host, ReadSet([["DEMO_KEY"]], cgroup=False, netns=False))
    assert found[100].environ == Environ([("DEMO_KEY", "")], cut=False)
    assert (found[100].cgroup, found[100].netns) == (None, None)


@pytest.mark.parametrize("name", sorted(SCANNERS))
def test_an_unreadable_environment_is_not_known(name: str, host: FixtureHost) -> None:
    make_unreadable(host.proc / "100" / "environ")
    make_unreadable(host.proc / "100" / "cgroup")
    found = without_read_override(lambda: _scan(name, host))
    assert (found[100].environ, found[100].cgroup) == (None, None)
    assert found[100].netns == 4026532999


@pytest.mark.parametrize("name", sorted(SCANNERS))
def test_read_once_per_record(name: str, host: FixtureHost) -> None:
    """An engine's record keeps what was read while it lives; a new process under its pid is
    read anew."""
    scanner = SCANNERS[name](SIGNATURES, [], 5.0, 2.0, True, root=str(host.root), read_set=READ_SET)
    first = {item.pid: item for item in scanner.scan_at(60.0)}
    _environ(host, 100, b"DEMO_PORT=changed\0")
    again = {item.pid: item for item in scanner.scan_at(61.0)}
    assert again[100] is first[100]
    host.exec(100, ["demo", "serve", "/m/other"])
    after = {item.pid: item for item in scanner.scan_at(62.0)}
    assert after[100].environ == Environ([("DEMO_PORT", "changed")], cut=False)


def test_both_backends_give_the_same_records(host: FixtureHost) -> None:
    if len(SCANNERS) < 2:
        pytest.skip("the extension is not built: there is one backend")
    records = [sorted(_scan(name, host).values()) for name in sorted(SCANNERS)]
    assert records[0] == records[1]


@pytest.mark.parametrize("name", sorted(SCANNERS))
def test_a_checkout_is_looked_for_as_the_read_set_names_it(name: str, tmp_path: Path) -> None:
    """``demo`` counts only next to ``marker.py`` and ``lib/x.py``: each record says whether its
    files are there, looked at inside the process's root from its working directory; ``solo``
    needs no checkout. Both scanners must agree."""
    host = FixtureHost(tmp_path / "host")
    files = tmp_path / "fs"
    (files / "co" / "lib").mkdir(parents=True)
    (files / "co" / "marker.py").write_text("")
    (files / "co" / "lib" / "x.py").write_text("")
    (files / "link").mkdir()
    (files / "link" / "lib").mkdir()
    (files / "link" / "lib" / "x.py").write_text("")
    (files / "link" / "marker.py").symlink_to(files / "co" / "marker.py")  # a link is no file
    (files / "empty").mkdir()
    host.spawn(1, ["/sbin/init"])
    placed = {
        100: (["demo", "serve", "/m/a"], "co", True),
        101: (["demo", "serve", "/m/b"], "empty", False),
        102: (["/co/demo", "serve", "/m/c"], "empty", True),  # inside the process's root
        103: (["../co/demo", "serve", "/m/d"], "co", False),  # `..`: never looked into
        104: (["python3", "-u", "demo", "serve", "/m/e"], "co", True),  # the script is the program
        105: (["demo", "serve", "/m/f"], "link", False),
        106: (["demo", "serve", "/m/g"], "co", False),  # its status cannot be read
        200: (["solo-server", "-m", "/m/h"], "empty", None),
    }
    for pid, (argv, cwd, _expected) in placed.items():
        host.spawn(pid, argv)
        host.link(pid, "root", files)
        host.link(pid, "cwd", files / cwd)
    make_unreadable(host.proc / "106" / "status")
    read_set = ReadSet(
        [[], []], cgroup=False, netns=False, checkouts=[{"demo": ("marker.py", "lib/x.py")}, {}]
    )
    found = without_read_override(lambda: _scan(name, host, read_set))
    assert {pid: item.in_checkout for pid, item in found.items()} == {
        pid: expected for pid, (_argv, _cwd, expected) in placed.items()
    }
    # kept while the process lives, as everything the read set asks
    (files / "co" / "marker.py").unlink()
    scanner = SCANNERS[name](SIGNATURES, [], 5.0, 2.0, True, root=str(host.root), read_set=read_set)
    first = {item.pid: item.in_checkout for item in scanner.scan_at(60.0)}
    assert first[100] is False
    (files / "co" / "marker.py").write_text("")
    assert {item.pid: item.in_checkout for item in scanner.scan_at(61.0)}[100] is False


def _hold(host: FixtureHost, pid: int, fd: int, target: str | Path) -> None:
    os.symlink(target, host.proc / str(pid) / "fd" / str(fd))


@pytest.mark.parametrize("name", sorted(SCANNERS))
def test_the_devices_a_tree_holds_are_listed_with_its_sockets(name: str, tmp_path: Path) -> None:
    """``devices``: each tree's character devices, (fd, major, minor) per pid, from the listing
    of ``fd/`` its sockets come from; only links into ``/dev`` are followed, and neither a
    terminal, ``/dev/null`` nor a file is a device. Read again at each tree refresh (a process
    opens its GPUs after it starts), a worker's dropped as it exits, and nothing of a process
    that is no engine."""
    host = FixtureHost(tmp_path / "host")
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(101, ["python3", "-c", "worker"], ppid=100)
    host.set_children(100, 100, [101])
    (host.root / "dev").mkdir()
    (host.root / "dev" / "notes").write_text("a file")
    zero, full, urandom = (os.stat(f"/dev/{n}").st_rdev for n in ("zero", "full", "urandom"))
    _hold(host, 100, 3, "/dev/zero")
    _hold(host, 100, 4, "/dev/null")
    host.add_socket(100, 5, 77)
    _hold(host, 100, 6, host.root / "dev" / "notes")  # the fixture's own /dev: a file
    _hold(host, 100, 7, "/dev/pts/0")
    _hold(host, 100, 8, "/dev/gone")
    _hold(host, 100, 9, "/tmp")
    _hold(host, 101, 12, "/dev/urandom")
    host.spawn(400, ["solo-server", "-m", "/m/e"])
    host.spawn(500, ["bash"])
    _hold(host, 500, 3, "/dev/zero")
    scanner = SCANNERS[name](
        SIGNATURES,
        [],
        5.0,
        2.0,
        True,
        root=str(host.root),
        read_set=ReadSet([[], []], False, False, devices=True),
    )
    found = {item.pid: item for item in scanner.scan_at(60.0)}
    assert sorted(found) == [100, 400]
    assert found[100].devices == {
        100: [(3, os.major(zero), os.minor(zero))],
        101: [(12, os.major(urandom), os.minor(urandom))],
    }
    assert found[400].devices == {400: []}
    # before the next refresh the record stands; at it, the new device is there
    _hold(host, 100, 10, "/dev/full")
    assert {item.pid: item for item in scanner.scan_at(61.0)}[100] is found[100]
    again = {item.pid: item for item in scanner.scan_at(62.5)}
    assert again[100].devices is not None
    assert again[100].devices[100] == [
        (3, os.major(zero), os.minor(zero)),
        (10, os.major(full), os.minor(full)),
    ]
    # a worker that exits takes its devices with it at once
    host.kill(101)
    host.set_children(100, 100, [])
    gone = {item.pid: item for item in scanner.scan_at(63.0)}
    assert gone[100].descendants == []
    assert gone[100].devices == {100: again[100].devices[100]}
    # not asked: not listed
    assert all(item.devices is None for item in _scan(name, host).values())
