"""The scanner on real processes whose /proc/PID/cmdline is exactly a given argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import enginespec
from engines.test_corpus import DISAGREEMENTS, KNOWN_ENGINES
from enginespec import Config, EngineProcess, Recipe, Scanner, get_engine_spec
from enginespec.process.urls import base_url
from helpers.cli import run
from helpers.procs import Procs, children_of, wait_for

CORPUS = [
    json.loads(line)
    for line in (Path(__file__).parents[1] / "data" / "argv-public.jsonl").read_text().splitlines()
]


def _mine(found: list[EngineProcess], procs: Procs) -> dict[int, EngineProcess]:
    pids = {p.pid for p in procs.started}
    return {p.pid: p for p in found if p.pid in pids}


def _facts(p: EngineProcess) -> tuple[Any, ...]:
    return (p.engine, p.model, p.served_model_name, p.host, p.port)


def _expected(record: dict[str, Any]) -> tuple[Any, ...] | None:
    if record["source"] in DISAGREEMENTS:
        expected: tuple[Any, ...] | None = DISAGREEMENTS[record["source"]][0]
        return expected
    if record["engine"] not in KNOWN_ENGINES:
        return None
    return (record["engine"], record["model"], record["served_model_name"], record["host"], record["port"])


def test_finds_exactly_the_engines_among_corpus_processes(procs: Procs) -> None:
    started = {procs.start(r["argv"]).pid: r for r in CORPUS}
    scanner = Scanner()
    found = _mine(scanner.scan(), procs)
    expected = {pid: _expected(r) for pid, r in started.items() if _expected(r) is not None}
    assert {pid: _facts(p) for pid, p in found.items()} == expected
    assert scanner.stats.scanned >= len(CORPUS)
    for pid, proc in found.items():
        assert proc.ppid == os.getpid()
        assert proc.start_time == pytest.approx(time.time(), abs=120)
        assert proc.exe is not None
        assert proc.exe.endswith("idle")
        assert len(proc.argv) == len(started[pid]["argv"])

    # Some exit, others start (from build_command output): the next scan follows.
    stopped = [p for p in procs.started if p.pid in expected][::2]
    for proc in stopped:
        procs.stop(proc)
    config = Config(data_dir=Path("/nonexistent"))
    recipes = [
        Recipe(engine="vllm", model_path="/models/new-a", served_model_name="a", port=8201),
        Recipe(engine="sglang", model_path="org/new-b", host="0.0.0.0", port=30002),
        Recipe(engine="llamacpp", model_path="/m/new-c.gguf", served_model_name="c1,c2"),
        Recipe(engine="mlx", model_path="mlx/new-d", port=8090, api_key="sk-hidden"),
    ]
    built = {}
    for recipe in recipes:
        argv = get_engine_spec(recipe.engine).build_command(recipe, config)
        built[procs.start(argv).pid] = recipe
    found = _mine(scanner.scan(), procs)
    for proc in stopped:
        assert proc.pid not in found
    for pid, recipe in built.items():
        assert pid in found, (recipe, scanner.stats)
        p = found[pid]
        assert (p.engine, p.model, p.host) == (recipe.engine, recipe.model_path, recipe.host)
        assert p.effective_port == (recipe.port or get_engine_spec(recipe.engine).default_port)
    assert found[next(pid for pid, r in built.items() if r.engine == "llamacpp")].served_model_names == (
        "c1",
        "c2",
    )
    assert len(found) == len(expected) - len(stopped) + len(built)
    assert scanner.stats.new >= len(built)


def test_secrets_are_redacted(procs: Procs) -> None:
    proc = procs.start(["vllm", "serve", "m", "--api-key", "sk-123", "--hf-token=hf_456", "--port", "8777"])
    found = _mine(enginespec.scan(), procs)[proc.pid]
    assert found.argv == ("vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--port", "8777")
    assert "sk-123" not in found.model_dump_json()


def test_workers_are_folded_into_the_server(procs: Procs) -> None:
    server = procs.start(
        ["python3", "/venv/bin/vllm", "serve", "/models/tree", "--port", "8311"],
        HELPER_CHILD_TITLES="VLLM::EngineCore,VLLM::Worker_TP0,VLLM::Worker_TP1,=",
    )
    wait_for(lambda: len(children_of(server.pid)) == 4)
    children = children_of(server.pid)
    wait_for(lambda: any(children_of(c) for c in children))
    grandchildren = set().union(*(children_of(c) for c in children))
    assert len(grandchildren) == 1
    found = _mine(Scanner().scan(), procs)
    assert list(found) == [server.pid]  # the `=` child keeps the server's argv and is still folded
    assert set(found[server.pid].worker_pids) == children | grandchildren
    titles = {Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[0] for c in children}
    assert {b"VLLM::EngineCore", b"VLLM::Worker_TP0", b"VLLM::Worker_TP1", b"python3"} == titles


def _argv0(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]


def _has_model(pid: int) -> bool:
    try:
        return b"\0-m\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_supervisors(procs: Procs) -> None:
    sep, arg = "\x1e", "\x1f"
    child = arg.join(["/usr/lib/ollama/llama-server", "-m", "/blobs/sha256-1", "--port", "41001"])
    ollama = procs.start(["/usr/local/bin/ollama", "serve"], HELPER_SPAWN=child)
    swap_child = arg.join(["llama-server", "-m", "/m/b.gguf", "--port", "41002"])
    swap = procs.start(["llama-swap", "--config", "c.yaml"], HELPER_SPAWN=swap_child)
    routed = sep.join(
        arg.join(["llama-server", "-m", f"/m/{n}.gguf", "--port", str(p)])
        for n, p in [("x", 41003), ("y", 41004)]
    )
    router = procs.start(["llama-server", "--models-dir", "/m", "--port", "8080"], HELPER_SPAWN=routed)
    spawned = lambda: children_of(ollama.pid) | children_of(swap.pid) | children_of(router.pid)  # noqa: E731
    wait_for(lambda: len(spawned()) == 4)
    # Until it execs, a forked child shows its parent's argv (the router's is llama-server too).
    wait_for(lambda: all(_argv0(c).endswith(b"llama-server") and _has_model(c) for c in spawned()))
    found = {p.pid: p for p in Scanner().scan()}
    by_model = {p.model: p for p in found.values() if p.ppid in {ollama.pid, swap.pid, router.pid}}
    assert by_model["/blobs/sha256-1"].supervisor == "ollama"
    assert by_model["/m/b.gguf"].supervisor == "llama-swap"
    assert by_model["/m/x.gguf"].supervisor == "llama-server"
    assert by_model["/m/y.gguf"].supervisor == "llama-server"
    assert found[router.pid].supervisor is None
    # a server another server started for one model is its runner
    assert {p.role for p in by_model.values()} == {"runner"}
    assert found[router.pid].role == "server"
    assert found[router.pid].model is None
    assert found[router.pid].worker_pids == ()  # llama-server does not fold: its children are servers


def test_exec_into_an_engine_is_found_on_the_next_scan(helper: Path, procs: Procs) -> None:
    # The wrapper waits for a line on stdin (instead of `sleep 1`) so the test does not depend on
    # how long a scan takes; then it execs, keeping its pid and start time.
    wrapper = subprocess.Popen(
        ["bash", "-c", f"read -r _; exec -a vllm {helper} serve /models/x --port 8123"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    procs.started.append(wrapper)  # type: ignore[arg-type]
    scanner = Scanner()
    assert wrapper.pid not in _mine(scanner.scan(), procs)
    _release(wrapper)
    wait_for(lambda: Path(f"/proc/{wrapper.pid}/cmdline").read_bytes().startswith(b"vllm\0"))
    found = _mine(scanner.scan(), procs)
    assert found[wrapper.pid].model == "/models/x"
    assert found[wrapper.pid].port == 8123
    # A young process (born after the previous scan, not a known wrapper) that execs is caught too.
    target = ["mlx_lm.server", "--model", "young/m"]
    code = f"import os, sys; sys.stdin.readline(); os.execv({str(helper)!r}, {target!r})"
    late = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, start_new_session=True)
    procs.started.append(late)  # type: ignore[arg-type]
    assert late.pid not in _mine(scanner.scan(), procs)
    _release(late)
    wait_for(lambda: Path(f"/proc/{late.pid}/cmdline").read_bytes().startswith(b"mlx_lm.server\0"))
    found = _mine(scanner.scan(), procs)
    assert late.pid in found, scanner.stats
    assert found[late.pid].model == "young/m"


def test_a_process_born_just_before_the_first_scan_is_watched_for_an_exec(helper: Path, procs: Procs) -> None:
    # As a watch started while an engine is being launched sees it: the first scan catches the
    # process between its fork and its exec, showing another program's argv (here, a Python
    # that is no wrapper); the exec that follows must still be seen.
    target = ["python3", "-m", "sglang.launch_server", "--model-path", "early/m", "--port", "30124"]
    code = f"import os, sys; sys.stdin.readline(); os.execv({str(helper)!r}, {target!r})"
    early = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, start_new_session=True)
    procs.started.append(early)  # type: ignore[arg-type]
    scanner = Scanner()
    assert early.pid not in _mine(scanner.scan(), procs)
    _release(early)
    wait_for(lambda: Path(f"/proc/{early.pid}/cmdline").read_bytes().startswith(b"python3\0-m\0sglang"))
    found = _mine(scanner.scan(), procs)
    assert early.pid in found, scanner.stats
    assert (found[early.pid].engine, found[early.pid].model) == ("sglang", "early/m")


def _release(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.flush()


def test_listen_ports_not_given_in_argv(procs: Procs) -> None:
    proc = procs.start(["llama-server", "-m", "/m/l.gguf", "--port", "8123"], HELPER_LISTEN="1")
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    found = _mine(Scanner().scan(), procs)[proc.pid]
    assert found.listen_ports == (port,)
    assert found.port == 8123
    assert _mine(Scanner(listen_ports=False).scan(), procs)[proc.pid].listen_ports == ()


def test_vanished_zombies_and_churn_keep_memory_flat(procs: Procs) -> None:
    scanner = Scanner()
    scanner.scan()
    for _round in range(3):
        batch = [procs.start(["vllm", "serve", f"/m/{i}"]) for i in range(60)]
        assert len(_mine(scanner.scan(), procs)) == 60
        for proc in batch:
            procs.stop(proc)
        procs.started.clear()
        assert _mine(scanner.scan(), procs) == {}
        assert scanner.stats.vanished >= 60
        # Dead pids are evicted: what the scanner remembers is what lives (the host's own
        # processes come and go meanwhile, so the bound is the live count, not the first scan's).
        live = sum(1 for name in os.listdir("/proc") if name.isdigit())
        assert scanner.stats.known <= live + 10
    # A zombie engine (dead, not yet reaped by its parent) is not reported.
    code = (
        "import subprocess, sys, time;"
        f"p = subprocess.Popen(['vllm', 'serve', '/m/z'], executable={str(procs.helper)!r});"
        "print(p.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    procs.started.append(parent)  # type: ignore[arg-type]
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    wait_for(lambda: Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"vllm\0"))
    assert child in {p.pid for p in scanner.scan()}
    os.kill(child, 9)
    wait_for(lambda: Path(f"/proc/{child}/stat").read_text().split(") ")[1].startswith("Z"))
    assert child not in {p.pid for p in scanner.scan()}


def test_unreadable_and_kernel_style_processes_do_not_break_the_scan(procs: Procs) -> None:
    procs.start([""])  # empty argv[0], as kernel threads and some daemons show
    procs.start(["", "", ""])
    procs.start([os.fsdecode(b"vllm\xff"), "serve", "m"])
    engine = procs.start(["llama-server", "-m", os.fsdecode(b"/m/caf\xe9.gguf")])
    found = _mine(Scanner().scan(), procs)
    assert list(found) == [engine.pid]
    assert os.fsencode(found[engine.pid].model or "") == b"/m/caf\xe9.gguf"


def test_base_url() -> None:
    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert base_url("::", 8000) == "http://[::1]:8000"
    assert base_url("", 1) == "http://127.0.0.1:1"
    assert base_url("fe80::1", 2) == "http://[fe80::1]:2"
    assert base_url("gpu-7.local", 3) == "http://gpu-7.local:3"


def test_both_backends_return_the_same_processes(procs: Procs) -> None:
    from enginespec._host.fallback import scan as _pyscanner
    from enginespec.definition.signature import signatures_json
    from enginespec.engines import all_signatures
    from enginespec.scanning.scanner import EXEC_WRAPPERS, TREE_REFRESH_SECONDS, YOUNG_SECONDS

    _native = pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")
    for record in CORPUS[:80]:
        procs.start(record["argv"])
    server = procs.start(
        ["vllm", "serve", "/m/t", "--port", "8400"], HELPER_CHILD_TITLES="VLLM::Worker_TP0,="
    )
    listener = procs.start(["llama-server", "-m", "/m/p.gguf"], HELPER_LISTEN="1")
    # settled before the two scans, which run one after the other: the workers started (the
    # first one's own child too, forked after it: on a loaded host the scans could fall between
    # the two forks, found by CI), the port bound (the helper prints it once listening)
    wait_for(lambda: len(children_of(server.pid)) == 2)
    wait_for(lambda: sum(len(children_of(child)) for child in children_of(server.pid)) == 1)
    assert listener.stdout is not None
    assert listener.stdout.readline().strip()
    args = (signatures_json(all_signatures()), list(EXEC_WRAPPERS), YOUNG_SECONDS, TREE_REFRESH_SECONDS, True)
    pids = {p.pid for p in procs.started}
    native = [r for r in _native.ProcessScanner(*args).scan() if r[0] in pids]
    python = [r for r in _pyscanner.ProcessScanner(*args).scan() if r[0] in pids]
    assert len(native) > 40
    assert native == python


def test_cli_ps(procs: Procs) -> None:
    vllm = procs.start(["vllm", "serve", "/models/ps-a", "--served-model-name", "psa", "--api-key", "sk-ps"])
    llama = procs.start(["llama-server", "-m", "/models/ps-b.gguf", "--host", "::", "--port", "9123"])
    out = run("ps", "--json")
    assert out.returncode == 0, out.stderr
    rows = {row["pid"]: row for row in json.loads(out.stdout)}
    assert rows[vllm.pid]["model"] == "/models/ps-a"
    assert rows[vllm.pid]["served_model_names"] == ["psa"]
    assert rows[vllm.pid]["base_url"] == "http://127.0.0.1:8000"
    assert rows[llama.pid]["base_url"] == "http://[::1]:9123"
    assert "sk-ps" not in out.stdout
    assert set(rows[llama.pid]) >= {
        "pid",
        "start_time",
        "engine",
        "argv",
        "worker_pids",
        "supervisor",
        "listen_ports",
    }
    table = run("ps")
    assert table.returncode == 0
    assert "/models/ps-a" in table.stdout
    assert "[::1]:9123" in table.stdout  # addresses as docker shows them
    assert "http://[::1]:9123" in run("ps", "-o", "wide").stdout  # whole in wide
    assert "sk-ps" not in table.stdout


def test_sysinfo_source_finds_the_same_engines(procs: Procs) -> None:
    """The native scanner's source for platforms without procfs, exercised here on Linux."""
    from enginespec.definition.signature import signatures_json
    from enginespec.engines import all_signatures
    from enginespec.scanning.scanner import EXEC_WRAPPERS, TREE_REFRESH_SECONDS, YOUNG_SECONDS

    _native = pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")

    for record in CORPUS[:60]:
        procs.start(record["argv"])
    server = procs.start(
        ["vllm", "serve", "/m/s", "--port", "8500"], HELPER_CHILD_TITLES="VLLM::Worker_TP0,="
    )
    wait_for(lambda: len(children_of(server.pid)) == 2)
    args = (
        signatures_json(all_signatures()),
        list(EXEC_WRAPPERS),
        YOUNG_SECONDS,
        TREE_REFRESH_SECONDS,
        False,
    )
    pids = {p.pid for p in procs.started}
    procfs = {r[0]: r for r in _native.ProcessScanner(*args, "procfs").scan() if r[0] in pids}
    sysinfo = {r[0]: r for r in _native.ProcessScanner(*args, "sysinfo").scan() if r[0] in pids}
    assert len(procfs) > 30
    assert procfs.keys() == sysinfo.keys()
    for pid, ours in procfs.items():
        theirs = sysinfo[pid]
        # same argv, facts, parent, workers; start time to the second
        assert (ours[2], ours[3], ours[4], ours[6], ours[7]) == (
            theirs[2],
            theirs[3],
            theirs[4],
            theirs[6],
            theirs[7],
        )
        assert abs(ours[1] - theirs[1]) <= 1
    with pytest.raises(ValueError, match="source"):
        _native.ProcessScanner(*args, "kvm")


def test_unchanged_engines_keep_their_model_between_scans(procs: Procs) -> None:
    proc = procs.start(["llama-server", "-m", "/m/same.gguf"])
    scanner = Scanner(listen_ports=False)
    first = _mine(scanner.scan(), procs)[proc.pid]
    assert _mine(scanner.scan(), procs)[proc.pid] is first
    other = procs.start(["llama-server", "-m", "/m/other.gguf"])
    found = _mine(scanner.scan(), procs)
    assert found[proc.pid] is first
    assert found[other.pid].model == "/m/other.gguf"


def test_the_kernel_tells_the_listening_sockets_of_our_own_namespace() -> None:
    # Both readers ask the kernel (NETLINK_SOCK_DIAG) for the listeners of their own namespace:
    # our listener is among them, with its address; a connection is not.
    import socket

    import enginespec._host.fallback.procread as _pyprocread
    from enginespec._host.shapes import Listening

    readers: list[Any] = [_pyprocread.ProcRoot()]
    if enginespec.BACKEND == "native":
        import enginespec._native as _native

        readers.append(_native.ProcRoot("/proc"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        inode = os.stat(f"/proc/self/fd/{listener.fileno()}").st_ino
        for reader in readers:
            assert Listening(inode, bytes([127, 0, 0, 1]), port) in reader.listen_table(os.getpid())
        with socket.create_connection(("127.0.0.1", port)) as connection:
            local = connection.getsockname()[1]
            for reader in readers:
                assert all(row.port != local for row in reader.listen_table(os.getpid()))
    assert _pyprocread._diag_listening(socket.AF_INET6) is not None
