"""The scanner against hostile processes: huge argv, argv rewritten in place, zombie workers, and
scans that may not read everything (another user's processes, hidepid). Real processes with
exact argv (tests/helpers/procs.py, tests/helpers/idle.c), on the backend chosen by ENGINESPEC_BACKEND."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from enginespec import EngineProcess, Scanner
from enginespec._host.backend import ScannerType
from enginespec._host.fallback.scan import _reuse
from enginespec._host.shapes import ARGV_CUT, MAX_ARGV_ARGS, MAX_ARGV_BYTES, RawProcess
from enginespec.definition.signature import signatures_json
from enginespec.engines import all_signatures
from enginespec.scanning.scanner import EXEC_WRAPPERS, TREE_REFRESH_SECONDS, YOUNG_SECONDS
from helpers.procs import Procs, children_of, rewrites, send_when_handled, wait_for

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a scan as another user")


def _mine(found: list[EngineProcess], procs: Procs) -> dict[int, EngineProcess]:
    pids = {p.pid for p in procs.started}
    return {p.pid: p for p in found if p.pid in pids}


def _raw_scanner(listen_ports: bool = False) -> Any:
    return ScannerType(
        signatures_json(all_signatures()),
        list(EXEC_WRAPPERS),
        YOUNG_SECONDS,
        TREE_REFRESH_SECONDS,
        listen_ports,
    )


def _raw(scanner: Any, pid: int) -> RawProcess:
    found: dict[int, RawProcess] = {r[0]: r for r in scanner.scan()}
    return found[pid]


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_an_unchanged_engine_with_a_huge_argv_comes_back_as_the_same_objects(procs: Procs) -> None:
    argv = ["vllm", "serve", *(["--enforce-eager"] * 50_000), *(["x"] * 49_998), "--port", "8123"]
    big = procs.start(argv)
    raw = _raw_scanner()
    first_raw = _raw(raw, big.pid)
    # Only the start is examined and kept (the cost of one process is capped), marked as cut.
    assert first_raw[3] == [*argv[:MAX_ARGV_ARGS], ARGV_CUT]
    assert _raw(raw, big.pid) is first_raw
    scanner = Scanner(listen_ports=False)
    first = _mine(scanner.scan(), procs)[big.pid]
    # The model and port sit beyond the cap: not examined, so unknown (never guessed).
    assert (first.argv, first.model, first.port) == (tuple(argv[:MAX_ARGV_ARGS]), None, None)
    assert first.problems[0] == (
        f"argv goes on beyond {MAX_ARGV_ARGS} arguments or {MAX_ARGV_BYTES} bytes: only its first"
        f" {MAX_ARGV_ARGS} arguments are examined and shown"
    )
    assert _mine(scanner.scan(), procs)[big.pid] is first
    # A new engine has every process tree read again at once; this one's is unchanged, so is
    # everything reported for it.
    other = procs.start(["llama-server", "-m", "/m/other.gguf"])
    assert _raw(raw, big.pid) is first_raw
    found = _mine(scanner.scan(), procs)
    assert found[big.pid] is first
    assert found[other.pid].model == "/m/other.gguf"


def test_an_argv_rewritten_in_place_is_seen_at_the_next_scan(procs: Procs) -> None:
    # Same length, same command name, same place in memory: only the bytes say it changed.
    old = ["vllm", "serve", "/m/old-a", "--port", "8001"]
    new = ["vllm", "serve", "/m/new-a", "--port", "8002"]
    retitled = procs.start(old, HELPER_REWRITE=rewrites(new, ["postgres: idle"]))
    # Only the last bytes change, far beyond the first ones.
    filler = ["--enforce-eager"] * 600  # 9,600 bytes: past both peeks, within the argv cap
    big_argv = ["vllm", "serve", "/m/b", *filler, "--port", "8003"]
    big = procs.start(big_argv, HELPER_REWRITE=rewrites([*big_argv[:-1], "8004"]))
    scanner = Scanner(listen_ports=False)
    found = _mine(scanner.scan(), procs)
    assert (found[retitled.pid].model, found[retitled.pid].port) == ("/m/old-a", 8001)
    assert found[big.pid].port == 8003
    before = found[retitled.pid]

    for proc in (retitled, big):
        send_when_handled(proc, signal.SIGUSR1)
    wait_for(lambda: _cmdline(retitled.pid).startswith(b"vllm\0serve\0/m/new-a\0"))
    wait_for(lambda: _cmdline(big.pid).endswith(b"--port\x008004\0"))
    found = _mine(scanner.scan(), procs)
    renamed = found[retitled.pid]
    assert (renamed.model, renamed.port, renamed.argv) == ("/m/new-a", 8002, tuple(new))
    assert renamed.start_time == before.start_time
    assert (found[big.pid].port, found[big.pid].argv[-1]) == (8004, "8004")

    # It turns into something that is no engine: dropped at the next scan.
    send_when_handled(retitled, signal.SIGUSR1)
    wait_for(lambda: _cmdline(retitled.pid).startswith(b"postgres: idle\0"))
    found = _mine(scanner.scan(), procs)
    assert retitled.pid not in found
    assert found[big.pid].port == 8004


def _is_zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")


def test_zombie_workers_are_not_worker_pids(procs: Procs) -> None:
    server = procs.start(
        ["python3", "/venv/bin/vllm", "serve", "/m/zombies", "--port", "8313"],
        HELPER_CHILD_TITLES="VLLM::EngineCore,VLLM::Worker_TP0",
    )
    wait_for(lambda: len(children_of(server.pid)) == 2)
    children = children_of(server.pid)
    wait_for(lambda: any(children_of(c) for c in children))
    workers = children | set().union(*(children_of(c) for c in children))
    scanner = Scanner(listen_ports=False)
    assert set(_mine(scanner.scan(), procs)[server.pid].worker_pids) == workers

    # A worker exits; the server (this helper) never reaps it, so it stays a zombie, still listed
    # among its parent's children by the kernel.
    worker = next(c for c in children if not children_of(c))
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: _is_zombie(worker))
    assert worker in children_of(server.pid)
    alive = workers - {worker}
    assert set(_mine(Scanner(listen_ports=False).scan(), procs)[server.pid].worker_pids) == alive
    # The polling scanner leaves it out at its next tree read (at once when an engine appears).
    procs.start(["llama-server", "-m", "/m/any.gguf"])
    assert set(_mine(scanner.scan(), procs)[server.pid].worker_pids) == alive


#: Started as root, becomes nobody for good, then scans twice and prints, for the engine pid
#: given: what the facade reported and its stats, and the raw records and stats of both backends.
#: The interpreter may live where nobody cannot read (under /root), so everything is imported
#: first, a scan included (for what it imports lazily), and the user is changed in-process.
SCAN_AS_NOBODY = textwrap.dedent(
    """
    import ctypes, json, os, sys
    import enginespec
    from enginespec._host.fallback import scan as _pyscanner
    from enginespec.engines import all_signatures
    from enginespec.scanning.scanner import EXEC_WRAPPERS, TREE_REFRESH_SECONDS, YOUNG_SECONDS
    from enginespec.definition.signature import signatures_json

    enginespec.Scanner().scan()
    try:
        from enginespec import _native
    except ImportError:
        _native = None
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    # Changing credentials made this process non-dumpable, which hands its own /proc files to
    # root: undo it, to be what a process started by nobody is (PR_SET_DUMPABLE).
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)

    pid = int(sys.argv[1])
    scanner = enginespec.Scanner()
    scans = []
    for _ in range(2):
        found = {p.pid: [p.exe, list(p.listen_ports)] for p in scanner.scan()}
        scans.append([found.get(pid), scanner.stats.model_dump()])
    args = (signatures_json(all_signatures()), list(EXEC_WRAPPERS), YOUNG_SECONDS, TREE_REFRESH_SECONDS, True)
    backends = {"python": _pyscanner.ProcessScanner(*args)}
    if _native is not None:
        backends["native"] = _native.ProcessScanner(*args)
    raw = {}
    for name, backend in backends.items():
        record = next((r for r in backend.scan() if r[0] == pid), None)
        raw[name] = [record, backend.stats()]
    print(json.dumps({"backend": enginespec.BACKEND, "scans": scans, "raw": raw}))
    """
)


def _scan_as_nobody(pid: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", SCAN_AS_NOBODY, str(pid)],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@as_root
def test_a_scan_as_another_user_sees_roots_engines_and_counts_what_it_cannot_read(procs: Procs) -> None:
    engine = procs.start(["llama-server", "-m", "/m/root.gguf", "--port", "8125"], HELPER_LISTEN="1")
    assert engine.stdout is not None
    port = int(engine.stdout.readline())
    mine = _mine(Scanner().scan(), procs)[engine.pid]
    assert mine.exe is not None
    assert mine.listen_ports == (port,)

    result = _scan_as_nobody(engine.pid)
    # Its argv is world-readable, its executable and fds are not.
    for reported, stats in result["scans"]:
        assert reported == [None, []]
        assert stats["restricted"] >= 1
    records = {name: record for name, (record, _stats) in result["raw"].items()}
    for record in records.values():
        assert record is not None
        assert (record[4][1], record[5], record[8]) == ("/m/root.gguf", None, [])
    assert len(set(map(json.dumps, records.values()))) == 1, "both backends report the same"
    for _record, stats in result["raw"].values():
        assert stats[4] >= 1  # restricted


SCAN_UNDER_HIDEPID = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path

    helper, scan = sys.argv[1], sys.argv[2]
    # This namespace's own /proc: no process's files are readable but one's own.
    subprocess.run(["mount", "-o", "remount,hidepid=1", "/proc"], check=True)
    engine = subprocess.Popen(["llama-server", "-m", "/m/hidden.gguf"], executable=helper)
    while Path(f"/proc/{engine.pid}/cmdline").read_bytes() == b"":
        time.sleep(0.01)
    out = subprocess.run(
        [sys.executable, "-c", scan, str(engine.pid)], cwd="/", capture_output=True, text=True, timeout=120
    )
    engine.kill()
    sys.stdout.write(out.stdout)
    sys.stderr.write(out.stderr)
    sys.exit(out.returncode)
    """
)


@as_root
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare")
def test_processes_whose_argv_cannot_be_read_are_counted_on_every_scan(helper: Path) -> None:
    namespace = ["unshare", "--pid", "--fork", "--mount-proc"]
    out = subprocess.run(
        [*namespace, sys.executable, "-c", SCAN_UNDER_HIDEPID, str(helper), SCAN_AS_NOBODY],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    # The namespace's root processes (this script's interpreter and the engine) are listed but
    # cannot be read: counted, never reported, on every scan.
    for reported, stats in result["scans"]:
        assert reported is None
        assert stats["unreadable"] == 2
    for record, stats in result["raw"].values():
        assert record is None
        assert stats[3] == 2


def test_the_twin_bounds_pid_reuse_as_scan_rs_does() -> None:
    """``_reuse`` against ``Reuse`` (rust/scan/tests.rs ``reuse_window``): without a cursor, or
    after more forks than pids, every pid is re-checked and the scan says so (full_recheck)."""
    assert _reuse(None, (10, 5), 32768)[0]
    assert _reuse((10, 5), (20, 5 + 32768), 32768)[0]
    everything, may_reuse = _reuse((100, 5), (200, 50), 32768)
    assert not everything
    assert [may_reuse(p) for p in (100, 101, 200, 201)] == [False, True, True, False]
    everything, may_reuse = _reuse((32000, 5), (310, 50), 32768)
    assert not everything
    assert [may_reuse(p) for p in (32001, 5, 400)] == [True, True, False]
    everything, may_reuse = _reuse((7, 5), (7, 5), 32768)
    assert not everything
    assert not may_reuse(7)
