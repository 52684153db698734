"""`ps --remote` and `watch --remote` against agents that lie: fake agents on 127.0.0.1 answer
numbers that are not finite or not in range, and announce engines without end. One host's bad
answer is that host's error alone (the others are shown), a watch keeps only what its filter
shows, its table is never drawn while it changes, and an engine keeps its own `host` (the agent's
address is `agent`)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rich.console import Console

import enginespec.cli.watch as cli
from enginespec import EngineProcess, Health
from enginespec.cli.filters import Filters
from enginespec.cli.pstable import Shown
from enginespec.scanning.scanner import engine_document
from enginespec.scanning.watch import Started, event_json
from fleet.test_feeds import made_engine
from helpers.cli import run
from helpers.fakeserver import Answer, serving
from helpers.procs import stop_child

#: a start time no engine has, replaced in the encoded answer by the literal under test
MARK = 1234.5


def _engine(pid: int, port: int, **update: object) -> EngineProcess:
    """An engine of another host: it listens on all its interfaces (its own ``host``)."""
    fields = {"pid": pid, "start_time": 1_700_000_000.0, "host": "0.0.0.0", "effective_host": "0.0.0.0"}
    return made_engine(port).model_copy(update={**fields, **update})


def _answer(*processes: EngineProcess) -> bytes:
    healths = [
        Health(engine=p.engine, base_url=p.base_url, state="ready", http_status=200) for p in processes
    ]
    return json.dumps([engine_document(p, h) for p, h in zip(processes, healths, strict=True)]).encode()


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} in the output")

    return json.loads(text, parse_constant=refuse)


BAD_NUMBERS = [
    pytest.param(b'"start_time": 1234.5', b'"start_time": 1e999', "start_time", id="1e999"),
    pytest.param(b'"start_time": 1234.5', b'"start_time": NaN', "start_time", id="NaN"),
    pytest.param(b'"start_time": 1234.5', b'"start_time": -Infinity', "start_time", id="-Infinity"),
    pytest.param(b'"pid": 4243', b'"pid": ' + b"9" * 400, "pid", id="400-digits"),
    pytest.param(b'"pid": 4243', b'"pid": -5', "pid", id="negative-pid"),
    pytest.param(b'"port": 18202', b'"port": 99999', "port", id="port"),
]


@pytest.mark.parametrize(("good", "bad", "field"), BAD_NUMBERS)
def test_a_bad_number_is_that_hosts_error_and_the_others_are_shown(
    good: bytes, bad: bytes, field: str
) -> None:
    """A non-finite start ended `ps --remote` for every host (OverflowError/ValueError while the
    table's ages were computed)."""
    lying = _answer(_engine(4243, 18202, start_time=MARK))
    assert good in lying
    with (
        serving({"/v1/engines": [Answer(200, _answer(_engine(4242, 18201)))]}) as honest,
        serving({"/v1/engines": [Answer(200, lying.replace(good, bad))]}) as liar,
    ):
        table = run("ps", "--remote", f"{honest.url},{liar.url}")
        as_json = run("ps", "--remote", f"{honest.url},{liar.url}", "--json")
    for done in (table, as_json):
        assert done.returncode == 1, done.stderr
        (said,) = [line for line in done.stderr.splitlines() if liar.url in line]
        assert said.startswith(f"enginespec ps: {liar.url}: not an agent's answer"), said
        assert field in said
        assert "Traceback" not in done.stderr
    assert any("4242" in line for line in table.stdout.splitlines()[1:])
    assert "4243" not in table.stdout
    documents = _strict(as_json.stdout)
    assert [(d["agent"], d["pid"]) for d in documents] == [(honest.url, 4242)]  # type: ignore[index, union-attr]


def test_the_engines_own_host_is_kept_and_the_agent_has_its_own_field() -> None:
    with serving({"/v1/engines": [Answer(200, _answer(_engine(4242, 18203)))]}) as agent:
        done = run("ps", "--remote", agent.url, "--json")
    assert done.returncode == 0, done.stderr
    (document,) = json.loads(done.stdout)
    assert document["host"] == "0.0.0.0"  # where it listens, on its host: as that host's ps says
    assert document["agent"] == agent.url


def _stream(*processes: EngineProcess) -> bytes:
    return b"".join(
        f"id: {i}\nevent: started\ndata: {event_json(Started(monotonic=1.0, process=p))}\n\n".encode()
        for i, p in enumerate(processes, 1)
    )


@contextmanager
def _watching(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], list[dict[str, object]]]]:
    """`enginespec watch --json ARGS`, and the objects it printed so far (read on a thread)."""
    watcher = subprocess.Popen(
        [sys.executable, "-m", "enginespec.cli", "watch", "--json", "--timeout", "5", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    seen: list[dict[str, object]] = []
    reader = threading.Thread(
        target=lambda: seen.extend(_strict(line.decode()) for line in watcher.stdout or ()),  # type: ignore[misc]
        daemon=True,
    )
    reader.start()
    try:
        yield watcher, seen
    finally:
        stop_child(watcher, signal.SIGINT)
        reader.join(timeout=30)


def _until(what: str, predicate: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_watch_remote_loses_the_host_that_sends_a_bad_number_and_goes_on() -> None:
    """Before, the bad event was printed as `Infinity` (not JSON), and drawn it stopped the table."""
    lying = _stream(_engine(4245, 18205, start_time=MARK)).replace(
        b'"start_time":1234.5', b'"start_time":1e999'
    )
    assert b"1e999" in lying
    events = {"content_type": "text/event-stream"}
    with (
        serving({"/v1/events": [Answer(200, _stream(_engine(4244, 18204)), **events)]}) as honest,  # type: ignore[arg-type]
        serving({"/v1/events": [Answer(200, lying, **events)]}) as liar,  # type: ignore[arg-type]
        _watching("--remote", f"{honest.url},{liar.url}") as (watcher, seen),
    ):

        def lost() -> list[dict[str, object]]:
            return [e for e in list(seen) if e["type"] == "host_lost" and e["agent"] == liar.url]

        _until(
            "the lying agent is lost", lambda: any("not a finite number" in str(e["error"]) for e in lost())
        )
        _until(
            "the honest agent's engine is shown",
            lambda: any(e["agent"] == honest.url and e["type"] == "started" for e in list(seen)),
        )
        assert watcher.poll() is None
    assert not [e for e in seen if e.get("agent") == liar.url and e["type"] == "started"]
    (error,) = {str(e["error"]) for e in lost() if "not a finite number" in str(e["error"])}
    assert error == "not an agent's event: event.process.start_time: inf is not a finite number"


class _Announcer(BaseHTTPRequestHandler):
    """An agent that announces ``count`` engines with a big argv between two marker engines
    (sglang, pids 1 and 2) on ``/v1/events``, then holds the stream open."""

    count = 0
    stop = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        marker = {"engine": "sglang", "argv": ("python", "-m", "sglang.launch_server")}
        big = ("vllm", "serve", "x" * 256_000)
        try:
            self.wfile.write(_stream(_engine(1, 30001, **marker)))
            for pid in range(1000, 1000 + self.count):
                self.wfile.write(_stream(_engine(pid, 18300, argv=big)))
            self.wfile.write(_stream(_engine(2, 30002, **marker)))
            self.wfile.flush()
            self.stop.wait(120)
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass


def _memory(pid: int) -> int:
    """The resident set of ``pid``, bytes."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_watch_remote_keeps_only_what_its_filter_shows() -> None:
    """1,000 engines of 256 KB each that the filter does not show: the watch grew by all of them
    (every engine an agent announced was kept), now by none."""
    handler = type("Handler", (_Announcer,), {"count": 1000, "stop": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with _watching("--remote", url, "sglang") as (watcher, seen):

            def marked(pid: int) -> bool:
                return any(e["type"] == "started" and e["process"]["pid"] == pid for e in list(seen))  # type: ignore[index]

            _until("the first marker", lambda: marked(1))
            before = _memory(watcher.pid)
            _until("the second marker, after every engine", lambda: marked(2))
            grown = _memory(watcher.pid) - before
            print(
                f"\nwatch --remote after 1,000 engines of 256 KB it does not show: {grown / 2**20:+.1f} MiB"
            )
            assert grown < 64 * 2**20
            assert [e["process"]["pid"] for e in seen] == [1, 2]  # type: ignore[index]
    finally:
        handler.stop.set()
        server.shutdown()
        server.server_close()


class _Interleaving(Filters):
    """Lets the watch's thread apply an event at the moment the drawing thread looks at a row (as
    rich's refresh thread and the watch's thread meet by chance), once armed."""

    def __init__(self) -> None:
        super().__init__()
        self.drawer = threading.get_ident()
        self.armed = False
        self.drawing = threading.Event()
        self.applied = threading.Event()

    def keeps(self, row: Shown, *, checked: bool = True) -> bool:
        if self.armed and threading.get_ident() == self.drawer and not self.applied.is_set():
            self.drawing.set()
            self.applied.wait(10)
        return super().keeps(row, checked=checked)


def test_the_live_table_is_never_drawn_while_it_changes() -> None:
    """rich's refresh thread drew the table while the watch's thread applied events: `dictionary
    changed size during iteration` ended the refresh thread, and the table stood still."""
    agent = "http://agent:9465"
    filters = _Interleaving()
    table = cli._LiveTable("events of 1 agent(s)", True, filters)
    table.apply(Started(monotonic=1.0, process=_engine(4301, 18401)), agent)
    filters.armed = True

    def apply() -> None:
        filters.drawing.wait(1)  # the drawing thread is at a row, if it looks at rows while drawing
        table.apply(Started(monotonic=1.0, process=_engine(4302, 18402)), agent)
        filters.applied.set()

    applier = threading.Thread(target=apply, daemon=True)
    applier.start()
    out = io.StringIO()
    try:
        Console(file=out, width=160, height=40).print(table)
    finally:
        filters.applied.set()
        applier.join(timeout=30)
    Console(file=out, width=160, height=40).print(table)
    assert "2 engine server(s)" in out.getvalue()


@pytest.mark.parametrize(
    "models",
    [
        pytest.param({"models": [{"name": "x" * 5000, "state": "loaded"}]}, id="a-huge-name"),
        pytest.param({"models": [{"name": "m", "state": "exploded"}]}, id="a-state-no-engine-has"),
        pytest.param({"models": [{"name": "m", "state": "loaded", "runner_pid": 1 << 30}]}, id="runner-pid"),
        pytest.param({"models": [{"name": "m", "state": "loaded", "port": 99999}]}, id="port"),
        pytest.param({"models": [{"name": "m", "state": "loaded"}] * 2000}, id="too-many-models"),
    ],
)
def test_an_agents_served_models_it_could_not_have_read_are_that_hosts_error(
    models: dict[str, object],
) -> None:
    """What an agent says an engine serves is held to what a reading makes (names of at most 1 KiB,
    the five states, pids and ports in range, at most 1024 models): else it is that host's
    error, the honest host shown."""
    lying = json.loads(_answer(_engine(4243, 18204)))
    lying[0]["models"] = {"engine": "vllm", "available": True, "read_at": 1.0, **models}
    honest = json.loads(_answer(_engine(4242, 18205)))
    honest[0]["models"] = {
        "engine": "vllm", "available": True, "read_at": 1.0, "models": [{"name": "qwen", "state": "sleeping"}]
    }  # fmt: skip
    with (
        serving({"/v1/engines": [Answer(200, json.dumps(honest).encode())]}) as good,
        serving({"/v1/engines": [Answer(200, json.dumps(lying).encode())]}) as liar,
    ):
        done = run("ps", "--remote", f"{good.url},{liar.url}", "--json")
    assert done.returncode == 1, done.stderr
    (said,) = [line for line in done.stderr.splitlines() if liar.url in line]
    assert said.startswith(f"enginespec ps: {liar.url}: not an agent's answer"), said
    assert "Traceback" not in done.stderr
    documents = _strict(done.stdout)
    assert [(d["pid"], d["models"]["models"][0]["state"]) for d in documents] == [(4242, "sleeping")]  # type: ignore[index, union-attr]
