"""What a client of the agent or the exporter is shown: no more than it could read from the host
itself, unless it holds the agent's token. One rule, used by both.

A process's argv is world-readable (``/proc/PID/cmdline``); its environment (``/proc/PID/environ``),
the config files it was pointed at and its model's files are its owner's (and root's). So each
fact's ``source`` (``EngineProcess.sources``) decides: a fact from ``argv`` or a ``default`` is
shown to everyone, one from the ``environment``, a ``config`` file, or the ``server`` an orphan
worked for (which had it from either) only to root, to the process's owner, and to a client with
the token. The fields such a fact fills in are emptied and named in ``withheld``: never dropped
silently, so a client knows there is more than it sees.

Who a client is: over a unix socket, its uid (``SO_PEERCRED``); over loopback TCP, the owner of
its end of the connection (the kernel's socket table, :func:`enginespec.process.sockets.connection_owner`);
any other client has no uid on this host and sees what everyone may.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from enginespec.definition.records import Fact
from enginespec.process.record import EngineProcess
from enginespec.process.settings import Source
from enginespec.process.sockets import connection_owner

#: Sources only the process's owner (and root) can read.
PRIVATE_SOURCES: frozenset[Source] = frozenset({"config", "environment", "server"})
#: The fields of an engine's JSON document each fact fills in (``base_url`` is made of host and port).
FACT_FIELDS: Mapping[Fact, tuple[str, ...]] = {
    "model": ("model", "model_name"),
    "served_model_name": ("served_model_names", "served_model_name"),
    "host": ("host", "effective_host", "base_url"),
    "port": ("port", "effective_port", "base_url"),
}
#: What a withheld field holds instead (a field's type stays what readers validate it as).
_EMPTY: Mapping[str, object] = {"served_model_names": [], "effective_host": "", "problems": []}


@dataclass(frozen=True)
class Viewer:
    """Who asks: ``uid`` on this host (``None``: not known, or not on this host) and whether it
    presented the agent's token."""

    uid: int | None = None
    token: bool = False

    def sees_all_of(self, owner_uid: int | None) -> bool:
        """Whether this client may see every fact of a process owned by ``owner_uid``."""
        return self.token or self.uid == 0 or (self.uid is not None and self.uid == owner_uid)

    @property
    def key(self) -> str:
        """Clients shown the same thing share a key (``all``: everything of every process)."""
        return "all" if self.token or self.uid == 0 else f"uid:{self.uid}"


#: A client with the token, or root: everything.
EVERYTHING = Viewer(token=True)


def withheld_facts(process: EngineProcess) -> tuple[Fact, ...]:
    """The facts of ``process`` that came from where only its owner can read."""
    return tuple(sorted(fact for fact, source in process.sources.items() if source in PRIVATE_SOURCES))


def public_document(document: Mapping[str, Any], process: EngineProcess) -> dict[str, Any]:
    """``document`` (the ``ps --json`` object of ``process``) as anyone may see it: the fields of
    withheld facts emptied, and named in ``withheld``. Its ``problems`` go too when a fact is
    withheld (a problem may quote the value: ``port 'x' is not a port number``), and what it
    serves (``models``) always: that was read through the engine's API, with its API key."""
    facts = withheld_facts(process)
    fields = {name for fact in facts for name in FACT_FIELDS[fact]}
    if fields and document.get("problems"):
        fields.add("problems")
    if document.get("models") is not None:
        # what it serves was read through its API with its key: its owner's, where that came from
        fields.add("models")
    if not fields:
        return dict(document)
    shown = dict(document)
    for name in fields:
        shown[name] = _EMPTY.get(name)
    shown["withheld"] = sorted(fields)
    return shown


def owners(processes: Sequence[EngineProcess]) -> list[int | None]:
    """Each process's owner (its filesystem uid, as the kernel checks its file accesses), ``None``
    when it cannot be read or its pid is another process's now (its start differs)."""
    found: list[int | None] = []
    for process in processes:
        root = process._root
        who = root.owner(process.pid)
        known = process._start_ticks
        if who is not None and known is not None and root.start_ticks(process.pid) != known:
            who = None
        found.append(None if who is None else who.uid)
    return found


def _loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def tcp_viewer(client: tuple[str, int] | None, server: tuple[str, int] | None) -> Viewer:
    """Who the TCP client at ``client``, connected to ``server`` (this process's end), is: the
    owner of its socket when both are on loopback; nobody known otherwise."""
    if client is None or server is None or not _loopback(client[0]) or not _loopback(server[0]):
        return Viewer()
    return Viewer(uid=connection_owner((client[0], client[1]), (server[0], server[1])))


def unix_viewer(sock: socket.socket | None) -> Viewer:
    """Who the client of a connected unix socket is (``SO_PEERCRED``: the kernel's word)."""
    if sock is None:
        return Viewer()
    try:
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return Viewer()
    return Viewer(uid=struct.unpack("3i", credentials)[1])
