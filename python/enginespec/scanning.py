"""Finding every engine running on this host: ``Scanner().scan()`` and ``scan()``."""

from __future__ import annotations

import os
from collections.abc import Sequence

import psutil
from pydantic import BaseModel, ConfigDict, PrivateAttr

from enginespec._backend import ScannerType
from enginespec._pymatcher import basename
from enginespec._pyscanner import RawProcess
from enginespec.argv import Invocation, endpoint, flag_value, redact_argv
from enginespec.definition import EngineDefinition
from enginespec.registry import all_engines
from enginespec.signature import signatures_json

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
    """

    pid: int
    start_time: float
    ppid: int
    #: ``None`` when argv gives no usable address (see ``problems``).
    base_url: str | None
    argv: tuple[str, ...]
    exe: str | None
    worker_pids: tuple[int, ...]
    supervisor: str | None
    listen_ports: tuple[int, ...]
    #: the engine's API key from its argv: used by health checks, never shown or serialised.
    _api_key: str | None = PrivateAttr(default=None)

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
    """What the last scan did. ``reread`` counts known processes read again (watched for an exec,
    or whose pid may have been reused); ``full_recheck`` is set when the kernel's pid cursor could
    not bound pid reuse; ``known`` is how many processes the scanner remembers."""

    model_config = ConfigDict(frozen=True)

    scanned: int = 0
    new: int = 0
    vanished: int = 0
    unreadable: int = 0
    reread: int = 0
    full_recheck: bool = False
    known: int = 0


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

    def __init__(self, *, listen_ports: bool = True) -> None:
        self._specs = all_engines()
        self._backend = ScannerType(
            signatures_json(spec.signature for spec in self._specs),
            list(EXEC_WRAPPERS),
            YOUNG_SECONDS,
            TREE_REFRESH_SECONDS,
            listen_ports,
        )
        self._built: dict[int, tuple[RawProcess, str | None, EngineProcess]] = {}

    @property
    def stats(self) -> ScanStats:
        scanned, new, vanished, unreadable, reread, full_recheck, known = self._backend.stats()
        return ScanStats(
            scanned=scanned,
            new=new,
            vanished=vanished,
            unreadable=unreadable,
            reread=reread,
            full_recheck=full_recheck,
            known=known,
        )

    def scan(self) -> list[EngineProcess]:
        raw = self._backend.scan()
        folded: set[int] = set()
        for pid, _start, _ppid, _argv, facts, _exe, descendants, _parent, _ports in raw:
            if self._specs[facts[0]].signature.fold_workers:
                folded.update(d for d in descendants if d != pid)
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
            if previous is not None and previous[0] == item and previous[1] == parent_engine:
                process = previous[2]
            else:
                process = self._model(item, parent_engine)
            built[pid] = (item, parent_engine, process)
            result.append(process)
        self._built = built
        return result

    def _model(self, item: RawProcess, parent_engine: str | None) -> EngineProcess:
        pid, start_time, ppid, argv, facts, exe, descendants, parent_argv, ports = item
        index, model, served, host, port, role = facts
        spec = self._specs[index]
        where = endpoint(spec, argv, host, port)
        process = EngineProcess(
            pid=pid,
            start_time=start_time,
            ppid=ppid,
            engine=spec.id,
            model=model,
            served_model_names=tuple(served),
            host=host,
            port=port,
            effective_host=where.effective_host,
            effective_port=where.effective_port,
            role=role,
            problems=where.problems,
            base_url=where.base_url,
            argv=tuple(redact_argv(argv, spec.id)),
            exe=exe,
            worker_pids=tuple(descendants),
            supervisor=_supervisor(spec, parent_argv, parent_engine),
            listen_ports=tuple(ports),
        )
        if spec.serving.api_key_flag:
            process._api_key = flag_value(argv, spec.signature, spec.serving.api_key_flag)
        return process


def scan(*, listen_ports: bool = True) -> list[EngineProcess]:
    """One-shot scan of this host (keep a :class:`Scanner` for polling)."""
    return Scanner(listen_ports=listen_ports).scan()
