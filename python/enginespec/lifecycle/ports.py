"""The ports an engine binds (its API port and those its data names besides) and the processes
that hold them: a start is refused, naming the holder, when another process listens where the
engine would; a stop ends by naming who still listens on its port."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import psutil

from enginespec._host.shapes import parse_port
from enginespec.definition.records import EngineDefinition
from enginespec.display import literal
from enginespec.errors import LaunchFailed
from enginespec.failures import Failure
from enginespec.process import sockets
from enginespec.process.argv import flag_value
from enginespec.scanning.scanner import Scanner


def holder_text(port: int, pids: Sequence[int]) -> str:
    """``port 8000 is held by pid 4242: vllm Qwen/Qwen3-8B`` (the engine a scan sees there, else
    the process's name), for each holder."""
    engines = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    for process in list(engines.values()):
        for worker in process.worker_pids:
            engines.setdefault(worker, process)
    parts = []
    for pid in pids:
        found = engines.get(pid)
        if found is not None:
            what = f"{found.engine} {found.model or '(model unknown)'}"
        else:
            try:
                what = psutil.Process(pid).name()
            except psutil.Error:
                what = "(gone)"
        parts.append(f"pid {pid}: {literal(what)}")
    return f"port {port} is held by " + ", ".join(parts)


def extra_ports(spec: EngineDefinition, argv: Sequence[str], env: Mapping[str, str]) -> list[tuple[str, int]]:
    """(flag, port) of each port the engine's data says it binds besides its API port, as this
    argv and environment set it (the flag first, as the engine reads them)."""
    found = []
    for extra in spec.serving.extra_ports:
        text = flag_value(argv, spec.signature, extra.flag)
        if text is None and extra.environment is not None:
            text = env.get(extra.environment)
        port = parse_port(text) if text is not None else extra.default
        if port is not None:
            found.append((extra.flag, port))
    return found


def port_preflight(engine: str, host: str, port: int, flag: str | None = None) -> Failure | None:
    """A ``port_in_use`` failure when another process listens where the engine would (its
    holders named), else ``None``. ``flag``: the flag that sets this port, when it is not the
    API port."""
    addresses = sockets.connect_addresses(host)
    taken = [
        listener
        for listener in sockets.listeners(port)
        if not addresses or any(sockets.overlap(listener.address, address) for address in addresses)
    ]
    if not taken:
        return None
    pids = sockets.holders([listener.inode for listener in taken], (os.getpid(),))
    line = holder_text(port, pids) if pids else f"port {port} is held by a process whose fds cannot be read"
    return Failure(
        engine=engine,
        kind="port_in_use",
        cause_lines=(line,),
        numbers={"port": port, **({"pid": pids[0]} if pids else {})},
        hint=f"port {port} is taken: choose another port or stop the process holding it"
        if flag is None
        else f"port {port} ({flag}) is taken: give {flag} another port or stop the process holding it",
    )


def refuse_taken_ports(
    spec: EngineDefinition,
    host: str,
    port: int | None,
    argv: Sequence[str],
    env: Mapping[str, str],
) -> None:
    """Raises :class:`LaunchFailed` (``port_in_use``) when the API ``port`` or a port the engine
    binds besides it, as ``argv`` and ``env`` set them, is taken at ``host``."""
    ports: list[tuple[str | None, int]] = [(None, port)] if port is not None else []
    for flag, each in [*ports, *extra_ports(spec, argv, env)]:
        taken = port_preflight(spec.id, host, each, flag)
        if taken is not None:
            raise LaunchFailed(taken)


def with_port_holder(failure: Failure) -> Failure:
    """A ``port_in_use`` failure whose log names the port, with the processes that hold it now
    named in its hint (the engine a scan sees there, else the process's name), where they can be
    seen: which process to stop, or which port to choose instead."""
    port = failure.figures.port
    if failure.kind != "port_in_use" or not port:
        return failure
    holders = port_holders(port)
    if not holders:
        return failure
    held = holder_text(port, holders)
    return failure.model_copy(update={"hint": f"{failure.hint}: {held}" if failure.hint else held})


def port_holders(port: int | None) -> tuple[int, ...] | None:
    """The pids listening on ``port`` (others than this process), ``None`` when no port is known."""
    if port is None:
        return None
    inodes = [listener.inode for listener in sockets.listeners(port)]
    return sockets.holders(inodes, (os.getpid(),)) if inodes else ()
