"""Watching: ``Scanner.watch`` / ``watch_async`` and ``enginespec watch`` see real engine-like
processes start, change and stop, through the kernel's process events and through polling, and
health transitions of a real loopback server. Every JSON line is checked against the schema."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import enginespec
from enginespec import (
    BACKEND,
    Changed,
    HealthChanged,
    Started,
    Stopped,
    WatchEvent,
    event_json,
    event_schema,
    parse_event,
)
from enginespec.scanning.watch import CHANGED_FIELDS, EngineIdentity, diff
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.procs import Procs, kernel_keeps_exit_statuses, rewrites, send_when_handled

LOADING = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
MODES = ["events", "poll"]


@functools.cache
def _connector() -> bool:
    """Whether the kernel answers this process's subscription (root in the initial namespaces)."""
    watch = enginespec.Scanner().watch()
    watch.close()
    return watch.mode == "events"


def _mine(event: WatchEvent, pids: set[int]) -> bool:
    pid = event.identity.pid if isinstance(event, Stopped) else event.process.pid
    return pid in pids


def _until(events: Iterator[WatchEvent], wanted: Any, timeout: float = 20.0) -> WatchEvent:
    """The first event for which ``wanted`` holds (the watch runs on threads; the iterator blocks,
    so a deadline is checked between events of other processes on this shared host)."""
    deadline = time.monotonic() + timeout
    for event in events:
        if wanted(event):
            return event
        assert time.monotonic() < deadline, "the event never came"
    raise AssertionError("the watch ended")


def _check_against_schema(document: dict[str, Any], schema: dict[str, Any]) -> None:
    """The document's keys are those its ``type``'s model declares, the required ones present."""
    mapping = schema["discriminator"]["mapping"]
    assert document["type"] in mapping, document["type"]
    model = schema["$defs"][mapping[document["type"]].rsplit("/", 1)[-1]]
    assert set(model["required"]) <= set(document), (model["required"], sorted(document))
    assert set(document) <= set(model["properties"]), sorted(document)
    assert isinstance(document["monotonic"], float)


@pytest.mark.parametrize("mode", MODES)
def test_watch_sees_an_engine_start_and_stop(procs: Procs, mode: str) -> None:
    watch = enginespec.Scanner().watch(0.2, poll=mode == "poll")
    expected = "events" if mode == "events" and BACKEND == "native" and _connector() else "polling"
    assert watch.mode == expected, watch.polling_reason
    events = iter(watch)
    try:
        port = free_port()
        proc = procs.start(["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(port)])
        started = _until(events, lambda e: isinstance(e, Started) and e.process.pid == proc.pid)
        assert isinstance(started, Started)
        assert (started.process.model, started.process.port) == ("Qwen/Qwen3-8B", port)
        procs.stop(proc)
        stopped = _until(events, lambda e: _mine(e, {proc.pid}))
        assert isinstance(stopped, Stopped)
        assert stopped.identity.instance_id == started.process.instance_id
        assert stopped.identity.start_time == started.process.start_time
        assert stopped.monotonic >= started.monotonic
    finally:
        watch.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_stopped_engine_says_how_it_ended(procs: Procs, mode: str) -> None:
    """An engine that exits 3 (a zombie until this test reaps it, after the event), one killed
    and reaped at once (only the pidfd the watch held still knows: Linux 6.15+), and one that
    runs on as a program that is no engine server (it has not ended)."""
    watch = enginespec.Scanner().watch(0.2, poll=mode == "poll")
    events = iter(watch)
    try:
        failing = procs.start(
            ["llama-server", "-m", "a.gguf", "--port", str(free_port())], HELPER_EXIT_ON_USR2="3"
        )
        killed = procs.start(["llama-server", "-m", "b.gguf", "--port", str(free_port())])
        renamed = procs.start(
            ["llama-server", "-m", "c.gguf", "--port", str(free_port())],
            HELPER_REWRITE=rewrites(["sleep", "600"]),
        )
        pids = {failing.pid, killed.pid, renamed.pid}
        seen: set[int] = set()
        while seen != pids:
            started = _until(events, lambda e: isinstance(e, Started) and _mine(e, pids))
            assert isinstance(started, Started)
            seen.add(started.process.pid)
        send_when_handled(failing, signal.SIGUSR2)
        first = _until(events, lambda e: _mine(e, {failing.pid}))
        assert isinstance(first, Stopped)
        assert (first.exited, first.status, first.signal, first.describe()) == (True, 3, None, "exited 3")
        assert failing.wait(timeout=10) == 3
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.wait(timeout=10) == -signal.SIGKILL  # reaped before the watch may look
        second = _until(events, lambda e: _mine(e, {killed.pid}))
        assert isinstance(second, Stopped)
        assert second.exited
        if kernel_keeps_exit_statuses():
            assert (second.status, second.signal, second.describe()) == (
                None,
                signal.SIGKILL,
                "exited (SIGKILL)",
            )
        send_when_handled(renamed, signal.SIGUSR1)
        third = _until(events, lambda e: _mine(e, {renamed.pid}))
        assert isinstance(third, Stopped)
        assert (third.exited, third.status, third.signal, third.describe()) == (False, None, None, "stopped")
        assert renamed.poll() is None
        # read back from its JSON form as an agent's stream gives it
        assert parse_event(event_json(first)) == first
    finally:
        watch.close()


def test_another_agents_stopped_event_is_held_to_a_wait_statuss_range() -> None:
    line = event_json(
        Stopped(
            monotonic=1.0,
            identity=EngineIdentity(instance_id="llamacpp-1", pid=5, start_time=1.0, engine="llamacpp"),
            exited=True,
            signal=9,
        )
    )
    for bad in (
        ('"signal":9', '"signal":0'),
        ('"signal":9', '"signal":100000000000000000000'),
        (
            '"status":null',
            '"status":256',
        ),
    ):
        with pytest.raises(ValueError, match=r"signal|status"):
            parse_event(line.replace(*bad))


def test_a_rewritten_argv_is_a_changed_event_naming_the_fields(procs: Procs) -> None:
    port, other = free_port(), free_port()
    rewritten = ["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(other), "--served-model-name", "q"]
    proc = procs.start(
        # a rewrite in place fits in the original argv's space
        ["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(port), "--served-model-name", "a-longer-name"],
        HELPER_REWRITE=rewrites(rewritten),
    )
    watch = enginespec.Scanner().watch(0.2)
    events = iter(watch)
    try:
        _until(events, lambda e: isinstance(e, Started) and e.process.pid == proc.pid)
        send_when_handled(proc, signal.SIGUSR1)
        changed = _until(events, lambda e: _mine(e, {proc.pid}))
        assert isinstance(changed, Changed)
        assert set(changed.fields) == {"served_model_names", "port", "base_url", "argv"}
        assert changed.process.port == other
    finally:
        watch.close()


def test_health_transitions_of_a_real_server(procs: Procs) -> None:
    routes = {"/health": [Answer(503, LOADING)] * 3 + [Answer(200, b'{"status":"ok"}')]}
    sock = bound_socket()  # the process holds the socket it answers on, as a real server does
    proc = procs.start(
        ["llama-server", "-m", "/m/a.gguf", "--port", str(sock.getsockname()[1])], pass_fds=(sock.fileno(),)
    )
    with serving(routes, sock=sock, origins=True):  # only this watch moves the script on
        # a round's budget of 5 s: on a busy host (the hostile zoo's hung engines, a loaded CI) a
        # round of the pure-Python fallback can take over a second, and this is about transitions
        watch = enginespec.Scanner().watch(0.2, health=True, health_interval=0.1, health_timeout=5)
        events = iter(watch)
        try:
            first = _until(events, lambda e: isinstance(e, HealthChanged) and e.process.pid == proc.pid)
            ready = _until(events, lambda e: isinstance(e, HealthChanged) and e.process.pid == proc.pid)
        finally:
            watch.close()
    assert isinstance(first, HealthChanged)
    assert isinstance(ready, HealthChanged)
    assert (first.type, first.previous) == ("loading", None)
    assert (ready.type, ready.previous, ready.health.http_status) == ("ready", "loading", 200)
    assert ready.monotonic > first.monotonic
    # the JSON form round-trips (private state, such as an API key, is never serialised) and is
    # checked against the schema
    assert parse_event(event_json(ready)).model_dump() == ready.model_dump()
    _check_against_schema(json.loads(event_json(ready)), event_schema())


def test_a_new_engine_is_checked_at_once_not_a_health_interval_later(procs: Procs) -> None:
    """With a 5-minute health interval, an engine that starts after the watch's first round gets
    its health when it is seen (its `started` wakes the health thread)."""
    routes = {"/health": [Answer(200, b'{"status":"ok"}')]}
    sock = bound_socket()
    with serving(routes, sock=sock):
        anchor = procs.start(["llama-server", "-m", "/m/anchor.gguf", "--port", str(free_port())])
        watch = enginespec.Scanner().watch(0.2, health=True, health_interval=300, health_timeout=5)
        events = iter(watch)
        try:
            # the first round has run once the anchor's health is told (nothing listens on its port)
            _until(events, lambda e: isinstance(e, HealthChanged) and e.process.pid == anchor.pid)
            proc = procs.start(
                ["llama-server", "-m", "/m/late.gguf", "--port", str(sock.getsockname()[1])],
                pass_fds=(sock.fileno(),),
            )
            ready = _until(events, lambda e: isinstance(e, HealthChanged) and e.process.pid == proc.pid)
        finally:
            watch.close()
    assert isinstance(ready, HealthChanged)
    assert ready.type == "ready"


def test_a_new_engine_is_told_while_a_hung_servers_check_still_waits(procs: Procs) -> None:
    """A server that accepts and never answers (its socket listens, no one accepts) holds its own
    check until the timeout; an engine started meanwhile is checked beside it and told first."""
    hung = bound_socket()
    hung.listen(8)
    answering = bound_socket()
    with serving({"/health": [Answer(200, b'{"status":"ok"}')]}, sock=answering):
        stuck = procs.start(
            ["llama-server", "-m", "/m/stuck.gguf", "--port", str(hung.getsockname()[1])],
            pass_fds=(hung.fileno(),),
        )
        watch = enginespec.Scanner().watch(0.2, health=True, health_interval=300, health_timeout=30)
        events = iter(watch)
        try:
            _until(events, lambda e: isinstance(e, Started) and e.process.pid == stuck.pid)
            late = procs.start(
                ["llama-server", "-m", "/m/late.gguf", "--port", str(answering.getsockname()[1])],
                pass_fds=(answering.fileno(),),
            )
            told = _until(
                events, lambda e: isinstance(e, HealthChanged) and e.process.pid in (stuck.pid, late.pid)
            )
        finally:
            watch.close()
            hung.close()
    assert isinstance(told, HealthChanged)
    assert (told.process.pid, told.type) == (late.pid, "ready"), told


def test_an_engine_checked_beside_a_hung_server_is_checked_again_before_the_hung_one_ends(
    procs: Procs,
) -> None:
    """Both engines are checked in the watch's first batch; the hung one's check waits out its
    30 s timeout. The other's next checks do not wait for it: it goes from loading to ready (four
    checks) while the hung server has been told nothing (on a host of hung engines, such as
    other users', a batch's end is their timeout)."""
    hung = bound_socket()
    hung.listen(8)
    sock = bound_socket()
    routes = {"/health": [Answer(503, LOADING)] * 3 + [Answer(200, b'{"status":"ok"}')]}
    stuck = procs.start(
        ["llama-server", "-m", "/m/stuck.gguf", "--port", str(hung.getsockname()[1])],
        pass_fds=(hung.fileno(),),
    )
    proc = procs.start(
        ["llama-server", "-m", "/m/a.gguf", "--port", str(sock.getsockname()[1])], pass_fds=(sock.fileno(),)
    )
    with serving(routes, sock=sock, origins=True):  # only this watch moves the script on
        watch = enginespec.Scanner().watch(0.2, health=True, health_interval=0.1, health_timeout=30)
        events = iter(watch)
        told: list[HealthChanged] = []

        def ours_ready(event: WatchEvent) -> bool:
            if isinstance(event, HealthChanged) and event.process.pid in (stuck.pid, proc.pid):
                told.append(event)
            return bool(told) and told[-1].process.pid == proc.pid and told[-1].type == "ready"

        try:
            _until(events, ours_ready)
        finally:
            watch.close()
            hung.close()
    assert [(e.process.pid, e.type) for e in told] == [(proc.pid, "loading"), (proc.pid, "ready")]


def test_an_engine_is_never_checked_twice_at_once_when_a_hung_servers_batch_ends(procs: Procs) -> None:
    """An engine whose answers take 0.6 s is checked in turn beside a hung server; when the hung
    server's first batch ends (its 2 s timeout), the engine's check then in flight is not
    forgotten: no second check of it starts before that one ends."""
    hung = bound_socket()
    hung.listen(8)
    sock = bound_socket()
    stuck = procs.start(
        ["llama-server", "-m", "/m/stuck.gguf", "--port", str(hung.getsockname()[1])],
        pass_fds=(hung.fileno(),),
    )
    procs.start(
        ["llama-server", "-m", "/m/slow.gguf", "--port", str(sock.getsockname()[1])],
        pass_fds=(sock.fileno(),),
    )
    slow = {"/health": [Answer(200, b'{"status":"ok"}', delay=0.6)]}
    with serving(slow, sock=sock, origins=True) as server:  # this watch's requests alone are counted
        watch = enginespec.Scanner().watch(0.2, health=True, health_interval=0.1, health_timeout=2)
        events = iter(watch)
        try:
            _until(events, lambda e: isinstance(e, HealthChanged) and e.process.pid == stuck.pid, timeout=30)
            time.sleep(6)  # the hung server's first batch has ended; two of its later ones end meanwhile
        finally:
            watch.close()
            hung.close()
    assert len(server.script.ours) >= 4  # checked again and again meanwhile
    assert server.script.most_in_flight["/health"] == 1


def test_watch_async_yields_the_same_events(procs: Procs) -> None:
    proc = procs.start(["mlx_lm.server", "--model", "m", "--port", str(free_port())])

    async def main() -> list[WatchEvent]:
        seen: list[WatchEvent] = []
        async for event in enginespec.Scanner().watch_async(0.2):
            if _mine(event, {proc.pid}):
                seen.append(event)
                if not isinstance(event, Started):
                    break
                procs.stop(proc)
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), 30))
    assert [type(e) for e in seen] == [Started, Stopped]


def test_diff_names_what_changed_and_orders_stops_first() -> None:
    base = dict(
        engine="vllm",
        model="m",
        served_model_names=(),
        host=None,
        port=8000,
        effective_host="127.0.0.1",
        effective_port=8000,
        start_time=1.0,
        ppid=1,
        base_url="http://127.0.0.1:8000",
        argv=("vllm", "serve", "m"),
        exe=None,
        worker_pids=(),
        supervisor=None,
        listen_ports=(),
    )
    a = enginespec.EngineProcess(pid=10, **base)  # type: ignore[arg-type]
    gone = enginespec.EngineProcess(pid=11, **base)  # type: ignore[arg-type]
    a2 = a.model_copy(update={"worker_pids": (12,), "listen_ports": (8000,)})
    new = enginespec.EngineProcess(pid=13, **{**base, "start_time": 2.0})  # type: ignore[arg-type]
    events = diff({(10, 1.0): a, (11, 1.0): gone}, [a2, new], 5.0)
    assert [e.type for e in events] == ["stopped", "changed", "started"]
    assert isinstance(events[1], Changed)
    assert events[1].fields == ("worker_pids", "listen_ports")
    # the very same object: nothing changed, nothing compared
    assert diff({(10, 1.0): a}, [a], 6.0) == []
    # equal but rebuilt (a rescan): no event either
    assert diff({(10, 1.0): a}, [a.model_copy()], 6.0) == []
    assert set(CHANGED_FIELDS) <= set(enginespec.EngineProcess.model_fields)


def test_bad_intervals_are_errors_naming_the_field() -> None:
    with pytest.raises(enginespec.InvalidInputError, match="interval: must be a positive"):
        enginespec.Scanner().watch(0)
    with pytest.raises(enginespec.InvalidInputError, match="health_interval"):
        enginespec.Scanner().watch(1, health_interval=float("nan"))


# --- enginespec watch as a subprocess -------------------------------------------------------


class _Stream:
    """``enginespec watch ARGS`` running, its stdout read line by line with a deadline."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "enginespec.cli", "watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = b""
        # the first stderr line says how it watches
        self.how = self.proc.stderr.readline().decode()

    def line(self, timeout: float = 20.0) -> bytes:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no line in time"
            if self.selector.select(left):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    assert self.proc.stderr is not None
                    raise AssertionError(f"the watch ended: {self.proc.stderr.read().decode()}")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def until(self, wanted: Any) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            document: dict[str, Any] = json.loads(self.line())
            _check_against_schema(document, SCHEMA)
            parse_event(json.dumps(document))
            if wanted(document):
                return document
        raise AssertionError("the event never came")

    def interrupt(self) -> tuple[int, bytes]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, err


SCHEMA = event_schema()


def _who(document: dict[str, Any]) -> dict[str, Any]:
    """The process an event is about (a stopped one's identity)."""
    who: dict[str, Any] = document["identity"] if document["type"] == "stopped" else document["process"]
    return who


def _pid_of(document: dict[str, Any]) -> int:
    return int(_who(document)["pid"])


def test_watch_keeps_the_engines_its_terms_and_filters_name(procs: Procs) -> None:
    """As `ps` does: `watch PID` and `watch --filter engine=...` stream only those engines'
    events (their stop too); the host's other engines are not shown."""
    mine = procs.start(["vllm", "serve", "mine", "--port", str(free_port())])
    stream = _Stream("--json", "--no-health", "--interval", "200ms", str(mine.pid))
    try:
        other = procs.start(["vllm", "serve", "other", "--port", str(free_port())])
        started = stream.until(lambda d: d["type"] == "started")
        assert _pid_of(started) == mine.pid
        procs.stop(other)
        procs.stop(mine)
        stopped = stream.until(lambda d: d["type"] == "stopped")
        assert _pid_of(stopped) == mine.pid
    finally:
        code, _err = stream.interrupt()
    assert code == 0
    stream = _Stream("--json", "--no-health", "--interval", "200ms", "--filter", "engine=sglang")
    try:
        procs.start(["vllm", "serve", "m", "--port", str(free_port())])
        sglang = procs.start(
            ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", str(free_port())]
        )
        seen: list[dict[str, Any]] = []

        def ours_seen(document: dict[str, Any]) -> bool:
            seen.append(document)
            return _pid_of(document) == sglang.pid

        stream.until(ours_seen)
        # the host's own sglang too, its stop among them
        assert {_who(d)["engine"] for d in seen} == {"sglang"}
    finally:
        stream.interrupt()
    refused = subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "watch", "--filter", "colour=red"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode == 2
    assert "--filter: 'colour=red' is not KEY=VALUE" in refused.stderr


@pytest.mark.parametrize("mode", MODES)
def test_watch_json_streams_a_start_and_a_stop(procs: Procs, mode: str) -> None:
    stream = _Stream("--json", "--no-health", "--interval", "200ms", *(["--poll"] if mode == "poll" else []))
    try:
        native_events = mode == "events" and BACKEND == "native" and _connector()
        assert stream.how.startswith(
            "enginespec watch: process events" if native_events else "enginespec watch: polling"
        )
        proc = procs.start(["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30123"])
        started = stream.until(lambda d: d["type"] == "started" and _pid_of(d) == proc.pid)
        assert started["process"]["engine"] == "sglang"
        assert started["process"]["port"] == 30123
        procs.stop(proc)
        stopped = stream.until(lambda d: _pid_of(d) == proc.pid)
        assert stopped["type"] == "stopped"
        assert stopped["identity"]["engine_id"] == started["process"]["engine_id"]
    finally:
        code, err = stream.interrupt()
    assert code == 0, err
    assert b"Traceback" not in err


def test_watch_piped_says_how_a_stopped_engine_ended(procs: Procs) -> None:
    stream = _Stream("--no-health", "--interval", "200ms")
    try:
        proc = procs.start(
            ["llama-server", "-m", "m.gguf", "--port", str(free_port())], HELPER_EXIT_ON_USR2="1"
        )
        while not stream.line().startswith(f"started {proc.pid} ".encode()):
            pass
        send_when_handled(proc, signal.SIGUSR2)
        while not (line := stream.line()).startswith(f"stopped {proc.pid} ".encode()):
            pass
        assert line.endswith(b" exited 1"), line
        assert proc.wait(timeout=10) == 1
    finally:
        code, err = stream.interrupt()
    assert code == 0, err


def test_a_polling_watch_sees_the_exec_of_a_process_born_just_before_it(procs: Procs) -> None:
    # An engine launched as the watch starts: its first scan catches the process between fork
    # and exec, showing another program's argv; the exec (released once that scan is done, which
    # the marker's event says) must still be seen.
    target = ["python3", "-m", "sglang.launch_server", "--model-path", "early/m", "--port", "30125"]
    code = f"import os, sys; sys.stdin.readline(); os.execv({str(procs.helper)!r}, {target!r})"
    early = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, start_new_session=True)
    procs.started.append(early)  # type: ignore[arg-type]
    marker = procs.start(["llama-server", "-m", "/m/marker.gguf", "--port", str(free_port())])
    stream = _Stream("--json", "--no-health", "--interval", "100ms", "--poll")
    try:
        stream.until(lambda d: d["type"] == "started" and _pid_of(d) == marker.pid)
        assert early.stdin is not None
        early.stdin.write(b"go\n")
        early.stdin.flush()
        started = stream.until(lambda d: d["type"] == "started" and _pid_of(d) == early.pid)
        assert (started["process"]["engine"], started["process"]["model"]) == ("sglang", "early/m")
    finally:
        code, err = stream.interrupt()
    assert code == 0, err


def test_watch_json_streams_argv_that_is_not_utf8(procs: Procs) -> None:
    model = os.fsdecode(b"/m/caf\xe9-\xff.gguf")  # surrogate escapes, as read from /proc
    stream = _Stream("--json", "--no-health", "--interval", "100ms")
    try:
        proc = procs.start(["llama-server", "-m", model, "--port", str(free_port())])
        started = stream.until(lambda d: d["type"] == "started" and _pid_of(d) == proc.pid)
        assert started["process"]["model"] == model
        assert parse_event(json.dumps(started)).process.model == model  # type: ignore[union-attr]
    finally:
        code, err = stream.interrupt()
    assert code == 0, err


def test_watch_survives_processes_appearing_and_vanishing(procs: Procs) -> None:
    stream = _Stream("--json", "--no-health", "--interval", "100ms")
    stop = threading.Event()

    def churn() -> None:  # short-lived processes vanish under the scanner all along
        while not stop.is_set():
            subprocess.run(["true"], check=False, timeout=120)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        ours = [
            procs.start(["llama-server", "-m", f"/m/{i}.gguf", "--port", str(18300 + i)]) for i in range(6)
        ]
        pids = [p.pid for p in ours]
        started = {_pid_of(stream.until(lambda d: _pid_of(d) in pids)) for _ in pids}
        assert started == set(pids)
        for proc in ours[:3]:
            procs.stop(proc)
        stopped = [stream.until(lambda d: _pid_of(d) in pids) for _ in range(3)]
        assert [d["type"] for d in stopped] == ["stopped"] * 3
        assert {_pid_of(d) for d in stopped} == set(pids[:3])
        assert stream.proc.poll() is None
    finally:
        stop.set()
        churner.join()
        code, _ = stream.interrupt()
    assert code == 0


def test_watch_piped_into_head_exits_quietly(procs: Procs) -> None:
    head = subprocess.Popen(
        f"{sys.executable} -m enginespec.cli watch --json --no-health --interval 100ms | head -n 1",
        shell=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        proc = procs.start(["vllm", "serve", "m", "--port", str(free_port())])
        # head leaves after one line; the watch learns it at its next write: more events
        deadline = time.monotonic() + 30
        while head.poll() is None and time.monotonic() < deadline:
            procs.stop(proc)
            proc = procs.start(["vllm", "serve", "m", "--port", str(free_port())])
            time.sleep(0.3)
        out, err = head.communicate(timeout=30)
    finally:  # the shell, head and the watch: the pipeline's own process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
    assert head.returncode == 0
    assert len(out.splitlines()) == 1
    json.loads(out)
    assert b"Traceback" not in err
    assert b"Broken pipe" not in err
