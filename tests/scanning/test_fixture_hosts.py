"""Both backends' scanners on the same fixture hosts (tests/helpers/fixturehost.py: ``ROOT/proc`` in the
kernel's formats, read through ``root``): every scenario of rust/scan/tests.rs that polls runs
here on the Rust scanner and on the pure-Python one, which must find the same records and count
the same reads. Time is the one thing a fixture cannot hold: the scanners' ``scan_at(seconds)``
steps through the young (5 s) and refresh (2 s) windows instead of sleeping.

The event-driven scenarios run here too: the events a fixture cannot hold are given by the test
(``set_event_driven``, ``apply_events``, ``scan_after_events``), as the kernel's proc connector
gives them to the native backend. Not here: the unit tests of scan.rs's private helpers
(``Reuse``, ``near_cursor``), whose behaviour the cursor-window scenarios below exercise."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest

import enginespec._host.fallback.scan as _pyscanner
from enginespec._host.shapes import ARGV_CUT, MAX_ARGV_ARGS, RawProcess
from helpers.fixturehost import (
    BOOT_TIME,
    SIGNATURES,
    FixtureHost,
    Stat,
    later,
    make_unreadable,
    stat_text,
    without_read_override,
)

try:
    import enginespec._native as _native
except ImportError:  # the fallback as users meet it: the extension deleted
    _native = None  # type: ignore[assignment]

Make = Callable[..., Any]
BACKENDS: dict[str, Make] = {"python": _pyscanner.ProcessScanner}
if _native is not None:
    BACKENDS["native"] = _native.ProcessScanner
TICKS = os.sysconf("SC_CLK_TCK")
R = TypeVar("R")


@pytest.fixture(params=sorted(BACKENDS))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[FixtureHost, Make]:
    """A fixture host, and a scanner of the backend the test runs on, reading it (or ``root``)."""
    host = FixtureHost(tmp_path / "host")
    backend = BACKENDS[request.param]

    def scanner(listen_ports: bool = True, root: Path = host.root) -> Any:
        return backend(SIGNATURES, ["sh", "env"], 5.0, 2.0, listen_ports, root=str(root))

    return host, scanner


class Stats(NamedTuple):
    """A scanner's ``stats()``, by name."""

    scanned: int
    new: int
    vanished: int
    unreadable: int
    restricted: int
    reread: int
    full_recheck: bool
    known: int


def _stats(scanner: Any) -> Stats:
    return Stats(*scanner.stats())


def _pids(found: list[RawProcess]) -> list[int]:
    return [p.pid for p in found]


def _find(found: list[RawProcess], pid: int) -> RawProcess:
    return next(p for p in found if p.pid == pid)


def _start_time(stat: Stat) -> float:
    return stat.start_ticks / TICKS + BOOT_TIME


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
    s = scanner()
    found = s.scan_at(0)
    assert _pids(found) == [100, 105]
    a = _find(found, 100)
    assert (a.facts.engine_index, a.ppid, a.facts.port, a.facts.model) == (0, 1, 8001, "/m/a")
    assert a.argv == ["demo", "serve", "/m/a", "--port", "8001"]
    assert a.exe == "/usr/bin/demo"
    assert a.parent_argv == ["/sbin/init"]
    assert a.start_time == pytest.approx(_start_time(demo), abs=1e-6)
    b = _find(found, 105)
    assert (b.facts.engine_index, b.facts.model) == (1, "/m/b.gguf")
    assert _stats(s) == Stats(9, 9, 0, 0, 0, 0, False, 9)


def test_a_quiet_scan_lists_nothing_drops_the_vanished_and_keeps_the_rest(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(101, ["solo-server", "-m", "/m/b"])
    host.spawn(102, ["sleep", "1000"])
    s = scanner()
    first = s.scan_at(0)
    assert _pids(first) == [100, 101]
    # No fork since: a directory that appears anyway cannot be a new process, and is not even
    # seen, because the listing is skipped.
    host.create(200, ["demo", "serve", "/m/probe"], Stat(start_ticks=9))
    host.kill(101)
    quiet = s.scan_at(1)
    assert _pids(quiet) == [100]
    assert (quiet[0].start_time, quiet[0].argv) == (first[0].start_time, first[0].argv)
    stats = _stats(s)
    assert (stats.new, stats.vanished, stats.reread, stats.known) == (0, 1, 0, 3)
    # One fork anywhere and the next scan lists /proc again.
    host.spawn(300, ["sleep", "1"])
    assert _pids(s.scan_at(2)) == [100, 200]
    assert _stats(s).new == 2


def test_a_watched_exec_wrapper_is_reported_once_it_execs_an_engine(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["sh", "-c", "exec demo serve /m/w"])
    host.spawn(101, ["env", "A=1", "solo-server", "-m", "/m/e"])
    host.spawn(102, ["-sh"])  # a login shell: not watched
    host.spawn(103, ["sh"])  # an interactive shell: not watched
    s = scanner()
    assert s.scan_at(0) == []
    # exec keeps the pid and the /proc/PID directory, and forks nothing: a quiet scan.
    host.exec(100, ["demo", "serve", "/m/w"])
    assert _pids(s.scan_at(60)) == [100]
    assert _stats(s).reread == 2  # only the two wrappers are read
    # The same through a listing scan.
    host.exec(101, ["solo-server", "-m", "/m/e"])
    host.spawn(300, ["sleep", "1"])
    found = s.scan_at(61)
    assert _pids(found) == [100, 101]
    assert _find(found, 101).facts.model == "/m/e"  # classified from its new argv


def test_young_processes_are_watched_for_the_young_window_only(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    s = scanner()
    s.scan_at(0)
    # Born after the first scan: watched for `young` (5 s) from when it was first seen.
    host.spawn(200, ["python3", "launch.py"])
    host.spawn(201, ["python3", "prepare.py"])
    assert s.scan_at(1) == []
    assert s.scan_at(2) == []
    assert _stats(s).reread == 2
    host.exec(200, ["demo", "serve", "/m/y"])
    assert _pids(s.scan_at(3)) == [200]
    # Once the window is over the process is settled: trusted without reads, so a late exec is
    # not seen (the cost model's bargain; exec wrappers are the exception).
    s.scan_at(7)
    assert _stats(s).reread == 0
    host.exec(201, ["demo", "serve", "/m/late"])
    assert _pids(s.scan_at(8)) == [200]
    assert _stats(s).reread == 0


def test_processes_present_at_the_first_scan_are_not_young(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["python3", "old.py"])
    s = scanner()
    s.scan_at(0)
    s.scan_at(1)
    assert _stats(s).reread == 0


def test_a_process_born_just_before_the_first_scan_is_watched_for_its_exec(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    # 200 started 2 s before the first scan (a watch started as an engine is launched), caught
    # between its fork and its exec with its parent's argv; 100 started 10 s before. 20000 was
    # born as early as 200, but its pid lies far from the cursor (100): its stat is not even
    # read, as a cold scan reads only the stat of pids handed out just before it.
    old = host.spawn(100, ["python3", "old.py"]).start_ticks / TICKS
    early = Stat(start_ticks=int((old + 8) * TICKS))
    host.create(200, ["python3", "-m", "launcher"], early)
    host.create(20000, ["python3", "-m", "elsewhere"], early)
    host.set_uptime(old + 10)
    s = scanner()
    assert s.scan_at(0) == []
    assert s.scan_at(1) == []
    assert _stats(s).reread == 1
    host.exec(200, ["demo", "serve", "/m/early"])
    host.exec(100, ["demo", "serve", "/m/old"])
    host.exec(20000, ["demo", "serve", "/m/far"])
    assert _pids(s.scan_at(2)) == [200]
    # Its window is `young` from the first scan, as for a process born after it.
    s.scan_at(7)
    assert _stats(s).reread == 0


def _engine_tree(host: FixtureHost) -> None:
    """An engine folding workers (``demo``, pid 100) and one that does not (``solo``, pid 200),
    each with children, sockets and an unrelated listener in the same network namespace."""
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
    os.symlink("/dev/null", host.proc / "100" / "fd" / "0")
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


def test_workers_are_folded_with_their_listen_ports(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    _engine_tree(host)
    found = scanner().scan_at(0)
    assert _pids(found) == [100, 200]
    demo = _find(found, 100)
    assert demo.descendants == [110, 111, 112]
    # 5003 is a connection, 5004 another process's listener, 5999 in no table
    assert demo.listen_ports == [8001, 9001]
    solo = _find(found, 200)
    assert solo.descendants == []  # solo does not fold workers
    assert solo.listen_ports == [8080]  # its child's socket is not its own


def test_without_listen_ports_no_socket_is_read(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    _engine_tree(host)
    found = scanner(listen_ports=False).scan_at(0)
    assert all(p.listen_ports == [] for p in found)
    assert _find(found, 100).descendants == [110, 111, 112]


def test_the_tree_is_reread_once_per_refresh_or_when_an_engine_appears(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    _engine_tree(host)
    s = scanner()
    s.scan_at(0)
    # A new worker and a new listener, within the refresh period (2 s): not read yet.
    host.spawn(113, ["demo::Worker_TP2"], ppid=100)
    host.set_children(100, 100, [110, 113])
    host.add_socket(113, 3, 5005)
    host.set_tcp(100, "tcp", [(5001, 8001, "0A"), (5005, 8002, "0A"), (5004, 7777, "0A")])
    demo = _find(s.scan_at(1), 100)
    assert (demo.descendants, demo.listen_ports) == ([110, 111, 112], [8001, 9001])
    # Past the refresh period (a quiet scan: nothing forked since).
    demo = _find(s.scan_at(3), 100)
    assert (demo.descendants, demo.listen_ports) == ([110, 111, 112, 113], [8001, 8002, 9001])
    # A worker that exits between refreshes is dropped at once, without reading the tree, in
    # quiet scans (its directory is gone) and in listing scans (it is no longer listed).
    host.kill(112)
    host.set_children(110, 110, [])
    assert _find(s.scan_at(4), 100).descendants == [110, 111, 113]
    host.kill(111)
    host.set_children(100, 105, [])
    host.spawn(300, ["sleep", "1"])
    assert _find(s.scan_at(4), 100).descendants == [110, 113]
    # A new engine (here a forked copy of the server) has every tree re-read at once.
    host.add_socket(200, 4, 6003)
    host.set_tcp(200, "tcp", [(6001, 8080, "0A"), (6003, 8090, "0A")])
    host.spawn(114, ["demo", "serve", "/m/a"], ppid=100)
    host.set_children(100, 100, [110, 113, 114])
    found = s.scan_at(4)
    assert _find(found, 100).descendants == [110, 113, 114]
    assert _find(found, 200).listen_ports == [8080, 8090]


def test_an_unchanged_engine_is_the_very_same_record_and_any_change_a_new_one(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    _engine_tree(host)
    s = scanner()
    first = s.scan_at(0)
    # A quiet scan, then a listing scan that re-reads both trees (past the refresh period) and
    # finds them as they were: the very same records.
    quiet = s.scan_at(1)
    host.spawn(300, ["sleep", "1"])
    listed = s.scan_at(3)
    for again in (quiet, listed):
        assert len(again) == len(first)
        assert all(a is b for a, b in zip(first, again, strict=True))
    # A worker exits: the server gets a new record, the other engine keeps its own, and the
    # record the caller still holds is left as it was.
    host.kill(112)
    host.set_children(110, 110, [])
    after = s.scan_at(4)
    assert _find(after, 100).descendants == [110, 111]
    assert _find(after, 100) is not first[0]
    assert after[1] is first[1]
    assert first[0].descendants == [110, 111, 112]


def test_an_engine_that_rewrites_its_argv_is_reported_anew_at_the_next_scan(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/old", "--port", "8001"])
    host.spawn(101, ["demo", "serve", "/m/retitled"])
    host.spawn(102, ["solo-server", "-m", "/m/same"])
    s = scanner()
    first = s.scan_at(0)
    assert _pids(first) == [100, 101, 102]
    # Rewritten in place (setproctitle), keeping the argv's length, the command name and where
    # argv lies: only the bytes say it. No fork, so the scan lists nothing.
    host.exec(100, ["demo", "serve", "/m/new", "--port", "8002"])
    host.exec(101, ["demo::Worker_TP0"])
    found = s.scan_at(1)
    assert _pids(found) == [100, 102]
    renamed = _find(found, 100)
    assert (renamed.facts.model, renamed.facts.port) == ("/m/new", 8002)
    assert renamed.argv == ["demo", "serve", "/m/new", "--port", "8002"]
    assert renamed is not first[0]
    assert renamed.start_time == first[0].start_time
    assert found[1] is first[2]
    assert _stats(s).reread == 2  # only the two rewritten argv
    # 100 is compared, not re-read; 101, no longer an engine, is watched for a while as a young
    # process is, in case it execs or rewrites its argv again.
    s.scan_at(2)
    assert _stats(s).reread == 1
    s.scan_at(7)
    assert _stats(s).reread == 0


def test_a_huge_argv_is_compared_at_both_ends_and_read_whole_only_when_they_differ(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    # 13,500 bytes, past both ends compared; 905 arguments, within what a scan keeps.
    filler = ["--flag-padding"] * 900

    def argv(port: str) -> list[str]:
        return ["demo", "serve", "/m/big", *filler, "--port", port]

    stat = host.spawn(100, argv("8001"))
    s = scanner()
    assert len(s.scan_at(0)[0].argv) > 900
    s.scan_at(1)
    assert _stats(s).reread == 0
    # The last bytes change.
    host.exec(100, argv("8002"))
    assert s.scan_at(2)[0].facts.port == 8002
    assert _stats(s).reread == 1
    # It grows at the end, its old last bytes staying where they were.
    longer = [*argv("8002"), "--more"]
    host.exec(100, longer)
    assert s.scan_at(3)[0].argv == longer
    # A change in the middle that keeps the length, the command name and argv's place goes
    # unseen: the price of a scan whose cost does not grow with argv ...
    middle = list(longer)
    middle[450] = "--flag-paddinx"
    host.exec(100, middle)
    assert s.scan_at(4)[0].argv == longer
    assert _stats(s).reread == 0
    # ... until the command name changes, or argv moves.
    host.set_stat(100, replace(stat, comm="retitled"))
    record = s.scan_at(5)[0]
    assert record.argv == middle
    host.set_stat(100, replace(stat, comm="retitled", args=(0x5000, 0x9000)))
    assert s.scan_at(6)[0] is record  # read again, found the same
    assert _stats(s).reread == 1


def test_an_argv_beyond_the_cap_is_kept_only_to_it_and_marked_cut(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    huge = ["demo", "serve", "/m/first", *["x"] * 3000, "--port", "8009"]
    host.spawn(100, huge)
    found = scanner().scan_at(0)
    assert found[0].argv == [*huge[:MAX_ARGV_ARGS], ARGV_CUT]
    # The port sits beyond the cap: not examined, so not known.
    assert found[0].facts.port is None


def test_zombie_workers_are_left_out_of_the_tree(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    _engine_tree(host)
    # 111 exited and its parent has not reaped it: still in the children list.
    zombie = Stat(state="Z", ppid=100)
    host.set_stat(111, zombie)
    s = scanner()
    assert s.scan_at(0)[0].descendants == [110, 112]
    # One that dies between refreshes is left out at the next one.
    host.set_stat(112, replace(zombie, ppid=110))
    assert s.scan_at(3)[0].descendants == [110]


def test_zombie_engines_are_not_reported(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    zombie = host.spawn(100, ["demo", "serve", "/m/z"])
    host.set_stat(100, replace(zombie, state="Z"))
    live = host.spawn(101, ["solo-server", "-m", "/m/l"])
    s = scanner()
    assert _pids(s.scan_at(0)) == [101]
    # it dies: a zombie until its parent reaps it
    host.set_stat(101, replace(live, state="Z"))
    assert s.scan_at(1) == []
    host.set_stat(101, replace(live, state="X"))
    host.set_cursor(host.last_pid, host.forks + 1)
    assert s.scan_at(2) == []
    assert _stats(s).known == 3


def test_a_pid_handed_to_another_process_is_another_process(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    stat = host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(101, ["solo-server", "-m", "/m/b"])
    s = scanner()
    before = _find(s.scan_at(0), 100)
    host.replace(100, ["demo", "serve", "/m/new"], later(stat, 500))
    host.replace(101, ["sleep", "9"], later(stat, 501))
    host.spawn(300, ["sleep", "1"])
    found = s.scan_at(1)
    assert _pids(found) == [100]  # the process that took 101's pid is no engine
    after = _find(found, 100)
    assert after.facts.model == "/m/new"
    assert after.start_time == pytest.approx(before.start_time + 500 / TICKS)


def test_a_pid_whose_proc_inode_changed_is_classified_again(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["sleep", "1000"])
    engine = host.spawn(101, ["demo", "serve", "/m/old"])
    host.spawn(102, ["sleep", "1000"])
    s = scanner()
    assert _pids(s.scan_at(0)) == [101]
    # Both pids handed to new processes while the cursor says nothing (it was set back by hand,
    # as checkpoint/restore tools do): only the new /proc/PID inode tells. 101 keeps its start
    # time, so only its argv shows it is another process.
    host.replace(100, ["demo", "serve", "/m/new"], Stat(start_ticks=1))
    host.replace(101, ["sleep", "5"], engine)
    # 102 exec'd in place: same inode, outside the cursor's window, so it stays trusted.
    host.exec(102, ["demo", "serve", "/m/exec"])
    host.set_cursor(host.last_pid, host.forks + 2)
    found = s.scan_at(1)
    assert _pids(found) == [100]
    assert _find(found, 100).facts.model == "/m/new"
    assert _stats(s).reread == 2


def test_pids_in_the_cursor_window_are_classified_again(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["sleep", "1000"])
    host.spawn(120, ["demo", "serve", "/m/kept"])
    host.spawn(200, ["sleep", "1000"])
    host.set_cursor(50, host.forks)
    s = scanner()
    assert _pids(s.scan_at(0)) == [120]
    # The cursor moved over 100 and 120 (51..=150) but not 200: 100 and 200 got new programs
    # under the same /proc inode (a reuse whose inode procfs happened to recycle).
    host.exec(100, ["demo", "serve", "/m/reused"])
    host.exec(200, ["demo", "serve", "/m/outside"])
    host.set_cursor(150, host.forks + 100)
    assert _pids(s.scan_at(1)) == [100, 120]
    stats = _stats(s)
    assert not stats.full_recheck
    # 100 classified again; 120's argv compared (the same: kept)
    assert stats.reread == 2


def test_the_cursor_window_wraps_around_pid_max(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    for pid in (40, 100, 32710):
        host.spawn(pid, ["sleep", "1000"])
    host.set_cursor(32700, host.forks)
    s = scanner()
    s.scan_at(0)
    # (32700, 32768] then [1, 60]: 40 and 32710 may be reused, 100 may not.
    for pid in (40, 100, 32710):
        host.exec(pid, ["demo", "serve", "/m/exec"])
    host.set_cursor(60, host.forks + 10)
    assert _pids(s.scan_at(1)) == [40, 32710]


def test_more_forks_than_pids_recheck_everything(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["sleep", "1000"])
    s = scanner()
    s.scan_at(0)
    assert not _stats(s).full_recheck  # the first scan reads everything anyway
    host.exec(100, ["demo", "serve", "/m/wrapped"])
    host.set_cursor(host.last_pid, host.forks + 32768)
    assert _pids(s.scan_at(1)) == [100]
    assert _stats(s).full_recheck


def test_missing_kernel_counters_make_every_listing_a_full_recheck(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["sleep", "1000"])
    (host.proc / "sys" / "kernel" / "ns_last_pid").unlink()
    (host.proc / "sys" / "kernel" / "pid_max").write_text("junk")
    s = scanner()
    assert s.scan_at(0) == []
    # Without a cursor nothing bounds pid reuse: every known process is read again.
    host.exec(100, ["demo", "serve", "/m/a"])
    assert _pids(s.scan_at(1)) == [100]
    stats = _stats(s)
    assert stats.reread == 2
    assert stats.full_recheck


def test_numbers_in_the_kernel_files_are_read_as_the_kernel_writes_them(
    make: tuple[FixtureHost, Make],
) -> None:
    """Numbers are ASCII digits (a sign only where the field can be negative), fields are split
    at spaces and tabs (not at a vertical tab), and a nonsense ``pid_max`` is taken as given:
    what ``int()`` and ``bytes.split()`` would also accept is no number (not in rust/scan/tests.rs:
    the Python twin's parsers differed on these)."""
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/separator"])
    host.spawn(101, ["demo", "serve", "/m/negative"])
    host.spawn(102, ["demo", "serve", "/m/vertical-tab"])
    host.spawn(103, ["solo-server", "-m", "/m/fine"])
    stat = host.proc / "100" / "stat"
    stat.write_bytes(stat.read_bytes().replace(b") S 1 ", b") S 1_0 "))
    host.set_stat(101, Stat(start_ticks=-5))
    stat = host.proc / "102" / "stat"
    stat.write_bytes(stat.read_bytes().replace(b" 20 0 1 0 ", b" 20 0 1 0\x0b"))  # start ticks
    # the fork counter after a tab, as a kernel may align it
    (host.proc / "stat").write_text(stat_text(host.forks).replace("processes ", "processes\t"))
    s = scanner()
    found = s.scan_at(0)
    assert _pids(found) == [102, 103]
    assert _find(found, 102).start_time == pytest.approx(_start_time(Stat(start_ticks=1000000)), abs=1e-6)
    assert _stats(s).vanished == 2  # 100 and 101: stat unreadable, as if they had exited
    # The counter was read: nothing forked, so nothing is listed.
    s.scan_at(1)
    assert (_stats(s).new, _stats(s).full_recheck) == (0, False)
    # A pid_max of 0 bounds nothing: every listing re-checks everything.
    (host.proc / "sys" / "kernel" / "pid_max").write_text("0\n")
    s = scanner()
    s.scan_at(0)
    host.spawn(300, ["sleep", "1"])
    s.scan_at(1)
    assert _stats(s).full_recheck


def test_same_pid_with_a_new_start_time_is_another_process(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(7, ["supervisor", "--all"])
    old = host.spawn(100, ["demo", "serve", "/m/a"])
    s = scanner()
    assert s.scan_at(0)[0].parent_argv == ["/sbin/init"]
    # Same argv, same inode, no cursor evidence; only the start time differs.
    new = replace(old, start_ticks=old.start_ticks + 50, ppid=7)
    host.set_stat(100, new)
    host.set_cursor(host.last_pid, host.forks + 1)
    after = s.scan_at(1)
    assert _pids(after) == [100]
    assert after[0].start_time == pytest.approx(_start_time(new), abs=1e-6)
    assert (after[0].ppid, after[0].parent_argv) == (7, ["supervisor", "--all"])
    assert _stats(s).new == 1


def test_an_engine_that_changes_parent_has_its_parent_argv_read_again(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(7, ["supervisor"])
    stat = host.spawn(100, ["demo", "serve", "/m/a"], ppid=7)
    s = scanner()
    assert s.scan_at(0)[0].parent_argv == ["supervisor"]
    # The supervisor exited: the engine is re-parented to init.
    host.kill(7)
    host.set_stat(100, replace(stat, ppid=1))
    found = s.scan_at(1)
    assert (found[0].ppid, found[0].parent_argv) == (1, ["/sbin/init"])
    assert _stats(s).reread == 0  # the argv was not read again


def test_malformed_and_missing_files_never_raise(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    proc = host.proc
    host.spawn(1, ["/sbin/init"])
    # cmdline is a directory
    host.spawn(100, ["sleep", "1"])
    (proc / "100" / "cmdline").unlink()
    (proc / "100" / "cmdline").mkdir()
    # an engine whose stat is junk, and one without stat or exe
    host.spawn(101, ["demo", "serve", "/m/junk-stat"])
    (proc / "101" / "stat").write_bytes(b"101 (demo\xff) \x00\x01")
    host.spawn(102, ["demo", "serve", "/m/no-stat"])
    (proc / "102" / "stat").unlink()
    # an engine with junk everywhere else
    host.spawn(103, ["demo", "serve", "/m/junk"])
    (proc / "103" / "exe").unlink()
    # (a vertical tab is no separator: the kernel writes spaces)
    (proc / "103" / "task" / "103" / "children").write_bytes(b"\xff\xfe 12x -5 \0 99999999999 104\x0b104")
    (proc / "103" / "fd" / "7").write_bytes(b"a regular file")
    os.symlink("socket:[", proc / "103" / "fd" / "8")
    os.symlink("socket:[5001]", proc / "103" / "fd" / "9")
    os.symlink("socket:[\u0665\u0660\u0660\u0662]", proc / "103" / "fd" / "10")  # 5002, in Arabic-Indic
    (proc / "103" / "net" / "tcp").write_bytes(
        b"\xff\n 0: x:y z 0A\n 1: 0100007F:1F90 0 0A 0 0 0 0 0 5001\n 2: 0:FFFFF 0 0A 0 0 0 0 0 5001\n\n"
        # numbers a kernel never writes: a 0x prefix, a minus sign, digit separators
        b" 3: 0100007F:0x1F91 0 0A 0 0 0 0 0 5001\n 4: 0100007F:-1 0 0A 0 0 0 0 0 5001\n"
        b" 5: 0100007F:1F92 0 0A 0 0 0 0 0 5_001\n"
        # an address that is not 8 or 32 hex digits
        b" 6: :1F94 0 0A 0 0 0 0 0 5001\n 7: 0x00007F:1F95 0 0A 0 0 0 0 0 5001\n"
        b" 8: 0100007F:1F93 0 0A 0 0 0 0 0 5002\n"
    )
    (proc / "103" / "net" / "tcp6").mkdir()
    # an engine without task/, fd/ or net/
    host.spawn(104, ["demo", "serve", "/m/bare"])
    for directory in ("task", "fd", "net"):
        shutil.rmtree(proc / "104" / directory)
    # entries that are not process directories
    (proc / "555").write_bytes(b"not a directory")
    (proc / "123abc").mkdir()
    os.symlink("1", proc / "self")
    os.symlink("/nonexistent", proc / "556")
    # names of digits that are no pid: past the largest, or digits of another script
    host.create(2**31, ["demo", "serve", "/m/past-pid-max"], Stat())
    host.create(400, ["demo", "serve", "/m/arabic-indic"], Stat())
    (proc / "400").rename(proc / "\u0664\u0660\u0660")
    s = scanner()
    found = s.scan_at(0)
    assert _pids(found) == [103, 104]
    junk = _find(found, 103)
    assert (junk.exe, junk.descendants) == (None, [])
    assert junk.listen_ports == [0x1F90]  # the one well-formed row
    # 100's, 101's and 102's reads failed as if they had exited, and so did 555's and 556's
    assert _stats(s).vanished == 5
    # a later listing tries them again
    host.spawn(300, ["sleep", "1"])
    assert _pids(s.scan_at(1)) == [103, 104]


def test_a_root_that_is_not_utf8_is_honoured(make: tuple[FixtureHost, Make], tmp_path: Path) -> None:
    _host, scanner = make
    host = FixtureHost(tmp_path / os.fsdecode(b"host\xff"))
    host.spawn(100, ["demo", "serve", "/m/a"])
    found = scanner(root=host.root).scan()
    assert _pids(found) == [100]
    assert found[0].exe == "/usr/bin/demo"


def test_a_missing_root_scans_nothing(make: tuple[FixtureHost, Make], tmp_path: Path) -> None:
    _host, scanner = make
    s = scanner(root=tmp_path / "nowhere")
    assert s.scan() == []
    assert s.scan() == []
    assert _stats(s).known == 0


def test_unreadable_processes_are_counted_and_never_reported(make: tuple[FixtureHost, Make]) -> None:
    host, scanner = make
    proc = host.proc
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/hidden"])
    make_unreadable(proc / "100" / "cmdline")
    host.spawn(101, ["demo", "serve", "/m/hidden-stat"])
    make_unreadable(proc / "101" / "stat")
    host.spawn(102, ["demo", "serve", "/m/visible"])
    host.add_socket(102, 3, 7001)
    host.set_tcp(102, "tcp", [(7001, 8001, "0A")])
    for path in ("task/102/children", "net/tcp"):
        make_unreadable(proc / "102" / path)
    host.spawn(103, ["sh", "-c", "sleep 1; exec demo serve /m/w"])
    s = scanner()

    def scans() -> None:
        found = s.scan_at(0)
        assert _pids(found) == [102]
        assert (found[0].descendants, found[0].listen_ports) == ([], [])
        stats = _stats(s)
        # 101's stat is unreadable: it cannot be confirmed as a live engine, so it is left for
        # the next listing, like a process that exited while being read
        assert (stats.unreadable, stats.vanished) == (1, 1)
        # 102 is reported without the ports its unreadable socket table would have shown
        assert stats.restricted == 1
        # A watched wrapper whose argv turns unreadable, in a scan that lists nothing (no fork):
        # 100 is still counted with it.
        make_unreadable(proc / "103" / "cmdline")
        assert _pids(s.scan_at(1)) == [102]
        assert (_stats(s).unreadable, _stats(s).restricted) == (2, 1)
        # An unreadable process is not read again (nothing would change) but is counted.
        host.spawn(300, ["sleep", "1"])
        assert _pids(s.scan_at(2)) == [102]
        assert _stats(s).unreadable == 2
        # The engine's pid may have been reused (the cursor wrapped over it), and its argv can
        # no longer be read: unreadable, not gone. The other unreadable pids are tried again.
        make_unreadable(proc / "102" / "cmdline")
        host.set_cursor(110, host.forks + 1)
        assert s.scan_at(3) == []
        stats = _stats(s)
        assert (stats.unreadable, stats.vanished) == (3, 1)

    without_read_override(scans)


def test_engines_whose_sockets_cannot_be_read_are_counted_as_restricted(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner = make
    _engine_tree(host)
    make_unreadable(host.proc / "200" / "fd")
    s = scanner()
    found = without_read_override(lambda: s.scan_at(0))
    assert _pids(found) == [100, 200]
    assert _find(found, 200).listen_ports == []
    assert _find(found, 100).listen_ports == [8001, 9001]
    assert (_stats(s).restricted, _stats(s).unreadable) == (1, 0)
    # Without reading sockets nothing is missing.
    s = scanner(listen_ports=False)
    without_read_override(lambda: s.scan_at(0))
    assert _stats(s).restricted == 0


def _with_stat_feed(
    host: FixtureHost, texts: Sequence[str], before: Callable[[int], None], run: Callable[[], R]
) -> tuple[R, int]:
    """Answers the scanner's reads of ``stat`` from a helper thread with ``texts``, one per read,
    so two reads within one scan can see different fork counts (``with_stat_feed`` in
    rust/scan/tests.rs). Each read gets its own FIFO: the next one is renamed into place before
    the current one is closed, so no read can see another's text. ``before(i)`` runs once read
    ``i`` has opened the file. Afterwards ``stat`` is a regular file holding the last text.
    Returns ``run()`` and how many reads were answered; a scanner that reads ``stat`` fewer times
    than expected makes the count short instead of hanging."""
    stat, following = host.proc / "stat", host.proc / "stat.next"

    def settle() -> None:
        following.write_text(texts[-1])
        following.rename(stat)

    os.mkfifo(following, 0o600)
    following.rename(stat)
    stop = threading.Event()
    answered: list[int] = []

    def feed() -> None:
        for i, text in enumerate(texts):
            # Blocks until the scanner (or the release below) opens the FIFO for reading.
            with stat.open("w") as fifo:
                if stop.is_set():
                    settle()
                    answered.append(i)
                    return
                before(i)
                fifo.write(text)
                fifo.flush()
                if i + 1 < len(texts):
                    os.mkfifo(following, 0o600)
                    following.rename(stat)
                else:
                    settle()
        answered.append(len(texts))

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        result = run()
    finally:
        stop.set()
        # Releases a writer still waiting for a reader; a regular `stat` is opened harmlessly.
        os.close(os.open(stat, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
    return result, answered[0]


def test_a_process_forked_during_the_listing_is_found_by_the_next_scan(
    make: tuple[FixtureHost, Make],
) -> None:
    """Regression: the check that skips the listing compared the fork count with the one read
    *after* the previous listing, so a process forked while /proc was being listed (counted, but
    not listed) stayed unseen until some other process forked."""
    host, scanner = make
    host.spawn(1, ["/sbin/init"])
    host.spawn(100, ["demo", "serve", "/m/a"])
    s = scanner()
    assert _pids(s.scan_at(0)) == [100]
    # One fork before the next scan starts, one while it lists /proc (pid 200).
    forks = host.forks
    host.set_cursor(200, forks + 2)
    texts = [stat_text(forks + 1), stat_text(forks + 2)]

    def fork_during_listing(read: int) -> None:
        if read == 1:
            host.create(200, ["solo-server", "-m", "/m/late"], Stat(start_ticks=90_000))

    found, reads = _with_stat_feed(host, texts, fork_during_listing, lambda: s.scan_at(1))
    assert reads == 2  # the scan reads stat before and after listing
    assert _pids(found) == [100]  # 200 appeared after the listing
    # Nothing forked since the listing ended, but 200 was forked after it began.
    assert _pids(s.scan_at(2)) == [100, 200]


@pytest.mark.parametrize("elapsed", [-1.0, float("nan"), float("inf")])
def test_scan_at_refuses_a_time_that_is_no_time(make: tuple[FixtureHost, Make], elapsed: float) -> None:
    _host, scanner = make
    with pytest.raises(ValueError, match="elapsed: invalid"):
        scanner().scan_at(elapsed)


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
    assert [(p.pid, p.facts.engine_index) for p in solo] == [(101, 0)]
    assert _pids(scanner().scan()) == [100, 101]


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
    now = 1000.0  # seconds since the fixture host's boot
    host.set_uptime(now)
    host.spawn(1, ["/sbin/init"])
    host.create(200, ["python3", "-m", "launcher"], Stat(start_ticks=int((now - 1) * ticks)))
    for n in range(settled):
        host.spawn(201 + n, ["sleep", "1000"])
    s = scanner()
    assert s.scan_at(0) == []
    host.exec(200, ["demo", "serve", "/m/early"])
    assert _pids(s.scan_at(1)) == ([200] if settled < _pyscanner.SETTLED_RUN else [])


# The event-driven scenarios: process events are what a fixture host cannot hold, so they are
# given by the test (``apply_events``), as the kernel's proc connector would give them.


def _event_scanner(make: Make) -> Any:
    """A scanner in event-driven mode after its first (listing) scan."""
    scanner = make()
    scanner.set_event_driven()
    scanner.scan()
    return scanner


def test_events_find_an_engine_exec_by_a_forked_shell_without_listing(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(10, ["bash", "-c", "run"])
    scanner = _event_scanner(scanner_of)
    # A fork: the child still runs its parent's program.
    host.spawn(11, ["bash", "-c", "run"], ppid=10)
    # Another process appears that no event names: event-driven ticks do not list ROOT/proc.
    host.spawn(50, ["demo", "serve", "/m/unseen"])
    assert not scanner.apply_events([(11, "forked")])
    assert scanner.scan_after_events(True) == []
    host.exec(11, ["demo", "serve", "/m/a", "--port", "8001"])
    assert scanner.apply_events([(11, "exec")])
    found = scanner.scan_after_events(True)
    assert _pids(found) == [11]
    assert _find(found, 11).facts.port == 8001
    assert _stats(scanner).new == 0, "11 was known since its fork"
    # A listing scan (the safety net) finds what no event named.
    assert _pids(scanner.scan()) == [11, 50]


def test_an_exit_event_forgets_the_process_and_says_an_engine_is_gone(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(20, ["demo", "serve", "/m/a"])
    host.spawn(21, ["sleep", "100"])
    scanner = _event_scanner(scanner_of)
    known = _stats(scanner).known
    host.kill(21)
    assert not scanner.apply_events([(21, "exited")])
    assert _stats(scanner).known == known - 1
    host.kill(20)
    assert scanner.apply_events([(20, "exited")])
    assert scanner.scan_after_events(True) == []
    assert _stats(scanner).vanished == 2


def test_an_exit_event_of_a_folded_worker_says_the_engine_changed(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(20, ["demo", "serve", "/m/a"])
    host.spawn(22, ["demo::EngineCore"], ppid=20)
    host.set_children(20, 20, [22])
    host.spawn(23, ["sleep", "100"])
    scanner = _event_scanner(scanner_of)
    assert _find(scanner.scan_after_events(True), 20).descendants == [22]
    host.kill(23)
    assert not scanner.apply_events([(23, "exited")])
    host.kill(22)
    assert scanner.apply_events([(22, "exited")])


def test_events_keep_their_order_an_exit_then_a_reused_pid(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(30, ["demo", "serve", "/m/a"])
    scanner = _event_scanner(scanner_of)
    before = scanner.scan_after_events(True)
    host.replace(30, ["demo", "serve", "/m/b"], Stat(start_ticks=9_999))
    assert scanner.apply_events([(30, "exited"), (30, "forked")])
    after = scanner.scan_after_events(True)
    assert _find(after, 30).facts.model == "/m/b"
    assert _find(after, 30) is not _find(before, 30)


def test_a_comm_change_rereads_the_process_and_a_retitled_engine_changes(
    make: tuple[FixtureHost, Make],
) -> None:
    host, scanner_of = make
    host.spawn(40, ["python3", "worker.py"])
    scanner = _event_scanner(scanner_of)
    # setproctitle: the argv rewritten in place, the comm renamed, the stat left as it was
    host.exec(40, ["solo-server", "-m", "/m/c.gguf"])
    assert scanner.apply_events([(40, "comm")])
    assert _pids(scanner.scan_after_events(True)) == [40]


def test_in_event_mode_wrappers_and_young_processes_are_not_watched(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    scanner = _event_scanner(scanner_of)
    host.spawn(60, ["sh", "-c", "sleep 1; demo serve /m/a"])
    host.spawn(61, ["sleep", "1"])
    scanner.apply_events([(60, "forked"), (61, "forked")])
    scanner.scan_after_events(True)
    # The next tick reads neither (an exec would be reported).
    scanner.scan_after_events(True)
    assert (_stats(scanner).reread, _stats(scanner).new) == (0, 0)


def test_events_for_a_process_already_gone_cost_nothing_and_report_nothing(
    make: tuple[FixtureHost, Make],
) -> None:
    _host, scanner_of = make
    scanner = _event_scanner(scanner_of)
    assert not scanner.apply_events([(70, "forked"), (70, "exec")])
    assert scanner.scan_after_events(True) == []
    assert _stats(scanner).known == 0


def test_back_to_polling_starts_cold_and_watches_wrappers_again(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(80, ["sh", "-c", "sleep 1; demo serve /m/a"])
    scanner = _event_scanner(scanner_of)
    scanner.scan_after_events(True)
    assert _stats(scanner).reread == 0, "not watched while events tell of execs"
    scanner.set_polling()
    scanner.scan()
    assert _stats(scanner).new == 1, "a cold scan"
    # polling again: the wrapper is re-read on every scan until it execs
    host.exec(80, ["demo", "serve", "/m/a"])
    assert _pids(scanner.scan()) == [80]


def test_an_early_wake_reports_the_engines_without_rechecking_them(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(90, ["demo", "serve", "/m/a"])
    scanner = _event_scanner(scanner_of)
    # rewritten in place: only a recheck reads it
    host.exec(90, ["demo", "serve", "/m/b"])
    assert _find(scanner.scan_after_events(False), 90).facts.model == "/m/a"
    assert _find(scanner.scan_after_events(True), 90).facts.model == "/m/b"


def test_in_event_mode_a_new_engine_refreshes_only_the_trees_above_it(make: tuple[FixtureHost, Make]) -> None:
    host, scanner_of = make
    host.spawn(100, ["demo", "serve", "/m/a"])
    host.spawn(200, ["demo", "serve", "/m/b"])
    scanner = _event_scanner(scanner_of)
    before = scanner.scan_after_events(True)
    # 100 forks a worker that keeps its argv; 200 gets a child nothing reports yet
    host.spawn(101, ["demo", "serve", "/m/a"], ppid=100)
    host.set_children(100, 100, [101])
    host.spawn(201, ["sleep", "1"], ppid=200)
    host.set_children(200, 200, [201])
    assert scanner.apply_events([(101, "forked"), (201, "forked")])
    after = scanner.scan_after_events(False)
    assert _find(after, 100).descendants == [101], "folded at once"
    assert _find(after, 200) is _find(before, 200), "not re-read"
    assert _find(after, 200).descendants == []


def test_an_unknown_change_is_refused_by_name(make: tuple[FixtureHost, Make]) -> None:
    _host, scanner_of = make
    scanner = _event_scanner(scanner_of)
    with pytest.raises(ValueError, match="unknown change 'spawned' of pid 5"):
        scanner.apply_events([(5, "spawned")])
