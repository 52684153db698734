"""Finding every engine running on this host: ``Scanner().scan()`` and ``scan()``."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import psutil
from pydantic import BaseModel, ConfigDict, PrivateAttr, computed_field

import enginespec.sockets as sockets
from enginespec._backend import ScannerType
from enginespec._pycontainers import Runtime
from enginespec._pymatcher import basename
from enginespec._pyscanner import RawProcess
from enginespec.argv import Invocation, argv_port, checkout, endpoint, flag_value, redact_argv, served_names
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
    published_ports,
)
from enginespec.definition import EngineDefinition, Fact
from enginespec.processmodels import cached, measured
from enginespec.registry import all_engines
from enginespec.settings import Source, config_location, merge, read_outside
from enginespec.signature import signatures_json

if TYPE_CHECKING:
    from enginespec.modelfacts import ModelFacts

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


class EngineProcess(Invocation):
    """A running engine server: what its argv says (see Invocation), plus the process facts.
    ``(pid, start_time)`` is its identity (pids are reused).

    ``argv`` has secret values (``--api-key``, ``--hf-token``) replaced by ``***``. ``worker_pids``
    are the server's descendants (vLLM/SGLang workers), folded into it. ``supervisor`` names who
    started it (``ollama``, ``llama-swap``, ``llama-server`` router) or is ``None``.
    ``listen_ports`` are the TCP ports the process tree listens on (empty when unknown).
    ``port_conflicts`` are the pids of other processes listening on the same address and port as
    the server (SO_REUSEPORT: the kernel splits its connections between them), Linux.

    ``container`` is the container it runs in (``None`` on the host). ``private_network`` says
    it runs in a network namespace other than the host's, where its own address may not be
    reachable from here; ``published`` are the host addresses Docker's proxy forwards to its port,
    and ``base_url`` is then the first of them.
    """

    pid: int
    start_time: float
    ppid: int
    #: ``None`` when argv gives no usable address (see ``problems``).
    base_url: str | None
    #: where each fact came from: ``argv``, ``config`` (the engine's config file), ``environment``
    #: (``/proc/PID/environ``, readable by root or the same user), ``default``, or for an
    #: ``orphan`` ``server`` (what the server it worked for said, while this scanner saw it).
    sources: Mapping[Fact, Source] = {}
    argv: tuple[str, ...]
    exe: str | None
    worker_pids: tuple[int, ...]
    supervisor: str | None
    listen_ports: tuple[int, ...]
    #: for an ``orphan``: the pid of the server it worked for, when this scanner saw that server.
    server_pid: int | None = None
    port_conflicts: tuple[int, ...] = ()
    container: Container | None = None
    private_network: bool = False
    published: tuple[PublishedPort, ...] = ()
    #: the engine's API key from its argv: used by health checks, never shown or serialised.
    _api_key: str | None = PrivateAttr(default=None)

    @functools.cached_property
    def model_facts(self) -> ModelFacts | None:
        """The facts of the model this engine serves, with the memory its engine allocates for
        it with its actual arguments (``ModelFacts.estimate``); ``None`` when they cannot be
        known (``model_facts_problem`` says why). Read on first access, never by the scan, and
        cached by (pid, start time, argv) across scans (``enginespec.processmodels``)."""
        result = cached(self.pid, self.start_time, self.engine, self.model, self.argv)
        if isinstance(result, str):
            return None
        held = measured(getattr(self, "gpus", ()))  # the GPU ledger's field, where this build has it
        return result.model_copy(update={"measured": held}) if held else result

    @property
    def model_facts_problem(self) -> str | None:
        """Why ``model_facts`` is ``None`` (the model's file that could not be read, and how)."""
        result = cached(self.pid, self.start_time, self.engine, self.model, self.argv)
        return result if isinstance(result, str) else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def engine_id(self) -> str:
        """A name for this engine that survives restarts of the same engine, model and port (pids
        and start times change): ``vllm-8000-1a2b3c4d``. For a container with a published port
        the port is the host's: two containers serving one model on port 8000 inside are told
        apart by the host ports they are published on."""
        port = self.published[0].host_port if self.published else self.effective_port
        identity = "\0".join((self.engine, self.model or "", str(port)))
        digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        return f"{self.engine}-{port or 'noport'}-{digest}"

    def secret_api_key(self) -> str | None:
        return self._api_key

    def environ_api_key(self, names: Sequence[str]) -> str | None:
        """An API key from the process's environment (``VLLM_API_KEY``...), when readable."""
        if not names:
            return None
        try:
            with open(f"/proc/{self.pid}/environ", "rb") as file:
                entries = file.read().split(b"\0")
        except OSError:
            return None
        wanted = {os.fsencode(name) + b"=" for name in names}
        for entry in entries:
            for prefix in wanted:
                if entry.startswith(prefix) and len(entry) > len(prefix):
                    return os.fsdecode(entry[len(prefix) :])
        return None


def process_alive(proc: EngineProcess) -> bool:
    """Whether the process with this identity (pid, start time) still runs (zombies do not)."""
    try:
        current = psutil.Process(proc.pid)
        return (
            abs(current.create_time() - proc.start_time) < 0.05 and current.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


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
    """

    def __init__(self, *, listen_ports: bool = True, config: Config | None = None) -> None:
        config = config or Config()
        self._specs = all_engines()
        self._backend = ScannerType(
            signatures_json(spec.signature for spec in self._specs),
            list(EXEC_WRAPPERS),
            YOUNG_SECONDS,
            TREE_REFRESH_SECONDS,
            listen_ports,
        )
        self._built: dict[int, tuple[RawProcess, str | None, EngineProcess]] = {}
        self._listen_ports = listen_ports
        #: when port conflicts were last looked for (they change without the engine changing).
        self._conflicts_at = -TREE_REFRESH_SECONDS
        #: pid -> (where its config file is seen from here, its modification time when read).
        self._configs: dict[int, tuple[str, int | None]] = {}
        #: (pid, start time) of a worker folded into a server -> that server, as last seen: what an
        #: orphan is known to have served.
        self._servers: dict[tuple[int, float], EngineProcess] = {}
        #: pid -> (its record, whether its checkout was found): checked once per record.
        self._checkouts: dict[int, tuple[RawProcess, bool]] = {}
        sockets: dict[Runtime, str] = {
            "docker": str(config.docker_socket),
            "podman": str(config.podman_socket),
        }
        self._containers = ContainerReader(sockets, config.container_api_timeout)
        self._host_netns = host_netns()
        #: (pid, start time) -> (its container, whether its network namespace is not the host's)
        self._places: dict[tuple[int, float], tuple[Container | None, bool]] = {}
        self._proxies = ProxyFinder(YOUNG_SECONDS)
        self._rules: list[ProxyRule] = []
        self._proxies_due = -math.inf
        self._shown: dict[int, _Shown] = {}

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
        pid, argv = item[0], item[3]
        needed = checkout(self._specs[item[4][0]].signature, argv)
        if needed is None:
            return True
        known = self._checkouts.get(pid)
        if known is not None and known[0] is item:
            return known[1]
        found = needed.missing(f"/proc/{pid}/root", f"/proc/{pid}/cwd") is None
        self._checkouts[pid] = (item, found)
        return found

    def scan(self) -> list[EngineProcess]:
        return self._engines(self._backend.scan())

    def _engines(self, everything: list[RawProcess]) -> list[EngineProcess]:
        """The models of a scan's records (those a checkout check keeps), workers folded into
        their servers."""
        raw = [item for item in everything if self._in_checkout(item)]
        folded: dict[int, int] = {}
        for pid, _start, _ppid, _argv, facts, _exe, descendants, _parent, _ports in raw:
            if self._specs[facts[0]].signature.fold_workers:
                folded.update((d, pid) for d in descendants if d != pid)
        engines_by_pid = {item[0]: self._specs[item[4][0]].id for item in raw}
        result = []
        built: dict[int, tuple[RawProcess, str | None, EngineProcess]] = {}
        for item in raw:
            pid, _start, ppid, _argv, _facts, _exe, _descendants, _parent_argv, _ports = item
            if pid in folded:
                continue
            parent_engine = engines_by_pid.get(ppid)
            # An unchanged process keeps its (frozen) model: polling costs no validation.
            previous = self._built.get(pid)
            # The backends hand back the very same record while nothing changed: an identity check.
            unchanged = previous is not None and previous[0] is item and previous[1] == parent_engine
            if previous is not None and unchanged and not self._config_changed(pid):
                process = previous[2]
            else:
                process = self._model(item, parent_engine)
            built[pid] = (item, parent_engine, process)
            result.append(process)
        now = time.monotonic()
        if self._listen_ports and (
            now - self._conflicts_at >= TREE_REFRESH_SECONDS or not built.keys() <= self._built.keys()
        ):
            self._conflicts_at = now
            result = [self._with_conflicts(process, built) for process in result]
        self._built = built
        self._configs = {pid: config for pid, config in self._configs.items() if pid in built}
        self._remember_servers(raw, folded, built)
        if self._checkouts:
            pids = {item[0] for item in everything}
            self._checkouts = {pid: known for pid, known in self._checkouts.items() if pid in pids}
        alive = {(p.pid, p.start_time) for p in result}
        self._places = {key: place for key, place in self._places.items() if key in alive}
        return self._publish(result)

    def _place(self, pid: int, start_time: float) -> tuple[Container | None, bool]:
        """Where the process runs: its container, and whether its network is private. Read once
        per (pid, start time)."""
        key = (pid, start_time)
        if key not in self._places:
            netns = netns_inode(pid)
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
                    addresses = netns_addresses(process.pid) if rules else frozenset()
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
        self, raw: list[RawProcess], folded: Mapping[int, int], built: Mapping[int, tuple[object, ...]]
    ) -> None:
        """Which server each folded worker works for, kept while the worker lives."""
        servers: dict[tuple[int, float], EngineProcess] = {}
        for pid, start, *_ in raw:
            server = folded.get(pid)
            known = self._servers.get((pid, start))
            if server is not None and server in built:
                # Only the outermost server: a folded worker's own workers belong to it too.
                while folded.get(server) in built:
                    server = folded[server]
                servers[(pid, start)] = built[server][2]  # type: ignore[assignment]
            elif known is not None:
                servers[(pid, start)] = known
        self._servers = servers

    @staticmethod
    def _with_conflicts(
        process: EngineProcess, built: dict[int, tuple[RawProcess, str | None, EngineProcess]]
    ) -> EngineProcess:
        """The process with its current port conflicts (the same object while they are unchanged)."""
        port = process.effective_port
        found: tuple[int, ...] = ()
        if port is not None and port in process.listen_ports:
            found = sockets.conflicts((process.pid, *process.worker_pids), port)
        if found == process.port_conflicts:
            return process
        updated = process.model_copy(update={"port_conflicts": found})
        updated._api_key = process._api_key
        item, parent_engine, _old = built[process.pid]
        built[process.pid] = (item, parent_engine, updated)
        return updated

    def _config_changed(self, pid: int) -> bool:
        """Whether the engine's config file was edited since its facts were read (a stat)."""
        config = self._configs.get(pid)
        if config is None:
            return False
        location, mtime = config
        try:
            return os.stat(location).st_mtime_ns != mtime
        except OSError:
            return mtime is not None

    def _model(self, item: RawProcess, parent_engine: str | None) -> EngineProcess:
        pid, start_time, ppid, argv, facts, exe, descendants, parent_argv, ports = item
        index, model, served, host, port, role = facts
        spec = self._specs[index]
        outside = read_outside(spec, pid, argv, runner=role == "runner")
        if outside.config_file is not None:
            self._configs[pid] = (config_location(pid, outside.config_file), outside.config_mtime)
        merged = merge(spec, outside, model, served, host, port, argv_port(spec.signature, argv))
        supervisor = _supervisor(spec, parent_argv, parent_engine)
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
            ppid=ppid,
            engine=spec.id,
            model=merged.model,
            served_model_names=served_names(spec.signature, merged.model, merged.served_model_names),
            host=merged.host,
            port=merged.port,
            effective_host=where.effective_host,
            effective_port=where.effective_port,
            role=role,
            problems=merged.problems + where.problems,
            sources=merged.sources,
            base_url=where.base_url,
            argv=tuple(redact_argv(argv, spec.id)),
            exe=exe,
            worker_pids=tuple(descendants),
            supervisor=supervisor,
            listen_ports=tuple(ports),
            server_pid=server.pid if server is not None else None,
            container=container,
            private_network=private_network,
        )
        if spec.serving.api_key_flag:
            process._api_key = flag_value(argv, spec.signature, spec.serving.api_key_flag)
        return process


def scan(*, listen_ports: bool = True, config: Config | None = None) -> list[EngineProcess]:
    """One-shot scan of this host (keep a :class:`Scanner` for polling)."""
    return Scanner(listen_ports=listen_ports, config=config).scan()
