"""Finding every engine running on this host: ``Scanner().scan()`` and ``scan()``."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

import enginespec.sockets as sockets
from enginespec._backend import ScannerType
from enginespec._common import ARGV_CUT, MAX_ARGV_ARGS, MAX_ARGV_BYTES, RawProcess, Runtime, Woke, basename
from enginespec._procfiles import Identity, first_missing, named_identity
from enginespec.argv import argv_port, checkout, endpoint, flag_value, redact_argv, served_names
from enginespec.config import Config
from enginespec.containers import (
    Container,
    ContainerReader,
    ProxyFinder,
    ProxyRule,
    PublishedPort,
    host_netns,
    netns_addresses,
    netns_inode,
    netns_of_host_users,
    published_ports,
)
from enginespec.definition import EngineDefinition
from enginespec.engineprocess import EngineProcess
from enginespec.errors import InvalidInputError
from enginespec.gpus import EngineTree, GpuDevice, GpuReader, Held, ledger
from enginespec.registry import all_engines
from enginespec.settings import merge, read_outside, serves_by_environment
from enginespec.signature import signatures_json

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from typing_extensions import Unpack

    from enginespec.watching import Watch, WatchEvent, WatchOptions

#: Programs that commonly replace themselves with another program (`exec`): shells running a
#: launch script, `env`, `nohup`, privilege and scheduling wrappers, container inits. A process
#: running one of them is watched until it execs, so an engine it becomes is found at once.
EXEC_WRAPPERS: tuple[str, ...] = (
    "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox",
    "env", "nohup", "exec", "timeout", "nice", "ionice", "chrt", "taskset", "numactl", "stdbuf",
    "setsid", "sudo", "su", "runuser", "setpriv", "tini", "dumb-init", "catatonit", "s6-setuidgid",
)  # fmt: skip
#: How long a process born since the previous scan is watched for an exec.
YOUNG_SECONDS = 5.0
#: How often an engine's workers and listening sockets are re-read (at once when an engine appears).
TREE_REFRESH_SECONDS = 2.0


class ScanStats(BaseModel):
    """What the last scan did. ``unreadable`` counts processes whose argv could not be read
    (permissions, hidepid), on every scan; ``restricted`` counts engines reported without some of
    their facts because their executable, fds or sockets could not be read (``exe`` None, ports
    missing: another user's process, for a scan that is not root); ``reread`` counts known
    processes read again (watched for an exec, argv rewritten, or pid maybe reused);
    ``full_recheck`` is set when the kernel's pid cursor could not bound pid reuse; ``known`` is how
    many processes the scanner remembers."""

    model_config = ConfigDict(frozen=True)

    scanned: int = 0
    new: int = 0
    vanished: int = 0
    unreadable: int = 0
    restricted: int = 0
    reread: int = 0
    full_recheck: bool = False
    known: int = 0


#: An engine in a private network namespace: (its model as built, the proxy rules its ports were
#: matched against, its published ports, the model shown: with them and the base URL they give).
_Shown = tuple[EngineProcess, list[ProxyRule], tuple[PublishedPort, ...], EngineProcess]


def _supervisor(spec: EngineDefinition, parent_argv: Sequence[str], parent_engine: str | None) -> str | None:
    if parent_engine == spec.id and spec.serving.nested_supervisor:
        return spec.serving.nested_supervisor
    if not parent_argv:
        return None
    return spec.serving.supervisors.get(basename(parent_argv[0]))


class Scanner:
    """Keeps state between scans so each poll costs little more than listing ``/proc``.

    ``scan()`` never raises because of a process: vanished, zombie, unreadable (permissions,
    hidepid) and retitled processes are skipped or handled and counted in :attr:`stats`.
    ``gpus=False``: leave ``EngineProcess.gpus`` empty (nothing of the GPUs is read).
    """

    def __init__(
        self,
        *,
        listen_ports: bool = True,
        config: Config | None = None,
        gpus: bool = True,
        root: str | os.PathLike[str] = "/",
    ) -> None:
        config = config or Config()
        root = os.fspath(root)
        if not root.startswith("/") or not os.path.isdir(root):
            raise InvalidInputError(f"root: {root!r} is not an absolute path of a directory")
        #: where every file of a process is read: ``ROOT/proc`` (a fixture host's, or ``/proc``)
        self._proc = os.path.join(root, "proc")
        self._specs = all_engines()
        self._backend = ScannerType(
            signatures_json(spec.signature for spec in self._specs),
            list(EXEC_WRAPPERS),
            YOUNG_SECONDS,
            TREE_REFRESH_SECONDS,
            listen_ports,
            root=None if os.path.realpath(root) == "/" else root,
        )
        #: what the backend's start times count from, to have each engine's start ticks back
        self._boot_time = self._backend.boot_time
        self._clock_ticks = os.sysconf("SC_CLK_TCK") if self._boot_time is not None else 0
        self._built: dict[int, tuple[RawProcess, str | None, EngineProcess]] = {}
        self._listen_ports = listen_ports
        #: when port conflicts were last looked for (they change without the engine changing).
        self._conflicts_at = -TREE_REFRESH_SECONDS
        #: pid -> (its config file as it names it, the identity of what was read).
        self._configs: dict[int, tuple[str, Identity | None]] = {}
        #: (pid, start time) of a worker folded into a server -> that server, as last seen: what an
        #: orphan is known to have served.
        self._servers: dict[tuple[int, float], EngineProcess] = {}
        #: pid -> (its record, whether its checkout was found): checked once per record.
        self._checkouts: dict[int, tuple[RawProcess, bool]] = {}
        sockets: dict[Runtime, str] = {
            "docker": str(config.docker_socket),
            "podman": str(config.podman_socket),
        }
        self._containers = ContainerReader(sockets, config.container_api_timeout, self._proc)
        self._host_netns = host_netns(self._proc)
        #: (pid, start time) -> (its container, whether its network namespace is not the host's)
        self._places: dict[tuple[int, float], tuple[Container | None, bool]] = {}
        #: (pid, start time) of a follower -> whether its environment makes it a server
        #: (``Settings.server_environment``), read once per process.
        self._serving: dict[tuple[int, float], bool] = {}
        #: a server by its environment, or one of its workers -> that server (see _engines)
        self._detached: dict[int, int] = {}
        self._proxies = ProxyFinder(YOUNG_SECONDS, self._proc)
        self._rules: list[ProxyRule] = []
        self._proxies_due = -math.inf
        self._shown: dict[int, _Shown] = {}
        self._gpus = GpuReader(root) if gpus else None
        self._gpu_views: dict[int, tuple[EngineProcess, EngineProcess]] = {}

    @property
    def stats(self) -> ScanStats:
        scanned, new, vanished, unreadable, restricted, reread, full_recheck, known = self._backend.stats()
        return ScanStats(
            scanned=scanned,
            new=new,
            vanished=vanished,
            unreadable=unreadable,
            restricted=restricted,
            reread=reread,
            full_recheck=full_recheck,
            known=known,
        )

    def _in_checkout(self, item: RawProcess) -> bool:
        """Whether a process whose program counts only inside its engine's checkout (TabbyAPI's
        ``main.py``) runs in one, seen through its own root and working directory; a process
        whose directories cannot be read (another user's, for a scan that is not root) does not
        count: the program's name alone says nothing."""
        pid = item.pid
        needed = checkout(self._specs[item.facts.engine].signature, item.argv)
        if needed is None:
            return True
        known = self._checkouts.get(pid)
        if known is not None and known[0] is item:
            return known[1]
        paths = needed.paths()
        found = paths is not None and first_missing(pid, paths, self._proc) is None
        self._checkouts[pid] = (item, found)
        return found

    def scan(self) -> list[EngineProcess]:
        return self._engines(self._backend.scan())

    def _wait(self, timeout: float) -> tuple[list[EngineProcess], Woke]:
        raw, woke = self._backend.wait(timeout)
        return self._engines(raw), woke

    def watch(self, interval: float = 1.0, **options: Unpack[WatchOptions]) -> Watch:
        """A blocking iterator of events (see :mod:`enginespec.watching`). ``interval``: how often
        the engines are re-checked (workers, ports, argv rewrites) and, when polling, how often
        ``/proc`` is scanned. The options (:class:`~enginespec.watching.WatchOptions`, by keyword):

        - ``health`` (``False``): also check every engine's health every ``health_interval``
          seconds (2), each check within ``health_timeout`` seconds (2), on its own thread (a slow
          engine never delays a scan), and report each change of state.
        - ``poll`` (``False``): do not use the kernel's process events.
        - ``load`` (``True``): the health checks also read each engine's load (one more request
          per engine and check), which tells ``busy`` and ``stalled`` engines (``stall_after``
          seconds; see :mod:`enginespec.vitals`).
        - ``verify_identity`` (``False``): ``ready`` also means the server serves the model its
          argv names (see :func:`check_health`).

        The remembered workers of ready servers are looked at every ``WORKER_POLL_SECONDS``
        (50 ms), and at once when process events woke the scanner: their exit is a
        ``worker_lost`` event."""
        from enginespec.watching import Watch, WatchSource  # a scan alone does not load it

        return Watch(WatchSource(self.scan, self._backend.subscribe_events, self._wait), interval, **options)

    def watch_async(
        self, interval: float = 1.0, **options: Unpack[WatchOptions]
    ) -> AsyncIterator[WatchEvent]:
        """:meth:`watch` as an async iterator (the scanning runs on threads, never in the loop)."""
        return self.watch(interval, **options)._aiter()

    def _engines(self, everything: list[RawProcess]) -> list[EngineProcess]:
        """The models of a scan's records (those a checkout check keeps), workers folded into
        their servers."""
        raw = [item for item in everything if self._in_checkout(item)]
        # Followers that their environment makes servers stand on their own, with their own
        # workers, even inside another process's tree.
        serving = {item.pid for item in raw if self._serves(item)}
        folded: dict[int, int] = {}
        for item in raw:
            if self._specs[item.facts.engine].signature.fold_workers:
                folded.update((d, item.pid) for d in item.descendants if d != item.pid and d not in serving)
        # ... and neither they nor their workers are workers of the process that started them.
        self._detached = {pid: pid for pid in serving}
        for item in raw:
            if item.pid in serving and self._specs[item.facts.engine].signature.fold_workers:
                folded.update((d, item.pid) for d in item.descendants if d != item.pid and d not in serving)
                self._detached.update((d, item.pid) for d in item.descendants if d not in serving)
        engines_by_pid = {item.pid: self._specs[item.facts.engine].id for item in raw}
        result = []
        built: dict[int, tuple[RawProcess, str | None, EngineProcess]] = {}
        for item in raw:
            pid = item.pid
            if pid in folded:
                continue
            parent_engine = engines_by_pid.get(item.ppid)
            # An unchanged process keeps its (frozen) model: polling costs no validation.
            previous = self._built.get(pid)
            # The backends hand back the very same record while nothing changed: an identity check.
            unchanged = previous is not None and previous[0] is item and previous[1] == parent_engine
            if previous is not None and unchanged and not self._config_changed(pid):
                process = previous[2]
            else:
                process = self._model(item, parent_engine, pid in serving)
            built[pid] = (item, parent_engine, process)
            result.append(process)
        now = time.monotonic()
        if self._listen_ports and (
            now - self._conflicts_at >= TREE_REFRESH_SECONDS or not built.keys() <= self._built.keys()
        ):
            self._conflicts_at = now
            with sockets.shared_tables():
                result = [self._with_conflicts(process, built) for process in result]
        self._built = built
        self._configs = {pid: config for pid, config in self._configs.items() if pid in built}
        self._remember_servers(raw, folded, built)
        if self._checkouts:
            pids = {item.pid for item in everything}
            self._checkouts = {pid: known for pid, known in self._checkouts.items() if pid in pids}
        alive = {(p.pid, p.start_time) for p in result}
        self._places = {key: place for key, place in self._places.items() if key in alive}
        self._serving = {key: known for key, known in self._serving.items() if key in alive}
        result = self._publish(result)
        if self._gpus is not None:
            result, self._gpu_views = with_held(result, self._gpus.read(trees(result)), self._gpu_views)
        return result

    def _serves(self, item: RawProcess) -> bool:
        """Whether a follower is its deployment's server by its environment (read once)."""
        spec = self._specs[item.facts.engine]
        if item.facts.role != "follower" or not spec.settings.server_environment:
            return False
        key = (item.pid, item.start_time)
        if key not in self._serving:
            self._serving[key] = serves_by_environment(spec, item.pid, self._proc)
        return self._serving[key]

    def _place(self, pid: int, start_time: float) -> tuple[Container | None, bool]:
        """Where the process runs: its container, and whether its network is private. Read once
        per (pid, start time)."""
        key = (pid, start_time)
        if key not in self._places:
            netns = netns_inode(pid, self._proc)
            private = netns is not None and self._host_netns is not None and netns != self._host_netns
            self._places[key] = (self._containers.read(pid), private)
        return self._places[key]

    def _publish(self, processes: list[EngineProcess]) -> list[EngineProcess]:
        """Engines in a private network namespace, with the host ports Docker's proxies forward
        to them. Proxies are looked for only while there is such an engine: at once when one
        appears, then every TREE_REFRESH_SECONDS, as workers and sockets are."""
        private = [p for p in processes if p.private_network]
        if not private:
            self._shown = {}
            return processes
        now = time.monotonic()
        if now >= self._proxies_due or any(p.pid not in self._shown for p in private):
            self._rules = self._proxies.rules()
            self._proxies_due = now + TREE_REFRESH_SECONDS
        rules = self._rules
        shown: dict[int, _Shown] = {}
        result = []
        for process in processes:
            if process.private_network:
                entry = self._shown.get(process.pid)
                if entry is None or entry[0] is not process or entry[1] is not rules:
                    # A namespace of a user's own (unshare -rn) may hold any address on its
                    # loopback: what a proxy forwards to that address is not its port.
                    trusted = bool(rules) and netns_of_host_users(process.pid, self._proc)
                    addresses = netns_addresses(process.pid, self._proc) if trusted else frozenset()
                    ports = published_ports(rules, addresses, process.effective_port)
                    if entry is not None and entry[0] is process and entry[2] == ports:
                        view = entry[3]  # the same model as before: unchanged for callers
                    elif ports:
                        url = next((p.url for p in ports if p.url is not None), process.base_url)
                        view = process.model_copy(update={"published": ports, "base_url": url})
                    else:
                        view = process
                    entry = (process, rules, ports, view)
                shown[process.pid] = entry
                process = entry[3]
            result.append(process)
        self._shown = shown
        return result

    def _remember_servers(
        self,
        raw: list[RawProcess],
        folded: Mapping[int, int],
        built: Mapping[int, tuple[RawProcess, str | None, EngineProcess]],
    ) -> None:
        """Which server each folded worker works for, kept while the worker lives."""
        servers: dict[tuple[int, float], EngineProcess] = {}
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

    def _with_conflicts(
        self, process: EngineProcess, built: dict[int, tuple[RawProcess, str | None, EngineProcess]]
    ) -> EngineProcess:
        """The process with its current port conflicts (the same object while they are unchanged)."""
        port = process.effective_port
        found: tuple[int, ...] = ()
        if port is not None and port in process.listen_ports:
            found = sockets.conflicts((process.pid, *process.worker_pids), port, self._proc)
        if found == process.port_conflicts:
            return process
        updated = process.model_copy(update={"port_conflicts": found})
        updated._api_key = process._api_key
        item, parent_engine, _old = built[process.pid]
        built[process.pid] = (item, parent_engine, updated)
        return updated

    def _config_changed(self, pid: int) -> bool:
        """Whether the engine's config file was edited (or replaced) since its facts were read."""
        config = self._configs.get(pid)
        return config is not None and named_identity(pid, config[0], self._proc) != config[1]

    def _model(self, item: RawProcess, parent_engine: str | None, serving: bool = False) -> EngineProcess:
        pid, start_time, argv, facts = item.pid, item.start_time, item.argv, item.facts
        role = "server" if serving else facts.role
        spec = self._specs[facts.engine]
        cut: tuple[str, ...] = ()
        if argv and argv[-1] == ARGV_CUT:
            # The backend examined and kept only the start of a huge argv (its cost is capped).
            argv = argv[:-1]
            cut = (
                f"argv goes on beyond {MAX_ARGV_ARGS} arguments or {MAX_ARGV_BYTES} bytes: only its"
                f" first {len(argv)} arguments are examined and shown",
            )
        outside = read_outside(spec, pid, argv, runner=role == "runner", proc=self._proc)
        if outside.config_file is not None:
            self._configs[pid] = (outside.config_file, outside.config_identity)
        # A port argv gives elsewhere than in a port flag (a follower's own flag, a positional port,
        # an address) is argv's too.
        port_text = argv_port(spec.signature, argv) or (str(facts.port) if facts.port is not None else None)
        merged = merge(spec, outside, facts.model, facts.served_names, facts.host, facts.port, port_text)
        supervisor = _supervisor(spec, item.parent_argv, parent_engine)
        container, private_network = self._place(pid, start_time)
        # A server another server started for one model (Ollama's, llama-swap's, a router's) is
        # that supervisor's runner.
        if supervisor is not None and role == "server":
            role = "runner"
        # A worker under a live server is folded into it (see scan): one listed here has lost it,
        # and served what that server served, if this scanner saw it.
        server = None
        if role == "worker":
            role = "orphan"
            server = self._servers.get((pid, start_time))
            if server is not None and merged.model is None:
                merged = dataclasses.replace(
                    merged,
                    model=server.model,
                    served_model_names=server.served_model_names,
                    sources={**merged.sources, "model": "server", "served_model_name": "server"},
                )
        where = endpoint(spec, argv, merged.host, merged.port, merged.port_text, role)
        process = EngineProcess(
            pid=pid,
            start_time=start_time,
            ppid=item.ppid,
            engine=spec.id,
            model=merged.model,
            served_model_names=served_names(spec.signature, merged.model, merged.served_model_names),
            host=merged.host,
            port=merged.port,
            effective_host=where.effective_host,
            effective_port=where.effective_port,
            role=role,
            problems=cut + merged.problems + where.problems,
            sources=merged.sources,
            base_url=where.base_url,
            argv=tuple(redact_argv(argv, spec.id)),
            exe=item.exe,
            worker_pids=tuple(d for d in item.descendants if self._detached.get(d, pid) == pid),
            supervisor=supervisor,
            listen_ports=tuple(item.listen_ports),
            server_pid=server.pid if server is not None else None,
            container=container,
            private_network=private_network,
        )
        flagged = (
            flag_value(argv, spec.signature, spec.serving.api_key_flag) if spec.serving.api_key_flag else None
        )
        process._api_key = flagged or outside.api_key
        if self._boot_time is not None:
            process._start_ticks = round((start_time - self._boot_time) * self._clock_ticks)
        return process


def engine_document(
    process: EngineProcess, health: BaseModel | None = None, load: BaseModel | None = None
) -> dict[str, Any]:
    """The JSON object of an engine, as ``ps --json`` and the agent's ``/v1/engines`` give it:
    the :class:`EngineProcess`, with its ``health`` (a :class:`Health`) and ``load`` (an
    :class:`EngineLoad`) when they were read."""
    document = process.model_dump(mode="json")
    if health is not None:
        document["health"] = health.model_dump(mode="json")
    if load is not None:
        document["load"] = load.model_dump(mode="json")
    return document


def scan(*, listen_ports: bool = True, config: Config | None = None) -> list[EngineProcess]:
    """One-shot scan of this host (keep a :class:`Scanner` for polling)."""
    return Scanner(listen_ports=listen_ports, config=config).scan()


def trees(processes: Sequence[EngineProcess]) -> list[tuple[int, ...]]:
    """Each engine's process tree: the server (or orphan) and its workers."""
    return [(p.pid, *p.worker_pids) for p in processes]


def with_held(
    processes: Sequence[EngineProcess],
    held: Sequence[Held],
    views: Mapping[int, tuple[EngineProcess, EngineProcess]],
) -> tuple[list[EngineProcess], dict[int, tuple[EngineProcess, EngineProcess]]]:
    """The processes with the GPUs their trees hold; an unchanged one is the same object as in
    the previous result (``views``: pid -> (process, with GPUs)), so a watch sees no change."""
    result = []
    shown = {}
    for process, (uses, unknown) in zip(processes, held, strict=True):
        entry = views.get(process.pid)
        if (
            entry is not None
            and entry[0] is process
            and (entry[1].gpus, entry[1].gpus_unknown) == (uses, unknown)
        ):
            view = entry[1]
        elif (process.gpus, process.gpus_unknown) == (uses, unknown):
            view = process
        else:
            view = process.model_copy(update={"gpus": uses, "gpus_unknown": unknown})
            view._api_key = process._api_key
        shown[process.pid] = (process, view)
        result.append(view)
    return result, shown


def with_gpus(
    processes: Sequence[EngineProcess], *, root: str = "/", nvml: bool = True
) -> list[EngineProcess]:
    """The processes with the GPUs their trees hold, read on the host under ``root`` (a fixture
    host: a directory laid out like ``/``); what a scan fills in."""
    return with_held(processes, GpuReader(root, nvml=nvml).read(trees(processes)), {})[0]


def unique_engine_ids(processes: Sequence[EngineProcess]) -> list[str]:
    """Each process's engine_id; when two running engines have the same one (the same engine,
    model and port: sharing it through SO_REUSEPORT), the later ones get their pid appended, as
    two series with the same labels would make Prometheus reject the whole scrape."""
    seen: set[str] = set()
    ids = []
    for process in processes:
        engine_id = process.engine_id
        if engine_id in seen:
            engine_id = f"{engine_id}-pid{process.pid}"
        seen.add(engine_id)
        ids.append(engine_id)
    return ids


def gpu_ledger(
    processes: Sequence[EngineProcess] | None = None,
    *,
    root: str = "/",
    nvml: bool = True,
    all_processes: bool = True,
    reread: bool = True,
) -> tuple[GpuDevice, ...]:
    """One :class:`~enginespec.gpus.GpuDevice` per GPU of the host under ``root``: which engine
    holds how much of it (orphaned trees marked ``reclaimable``), which other processes, and what
    is unattributed. ``processes`` default to a scan of this host. With ``all_processes`` every
    process's open files are listed to find the other holders (more than a scan reads); NVML's
    own lists are used whenever NVML loads. ``reread=False`` takes what the trees hold from the
    records (``gpus``, as their scan read it) and reads only the devices."""
    if processes is None:
        if os.path.realpath(root) != "/":
            raise InvalidInputError(f"processes: a scan reads this host, not the host under root={root!r}")
        processes = scan(listen_ports=False)
    engines = [
        EngineTree(engine_id, (p.pid, *p.worker_pids), p.role == "orphan")
        for engine_id, p in zip(unique_engine_ids(processes), processes, strict=True)
    ]
    held = None if reread else [(p.gpus, p.gpus_unknown) for p in processes]
    return ledger(engines, root=root, nvml=nvml, all_processes=all_processes, held=held)
