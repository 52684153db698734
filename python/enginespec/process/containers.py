"""The container an engine runs in, read from ``/proc/PID/cgroup``, and the host ports Docker's
userland proxy publishes for it.

Everything here is read from other processes and the kernel, so it is untrusted: ids are kept
only when they are ids (64 hex digits), a name from a runtime's API only when it looks like a
name, a proxy's addresses only when they are IP addresses and its ports only when 1-65535.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from enginespec._host.backend import parse_cgroup, proxy_flags
from enginespec._host.procfiles import PidStatus, parse_status
from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec._host.shapes import ContainerRuntime
from enginespec.process.urls import base_url
from enginespec.untrusted.documents import DocumentError, parse_json

if TYPE_CHECKING:
    import http.client


class PublishedPort(BaseModel):
    """A host address and port that reach the engine's ``container_port`` (Docker's ``-p``)."""

    model_config = ConfigDict(frozen=True)

    container_port: int
    host_address: str
    host_port: int

    @property
    def url(self) -> str | None:
        """Where a client on this host reaches it (``0.0.0.0`` and ``::`` via loopback)."""
        return base_url(self.host_address, self.host_port, sockets=False)


class Container(BaseModel):
    """The container an engine process runs in.

    ``runtime`` is what the cgroup path names (``docker``, ``podman``, ``containerd``,
    ``cri-o``), or ``kubernetes`` for a container of a pod whose runtime the path does not name;
    ``id`` is the full 64-hex id; ``pod_uid`` the Kubernetes pod's uid (with dashes); ``name``
    comes from the runtime's API on its local socket, ``None`` when it does not answer;
    ``pid_in_container`` is the process's pid in its own pid namespace (``NSpid:``);
    ``labels`` are those of its labels an engine's definition names (``Serving.container_labels``:
    RamaLama's ``ai.ramalama.*``), as the runtime's API gives them (keys that look like keys,
    values of at most 1024 characters, never more than 32: shown as given, untrusted);
    ``ports`` the host ports the API says it publishes (``-p HOST:CONTAINER``).
    """

    model_config = ConfigDict(frozen=True)

    runtime: ContainerRuntime
    id: str
    pod_uid: str | None = None
    name: str | None = None
    pid_in_container: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
    ports: tuple[PublishedPort, ...] = ()

    def label_value(self, key: str) -> str | None:
        """The value of label ``key``, ``None`` when the container has no such label (or it was
        not kept)."""
        return next((value for name, value in self.labels if name == key), None)

    @property
    def label(self) -> str:
        """How ``ps`` shows it: the name, else ``runtime:short id`` (12 digits, as docker does)."""
        return self.name or f"{self.runtime}:{self.id[:12]}"


def pid_in_namespace(status: PidStatus | str) -> int | None:
    """The pid in the innermost pid namespace: the last of ``NSpid:`` of ``/proc/PID/status``
    (parsed, or its text)."""
    nspid = (parse_status(os.fsencode(status)) if isinstance(status, str) else status).nspid
    return nspid[-1] if nspid else None


def _proc_text(root: HostRoot, pid: int, name: str, limit: int) -> str:
    """At most ``limit`` bytes of ``ROOT/proc/PID/NAME`` as text, empty when it cannot be read."""
    try:
        return root.read(pid, name, limit).decode("utf-8", "replace")
    except OSError:
        return ""


def host_netns(root: HostRoot) -> int | None:
    """The host's network namespace: pid 1's, or this process's when pid 1's is hidden: the
    number its link names (``net:[4026531840]``, the nsfs inode), read by the backend's reader."""
    return root.procfs.netns(1) or root.procfs.netns(os.getpid())


def netns_addresses(pid: int, root: HostRoot) -> frozenset[str]:
    """The local addresses of the network namespace ``pid`` is in: IPv4 from
    ``/proc/PID/net/fib_trie`` (``/32 host LOCAL`` leaves), IPv6 from ``/proc/PID/net/if_inet6``."""
    found: set[str] = set()
    leaf = None
    for line in _proc_text(root, pid, "net/fib_trie", 1 << 22).splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            leaf = text[4:]
        elif text == "/32 host LOCAL" and leaf is not None:
            with contextlib.suppress(ValueError):
                found.add(str(ipaddress.IPv4Address(leaf)))
    for line in _proc_text(root, pid, "net/if_inet6", 1 << 20).splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32 and all(c in "0123456789abcdef" for c in fields[0]):
            with contextlib.suppress(ValueError):
                found.add(str(ipaddress.IPv6Address(int(fields[0], 16))))
    return frozenset(found)


@dataclass(frozen=True)
class ProxyRule:
    """What one ``docker-proxy`` forwards: ``host_ip:host_port`` -> ``container_ip:container_port``."""

    host_ip: str
    host_port: int
    container_ip: str
    container_port: int


def parse_proxy_argv(argv: Sequence[str]) -> ProxyRule | None:
    """The TCP forward a ``docker-proxy`` argv sets up (see ``proxy_flags``), or ``None``; its
    addresses only when they are IP addresses."""
    flags = proxy_flags(list(argv))
    if flags is None:
        return None
    host_ip, host_port, container_ip, container_port = flags
    try:
        return ProxyRule(
            str(ipaddress.ip_address(host_ip)),
            host_port,
            str(ipaddress.ip_address(container_ip)),
            container_port,
        )
    except ValueError:
        return None


def published_ports(
    rules: Iterable[ProxyRule], addresses: frozenset[str], port: int | None
) -> tuple[PublishedPort, ...]:
    """The proxies forwarding to one of ``addresses`` on ``port``, IPv4 host addresses first."""
    found = {
        PublishedPort(container_port=rule.container_port, host_address=rule.host_ip, host_port=rule.host_port)
        for rule in rules
        if rule.container_port == port and rule.container_ip in addresses
    }
    return tuple(sorted(found, key=lambda p: (":" in p.host_address, p.host_address, p.host_port)))


def _argv(pid: int, root: HostRoot) -> list[str]:
    try:
        data = root.read(pid, "cmdline", 1 << 16)
    except OSError:
        return []
    return [os.fsdecode(part) for part in data.rstrip(b"\0").split(b"\0")] if data else []


def _proxy_rule(pid: int, root: HostRoot) -> ProxyRule | None:
    """The forward of a ``docker-proxy`` run by root, as dockerd runs them: any user can start a
    process of that name, and one must not redirect health checks to a port of its own."""
    rule = parse_proxy_argv(_argv(pid, root))
    if rule is None:
        return None
    status = root.status(pid)
    return rule if status is not None and status.ruid == 0 else None


class ProxyFinder:
    """The ``docker-proxy`` processes of this host. A process is read once: while its
    ``/proc/PID`` inode stays the same (it changes when the pid goes to a new process), except
    one young enough to be between the fork and the exec that makes it a proxy."""

    def __init__(self, young_seconds: float, root: HostRoot) -> None:
        self._root = root
        self._young_ticks = int(young_seconds * os.sysconf("SC_CLK_TCK"))
        #: pid -> (inode of /proc/PID, start ticks, its forward or None)
        self._known: dict[int, tuple[int, int, ProxyRule | None]] = {}

    def rules(self) -> list[ProxyRule]:
        # the scanner's own listing of the root (pid, inode), by the backend's reader
        listing = self._root.procfs.list_pids()
        now = _uptime_ticks()
        known: dict[int, tuple[int, int, ProxyRule | None]] = {}
        for pid, inode in listing:
            entry = self._known.get(pid)
            if entry is None or entry[0] != inode:
                start = self._root.start_ticks(pid)
                if start is None:
                    continue
                entry = (inode, start, _proxy_rule(pid, self._root))
            elif entry[2] is None and now - entry[1] < self._young_ticks:
                # The same process (same inode), maybe past its exec now: its argv is enough.
                entry = (inode, entry[1], _proxy_rule(pid, self._root))
            known[pid] = entry
        self._known = known
        return [rule for _inode, _start, rule in known.values() if rule is not None]


def _uptime_ticks() -> int:
    """Now, in the clock ticks of ``/proc/PID/stat`` start times (since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


# What Docker accepts as a container name (daemon/names, `[a-zA-Z0-9][a-zA-Z0-9_.-]+`).
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")
#: The longest answer read from a runtime's API.
_ANSWER_LIMIT = 1 << 20


def _unix_connection(path: str, timeout: float) -> http.client.HTTPConnection:
    """An HTTP connection over a unix socket, already connected (``request`` keeps a socket it
    finds)."""
    import http.client

    connection = http.client.HTTPConnection("localhost", timeout=timeout)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    connection.sock = sock
    return connection


@dataclass(frozen=True)
class Inspected:
    """What a runtime's API says of a container id: its name (``None`` when it is not a name),
    the host pid of its first process (``None`` when not given), its labels and the host ports it
    publishes (those that are what they say they are)."""

    name: str | None
    pid: int | None
    labels: tuple[tuple[str, str], ...] = ()
    ports: tuple[PublishedPort, ...] = ()


#: A label key as Docker and Podman take one (``--label KEY=VALUE``), and the most kept.
_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
_LABEL_VALUE_LIMIT = 1024
_LABELS_KEPT = 32
#: ``NetworkSettings.Ports`` keys: ``8080/tcp``.
_PORT_KEY = re.compile(r"([0-9]{1,5})/tcp")
_PORTS_KEPT = 64


def api_labels(labels: object, prefixes: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The labels of ``Config.Labels`` (a JSON object of strings) under one of ``prefixes`` (the
    prefix itself, or ``PREFIX.``), sorted; a label of any other shape is left out."""
    if not isinstance(labels, dict) or not prefixes:
        return ()
    kept = [
        (key, value)
        for key, value in labels.items()
        if isinstance(key, str)
        and isinstance(value, str)
        and _LABEL_KEY.fullmatch(key)
        and len(value) <= _LABEL_VALUE_LIMIT
        and any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)
    ]
    return tuple(sorted(kept)[:_LABELS_KEPT])


def _port_number(text: object) -> int | None:
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def api_ports(ports: object) -> tuple[PublishedPort, ...]:
    """The host ports of ``NetworkSettings.Ports`` (``{"8080/tcp": [{"HostIp": "0.0.0.0",
    "HostPort": "8080"}]}``; an empty ``HostIp`` is every interface, as Docker reads it): TCP
    ports only, addresses only when they are IP addresses, IPv4 first."""
    if not isinstance(ports, dict):
        return ()
    found: set[PublishedPort] = set()
    for key, bindings in list(ports.items())[:_PORTS_KEPT]:
        matched = _PORT_KEY.fullmatch(key) if isinstance(key, str) else None
        container_port = _port_number(matched.group(1)) if matched else None
        if container_port is None or not isinstance(bindings, list):
            continue
        for binding in bindings[:_PORTS_KEPT]:
            if not isinstance(binding, dict):
                continue
            host_port = _port_number(binding.get("HostPort"))
            address = binding.get("HostIp")
            address = "0.0.0.0" if address == "" else address
            try:
                host = str(ipaddress.ip_address(address)) if isinstance(address, str) else None
            except ValueError:
                host = None
            if host_port is not None and host is not None:
                found.add(
                    PublishedPort(container_port=container_port, host_address=host, host_port=host_port)
                )
    return tuple(sorted(found, key=lambda p: (":" in p.host_address, p.host_address, p.host_port)))


def api_inspect(
    socket_path: str, container_id: str, timeout: float, label_prefixes: Sequence[str] = ()
) -> Inspected | None:
    """What a Docker-compatible API on a unix socket says of a container (``GET
    /containers/<id>/json``: ``"Name": "/name"``, ``"State": {"Pid": N}``, ``"Config":
    {"Labels": {...}}`` (those under ``label_prefixes``), ``"NetworkSettings": {"Ports": {...}}``),
    ``None`` when it does not answer, or answers for another id or something that is not a
    container."""
    # Imported here: only a container's name needs it (http.client and ssl cost every start).
    import http.client

    try:
        connection = _unix_connection(socket_path, timeout)
    except OSError:
        return None
    try:
        connection.request("GET", f"/containers/{container_id}/json")
        response = connection.getresponse()
        if response.status != 200:
            return None
        document = parse_json(response.read(_ANSWER_LIMIT + 1), max_bytes=_ANSWER_LIMIT)
    except (OSError, http.client.HTTPException, DocumentError):
        return None
    finally:
        connection.close()
    if not isinstance(document, dict) or document.get("Id") != container_id:
        return None
    name = document.get("Name")
    name = name.removeprefix("/") if isinstance(name, str) else None
    state = document.get("State")
    pid = state.get("Pid") if isinstance(state, dict) else None
    shown = name if name is not None and _NAME.fullmatch(name) else None
    config = document.get("Config")
    network = document.get("NetworkSettings")
    return Inspected(
        shown,
        pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
        api_labels(config.get("Labels") if isinstance(config, dict) else None, label_prefixes),
        api_ports(network.get("Ports") if isinstance(network, dict) else None),
    )


def api_stop(socket_path: str, container_id: str, grace: int, timeout: float) -> int | str:
    """Asks a Docker-compatible API to stop a container (``POST /containers/<id>/stop?t=grace``:
    the image's stop signal, ``grace`` seconds, then SIGKILL; the container stays stopped, which
    no restart policy undoes). The HTTP status (204 stopped, 304 already stopped), or why there
    is none."""
    import http.client

    try:
        connection = _unix_connection(socket_path, timeout)
    except OSError as error:
        return f"no answer ({type(error).__name__}: {error})"
    try:
        connection.request("POST", f"/containers/{container_id}/stop?t={grace}")
        response = connection.getresponse()
        response.read(_ANSWER_LIMIT)
        return response.status
    except (OSError, http.client.HTTPException) as error:
        return f"no answer ({type(error).__name__}: {error})"
    finally:
        connection.close()


def runs_in_lineage(pid: int, first: int | None, root: HostRoot = HOST_ROOT) -> bool:
    """Whether ``first`` (a container's first process, as its runtime says) is ``pid`` or one of
    its parents."""
    return first is not None and (first == pid or _among(first, _ancestors(root.status(pid), root)))


def _among(first: int, ancestors: list[_Ancestor]) -> bool:
    return any(first == parent for parent, _, _ in ancestors)


#: Programs a container runtime runs, as root, as the parent of a container's first process
#: (containerd's shims, podman/CRI-O's conmon): one above a process is the runtime's own evidence
#: that it runs in a container, which a cgroup name alone is not (any user with a delegated
#: cgroup can name one `docker-<id>.scope`).
SHIMS: tuple[str, ...] = ("containerd-shim", "containerd-shim-runc-v1", "containerd-shim-runc-v2", "conmon")
#: How many parents are followed looking for a shim or a container's first process.
_MAX_ANCESTORS = 64


#: A parent of a process: (pid, real uid, executable basename).
_Ancestor = tuple[int, int | None, str | None]


def _ancestors(status: PidStatus | None, root: HostRoot) -> list[_Ancestor]:
    """The parents below pid 1, nearest first, of the process whose ``status`` is given."""
    found: list[_Ancestor] = []
    parent = status.ppid if status is not None else None
    while parent is not None and parent > 1 and len(found) < _MAX_ANCESTORS:
        status = root.status(parent)
        try:
            exe: str | None = os.path.basename(root.link(parent, "exe"))
        except OSError:
            exe = None
        found.append((parent, status.ruid if status is not None else None, exe))
        parent = status.ppid if status is not None else None
    return found


def _shim_among(ancestors: list[_Ancestor]) -> bool:
    """Whether a container runtime's shim, run by root, is among the parents."""
    return any(uid == 0 and exe in SHIMS for _pid, uid, exe in ancestors)


class ContainerReader:
    """Reads the container of engine processes: ``/proc/PID/cgroup``, ``NSpid:``, and the name
    from the runtime's socket (``sockets``: runtime -> socket path), cached per container id.

    A container is claimed only with the runtime's own evidence: its API answers for the id the
    cgroup names with a first process that is this one or one of its parents, or a shim of the
    runtime run by root is among its parents."""

    def __init__(
        self,
        sockets: dict[ContainerRuntime, str],
        timeout: float,
        root: HostRoot,
        label_prefixes: Sequence[str] = (),
    ) -> None:
        self._root = root
        self._sockets = sockets
        self._timeout = timeout
        self._label_prefixes = tuple(label_prefixes)
        self._inspected: dict[str, Inspected | None] = {}

    def read(self, pid: int, cgroup: bytes | None) -> Container | None:
        """The container of ``pid``, whose ``cgroup`` (as its scan read it) is given."""
        found = parse_cgroup(cgroup or b"")
        if found is None:
            return None
        runtime, container_id, pod = found
        inspected = self._inspect(runtime, container_id)
        # Read once: its parents (when the runtime's first process is not this one) and NSpid.
        status = self._root.status(pid)
        first = inspected.pid if inspected is not None else None
        ancestors = [] if first == pid else _ancestors(status, self._root)
        vouched = Inspected(None, None)
        if inspected is not None and first is not None and (first == pid or _among(first, ancestors)):
            vouched = inspected
        elif not _shim_among(ancestors):
            return None
        # else the shim vouches for a container, not for the id a cgroup name gives it: what the
        # API says of that id (name, labels, ports) is only believed with the API's own pid.
        return Container(
            runtime=runtime,
            id=container_id,
            pod_uid=pod,
            name=vouched.name,
            pid_in_container=pid_in_namespace(status) if status is not None else None,
            labels=vouched.labels,
            ports=vouched.ports,
        )

    def _inspect(self, runtime: ContainerRuntime, container_id: str) -> Inspected | None:
        if container_id not in self._inspected:
            path = self._sockets.get(runtime)
            self._inspected[container_id] = (
                api_inspect(path, container_id, self._timeout, self._label_prefixes) if path else None
            )
        return self._inspected[container_id]


_NS_GET_USERNS = 0xB701  # linux/nsfs.h: _IO(0xb7, 0x1)


def netns_of_host_users(pid: int, root: HostRoot) -> bool:
    """Whether the network namespace of ``pid`` belongs to the host's user namespace (made by
    root: a runtime's container), not to a user namespace of some user (``unshare -rn``), in
    which that user can give its loopback any address, a container's too."""
    try:
        host = os.stat(root.path(1, "ns/user")).st_ino
    except OSError:
        try:
            host = os.stat(root.path("self", "ns/user")).st_ino
        except OSError:
            return False
    try:
        fd = os.open(root.path(pid, "ns/net"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        owner = fcntl.ioctl(fd, _NS_GET_USERNS)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        return os.fstat(owner).st_ino == host
    finally:
        os.close(owner)
