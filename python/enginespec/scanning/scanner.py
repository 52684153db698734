"""Finding every engine running on this host: ``Scanner().scan()`` and ``scan()``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from enginespec._host.backend import ScannerType
from enginespec._host.root import HostRoot, host_root
from enginespec._host.shapes import (
    ARGV_CUT,
    MAX_ARGV_ARGS,
    MAX_ARGV_BYTES,
    RawProcess,
    ReadSet,
    Woke,
    basename,
)
from enginespec.config import Config
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import all_engines, definition_of
from enginespec.definition.signature import signatures_json
from enginespec.errors import InvalidInputError
from enginespec.gpus.reader import EngineTree, GpuDevice, GpuReader, Held, ledger
from enginespec.process.argv import (
    argv_port,
    checkout_programs,
    endpoint,
    flag_value,
    redact_argv,
    served_names,
)
from enginespec.process.containers import Container
from enginespec.process.record import EngineProcess
from enginespec.process.settings import environment_names, first_key, merge
from enginespec.scanning.stages import (
    Built,
    Folding,
    NetworkPlacement,
    OutsideFacts,
    PortConflicts,
    working_socket_url,
)
from enginespec.untrusted.boundary import contained

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from typing_extensions import Unpack

    from enginespec.scanning.watch import Watch, WatchEvent, WatchOptions

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


#: How many ancestors above the parent are looked at for a supervisor (a shell, a wrapper between).
SUPERVISOR_DEPTH = 3


def _supervisor(
    spec: EngineDefinition, item: RawProcess, parent_engine: str | None, root: HostRoot
) -> str | None:
    """Who started the engine process ``item`` for one model, by its engine's data: a mark in its
    environment, a parent of the same engine that nests them (a router), a parent of an engine that
    starts runners (``Serving.starts_runners``: Lemonade), or a supervisor's
    program as its parent or an ancestor above it (read through the one door, as its argv)."""
    serving = spec.serving
    for name, _value in item.environ.vars if item.environ is not None else ():
        if name in serving.supervisor_markers:
            return serving.supervisor_markers[name]
    if parent_engine == spec.id and serving.nested_supervisor:
        return serving.nested_supervisor
    if parent_engine is not None and parent_engine != spec.id:
        parent = definition_of(parent_engine)
        if parent is not None and parent.serving.starts_runners:
            return parent.id
    if not serving.supervisors:
        return None
    if item.parent_argv and basename(item.parent_argv[0]) in serving.supervisors:
        return serving.supervisors[basename(item.parent_argv[0])]
    pid = item.ppid
    for _ in range(SUPERVISOR_DEPTH):
        stat = root.stat(pid)
        if stat is None or stat.ppid <= 1:
            return None
        pid = stat.ppid
        try:
            program = root.read(pid, "cmdline", 4096).split(b"\0", 1)[0]
        except OSError:
            return None
        found = serving.supervisors.get(basename(program.decode("utf-8", "replace")))
        if found is not None:
            return found
    return None


def _labelled_by(specs: Sequence[EngineDefinition], container: Container | None) -> EngineDefinition | None:
    """The supervisor whose mark (``Serving.container_labels``) the container of a process
    carries, as its runtime's API gave its labels (RamaLama's ``ai.ramalama``)."""
    if container is None or not container.labels:
        return None
    for spec in specs:
        marks = spec.serving.container_labels
        if marks is not None and container.label_value(marks.marker) is not None:
            return spec
    return None


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
        #: where every file of a process is read, during the scan and after it (its records carry it)
        self._root = host_root(root)
        self._specs = all_engines()
        self._backend = ScannerType(
            signatures_json(spec.signature for spec in self._specs),
            list(EXEC_WRAPPERS),
            YOUNG_SECONDS,
            TREE_REFRESH_SECONDS,
            listen_ports,
            root=None if self._root.is_host else root,
            read_set=ReadSet(
                [environment_names(spec) for spec in self._specs],
                cgroup=True,
                netns=True,
                checkouts=[checkout_programs(spec.signature) for spec in self._specs],
                devices=gpus,
            ),
        )
        #: what the backend's start times count from, to have each engine's start ticks back
        self._boot_time = self._backend.boot_time
        self._clock_ticks = os.sysconf("SC_CLK_TCK") if self._boot_time is not None else 0
        self._built: dict[int, Built] = {}
        self._listen_ports = listen_ports
        # The stages a scan's records go through (see scanstages).
        self._folding = Folding(self._specs)
        self._outside = OutsideFacts(self._root)
        self._placement = NetworkPlacement(
            config, self._root, TREE_REFRESH_SECONDS, YOUNG_SECONDS, self._specs
        )
        self._conflicts = PortConflicts(self._root, TREE_REFRESH_SECONDS)
        self._gpus = GpuReader(root) if gpus else None
        self._gpu_views: dict[int, tuple[EngineProcess, EngineProcess]] = {}

    @property
    def stats(self) -> ScanStats:
        return ScanStats(**self._backend.stats()._asdict())

    def scan(self) -> list[EngineProcess]:
        return self._engines(self._backend.scan())

    def _wait(self, timeout: float) -> tuple[list[EngineProcess], Woke]:
        raw, woke = self._backend.wait(timeout)
        return self._engines(raw), woke

    def watch(self, interval: float = 1.0, **options: Unpack[WatchOptions]) -> Watch:
        """A blocking iterator of events (see :mod:`enginespec.scanning.watch`). ``interval``: how often
        the engines are re-checked (workers, ports, argv rewrites) and, when polling, how often
        ``/proc`` is scanned. The options (:class:`~enginespec.scanning.watch.WatchOptions`, by keyword):

        - ``health`` (``False``): also check every engine's health every ``health_interval``
          seconds (2), each check within ``health_timeout`` seconds (2), on its own thread (a slow
          engine never delays a scan), and report each change of state.
        - ``poll`` (``False``): do not use the kernel's process events.
        - ``load`` (``True``): the health checks also read each engine's load (one more request
          per engine and check), which tells ``busy`` and ``stalled`` engines (``stall_after``
          seconds; see :mod:`enginespec.health.vitals`).
        - ``verify_identity`` (``False``): ``ready`` also means the server serves the model its
          argv names (see :func:`check_health`).
        - ``models`` (``False``): the health checks also read what each server whose models come
          and go serves (see :mod:`enginespec.health.servedmodels`), and each model that is
          loaded, unloaded, put to sleep or woken is an event (``model_loaded``,
          ``model_unloaded``, ``model_sleeping``, ``model_woke``).

        The remembered workers of ready servers are looked at every ``WORKER_POLL_SECONDS``
        (50 ms), and at once when process events woke the scanner: their exit is a
        ``worker_lost`` event."""
        from enginespec.scanning.watch import Watch, WatchSource  # a scan alone does not load it

        return Watch(WatchSource(self.scan, self._backend.subscribe_events, self._wait), interval, **options)

    def watch_async(
        self, interval: float = 1.0, **options: Unpack[WatchOptions]
    ) -> AsyncIterator[WatchEvent]:
        """:meth:`watch` as an async iterator (the scanning runs on threads, never in the loop)."""
        return self.watch(interval, **options)._aiter()

    def _engines(self, everything: list[RawProcess]) -> list[EngineProcess]:
        """The models of a scan's records (those a checkout check keeps), workers folded into
        their servers, placed, published, and with their port conflicts and GPUs."""
        # A program that is its engine only inside its checkout counts where the backend found one.
        raw = [item for item in everything if item.in_checkout is not False]
        serving, folded = self._folding.fold(raw)
        engines_by_pid = {item.pid: self._specs[item.facts.engine_index].id for item in raw}
        result = []
        built: dict[int, Built] = {}
        for item in raw:
            pid = item.pid
            if pid in folded:
                continue
            parent_engine = engines_by_pid.get(item.ppid)
            # An unchanged process keeps its (frozen) model: polling costs no validation.
            previous = self._built.get(pid)
            # The backends hand back the very same record while nothing changed: an identity check.
            unchanged = previous is not None and previous[0] is item and previous[1] == parent_engine
            if previous is not None and unchanged and not self._outside.changed(pid):
                process = previous[2]
            else:
                process = self._record(item, parent_engine, pid in serving)
            built[pid] = (item, parent_engine, process)
            result.append(process)
        if self._listen_ports:
            result = self._conflicts.apply(result, built, appeared=not built.keys() <= self._built.keys())
        self._built = built
        self._outside.forget(built)
        self._folding.remember(raw, folded, built)
        alive = {(p.pid, p.start_time) for p in result}
        self._placement.forget(alive)
        self._folding.forget(alive)
        result = self._placement.publish(result)
        if self._gpus is not None:
            # The devices the backend listed with each tree's sockets (what it did not list, the
            # reader lists itself).
            opened = {pid: fds for item in raw if item.devices for pid, fds in item.devices.items()}
            held = self._gpus.read(trees(result), opened)
            result, self._gpu_views = with_held(result, held, self._gpu_views)
        return result

    def _record(self, item: RawProcess, parent_engine: str | None, serving: bool) -> EngineProcess:
        """The record's model (:meth:`_model`), or when building it fails, what is known of it."""
        return contained(
            "engine record",
            lambda: self._model(item, parent_engine, serving),
            lambda reason: self._unbuilt(item, reason),
        )

    def _unbuilt(self, item: RawProcess, reason: str) -> EngineProcess:
        """The record of a process whose model could not be built (see :mod:`enginespec.untrusted.boundary`):
        what the backend read, no address, and why in ``problems``. Its argv is shown only when
        its secrets could be masked."""
        spec = self._specs[item.facts.engine_index]
        argv = item.argv[:-1] if item.argv and item.argv[-1] == ARGV_CUT else item.argv
        shown: tuple[str, ...] = contained(
            "argv redaction", lambda: tuple(redact_argv(argv, spec.id)), lambda _reason: ()
        )
        process = EngineProcess(
            pid=item.pid,
            start_time=item.start_time,
            ppid=item.ppid,
            engine=spec.id,
            model=None,
            served_model_names=(),
            host=None,
            port=None,
            effective_host="",
            effective_port=None,
            role=item.facts.role if item.facts.role != "worker" else "orphan",
            problems=(reason,),
            base_url=None,
            argv=shown,
            exe=item.exe,
            worker_pids=(),
            supervisor=None,
            listen_ports=tuple(item.listen_ports),
        )
        process._root = self._root
        return process

    def _model(self, item: RawProcess, parent_engine: str | None, serving: bool = False) -> EngineProcess:
        pid, start_time, argv, facts = item.pid, item.start_time, item.argv, item.facts
        role = "server" if serving else facts.role
        spec = self._specs[facts.engine_index]
        cut: tuple[str, ...] = ()
        if argv and argv[-1] == ARGV_CUT:
            # The backend examined and kept only the start of a huge argv (its cost is capped).
            argv = argv[:-1]
            cut = (
                f"argv goes on beyond {MAX_ARGV_ARGS} arguments or {MAX_ARGV_BYTES} bytes: only its"
                f" first {len(argv)} arguments are examined and shown",
            )
        outside = self._outside.read(spec, item, argv, runner=role == "runner")
        # A port argv gives elsewhere than in a port flag (a follower's own flag, a positional port,
        # an address) is argv's too.
        port_text = argv_port(spec.signature, argv) or (str(facts.port) if facts.port is not None else None)
        merged = merge(spec, outside, facts.model, facts.served_names, facts.host, facts.port, port_text)
        supervisor = _supervisor(spec, item, parent_engine, self._root)
        container, private_network = self._placement.place(item)
        # A server in a container a supervisor labelled as its own (RamaLama's) is its runner;
        # the label names its model where its argv names none (llama.cpp's router).
        labeller = _labelled_by(self._specs, container) if supervisor is None else None
        if labeller is not None and labeller.id != spec.id and container is not None:
            supervisor = labeller.id
            marks = labeller.serving.container_labels
            labelled = container.label_value(marks.model) if marks is not None and marks.model else None
            if labelled and merged.model is None:
                merged = dataclasses.replace(
                    merged, model=labelled, sources={**merged.sources, "model": "container label"}
                )
        # A server another server started for one model (Ollama's, llama-swap's, a router's) is
        # that supervisor's runner.
        if supervisor is not None and role == "server":
            role = "runner"
        # A worker under a live server is folded into it (see scan): one listed here has lost it,
        # and served what that server served, if this scanner saw it.
        server = None
        if role == "worker":
            role = "orphan"
            server = self._folding.server_of(pid, start_time)
            if server is not None and merged.model is None:
                merged = dataclasses.replace(
                    merged,
                    model=server.model,
                    served_model_names=server.served_model_names,
                    sources={**merged.sources, "model": "server", "served_model_name": "server"},
                )
        where = endpoint(spec, argv, merged.host, merged.port, merged.port_text, role)
        where = working_socket_url(spec, where, pid, role, self._root)
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
            worker_pids=self._folding.worker_pids(item),
            supervisor=supervisor,
            listen_ports=tuple(item.listen_ports),
            server_pid=server.pid if server is not None else None,
            container=container,
            private_network=private_network,
        )
        flagged = (
            flag_value(argv, spec.signature, spec.serving.api_key_flag) if spec.serving.api_key_flag else None
        )
        process._api_key = first_key(flagged or outside.api_key, spec.serving.api_key_separator)
        process._root = self._root
        if self._boot_time is not None:
            process._start_ticks = round((start_time - self._boot_time) * self._clock_ticks)
        return process


def engine_document(
    process: EngineProcess,
    health: BaseModel | None = None,
    load: BaseModel | None = None,
    models: BaseModel | None = None,
    cpu_energy: BaseModel | None = None,
) -> dict[str, Any]:
    """The JSON object of an engine, as ``ps --json`` and the agent's ``/v1/engines`` give it:
    the :class:`EngineProcess`, with its ``health`` (a :class:`Health`), ``load`` (an
    :class:`EngineLoad`), ``models`` (what it serves now, a ``ServedModels``) and ``cpu_energy``
    (its share of the CPU packages' energy, a ``CpuEnergy``: a loop's, which has read twice) when
    they were read."""
    document = process.model_dump(mode="json")
    if cpu_energy is not None:
        document["cpu_energy"] = cpu_energy.model_dump(mode="json")
    if health is not None:
        document["health"] = health.model_dump(mode="json")
    if load is not None:
        document["load"] = load.model_dump(mode="json")
    if models is not None:
        document["models"] = models.model_dump(mode="json")
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


def unique_instance_ids(
    processes: Sequence[EngineProcess], previous: Mapping[tuple[int, float], str] | None = None
) -> list[str]:
    """Each process's instance_id; when two running engines have the same one (the same engine,
    model and port: sharing it through SO_REUSEPORT), the younger ones get their pid appended
    (``vllm-8000-1b690e57-pid4242``), as two series with the same labels would make Prometheus
    reject the whole scrape. Whatever the order of ``processes``, the oldest keeps the bare id.

    ``previous``: (pid, start time) -> the id a process was given before (a long-running
    exporter's last refresh): a process keeps it while it runs, so a series never changes its
    name under a live engine (the stopped name would read ``up 0`` while it runs)."""
    previous = previous or {}
    taken: set[str] = set()
    given: dict[int, str] = {}
    for index, process in enumerate(processes):
        kept = previous.get((process.pid, process.start_time), "")
        if kept in (process.instance_id, f"{process.instance_id}-pid{process.pid}") and kept not in taken:
            given[index] = kept
            taken.add(kept)
    by_age = sorted(range(len(processes)), key=lambda i: (processes[i].start_time, processes[i].pid))
    for index in by_age:
        if index in given:
            continue
        process = processes[index]
        instance_id = process.instance_id
        if instance_id in taken:
            instance_id = f"{instance_id}-pid{process.pid}"
        given[index] = instance_id
        taken.add(instance_id)
    return [given[index] for index in range(len(processes))]


def named_process(processes: Sequence[EngineProcess], target: str) -> EngineProcess | None:
    """The engine a pid (its server's or one of its workers') or an engine id names, as ``ps -o
    name`` and the exporter's ``engine_id`` label give it: of engines sharing an id the oldest has
    the bare one, the others ``ID-pidPID`` (which also names the oldest)."""
    if target.isdigit():
        pid = int(target)
        return next((p for p in processes if pid == p.pid or pid in p.worker_pids), None)
    for process, instance_id in zip(processes, unique_instance_ids(processes), strict=True):
        if target in (instance_id, f"{process.instance_id}-pid{process.pid}"):
            return process
    return None


def gpu_ledger(
    processes: Sequence[EngineProcess] | None = None,
    *,
    root: str = "/",
    nvml: bool = True,
    all_processes: bool = True,
    reread: bool = True,
) -> tuple[GpuDevice, ...]:
    """One :class:`~enginespec.gpus.reader.GpuDevice` per GPU of the host under ``root``: which engine
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
        EngineTree(instance_id, (p.pid, *p.worker_pids), p.role == "orphan")
        for instance_id, p in zip(unique_instance_ids(processes), processes, strict=True)
    ]
    held = None if reread else [(p.gpus, p.gpus_unknown) for p in processes]
    return ledger(engines, root=root, nvml=nvml, all_processes=all_processes, held=held)
