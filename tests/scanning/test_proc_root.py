"""Who listens where, read once: both backends' ``ProcRoot`` (procread.rs and its twin) on the same
fixture host give the same sockets, and ``enginespec.process.sockets`` (health checks, port conflicts,
launches) answers from them, under the root it is given."""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import enginespec._host.fallback.procread as _pyprocread
import enginespec._host.fallback.scan as _pyscanner
import enginespec.process.sockets as sockets
from enginespec._host.procfiles import CgroupLine
from enginespec._host.root import HostRoot
from enginespec._host.shapes import Listening
from helpers.fixturehost import SIGNATURES, FixtureHost, Stat, make_unreadable, without_read_override

try:
    import enginespec._native as _native
except ImportError:  # the fallback as users meet it: the extension deleted
    _native = None  # type: ignore[assignment]

READERS: dict[str, Callable[[str], Any]] = {"python": _pyprocread.ProcRoot}
SCANNERS: dict[str, Callable[..., Any]] = {"python": _pyscanner.ProcessScanner}
if _native is not None:
    READERS["native"] = _native.ProcRoot
    SCANNERS["native"] = _native.ProcessScanner

# the kernel's tables below are written as a little-endian host prints them
pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="the tables are a little-endian host's")

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _row(address: str, port: int, state: str, inode: int) -> str:
    rest = f"00000000:0000 {state} 00000000:00000000 00:00000000 00000000 0 0 {inode} 1"
    return f"   0: {address}:{port:04X} {rest}\n"


# Addresses as the kernel prints them on this (little-endian) host: each 32-bit word of the
# address, read as a host-order integer, in hex (tcp4_seq_show, tcp6_seq_show).
LOOPBACK = "0100007F"
ANY = "00000000"
ANY6 = "0" * 32
LOOPBACK6 = "00000000000000000000000001000000"
MAPPED = "0000000000000000FFFF00000302010A"  # ::ffff:10.1.2.3


@pytest.fixture
def host(tmp_path: Path) -> FixtureHost:
    """Server 100 (worker 101) listens on 127.0.0.1:8000 and [::]:8001; 200 shares 8000
    (SO_REUSEPORT); 300 listens on 0.0.0.0:9000; junk rows in both tables; 400's fds unreadable."""
    host = FixtureHost(tmp_path / "host")
    host.spawn(1, ["/sbin/init"])
    for pid in (100, 101, 200, 300):
        host.spawn(
            pid, ["demo-worker"] if pid == 101 else ["demo", "serve", "/m/a"], 100 if pid == 101 else 1
        )
        host.link(pid, "ns/net", "net:[4026531840]")
    host.set_children(100, 100, [101])
    host.add_socket(100, 5, 5001)
    host.add_socket(101, 6, 5002)
    host.add_socket(200, 5, 5003)
    host.add_socket(300, 5, 5004)
    host.add_socket(300, 6, 6999)  # not listening
    tcp = (
        HEADER
        + _row(LOOPBACK, 8000, "0A", 5001)
        + _row(LOOPBACK, 8000, "0A", 5003)
        + _row(ANY, 9000, "0A", 5004)
        + _row(LOOPBACK, 40000, "01", 6999)  # established, not a listener
        + "   9: 7F:1F90 00000000:0000 0A 0 0 0 0 0 7001 1\n"  # an address of 2 hex digits
        + "garbage\n"
    )
    tcp6 = (
        HEADER
        + _row(ANY6, 8001, "0A", 5002)
        + _row(MAPPED, 8002, "0A", 5005)
        + _row(LOOPBACK6, 8003, "0A", 5006)
    )
    for pid in (100, 101, 200, 300):
        (host.proc / str(pid) / "net" / "tcp").write_text(tcp)
        (host.proc / str(pid) / "net" / "tcp6").write_text(tcp6)
    host.spawn(400, ["demo", "serve", "/m/b"])
    (host.proc / "400" / "fd").rmdir()
    (host.proc / "400" / "fd").write_text("not a directory")
    return host


@pytest.mark.parametrize("backend", sorted(READERS))
def test_both_readers_read_the_same_sockets(host: FixtureHost, backend: str) -> None:
    reader = READERS[backend](str(host.proc))
    assert reader.netns(100) == 4026531840
    assert reader.netns(1) is None  # no ns/net link
    assert reader.socket_inodes(300) == {5004, 6999}
    assert reader.socket_inodes(400) is None
    assert reader.socket_inodes(12345) is None  # no such process
    assert sorted(reader.listen_table(100)) == sorted(
        [
            Listening(5001, bytes([127, 0, 0, 1]), 8000),
            Listening(5003, bytes([127, 0, 0, 1]), 8000),
            Listening(5004, bytes(4), 9000),
            Listening(5002, bytes(16), 8001),
            Listening(5005, ipaddress.IPv6Address("::ffff:10.1.2.3").packed, 8002),
            Listening(5006, ipaddress.IPv6Address("::1").packed, 8003),
        ]
    )
    assert reader.listen_table(12345) == []
    assert {pid for pid, _inode in reader.list_pids()} == {1, 100, 101, 200, 300, 400}


@pytest.mark.parametrize("backend", sorted(READERS))
def test_both_readers_give_the_same_live_descendants(host: FixtureHost, backend: str) -> None:
    """A tree through two threads' children lists, a zombie left out (with what it lists), a loop
    in the lists and a child that is gone: what `reaching.engine_tree` asks of the backend."""
    host.spawn(102, ["demo-worker"], 100)
    host.spawn(103, ["demo-worker"], 102)
    host.spawn(104, ["demo-worker"], 100)
    host.set_stat(104, Stat(state="Z", ppid=100))
    host.spawn(105, ["demo-worker"], 104)
    host.set_children(100, 100, [101, 104])
    host.set_children(100, 777, [102, 99999])  # another thread of 100's; 99999 is gone
    host.set_children(102, 102, [103, 100])  # a list naming the root again ends nowhere
    host.set_children(104, 104, [105])
    reader = READERS[backend](str(host.proc))
    assert reader.descendants(100) == [101, 102, 103]
    assert reader.descendants(103) == []
    assert reader.descendants(12345) == []


@pytest.mark.parametrize("backend", sorted(READERS))
def test_both_readers_list_the_same_open_devices(host: FixtureHost, backend: str) -> None:
    """The character devices among a process's fds, what the GPU reader asks of the backend for a
    process a scan did not list: only links into ``/dev`` are followed, sockets and
    ``/dev/null`` are none; an fd directory that cannot be listed is ``None``, and says whether it
    was refused (another user's process) or is gone."""
    for fd, target in ((7, "/dev/zero"), (3, "/dev/full"), (8, "/dev/null"), (9, "/tmp")):
        (host.proc / "300" / "fd" / str(fd)).symlink_to(target)
    zero, full = (os.stat(f"/dev/{name}").st_rdev for name in ("zero", "full"))
    reader = READERS[backend](str(host.proc))
    assert reader.open_devices(300) == (
        [(3, os.major(full), os.minor(full)), (7, os.major(zero), os.minor(zero))],
        False,
    )
    assert reader.open_devices(100) == ([], False)  # a socket only
    assert reader.open_devices(400) == (None, False)  # fd/ is not a directory
    assert reader.open_devices(12345) == (None, False)  # no such process
    make_unreadable(host.proc / "300" / "fd")
    assert without_read_override(lambda: reader.open_devices(300)) == (None, True)


@pytest.mark.parametrize("backend", sorted(SCANNERS))
def test_the_scan_reads_its_ports_from_the_same_tables(host: FixtureHost, backend: str) -> None:
    scanner = SCANNERS[backend](SIGNATURES, [], 5.0, 2.0, True, root=str(host.root))
    found = {p.pid: p for p in scanner.scan()}
    assert sorted(found) == [100, 200, 300, 400]
    assert found[100].descendants == [101]
    assert found[100].listen_ports == [8000, 8001]  # the worker's socket too
    assert found[200].listen_ports == [8000]
    assert found[300].listen_ports == [9000]
    assert found[400].listen_ports == []


def test_sockets_answer_from_the_root_they_are_given(host: FixtureHost) -> None:
    proc = str(host.proc)
    found = sockets.listeners(8000, 100, proc)
    assert sorted((listener.inode, str(listener.address)) for listener in found) == [
        (5001, "127.0.0.1"),
        (5003, "127.0.0.1"),
    ]
    # an IPv4-mapped IPv6 address is its IPv4 address
    assert [str(listener.address) for listener in sockets.listeners(8002, 100, proc)] == ["10.1.2.3"]
    assert sockets.holders([5003], exclude=(100,), proc=proc) == (200,)
    assert sockets.holders([5001, 5002], exclude=(100,), proc=proc) == (101,)
    # 200 shares the server's address and port; 300's wildcard is on another port
    assert sockets.conflicts([100, 101], 8000, proc) == (200,)
    assert sockets.conflicts([300], 9000, proc) == ()
    with sockets.shared_tables():
        assert len(sockets.listeners(8000, 100, proc)) == 2
        assert len(sockets.listeners(8000, 200, proc)) == 2  # the same namespace: read once


def test_a_round_names_a_sockets_holders_from_one_walk(host: FixtureHost) -> None:
    """Within one run of checks every process's fds are walked once to name a socket's holders
    (80 servers told to share a port would cost 80 walks): a process that takes the socket after
    the walk is seen by the next round, and a round reads the host it is asked about."""
    proc = str(host.proc)
    with sockets.shared_tables():
        assert sockets.holders([5003], exclude=(100,), proc=proc) == (200,)
        host.spawn(201, ["demo-worker"], 200)
        host.add_socket(201, 5, 5003)
        assert sockets.holders([5003], exclude=(100,), proc=proc) == (200,)
        assert sockets.holders([5003], exclude=(200,), proc=proc) == ()
        assert sockets.holders([5003], exclude=(100,)) == ()  # this host's processes hold no 5003
    assert sockets.holders([5003], exclude=(100,), proc=proc) == (200, 201)
    with sockets.shared_tables():
        assert sockets.holders([5003, 5001], exclude=(100,), proc=proc) == (200, 201)


def test_a_process_cgroups_are_read_once_into_named_lines(host: FixtureHost) -> None:
    """``/proc/PID/cgroup`` of the root a record was scanned under, as named lines: the v2 line,
    v1 lines with their controllers, a path that is no UTF-8 kept as the filesystem names it,
    lines of another form left out; a process gone is ``None``."""
    host.set_cgroup(
        100,
        "12:memory:/system.slice/ollama.service\n"
        "3:cpu,cpuacct:/user.slice\n"
        "junk without colons\n"
        "x:pids:/not-a-number\n"
        "0::/system.slice/ollama.service\n",
    )
    root = HostRoot(str(host.root))
    assert root.cgroup_lines(100) == (
        CgroupLine(12, ("memory",), "/system.slice/ollama.service"),
        CgroupLine(3, ("cpu", "cpuacct"), "/user.slice"),
        CgroupLine(0, (), "/system.slice/ollama.service"),
    )
    assert root.cgroup_lines(12345) is None
    (host.proc / "100" / "cgroup").write_bytes(b"0::/a\xff/b.service\n")
    assert root.cgroup_lines(100) == (CgroupLine(0, (), os.fsdecode(b"/a\xff/b.service")),)
