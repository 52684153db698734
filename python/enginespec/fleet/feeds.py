"""Discovery feeds: the engines of this host that serve, written as the files other systems read
(Prometheus ``file_sd``, an LLM router's endpoint list), so a fleet's scrapers and routers find
whatever enginespec finds instead of lists typed by hand.

An engine is listed only while its health is ``ready`` with its identity verified (the server
answering is its own process tree's and serves the model its argv names: ``check_all(...,
verify_identity=True)``), at an IP address: a wildcard listen address (``0.0.0.0``, ``::``) is
given as ``advertise`` (by default this host's address on its default route), a container's as
the host address its port is published on, a loopback one as it is (for readers on this host); an
engine on a unix socket, or whose argv names its host by a name, is not listed (see
:func:`address`). Files are replaced whole through :mod:`enginespec.untrusted.safewrite`, so a
reader never sees a torn one.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal, get_args

from enginespec.definition.registry import find_engine
from enginespec.errors import InvalidInputError
from enginespec.healthrecord import Health
from enginespec.process.liveness import scanned_ticks
from enginespec.process.record import EngineProcess
from enginespec.process.urls import connect_host, is_wildcard
from enginespec.scanning.scanner import unique_instance_ids
from enginespec.untrusted.boundary import contained, failed
from enginespec.untrusted.documents import dumps
from enginespec.untrusted.safewrite import replace_file

FeedFormat = Literal["file-sd", "llm-d", "production-stack"]
FEED_FORMATS: tuple[FeedFormat, ...] = get_args(FeedFormat)


#: Where a route probe "connects" (TEST-NET-2, RFC 5737: documentation only, never a host). A UDP
#: socket's connect sends nothing; the kernel only picks the route, and with it the source address
#: others reach this host at: the default route's, unless a route for that range says otherwise.
_ROUTE_PROBE = ("198.51.100.1", 9)


def default_route_address() -> str | None:
    """This host's IPv4 address on its default route (the source address the kernel picks for a
    destination beyond its networks), or ``None`` when it has no such route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE)
            chosen = str(probe.getsockname()[0])
    except OSError:  # ENETUNREACH: no route beyond its own networks
        return None
    picked = ipaddress.ip_address(chosen)
    return None if picked.is_unspecified or picked.is_loopback else chosen


def advertised_host(host: str | None = None) -> str:
    """The address a feed gives for engines listening on a wildcard address: ``host``, checked to
    be an IP literal or a hostname; by default this host's address on its default route (routers
    such as llm-d take only an IP address), else, without such a route, its name."""
    return advertised(host)[0]


def advertised(host: str | None = None) -> tuple[str, str]:
    """:func:`advertised_host`, and how it was chosen (said on stderr by the feed command)."""
    if host is None and (routed := default_route_address()) is not None:
        return routed, "the address of this host's default route"
    name = host if host is not None else socket.gethostname()
    connect = connect_host(name)
    if connect is None or is_wildcard(name):
        raise InvalidInputError(f"advertise: {name!r} is not an IP address or hostname others can reach")
    return (
        connect,
        "given by --advertise" if host is not None else "this host's name: it has no default route",
    )


def address(process: EngineProcess, advertise: str) -> str | None:
    """``host:port`` where ``process``'s API is reached, or ``None`` (a unix socket, no port, or a
    host *name* its argv or environment gives: the answering socket was checked to be its own,
    but not that a name leads to it, so a name would let any user point a fleet's routers and
    scrapers at any host). A wildcard address is ``advertise``; an IP literal is itself (a
    loopback one serves readers on this host)."""
    port: int | None
    if process.published:
        host, port = process.published[0].host_address, process.published[0].host_port
    elif process.base_url is None or not process.base_url.startswith("http://"):
        return None
    else:
        host, port = process.effective_host, process.effective_port
    if port is None:
        return None
    if is_wildcard(host):
        return f"{advertise}:{port}"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    connect = connect_host(host)
    return None if connect is None else f"{connect}:{port}"


def metrics_path(process: EngineProcess) -> str | None:
    """The path of the engine's own Prometheus metrics on its API port, when its argv turns them
    on (or leaves them on): ``None`` for an engine that has none or was started without them."""
    spec = find_engine(process.engine)
    metrics = spec.load
    if metrics.kind != "prometheus":
        return None
    given = set(process.argv)
    signature = spec.signature
    flags = {signature.canonical(token.partition("=")[0]) for token in given if token.startswith("-")}
    if metrics.enable_flag is not None and signature.canonical(metrics.enable_flag) not in flags:
        return None
    if metrics.disable_flag is not None and signature.canonical(metrics.disable_flag) in flags:
        return None
    path: str = metrics.path
    return path


def serving(processes: Sequence[EngineProcess], healths: Sequence[Health]) -> list[EngineProcess]:
    """The engines a feed lists: health ``ready`` (checked with ``verify_identity``)."""
    return [p for p, h in zip(processes, healths, strict=True) if h.state == "ready" and p.role == "server"]


def _label(value: str) -> str:
    """A label value any reader can parse: argv bytes that are not UTF-8 as ``\\xNN`` escapes."""
    return os.fsencode(value).decode("utf-8", "backslashreplace")


def _labels(process: EngineProcess) -> dict[str, str]:
    labels = {
        "engine": process.engine,
        "engine_id": process.instance_id,
        # as people name it (Qwen/Qwen3-0.6B), the exporter's `model` too; the exact argument apart
        "model": process.model_name or "",
        "model_path": process.model or "",
        # what clients send as "model", and what vLLM labels its own series with (model_name)
        "served_model_name": process.served_model_name or process.model or "",
    }
    if process.container is not None:
        labels["container_id"] = process.container.id
        if process.container.name:
            labels["container"] = process.container.name
    if process.gpus:
        labels["gpus"] = ",".join(use.device for use in process.gpus)
    return {name: _label(value) for name, value in labels.items()}


#: What a renderer gives: the document, and a note for each engine it had to leave out.
_Rendered = tuple[Any, list[str]]


def file_sd(processes: Sequence[EngineProcess], advertise: str) -> _Rendered:
    """Prometheus ``file_sd`` target groups: one per engine with its own metrics endpoint, at its
    API address (``__metrics_path__`` where the engine's path is not ``/metrics``), with label
    names Prometheus 2.x accepts too (``[a-zA-Z_][a-zA-Z0-9_]*``). Prometheus keeps a file's
    previous targets while a new one does not parse, and notices a rename in the directory."""
    groups, notes = [], []
    for process in processes:
        where, path = address(process, advertise), metrics_path(process)
        if where is None:
            notes.append(f"{process.instance_id}: {_NO_ADDRESS}")
        if where is None or path is None:
            continue
        labels = _labels(process)
        if path != "/metrics":
            labels["__metrics_path__"] = path
        groups.append({"targets": [where], "labels": labels})
    return groups, notes


#: Why an engine has no address in a feed (see :func:`address`).
_NO_ADDRESS = "no address other hosts can use (a unix socket, no port, or a host name, not an IP address)"
#: Said of an engine left out for the address it was given for its wildcard: the flag that brings it in.
_ADVERTISE_HINT = " (it listens on every address: --advertise {} lists it)"


def _advertised(process: EngineProcess) -> bool:
    """Whether a feed gives ``process`` the advertised address (it listens on a wildcard)."""
    return not process.published and is_wildcard(process.effective_host)


#: llm-d's file-discovery refuses a larger file (llm-d-router v0.10.0, pkg/epp/framework/plugins/
#: datalayer/discovery/file/plugin.go: maxEndpointsFileSize = 1 << 20).
LLM_D_MAX_BYTES = 1 << 20


def llm_d(processes: Sequence[EngineProcess], advertise: str) -> _Rendered:
    """llm-d's ``file-discovery`` endpoints file (llm-d-router v0.10.0, plugin.go EndpointEntry):
    ``{"endpoints": [{name, namespace, address, port, labels}]}``, ``address`` an IPv4 literal
    and ``port`` a string, as it requires (one invalid entry fails its first load); the model is
    a label, and llm-d scrapes the engine's metrics on the same port."""
    entries: list[dict[str, Any]] = []
    notes = []
    for process, name in zip(processes, unique_instance_ids(processes), strict=True):
        where = address(process, advertise)
        host, _, port = (where or "").rpartition(":")
        if where is None:
            notes.append(f"{process.instance_id}: {_NO_ADDRESS}")
            continue
        if not _is_ipv4(host):
            hint = _ADVERTISE_HINT.format("an IPv4 address") if _advertised(process) else ""
            notes.append(f"{process.instance_id}: llm-d takes only IPv4 addresses, not {where}{hint}")
            continue
        entries.append(
            {"name": name, "namespace": "default", "address": host, "port": port, "labels": _labels(process)}
        )
    # the most entries that fit, found in a few encodings
    fit, over = 0, len(entries) + 1
    while over - fit > 1:
        middle = (fit + over) // 2
        fit, over = (
            (middle, over)
            if len(_encode({"endpoints": entries[:middle]})) <= LLM_D_MAX_BYTES
            else (fit, middle)
        )
    notes += [
        f"{entry['name']}: llm-d reads at most {LLM_D_MAX_BYTES} bytes: left out" for entry in entries[fit:]
    ]
    return {"endpoints": entries[:fit]}, notes


# production-stack's router drops a backend URL its pattern refuses (only logging it), which puts
# its lists out of step (vllm-stack-0.1.12, src/vllm_router/utils.py validate_url): dotted names
# with a top-level domain of 2+ letters, localhost, or dotted IPv4, then a port.
_ROUTER_URL = re.compile(
    r"https?://(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,}|localhost|"
    r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}):\d+",
    re.ASCII,
)


def production_stack(processes: Sequence[EngineProcess], advertise: str) -> _Rendered:
    """vLLM production-stack's router dynamic config (``--dynamic-config-json``; vllm-stack-0.1.12
    src/vllm_router/dynamic_config.py DynamicRouterConfig): static service discovery with
    ``static_backends`` and ``static_models``, comma-separated and index-aligned, one entry per
    name a client may send (a backend serving two names is listed twice). The router re-reads the
    file every 10 s and keeps its config while the file does not parse."""
    backends, names, notes = [], [], []
    for process in processes:
        where = address(process, advertise)
        if where is None:
            notes.append(f"{process.instance_id}: {_NO_ADDRESS}")
            continue
        url = f"http://{where}"
        if not _ROUTER_URL.fullmatch(url):
            hint = (
                _ADVERTISE_HINT.format("an IPv4 address or a dotted host name")
                if _advertised(process)
                else ""
            )
            notes.append(f"{process.instance_id}: the router refuses the URL {url}{hint}")
            continue
        for served in process.served_model_names or ((process.model,) if process.model else ()):
            if "," in served or not served.isprintable():
                notes.append(
                    f"{process.instance_id}: the router's comma-separated lists cannot hold {served!r}"
                )
                continue
            backends.append(url)
            names.append(_label(served))
    document = {
        "service_discovery": "static",
        "routing_logic": "roundrobin",
        "static_backends": ",".join(backends),
        "static_models": ",".join(names),
    }
    return document, notes


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


_RENDERERS: dict[FeedFormat, Callable[[Sequence[EngineProcess], str], _Rendered]] = {
    "file-sd": file_sd,
    "llm-d": llm_d,
    "production-stack": production_stack,
}


def render(
    feed: FeedFormat, processes: Sequence[EngineProcess], *, advertise: str
) -> tuple[bytes, list[str]]:
    """The feed's file for these (already checked) serving engines, as bytes, and a note for each
    engine the format cannot carry, or whose entry could not be made (the error boundary: an
    engine that fails is left out, said, and the others listed)."""
    renderer = _RENDERERS[feed]
    failures = [_unrenderable(renderer, process, advertise) for process in processes]
    usable = [process for process, failure in zip(processes, failures, strict=True) if failure is None]
    document, notes = renderer(usable, advertise)
    return _encode(document), [*notes, *(failure for failure in failures if failure is not None)]


def _unrenderable(
    renderer: Callable[[Sequence[EngineProcess], str], _Rendered], process: EngineProcess, advertise: str
) -> str | None:
    """Why ``process``'s entry cannot be made, or ``None`` when it can."""

    def entry() -> str | None:
        _encode(renderer([process], advertise)[0])
        return None

    return contained("feed entry", entry, lambda reason: f"pid {process.pid} ({process.engine}): {reason}")


def _encode(document: Any) -> bytes:
    return (dumps(document, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def owner_uid(process: EngineProcess) -> int | None:
    """The uid ``process`` runs as, read now; ``None`` when it is gone or its pid is now another
    process's (its start is read after its owner, so a pid reused in between is caught)."""
    found = process._root.owner(process.pid)
    if found is None or scanned_ticks(process) is None:
        return None
    return found.uid


def user_name(uid: int) -> str:
    """``uid``'s name, or the number when the system has none."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def allowed_owners(names: Sequence[str]) -> frozenset[int]:
    """The uids whose engines a feed lists: root, the user running it, and ``names`` (user names
    or uids, each may be a comma-separated list). :class:`InvalidInputError` names
    ``--allow-owner`` and an unknown user."""
    import pwd

    allowed = {0, os.geteuid()}
    for name in (item for text in names for item in text.split(",") if item):
        try:
            allowed.add(int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid)
        except (KeyError, OverflowError):
            raise InvalidInputError(f"--allow-owner: {name!r} is not a user of this host") from None
    return frozenset(allowed)


def trusted(
    processes: Sequence[EngineProcess],
    allowed: Collection[int],
    owner_of: Callable[[EngineProcess], int | None] = owner_uid,
) -> tuple[list[EngineProcess], list[str]]:
    """The engines whose owner is ``allowed`` (any user can start a process that claims any
    model's name and answers for it: a feed that listed it would send a fleet's traffic and
    scrapes to that user), and a line for each engine left out and each served name that
    engines of different owners claim (all of them are named, the one a router must not get
    too)."""
    owners = [owner_of(p) for p in processes]
    kept, notes = [], []
    for process, uid in zip(processes, owners, strict=True):
        if uid is None:
            notes.append(
                f"left out {process.instance_id} (pid {process.pid}): its owner cannot be read (gone?)"
            )
        elif uid not in allowed:
            user = user_name(uid)
            notes.append(
                f"left out {process.instance_id} (pid {process.pid}): its owner {user} is not an allowed "
                f"owner (--allow-owner {user} lists its engines)"
            )
        else:
            kept.append(process)
    claims: dict[str, list[tuple[EngineProcess, int | None]]] = {}
    for process, uid in zip(processes, owners, strict=True):
        for name in dict.fromkeys(process.served_model_names or ((process.model,) if process.model else ())):
            claims.setdefault(name, []).append((process, uid))
    for name, claimants in claims.items():
        if len({uid for _, uid in claimants}) > 1:
            who = ", ".join(
                f"{p.instance_id} (pid {p.pid}, "
                + ("owner unknown" if uid is None else user_name(uid))
                + ("" if uid in allowed else ", left out")
                + ")"
                for p, uid in claimants
            )
            notes.append(f"served name {_label(name)!r} is claimed by engines of different owners: {who}")
    return kept, notes


class FeedWriter:
    """Writes a feed's file (``-``: stdout) whenever what it lists changes, atomically."""

    def __init__(
        self,
        feed: FeedFormat,
        out: str,
        *,
        advertise: str | None = None,
        log: Callable[[str], None] | None = None,
        allow_owners: Sequence[str] = (),
    ) -> None:
        if feed not in FEED_FORMATS:
            raise InvalidInputError(f"format: {feed!r} is not one of {', '.join(FEED_FORMATS)}")
        self.feed = feed
        self.out = out
        self.advertise, how = advertised(advertise)
        if log is not None and advertise is None:
            wildcard = "engines listening on every address"
            log(f"{wildcard} are given as {self.advertise} ({how}; --advertise sets it)")
        #: the uids whose engines are listed (root, the user running it, ``allow_owners``)
        self.allowed = allowed_owners(allow_owners)
        #: how many engines the file written last lists
        self.listed = 0
        self._last: bytes | None = None
        self._log = log
        self._noted: set[str] = set()
        #: how many times the file was written
        self.writes = 0

    def write(self, processes: Sequence[EngineProcess]) -> bool:
        """Writes the feed for these serving engines (those of allowed owners: see :func:`trusted`)
        unless the file already says so; each reason an engine is left out is logged once."""
        ordered = sorted(processes, key=lambda p: (p.instance_id, p.pid))
        kept, notes = trusted(ordered, self.allowed)
        data, unfit = render(self.feed, kept, advertise=self.advertise)
        notes += [f"left out {note}" for note in unfit]
        for note in notes:
            if self._log is not None and note not in self._noted:
                self._log(note)
        self._noted = set(notes)
        self.listed = len(kept)
        if data == self._last:
            return False
        if self.out == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            replace_file(self.out, data, field="--out")
        self._last = data
        self.writes += 1
        return True


def export_once(writer: FeedWriter, *, timeout: float = 2.0, deadline: float | None = None) -> int:
    """Scans, checks every engine (``verify_identity``) and writes the feed: the engines listed."""
    from enginespec.health.checks import check_all
    from enginespec.scanning.scanner import Scanner

    processes = Scanner().scan()
    healths = check_all(processes, timeout=timeout, verify_identity=True, deadline=deadline)
    writer.write(serving(processes, healths))
    return writer.listed


def export_watch(
    writer: FeedWriter,
    *,
    interval: float = 1.0,
    health_interval: float = 2.0,
    timeout: float = 2.0,
) -> None:
    """Keeps the feed up to date from the event watch: an engine is listed as soon as its health
    turns ``ready`` (identity verified) and removed as soon as it stops or is ready no more
    (a ``stopped`` event comes within milliseconds of the exit where the kernel's process events
    drive the watch). A ``changed`` engine stays listed with its new facts until its next check
    says otherwise. Runs until interrupted."""
    from enginespec.scanning.scanner import Scanner
    from enginespec.scanning.watch import Changed, HealthChanged, Recovered, Stopped, WorkerLost

    listed: dict[tuple[int, float], EngineProcess] = {}
    writer.write([])  # the file exists from the start, listing what is known to serve: nothing yet
    watch = Scanner().watch(
        interval,
        health=True,
        health_interval=health_interval,
        health_timeout=timeout,
        load=False,
        verify_identity=True,
    )
    try:
        for event in watch:
            if isinstance(event, Stopped):
                listed.pop((event.identity.pid, event.identity.start_time), None)
            elif isinstance(event, HealthChanged | Recovered):
                key = (event.process.pid, event.process.start_time)
                if event.health.state == "ready" and event.process.role == "server":
                    listed[key] = event.process
                else:
                    listed.pop(key, None)
            elif isinstance(event, WorkerLost):
                listed.pop((event.process.pid, event.process.start_time), None)
            elif isinstance(event, Changed):
                key = (event.process.pid, event.process.start_time)
                if key in listed:
                    listed[key] = event.process
            try:
                writer.write(list(listed.values()))
            except OSError as err:  # a full disk, a broken pipe: said, tried again next time
                if writer._log is not None:
                    writer._log(str(err))
            except Exception as err:  # the loop's boundary: the file keeps what it last said
                failed("feed", err, loud=True)
    finally:
        watch.close()
