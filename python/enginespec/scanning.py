"""Finding every engine running on this host: ``Scanner().scan()`` and ``scan()``."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from enginespec._backend import ScannerType
from enginespec.argv import redact_argv
from enginespec.engines import all_engine_specs
from enginespec.signature import signatures_json
from enginespec.spec import EngineSpec

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


class EngineProcess(BaseModel):
    """A running engine server. ``(pid, start_time)`` is its identity (pids are reused).

    ``argv`` has secret values (``--api-key``, ``--hf-token``) replaced by ``***``. ``worker_pids``
    are the server's descendants (vLLM/SGLang workers), folded into it. ``supervisor`` names who
    started it (``ollama``, ``llama-swap``, ``llama-server`` router) or is ``None``.
    ``listen_ports`` are the TCP ports the process tree listens on (empty when unknown).
    """

    model_config = ConfigDict(frozen=True)

    pid: int
    start_time: float
    ppid: int
    engine: str
    model: str | None
    served_model_names: tuple[str, ...]
    host: str | None
    port: int | None
    effective_host: str
    effective_port: int
    base_url: str
    argv: tuple[str, ...]
    exe: str | None
    worker_pids: tuple[int, ...]
    supervisor: str | None
    listen_ports: tuple[int, ...]

    @property
    def served_model_name(self) -> str | None:
        return self.served_model_names[0] if self.served_model_names else None


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


def base_url(host: str, port: int) -> str:
    """``http://host:port`` to reach a server listening on host: wildcard addresses map to loopback,
    IPv6 literals are bracketed."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"http://{host}:{port}"


def _supervisor(spec: EngineSpec, parent_argv: Sequence[str], parent_engine: str | None) -> str | None:
    if parent_engine == spec.id and spec.nested_supervisor:
        return spec.nested_supervisor
    if not parent_argv:
        return None
    name = parent_argv[0].replace("\\", "/").rsplit("/", 1)[-1]
    return spec.supervisors.get(name)


class Scanner:
    """Keeps state between scans so each poll costs little more than listing ``/proc``.

    ``scan()`` never raises because of a process: vanished, zombie, unreadable (permissions,
    hidepid) and retitled processes are skipped or handled and counted in :attr:`stats`.
    """

    def __init__(self, *, listen_ports: bool = True) -> None:
        self._specs = all_engine_specs()
        self._backend = ScannerType(
            signatures_json(spec.signature for spec in self._specs),
            list(EXEC_WRAPPERS),
            YOUNG_SECONDS,
            TREE_REFRESH_SECONDS,
            listen_ports,
        )

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
        for pid, start_time, ppid, argv, facts, exe, descendants, parent_argv, ports in raw:
            if pid in folded:
                continue
            index, model, served, host, port = facts
            spec = self._specs[index]
            signature = spec.signature
            effective_host = host or signature.default_host
            effective_port = signature.default_port if port is None else port
            result.append(
                EngineProcess(
                    pid=pid,
                    start_time=start_time,
                    ppid=ppid,
                    engine=spec.id,
                    model=model,
                    served_model_names=tuple(served),
                    host=host,
                    port=port,
                    effective_host=effective_host,
                    effective_port=effective_port,
                    base_url=base_url(effective_host, effective_port),
                    argv=tuple(redact_argv(argv, spec.id)),
                    exe=exe,
                    worker_pids=tuple(descendants),
                    supervisor=_supervisor(spec, parent_argv, engines_by_pid.get(ppid)),
                    listen_ports=tuple(ports),
                )
            )
        return result


def scan(*, listen_ports: bool = True) -> list[EngineProcess]:
    """One-shot scan of this host (keep a :class:`Scanner` for polling)."""
    return Scanner(listen_ports=listen_ports).scan()
