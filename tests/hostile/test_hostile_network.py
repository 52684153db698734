"""Addresses, sockets and answers a hostile process names never make a root scanner connect where
the engine does not listen, read what it should not, or wait and allocate without bound (issue
items 9-16 and 18). Real processes of `nobody`, real servers on 127.0.0.1, real unix sockets, a
real user-owned network namespace; nothing is sent outside 127.0.0.0/8."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from enginespec import Config, EngineProcess, Scanner, get_engine_spec, parse_argv
from enginespec.health.checks import MAX_ANSWER_BYTES, check_all, check_health
from enginespec.health.vitals import EngineMonitor
from helpers.cli import enginespec
from helpers.fakeserver import Answer, FakeEngine, bound_socket, free_port, serving
from helpers.procs import Procs, children_of, wait_for

OK = b'{"status":"ok"}'
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes as nobody: needs root")


def _scanned(pid: int, scanner: Scanner | None = None) -> EngineProcess:
    scanner = scanner or Scanner()
    found = [p for p in scanner.scan() if p.pid == pid]
    assert len(found) == 1, pid
    return found[0]


# --- canonical literal addresses (items 11, 12) ---------------------------------------------------

NOT_ADDRESSES = ["127.1", "127.0.1", "0177.0.0.1", "256.0.0.1", "2130706433", "0x7f000001", "1.2.3.4."]


@pytest.mark.parametrize("host", NOT_ADDRESSES)
def test_other_spellings_of_a_number_are_not_addresses(host: str) -> None:
    inv = parse_argv(["vllm", "serve", "m", "--host", host, "--port", "8000"])
    assert inv is not None
    assert inv.host == host  # the fact, as given
    assert f"host '{host}' is not an address" in inv.problems


def test_an_ipv4_mapped_address_is_its_ipv4_address() -> None:
    inv = parse_argv(["vllm", "serve", "m", "--host", "::ffff:127.0.0.1", "--port", "8000"])
    assert inv is not None
    assert inv.problems == ()
    assert get_engine_spec("vllm").health_url("::ffff:127.0.0.1", 8000) == "http://127.0.0.1:8000/health"


@root_only
def test_loopback_spellings_never_reach_another_process_and_ps_survives(
    nobody_idle: Path, procs: Procs
) -> None:
    """A fake engine of nobody names the port of someone else's server in every spelling: none
    is ready, nothing is sent to that server, `ps` lists them all."""
    with serving({"/health": [Answer(200, OK)], "/v1/models": [Answer(200, b'{"data":[]}')]}) as victim:
        hosts = [*NOT_ADDRESSES, "::ffff:127.0.0.1", "127.0.0.1", "localhost", "evil.example"]
        started = [
            procs.start(
                ["llama-server", "-m", "m", "--host", h, "--port", str(victim.port)],
                executable=nobody_idle,
                user="nobody",
            )
            for h in hosts
        ]
        pids = {p.pid for p in started}
        found = [p for p in Scanner().scan() if p.pid in pids]
        assert len(found) == len(hosts)
        healths = check_all(found, timeout=1.0)
        assert all(h.state != "ready" for h in healths), healths
        holder = os.getpid()
        for process, health in zip(found, healths, strict=True):
            if process.base_url is None:
                assert health.reason.startswith("no usable listen address"), health
            else:  # a canonical address or a name: the port is this test's, not the engine's
                assert health.state == "unhealthy", health
                assert f"held by pid {holder}, not by this server (pid {process.pid})" in health.reason
        listed = enginespec("ps", "--json", "--timeout", "2")
        assert listed.returncode == 0, listed.stderr
        shown = {d["pid"]: d["health"]["state"] for d in json.loads(listed.stdout) if d["pid"] in pids}
        assert len(shown) == len(hosts)
        assert "ready" not in shown.values()
        assert victim.script.seen == []


def test_a_name_is_never_resolved_the_trees_own_loopback_is_used(procs: Procs) -> None:
    """`localhost` (or any name) is reached at the literal loopback the tree listens on, here
    IPv6 only: 127.0.0.1 (what a resolver gives first) is another server's."""
    port = free_port()
    sock = socket.socket(socket.AF_INET6)
    sock.bind(("::1", port))
    sock.set_inheritable(True)
    with serving({"/health": [Answer(200, OK)]}, port=port) as other, sock:
        server = FakeEngine({"/health": [Answer(200, OK)]}, sock=sock, origins=True)
        try:
            for host in ("localhost", "my-server.example"):
                proc = procs.start(
                    ["llama-server", "-m", "m", "--host", host, "--port", str(port)], (sock.fileno(),)
                )
                health = check_health(_scanned(proc.pid))
                assert (health.state, health.http_status) == ("ready", 200), health
            # each check, and each server's version asked once when it was found ready: all at
            # the tree's own loopback
            assert sorted(path for _method, path, _headers in server.script.ours) == [
                "/health",
                "/health",
                "/props",
                "/props",
            ]
            assert other.script.seen == []
        finally:
            server.close()


# --- remote addresses (item 10) ------------------------------------------------------------------


@pytest.mark.parametrize("host", ["169.254.169.254", "10.0.0.7", "evil.example"])
def test_a_remote_address_is_never_contacted(host: str, procs: Procs) -> None:
    """The tree listens on nothing at that address (it cannot: it is no address of this host), so
    the check ends before any connection: no request leaves, no name is looked up."""
    proc = procs.start(["vllm", "serve", "/m", "--host", host, "--port", "80"])
    health = check_health(_scanned(proc.pid))
    assert (health.state, health.http_status) == ("starting", None)
    assert health.reason == "process is up, not accepting connections yet"


# --- unix sockets (item 9) -----------------------------------------------------------------------


@pytest.fixture
def root_socket() -> Iterator[FakeEngine]:
    """A server of root's on a unix socket in a directory only root can enter."""
    private = Path(tempfile.mkdtemp(prefix="enginespec-root-"))
    try:
        with serving({"/health": [Answer(200, OK)]}, unix_path=str(private / "root.sock")) as server:
            yield server
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _unix_path(server: FakeEngine) -> str:
    from urllib.parse import unquote

    return unquote(server.url.removeprefix("http+unix://"))


@root_only
def test_a_root_only_socket_named_by_a_process_is_never_contacted(
    nobody_idle: Path, procs: Procs, root_socket: FakeEngine
) -> None:
    path = _unix_path(root_socket)
    env = {"LLAMA_ARG_HOST": path}
    for argv, extra in (
        (["llama-server", "-m", "m", "--host", path], {}),
        (["llama-server", "-m", "m"], env),
    ):
        proc = procs.start(argv, executable=nobody_idle, user="nobody", **extra)
        process = _scanned(proc.pid)
        assert process.base_url == root_socket.url
        health = check_health(process)
        assert health.state == "starting", health
        assert health.reason == f"process is up, holds no listening socket at {path}: not contacted"
    assert root_socket.script.seen == []


#: Run as nobody: binds and listens on a unix socket at argv[1], swaps the file for a symlink to
#: argv[2] (root's socket), then execs the idle helper (argv[3]) as llama-server on that path,
#: still holding the listening socket.
_SWAPPER = """
import os, socket, sys
path, target, idle = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen()
os.set_inheritable(s.fileno(), True)
os.symlink(target, path + ".new")
os.rename(path + ".new", path)
os.execv(idle, ["llama-server", "-m", "m", "--host", path])
"""


SYSTEM_PYTHON = "/usr/bin/python3"


@root_only
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs /usr/bin/python3")
def test_a_socket_file_swapped_for_another_is_refused_before_any_request(
    nobody_idle: Path, nobody_dir: Path, procs: Procs, root_socket: FakeEngine
) -> None:
    """The tree holds a listening socket bound at its path, but the file there now leads to
    root's socket: the path is no socket any more (a link), so nothing is contacted (a socket
    swapped for another socket is the peer check's: SO_PEERCRED before a byte is sent)."""
    own = nobody_dir / "own"
    own.mkdir()
    shutil.chown(own, "nobody")
    path = str(own / "x.sock")
    # Root's socket must be reachable through the link for the attack to be one.
    Path(_unix_path(root_socket)).parent.chmod(0o755)
    # The system's Python: the one running the tests may live where nobody cannot read.
    argv = [SYSTEM_PYTHON, "-c", _SWAPPER, path, _unix_path(root_socket), str(nobody_idle)]
    swapper = subprocess.Popen(argv, user="nobody", group="nogroup", extra_groups=[], start_new_session=True)
    procs.started.append(swapper)  # type: ignore[arg-type]
    wait_for(lambda: Path(f"/proc/{swapper.pid}/cmdline").read_bytes().startswith(b"llama-server\0"))
    health = check_health(_scanned(swapper.pid))
    assert health.state == "unknown", health
    assert "is no longer a socket (a link or another file): not contacted" in health.reason
    assert root_socket.script.seen == []


_MOVER = """
import os, socket, sys
path, idle = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen()
os.set_inheritable(s.fileno(), True)
os.rename(path, path + ".old")
os.execv(idle, ["llama-server", "-m", "m", "--host", path])
"""


@root_only
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs /usr/bin/python3")
def test_a_socket_another_process_listens_on_at_the_path_is_refused_before_any_request(
    nobody_idle: Path, nobody_dir: Path, procs: Procs
) -> None:
    """The tree's socket moved away, and another process (root's) listens on a socket at the path
    the argv names: a socket still, but not the tree's: the listening end is checked
    (SO_PEERCRED) before a byte is sent."""
    own = nobody_dir / "own"
    own.mkdir()
    shutil.chown(own, "nobody")
    path = str(own / "x.sock")
    argv = [SYSTEM_PYTHON, "-c", _MOVER, path, str(nobody_idle)]
    mover = subprocess.Popen(argv, user="nobody", group="nogroup", extra_groups=[], start_new_session=True)
    procs.started.append(mover)  # type: ignore[arg-type]
    wait_for(lambda: Path(f"/proc/{mover.pid}/cmdline").read_bytes().startswith(b"llama-server\0"))
    with serving({"/health": [Answer(200, OK)]}, unix_path=path) as impostor:
        health = check_health(_scanned(mover.pid))
        assert health.state == "unhealthy", health
        assert "not by this server's tree" in health.reason
        assert impostor.script.seen == []


# --- a user's own network namespace (item 13) ----------------------------------------------------


@root_only
@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("ip"), reason="needs unshare and ip")
def test_a_users_own_network_namespace_is_not_contacted_and_gets_no_published_port(
    nobody_idle: Path, nobody_dir: Path, procs: Procs, helper: Path
) -> None:
    """`unshare -rn` gives nobody a namespace where it can hold any address: its fake engine on
    a port that root's server holds on the host is not checked through the host's loopback, and
    a root docker-proxy forwarding to an address it put on its own loopback is not its port."""
    (nobody_dir / "bin").mkdir()
    vllm = nobody_dir / "bin" / "vllm"
    vllm.symlink_to(nobody_idle)
    proxy = nobody_dir / "bin" / "docker-proxy"
    proxy.symlink_to(nobody_idle)
    address = f"127.88.{secrets.randbelow(200) + 1}.{secrets.randbelow(200) + 2}"
    with serving({"/health": [Answer(200, OK)]}) as victim:
        script = (
            f"ip link set lo up && ip addr add {address}/8 dev lo && "
            f"exec {vllm} serve /m --host {address} --port {victim.port}"
        )
        unshare = Path(shutil.which("unshare") or "unshare")
        runner = procs.start(["unshare", "-rn", "sh", "-c", script], executable=unshare, user="nobody")
        # unshare and then sh exec in place: the same pid becomes the engine.
        wait_for(lambda: Path(f"/proc/{runner.pid}/cmdline").read_bytes().startswith(bytes(vllm)))
        pid = runner.pid
        host_port = free_port()
        rule = ["docker-proxy", "-proto", "tcp", "-host-ip", "127.0.0.1", "-host-port", str(host_port)]
        procs.start([*rule, "-container-ip", address, "-container-port", str(victim.port)], executable=proxy)
        process = _scanned(pid)
        assert process.private_network
        assert process.published == ()
        health = check_health(process)
        assert health.state == "unknown", health
        assert "private network namespace with no published port" in health.reason
        assert health.reason.endswith("not contacted")
        assert victim.script.seen == []


# --- answer size (item 14) -----------------------------------------------------------------------


class _Flood:
    """A server on ``sock`` that answers every request with a 400 MB body, sent from a buffer of
    64 KiB (never allocated whole here), until the client goes."""

    SIZE = 400_000_000

    def __init__(self, sock: socket.socket) -> None:
        sock.listen(16)
        self.sock = sock
        self.sent = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        chunk = b"0" * 65536
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    head = f"HTTP/1.1 200 OK\r\nContent-Length: {self.SIZE}\r\n\r\n"
                    conn.sendall(head.encode())
                    while self.sent < self.SIZE:
                        conn.sendall(chunk)
                        self.sent += len(chunk)
                except OSError:
                    continue


def _peak_of_health(pid: int) -> tuple[int, str]:
    """The peak RSS (KiB) of `enginespec health PID --json` and the state it printed."""
    code = (
        "import resource, sys\n"
        "from enginespec.cli import main\n"
        f"rc = main(['health', '{pid}', '--json'])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False)
    return int(out.stderr.decode().split()[-1]), json.loads(out.stdout)["state"]


def test_a_huge_answer_is_read_up_to_the_cap_only(procs: Procs) -> None:
    sock = bound_socket()
    flood = _Flood(sock)
    try:
        proc = procs.start(
            ["llama-server", "-m", "m", "--port", str(sock.getsockname()[1])], (sock.fileno(),)
        )
        process = _scanned(proc.pid)
        health = check_health(process)
        assert health.state == "unknown", health
        assert health.reason == f"/health: answer larger than {MAX_ANSWER_BYTES} bytes: not read"
        # The CLI, in a process whose peak memory the kernel measures, against the same CLI
        # checking a server with a small answer (what the rest of a busy host costs it): the
        # 400 MB answer adds far less than itself.
        with serving({"/health": [Answer(200, OK)]}, sock=(small := bound_socket())) as _small:
            quiet = procs.start(
                ["llama-server", "-m", "q", "--port", str(small.getsockname()[1])], (small.fileno(),)
            )
            baseline, small_state = _peak_of_health(quiet.pid)
        flooded, state = _peak_of_health(proc.pid)
        assert (small_state, state) == ("ready", "unknown")
        assert flooded < baseline + 64 * 1024, (flooded, baseline)
    finally:
        sock.close()
    assert flood.sent < flood.SIZE  # the client stopped reading: the rest was never sent


# --- overall deadlines (item 15) -----------------------------------------------------------------


def test_engines_behind_a_port_that_never_answers_are_unknown_by_the_deadline(procs: Procs) -> None:
    """32 engines hold one listening socket nobody accepts on (the kernel completes the
    handshakes; no answer ever comes): the whole check ends by its deadline."""
    sock = bound_socket()
    sock.listen(4096)
    try:
        port = str(sock.getsockname()[1])
        started = [
            procs.start(["llama-server", "-m", f"m{n}", "--port", port], (sock.fileno(),)) for n in range(32)
        ]
        pids = {p.pid for p in started}
        found = [p for p in Scanner().scan() if p.pid in pids]
        assert len(found) == 32
        healths = check_all(found, timeout=60, deadline=1.0)
        assert {h.state for h in healths} == {"unknown"}
        assert {h.reason for h in healths} == {"not checked within the overall deadline of 1s"}
        one = check_health(found[0], timeout=60, deadline=0.5)
        assert (one.state, one.reason) == ("unknown", "not checked within the overall deadline of 0.5s")
        listed = enginespec("ps", "--json", "--timeout", "1")
        assert listed.returncode == 0, listed.stderr
        states = {d["health"]["state"] for d in json.loads(listed.stdout) if d["pid"] in pids}
        assert states <= {"unknown", "unhealthy"}
        single = enginespec("health", str(started[0].pid), "--timeout", "0.5")
        assert single.returncode == 1
    finally:
        sock.close()


#: the overall deadline of the starvation test's checks: long enough that root's one engine is
#: checked within it on a loaded host, as long as the hung ones do not take its turn
DEADLINE = 6.0


def test_one_users_hung_engines_cannot_starve_another_users(procs: Procs, nobody_idle: Path) -> None:
    """100 engines of `nobody` behind a port that never answers, more than the checks in flight
    (64): root's engine that answers, started after them, is still checked before the deadline."""
    hung = bound_socket()
    hung.listen(4096)
    try:
        port = str(hung.getsockname()[1])
        strangers = [
            procs.start(
                ["llama-server", "-m", f"m{n}", "--port", port],
                (hung.fileno(),),
                executable=nobody_idle,
                user="nobody",
            )
            for n in range(100)
        ]
        with serving({"/health": [Answer(200, OK)]}, sock=(own := bound_socket())) as _server:
            mine = procs.start(
                ["llama-server", "-m", "mine", "--port", str(own.getsockname()[1])], (own.fileno(),)
            )
            pids = {p.pid for p in strangers} | {mine.pid}
            scanned = {p.pid: p for p in Scanner().scan() if p.pid in pids}
            assert len(scanned) == 101
            found = [scanned[p.pid] for p in [*strangers, mine]]  # root's last
            healths = check_all(found, timeout=60, deadline=DEADLINE)
            assert healths[-1].state == "ready", healths[-1]
            assert {h.state for h in healths[:-1]} == {"unknown"}
            # the watch's and the exporter's rounds (health and load) share the slots alike
            for load in (False, True):
                vitals = EngineMonitor(timeout=60, load=load).check(found, deadline=DEADLINE)
                assert vitals[-1].health.state == "ready", (load, vitals[-1])
                assert {v.health.state for v in vitals[:-1]} == {"unknown"}
            listed = enginespec("ps", "--json", "--timeout", str(DEADLINE))
            states = {d["pid"]: d["health"]["state"] for d in json.loads(listed.stdout) if d["pid"] in pids}
            assert states[mine.pid] == "ready"
    finally:
        hung.close()


def test_a_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="deadline: must be a positive number of seconds, got 0"):
        check_all([], deadline=0)


# --- container claims need the runtime's evidence (item 18) -----------------------------------------

from scanning.test_containers import HIERARCHIES, SHIM_ARGV, cgroup, shim_program, under_shim  # noqa: E402


@root_only
@pytest.mark.skipif("" not in HIERARCHIES, reason="needs cgroup v2")
def test_a_cgroup_name_alone_makes_no_container(
    procs: Procs, helper: Path, nobody_idle: Path, nobody_dir: Path, tmp_path: Path
) -> None:
    """A process in a cgroup named `docker-<id>.scope` of a real container: the API knows the id
    but its first process is another; a shim not run by root is no runtime's."""
    container_id = secrets.token_hex(32)
    real = procs.start(["real-container-init"])
    body = json.dumps({"Id": container_id, "Name": "/prod-db", "State": {"Pid": real.pid}}).encode()
    api = FakeEngine(
        {f"/containers/{container_id}/json": [Answer(200, body)]}, unix_path=str(tmp_path / "d.sock")
    )
    config = Config(
        data_dir=tmp_path, docker_socket=tmp_path / "d.sock", podman_socket=tmp_path / "none.sock"
    )
    fake_shim = Path(
        shutil.copy(shim_program(helper, tmp_path / "shim"), nobody_dir / "containerd-shim-runc-v2")
    )
    fake_shim.chmod(0o755)
    try:
        with cgroup("", f"system.slice/docker-{container_id}.scope") as directory:
            alone = procs.start(["vllm", "serve", "/m/fake", "--port", "8000"], cgroup=directory)
            # A shim of nobody's (started outside the cgroup: nobody may not move itself), its
            # child then moved in by root.
            spawn = "\x1f".join(["vllm", "serve", "/m/fake2"])
            strangers = procs.start(SHIM_ARGV, executable=fake_shim, user="nobody", HELPER_SPAWN=spawn)
            try:

                def spawned() -> bool:
                    kids = children_of(strangers.pid)
                    return any(Path(f"/proc/{c}/cmdline").read_bytes().startswith(b"vllm\0") for c in kids)

                wait_for(spawned)
                (under_stranger,) = children_of(strangers.pid)
                for pid in (strangers.pid, under_stranger):
                    (directory / "cgroup.procs").write_text(str(pid))
                scanner = Scanner(config=config)
                found = {p.pid: p for p in scanner.scan()}
                # and the same id vouched for by a root shim: a container, but not named by the API
                shim = shim_program(helper, tmp_path / "shim2")
                parent, (vouched,) = under_shim(procs, shim, [["vllm", "serve", "/m/ok"]], directory)
                try:
                    boxed = _scanned(vouched, Scanner(config=config))
                finally:
                    procs.stop(parent)
            finally:
                procs.stop(alone)
                procs.stop(strangers)
    finally:
        api.close()
    assert found[alone.pid].container is None
    assert found[under_stranger].container is None
    assert boxed.container is not None
    assert (boxed.container.id, boxed.container.name) == (container_id, None)
