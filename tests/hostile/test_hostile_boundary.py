"""One error boundary per engine, loops that never die of one, and one health verdict everywhere
(issue 44): an engine whose facts make a computation raise is that engine's problem alone; a
refresh that fails keeps the last good snapshot, counted; a refresh that overruns keeps ready
verdicts, marked stale; engines that need no request are never "not checked"; a server that
accepts and never answers is `unhealthy`, for the same reason, in every surface."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import enginespec.health.checks as health_module
import enginespec.scanning.stages as scanstages
from enginespec import EngineProcess, Scanner
from enginespec.fleet.exporter import Refresher
from enginespec.health.checks import check_all
from enginespec.health.vitals import EngineMonitor
from enginespec.scanning.watch import HealthChanged
from helpers.cli import enginespec
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.procs import Procs, stop_child, wait_for

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf-configs"
#: the reason of a server that took the request and never answered, whatever its timeout
UNANSWERED = re.compile(r"accepted the connection, no answer from /health within \d+(\.\d+)?s")


def _scanned(pids: list[int]) -> list[EngineProcess]:
    """The scan's records of ``pids``, in that order, once all are seen."""
    found: dict[int, EngineProcess] = {}

    def seen() -> bool:
        found.clear()
        found.update({p.pid: p for p in Scanner().scan() if p.pid in pids})
        return len(found) == len(pids)

    wait_for(seen)
    return [found[pid] for pid in pids]


def _series(text: bytes | str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    decoded = text.decode() if isinstance(text, bytes) else text
    for family in text_string_to_metric_families(decoded):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _value(series: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float | None:
    return next(
        (value for found, value in series.get(name, []) if labels.items() <= found.items()),
        None,
    )


# --- the boundary ---------------------------------------------------------------------------------


def test_a_stage_that_raises_is_that_engines_problem_alone(
    procs: Procs, held_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generic boundary: a scan stage (its outside facts) and a health check that raise for
    one engine leave it listed with the reason, and the other engine as it is."""
    odd = procs.start(["vllm", "serve", "/models/odd", "--port", str(held_port())])
    fine = procs.start(["llama-server", "-m", "/models/fine.gguf", "--port", str(held_port())])
    read_outside, endpoint_of = scanstages.read_outside, health_module.endpoint_of

    def outside(spec: object, pid: int, *args: object, **kwargs: object) -> object:
        if pid == odd.pid:
            raise KeyError("a settings parser that did not foresee this")
        return read_outside(spec, pid, *args, **kwargs)  # type: ignore[arg-type]

    def endpoint(target: object) -> object:
        if getattr(getattr(target, "process", None), "pid", None) == odd.pid:
            raise OverflowError("an answer no parser foresaw")
        return endpoint_of(target)  # type: ignore[arg-type]

    monkeypatch.setattr(scanstages, "read_outside", outside)
    monkeypatch.setattr(health_module, "endpoint_of", endpoint)
    odd_record, fine_record = _scanned([odd.pid, fine.pid])
    assert (fine_record.model, fine_record.problems) == ("/models/fine.gguf", ())
    assert (odd_record.engine, odd_record.base_url, odd_record.argv[:2]) == ("vllm", None, ("vllm", "serve"))
    assert [p for p in odd_record.problems if p.startswith("engine record failed: KeyError in outside")]
    healths = check_all([odd_record, fine_record], timeout=1.5, deadline=2)
    assert (healths[1].state, healths[1].reason) == (
        "starting",
        "process is up, not accepting connections yet",
    )
    assert healths[0].state == "unknown"  # no address: asked nothing, so nothing raised
    import enginespec.untrusted.boundary as boundary

    before = boundary.failures()
    healths = check_all([odd_record.model_copy(update={"base_url": "http://127.0.0.1:1"}), fine_record])
    assert healths[0].state == "unknown"
    assert healths[0].reason.startswith("health failed: OverflowError in endpoint"), healths[0]
    assert healths[1].state == "starting"
    after = boundary.failures()
    assert after["engine record"] >= 1
    assert after["health"] == before.get("health", 0) + 1


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "llama-3.2-1b"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / "llama-3.2-1b.json").read_text())
    return folder


def _agent_engines(port: int, pids: set[int]) -> list[dict[str, object]]:
    """The agent's ``/v1/engines`` once it lists every pid of ``pids``."""
    found: list[dict[str, object]] = []

    def listed() -> bool:
        try:
            documents = httpx.get(f"http://127.0.0.1:{port}/v1/engines", timeout=5).json()
        except httpx.HTTPError:
            return False
        found[:] = [d for d in documents if d["pid"] in pids]
        return len(found) == len(pids)

    wait_for(listed, timeout=60)
    return found


def test_a_context_length_beyond_a_float_spoils_no_other_engine(
    procs: Procs, held_port: Callable[[], int], model_folder: Path
) -> None:
    """`--max-model-len 1e400` beside a real model's config.json: its memory estimate raised
    (OverflowError), which the model-facts thread turned into an IndexError that ended `ps`, the
    exporter and the agent's refresh. Now its files' facts stand and the estimate is a problem
    naming the flag (the one bounded reader's range), and the engine beside it keeps its own."""
    hostile = procs.start(
        ["vllm", "serve", str(model_folder), "--max-model-len", "1e400", "--port", str(held_port())]
    )
    fine = procs.start(
        ["vllm", "serve", str(model_folder), "--max-model-len", "4096", "--port", str(held_port())]
    )
    _scanned([hostile.pid, fine.pid])
    table = enginespec("ps", "--no-health", "-o", "wide")
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.decode().splitlines()[1:]}
    assert str(hostile.pid) in rows
    assert "4096" in rows[str(fine.pid)]  # its model's facts: the context it was started with
    listed = enginespec("ps", "--no-health", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert {hostile.pid, fine.pid} <= {d["pid"] for d in json.loads(listed.stdout)}
    told = enginespec("model", str(hostile.pid))
    assert told.returncode == 0, told.stderr
    assert b"no memory estimate: --max-model-len '1e400': out of range" in told.stdout
    assert b"Traceback" not in told.stderr
    # the exporter: the first refresh, then a scrape
    refresher = Refresher(interval=2.0, health=False)
    snapshot = refresher.collector.snapshot
    ids = dict(zip((p.pid for p in snapshot.processes), snapshot.ids, strict=True))
    series = _series(generate_latest(refresher.registry))
    assert {str(hostile.pid), str(fine.pid)} <= {
        labels["pid"] for labels, _ in series["enginespec_engine_info"]
    }
    assert _value(series, "enginespec_engine_kv_cache_bytes_estimated", engine_id=ids[fine.pid])
    # the agent, which refreshes the same way
    port = free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "enginespec.cli",
            "agent",
            "--interval",
            "200ms",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        documents = _agent_engines(port, {hostile.pid, fine.pid})
        assert {d["pid"] for d in documents} == {hostile.pid, fine.pid}
        assert agent.poll() is None
    finally:
        stop_child(agent, signal.SIGTERM)


def test_a_health_answer_nested_too_deep_spoils_no_other_engine(procs: Procs) -> None:
    """A `/health` answer nested 100,000 deep: parsing it raised RecursionError, which ended
    `ps` and the exporter's refresh. Now that engine is not ready, with a reason, and the engine
    beside it is checked as usual."""
    deep_sock, fine_sock = bound_socket(), bound_socket()
    deep = Answer(200, b"[" * 100_000 + b"]" * 100_000)
    try:
        with (
            serving({"/health": [deep]}, sock=deep_sock),
            serving({"/health": [Answer(200, b'{"status":"ok"}')]}, sock=fine_sock),
        ):
            hostile, fine = (
                procs.start(
                    ["llama-server", "-m", f"/models/{name}", "--port", str(sock.getsockname()[1])],
                    (sock.fileno(),),
                )
                for name, sock in (("deep", deep_sock), ("fine", fine_sock))
            )
            records = _scanned([hostile.pid, fine.pid])
            healths = check_all(records)
            assert (healths[0].state != "ready", healths[1].state) == (True, "ready"), healths
            assert healths[0].reason
            listed = enginespec("ps", str(hostile.pid), str(fine.pid), "-o", "json")
            assert listed.returncode == 0, listed.stderr
            states = {d["pid"]: d["health"]["state"] for d in json.loads(listed.stdout)}
            assert states[fine.pid] == "ready"
            assert states[hostile.pid] != "ready"
            refresher = Refresher(interval=2.0, refresh_now=False)

            def both_checked() -> bool:
                refresher.refresh()
                snapshot = refresher.collector.snapshot
                found = dict(zip((p.pid for p in snapshot.processes), snapshot.healths or (), strict=False))
                return found.get(fine.pid) is not None and found[fine.pid].state == "ready"

            wait_for(both_checked, timeout=60)
            assert refresher.collector.snapshot.refresh_failures == 0
    finally:
        deep_sock.close()
        fine_sock.close()


# --- loops that never die -----------------------------------------------------------------------


def test_a_refresh_that_raises_keeps_the_last_snapshot_and_is_counted(
    procs: Procs, held_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = procs.start(["vllm", "serve", "/models/kept", "--port", str(held_port())])
    _scanned([engine.pid])
    refresher = Refresher(interval=2.0, health=False)
    first = refresher.collector.snapshot
    assert engine.pid in {p.pid for p in first.processes}
    calls: list[int] = []

    def broken() -> list[EngineProcess]:
        calls.append(1)
        raise RuntimeError("the scan broke")

    monkeypatch.setattr(refresher._scanner, "scan", broken)
    refresher.refresh()
    kept = refresher.collector.snapshot
    assert kept.processes == first.processes
    assert kept.refreshed_at == first.refreshed_at
    assert kept.refresh_failures == 1
    assert kept.refresh_problem.startswith("refresh failed: RuntimeError in broken")
    series = _series(generate_latest(refresher.registry))
    assert _value(series, "enginespec_refresh_failures_total") == 1
    assert str(engine.pid) in {labels["pid"] for labels, _ in series["enginespec_engine_info"]}
    # the loop goes on refreshing (and failing) until it is stopped
    refresher.interval = 0.05
    stop = threading.Event()
    loop = threading.Thread(target=refresher.run, args=(stop,), daemon=True)
    loop.start()
    try:
        wait_for(lambda: len(calls) >= 4)
        assert loop.is_alive()
    finally:
        stop.set()
        loop.join(10)
    assert refresher.collector.snapshot.refresh_failures >= 4


# --- under load: stale, never "not checked" ------------------------------------------------------

#: a health answer sent one byte every 50 ms: no read waits long enough to time out, and the
#: whole answer takes 20 s, far past any refresh's deadline (a check that cannot finish in time,
#: as on a loaded host, made deterministic)
TRICKLED = Answer(200, b'{"status":"ok"}' + b" " * 385, trickle=0.05)


def test_a_refresh_that_overruns_keeps_the_ready_verdict_marked_stale(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    try:
        with serving({"/health": [Answer(200), TRICKLED]}, sock=sock, origins=True):
            engine = procs.start(["vllm", "serve", "/models/stale", "--port", str(port)], (sock.fileno(),))
            _scanned([engine.pid])
            refresher = Refresher(interval=2.0, refresh_now=False)

            def health_now() -> object:
                snapshot = refresher.collector.snapshot
                found = dict(zip((p.pid for p in snapshot.processes), snapshot.healths or (), strict=False))
                return found.get(engine.pid)

            def ready() -> bool:
                refresher.refresh()
                found = health_now()
                return found is not None and found.state == "ready"  # type: ignore[attr-defined]

            wait_for(ready, timeout=30)
            first = health_now()
            refresher.refresh()  # its check (if a slot was free for it) cannot finish in time
            later = health_now()
            assert later.state == "ready", later  # type: ignore[attr-defined]
            assert later.stale  # type: ignore[attr-defined]
            assert not first.stale  # type: ignore[attr-defined]
            assert later.checked_at == first.checked_at  # type: ignore[attr-defined]
            assert first.checked_at is not None  # type: ignore[attr-defined]
            snapshot = refresher.collector.snapshot
            engine_id = dict(zip((p.pid for p in snapshot.processes), snapshot.ids, strict=True))[engine.pid]
            series = _series(generate_latest(refresher.registry))
            assert _value(series, "enginespec_engine_ready", engine_id=engine_id) == 1
            assert _value(series, "enginespec_engine_health_stale", engine_id=engine_id) == 1
    finally:
        sock.close()


def _read_in_background(watch: Iterable[object]) -> queue.Queue[object]:
    """Every event of ``watch``, then the error that ended it if one did, put on a queue by a
    daemon thread (the test reads the queue; closing the watch ends the thread)."""
    events: queue.Queue[object] = queue.Queue()

    def read() -> None:
        try:
            for event in watch:
                events.put(event)
        except Exception as err:  # said to the test
            events.put(err)

    threading.Thread(target=read, daemon=True).start()
    return events


def test_a_watch_whose_checks_overrun_keeps_the_ready_state(procs: Procs) -> None:
    """The watch's rounds of checks, each cut by its deadline (a trickling answer): the engine
    stays `ready` (no `unknown` event), its verdict stale, until its checks finish again."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    try:
        with serving({"/health": [Answer(200), TRICKLED]}, sock=sock, origins=True) as server:
            engine = procs.start(["vllm", "serve", "/models/watched", "--port", str(port)], (sock.fileno(),))
            watch = Scanner().watch(0.5, health=True, health_interval=0.5, health_timeout=0.5, load=False)
            events = _read_in_background(watch)
            try:
                # three more checks asked (each cut at its round's deadline) after the first answer
                wait_for(lambda: len(server.script.ours) >= 4, timeout=60)
            finally:
                watch.close()
            told = []
            while not events.empty():
                event = events.get()
                assert not isinstance(event, Exception), event
                if isinstance(event, HealthChanged) and event.process.pid == engine.pid:
                    told.append(event.type)
            # (before the first answer a busy host's round may have cut this check too: unknown)
            assert "ready" in told, told
            assert told[told.index("ready") :] == ["ready"], told
    finally:
        sock.close()


def test_engines_that_need_no_request_are_never_not_checked(procs: Procs) -> None:
    """An orphaned worker and an engine with no usable address wait behind a server that holds
    the only slot until the deadline: they are still what their records say."""
    hung = bound_socket()
    hung.listen(64)  # the kernel accepts; nobody answers
    try:
        blocker = procs.start(
            ["llama-server", "-m", "hung", "--port", str(hung.getsockname()[1])], (hung.fileno(),)
        )
        orphan = procs.start(["VLLM::EngineCore"])
        nowhere = procs.start(["llama-server", "-m", "nowhere", "--port", "99999"])
        found = _scanned([blocker.pid, orphan.pid, nowhere.pid])
        assert (found[1].role, found[2].base_url) == ("orphan", None)
        verdicts = [
            check_all(found, concurrency=1, timeout=60, deadline=0.5),
            [v.health for v in EngineMonitor(timeout=60, concurrency=1).check(found, deadline=0.5)],
        ]
        for healths in verdicts:
            assert (healths[0].state, healths[0].reason) == (
                "unknown",
                "not checked within the overall deadline of 0.5s",
            )
            assert healths[1].state == "not_serving"
            assert healths[1].reason.startswith("an orphaned worker (its server is gone)")
            assert healths[2].state == "unknown"
            assert healths[2].reason.startswith("no usable listen address")
    finally:
        hung.close()


# --- one verdict everywhere -----------------------------------------------------------------------


def _watched_state(pid: int) -> HealthChanged:
    """The first health event of ``pid`` that is a verdict of its check, in a watch with its
    defaults (which checks every engine of the host: on a busy one, a round's deadline may
    first cut this engine's check, which is `unknown`, not checked)."""
    watch = Scanner().watch(health=True)
    events = _read_in_background(watch)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                event = events.get(timeout=1)
            except queue.Empty:
                continue
            assert not isinstance(event, Exception), event
            if (
                isinstance(event, HealthChanged)
                and event.process.pid == pid
                and event.type != "starting"
                and not event.health.reason.startswith("not checked")
            ):
                return event
        raise AssertionError("no health event")
    finally:
        watch.close()


def _unanswered(state: str, reason: str) -> None:
    assert (state, bool(UNANSWERED.fullmatch(reason))) == ("unhealthy", True), reason


def _mine(documents: list[dict[str, object]], pid: int) -> dict[str, object]:
    return next(d for d in documents if d["pid"] == pid)


def test_a_server_that_accepts_and_never_answers_is_unhealthy_everywhere(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    try:
        with serving({"/health": [Answer(hang=True)]}, sock=sock):
            engine = procs.start(
                ["llama-server", "-m", "/models/mute", "--port", str(port)], (sock.fileno(),)
            )
            [process] = _scanned([engine.pid])
            # (ps asked of this engine alone: checking every engine of a busy host, the deadline
            # may rightly cut its check before a slot is free)
            listed = enginespec("ps", str(engine.pid), "-o", "json", "--timeout", "2")
            assert listed.returncode == 0, listed.stderr
            health = _mine(json.loads(listed.stdout), engine.pid)["health"]
            _unanswered(health["state"], health["reason"])  # type: ignore[index]
            checked = enginespec("health", str(engine.pid), "--json", "--timeout", "2")
            assert checked.returncode == 1
            said = json.loads(checked.stdout)
            assert said["state"] == "unhealthy"
            assert said["reason"] == health["reason"]
            described = enginespec("describe", str(engine.pid), "--json", "--timeout", "2")
            assert described.returncode == 0, described.stderr
            shown = json.loads(described.stdout)["health"]
            assert (shown["state"], shown["reason"]) == ("unhealthy", said["reason"])
            [alone] = check_all([process])
            _unanswered(alone.state, alone.reason)
            # the exporter checks every engine of the host: refreshed until one round reached
            # this engine's check (a busy host's other engines may hold every slot in one)
            refresher = Refresher(interval=2.0, refresh_now=False)
            exported: list[object] = []

            def reached() -> bool:
                refresher.refresh()
                snapshot = refresher.collector.snapshot
                assert snapshot.healths is not None
                found = dict(zip((p.pid for p in snapshot.processes), snapshot.healths, strict=True))
                exported[:] = [found.get(engine.pid)]
                return exported[0] is not None and not exported[0].reason.startswith("not checked")  # type: ignore[attr-defined]

            wait_for(reached, timeout=60)
            _unanswered(exported[0].state, exported[0].reason)  # type: ignore[attr-defined]
            snapshot = refresher.collector.snapshot
            at = [p.pid for p in snapshot.processes].index(engine.pid)
            series = _series(generate_latest(refresher.registry))
            engine_id = snapshot.ids[at]
            assert _value(series, "enginespec_engine_state", engine_id=engine_id, state="unhealthy") == 1
            assert _value(series, "enginespec_engine_ready", engine_id=engine_id) == 0
            event = _watched_state(engine.pid)
            _unanswered(event.type, event.health.reason)
    finally:
        sock.close()
