"""Where the output of an engine enginespec did not start goes (a file, a systemd unit's journal, a
container's log, or nowhere readable), and its last lines and new ones read from there, through
the root its record was scanned under. The output of an engine enginespec started is its
:class:`~enginespec.lifecycle.logbook.LogBook`."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict

from enginespec._host.backend import parse_cgroup
from enginespec._host.namedfiles import Refused
from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.display import literal
from enginespec.lifecycle.logbook import LogLine, follow_file, tail_file

LogSourceKind = Literal["enginespec", "file", "journald", "docker", "terminal", "pipe", "none"]


class LogSource(BaseModel):
    """Where an engine's output goes: enginespec's own ring and file (``enginespec``), a regular
    file its stdout/stderr point at (``file``), a systemd unit's journal (``journald``), a
    container's log (``docker``), or nowhere readable (``terminal``, ``pipe``, ``none``, with the
    reason)."""

    model_config = ConfigDict(frozen=True)

    kind: LogSourceKind
    path: str | None = None
    unit: str | None = None
    container: str | None = None
    reason: str | None = None


def find_log_source(pid: int, root: HostRoot = HOST_ROOT) -> LogSource:
    """Where the output of a process enginespec did not start goes (see :class:`LogSource`), read
    from the host under ``root``."""
    targets = []
    for fd in (1, 2):
        try:
            targets.append(root.link(pid, f"fd/{fd}"))
        except OSError:
            targets.append("")
    refused = None
    for fd, target in enumerate(targets, 1):
        if target.startswith("/") and not target.startswith(("/dev/", root.proc + "/")):
            path = root.path(pid, f"fd/{fd}")
            # tried as its owner: a file it holds but could not read (an O_PATH fd of a
            # root-only file) is not a log anyone reads through enginespec
            try:
                os.close(_open_log_file(pid, path, root))
            except Refused as why:
                refused = refused or LogSource(kind="none", path=path, reason=str(why))
                continue
            return LogSource(kind="file", path=path)
    if refused is not None:
        return refused
    container = _container_of(pid, root)
    if container is not None:
        return LogSource(kind="docker", container=container)
    unit = _unit_of(pid, root)
    if unit is not None and any(t.startswith("socket:") for t in targets):
        return LogSource(kind="journald", unit=unit)
    if any(t.startswith(("/dev/pts/", "/dev/tty")) for t in targets):
        return LogSource(kind="terminal", reason="its output goes to a terminal: nothing keeps it")
    if any(t.startswith("pipe:") for t in targets):
        return LogSource(kind="pipe", reason="its output goes to a pipe another process reads")
    if all(t in ("", "/dev/null") for t in targets):
        return LogSource(kind="none", reason="its output is discarded (/dev/null) or cannot be read")
    return LogSource(kind="none", reason=f"its output goes to {literal(targets[0] or targets[1])}")


def _container_of(pid: int, root: HostRoot) -> str | None:
    try:
        found = parse_cgroup(root.read(pid, "cgroup", 1 << 16))
    except OSError:
        return None
    if found is None or found[0] not in ("docker", "podman"):
        return None
    return str(found[1])


_UNIT = re.compile(r"[A-Za-z0-9:_.@\\-]+\.(?:service|scope)")


def _unit_of(pid: int, root: HostRoot) -> str | None:
    """The systemd unit a process runs in, from its cgroup path (``.../ollama.service``)."""
    for line in root.cgroup_lines(pid) or ():
        for part in reversed(line.path.split("/")):
            if _UNIT.fullmatch(part):
                return part
    return None


def _open_log_file(pid: int, path: str, root: HostRoot) -> int:
    """An fd for reading the file a process's output goes to (``path``: ``/proc/PID/fd/N``),
    opened as the process's owner could (:meth:`HostRoot.open_held`); raises :class:`Refused`
    with the reason."""
    fd = int(path.rsplit("/", 1)[1])
    try:
        return root.open_held(pid, fd)
    except Refused as why:
        raise Refused(f"the file its output goes to (fd {fd}) {why}") from None


def source_lines(pid: int, source: LogSource, n: int, root: HostRoot = HOST_ROOT) -> list[LogLine]:
    """The last ``n`` lines from where an adopted engine's output goes (a file its owner may no
    longer read gives one line that says so); ``root``: the host its process is on."""
    now = time.time()
    texts: list[str] = []
    if source.kind == "file" and source.path is not None:
        try:
            texts = tail_file(_open_log_file(pid, source.path, root), n)
        except Refused as why:
            return [LogLine(time=now, stream="log", text=f"enginespec: not read: {why}")]
        except OSError:
            texts = []
    elif source.kind in ("journald", "docker") and n > 0:
        argv = (
            ["journalctl", "--no-pager", "-o", "cat", "-n", str(n), "-u", source.unit or ""]
            if source.kind == "journald"
            else ["docker", "logs", "--tail", str(n), source.container or ""]
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                argv, capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL
            )
            texts = (done.stdout + done.stderr).decode("utf-8", errors="replace").splitlines()[-n:]
    return [LogLine(time=now, stream="log", text=text) for text in texts]


def follow_source(
    pid: int,
    source: LogSource,
    n: int,
    *,
    ended: Callable[[], object],
    root: HostRoot = HOST_ROOT,
) -> Iterator[LogLine]:
    """The last ``n`` lines from ``source``, then, for a file, each new one as it comes until
    ``ended`` (which blocks until the engine has ended) returns; ``root``: the host its process
    is on."""
    yield from source_lines(pid, source, n, root)
    if source.kind == "file" and source.path is not None:
        try:
            fd = _open_log_file(pid, source.path, root)
        except Refused as why:
            yield LogLine(time=time.time(), stream="log", text=f"enginespec: not read: {why}")
            return
        until = threading.Event()
        watcher = threading.Thread(target=_set_when, args=(ended, until), daemon=True)
        watcher.start()
        for text in follow_file(fd, until=until):
            yield LogLine(time=time.time(), stream="log", text=text)


def _set_when(ended: Callable[[], object], event: threading.Event) -> None:
    ended()
    event.set()
