"""Containers and published ports: the cgroup parser on every path shape, then real kernel state
(cgroups made below this test's own, a network namespace, a ``docker-proxy``) scanned for real."""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enginespec import Config, Container, EngineProcess, PublishedPort, Scanner
from enginespec.health.checks import check_health
from enginespec.lifecycle.running import adopt as enginespec_adopt
from enginespec.process.containers import ProxyRule, parse_cgroup, parse_proxy_argv, pid_in_namespace
from helpers.cli import enginespec
from helpers.fakeserver import Answer, FakeEngine, free_port, models
from helpers.procs import Procs, children_of, rewrites, stop_child, wait_for

ID = "4f3c2b1a" * 8
OUTER = "0123456789abcdef" * 4
UID = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b"
SLICE_UID = UID.replace("-", "_")

#: (path below the cgroup the process starts in, runtime, pod uid) for each shape the issue lists.
SHAPES: dict[str, tuple[str, str, str | None]] = {
    "docker-cgroupfs": (f"docker/{ID}", "docker", None),
    "docker-systemd": (f"system.slice/docker-{ID}.scope", "docker", None),
    "podman": (f"machine.slice/libpod-{ID}.scope/container", "podman", None),
    "podman-rootless": (
        f"user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container",
        "podman",
        None,
    ),
    "kubelet-cgroupfs": (f"kubepods/burstable/pod{UID}/{ID}", "kubernetes", UID),
    "kubelet-systemd-containerd": (
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID}.slice/cri-containerd-{ID}.scope",
        "containerd",
        UID,
    ),
    "kubelet-systemd-crio": (
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SLICE_UID}.slice/crio-{ID}.scope",
        "cri-o",
        UID,
    ),
    "v1-systemd-containerd": (
        f"system.slice/containerd.service/kubepods-burstable-pod{SLICE_UID}.slice:cri-containerd:{ID}",
        "containerd",
        UID,
    ),
    "docker-in-docker": (f"docker/{OUTER}/docker/{ID}", "docker", None),
    "kind": (
        f"system.slice/docker-{OUTER}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SLICE_UID}.slice/cri-containerd-{ID}.scope",
        "containerd",
        UID,
    ),
}
#: Paths that name no container: podman's monitor, systemd mount units, plain slices.
NOT_CONTAINERS = {
    "conmon": f"machine.slice/libpod-conmon-{ID}.scope",
    "mount-unit": f"system.slice/run-docker-runtime\\x2drunc-moby-{ID}.mount",
    "slice": "user.slice/user-1000.slice/session-3.scope",
    "bare-id": ID,
    "short-id": f"docker/{ID[:12]}",
    "uppercase-id": f"docker/{ID.upper()}",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_parser_reads_every_shape_in_v1_and_v2_lines(shape: str) -> None:
    path, runtime, pod = SHAPES[shape]
    assert parse_cgroup(f"0::/{path}\n".encode()) == (runtime, ID, pod)
    v1 = f"12:pids:/\n4:cpu,cpuacct:/{path}\n1:name=systemd:/\n0::/\n"
    assert parse_cgroup(v1.encode()) == (runtime, ID, pod)
    # Below a prefix (a nested cgroup namespace seen from outside, a test's own cgroup), and
    # outside the reader's own cgroup namespace (enginespec itself in a container: `/../..`).
    assert parse_cgroup(f"0::/some/where/{path}\n".encode()) == (runtime, ID, pod)
    assert parse_cgroup(f"0::/../../{path}\n".encode()) == (runtime, ID, pod)


@pytest.mark.parametrize("shape", NOT_CONTAINERS)
def test_parser_finds_no_container_where_there_is_none(shape: str) -> None:
    assert parse_cgroup(f"0::/{NOT_CONTAINERS[shape]}\n3:memory:/{NOT_CONTAINERS[shape]}\n".encode()) is None


def test_parser_prefers_the_v2_line_and_survives_garbage() -> None:
    other = "ab" * 32
    assert parse_cgroup(f"4:memory:/docker/{other}\n0::/system.slice/docker-{ID}.scope\n".encode()) == (
        "docker",
        ID,
        None,
    )
    assert parse_cgroup(b"") is None
    assert parse_cgroup(b"garbage\n\0\n::\n0::\n") is None
    assert pid_in_namespace("Name:\tx\nNSpid:\t8123\t41\t1\n") == 1
    assert pid_in_namespace("NSpid:\t8123\n") == 8123
    assert pid_in_namespace("NSpid:\n") is None
    assert pid_in_namespace("Name:\tx\n") is None


def test_proxy_argv_as_dockerd_writes_it_and_as_go_flags_parse_it() -> None:
    argv = ["/usr/bin/docker-proxy", "-proto", "tcp", "-host-ip", "0.0.0.0", "-host-port", "8001"]
    argv += ["-container-ip", "172.17.0.2", "-container-port", "8000"]
    assert parse_proxy_argv(argv) == ProxyRule("0.0.0.0", 8001, "172.17.0.2", 8000)
    six = [
        "docker-proxy",
        "--host-ip=::",
        "-host-port=8001",
        "-container-ip",
        "172.17.0.2",
        "-container-port",
        "8000",
    ]
    assert parse_proxy_argv(six) == ProxyRule("::", 8001, "172.17.0.2", 8000)
    assert parse_proxy_argv(["docker-proxy", "-proto", "udp", *argv[3:]]) is None
    assert parse_proxy_argv(["not-docker-proxy", *argv[1:]]) is None
    assert parse_proxy_argv([*argv[:6], "0"]) is None
    assert parse_proxy_argv([*argv[:6], "65536"]) is None
    for port in ("+8001", "8_001", "\u0668\u0660", " 8001", "0x1f41"):
        assert parse_proxy_argv([*argv[:6], port, *argv[7:]]) is None
    assert parse_proxy_argv([*argv[:4], "127.0.0.1\n", *argv[5:]]) is None
    assert parse_proxy_argv([*argv[:4], "127.0.0.1:80", *argv[5:]]) is None
    assert parse_proxy_argv(argv[:-2]) is None
    assert parse_proxy_argv([]) is None


# --- real cgroups -------------------------------------------------------------------------------


def _hierarchies() -> dict[str, tuple[Path, str]]:
    """controllers field of /proc/self/cgroup ("" for v2) -> (the directory of this process's
    cgroup in that hierarchy, its path as /proc/PID/cgroup shows it)."""
    mounts: list[tuple[str, set[str], Path, str]] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        parts, (fstype, _source, options) = fields.split(), tail.split()[:3]
        if fstype in ("cgroup", "cgroup2"):
            mounts.append((fstype, set(options.split(",")), Path(parts[4]), parts[3]))
    found: dict[str, tuple[Path, str]] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _number, controllers, path = line.split(":", 2)
        for fstype, options, point, root in mounts:
            fits = fstype == "cgroup2" if not controllers else set(controllers.split(",")) <= options
            if fits and (path + "/").startswith(root.rstrip("/") + "/") and controllers not in found:
                found[controllers] = (point / path[len(root.rstrip("/")) :].lstrip("/"), path)
    return found


HIERARCHIES = _hierarchies()
V1 = [name for name in HIERARCHIES if name]
# Every shape in the v2 hierarchy and in one v1 hierarchy; Docker's shape in every hierarchy.
PLACES = sorted(
    {(shape, h) for shape in SHAPES for h in ([""] if "" in HIERARCHIES else []) + V1[:1]}
    | {("docker-cgroupfs", h) for h in HIERARCHIES}
)


@contextlib.contextmanager
def cgroup(hierarchy: str, below: str) -> Iterator[Path]:
    """A cgroup ``below`` this process's own in ``hierarchy``; the directories made are removed
    after (the caller's processes in it must be gone by then)."""
    base, _path = HIERARCHIES[hierarchy]
    made: list[Path] = []
    directory = base
    try:
        for part in below.split("/"):
            directory = directory / part
            if not directory.exists():
                directory.mkdir()
                made.append(directory)
                # A v1 cpuset cgroup takes no process until it has cpus and memory nodes.
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if (directory / knob).exists() and not (directory / knob).read_text().strip():
                        (directory / knob).write_text((directory.parent / knob).read_text())
        yield directory
    finally:
        for path in reversed(made):
            # A killed process leaves its cgroup a moment after it is reaped.
            wait_for(lambda path=path: _rmdir(path), timeout=10)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _scanned(pid: int, config: Config) -> EngineProcess:
    found = [p for p in Scanner(config=config).scan() if p.pid == pid]
    assert len(found) == 1
    return found[0]


@pytest.fixture
def quiet_config(tmp_path: Path) -> Config:
    """No runtime API answers (the sockets do not exist)."""
    return Config(
        data_dir=tmp_path, docker_socket=tmp_path / "none.sock", podman_socket=tmp_path / "none.sock"
    )


SHIM_ARGV = ["containerd-shim-runc-v2", "-namespace", "moby", "-address", "/run/containerd/containerd.sock"]


def shim_program(helper: Path, directory: Path) -> Path:
    """The helper copied under the name of containerd's shim, so ``/proc/PID/exe`` says so."""
    directory.mkdir(exist_ok=True)
    program = Path(shutil.copy(helper, directory / "containerd-shim-runc-v2"))
    program.chmod(0o755)
    return program


def under_shim(
    procs: Procs, shim: Path, argvs: list[list[str]], cgroup: Path | None = None
) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A shim run by root starting the engines ``argvs`` as its children, as a runtime starts a
    container's first process; the shim and the children's pids (in ``argvs`` order)."""
    parent = procs.start(SHIM_ARGV, executable=shim, cgroup=cgroup, HELPER_SPAWN=rewrites(*argvs))
    wanted = [b"\0".join(map(os.fsencode, argv)) + b"\0" for argv in argvs]

    def started() -> dict[bytes, int]:
        # A child shows the shim's argv until its exec is done.
        found = {Path(f"/proc/{c}/cmdline").read_bytes(): c for c in children_of(parent.pid)}
        return found if all(w in found for w in wanted) else {}

    try:
        wait_for(started)
    except BaseException:
        procs.stop(parent)
        raise
    found = started()
    return parent, [found[w] for w in wanted]


@pytest.mark.skipif(
    os.geteuid() != 0 or not HIERARCHIES, reason="making cgroups needs root and a cgroup mount"
)
@pytest.mark.parametrize(("shape", "hierarchy"), PLACES)
def test_engine_in_a_real_cgroup_of_each_shape(
    shape: str, hierarchy: str, procs: Procs, quiet_config: Config, helper: Path, tmp_path: Path
) -> None:
    below, runtime, pod = SHAPES[shape]
    container_id = secrets.token_hex(32)  # one per test: nothing left over can be mistaken for it
    below = below.replace(ID, container_id)
    shim = shim_program(helper, tmp_path / "shim")
    with cgroup(hierarchy, below) as directory:
        parent, (pid,) = under_shim(
            procs, shim, [["vllm", "serve", "/models/qwen", "--port", "8000"]], directory
        )
        try:
            seen = f"{HIERARCHIES[hierarchy][1].rstrip('/')}/{below}"
            assert any(
                line.endswith(":" + seen) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
            )
            process = _scanned(pid, quiet_config)
        finally:
            procs.stop(parent)
    assert process.container == Container(
        runtime=runtime, id=container_id, pod_uid=pod, name=None, pid_in_container=pid
    )
    assert process.container.label == f"{runtime}:{container_id[:12]}"


@pytest.mark.skipif(os.geteuid() != 0 or "" not in HIERARCHIES, reason="needs root and cgroup v2")
def test_engines_on_the_host_and_under_conmon_have_no_container(procs: Procs, quiet_config: Config) -> None:
    host = procs.start(["vllm", "serve", "/models/host"])
    with cgroup("", f"machine.slice/libpod-conmon-{secrets.token_hex(32)}.scope") as directory:
        conmon = procs.start(["vllm", "serve", "/models/conmon"], cgroup=directory)
        try:
            found = {p.pid: p for p in Scanner(config=quiet_config).scan()}
        finally:
            procs.stop(conmon)
    assert found[host.pid].container is None
    assert found[conmon.pid].container is None
    assert not found[host.pid].private_network
    assert found[host.pid].published == ()


@pytest.mark.skipif(os.geteuid() != 0 or "" not in HIERARCHIES, reason="needs root and cgroup v2")
def test_pid_in_container_from_a_real_pid_namespace(helper: Path, tmp_path: Path, procs: Procs) -> None:
    container_id = secrets.token_hex(32)
    (tmp_path / "vllm").symlink_to(helper)
    argv = ["unshare", "--pid", "--fork", "--kill-child", str(tmp_path / "vllm"), "serve", "/models/q"]
    with cgroup("", f"docker/{container_id}") as directory:
        runner = procs.start(argv, executable=Path(shutil.which("unshare") or "unshare"), cgroup=directory)
        try:
            wait_for(lambda: children_of(runner.pid))
            (engine,) = children_of(runner.pid)
            wait_for(lambda: Path(f"/proc/{engine}/cmdline").read_bytes().startswith(os.fsencode(tmp_path)))
            # The runtime's API vouches for the container: its first process is the runner.
            with _docker_api(tmp_path, container_id, "/q", runner.pid):
                process = _scanned(engine, Config(data_dir=tmp_path, docker_socket=tmp_path / "d.sock"))
        finally:
            procs.stop(runner)
    assert process.container is not None
    # The first process of a new pid namespace is its pid 1, as a container's entrypoint is.
    assert (process.container.id, process.container.pid_in_container) == (container_id, 1)


# --- the runtime's API --------------------------------------------------------------------------


@contextlib.contextmanager
def _docker_api(tmp_path: Path, container_id: str, name: object, pid: int) -> Iterator[FakeEngine]:
    """Docker's API on ``tmp_path/d.sock``: ``container_id`` is named ``name`` and its first
    process is ``pid``."""
    body = json.dumps({"Id": container_id, "Name": name, "State": {"Pid": pid}}).encode()
    api = FakeEngine(
        {f"/containers/{container_id}/json": [Answer(200, body)]}, unix_path=str(tmp_path / "d.sock")
    )
    try:
        yield api
    finally:
        api.close()


@pytest.mark.skipif(os.geteuid() != 0 or "" not in HIERARCHIES, reason="needs root and cgroup v2")
@pytest.mark.parametrize(
    ("name", "shown"), [("/vllm-qwen", "vllm-qwen"), ("/\x1b[31mred", None), (["x"], None)]
)
def test_container_name_from_the_docker_socket_once_per_container(
    name: object, shown: str | None, tmp_path: Path, procs: Procs
) -> None:
    container_id = secrets.token_hex(32)
    config = Config(data_dir=tmp_path, docker_socket=tmp_path / "d.sock")
    with cgroup("", f"system.slice/docker-{container_id}.scope") as directory:
        argvs = [["vllm", "serve", f"/models/{n}", "--port", str(8000 + n)] for n in (1, 2)]
        # The container's first process starts both (the API names it).
        init = procs.start(["init"], cgroup=directory, HELPER_SPAWN=rewrites(*argvs))
        try:
            wait_for(lambda: len(children_of(init.pid)) == 2)
            engines = sorted(children_of(init.pid))
            for pid in engines:
                wait_for(lambda pid=pid: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"vllm"))
            with _docker_api(tmp_path, container_id, name, init.pid) as api:
                found = {p.pid: p for p in Scanner(config=config).scan()}
                asked = [path for _method, path, _headers in api.script.seen]
                # `ps` takes the socket from the environment, and shows the container's label.
                env = {"ENGINESPEC_DOCKER_SOCKET": str(tmp_path / "d.sock")}
                table = enginespec("ps", "--no-health", "--wide", env=env).stdout.decode()
                documents = json.loads(enginespec("ps", "--no-health", "--json", env=env).stdout)
        finally:
            procs.stop(init)
    pids = {str(pid) for pid in engines}
    label = shown or f"docker:{container_id[:12]}"
    assert {row[0] for row in map(str.split, table.splitlines()) if row and label in row} >= pids
    dumped = [d["container"] for d in documents if str(d["pid"]) in pids]
    assert [(d["runtime"], d["id"], d["name"]) for d in dumped] == [("docker", container_id, shown)] * 2
    for pid in engines:
        container = found[pid].container
        assert container is not None
        assert (container.runtime, container.id, container.name) == ("docker", container_id, shown)
        assert container.label == label
    # Asked once for both engines (other engines on a shared host may be in containers too).
    assert asked.count(f"/containers/{container_id}/json") == 1


@pytest.mark.skipif(os.geteuid() != 0 or "" not in HIERARCHIES, reason="needs root and cgroup v2")
def test_a_runtime_api_that_hangs_gives_no_name(tmp_path: Path, procs: Procs, helper: Path) -> None:
    container_id = secrets.token_hex(32)
    hanging = FakeEngine(
        {f"/containers/{container_id}/json": [Answer(hang=True)]}, unix_path=str(tmp_path / "d.sock")
    )
    config = Config(data_dir=tmp_path, docker_socket=tmp_path / "d.sock", container_api_timeout=0.2)
    shim = shim_program(helper, tmp_path / "shim")
    try:
        with cgroup("", f"docker/{container_id}") as directory:
            parent, (pid,) = under_shim(procs, shim, [["vllm", "serve", "/models/hang"]], directory)
            try:
                process = _scanned(pid, config)
            finally:
                procs.stop(parent)
    finally:
        hanging.close()
    assert process.container is not None
    assert process.container.name is None


# --- network namespaces and docker-proxy --------------------------------------------------------

ADDRESS = "127.77.0.2"


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace whose loopback also holds 127.77.0.2 (a container's address)."""
    name = f"enginespec-test-{os.getpid()}-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=120)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=120)
        subprocess.run(
            ["ip", "-n", name, "addr", "add", f"{ADDRESS}/8", "dev", "lo"], check=True, timeout=120
        )
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True, timeout=120)


@pytest.fixture
def links(helper: Path, tmp_path: Path) -> dict[str, Path]:
    """The helper under real programs' names (so even ``comm`` says ``docker-proxy``)."""
    made = {}
    for program in ("vllm", "docker-proxy"):
        (tmp_path / "bin").mkdir(exist_ok=True)
        made[program] = tmp_path / "bin" / program
        made[program].symlink_to(helper)
    return made


def _engine_in(netns: str, procs: Procs, vllm: Path, port: int) -> subprocess.Popen[bytes]:
    """``vllm serve ... --host 127.77.0.2 --port PORT`` listening there, inside ``netns``."""
    argv = [
        "ip",
        "netns",
        "exec",
        netns,
        str(vllm),
        "serve",
        "/models/qwen",
        "--host",
        ADDRESS,
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(
        argv,
        env={**os.environ, "HELPER_LISTEN": f"{ADDRESS}:{port}"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    procs.started.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == str(port).encode()  # exec'd and listening
    return proc


def _scan_until(scanner: Scanner, pid: int, done: Callable[[EngineProcess], bool]) -> EngineProcess:
    """Scans until engine ``pid`` is ``done`` (proxies are looked for again within
    TREE_REFRESH_SECONDS; no wall-clock time is asserted)."""
    deadline = time.monotonic() + 10
    while True:
        process = next(p for p in scanner.scan() if p.pid == pid)
        if done(process) or time.monotonic() > deadline:
            return process
        time.sleep(0.05)


def _proxy(
    procs: Procs, link: Path, host_ip: str, host_port: int, container_ip: str, port: int, **env: str
) -> None:
    argv = ["docker-proxy", "-proto", "tcp", "-host-ip", host_ip, "-host-port", str(host_port)]
    proxy = procs.start(
        [*argv, "-container-ip", container_ip, "-container-port", str(port)], executable=link, **env
    )
    if "HELPER_LISTEN" in env:
        assert proxy.stdout is not None
        assert proxy.stdout.readline().strip() == str(host_port).encode()  # listening


needs_netns = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@needs_netns
def test_published_port_of_an_engine_in_a_private_netns(
    netns: str, links: dict[str, Path], procs: Procs, quiet_config: Config
) -> None:
    port, host_port = free_port(), free_port()
    url = f"http://127.0.0.1:{host_port}"
    engine = _engine_in(netns, procs, links["vllm"], port)
    # The proxy listens on the host port and answers as the engine behind it does (vLLM: /health
    # 200; /v1/models lists the model; the same JSON body does for both).
    answer = models("/models/qwen").body.decode()
    docker_proxy = links["docker-proxy"]
    _proxy(
        procs,
        docker_proxy,
        "127.0.0.1",
        host_port,
        ADDRESS,
        port,
        HELPER_LISTEN=f"127.0.0.1:{host_port}",
        HELPER_ANSWER=answer,
    )
    _proxy(procs, docker_proxy, "::", host_port, ADDRESS, port)  # dockerd's IPv6 twin
    # Proxies to another container's address, and to another port of this one.
    _proxy(procs, docker_proxy, "127.0.0.1", free_port(), "127.77.0.3", port)
    _proxy(procs, docker_proxy, "127.0.0.1", free_port(), ADDRESS, port + 1)
    scanner = Scanner(config=quiet_config)
    process = next(p for p in scanner.scan() if p.pid == engine.pid)
    assert process.private_network
    assert process.published == (
        PublishedPort(container_port=port, host_address="127.0.0.1", host_port=host_port),
        PublishedPort(container_port=port, host_address="::", host_port=host_port),
    )
    assert process.base_url == url
    assert process.instance_id.startswith(f"vllm-{host_port}-")  # the host's port names it
    assert (process.host, process.port, process.listen_ports) == (ADDRESS, port, (port,))
    health = check_health(process, verify_identity=True)
    assert (health.state, health.base_url, health.model_ids) == ("ready", url, ("/models/qwen",))

    out = enginespec("ps", "--json", "--no-health")
    document = next(d for d in json.loads(out.stdout) if d["pid"] == engine.pid)
    assert document["private_network"] is True
    assert document["base_url"] == url
    assert document["published"][0] == {
        "container_port": port,
        "host_address": "127.0.0.1",
        "host_port": host_port,
    }
    table = enginespec("ps", "--no-health", "--wide").stdout.decode()
    row = next(line for line in table.splitlines() if line.startswith(f"{engine.pid} "))
    assert f"127.0.0.1:{host_port}->{port}, [::]:{host_port}->{port}" in row

    # The proxies go (docker stop): a later scan shows the engine's own address again.
    for proc in procs.started[1:]:
        procs.stop(proc)
    again = _scan_until(scanner, engine.pid, lambda p: not p.published)
    assert again.base_url == f"http://{ADDRESS}:{port}"


@needs_netns
def test_private_netns_without_published_port_says_it_may_be_unreachable(
    netns: str, links: dict[str, Path], procs: Procs, quiet_config: Config
) -> None:
    port = free_port()
    engine = _engine_in(netns, procs, links["vllm"], port)
    process = next(p for p in Scanner(config=quiet_config).scan() if p.pid == engine.pid)
    assert process.private_network
    assert process.published == ()
    assert process.base_url == f"http://{ADDRESS}:{port}"
    health = check_health(process, timeout=1.0)
    assert health.state != "ready"
    assert "private network namespace with no published port" in health.reason
    assert f"http://{ADDRESS}:{port} may be unreachable from this host" in health.reason


@needs_netns
def test_a_proxy_started_after_the_engine_is_found(
    netns: str, links: dict[str, Path], procs: Procs, quiet_config: Config
) -> None:
    port, host_port = free_port(), free_port()
    engine = _engine_in(netns, procs, links["vllm"], port)
    scanner = Scanner(config=quiet_config)
    first = next(p for p in scanner.scan() if p.pid == engine.pid)
    assert first.published == ()
    _proxy(procs, links["docker-proxy"], "0.0.0.0", host_port, ADDRESS, port)
    later = _scan_until(scanner, engine.pid, lambda p: bool(p.published))
    assert later.published == (
        PublishedPort(container_port=port, host_address="0.0.0.0", host_port=host_port),
    )
    assert later.base_url == f"http://127.0.0.1:{host_port}"  # 0.0.0.0 is reached through loopback
    # Unchanged state: the same model object comes back (polling costs no validation).
    assert next(p for p in scanner.scan() if p.pid == engine.pid) is later


@needs_netns
def test_a_docker_proxy_not_run_by_root_is_not_trusted(
    netns: str, helper: Path, links: dict[str, Path], procs: Procs, quiet_config: Config
) -> None:
    """Any user can name a process ``docker-proxy``: only root's (dockerd's) are believed, so a
    user cannot point health checks at a port of their own."""
    port, ours, theirs = free_port(), free_port(), free_port()
    engine = _engine_in(netns, procs, links["vllm"], port)
    _proxy(procs, links["docker-proxy"], "127.0.0.1", ours, ADDRESS, port)
    shared = Path(tempfile.mkdtemp(prefix="enginespec-proxy-"))
    try:
        shared.chmod(0o755)
        program = Path(shutil.copy(helper, shared / "docker-proxy"))
        program.chmod(0o755)
        argv = ["docker-proxy", "-proto", "tcp", "-host-ip", "127.0.0.1", "-host-port", str(theirs)]
        argv += ["-container-ip", ADDRESS, "-container-port", str(port)]
        stranger = subprocess.Popen(
            argv, executable=program, user=65534, stdin=subprocess.DEVNULL, start_new_session=True
        )
        procs.started.append(stranger)
        wait_for(lambda: Path(f"/proc/{stranger.pid}/cmdline").read_bytes().startswith(b"docker-proxy\0"))
        process = next(p for p in Scanner(config=quiet_config).scan() if p.pid == engine.pid)
    finally:
        procs.stop_all()
        shutil.rmtree(shared)
    assert process.published == (
        PublishedPort(container_port=port, host_address="127.0.0.1", host_port=ours),
    )


_PROXY_WORDS = (
    "docker-proxy", "-proto", "tcp", "udp", "-host-ip", "--host-ip=::", "-host-port", "-container-ip",
    "-container-port", "-container-port=", "0.0.0.0", "::", "172.17.0.2", "8000", "65535", "0", "-",
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PROXY_WORDS), st.text(max_size=12)), max_size=14))
def test_proxy_argv_parser_takes_anything(argv: list[str]) -> None:
    rule = parse_proxy_argv(argv)
    if rule is not None:
        assert 0 < rule.host_port <= 65535
        assert 0 < rule.container_port <= 65535
        assert any(arg.endswith(str(rule.host_port)) for arg in argv)  # given, not made up
        for address in (rule.host_ip, rule.container_ip):
            assert ipaddress.ip_address(address)


# --- stopping through the runtime ---------------------------------------------------------------


class _RuntimeApi:
    """Docker's API on a unix socket for one container, the cgroup ``directory``, whose first
    process is ``init`` (a child of this test): inspect answers with ``pid`` (settable); stop
    sends SIGTERM to ``init`` as dockerd does, SIGKILL after ``t`` seconds, then kills what is
    left in the cgroup, as the end of a container's pid namespace does, and answers 204. Every
    request is kept in ``seen``."""

    def __init__(self, path: Path, container_id: str, init: subprocess.Popen[bytes], directory: Path) -> None:
        self.seen: list[tuple[str, str]] = []
        self.pid = init.pid
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def address_string(self) -> str:  # a unix peer has no host
                return "local"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                api.seen.append(("GET", self.path))
                if self.path == f"/containers/{container_id}/json":
                    body = json.dumps({"Id": container_id, "Name": "/vllm-q", "State": {"Pid": api.pid}})
                    self._answer(200, body.encode())
                else:
                    self._answer(404, b"{}")

            def do_POST(self) -> None:
                api.seen.append(("POST", self.path))
                where = urllib.parse.urlsplit(self.path)
                if where.path != f"/containers/{container_id}/stop":
                    self._answer(404, b"{}")
                    return
                stop_child(init, signal.SIGTERM, timeout=int(urllib.parse.parse_qs(where.query)["t"][0]))
                for left in (directory / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(left), signal.SIGKILL)
                self._answer(204, b"")

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.skipif(os.geteuid() != 0 or "" not in HIERARCHIES, reason="needs root and cgroup v2")
@pytest.mark.parametrize("vouched", [True, False])
def test_an_adopted_engine_in_a_container_is_stopped_through_its_runtime(
    vouched: bool, tmp_path: Path, procs: Procs
) -> None:
    """`stop` of an engine in a Docker container asks Docker to stop the container (so that its
    restart policy does not start it again) once Docker's API says the engine runs in it; an API
    that says otherwise is not used, and the engine's processes are signalled instead."""
    container_id = secrets.token_hex(32)
    config = Config(data_dir=tmp_path, docker_socket=tmp_path / "d.sock")
    with cgroup("", f"system.slice/docker-{container_id}.scope") as directory:
        argv = ["vllm", "serve", "/models/q", "--port", str(free_port())]
        init = procs.start(["init"], cgroup=directory, HELPER_SPAWN=rewrites(argv))
        api = _RuntimeApi(tmp_path / "d.sock", container_id, init, directory)
        try:
            wait_for(lambda: len(children_of(init.pid)) == 1)
            (pid,) = children_of(init.pid)
            wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"vllm"))
            process = _scanned(pid, config)
            assert process.container is not None
            assert process.container.id == container_id
            engine = enginespec_adopt(process, log_dir=tmp_path / "logs", config=config)
            if not vouched:
                api.pid = 1  # another container took the id since, or the API says otherwise now
            result = engine.stop(grace=5)
        finally:
            api.close()
            procs.stop(init)
    assert result.container is not None
    assert (result.container.runtime, result.container.container) == ("docker", container_id)
    assert result.leftover == ()
    if vouched:
        assert result.container.detail == "docker stopped vllm-q (HTTP 204)"
        assert result.container.stopped
        assert ("POST", f"/containers/{container_id}/stop?t=5") in api.seen
        assert result.signals == ()  # the runtime ended it: nothing of ours was needed
    else:
        assert not result.container.stopped
        assert result.container.detail == (
            f"docker's API ({tmp_path / 'd.sock'}) does not say this engine runs in vllm-q: its"
            " processes were signalled"
        )
        assert all(method == "GET" for method, _ in api.seen)
        assert [s.signal for s in result.signals][:1] == ["SIGTERM"]
