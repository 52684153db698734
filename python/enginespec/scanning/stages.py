"""The stages a scan's records go through on their way to :class:`EngineProcess` models, each
with the state it keeps between scans (see :class:`enginespec.scanning.scanner.Scanner`):

- :class:`Folding`: workers folded into their servers, followers that their environment makes
  servers, and what a worker's server served (so an orphan still says what it served);
- :class:`OutsideFacts`: the facts a process takes from its environment and config file (read
  again when that file changes);
- :class:`NetworkPlacement`: the container each engine runs in, whether its network is private, and the
  host ports Docker's proxies publish for it;
- :class:`PortConflicts`: other processes listening on an engine's port.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence

import enginespec.process.sockets as sockets
from enginespec._host.namedfiles import Identity
from enginespec._host.root import HostRoot
from enginespec._host.shapes import ContainerRuntime, RawProcess
from enginespec.config import Config
from enginespec.definition.records import EngineDefinition
from enginespec.definition.signature import NOT_SERVING_ROLES, Role
from enginespec.process.argv import ArgvAddress
from enginespec.process.containers import (
    Container,
    ContainerReader,
    ProxyFinder,
    ProxyRule,
    PublishedPort,
    host_netns,
    netns_addresses,
    netns_of_host_users,
    published_ports,
)
from enginespec.process.record import EngineProcess
from enginespec.process.settings import Outside, read_outside, serves_by_environment
from enginespec.process.urls import is_relative_socket_path, unix_socket_url
from enginespec.untrusted.boundary import contained

#: A record as built by a scan: (the backend's record, the engine of its parent, its model).
Built = tuple[RawProcess, str | None, EngineProcess]
#: A process by identity: (pid, start time).
Key = tuple[int, float]


class Folding:
    """Which records are workers folded into a server (``fold_workers``), which followers stand
    on their own as servers by their environment (``Settings.server_environment``, read once per
    process), and which server each folded worker worked for, kept while the worker lives."""

    def __init__(self, specs: Sequence[EngineDefinition]) -> None:
        self._specs = specs
        #: a follower -> whether its environment makes it a server
        self._serving: dict[Key, bool] = {}
        #: a server by its environment, or one of its workers -> that server
        self._detached: dict[int, int] = {}
        #: a worker folded into a server -> that server, as last seen
        self._servers: dict[Key, EngineProcess] = {}

    def fold(self, raw: Sequence[RawProcess]) -> tuple[set[int], dict[int, int]]:
        """The pids of the followers that serve, and each folded worker's server."""
        serving = {item.pid for item in raw if self._serves(item)}
        folded: dict[int, int] = {}
        for item in raw:
            if self._specs[item.facts.engine_index].signature.fold_workers:
                folded.update((d, item.pid) for d in item.descendants if d != item.pid and d not in serving)
        # ... and neither they nor their workers are workers of the process that started them.
        self._detached = {pid: pid for pid in serving}
        for item in raw:
            if item.pid in serving and self._specs[item.facts.engine_index].signature.fold_workers:
                folded.update((d, item.pid) for d in item.descendants if d != item.pid and d not in serving)
                self._detached.update((d, item.pid) for d in item.descendants if d not in serving)
        return serving, folded

    def _serves(self, item: RawProcess) -> bool:
        spec = self._specs[item.facts.engine_index]
        if item.facts.role != "follower" or not spec.settings.server_environment:
            return False
        key = (item.pid, item.start_time)
        if key not in self._serving:
            self._serving[key] = contained(
                "server environment", lambda: serves_by_environment(spec, item.environ), lambda _reason: False
            )
        return self._serving[key]

    def worker_pids(self, item: RawProcess) -> tuple[int, ...]:
        """The record's workers: its descendants, but for those another server took."""
        return tuple(d for d in item.descendants if self._detached.get(d, item.pid) == item.pid)

    def server_of(self, pid: int, start_time: float) -> EngineProcess | None:
        """The server a worker was last seen folded into, if this scanner saw it."""
        return self._servers.get((pid, start_time))

    def remember(
        self, raw: Sequence[RawProcess], folded: Mapping[int, int], built: Mapping[int, Built]
    ) -> None:
        """Which server each folded worker works for, kept while the worker lives."""
        servers: dict[Key, EngineProcess] = {}
        for item in raw:
            key = (item.pid, item.start_time)
            server = folded.get(item.pid)
            known = self._servers.get(key)
            if server is not None and server in built:
                # Only the outermost server: a folded worker's own workers belong to it too.
                while folded.get(server) in built:
                    server = folded[server]
                servers[key] = built[server][2]
            elif known is not None:
                servers[key] = known
        self._servers = servers

    def forget(self, alive: Collection[Key]) -> None:
        self._serving = {key: known for key, known in self._serving.items() if key in alive}


class OutsideFacts:
    """What a record's model takes from outside its argv: its environment (as its scan read it)
    and config file, read when its model is built and again when that file is edited or
    replaced."""

    def __init__(self, root: HostRoot) -> None:
        self._root = root
        #: pid -> (its config file as it names it, the identity of what was read)
        self._configs: dict[int, tuple[str, Identity | None]] = {}

    def read(self, spec: EngineDefinition, item: RawProcess, argv: Sequence[str], *, runner: bool) -> Outside:
        """The facts of the record's environment (as its scan read it) and config file."""
        outside = read_outside(spec, item.pid, argv, environ=item.environ, runner=runner, root=self._root)
        if outside.config_file is not None:
            self._configs[item.pid] = (outside.config_file, outside.config_identity)
        return outside

    def changed(self, pid: int) -> bool:
        """Whether the engine's config file was edited (or replaced) since its facts were read."""
        config = self._configs.get(pid)
        return config is not None and self._root.named_identity(pid, config[0]) != config[1]

    def forget(self, built: Collection[int]) -> None:
        """Keeps config files of the engines built."""
        self._configs = {pid: config for pid, config in self._configs.items() if pid in built}


#: An engine in a private network namespace: (its model as built, the proxy rules its ports were
#: matched against, its published ports, the model shown: with them and the base URL they give).
_Shown = tuple[EngineProcess, list[ProxyRule], tuple[PublishedPort, ...], EngineProcess]


class NetworkPlacement:
    """Where each engine runs: its container and whether its network namespace is not the
    host's, read once per process; and, for those in a private namespace, the host ports
    Docker's proxies forward to them."""

    def __init__(
        self,
        config: Config,
        root: HostRoot,
        refresh_seconds: float,
        young_seconds: float,
        specs: Sequence[EngineDefinition] = (),
    ) -> None:
        self._root = root
        self._refresh = refresh_seconds
        runtimes: dict[ContainerRuntime, str] = {
            "docker": str(config.docker_socket),
            "podman": str(config.podman_socket),
        }
        # The labels a definition names (``Serving.container_labels``) are read from the API.
        prefixes = sorted({s.serving.container_labels.marker for s in specs if s.serving.container_labels})
        self._containers = ContainerReader(runtimes, config.container_api_timeout, root, prefixes)
        self._host_netns = host_netns(root)
        self._places: dict[Key, tuple[Container | None, bool]] = {}
        self._proxies = ProxyFinder(young_seconds, root)
        self._rules: list[ProxyRule] = []
        self._proxies_due = -math.inf
        self._shown: dict[int, _Shown] = {}

    def place(self, item: RawProcess) -> tuple[Container | None, bool]:
        """The record's container, and whether its network is private (from the cgroup and
        namespace its scan read)."""
        key = (item.pid, item.start_time)
        if key not in self._places:
            netns = item.netns
            private = netns is not None and self._host_netns is not None and netns != self._host_netns
            self._places[key] = (self._containers.read(item.pid, item.cgroup), private)
        return self._places[key]

    def publish(self, processes: list[EngineProcess]) -> list[EngineProcess]:
        """Engines in a private network namespace, with the host ports Docker's proxies forward
        to them. Proxies are looked for only while there is such an engine: at once when one
        appears, then every refresh period, as workers and sockets are."""
        private = [p for p in processes if p.private_network]
        if not private:
            self._shown = {}
            return processes
        now = time.monotonic()
        if now >= self._proxies_due or any(p.pid not in self._shown for p in private):
            self._rules = self._proxies.rules()
            self._proxies_due = now + self._refresh
        rules = self._rules
        shown: dict[int, _Shown] = {}
        result = []
        for process in processes:
            if process.private_network:
                entry = self._entry(process, rules)
                shown[process.pid] = entry
                process = entry[3]
            result.append(process)
        self._shown = shown
        return result

    def _entry(self, process: EngineProcess, rules: list[ProxyRule]) -> _Shown:
        """What is shown of an engine in a private network namespace: with the host ports
        Docker's proxies forward to it and those its runtime's API says its container publishes
        (the same model while they are unchanged); as it is, when they cannot be found."""
        return contained(
            "published ports",
            lambda: self._published(process, rules),
            lambda _reason: (process, rules, (), process),
        )

    def _published(self, process: EngineProcess, rules: list[ProxyRule]) -> _Shown:
        entry = self._shown.get(process.pid)
        if entry is not None and entry[0] is process and entry[1] is rules:
            return entry
        # A namespace of a user's own (unshare -rn) may hold any address on its loopback: what a
        # proxy forwards to that address is not its port.
        trusted = bool(rules) and netns_of_host_users(process.pid, self._root)
        addresses = netns_addresses(process.pid, self._root) if trusted else frozenset()
        ports = published_ports(rules, addresses, process.effective_port)
        if process.container is not None and process.container.ports:
            # The runtime's own word (Podman's netavark forwards in the kernel: no proxy process).
            api = {p for p in process.container.ports if p.container_port == process.effective_port}
            ports = tuple(
                sorted(set(ports) | api, key=lambda p: (":" in p.host_address, p.host_address, p.host_port))
            )
        if entry is not None and entry[0] is process and entry[2] == ports:
            view = entry[3]  # the same model as before: unchanged for callers
        elif ports:
            url = next((p.url for p in ports if p.url is not None), process.base_url)
            view = process.model_copy(update={"published": ports, "base_url": url})
        else:
            view = process
        return (process, rules, ports, view)

    def forget(self, alive: Collection[Key]) -> None:
        self._places = {key: place for key, place in self._places.items() if key in alive}


class PortConflicts:
    """Other processes listening on each engine's port, looked for when an engine appears and
    then every refresh period (they change without the engine changing)."""

    def __init__(self, root: HostRoot, refresh_seconds: float) -> None:
        self._root = root
        self._refresh = refresh_seconds
        self._at = -refresh_seconds

    def apply(
        self, processes: list[EngineProcess], built: dict[int, Built], *, appeared: bool
    ) -> list[EngineProcess]:
        """The processes with their current conflicts, when due; ``built`` is updated with them."""
        now = time.monotonic()
        if now - self._at < self._refresh and not appeared:
            return processes
        self._at = now
        with sockets.shared_tables():
            return [self._with_conflicts(process, built) for process in processes]

    def _with_conflicts(self, process: EngineProcess, built: dict[int, Built]) -> EngineProcess:
        """The process with its conflicts (the same object while they are unchanged; as it was,
        when they cannot be found)."""
        return contained(
            "port conflicts", lambda: self._conflicts_of(process, built), lambda _reason: process
        )

    def _conflicts_of(self, process: EngineProcess, built: dict[int, Built]) -> EngineProcess:
        port = process.effective_port
        found: tuple[int, ...] = ()
        if port is not None and port in process.listen_ports:
            found = sockets.conflicts((process.pid, *process.worker_pids), port, self._root.proc)
        if found == process.port_conflicts:
            return process
        updated = process.model_copy(update={"port_conflicts": found})
        updated._api_key = process._api_key
        item, parent_engine, _old = built[process.pid]
        built[process.pid] = (item, parent_engine, updated)
        return updated


def working_socket_url(
    definition: EngineDefinition, where: ArgvAddress, pid: int, role: Role, root: HostRoot
) -> ArgvAddress:
    """``where`` with the URL of a server that listens on a unix socket named relative to its
    working directory (Docker Model Runner's llama-server runners: ``--host
    inference-runner-0.sock``): the path joined to ``/proc/PID/cwd`` as seen inside the process's
    root (read through the host's door). When that cannot be (the directory cannot be read:
    another user's process to a scanner that is not root; it was deleted or lies outside the
    process's root; the path has a ``..``; the whole is over 107 bytes), no URL, and a problem
    says why. The path is only where the process says it listens: a check contacts it only if
    the process's tree holds a listening socket bound there, the file there is a socket, and the
    peer that accepts is the tree (health.reaching)."""
    host = where.effective_host
    if (
        where.base_url is not None
        or role in NOT_SERVING_ROLES
        or not definition.serving.socket_host
        or not is_relative_socket_path(host)
    ):
        return where
    path, problem = sockets.working_socket(pid, host, root.proc)
    url = unix_socket_url(path) if path is not None else None
    problems = where.problems if problem is None else (*where.problems, problem)
    return ArgvAddress(host, where.effective_port, url, problems)
