"""The agent and the exporter under another user's attack (issue 44): a real `enginespec serve` on
127.0.0.1, real idle connections and never-read event streams of another user, real processes of
another user whose facts come from a 0600 config file and from their environment, and real
clients running as a user who may not read them, as their owner, and as root.

The users are `daemon` (the attacker, and the client who may not read) and `bin` (the engines'
owner), not `nobody`: CI runs the suite beside tests/helpers/hostile_zoo.py, whose `nobody`
holds every connection and event stream it may of each agent it finds (that is the point: the
suite's clients are served regardless), so a client of `nobody` here would share its limits."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from enginespec.errors import InvalidInputError
from enginespec.fleet import agent_views as agentviews
from enginespec.fleet import agent_wire as agentwire
from enginespec.fleet.agent import MAX_STREAMS_PER_PEER, read_token
from fleet.test_agent import _until, agent
from helpers.cli import enginespec_in_background, run
from helpers.fakeserver import free_port
from helpers.procs import Procs, stop_child

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="runs processes and clients as other users")
SYSTEM_PYTHON = "/usr/bin/python3"
#: The user who attacks, and who may not read the owner's engines.
ATTACKER = "daemon"
#: The user who owns the engines whose facts are private.
OWNER = "bin"

#: A tiny client, run as another user with the system's Python (argv: MODE HOST PORT ...):
#: ``idle N REFUSED``: N connections that send nothing, until REFUSED of them were answered 503
#: (or a minute passed); ``events N``: N event streams never read, until each was answered;
#: each prints ``connected``, then how many connections were refused (503) and how many were
#: served, then holds them until killed. ``get PATH``: prints the answer's status line, then its body.
#: ``stream PATH TEXT...``: reads an event stream until every TEXT was seen, prints what it read.
CLIENT = r"""
import select, socket, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def opened(request):
    sock = socket.create_connection((host, port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if request:
        sock.sendall(request)
    return sock
if mode in ("idle", "events"):
    request = b"GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n" if mode == "events" else b""
    socks = [opened(request) for _ in range(int(sys.argv[4]))]
    print("connected", flush=True)
    deadline = time.monotonic() + 60
    seen = {}
    while time.monotonic() < deadline:
        for sock in socks:
            if sock not in seen and select.select([sock], [], [], 0)[0]:
                seen[sock] = sock.recv(12, socket.MSG_PEEK)  # never read: peeked at
        refused = sum(1 for head in seen.values() if head.startswith(b"HTTP/1.1 503"))
        served = sum(1 for head in seen.values() if head.startswith(b"HTTP/1.1 200"))
        if refused + served == len(socks) or (mode == "idle" and refused >= int(sys.argv[5])):
            break
        time.sleep(0.05)
    print(f"refused {refused} served {served}", flush=True)
    time.sleep(3600)
elif mode == "get":
    auth = f"authorization: Bearer {sys.argv[5]}\r\n" if len(sys.argv) > 5 else ""
    sock = opened(f"GET {sys.argv[4]} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n".encode())
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sys.stdout.buffer.write(data)
else:
    sock = opened(f"GET {sys.argv[4]} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    data, wanted = b"", [text.encode() for text in sys.argv[5:]]
    while not all(text in data for text in wanted):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sys.stdout.buffer.write(data)
"""


@pytest.fixture
def shared(nobody_dir: Path) -> Path:
    """A directory other users can enter, holding CLIENT (as ``client.py``) for them to run."""
    (nobody_dir / "client.py").write_text(CLIENT)
    return nobody_dir


@contextmanager
def client_as(user: str, shared: Path, *args: object) -> Iterator[subprocess.Popen[bytes]]:
    """The client running as ``user`` (killed at the end)."""
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, str(shared / "client.py"), *(str(a) for a in args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        user=user,
        group=user,
        extra_groups=[],
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        stop_child(proc, timeout=5)


def fetched_as(user: str, shared: Path, port: int, *args: str) -> bytes:
    """What ``user``'s client read (``get PATH`` or ``stream PATH TEXT...``)."""
    done = subprocess.run(
        [SYSTEM_PYTHON, str(shared / "client.py"), *args[:1], "127.0.0.1", str(port), *args[1:]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        user=user,
        group=user,
        extra_groups=[],
        timeout=120,
        check=True,
    )
    return done.stdout


def _first_line(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().decode().strip()


def _answers(port: int) -> bool:
    return httpx.get(f"http://127.0.0.1:{port}/v1/engines", timeout=5).status_code == 200


@root_only
def test_one_users_idle_connections_lock_out_no_one(shared: Path) -> None:
    """64 idle connections of the attacker (the old server's limit for everyone together): past
    its own share it is refused at once; root's requests are answered meanwhile."""
    port = free_port()
    with agent("--listen", f"127.0.0.1:{port}"):
        _until("the agent answers", lambda: _answers(port))
        over = 64 - agentwire.MAX_CONNECTIONS_PER_PEER
        with client_as(ATTACKER, shared, "idle", "127.0.0.1", port, 64, over) as hog:
            assert _first_line(hog) == "connected"
            for path in ("/v1/engines", "/v1/gpus", "/metrics"):
                answer = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)
                assert answer.status_code == 200, (path, answer.text)
                assert int(answer.headers["age"]) >= 0  # a snapshot, marked with its age
            assert _first_line(hog) == f"refused {over} served 0"


@root_only
def test_a_connection_that_sends_no_whole_head_is_closed() -> None:
    """Nothing, or half a request head, trickled: the agent closes the connection (the old one
    held both forever)."""
    port = free_port()
    with agent("--listen", f"127.0.0.1:{port}"):
        _until("the agent answers", lambda: _answers(port))
        import socket

        silent = socket.create_connection(("127.0.0.1", port), timeout=10 * agentwire.HEAD_SECONDS)
        partial = socket.create_connection(("127.0.0.1", port), timeout=10 * agentwire.HEAD_SECONDS)
        try:
            partial.sendall(b"GET /v1/engines HTTP/1.1\r\nhost: x\r\n")
            assert silent.recv(1024) == b""
            assert partial.recv(1024) == b""
        finally:
            silent.close()
            partial.close()


@root_only
def test_one_users_never_read_event_streams_lock_out_no_one(
    shared: Path, procs: Procs, nobody_idle: Path
) -> None:
    """40 event streams of the attacker that are never read: it has its share, the rest refused;
    root's stream is served, replay first."""
    port = free_port()
    engine = procs.start(["vllm", "serve", "/models/streamed", "--port", str(free_port())])
    with agent("--listen", f"127.0.0.1:{port}"):
        _until("the agent answers", lambda: _answers(port))
        with client_as(ATTACKER, shared, "events", "127.0.0.1", port, 40) as hog:
            assert _first_line(hog) == "connected"
            held = _first_line(hog)  # each of the attacker's streams answered
            with httpx.stream("GET", f"http://127.0.0.1:{port}/v1/events", timeout=30) as answer:
                assert answer.status_code == 200
                seen = ""
                for chunk in answer.iter_text():
                    seen += chunk
                    if f'"pid":{engine.pid},' in seen:
                        break
                assert "event: started" in seen
            assert held == f"refused {40 - MAX_STREAMS_PER_PEER} served {MAX_STREAMS_PER_PEER}"


def _long_argv(port: int, index: int) -> list[str]:
    """An engine's argv of 2 x 127 KiB of control characters: each a 6-byte JSON escape, some
    1.5 MB of JSON an engine, were it not cut."""
    return ["vllm", "serve", f"/models/long-{index}", "--port", str(port), "\x01" * 130_000, "\x02" * 130_000]


def _rss_peak(pid: int) -> int:
    """The most resident memory ``pid`` (and its threads) ever held, in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None
    return int(match[1]) * 1024


@root_only
def test_long_argvs_and_idle_streams_neither_blow_the_agent_up_nor_hide_the_host(
    shared: Path, procs: Procs, nobody_idle: Path
) -> None:
    """50 engines of another user with 254 KiB argvs (some 76 MB of JSON) and 32 event streams of
    the attacker never read: every engine is still in `ps --remote` (its argv cut, and said), no
    engine's document passes the cap, `/v1/engines` stays under `ps --remote`'s, and the
    agent's memory stays under the DaemonSet's limit (256 MiB)."""
    port = free_port()
    longs = [
        procs.start(_long_argv(free_port(), index), executable=nobody_idle, user=OWNER) for index in range(50)
    ]
    pids = {proc.pid for proc in longs}
    with agent("--listen", f"127.0.0.1:{port}") as (server, _said):
        base = f"http://127.0.0.1:{port}"

        def all_listed() -> bool:
            documents = httpx.get(f"{base}/v1/engines", timeout=60).json()
            return pids <= {d["pid"] for d in documents}

        _until("the agent lists the 50", all_listed, timeout=120)
        with client_as(ATTACKER, shared, "events", "127.0.0.1", port, 32) as hog:
            assert _first_line(hog) == "connected"
            held = _first_line(hog)  # each of the attacker's streams answered
            answer = httpx.get(f"{base}/v1/engines", timeout=60)
            assert len(answer.content) < 64 * 1024 * 1024
            mine = [d for d in answer.json() if d["pid"] in pids]
            assert len(mine) == 50
            for document in mine:
                assert len(json.dumps(document)) <= agentviews.ENGINE_DOCUMENT_BYTES
                assert re.fullmatch(
                    r"argv of 7 arguments \(2600\d\d characters\) shown to 8192 .*", document["cut"]
                )
                assert sum(len(arg) for arg in document["argv"]) <= agentviews.ARGV_SHOWN
                assert document["argv"][:2] == ["vllm", "serve"]
                assert document["model"].startswith("/models/long-")
            listed = run("ps", "--remote", base, "-o", "json", timeout=120)
            assert listed.returncode == 0, listed.stderr[-2000:]
            assert pids <= {d["pid"] for d in json.loads(listed.stdout)}
            assert _rss_peak(server.pid) < 256 * 1024 * 1024
            assert held.endswith(f"served {MAX_STREAMS_PER_PEER}")


def _secret_engines(procs: Procs, nobody_idle: Path, shared: Path) -> tuple[int, int, Sequence[str]]:
    """Two engines of the owner: a vLLM whose model and port come from its 0600 config file, and a
    llama-server whose model (a presigned URL with its signature) comes from its environment."""
    config = shared / "private.yaml"
    config.write_text("model: /private/model-f00dcafe\nserved-model-name: hush-hush-name\n")
    shutil.chown(config, OWNER)
    config.chmod(0o600)
    secrets = ("model-f00dcafe", "hush-hush-name", "Signature=5ec7e7")
    by_config = procs.start(
        ["vllm", "serve", "--config", str(config), "--port", str(free_port())],
        executable=nobody_idle,
        user=OWNER,
    )
    by_environment = procs.start(
        ["llama-server", "--port", str(free_port())],
        executable=nobody_idle,
        user=OWNER,
        LLAMA_ARG_MODEL_URL="https://bucket.example/m.gguf?X-Amz-Signature=5ec7e7",
    )
    return by_config.pid, by_environment.pid, secrets


@root_only
def test_other_users_config_and_environment_are_shown_to_their_owner_and_root_only(
    shared: Path, procs: Procs, nobody_idle: Path
) -> None:
    """`daemon` sees that the facts exist (withheld) but not their values, over `/v1/engines`,
    `/v1/events` and `/metrics` of the agent and of the exporter; their owner and root
    see them."""
    by_config, by_environment, secrets = _secret_engines(procs, nobody_idle, shared)
    port, exporter_port = free_port(), free_port()
    token = "t" * 40
    token_file = shared / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    exporter = enginespec_in_background(
        "exporter", "--port", str(exporter_port), "--interval", "500ms", "--token-file", str(token_file)
    )
    try:
        with agent("--listen", f"127.0.0.1:{port}"):
            base = f"http://127.0.0.1:{port}"

            def known() -> bool:
                documents = {d["pid"]: d for d in httpx.get(f"{base}/v1/engines", timeout=30).json()}
                return all(
                    pid in documents and documents[pid]["model"] for pid in (by_config, by_environment)
                )

            _until("the agent read both engines' facts", known)
            roots = httpx.get(f"{base}/v1/engines", timeout=30).text
            assert all(secret in roots for secret in secrets)
            assert all(
                secret in fetched_as(OWNER, shared, port, "get", "/v1/engines").decode() for secret in secrets
            )

            seen = fetched_as(ATTACKER, shared, port, "get", "/v1/engines").decode()
            assert not any(secret in seen for secret in secrets)
            documents = {d["pid"]: d for d in json.loads(seen.split("\r\n\r\n", 1)[1])}
            assert documents[by_config]["model"] is None
            assert documents[by_config]["served_model_names"] == []
            assert documents[by_config]["withheld"] == [
                "model",
                "model_name",
                # what a vLLM serves is read through its API (with its key): its owner's
                "models",
                "served_model_name",
                "served_model_names",
            ]
            assert documents[by_environment]["withheld"] == ["model", "model_name"]
            assert documents[by_environment]["argv"] == [
                "llama-server",
                "--port",
                documents[by_environment]["argv"][2],
            ]

            streamed = fetched_as(
                "daemon",
                shared,
                port,
                "stream",
                "/v1/events",
                f'"pid":{by_config},',
                f'"pid":{by_environment},',
            ).decode()
            assert '"withheld":["model"' in streamed
            assert not any(secret in streamed for secret in secrets)

            for metrics_port in (port, exporter_port):
                _until(
                    "the exporter read them",
                    lambda p=metrics_port: all(
                        s in httpx.get(f"http://127.0.0.1:{p}/metrics", timeout=30).text for s in secrets[:2]
                    ),
                )
                text = fetched_as(ATTACKER, shared, metrics_port, "get", "/metrics").decode()
                assert not any(secret in text for secret in secrets), metrics_port
                withheld = [
                    line for line in text.splitlines() if line.startswith("enginespec_engine_withheld{")
                ]
                assert any('field="model"' in line and line.endswith("} 1.0") for line in withheld), text
                # the engine's identifying labels are on it, its model emptied where it is withheld
                assert all('engine_id="' in line for line in withheld)
                assert all('model=""' in line for line in withheld if 'field="model"' in line)
                assert "age:" in text.lower()
            # the exporter's token shows the scraper everything
            held = fetched_as(ATTACKER, shared, exporter_port, "get", "/metrics", token).decode()
            assert all(secret in held for secret in secrets[:2])
    finally:
        stop_child(exporter)


def test_token_files_are_refused_unless_private_long_and_owned(tmp_path: Path) -> None:
    """A 1-character token, a token others may read, one another user owns: refused, naming the
    flag, the file and the problem."""
    path = tmp_path / "token"
    path.write_text("x\n")
    path.chmod(0o600)
    with pytest.raises(
        InvalidInputError, match=r"^--token-file .*token: the token is 1 characters: at least 32"
    ):
        read_token(str(path))
    path.write_text("k" * 40)
    path.chmod(0o640)
    with pytest.raises(InvalidInputError, match=r"^--token-file .*: mode 0640 lets its group or others read"):
        read_token(str(path))
    path.chmod(0o600)
    assert read_token(str(path)) == "k" * 40
    if os.geteuid() == 0:
        shutil.chown(path, "nobody")
        with pytest.raises(InvalidInputError, match=r"owned by uid \d+, not by root or this user"):
            read_token(str(path))
    done = run("ps", "--remote", "http://127.0.0.1:1", "--token-file", str(tmp_path))
    assert done.returncode != 0
    assert f"--token-file {tmp_path}: is not a regular file" in done.stderr


@root_only
@pytest.mark.parametrize("kernel_asked", [True, False], ids=["sock_diag", "proc_table"])
def test_a_loopback_clients_uid_is_its_sockets_owner(
    shared: Path, monkeypatch: pytest.MonkeyPatch, kernel_asked: bool
) -> None:
    """Who connected, asked of the kernel for the one socket, or (where that cannot be asked)
    found in /proc/self/net/tcp: the attacker's uid, not the test's; nothing for a socket gone."""
    import pwd
    import socket

    from enginespec.process import sockets

    if not kernel_asked:
        monkeypatch.setattr(sockets, "_diag_owner", lambda *_: False)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        # the attacker's client: holds its connection until it is killed
        with client_as(ATTACKER, shared, "idle", "127.0.0.1", port, 1, 1):
            conn, client = server.accept()
            with conn:
                assert sockets.connection_owner(client, conn.getsockname()) == pwd.getpwnam(ATTACKER).pw_uid
                assert sockets.connection_owner(("127.0.0.1", 1), conn.getsockname()) is None
