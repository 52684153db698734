"""Which running engine a typed TARGET names, one resolver for every command that takes one
(``describe``, ``health``, ``load``, ``stop``, ``logs``, ``model``; ``ps`` and ``watch`` terms):
a pid (its server's or one of its workers'), an engine id (``vllm-8002-1b690e57``, or with
``-pidPID``), ``:PORT``, ``HOST:PORT`` (``[::1]:PORT``) or an ``http(s)://`` URL (its path ignored),
matched against where the scanned engines listen. An engine listening on a wildcard (``0.0.0.0``,
``::``) matches any host on its port; one in a private network matches only the host addresses
its port is published on. A bare number is a pid first, then a port.

Only ``re`` at import (``--version`` pays for no more): the CLI reads :data:`INSTANCE_ID` before
it parses its flags."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from enginespec.lifecycle.runrecords import RunRecord
    from enginespec.process.record import EngineProcess

#: How an instance id (the CLI's "engine id") reads in exporter labels and alerts:
#: ``vllm-8002-1b690e57``, and with ``-pid1234`` for a second engine with the same id (the
#: exporter's ``engine_id`` label).
INSTANCE_ID = re.compile(r"[a-z0-9][a-z0-9_.-]*-(?:\d+|noport)-[0-9a-f]{8}(?:-pid\d+)?", re.ASCII)
FORMS = "a pid, an engine id, :PORT, HOST:PORT or a URL"
#: At most this many candidates are named when a target names several engines.
MAX_NAMED = 8


class Address(NamedTuple):
    """Where a target says an engine listens: ``host`` is ``None`` for any host (``:PORT``)."""

    host: str | None
    port: int


def address(text: str) -> Address | None:
    """The address ``:PORT``, ``HOST:PORT``, ``[V6]:PORT`` or an http(s) URL names (a URL without a
    port: its scheme's), or ``None`` when ``text`` is none of them."""
    if text.startswith(("http://", "https://")):
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(text)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:  # an unclosed [, a port that is no number or out of range
            return None
        return Address(parts.hostname, port) if parts.hostname else None
    host, colon, port_text = text.rpartition(":")
    if not colon or not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:  # a bare IPv6 address: its last group is no port
        return None
    if host and not (host.isascii() and host.isprintable() and " " not in host):
        return None
    return Address(host.lower() or None, int(port_text))


def is_target(text: str) -> bool:
    """Whether ``text`` reads as a target at all (a pid, an engine id, an address or a URL)."""
    return (
        (text.isascii() and text.isdigit()) or bool(INSTANCE_ID.fullmatch(text)) or address(text) is not None
    )


def _same_host(listening: str, asked: str) -> bool:
    from enginespec.process.sockets import connect_addresses
    from enginespec.process.urls import is_wildcard

    if is_wildcard(listening):
        return True
    ours, theirs = connect_addresses(listening.lower()), connect_addresses(asked)
    if ours and theirs:
        return not set(ours).isdisjoint(theirs)
    return listening.lower().strip("[]").rstrip(".") == asked.rstrip(".")


def listens_at(process: EngineProcess, where: Address) -> bool:
    """Whether ``process`` listens where ``where`` says: its argv's host and port (unless it is
    in a private network, where they are its own namespace's), or a host port it is published on."""
    places: list[tuple[str, int | None]] = [(pub.host_address, pub.host_port) for pub in process.published]
    if not process.private_network:
        places.append((process.effective_host, process.effective_port))
    return any(
        port == where.port and (where.host is None or _same_host(host, where.host)) for host, port in places
    )


def _listing(processes: Sequence[EngineProcess], found: Sequence[EngineProcess]) -> str:
    from enginespec.scanning.scanner import unique_instance_ids

    ids = {
        id(p): instance_id for p, instance_id in zip(processes, unique_instance_ids(processes), strict=True)
    }
    named = [f"{ids[id(p)]} (pid {p.pid}, {p.effective_host}:{p.effective_port})" for p in found[:MAX_NAMED]]
    more = f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
    return ", ".join(named) + more


def resolve(processes: Sequence[EngineProcess], text: str) -> EngineProcess:
    """The one engine of ``processes`` that ``text`` names; ``InvalidInputError`` saying why not:
    not a target, no engine there, or several (named, with how to pick one)."""
    from enginespec.errors import InvalidInputError
    from enginespec.scanning.scanner import named_process

    number = text.isascii() and text.isdigit()
    if number or INSTANCE_ID.fullmatch(text):
        found = named_process(processes, text)
        if found is not None:
            return found
        if not number:
            raise InvalidInputError(
                f"engine id {text!r} is not an engine server on this host (enginespec ps lists them)"
            )
    where = address(":" + text if number else text)
    if where is None:
        raise InvalidInputError(f"{text!r} is not {FORMS}")
    matching = [p for p in processes if listens_at(p, where)]
    if not matching:
        what = (
            f"pid {text} is not an engine server on this host, nor a port one listens on"
            if number
            else (f"no engine server on this host listens on {text}")
        )
        raise InvalidInputError(f"{what} (enginespec ps lists them)")
    if len(matching) > 1:
        raise InvalidInputError(
            f"{text!r} names {len(matching)} engines: {_listing(processes, matching)}; "
            "give a pid or an engine id"
        )
    return matching[0]


def run_named(text: str) -> RunRecord | None:
    """The record of the run (``enginespec run --name``) called ``text``, in the data dir
    (``$ENGINESPEC_DATA_DIR`` or the user's), or ``None``."""
    from enginespec.config import Config
    from enginespec.lifecycle import runrecords

    return runrecords.find(Config().data_dir, text)


def find(text: str, *, listen_ports: bool = True) -> EngineProcess:
    """:func:`resolve` among the engines a scan of this host finds now; a text that names none
    of them may be a run's name: the engine that run started, while that very process runs."""
    from enginespec.errors import InvalidInputError
    from enginespec.scanning.scanner import Scanner

    processes = Scanner(listen_ports=listen_ports).scan()
    try:
        return resolve(processes, text)
    except InvalidInputError:
        run = run_named(text)
        if run is None:
            raise
    for process in processes:
        # the pid alone is not the engine: the process must be the one that started then
        if process.pid == run.pid and process._start_ticks == run.start_ticks:
            return process
    how = run.outcome or f"its engine (pid {run.pid}) is gone"
    raise InvalidInputError(f"the run {text!r} is not running: {how} (enginespec runs -a lists the runs)")
