"""EngineMonitor and watch (enginespec.health.vitals): worker-tree integrity with real processes retitled
as workers and killed with SIGKILL, busy versus stalled with real HTTP servers on loopback, on
both backends."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from enginespec.health.vitals import EngineMonitor
from enginespec.process import exits
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from enginespec.scanning.watch import HealthChanged, Recovered, Watch, WatchEvent, WorkerLost
from helpers.fakeserver import Answer, FakeEngine, bound_socket, serving
from helpers.loadkit import TEXT, vllm_metrics
from helpers.procs import Procs, kernel_keeps_exit_statuses, wait_for

WORKERS = 20


def _server(procs: Procs, sock: socket.socket, titles: list[str], **env: str) -> EngineProcess:
    """A process that stands for `vllm serve` on ``sock``'s port, with children retitled as
    ``titles`` (see helpers/idle.c; ``env``: more of its switches), as scanned once every child
    shows its title."""
    port = sock.getsockname()[1]
    proc = procs.start(
        ["vllm", "serve", "/models/m", "--port", str(port)],
        pass_fds=(sock.fileno(),),
        # the first child also forks a grandchild of its title: let it keep the server's argv
        HELPER_CHILD_TITLES=",".join(["=", *titles]),
        **env,
    )
    found: list[EngineProcess] = []

    def titled() -> bool:
        found[:] = [p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid]
        if not found:
            return False
        shown = {_title(pid) for pid in found[0].worker_pids}
        return all(title in shown for title in titles)

    wait_for(titled)
    return found[0]


def _title(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"


def _pid_titled(process: EngineProcess, title: str) -> int:
    for pid in process.worker_pids:
        if _title(pid) == title:
            return pid
    raise AssertionError(f"no worker titled {title}")


@pytest.fixture
def healthy() -> Iterator[tuple[socket.socket, FakeEngine]]:
    sock = bound_socket()
    with serving(
        {"/health": [Answer(200)], "/metrics": [Answer(200, vllm_metrics(1.0), content_type=TEXT)]}, sock=sock
    ) as server:
        yield sock, server


def test_a_killed_engine_core_makes_a_live_server_unhealthy(
    procs: Procs, healthy: tuple[socket.socket, FakeEngine]
) -> None:
    sock, _ = healthy
    process = _server(procs, sock, ["VLLM::EngineCore", "VLLM::Worker_TP0"])
    monitor = EngineMonitor(timeout=2)
    [first] = monitor.check([process])
    assert first.health.state == "ready", first.health
    core = _pid_titled(process, "VLLM::EngineCore")
    os.kill(core, signal.SIGKILL)
    wait_for(lambda: _zombie(core))
    [after] = monitor.check([process])
    assert after.health.state == "unhealthy"
    assert (
        after.health.reason
        == f"VLLM::EngineCore pid {core} exited (SIGKILL) while the API server still answers"
    )
    assert after.health.http_status == 200
    assert [(w.pid, w.signal) for w in after.lost_workers] == [(core, signal.SIGKILL)]
    # it stays so: the server's /health still says 200
    [again] = monitor.check([process])
    assert again.health.state == "unhealthy"


def test_every_worker_kill_is_reported_once(procs: Procs, healthy: tuple[socket.socket, FakeEngine]) -> None:
    sock, _ = healthy
    titles = [f"VLLM::Worker_TP{i}" for i in range(WORKERS)]
    process = _server(procs, sock, titles)
    monitor = EngineMonitor(timeout=2)
    assert monitor.check([process])[0].health.state == "ready"
    reported = []
    for title in titles:
        pid = _pid_titled(process, title)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda pid=pid: _zombie(pid))
        lost = monitor.lost_workers([process])
        assert [(w.pid, w.title) for _, w in lost] == [(pid, title)]
        reported.extend(lost)
    assert len(reported) == WORKERS
    assert monitor.lost_workers([process]) == []


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def test_tgis_shards_and_router_are_its_workers_by_their_program(
    procs: Procs, healthy: tuple[socket.socket, FakeEngine]
) -> None:
    """TGI's workers keep their argv (no retitling): the launcher's shards, a console script run
    by its interpreter, and its router are remembered by program; another child is not."""
    sock, _ = healthy
    port = str(sock.getsockname()[1])
    model = "bigscience/bloom-560m"
    # as launcher/src/main.rs (v3.3.7) spawns them: `shard_manager`, `spawn_webserver`
    shard = ["/usr/src/.venv/bin/python3", "/usr/src/.venv/bin/text-generation-server", "serve", model]
    shard += ["--uds-path", "/tmp/text-generation-server", "--logger-level", "INFO", "--json-output"]
    router = ["text-generation-router", "--hostname", "127.0.0.1", "--port", port]
    sidecar = ["/usr/bin/python3", "/opt/tools/sidecar.py", "serve"]
    launcher = ["text-generation-launcher", "--model-id", model, "--hostname", "127.0.0.1", "--port", port]
    proc = procs.start(
        launcher,
        pass_fds=(sock.fileno(),),
        HELPER_SPAWN="\x1e".join("\x1f".join(argv) for argv in (shard, router, sidecar)),
    )
    found: list[EngineProcess] = []

    def spawned() -> bool:  # each child exec'd: a forked one shows the launcher's argv until then
        found[:] = [p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid]
        programs = {tuple(_argv(pid)[:2]) for pid in found[0].worker_pids} if found else set()
        return programs == {tuple(shard[:2]), tuple(router[:2]), tuple(sidecar[:2])}

    wait_for(spawned)
    process = found[0]
    pids = {_argv(pid)[1] if len(_argv(pid)) > 1 else "": pid for pid in process.worker_pids}
    shard_pid, router_pid, sidecar_pid = (pids[shard[1]], pids["--hostname"], pids[sidecar[1]])
    monitor = EngineMonitor(timeout=2)
    assert monitor.check([process])[0].health.state == "ready"
    os.kill(sidecar_pid, signal.SIGKILL)
    wait_for(lambda: _zombie(sidecar_pid))
    assert monitor.lost_workers([process]) == []
    assert monitor.check([process])[0].health.state == "ready"
    os.kill(shard_pid, signal.SIGKILL)
    wait_for(lambda: _zombie(shard_pid))
    [after] = monitor.check([process])
    assert (after.health.state, after.health.reason) == (
        "unhealthy",
        f"text-generation-server serve pid {shard_pid} exited (SIGKILL) while the API server still answers",
    )
    os.kill(router_pid, signal.SIGTERM)
    wait_for(lambda: _zombie(router_pid))
    assert [(w.pid, w.title, w.signal) for _, w in monitor.lost_workers([process])] == [
        (shard_pid, "text-generation-server serve", signal.SIGKILL),
        (router_pid, "text-generation-router", signal.SIGTERM),
    ]


def _ps(*names: str) -> list[Answer]:
    return [Answer(200, ('{"models":[' + ",".join(f'{{"name":"{n}"}}' for n in names) + "]}").encode())]


def test_an_ollama_runner_is_lost_only_when_ollama_still_lists_its_model(procs: Procs) -> None:
    """Ollama ends a runner with SIGKILL itself to unload its model, after taking the model off
    /api/ps: that exit is no loss. A runner that dies while its model is still listed is."""
    sock = bound_socket()
    blobs = ["/root/.ollama/models/blobs/sha256-" + c * 64 for c in "ab"]
    # as Ollama since v0.30.0 starts them (llm/llama_server.go startLlamaServer)
    runners = [
        ["/usr/lib/ollama/llama-server", "--model", blob, "--port", str(40000 + i), "--host", "127.0.0.1"]
        for i, blob in enumerate(blobs)
    ]
    routes = {"/": [Answer(200, b"Ollama is running")], "/api/ps": _ps("llama3:8b", "qwen3:0.6b")}
    with serving(routes, sock=sock) as server:
        proc = procs.start(
            ["ollama", "serve"],
            pass_fds=(sock.fileno(),),
            HELPER_SPAWN="\x1e".join("\x1f".join(argv) for argv in runners),
            OLLAMA_HOST=f"127.0.0.1:{sock.getsockname()[1]}",
        )
        found: dict[int, EngineProcess] = {}

        def started() -> bool:
            found.clear()
            found.update(
                {p.pid: p for p in Scanner(listen_ports=False).scan() if proc.pid in (p.pid, p.ppid)}
            )
            return {p.model for p in found.values() if p.role == "runner"} == set(blobs)

        wait_for(started)
        process = found[proc.pid]
        pid_of = {p.model: p.pid for p in found.values() if p.role == "runner"}
        monitor = EngineMonitor(timeout=2, load=False)
        [first] = monitor.check([process])
        assert (first.health.state, first.health.model_ids) == ("ready", ("llama3:8b", "qwen3:0.6b"))

        # an unload: off the list, then SIGKILL
        with server.script.lock:
            server.script.routes["/api/ps"] = _ps("qwen3:0.6b")
        os.kill(pid_of[blobs[0]], signal.SIGKILL)
        wait_for(lambda: _zombie(pid_of[blobs[0]]))
        assert monitor.lost_workers([process]) == []
        [unloaded] = monitor.check([process])
        assert unloaded.health.state == "ready", unloaded.health
        assert monitor.lost_workers([process]) == []

        # a crash: still listed
        crashed = pid_of[blobs[1]]
        os.kill(crashed, signal.SIGKILL)
        wait_for(lambda: _zombie(crashed))
        assert monitor.lost_workers([process]) == []  # seen; judged by the next answer
        [after] = monitor.check([process])
        assert (after.health.state, after.health.reason) == (
            "unhealthy",
            f"runner of sha256-{'b' * 47} pid {crashed} exited (SIGKILL) while the server still lists"
            " 1 loaded model(s) and runs 0 runner(s)",
        )
        assert [(w.pid, w.signal) for _, w in monitor.lost_workers([process])] == [(crashed, signal.SIGKILL)]
        assert monitor.check([process])[0].health.state == "unhealthy"  # while it is listed
        # the model expires from the list (keep_alive): nothing is missing any more
        with server.script.lock:
            server.script.routes["/api/ps"] = _ps()
        assert monitor.check([process])[0].health.state == "ready"


def test_workers_are_remembered_only_once_the_server_is_ready(procs: Procs) -> None:
    sock = bound_socket()
    with serving(
        {"/health": [Answer(503)], "/metrics": [Answer(200, vllm_metrics(1.0), content_type=TEXT)]}, sock=sock
    ):
        process = _server(procs, sock, ["VLLM::EngineCore"])
        monitor = EngineMonitor(timeout=2)
        assert monitor.check([process])[0].health.state == "unhealthy"
        core = _pid_titled(process, "VLLM::EngineCore")
        os.kill(core, signal.SIGKILL)
        # a worker that dies while its server starts is the server's business (it exits or says so)
        [after] = monitor.check([process])
    assert after.lost_workers == ()
    assert after.health.reason == "HTTP 503"


def _own_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget of pidfds of the test's own: the process's is shared with every watch (another
    test's watch, not yet collected, may still hold one), and the test counts the monitor's."""
    monkeypatch.setattr(exits, "PIDFDS", exits.PidfdBudget(exits.MAX_PIDFDS))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _back_to(before: int) -> None:
    """Waits until this process holds no more fds than ``before``: the fake server's handler
    thread closes its end of a connection a moment after the client closed its own (a leak
    still fails, at the deadline)."""
    wait_for(lambda: _open_fds() <= before)


@pytest.mark.skipif(
    not kernel_keeps_exit_statuses(), reason="the kernel keeps no exit status for pidfds (6.15+)"
)
def test_a_reaped_workers_exit_status_is_read_from_its_pidfd(
    procs: Procs, healthy: tuple[socket.socket, FakeEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that reaps its workers at once (as vLLM's API server does its engine core)
    leaves no zombie: the pidfd the monitor keeps still tells the signal, and is closed after."""
    sock, _ = healthy
    _own_budget(monkeypatch)
    before = _open_fds()
    process = _server(procs, sock, ["VLLM::EngineCore", "VLLM::Worker_TP0"], HELPER_REAP="1")
    monitor = EngineMonitor(timeout=2)
    assert monitor.check([process])[0].health.state == "ready"
    core = _pid_titled(process, "VLLM::EngineCore")
    worker = _pid_titled(process, "VLLM::Worker_TP0")
    assert exits.PIDFDS.left == exits.MAX_PIDFDS - 2
    os.kill(core, signal.SIGKILL)
    # reaped by the server, not by this test: no /proc entry left to read a status from
    wait_for(lambda: not os.path.exists(f"/proc/{core}"))
    [(_, gone)] = monitor.lost_workers([process])
    assert (gone.pid, gone.signal, gone.status) == (core, signal.SIGKILL, None)
    [after] = monitor.check([process])
    assert (
        after.health.reason
        == f"VLLM::EngineCore pid {core} exited (SIGKILL) while the API server still answers"
    )
    # an exit status, likewise: the worker ends itself (SIGTERM's default) and is reaped
    os.kill(worker, signal.SIGTERM)
    wait_for(lambda: not os.path.exists(f"/proc/{worker}"))
    [(_, ended)] = monitor.lost_workers([process])
    assert (ended.pid, ended.signal) == (worker, signal.SIGTERM)
    # each pidfd was closed with its worker's exit; none stays open
    assert exits.PIDFDS.left == exits.MAX_PIDFDS
    monitor.forget([])
    _back_to(before)


def test_forget_closes_the_remembered_workers_pidfds(
    procs: Procs, healthy: tuple[socket.socket, FakeEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, _ = healthy
    _own_budget(monkeypatch)
    process = _server(procs, sock, ["VLLM::EngineCore", "VLLM::Worker_TP0"])
    monitor = EngineMonitor(timeout=2)
    before = _open_fds()
    assert monitor.check([process])[0].health.state == "ready"
    held = 2 if hasattr(os, "pidfd_open") else 0
    assert exits.PIDFDS.left == exits.MAX_PIDFDS - held
    monitor.forget([])
    assert exits.PIDFDS.left == exits.MAX_PIDFDS
    _back_to(before)


def _no_pidfds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "pidfd_open", raising=False)


def _budget_spent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exits, "PIDFDS", exits.PidfdBudget(0))


def _kernel_without_pidfd_info(monkeypatch: pytest.MonkeyPatch) -> None:
    # an ioctl number pidfds do not know: ENOTTY, as before Linux 6.13
    monkeypatch.setattr(exits, "_PIDFD_GET_INFO", exits._PIDFD_GET_INFO + 0x40)


@pytest.mark.parametrize("without", [_no_pidfds, _budget_spent, _kernel_without_pidfd_info])
def test_a_worker_reaped_before_the_check_is_still_reported(
    procs: Procs,
    healthy: tuple[socket.socket, FakeEngine],
    monkeypatch: pytest.MonkeyPatch,
    without: Callable[[pytest.MonkeyPatch], None],
) -> None:
    """Without a pidfd that keeps its status, a worker reaped before it was looked at has
    exited, nothing more is known."""
    without(monkeypatch)
    sock, _ = healthy
    process = _server(procs, sock, ["VLLM::EngineCore"])
    monitor = EngineMonitor(timeout=2)
    monitor.check([process])
    core = _pid_titled(process, "VLLM::EngineCore")
    # the helper's whole group goes, the server's own pid aside: kill the child, then have the
    # server reaped too (killing it), so the core is gone without a zombie
    os.kill(core, signal.SIGKILL)
    procs.stop_all()
    wait_for(lambda: not os.path.exists(f"/proc/{core}"))
    lost = monitor.lost_workers([process])
    assert [(w.pid, w.signal, w.status) for _, w in lost] == [(core, None, None)]
    assert lost[0][1].describe() == f"VLLM::EngineCore pid {core} exited"


def _advancing(start: int = 0) -> list[Answer]:
    return [Answer(200, vllm_metrics(float(start + 50 * i)), content_type=TEXT) for i in range(2000)]


def test_a_probe_timing_out_while_tokens_advance_is_busy_never_unhealthy(procs: Procs) -> None:
    sock = bound_socket()
    routes = {"/health": [Answer(200, delay=5.0)], "/metrics": _advancing()}
    with serving(routes, sock=sock):
        process = _server(procs, sock, ["VLLM::EngineCore"])
        monitor = EngineMonitor(timeout=1.0, stall_after=0.5)
        verdicts = [monitor.check([process])[0] for _ in range(4)]
    states = [v.health.state for v in verdicts]
    assert states == ["busy"] * 4, [v.health.reason for v in verdicts]
    assert "no answer from /health within 1s, but its token counters advance" in verdicts[-1].health.reason


def test_a_probe_timing_out_with_frozen_counters_and_requests_pending_stalls(procs: Procs) -> None:
    sock = bound_socket()
    routes = {
        "/health": [Answer(200, delay=1.0)],
        "/metrics": [Answer(200, vllm_metrics(10.0), content_type=TEXT)],
    }
    with serving(routes, sock=sock):
        process = _server(procs, sock, ["VLLM::EngineCore"])
        monitor = EngineMonitor(timeout=0.2, stall_after=0.5)
        first = monitor.check([process])[0]
        assert first.health.state == "unhealthy"
        found = [first]
        wait_for(lambda: found.append(monitor.check([process])[0]) or found[-1].health.state == "stalled")
    assert "5 request(s) pending and no token counter moved" in found[-1].health.reason
    # until then: no answer, and nothing moving (not busy)
    assert {v.health.state for v in found[:-1]} == {"unhealthy"}


def test_without_metrics_the_trees_cpu_time_is_the_weaker_sign(procs: Procs) -> None:
    # mlx_lm.server reports no load. One that burns CPU (a Python loop run under that name)
    # and one that idles (the helper), both with a health probe that times out.
    burning, idle = bound_socket(), bound_socket()
    burner = procs.start(
        ["mlx_lm.server", "-c", "while True: pass", "--model", "m", "--port", str(burning.getsockname()[1])],
        pass_fds=(burning.fileno(),),
        executable=Path(sys.executable),
    )
    idler = procs.start(
        ["mlx_lm.server", "--model", "m", "--port", str(idle.getsockname()[1])], pass_fds=(idle.fileno(),)
    )
    # the CPU share is taken over the check's 2 s: a loaded host's scheduler evens out over that
    slow = {"/health": [Answer(200, delay=5.0)]}
    with serving(slow, sock=burning), serving(slow, sock=idle):
        found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
        verdicts = EngineMonitor(timeout=2).check([found[burner.pid], found[idler.pid]])
    busy, quiet = (v.health for v in verdicts)
    assert busy.state == "busy", busy
    assert "a weaker sign than token counters" in busy.reason
    assert quiet.state == "unhealthy"
    assert quiet.reason == "accepted the connection, no answer from /health within 2s"


class _Events:
    """A watch's events read on a thread, so a test waits for one with a deadline."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.queue: queue.Queue[WatchEvent] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        with contextlib.suppress(Exception):
            for event in self.watch:
                self.queue.put(event)

    def until(self, predicate: Callable[[WatchEvent], bool], timeout: float = 30.0) -> WatchEvent:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "the event did not come"
            try:
                event = self.queue.get(timeout=left)
            except queue.Empty:
                continue
            if predicate(event):
                return event


def _about(
    process: EngineProcess, kind: type[BaseModel], state: str | None = None
) -> Callable[[WatchEvent], bool]:
    def match(event: WatchEvent) -> bool:
        mine = isinstance(event, kind) and event.process.pid == process.pid  # type: ignore[attr-defined]
        return mine and (state is None or event.type == state)

    return match


def test_watch_emits_worker_lost_then_unhealthy(
    procs: Procs, healthy: tuple[socket.socket, FakeEngine]
) -> None:
    sock, _ = healthy
    process = _server(procs, sock, ["VLLM::EngineCore", "VLLM::Worker_TP0"])
    watch = Scanner().watch(0.1, health=True, health_interval=0.1, health_timeout=2, poll=True)
    events = _Events(watch)
    try:
        events.until(_about(process, HealthChanged, "ready"))
        core = _pid_titled(process, "VLLM::EngineCore")
        os.kill(core, signal.SIGKILL)
        lost = events.until(_about(process, WorkerLost))
        unhealthy = events.until(_about(process, HealthChanged, "unhealthy"))
    finally:
        watch.close()
    assert isinstance(lost, WorkerLost)
    assert lost.worker.pid == core
    assert isinstance(unhealthy, HealthChanged)
    assert unhealthy.health.reason.startswith(f"VLLM::EngineCore pid {core} exited (SIGKILL)")


def test_watch_emits_stalled_then_recovered(procs: Procs) -> None:
    sock = bound_socket()
    frozen = [Answer(200, vllm_metrics(10.0), content_type=TEXT)]
    with serving({"/health": [Answer(200)], "/metrics": frozen}, sock=sock) as server:
        process = _server(procs, sock, ["VLLM::EngineCore"])
        watch = Scanner().watch(
            0.2, health=True, health_interval=0.1, health_timeout=2, poll=True, stall_after=0.4
        )
        events = _Events(watch)
        try:
            events.until(_about(process, HealthChanged, "ready"))
            stalled = events.until(_about(process, HealthChanged, "stalled"))
            with server.script.lock:
                server.script.routes["/metrics"] = _advancing(100)
            recovered = events.until(_about(process, Recovered))
        finally:
            watch.close()
    assert isinstance(stalled, HealthChanged)
    assert stalled.previous == "ready"
    assert isinstance(recovered, Recovered)
    assert (recovered.previous, recovered.health.state) == ("stalled", "ready")
