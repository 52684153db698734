"""`enginespec serve` (the read-only agent) and `enginespec ps --remote` (one view over many hosts),
run as operators run them: real agents on loopback and on a unix socket, fake engines that are
real processes, a fake agent of another host that is slow or gone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import enginespec.fleet.agent as agent_module
from enginespec import EngineProcess, Health
from enginespec.errors import InvalidInputError
from enginespec.fleet import remote
from enginespec.fleet.agent_views import SharedEvent
from enginespec.fleet.agent_wire import Peer
from enginespec.fleet.disclosure import EVERYTHING
from enginespec.scanning.scanner import engine_document
from enginespec.scanning.watch import Started, event_json
from fleet.test_feeds import METRICS, SECRET, fake_engine, made_engine
from helpers.cli import run
from helpers.fakeserver import Answer, free_port, models, serving
from helpers.procs import Procs, stop_child

READY = {"/health": [Answer(200)], "/v1/models": [models("/models/agent")], "/metrics": [METRICS]}
ARGV = ["vllm", "serve", "/models/agent", "--host", "127.0.0.1", "--port", "{port}", "--api-key", SECRET]


@contextmanager
def agent(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A running `enginespec agent ARGS`, and the line it said at start."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "enginespec.cli", "agent", "--interval", "200ms", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline().decode().strip()
        yield proc, first
    finally:
        stop_child(proc)


def _until(what: str, predicate: object, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = predicate()  # type: ignore[operator]
            if found:
                return found
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _token_file(directory: Path, token: str) -> Path:
    """A token file as the agent accepts it: the user's own, mode 0600."""
    path = directory / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def _mine(documents: list[dict[str, object]], port: int) -> dict[str, object] | None:
    return next((d for d in documents if d["effective_port"] == port), None)


def test_it_serves_engines_gpus_metrics_and_nothing_else(procs: Procs) -> None:
    port = free_port()
    with fake_engine(procs, ARGV, READY) as engine_port, agent("--listen", f"127.0.0.1:{port}") as (_, said):
        assert (
            said == f"enginespec agent: Listening on address=127.0.0.1:{port} (http; no token: loopback only)"
        )
        base = f"http://127.0.0.1:{port}"

        def ready() -> dict[str, object] | None:
            found = _mine(httpx.get(f"{base}/v1/engines", timeout=5).json(), engine_port)
            return found if found and found["health"]["state"] == "ready" else None  # type: ignore[index]

        document = _until("the agent reports the engine ready", ready)
        assert isinstance(document, dict)
        assert document["engine"] == "vllm"
        assert document["model"] == "/models/agent"
        assert httpx.get(f"{base}/v1/gpus", timeout=5).json() == []  # this host has none
        metrics = httpx.get(f"{base}/metrics", timeout=5)
        assert f'engine_id="{document["engine_id"]}"' in metrics.text
        assert metrics.headers["content-type"].startswith("text/plain")
        for path in ("/v1/engines", "/metrics", "/v1/gpus"):
            assert SECRET not in httpx.get(f"{base}{path}", timeout=5).text
        assert httpx.get(f"{base}/nothing", timeout=5).status_code == 404
        refused = httpx.post(f"{base}/v1/engines", content=b"{}", timeout=5)
        assert refused.status_code == 405
        assert refused.headers["allow"] == "GET, HEAD"
        # headers beyond the cap are refused, and the agent goes on
        assert httpx.get(f"{base}/v1/engines", headers={"x-big": "a" * 20_000}, timeout=5).status_code == 431
        assert httpx.get(f"{base}/v1/engines", timeout=5).status_code == 200


def _events(url: str, stop: threading.Event, found: list[tuple[int, str, dict[str, object]]]) -> None:
    with (
        contextlib.suppress(httpx.HTTPError),
        httpx.stream("GET", url, timeout=httpx.Timeout(5, read=60)) as answer,
    ):
        frame: dict[str, str] = {}
        for line in answer.iter_lines():
            if stop.is_set():
                return
            if not line:
                if "data" in frame:
                    found.append((int(frame["id"]), frame["event"], json.loads(frame["data"])))
                frame = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                frame[key] = value


def test_events_stream_in_order_from_what_runs(procs: Procs) -> None:
    port = free_port()
    with fake_engine(procs, ARGV, READY) as first, agent("--listen", f"127.0.0.1:{port}"):
        url = f"http://127.0.0.1:{port}/v1/events"
        _until(
            "the agent sees the first engine",
            lambda: _mine(httpx.get(f"http://127.0.0.1:{port}/v1/engines", timeout=5).json(), first),
        )
        found: list[tuple[int, str, dict[str, object]]] = []
        stop = threading.Event()
        reader = threading.Thread(target=_events, args=(url, stop, found), daemon=True)
        reader.start()
        try:

            def port_of(event: dict[str, object]) -> object:
                return event.get("process", {}).get("effective_port")  # type: ignore[union-attr]

            _until("the running engine is told first", lambda: any(port_of(e) == first for _, _, e in found))
            with fake_engine(procs, ARGV, READY) as second:
                _until(
                    "a new engine is started, then ready",
                    lambda: any(t == "ready" and port_of(e) == second for _, t, e in found),
                )
                pid = next(e["process"]["pid"] for _, _, e in found if port_of(e) == second)  # type: ignore[index]

            def ours(event: dict[str, object]) -> bool:  # other engines start and stop on this host
                return port_of(event) == second or event.get("identity", {}).get("pid") == pid  # type: ignore[attr-defined]

            _until("it is stopped", lambda: any(t == "stopped" and ours(e) for _, t, e in found))
        finally:
            stop.set()
        ids = [n for n, _, _ in found]
        assert ids == list(range(ids[0], ids[0] + len(ids)))  # in order, none lost
        types = [t for _, t, e in found if ours(e)]
        assert types.index("started") < types.index("ready") < types.index("stopped")
        assert all(SECRET not in json.dumps(e) for _, _, e in found)


def test_off_loopback_a_token_is_required_and_compared(tmp_path: Path, procs: Procs) -> None:
    done = run("agent", "--listen", "0.0.0.0:0")
    assert done.returncode == 1
    assert "--listen 0.0.0.0:0: not loopback, so a token is required: give --token-file" in done.stderr
    token = _token_file(tmp_path, "s3cret-token-" + "x" * 32)
    port = free_port()
    with agent("--listen", f"0.0.0.0:{port}", "--token-file", str(token)) as (_, said):
        assert said == f"enginespec agent: Listening on address=0.0.0.0:{port} (http; token required)"
        base = f"http://127.0.0.1:{port}/v1/engines"
        _until("the agent answers", lambda: httpx.get(base, timeout=5).status_code == 401)
        assert httpx.get(base, headers={"authorization": "Bearer wrong"}, timeout=5).status_code == 401
        good = httpx.get(base, headers={"authorization": "Bearer s3cret-token-" + "x" * 32}, timeout=5)
        assert good.status_code == 200
        listed = run("ps", "--remote", f"http://127.0.0.1:{port}", "--token-file", str(token))
        assert listed.returncode == 0, listed.stderr
        refused = run("ps", "--remote", f"http://127.0.0.1:{port}")
        assert refused.returncode == 1
        assert f"enginespec ps: http://127.0.0.1:{port}: HTTP 401: a token is required" in refused.stderr


def test_a_unix_socket_is_its_owners_only(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "agent.sock"
    with fake_engine(procs, ARGV, READY) as engine_port, agent("--listen", f"unix:{path}") as (_, said):
        assert said == f"enginespec agent: Listening on address=unix:{path} (http; no token: loopback only)"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

        def listed() -> bool:
            done = run("ps", "--remote", f"unix:{path}", "--json")
            return done.returncode == 0 and _mine(json.loads(done.stdout), engine_port) is not None

        _until("ps --remote reads the agent on its socket", listed)
    assert not path.exists()  # removed when the agent stops


def test_tls_with_a_certificate_and_key(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *(
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
            ),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    port = free_port()
    with agent("--listen", f"127.0.0.1:{port}", "--certfile", str(cert), "--keyfile", str(key)) as (_, said):
        assert said.endswith("(https; no token: loopback only)")
        answer = _until(
            "the agent answers over TLS",
            lambda: httpx.get(
                f"https://127.0.0.1:{port}/v1/engines",
                verify=ssl.create_default_context(cafile=str(cert)),
                timeout=5,
            ),
        )
        assert answer.status_code == 200  # type: ignore[attr-defined]
    done = run("agent", "--listen", "127.0.0.1:0", "--certfile", str(cert))
    assert done.returncode == 1
    assert "--certfile and --keyfile go together" in done.stderr


def _other_host(engine_port: int) -> bytes:
    """/v1/engines as another host's agent answers it: an engine there (pid 4242), ready."""
    process = made_engine(engine_port).model_copy(
        update={
            "pid": 4242,
            "start_time": 1_700_000_000.0,
            "engine": "llamacpp",
            "model": "/srv/models/other-host.gguf",
            "served_model_names": ("other-host.gguf",),
            "host": "0.0.0.0",
            "effective_host": "0.0.0.0",
            "argv": ("llama-server", "-m", "/srv/models/other-host.gguf"),
        }
    )
    health = Health(engine="llamacpp", base_url=process.base_url, state="ready", http_status=200)
    return json.dumps([engine_document(process, health)]).encode()


def test_ps_remote_merges_hosts_and_no_slow_or_dead_host_holds_the_others(procs: Procs) -> None:
    port = free_port()
    dead = free_port()  # nothing listens there
    with (
        fake_engine(procs, ARGV, READY) as engine_port,
        agent("--listen", f"127.0.0.1:{port}"),
        serving({"/v1/engines": [Answer(200, _other_host(18123))]}) as other,
        serving({"/v1/engines": [Answer(hang=True)]}) as slow,
    ):
        here = f"http://127.0.0.1:{port}"
        _until(
            "the agent sees the engine",
            lambda: _mine(httpx.get(f"{here}/v1/engines", timeout=5).json(), engine_port),
        )
        hosts = [here, other.url, slow.url, f"http://127.0.0.1:{dead}"]
        started = time.monotonic()
        done = run("ps", "--remote", ",".join(hosts), "--timeout", "5")  # the agent's scan, on a busy host
        took = time.monotonic() - started
        assert done.returncode == 1  # some hosts failed
        lines = done.stdout.splitlines()
        assert lines[0].split()[:3] == ["HOST", "PID", "ENGINE"]
        assert any(line.startswith(f"127.0.0.1:{port}") or here in line for line in lines[1:])
        assert any("other-host.gguf" in line and "4242" in line for line in lines[1:])
        errors = done.stderr.splitlines()
        assert f"enginespec ps: {slow.url}: no answer within 5s" in errors
        assert any(
            line.startswith(f"enginespec ps: http://127.0.0.1:{dead}: cannot reach it") for line in errors
        )
        assert SECRET not in done.stdout + done.stderr
        print(f"\nps --remote over 4 hosts, one hung: {took:.2f}s")
        as_json = json.loads(run("ps", "--remote", other.url, "--json").stdout)
        # the engine's own host (where it listens there); the agent's address in a field of its own
        assert [(d["agent"], d["host"], d["pid"]) for d in as_json] == [(other.url, "0.0.0.0", 4242)]


def test_remote_engines_are_never_read_against_this_hosts_proc() -> None:
    with serving({"/v1/engines": [Answer(200, _other_host(18124))]}) as other:
        (report,) = remote.fetch_remote([other.url])
    (engine,) = report.engines
    assert engine.agent == other.url
    assert engine.health is not None
    assert engine.health.state == "ready"
    assert engine.process.model_facts is None
    assert (
        engine.process.model_facts_problem
        == "an engine of another host: its model's files are not read from here"
    )


@pytest.mark.parametrize("url", ["ftp://h:1", "http://h", "unix:relative", "http://h:99999", "gpu1:9465"])
def test_a_remote_that_is_no_agents_address_is_refused(url: str) -> None:
    with pytest.raises(InvalidInputError, match="--remote"):
        remote.agent_url(url)
    done = run("ps", "--remote", url)
    assert done.returncode == 2
    assert "--remote" in done.stderr


@pytest.mark.parametrize(
    "answer", [b"not json", b'{"engines": 1}', b"[1]", b'[{"pid": "x"}]', b"[" * 100_000]
)
def test_an_answer_that_is_no_agents_is_that_hosts_error(answer: bytes) -> None:
    with serving({"/v1/engines": [Answer(200, answer)]}) as other:
        (report,) = remote.fetch_remote([other.url])
    assert report.engines == ()
    assert report.error is not None
    assert report.error.startswith("not an agent's answer")


def test_bad_listen_addresses_name_the_flag() -> None:
    for text, message in (
        ("localhost:9465", "is not ADDRESS:PORT (an IP address) or unix:PATH"),
        ("127.0.0.1:70000", "the port must be 0-65535"),
        ("unix:relative.sock", "a unix socket is unix:/absolute/path"),
    ):
        done = run("agent", "--listen", text)
        assert done.returncode == 1
        assert f"--listen: {text!r}" in done.stderr
        assert message in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = run("agent", "--listen", f"127.0.0.1:{busy}")
    assert done.returncode == 1
    assert f"--listen 127.0.0.1:{busy}: cannot listen: Address already in use" in done.stderr


def test_watch_remote_merges_the_agents_events_and_says_a_lost_host(procs: Procs) -> None:
    port, dead = free_port(), free_port()
    other_process = EngineProcess.model_validate(json.loads(_other_host(18125))[0])
    started = Started(monotonic=1.0, process=other_process)
    stream = f"id: 1\nevent: started\ndata: {event_json(started)}\n\n".encode()
    with (
        agent("--listen", f"127.0.0.1:{port}"),
        serving({"/v1/events": [Answer(200, stream, content_type="text/event-stream")]}) as other,
    ):
        here = f"http://127.0.0.1:{port}"
        watcher = subprocess.Popen(
            [
                *(sys.executable, "-m", "enginespec.cli", "watch", "--json", "--timeout", "2"),
                *("--remote", f"{here},{other.url},http://127.0.0.1:{dead}"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        seen: list[dict[str, object]] = []
        reader = threading.Thread(
            target=lambda: seen.extend(json.loads(line) for line in watcher.stdout or ()), daemon=True
        )
        reader.start()
        try:
            with fake_engine(procs, ARGV, READY) as engine_port:

                def ours(kind: str) -> bool:
                    return any(
                        e["type"] == kind
                        and e["host"] == here
                        and e["process"]["effective_port"] == engine_port  # type: ignore[index]
                        for e in list(seen)
                        if "process" in e
                    )

                _until("the agent's engine is started and ready", lambda: ours("started") and ours("ready"))
                pid = next(
                    e["process"]["pid"]  # type: ignore[index]
                    for e in list(seen)
                    if "process" in e and e["host"] == here and e["process"]["effective_port"] == engine_port  # type: ignore[index]
                )
            _until(
                "and stopped",
                lambda: any(
                    e["type"] == "stopped" and e["host"] == here and e["identity"]["pid"] == pid  # type: ignore[index]
                    for e in list(seen)
                ),
            )
            _until(
                "the other host's engine, and the dead host's loss",
                lambda: (
                    any(e["host"] == other.url and e["type"] == "started" for e in list(seen))
                    and any(
                        e["type"] == "host_lost" and e["host"] == f"http://127.0.0.1:{dead}"
                        for e in list(seen)
                    )
                ),
            )
        finally:
            stop_child(watcher, signal.SIGINT)
        assert watcher.returncode == 0
        lost = next(e for e in seen if e["type"] == "host_lost" and e["host"] == f"http://127.0.0.1:{dead}")
        assert str(lost["error"]).startswith("cannot reach it")
        assert all(SECRET not in json.dumps(e) for e in seen)


def test_control_needs_the_flag_and_a_token_and_stops_and_restarts(tmp_path: Path, procs: Procs) -> None:
    done = run("agent", "--listen", "127.0.0.1:0", "--allow-control")
    assert done.returncode == 1
    assert "--allow-control: stopping and restarting engines requires --token-file" in done.stderr
    token = _token_file(tmp_path, "control-token-" + "y" * 32)
    auth = {"authorization": "Bearer control-token-" + "y" * 32}
    plain, port = free_port(), free_port()
    restarted_pid = None
    with (
        agent("--listen", f"127.0.0.1:{plain}"),
        agent("--listen", f"127.0.0.1:{port}", "--token-file", str(token), "--allow-control") as (_, said),
    ):
        assert said.endswith("(http; token required; control: stop, restart and models allowed)")
        base = f"http://127.0.0.1:{port}"
        stopped = procs.start(["vllm", "serve", "/models/stop-me", "--port", str(free_port())])
        kept = procs.start(["vllm", "serve", "/models/restart-me", "--port", str(free_port())])

        def listed(pid: int, at: str) -> bool:
            documents = httpx.get(f"{at}/v1/engines", headers=auth, timeout=5).json()
            return any(d["pid"] == pid for d in documents)

        _until("the agents see both engines", lambda: listed(stopped.pid, base) and listed(kept.pid, base))
        _until("and the plain one", lambda: listed(stopped.pid, f"http://127.0.0.1:{plain}"))
        # the agent without --allow-control changes nothing
        assert (
            httpx.post(f"http://127.0.0.1:{plain}/v1/engines/{stopped.pid}/stop", timeout=5).status_code
            == 405
        )
        assert httpx.post(f"{base}/v1/engines/{stopped.pid}/stop", timeout=5).status_code == 401
        assert httpx.post(f"{base}/v1/engines/99999999/stop", headers=auth, timeout=5).status_code == 404
        assert (
            httpx.post(f"{base}/v1/engines/{stopped.pid}/stop?grace=x", headers=auth, timeout=5).status_code
            == 400
        )
        answer = httpx.post(f"{base}/v1/engines/{stopped.pid}/stop?grace=1", headers=auth, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["action"] == "stop"
        assert stopped.wait(timeout=10) is not None  # it is gone
        answer = httpx.post(f"{base}/v1/engines/{kept.pid}/restart?grace=1", headers=auth, timeout=30)
        try:
            assert answer.status_code == 200, answer.text
            restarted_pid = answer.json()["pid"]
            assert restarted_pid != kept.pid
            with open(f"/proc/{restarted_pid}/cmdline", "rb") as file:
                assert file.read().split(b"\0")[:3] == [b"vllm", b"serve", b"/models/restart-me"]
        finally:
            if restarted_pid is not None:  # the agent started it for this test: end it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(restarted_pid, signal.SIGKILL)


def test_credentials_in_a_remote_url_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="credentials in the URL are refused: give --token-file"):
        remote.agent_url("http://user:secret@127.0.0.1:9465")


def test_an_event_line_beyond_the_cap_loses_the_host_before_it_is_whole() -> None:
    """A stream that never ends its line is refused once the line passes the cap (not buffered
    whole), and the host is said lost."""
    endless = b"data: " + b"x" * (remote.MAX_EVENT_BYTES + 4096)
    with serving({"/v1/events": [Answer(200, endless, content_type="text/event-stream")]}) as other:
        items = remote.watch_remote([other.url], timeout=5)
        try:
            lost = next(items)
        finally:
            items.close()
    assert isinstance(lost, remote.HostLost)
    assert lost.error == f"not an agent's event: an event is over {remote.MAX_EVENT_BYTES} bytes"


def test_event_slots_are_capped_per_client_and_freed_when_clients_go(procs: Procs) -> None:
    """With every event-stream slot of one client (this test's uid) held by streams it never
    reads, its next stream is refused (503); once they go, its slots are free again. (Another
    user's streams take none of them: tests/fleet/test_agent_hostile.py.)"""
    port = free_port()
    with agent("--listen", f"127.0.0.1:{port}"):
        _until("the agent answers", lambda: httpx.get(f"http://127.0.0.1:{port}/v1/engines", timeout=5))
        stuck = []
        try:
            for _ in range(agent_module.MAX_STREAMS_PER_PEER):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(b"GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n")
                stuck.append(sock)
            # every slot is taken: the next stream is refused ...
            _until(
                "the slots are full",
                lambda: httpx.get(f"http://127.0.0.1:{port}/v1/events", timeout=5).status_code == 503,
            )
        finally:
            for sock in stuck:
                sock.close()

        # ... and once those clients are gone, their slots are free again
        def streams() -> bool:
            with httpx.stream("GET", f"http://127.0.0.1:{port}/v1/events", timeout=5) as answer:
                return answer.status_code == 200

        _until("a slot is free again", streams)


def test_a_stream_whose_events_pile_up_is_ended_but_its_replay_never_counts() -> None:
    async def main() -> tuple[int, list[object]]:
        client = agent_module._Client(asyncio.get_running_loop(), Peer("uid:0", EVERYTHING), EVERYTHING)
        big = SharedEvent("changed", "x" * (256 * 1024))
        for _ in range(40):  # a replay far over the cap (a host with many engines)
            client.offer(SharedEvent("started", big.data), replay=True)
        replayed = client.queue.qsize()
        while not client.queue.empty():  # sent
            queued = client.queue.get_nowait()
            assert queued is not None
            client.frame(queued)
        assert client.queued == 0
        for _ in range(agent_module.MAX_QUEUED_BYTES // len(big.data) + 2):  # not read: they pile up
            client.offer(big)
        client.offer(SharedEvent("changed", "late"))  # nothing more once it is ended
        return replayed, [client.queue.get_nowait() for _ in range(client.queue.qsize())]

    replayed, left = asyncio.run(main())
    assert replayed == 40
    assert left == [None]  # what piled up is dropped, the stream ends
