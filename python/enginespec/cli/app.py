"""The ``enginespec`` command.

Each command imports what it needs when it runs (the scanner, httpx, rich, prometheus-client), so
``enginespec --version`` and ``ps --no-health`` start in a fraction of the time that importing
everything takes. Exit codes: 0 done, 1 the answer is "no" (not ready, install failed), 2 bad input
or a refusal before anything ran, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from enginespec.cli import args as cliargs
from enginespec.cli.args import duration, grace, port
from enginespec.cli.targets import FORMS, address, is_target, listens_at
from enginespec.display import age, compact_url, literal, literal_lines
from enginespec.suggest import did_you_mean
from enginespec.version import __version__

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console, ConsoleOptions
    from rich.text import Text

    from enginespec.cli.table import Column
    from enginespec.config import Config
    from enginespec.gpus.reader import GpuDevice, GpuUse
    from enginespec.health.load import EngineLoad
    from enginespec.process.containers import PublishedPort
    from enginespec.process.record import EngineProcess
    from enginespec.scanning.watch import WatchEvent
    from enginespec.spec import EngineSpec
    from enginespec.status import Health

FORMATS = ("table", "wide", "json", "name")
FILTER_KEYS = ("engine", "id", "pid", "health", "role", "port", "model")
#: what a table shows for a model argv does not name, and for a health check not answered yet.
MODEL_UNKNOWN = "<unknown>"
HEALTH_PENDING = "checking"


def _fail(command: str, message: object) -> None:
    """One line on stderr, shown literally (messages may quote argv, paths or a server's words)."""
    print(f"enginespec {command}: {literal(str(message))}", file=sys.stderr)


def _engine_ids() -> tuple[str, ...]:
    from enginespec.definition.registry import engine_ids

    return engine_ids()


def _engine_names() -> dict[str, str]:
    """Every name an engine is typed by (id or alias) -> its id."""
    from enginespec.definition.registry import engine_names

    return engine_names()


def _json(model: BaseModel) -> str:
    """A model as indented ASCII JSON: argv bytes that are not UTF-8 (surrogate escapes from
    /proc) become ``\\udcXX`` escapes, where pydantic's own JSON would fail."""
    from enginespec.untrusted.documents import dumps

    return dumps(model.model_dump(mode="json"), indent=2)


def _out(lines: Sequence[str]) -> None:
    """Lines on stdout, as plain text: a reader that goes away (``| head``) ends the command
    quietly (see main)."""
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------- ps


def _ps_columns() -> tuple[Column, ...]:
    from enginespec.cli.table import Column

    # ``drop``: left out, lowest first, when the table does not fit; SERVED AS (the name clients
    # send), URL and AGE go last.
    return (
        Column("PID"),
        Column("ENGINE"),
        # Empty for a server, so left out when every row is one.
        Column("ROLE", drop=5),
        # whole while there are cheaper columns to leave out (NOTE and those before it)
        Column("MODEL", shorten="middle", minimum=12, comfortable=20, whole_over=8),
        Column("SERVED AS", shorten="end", minimum=10, comfortable=14, drop=10),
        # architecture, quantization, context as started (from the model's files, see docs/models.md)
        Column("MODEL FACTS", shorten="end", minimum=10, drop=2),
        Column("URL", drop=11, last_resort=True),
        Column("CONTAINER", shorten="end", minimum=12, drop=7),
        Column("PUBLISHED", shorten="end", minimum=12, drop=6),
        Column("WORKERS", drop=4),
        Column("SUPERVISOR", drop=3),
        Column("LISTENING", shorten="end", minimum=9, drop=1),
        # other processes on the server's own address and port (SO_REUSEPORT)
        Column("PORT SHARED WITH", shorten="end", minimum=9, drop=2),
        # the GPUs the tree holds and the bytes (`0,1 38.2G`): left out when no engine holds one
        Column("GPU", shorten="end", minimum=5, drop=9),
        Column("AGE"),
        Column("HEALTH"),
        # why: the health check's reason, or what argv got wrong: a common reason ("process is
        # up, not accepting connections yet") whole before ROLE and WORKERS are shown; a reason
        # cut to fewer than 20 cells says nothing
        Column("NOTE", shorten="end", minimum=20, comfortable=44, drop=8),
    )


def _load_columns(droppable: bool = False) -> tuple[Column, ...]:
    """``ps --load``: requests running and waiting, KV-cache use, generated tokens per second;
    ``droppable`` (``watch``, which shows them unasked): the first left out when narrow."""
    from enginespec.cli.table import Column

    drop = 1 if droppable else 0
    return tuple(Column(header, drop=drop) for header in ("RUN", "WAIT", "KV%", "TOK/S"))


def _load_cells(load: EngineLoad | None) -> list[str]:
    """A reading under the load columns: ``-`` for a figure the engine does not report."""
    if load is None or not load.available:
        return ["-"] * 4

    def shown(value: float | None, text: str) -> str:
        return "-" if value is None else text

    return [
        shown(load.requests_running, str(load.requests_running)),
        shown(load.requests_waiting, str(load.requests_waiting)),
        shown(load.kv_cache_usage, f"{(load.kv_cache_usage or 0) * 100:.0f}"),
        shown(load.tokens_per_second, f"{load.tokens_per_second or 0:.1f}"),
    ]


def _two_readings(processes: Sequence[EngineProcess], interval: float, timeout: float) -> list[EngineLoad]:
    """Each engine's load from two readings ``interval`` apart (a rate needs two)."""
    from enginespec.health.load import check_load_all

    first = check_load_all(processes, timeout=timeout)
    time.sleep(interval)
    return check_load_all(processes, previous=first, timeout=timeout)


def _size(size: int | None) -> str:
    """``38.2G``, ``512M`` (binary units, as nvidia-smi counts), ``?`` when unknown."""
    if size is None:
        return "?"
    return f"{size / 2**30:.1f}G" if size >= 2**30 else f"{size / 2**20:.0f}M"


def _gpu_name(index: int | None, mig_index: int | None, device: str) -> str:
    if index is None:
        return device
    return f"{index}:{mig_index}" if mig_index is not None else str(index)


def _gpu_cell(uses: Sequence[GpuUse]) -> str:
    """``0,1 38.2G``: the GPUs a tree holds and the bytes summed (``?`` if a GPU's are unknown)."""
    from enginespec.cli.table import EMPTY

    if not uses:
        return EMPTY
    names = ",".join(_gpu_name(u.index, u.mig_index, u.device) for u in uses)
    known = [u.memory_bytes for u in uses]
    return f"{names} {_size(None if None in known else sum(b or 0 for b in known))}"


def _facts_cell(p: EngineProcess) -> str:
    """``llama Q4_K_M 4096``: the model's architecture and quantization, and the context the
    engine was started with (else the trained one)."""
    from enginespec.cli.table import EMPTY

    facts = p.model_facts
    if facts is None:
        return EMPTY
    context = facts.estimate.context if facts.estimate and facts.estimate.context else facts.context_length
    parts = [facts.architecture, facts.quantization, str(context) if context else None]
    return " ".join(part for part in parts if part) or EMPTY


def _published(port: PublishedPort) -> str:
    """``0.0.0.0:8001->8000``, ``[::]:8001->8000``: as ``docker ps`` shows a published port."""
    address = f"[{port.host_address}]" if ":" in port.host_address else port.host_address
    return f"{address}:{port.host_port}->{port.container_port}"


def _model_cell(p: EngineProcess, wide: bool) -> str:
    from enginespec.models.naming import model_name

    if p.model is None:
        return MODEL_UNKNOWN
    # another host's pid names no process here: its files are not read for its model's name
    return p.model if wide else model_name(p.model, p.pid if p._local else None, p.engine) or p.model


def _served_cell(p: EngineProcess, wide: bool) -> str:
    from enginespec.cli.table import EMPTY

    names = p.served_model_names
    # The model's own name, served as itself, is said once (in MODEL) unless MODEL shows a
    # shorter name than what clients must send.
    if not wide and names == (p.model,) and _model_cell(p, wide) == p.model:
        return EMPTY
    return ", ".join(names) or EMPTY


def _note(p: EngineProcess, health: Health | None) -> str:
    from enginespec.cli.table import EMPTY

    notes = []
    if health is not None and health.state != "ready" and health.reason:
        notes.append(health.reason)
    if p.role == "orphan":
        # the health reason already says the server is gone; its pid is news
        if p.server_pid:
            notes.append(f"its server was pid {p.server_pid}")
        elif not notes:
            notes.append("its server is gone")
    notes.extend(p.problems)
    return "; ".join(notes) or EMPTY


def _ps_row(p: EngineProcess, health: Health | None, state: str | None, wide: bool, now: float) -> list[str]:
    """A process's cells under the ps columns (HEALTH and NOTE only with a ``state``)."""
    from enginespec.cli.table import EMPTY

    url = p.base_url if wide or p.base_url is None else compact_url(p.base_url)
    return [
        str(p.pid),
        p.engine,
        p.role if p.role != "server" else EMPTY,
        _model_cell(p, wide),
        _served_cell(p, wide),
        _facts_cell(p),
        url or EMPTY,
        p.container.label if p.container else EMPTY,
        ", ".join(_published(q) for q in p.published) or EMPTY,
        str(len(p.worker_pids)) if p.worker_pids else EMPTY,
        p.supervisor or EMPTY,
        ", ".join(map(str, p.listen_ports)) or EMPTY,
        ", ".join(map(str, p.port_conflicts)) or EMPTY,
        _gpu_cell(p.gpus),
        age(now - p.start_time),
        *([state, _note(p, health)] if state is not None else []),
    ]


def _row_cells(row: Shown, health: bool, wide: bool, now: float) -> list[str]:
    """:func:`_ps_row` of a row, or when that fails, its pid and engine with why in NOTE (the
    error boundary: the other rows are unaffected)."""
    from enginespec.cli.table import EMPTY
    from enginespec.untrusted.boundary import contained

    p, state = row.process, row.state if health else None

    def unshown(reason: str) -> list[str]:
        width = len(_ps_columns()) - (0 if state is not None else 2)
        cells = [str(p.pid), p.engine, *[EMPTY] * (width - 2)]
        if state is not None:
            cells[-2:] = [state, reason]
        return cells

    return contained("table row", lambda: _ps_row(p, row.health, state, wide, now), unshown)


class Shown:
    """A row of the table: the process, its last health check, the state shown, and its load
    (``ps --load``)."""

    __slots__ = ("agent", "health", "load", "process", "state")

    def __init__(
        self,
        process: EngineProcess,
        health: Health | None = None,
        state: str | None = None,
        agent: str | None = None,
    ) -> None:
        self.process, self.health, self.state = process, health, state
        self.load: EngineLoad | None = None
        #: the agent that reported it (``--remote``); ``None``: this host
        self.agent = agent


def _sort_key(row: Shown) -> tuple[str, str, int, int]:
    """Rows by host, engine, then port, then pid: stable while health changes, so nothing jumps."""
    p = row.process
    return (row.agent or "", p.engine, p.effective_port or 0, p.pid)


def _table_lines(
    rows: Sequence[Shown],
    health: bool,
    width: int | None,
    *,
    wide: bool = False,
    load: bool = False,
    load_droppable: bool = False,
) -> list[str]:
    """The ps table as literal text lines fitted to ``width`` (no cell split; a line still too
    wide is cut with an ellipsis rather than wrapped); with ``load`` also the load columns."""
    from rich.cells import cell_len, set_cell_size

    from enginespec.cli.table import ELLIPSIS, Column, fit, lines

    columns = _ps_columns()
    if not health:
        columns = columns[:-2]
    if load:
        columns += _load_columns(load_droppable)
    remote = any(r.agent is not None for r in rows)
    if remote:
        columns = (Column("HOST", shorten="middle", minimum=10), *columns)
    now = time.time()
    cells = [
        [
            literal(cell)
            for cell in ([r.agent or "-"] if remote else [])
            + _row_cells(r, health, wide, now)
            + (_load_cells(r.load) if load else [])
        ]
        for r in rows
    ]
    headers, shown = fit(columns, cells, width)
    text = lines(headers, shown)
    if width is None:
        return text
    return [line if cell_len(line) <= width else set_cell_size(line, width - 1) + ELLIPSIS for line in text]


class _Filters:
    """What ``ps`` keeps: a row passes when it matches one of the terms (if any) and every key of
    ``--filter`` (one of its values: ``engine=vllm,engine=sglang`` is either)."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.keys: dict[str, set[str]] = {}

    def keeps(self, row: Shown, *, checked: bool = True) -> bool:
        """Whether the row passes; before its health is checked (``checked=False``) the
        ``health`` key is left for later."""
        p = row.process
        if self.terms and not any(_names(term, p) for term in self.terms):
            return False
        return all(
            any(_matches(key, value, row) for value in values)
            for key, values in self.keys.items()
            if checked or key != "health"
        )


def _names(term: str, p: EngineProcess) -> bool:
    """Whether ``term`` (an engine, an engine id, a pid, or where it listens) names process ``p``."""
    if term.isdigit():
        return int(term) == p.pid or int(term) in p.worker_pids
    where = address(term)
    if where is not None:
        return listens_at(p, where)
    return term in (p.engine, p.engine_id) or term == f"{p.engine_id}-pid{p.pid}"


def _matches(key: str, value: str, row: Shown) -> bool:
    from enginespec.models.naming import model_name

    p = row.process
    if key == "model":
        names = (
            p.model or "",
            model_name(p.model, p.pid if p._local else None, p.engine) or "",
            *p.served_model_names,
        )
        return any(value in name for name in names)
    if key == "health":
        return row.state == value
    if key == "port":
        return str(p.effective_port) == value
    if key == "role":
        return p.role == value
    return _names(value, p)  # engine, id, pid


def _parse_filters(args: argparse.Namespace) -> _Filters:
    """The terms and ``--filter`` of ``ps``; ``InvalidInputError`` naming the bad one."""
    from enginespec.errors import InvalidInputError

    ids, names = _engine_ids(), _engine_names()
    filters = _Filters()
    for term in args.terms:
        if not (term.lower() in names or is_target(term)):
            raise InvalidInputError(
                f"{term!r} is not an engine, an engine id, a pid, :PORT, HOST:PORT or a URL "
                f"(engines: {', '.join(ids)}){did_you_mean(term, names)}"
            )
        filters.terms.append(names.get(term.lower(), term))
    for text in args.filter:
        for item in text.split(","):
            key, eq, value = item.partition("=")
            if not eq or key not in FILTER_KEYS or not value:
                raise InvalidInputError(
                    f"--filter: {item!r} is not KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}"
                    + (did_you_mean(key, FILTER_KEYS) if eq else "")
                )
            if key == "engine":
                if value.lower() not in names:
                    raise InvalidInputError(
                        f"--filter: engine {value!r} is not one of {', '.join(ids)}"
                        + did_you_mean(value, names)
                    )
                value = names[value.lower()]
            filters.keys.setdefault(key, set()).add(value)
    return filters


def _add_remote(command: argparse.ArgumentParser) -> None:
    """``--remote`` and ``--token-file`` of ``ps`` and ``watch`` (see :mod:`enginespec.fleet.remote`)."""
    command.add_argument(
        "--remote",
        action="append",
        default=[],
        metavar="URL[,URL...]",
        help="the engines that agents (enginespec serve) report instead of this host's, with a HOST "
        "column: http://HOST:PORT, https://HOST:PORT or unix:PATH; --timeout is each host's",
    )
    command.add_argument("--token-file", help="with --remote: the token the agents require")


def _add_filters(command: argparse.ArgumentParser) -> None:
    """The terms and ``--filter`` of ``ps`` and ``watch`` (see :class:`_Filters`)."""
    command.add_argument(
        "terms", nargs="*", metavar="TERM", help="an engine, an engine id, a pid, :PORT, HOST:PORT or a URL"
    )
    command.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"keep matching rows; KEY: {', '.join(FILTER_KEYS)} (model: contains); comma-separated "
        "or repeated; one key several times: any of its values",
    )


def _cmd_ps(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError

    fmt = args.format or ("json" if args.json else "wide" if args.wide else "table")
    try:
        filters = _parse_filters(args)
    except InvalidInputError as err:
        _fail("ps", err)
        return 2
    listing = args.quiet or fmt == "name"
    if "health" in filters.keys and args.no_health:
        _fail("ps", "--filter health=... needs the health checks: drop --no-health")
        return 2
    checked = not args.no_health and (not listing or "health" in filters.keys)
    failed = False
    if args.remote:
        try:
            rows, failed = _remote_rows(args)
        except InvalidInputError as err:  # a --remote that is no agent's address, a bad --token-file
            _fail("ps", err)
            return 2
        processes = [row.process for row in rows]
        checked = not args.no_health and any(row.health is not None for row in rows)
    else:
        from enginespec.scanning.scanner import Scanner

        processes = Scanner(listen_ports=not listing).scan()
        # only the engines asked for are checked: an unrelated hung one costs nothing
        rows = [row for row in (Shown(p) for p in processes) if filters.keeps(row, checked=False)]
    if checked and not args.remote:
        from enginespec.health.checks import check_all, request_timeout

        # --timeout is the deadline of all the checks together, not of each (1,024 hung servers
        # are not 16 rounds of it): those not done by then are `unknown`, saying so. Each request
        # times out before it, so a server that never answers is `unhealthy`, as in describe.
        healths = check_all(
            [row.process for row in rows], timeout=request_timeout(args.timeout), deadline=args.timeout
        )
        for row, health in zip(rows, healths, strict=True):
            row.health, row.state = health, health.state
    if args.load and not listing and not args.remote:
        # Load is read only when asked: it costs two more requests per engine.
        readings = _two_readings([row.process for row in rows], args.load_interval, args.timeout)
        for row, load in zip(rows, readings, strict=True):
            row.load = load
    rows = sorted((row for row in rows if filters.keeps(row)), key=_sort_key)
    code = 1 if failed else 0
    if args.quiet:
        _out([str(row.process.pid) for row in rows])
        return code
    if fmt == "name":
        from enginespec.scanning.scanner import unique_engine_ids

        # the ids as the exporter's label gives them: two engines sharing one are told apart
        names = (
            {}
            if args.remote
            else {p.pid: n for p, n in zip(processes, unique_engine_ids(processes), strict=True)}
        )
        _out([names.get(row.process.pid, row.process.engine_id) for row in rows])
        return code
    if fmt == "json":
        from enginespec.scanning.scanner import engine_document
        from enginespec.untrusted.documents import dumps

        documents = []
        for row in rows:
            document = _document(row, engine_document)
            if row.agent is not None:  # the engine's own "host" stays its listen address
                document["agent"] = row.agent
            documents.append(document)
        _out([dumps(documents, indent=2)])
        return code
    if not rows:
        # on stderr: `enginespec ps | wc -l` counts engines
        where = "on these hosts" if args.remote else "on this host"
        print(
            f"no engine servers found {where}" if not processes else "no engine server matches",
            file=sys.stderr,
        )
        return code
    # Every cell is shown literally: argv can carry rich markup and terminal escapes. On a terminal
    # the table fits its width (no cell split); piped or wide, nothing is shortened.
    import shutil

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() and fmt == "table" else None
    text = _table_lines(rows, checked, width, wide=fmt == "wide", load=args.load and not args.remote)
    _out(text[1:] if args.no_headers else text)
    return code


def _document(row: Shown, make: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The JSON object of a row (``make``: :func:`enginespec.scanning.scanner.engine_document`), or when
    that fails, its pid, engine and why (the error boundary: the other rows are unaffected)."""
    from enginespec.untrusted.boundary import contained

    p = row.process
    return contained(
        "document",
        lambda: make(p, row.health, row.load),
        lambda reason: {"pid": p.pid, "engine": p.engine, "problems": [*p.problems, reason]},
    )


def _remote_rows(args: argparse.Namespace) -> tuple[list[Shown], bool]:
    """The rows the agents of ``--remote`` report, and whether any host failed (each failure is
    said on its own line, on stderr)."""
    from enginespec.fleet.agent import read_token
    from enginespec.fleet.remote import fetch_remote

    urls = [url for text in args.remote for url in text.split(",") if url]
    token = read_token(args.token_file) if args.token_file else None
    rows, failed = [], False
    for report in fetch_remote(urls, timeout=args.timeout, token=token):
        if report.error is not None:
            failed = True
            print(f"enginespec ps: {literal(report.agent)}: {literal(report.error)}", file=sys.stderr)
        for engine in report.engines:
            state = engine.health.state if engine.health is not None else None
            row = Shown(engine.process, engine.health, state, agent=engine.agent)
            row.load = engine.load
            rows.append(row)
    return rows, failed


# ------------------------------------------------------------------------------------- watch


class _LiveTable:
    """What ``enginespec watch`` shows: the engines now running, fitted to the terminal's width
    and height each time it is drawn (so a resize is followed); rows that do not fit are counted
    (``+22 more``). With ``--remote``, rows carry their agent and each lost agent is said below.
    Only rows the filter shows are kept (an agent may announce any number of engines), and rich's
    refresh thread draws while the watch's thread applies events: both hold ``lock``."""

    def __init__(
        self,
        how: str,
        health: bool,
        filters: _Filters,
        loads: Callable[[], Mapping[tuple[int, float], EngineLoad | None]] | None = None,
    ) -> None:
        self.how = how
        self.health = health
        self.filters = filters
        #: the watch's latest load readings (a local watch with load): RUN, WAIT, KV%, TOK/S
        self.loads = loads
        self.engines: dict[tuple[str | None, int, float], Shown] = {}
        #: agent -> why it is not reached (``--remote``)
        self.lost: dict[str, str] = {}
        self.lock = threading.Lock()

    def apply(self, event: WatchEvent, agent: str | None = None) -> None:
        from enginespec.scanning.watch import HealthChanged, Stopped

        with self.lock:
            self.lost.pop(agent or "", None)
            if isinstance(event, Stopped):
                self.engines.pop((agent, event.identity.pid, event.identity.start_time), None)
                return
            key = (agent, event.process.pid, event.process.start_time)
            row = self.engines.get(key) or Shown(event.process, state=HEALTH_PENDING, agent=agent)
            row.process = event.process
            if isinstance(event, HealthChanged):
                row.health, row.state = event.health, event.type
            if self.filters.keeps(row):
                self.engines[key] = row
            else:  # not shown: forgotten (a later event that the filter keeps brings it back)
                self.engines.pop(key, None)

    def lose(self, agent: str, error: str) -> None:
        """An agent's stream is gone: its rows are stale until it tells them again."""
        with self.lock:
            self.engines = {key: row for key, row in self.engines.items() if key[0] != agent}
            self.lost[agent] = error

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        with self.lock:
            drawn = self._lines(console, options)
        yield from drawn

    def _lines(self, console: Console, options: ConsoleOptions) -> list[Text]:
        from rich.text import Text

        width = options.max_width
        height = options.height or console.size.height
        shown = sorted(self.engines.values(), key=_sort_key)
        if self.loads is not None:
            readings = self.loads()
            for row in shown:
                row.load = readings.get((row.process.pid, row.process.start_time))
        # the load columns only when some engine reports its load
        load = any(row.load is not None and row.load.available for row in shown)
        title = f"{len(shown)} engine server(s), {self.how}; Ctrl-C to stop"
        drawn = [Text(title if len(title) <= width else title[: max(width - 1, 0)] + "…", style="dim")]
        lost = [literal(f"{agent}: {error}") for agent, error in sorted(self.lost.items())]
        room = max(height - 3 - len(lost), 1)  # the title, the header, the lost agents, the cursor's line
        if shown:
            hidden = 0
            if len(shown) > room:
                hidden = len(shown) - (room - 1)  # one line says how many more
                shown = shown[: room - 1]
            header, *body = _table_lines(shown, self.health, width, load=load, load_droppable=True)
            drawn.append(Text(header, style="bold", no_wrap=True, overflow="ellipsis"))
            drawn += [Text(line, no_wrap=True, overflow="ellipsis") for line in body]
            if hidden:
                more = f"+{hidden} more (enginespec ps lists them all)"
                drawn.append(Text(more, style="dim", no_wrap=True))
        drawn += [Text(line, style="red", no_wrap=True, overflow="ellipsis") for line in lost]
        return drawn


def _event_line(event: WatchEvent) -> str:
    """One event as a literal text line (``watch`` when stdout is not a terminal)."""
    from enginespec.scanning.watch import Changed, Stopped, WorkerLost

    if isinstance(event, Stopped):
        who = event.identity
        return literal(f"stopped {who.pid} {who.engine} {who.engine_id}")
    p = event.process
    detail = " ".join(event.fields) if isinstance(event, Changed) else p.base_url or "-"
    if isinstance(event, WorkerLost):
        detail = event.worker.describe()
    return literal(f"{event.type} {p.pid} {p.engine} {p.engine_id} {p.model or MODEL_UNKNOWN} {detail}")


class _EventFilter:
    """The events of the engines a watch's terms and ``--filter`` keep: judged on each event's
    process, with the health state last seen for it; an engine's ``stopped`` passes when its
    earlier events did. Only what the filter keeps is remembered (an agent may announce any
    number of engines): an engine it does not keep is judged on its next event alone."""

    def __init__(self, filters: _Filters) -> None:
        self.filters = filters
        #: the rows the filter keeps now, by (agent, pid, start time)
        self.rows: dict[tuple[str | None, int, float], Shown] = {}
        #: the engines some event of which passed, until they stop
        self.kept: set[tuple[str | None, int, float]] = set()

    def keeps(self, event: WatchEvent, agent: str | None = None) -> bool:
        from enginespec.scanning.watch import HealthChanged, Stopped

        if isinstance(event, Stopped):
            key = (agent, event.identity.pid, event.identity.start_time)
            self.rows.pop(key, None)
            if key in self.kept:
                self.kept.discard(key)
                return True
            return False
        key = (agent, event.process.pid, event.process.start_time)
        row = self.rows.get(key) or Shown(event.process, agent=agent)
        row.process = event.process
        if isinstance(event, HealthChanged):
            row.health, row.state = event.health, event.type
        if self.filters.keeps(row):
            self.rows[key] = row
            self.kept.add(key)
            return True
        self.rows.pop(key, None)
        return False


def _cmd_watch(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError
    from enginespec.scanning.scanner import Scanner
    from enginespec.scanning.watch import event_json

    try:
        chosen = _EventFilter(_parse_filters(args))
    except InvalidInputError as err:
        _fail("watch", err)
        return 2
    if "health" in chosen.filters.keys and not args.health:
        _fail("watch", "--filter health=... needs the health checks: drop --no-health")
        return 2
    if args.remote:
        try:
            return _watch_remote(args, chosen)
        except InvalidInputError as err:
            _fail("watch", err)
            return 2
    watch = Scanner().watch(
        args.interval,
        health=args.health,
        health_interval=args.health_interval,
        poll=args.poll,
        load=args.load,
        stall_after=args.stall_after,
    )
    # Said on stderr, so a JSON stream stays pure and a reader knows how late events may come.
    how = "process events" if watch.mode == "events" else f"polling every {args.interval:g}s"
    reason = f" ({watch.polling_reason})" if watch.polling_reason else ""
    try:
        if args.json or not sys.stdout.isatty():
            print(f"enginespec watch: {how}{reason}", file=sys.stderr, flush=True)
        events = (event for event in watch if chosen.keeps(event))
        if args.json or not sys.stdout.isatty():
            render = event_json if args.json else _event_line
            for event in events:
                line = _rendered(event, render)
                if line is not None:
                    print(line, flush=True)
        else:
            from rich.console import Console
            from rich.live import Live

            console = Console(markup=False, highlight=False, emoji=False)
            table = _LiveTable(how, args.health, chosen.filters, (lambda: watch.loads) if args.load else None)
            with Live(table, console=console, refresh_per_second=4, transient=False):
                for event in watch:
                    table.apply(event)
    except KeyboardInterrupt:  # how a watch is stopped: not an interruption
        pass
    finally:
        watch.close()
    return 0


def _rendered(event: WatchEvent, render: Callable[[WatchEvent], str]) -> str | None:
    """An event as a line, or ``None`` when it cannot be made (the error boundary: the watch
    goes on, the failure counted and logged once)."""
    from enginespec.untrusted.boundary import contained

    return contained("watch event", lambda: render(event), lambda _reason: None)


def _watch_remote(args: argparse.Namespace, chosen: _EventFilter) -> int:
    """``watch --remote``: the agents' events, merged (JSON objects carry their ``agent``; a lost
    agent is a ``host_lost`` object, a line on stderr, or a red line under the table)."""
    from enginespec.fleet.agent import read_token
    from enginespec.fleet.remote import HostLost, watch_remote
    from enginespec.untrusted.documents import dumps

    urls = [url for text in args.remote for url in text.split(",") if url]
    token = read_token(args.token_file) if args.token_file else None
    items = watch_remote(urls, timeout=args.timeout, token=token)
    try:
        if args.json or not sys.stdout.isatty():
            print(f"enginespec watch: events of {len(urls)} agent(s)", file=sys.stderr, flush=True)
        if args.json or not sys.stdout.isatty():
            for item in items:
                # "host" is the old name of "agent", kept for readers of the old objects
                if isinstance(item, HostLost):
                    lost = {"type": "host_lost", "agent": item.agent, "host": item.agent, "error": item.error}
                    if args.json:
                        sys.stdout.write(dumps(lost) + "\n")
                    print(
                        literal(f"enginespec watch: {item.agent}: {item.error}"), file=sys.stderr, flush=True
                    )
                elif chosen.keeps(item.event, item.agent):
                    if args.json:
                        said = item.event.model_dump(mode="json")  # as event_json writes it
                        sys.stdout.write(dumps({"agent": item.agent, "host": item.agent, **said}) + "\n")
                    else:
                        print(literal(item.agent) + " " + _event_line(item.event), flush=True)
                sys.stdout.flush()
        else:
            from rich.console import Console
            from rich.live import Live

            console = Console(markup=False, highlight=False, emoji=False)
            table = _LiveTable(f"events of {len(urls)} agent(s)", args.health, chosen.filters)
            with Live(table, console=console, refresh_per_second=4, transient=False):
                for item in items:
                    if isinstance(item, HostLost):
                        table.lose(item.agent, item.error)
                    else:
                        table.apply(item.event, item.agent)
    except KeyboardInterrupt:
        pass
    finally:
        items.close()
    return 0


# ----------------------------------------------------------------------- describe and health


def _find(command: str, target: str, *, listen_ports: bool = True) -> EngineProcess | None:
    """The running engine a target names (see :mod:`enginespec.cli.targets`); None (said on stderr)
    when there is none or several."""
    from enginespec.cli.targets import find
    from enginespec.errors import InvalidInputError

    try:
        return find(target, listen_ports=listen_ports)
    except InvalidInputError as err:
        _fail(command, err)
        return None


def _describe_lines(p: EngineProcess, health: Health | None) -> list[str]:
    from enginespec.models.naming import model_name

    now = time.time()
    started = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(p.start_time))
    sources = dict(p.sources)
    fields: list[tuple[str, str]] = [
        ("Engine", p.engine),
        ("Engine id", p.engine_id),
        ("PID", str(p.pid)),
        ("Role", p.role + (f" (of server {p.server_pid})" if p.server_pid else "")),
        ("Model", p.model or MODEL_UNKNOWN),
    ]
    name = model_name(p.model, p.pid, p.engine)
    if name and name != p.model:
        fields.append(("Model name", name))
    fields += [
        ("Served as", ", ".join(p.served_model_names) or "-"),
        ("URL", p.base_url or "- (no usable address)"),
        ("Host", f"{p.effective_host}" + (f" (from {sources['host']})" if "host" in sources else "")),
        ("Port", f"{p.effective_port or '-'}" + (f" (from {sources['port']})" if "port" in sources else "")),
        ("Started", f"{started} ({age(now - p.start_time)} ago)"),
        ("Workers", ", ".join(map(str, p.worker_pids)) or "-"),
        ("Supervisor", p.supervisor or "-"),
        ("Listening", ", ".join(map(str, p.listen_ports)) or "-"),
        ("Port shared with", ", ".join(map(str, p.port_conflicts)) or "-"),
        ("Container", p.container.label if p.container else "-"),
        ("Published", ", ".join(_published(q) for q in p.published) or "-"),
        ("Executable", p.exe or "-"),
        ("Command", " ".join(_shell_quote(a) for a in p.argv)),
    ]
    fields += [("Problem", problem) for problem in p.problems]
    if health is not None:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        status = f", HTTP {health.http_status}" if health.http_status is not None else ""
        fields.append(("Health", f"{health.state}{status}{latency}"))
        fields.append(("Reason", health.reason or "-"))
    width = max(len(key) for key, _ in fields) + 2
    return [literal(f"{key + ':':<{width}}{value}") for key, value in fields]


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _cmd_describe(args: argparse.Namespace) -> int:
    process = _find("describe", args.target)
    if process is None:
        return 2
    health = None
    if not args.no_health:
        from enginespec.health.checks import check_health, request_timeout

        health = check_health(process, timeout=request_timeout(args.timeout), deadline=args.timeout)
    if args.json:
        from enginespec.scanning.scanner import engine_document
        from enginespec.untrusted.documents import dumps

        _out([dumps(_document(Shown(process, health), engine_document), indent=2)])
    else:
        from enginespec.untrusted.boundary import contained

        def unshown(reason: str) -> list[str]:
            return [
                literal(f"PID: {process.pid}"),
                literal(f"Engine: {process.engine}"),
                literal(f"Problem: {reason}"),
            ]

        _out(contained("describe", lambda: _describe_lines(process, health), unshown))
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from enginespec.errors import EngineExited, InvalidInputError, NotReady
    from enginespec.health.checks import check_health, request_timeout, wait_ready

    target: EngineProcess | str
    ids, engine = _engine_ids(), _engine_names().get(args.target.lower())
    if engine is not None:
        if not args.url:
            _fail("health", f"give the URL of the {engine} server")
            return 2
        target = engine
    elif is_target(args.target):
        if args.url:
            _fail(
                "health", f"a URL is given with an engine name ({', '.join(ids)}), not with {args.target!r}"
            )
            return 2
        found = _find("health", args.target, listen_ports=False)
        if found is None:
            return 2
        target = found
    else:
        _fail(
            "health",
            f"{args.target!r} is neither {FORMS} nor an engine "
            f"({', '.join(ids)}){did_you_mean(args.target, _engine_names())}",
        )
        return 2
    try:
        if args.wait:
            health = wait_ready(
                target,
                args.url,
                timeout=args.wait_timeout,
                request_timeout=args.timeout,
                verify_identity=args.verify_identity,
            )
        else:
            health = check_health(
                target,
                args.url,
                timeout=request_timeout(args.timeout),
                verify_identity=args.verify_identity,
                deep=args.deep,
                deadline=args.timeout,
            )
    except InvalidInputError as err:
        _fail("health", err)
        return 2
    except (NotReady, EngineExited) as err:
        _fail("health", err)
        if err.last is None:
            return 1
        health = err.last
    if args.json:
        _out([_json(health)])
    else:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        reason = f": {health.reason}" if health.reason else ""
        _out([literal(f"{health.engine} {health.base_url or '-'} {health.state}{reason}{latency}")])
    return 0 if health.ready else 1


# ------------------------------------------------------------------------------ gpus and load


def gpu_lines(devices: Sequence[GpuDevice], processes: Sequence[EngineProcess]) -> list[str]:
    """The ledger as text lines: per GPU its figures, then who holds how much of it."""
    from enginespec.scanning.scanner import unique_engine_ids

    models = {engine_id: p for engine_id, p in zip(unique_engine_ids(processes), processes, strict=True)}
    out = []
    for device in devices:
        used = f"{_size(device.memory_used_bytes)} / {_size(device.memory_total_bytes)} used"
        where = " ".join(part for part in (device.device, device.pci_bus_id) if part)
        name = _gpu_name(device.index, device.mig_index, device.device)
        out.append(literal(f"GPU {name}  {device.name or '?'}  {where}  {used}"))
        for engine_id, size in device.engines.items():
            process = models.get(engine_id)
            what = f" pid {process.pid} {process.model or MODEL_UNKNOWN}" if process else ""
            orphan = "  orphan: reclaimable" if engine_id in device.reclaimable else ""
            out.append(literal(f"  {_size(size):>7}  {engine_id}{what}{orphan}"))
        for other in device.other_processes:
            out.append(
                literal(f"  {_size(other.memory_bytes):>7}  pid {other.pid} {other.name or '?'} (no engine)")
            )
        if device.unattributed_bytes:
            out.append(f"  {_size(device.unattributed_bytes):>7}  unattributed")
        if device.problem:
            out.append(literal(f"  note: {device.problem}"))
    for engine_id, process in models.items():
        if process.gpus_unknown:
            out.append(literal(f"{engine_id} pid {process.pid}: GPUs unknown: {process.gpus_unknown}"))
    return out


def _cmd_gpus(args: argparse.Namespace) -> int:
    from enginespec.scanning.scanner import Scanner, gpu_ledger
    from enginespec.untrusted.documents import dumps

    processes = Scanner(listen_ports=False).scan()
    devices = gpu_ledger(processes)
    if args.json:
        _out([dumps([device.model_dump(mode="json") for device in devices], indent=2)])
        return 0
    if not devices:
        print("no GPUs found on this host", file=sys.stderr)
    _out(gpu_lines(devices, processes))
    return 0


def _cmd_load(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError
    from enginespec.health.load import check_load_all

    process = _find("load", args.target, listen_ports=False)
    if process is None:
        return 2
    try:
        first = check_load_all([process], timeout=args.timeout, stall_after=args.stall_after)
        time.sleep(args.interval)
        [load] = check_load_all([process], previous=first, timeout=args.timeout, stall_after=args.stall_after)
    except InvalidInputError as err:
        _fail("load", err)
        return 2
    if args.json:
        _out([_json(load)])
    elif not load.available:
        _out([literal(f"{process.engine_id} pid {process.pid}: no load reading: {load.reason}")])
    else:
        cells = dict(zip((c.header for c in _load_columns()), _load_cells(load), strict=True))
        figures = [
            f"running {cells['RUN']}",
            f"waiting {cells['WAIT']}",
            f"KV cache {cells['KV%']}%" if load.kv_cache_usage is not None else "KV cache -",
            f"{cells['TOK/S']} tok/s",
        ]
        if load.models_loaded is not None:
            figures.append(f"{load.models_loaded} model(s) loaded")
        if load.stalled:
            figures.append(f"stalled (no token counter moved for {load.stall_after:g}s)")
        _out([literal(f"{process.engine_id} pid {process.pid} {load.source}: {', '.join(figures)}")])
    return 0 if load.available else 1


# ----------------------------------------------------------------- install, info, help, command


def _config(args: argparse.Namespace) -> Config:
    from enginespec.config import Config

    return Config(data_dir=args.data_dir) if args.data_dir else Config()


def _engine(command: str, name: str) -> EngineSpec | None:
    from enginespec.engines import get_engine_spec
    from enginespec.errors import UnknownEngineError

    try:
        return get_engine_spec(_engine_names().get(name.lower(), name))
    except UnknownEngineError as err:
        _fail(command, f"{err}{did_you_mean(name, _engine_names())}")
        return None


class _InstallProgress:
    """Install progress: on a terminal, a spinner, the phase, the installer's last line and the
    time taken; otherwise one line on stderr per phase."""

    def __init__(self, engine: str) -> None:
        self.phase = ""
        self.bar: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                SpinnerColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}", markup=False),
                console=Console(stderr=True, markup=False, highlight=False),
                transient=True,
            )
            self.task = self.bar.add_task(f"installing {engine}", total=None)

    def __enter__(self) -> _InstallProgress:
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def __call__(self, event: Any) -> None:
        phase = event.phase.replace("_", " ")
        last = next((line.strip() for line in reversed(event.new_output) if line.strip()), event.message)
        if self.bar is None:
            if phase != self.phase:
                print(literal(f"{phase}: {event.message}"), file=sys.stderr, flush=True)
            self.phase = phase
            return
        self.phase = phase
        import shutil

        room = max(shutil.get_terminal_size().columns - 16, 20)
        self.bar.update(self.task, description=literal(f"{phase}: {last}")[:room])


def _cmd_install(args: argparse.Namespace) -> int:
    import shlex

    from enginespec.errors import InstallError, InvalidInputError
    from enginespec.lifecycle.installing import InstallOptions

    spec = _engine(args.command, args.engine)
    if spec is None:
        return 2
    with _InstallProgress(spec.id) as progress:
        try:
            options = InstallOptions(
                version=args.version,
                python_path=args.python,
                progress=progress,
                source=args.source,
                ref=args.ref,
                index_url=args.index_url,
                find_links=tuple(args.find_links),
                accelerator=args.accelerator,
            )
            result = spec.install(options, _config(args))
        except InvalidInputError as err:
            _fail("install", err)
            return 2
        except InstallError as err:
            _fail("install", err)
            if not err.command:  # refused before anything ran (no GPU for it, no installer)
                return 2
            print(f"command: {literal(shlex.join(err.command))}", file=sys.stderr)
            for line in err.output_tail[-15:]:
                print(f"  {literal(line)}", file=sys.stderr)
            return 1
    state = "already installed" if result.already_installed else "installed"
    where = result.python_path or result.binary_path
    _out([literal(f"{spec.id} {result.version} {state} ({result.location}: {where})")])
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    from enginespec.engines import all_engine_specs

    specs = all_engine_specs()
    if args.engine:
        spec = _engine(args.command, args.engine)
        if spec is None:
            return 2
        specs = (spec,)
    config = _config(args)
    infos = [spec.get_runtime_info(config) for spec in specs]
    if args.json:
        from enginespec.untrusted.documents import dumps

        _out([dumps([info.model_dump(mode="json") for info in infos], indent=2)])
        return 0
    rows = [
        [
            info.engine,
            info.version or "not installed",
            info.location,
            info.python_path or info.binary_path or "-",
        ]
        for info in infos
    ]
    from enginespec.cli.table import lines

    _out(lines(["ENGINE", "VERSION", "LOCATION", "PATH"], [[literal(cell) for cell in row] for row in rows]))
    return 0


def _cmd_help(args: argparse.Namespace) -> int:
    from enginespec.errors import HelpError, InvalidInputError

    commands = args.parser_commands
    if args.topic is None:
        args.parser.print_help()
        return 0
    if args.topic in commands:
        commands[args.topic].print_help()
        return 0
    if args.topic.lower() not in _engine_names():
        topics = {**{name: name for name in commands}, **_engine_names()}
        _fail(
            "help",
            f"{args.topic!r} is neither a command ({', '.join(commands)}) nor an engine "
            f"({', '.join(_engine_ids())}){did_you_mean(args.topic, topics)}",
        )
        return 2
    spec = _engine(args.command, args.topic)
    if spec is None:
        return 2
    config = _config(args)
    try:
        _out([literal_lines(spec.get_config_help(config).text)])
    except InvalidInputError as err:
        _fail("help", err)
        return 2
    except HelpError as err:
        if spec.get_runtime_info(config).version is None:
            _fail("help", f"{spec.id} is not installed; run: enginespec install {spec.id}")
        else:
            _fail("help", err)
        return 1
    return 0


def _export_line(name: str, value: str) -> str:
    """``export NAME=value``; a PATH that is a directory put before the current PATH is written
    with ``$PATH``, so the line is right wherever it runs."""
    import shlex

    current = os.environ.get("PATH", os.defpath)
    if name == "PATH" and value.endswith(os.pathsep + current) and value != current:
        head = value[: -len(os.pathsep + current)]
        return f'export PATH={shlex.quote(head)}{os.pathsep}"$PATH"'
    return f"export {name}={shlex.quote(value)}"


def _cmd_command(args: argparse.Namespace) -> int:
    from enginespec.engines import get_engine_spec
    from enginespec.errors import CommandError, RecipeFileError
    from enginespec.lifecycle.recipe import Recipe

    try:
        recipe = Recipe.from_file(args.recipe)
        command = get_engine_spec(recipe.engine).plan(recipe, strict=args.strict)
    except (RecipeFileError, CommandError) as err:
        _fail("command", err)
        return 2
    if args.json:  # the dump masks secrets (argv values, env_vars whose names say secret)
        from enginespec.untrusted.documents import dumps

        document = command.model_dump(mode="json")
        if args.show_secrets:
            document.update(argv=list(command.argv), env=dict(command.env))
        _out([dumps(document, indent=2)])
        return 0
    env = dict(command.env) if args.show_secrets else command.redacted_env()
    lines = [literal(_export_line(name, value)) for name, value in env.items()]
    _out([*lines, literal(command.shell(redact=not args.show_secrets))])
    for warning in command.warnings:
        print(f"warning: {literal(warning)}", file=sys.stderr)
    if command.injected_flags:
        print(f"note: injected by defaults: {literal(' '.join(command.injected_flags))}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- parse, exporter


def _cmd_parse(args: argparse.Namespace) -> int:
    import shlex

    from enginespec.process.argv import parse_argv, redact_argv

    invocation = parse_argv(args.argv)
    if invocation is None:
        _fail("parse", f"not a server of a known engine: {shlex.join(redact_argv(args.argv))}")
        return 1
    _out([_json(invocation)])
    return 0


def _cmd_exporter(args: argparse.Namespace) -> int:
    import signal
    import threading

    import enginespec.fleet.exporter as exporter
    from enginespec.errors import ExporterError

    if args.port == 0 and not args.textfile:
        _fail("exporter", "--port 0 serves no HTTP: give --textfile FILE, or a port")
        return 2
    from enginespec.errors import InvalidInputError
    from enginespec.fleet.agent import read_token

    try:
        token = read_token(args.token_file) if args.token_file else None
    except InvalidInputError as err:
        _fail("exporter", err)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        exporter.run(
            host=args.host,
            port=args.port or None,
            interval=args.interval,
            textfile=args.textfile,
            health=not args.no_health,
            keep_stopped=args.keep_stopped,
            load=args.load,
            stall_after=args.stall_after,
            stop=stop,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            token=token,
        )
    except ExporterError as err:  # the address is taken, the textfile cannot be written
        _fail("exporter", err)
        return 1
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import enginespec.fleet.feeds as feeds
    from enginespec.errors import FileWriteError, InvalidInputError
    from enginespec.health.checks import request_timeout

    try:
        writer = feeds.FeedWriter(
            args.format,
            args.out,
            advertise=args.advertise,
            log=lambda line: print(literal(f"enginespec export: {line}"), file=sys.stderr, flush=True),
            allow_owners=args.allow_owner,
        )
        if not args.watch:
            listed = feeds.export_once(writer, timeout=request_timeout(args.timeout), deadline=args.timeout)
            if args.out != "-":
                print(f"enginespec export: {listed} engine(s) written to {args.out}", file=sys.stderr)
            return 0
        print(
            f"enginespec export: keeping {args.out} up to date ({args.format}); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        import signal

        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM ends it as Ctrl-C does
        try:
            feeds.export_watch(
                writer, interval=args.interval, health_interval=args.health_interval, timeout=args.timeout
            )
        except KeyboardInterrupt:
            return 0
    except (InvalidInputError, FileWriteError) as err:  # --out cannot be written, a bad --advertise
        _fail("export", err)
        return 1
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError
    from enginespec.fleet.agent import serve

    try:
        serve(
            args.listen,
            token_file=args.token_file,
            certfile=args.certfile,
            keyfile=args.keyfile,
            interval=args.interval,
            allow_control=args.allow_control,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except InvalidInputError as err:
        _fail("serve", err)
        return 1
    return 0


# ------------------------------------------------------------------------------------ parser


#: Stands for the list of engine ids in a help text, filled in only when help is printed: the
#: list needs every engine record (and plugin) loaded, which most commands never need.
_ENGINE_LIST = "\x00engines\x00"


class _Formatter(argparse.HelpFormatter):
    """Prose paragraphs wrapped to the terminal, examples as written, and every option's default
    shown (when it has one)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        text = text.replace(_ENGINE_LIST, ", ".join(_engine_ids()))
        paragraphs = []
        for paragraph in text.split("\n\n"):
            if paragraph.startswith("examples:"):
                paragraphs.append(textwrap.indent(paragraph, indent))
            else:
                paragraphs.append(
                    textwrap.fill(
                        " ".join(paragraph.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,  # engine ids (llamacpp-python) stay whole
                    )
                )
        return "\n\n".join(paragraphs)

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and action.option_strings
            and default not in (None, False, [], argparse.SUPPRESS)
            and not isinstance(action, argparse._VersionAction)
        ):
            shown_default = cliargs.shown(default) if action.type in (duration, grace) else "%(default)s"
            text += f" (default: {shown_default})"
        return text


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    ids = _ENGINE_LIST
    parser = argparse.ArgumentParser(
        prog="enginespec",
        description=f"Know, find and probe local LLM inference engines.\n\nengines: {ids}",
        epilog=_examples(
            "enginespec ps                      # the engine servers on this host",
            "enginespec watch                   # the same, live",
            "enginespec describe 1234           # everything about one (pid or engine id)",
            "enginespec health --wait 1234      # wait until it serves",
            "enginespec command recipe.toml     # the serve command a recipe builds",
            "enginespec help ps                 # help on a command",
        ),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"enginespec {__version__} ({_backend()})")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subs: dict[str, argparse.ArgumentParser] = {}

    def command(name: str, summary: str, description: str, *examples: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}",
            epilog=_examples(*examples) if examples else None,
            formatter_class=_Formatter,
        )
        subs[name] = sub
        return sub

    ps = command(
        "ps",
        "list the engine servers running on this host",
        f"Every engine server process ({ids}), workers folded into their server, secrets "
        "redacted, sorted by engine, port and pid. TERMS (engines, engine ids or pids) keep the "
        "rows any of them names. AGE is the process's age; HEALTH is checked unless --no-health "
        "and NOTE says why it is not ready. MODEL is the name people use (a Hugging Face cache "
        "path is its repo id, a GGUF file its file name); -o wide shows every value whole.",
        "enginespec ps",
        "enginespec ps vllm                          # only vLLM servers",
        "enginespec ps --filter engine=vllm,health=ready",
        "enginespec ps -q                            # pids only",
        "enginespec ps -o name                       # engine ids only",
        "enginespec ps -o json | jq '.[].base_url'",
    )
    _add_filters(ps)
    ps.add_argument("-o", "--format", choices=FORMATS, help="output format (default: table)")
    ps.add_argument("-q", "--quiet", action="store_true", help="print the pids only")
    ps.add_argument("--no-headers", action="store_true", help="no header line")
    ps.add_argument("--json", action="store_true", help="same as -o json: a JSON list of EngineProcess")
    ps.add_argument("--wide", action="store_true", help="same as -o wide: every column, every cell whole")
    ps.add_argument("--no-health", action="store_true", help="skip the health checks")
    _add_remote(ps)
    ps.add_argument("--timeout", type=duration, default=2.0, help="deadline of all health checks")
    ps.add_argument(
        "--load", action="store_true", help="also read each engine's load (RUN, WAIT, KV%%, TOK/S columns)"
    )
    ps.add_argument(
        "--load-interval", type=duration, default=1.0, help="time between the two load readings (1s)"
    )
    ps.set_defaults(handler=_cmd_ps)

    watch = command(
        "watch",
        "a live view of the engine servers on this host",
        "Shows the engines as they start, become ready, change and stop, in a table updated in "
        "place (rows that do not fit the terminal are counted); with --json, one JSON object per "
        "event (JSON Lines); piped, one line per event. Uses the kernel's process events when it "
        "may (root), else polls every --interval. Ctrl-C stops it (exit 0).",
        "enginespec watch",
        "enginespec watch vllm --filter port=8000",
        "enginespec watch --json | jq -c 'select(.type == \"stopped\")'",
    )
    _add_filters(watch)
    watch.add_argument("--json", action="store_true", help="stream events as JSON Lines")
    watch.add_argument(
        "--interval", type=duration, default=1.0, help="re-check period, and polling period (1s, 500ms)"
    )
    watch.add_argument("--health", action=argparse.BooleanOptionalAction, default=True, help="check health")
    watch.add_argument("--health-interval", type=duration, default=2.0, help="health check period")
    watch.add_argument("--poll", action="store_true", help="poll even where process events are available")
    watch.add_argument(
        "--load",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read each engine's load with its health: tells busy and stalled engines",
    )
    watch.add_argument(
        "--stall-after",
        type=duration,
        default=None,
        help="seconds with requests pending and no token before 'stalled' (default: "
        "$ENGINESPEC_STALL_AFTER, else the engine's own, 60s)",
    )
    _add_remote(watch)
    watch.add_argument(
        "--timeout", type=duration, default=2.0, help="with --remote: each agent's connect timeout"
    )
    watch.set_defaults(handler=_cmd_watch)

    describe = command(
        "describe",
        "everything known about one engine server",
        "TARGET is a pid (the server's or a worker's), an engine id as `ps -o name`, the "
        "exporter's engine_id label and alerts show it (vllm-8002-1b690e57), or where it listens "
        "(:8000, 127.0.0.1:8000, http://127.0.0.1:8000): model, names, "
        "address and where each came from, age, workers, container, command line (secrets "
        "redacted), problems, health and its reason.",
        "enginespec describe 1234",
        "enginespec describe vllm-8002-1b690e57",
        "enginespec describe :8000",
    )
    describe.add_argument("target", metavar="TARGET", help="pid, engine id, :PORT, HOST:PORT or URL")
    describe.add_argument("--json", action="store_true", help="print the EngineProcess (and health) as JSON")
    describe.add_argument("--no-health", action="store_true", help="skip the health check")
    describe.add_argument(
        "--timeout",
        type=duration,
        default=2.0,
        help="deadline of the health check (each request may take 3/4 of it)",
    )
    describe.set_defaults(handler=_cmd_describe)

    health = command(
        "health",
        "check an engine server's health; exit 0 only when ready",
        "TARGET is a pid (a server or one of its workers), an engine id (vllm-8002-1b690e57), where "
        "a scanned engine listens (:8000, HOST:PORT or its URL), or an engine "
        f"({ids}) followed by the URL of a server no scan sees. Prints the state; exits 0 when ready, "
        "1 otherwise, 2 on bad input. --wait checks again (with backoff) until ready, the "
        "process exits, or --wait-timeout.",
        "enginespec health 1234",
        "enginespec health --wait --wait-timeout 10m vllm-8002-1b690e57",
        "enginespec health http://127.0.0.1:8080",
        "enginespec health llamacpp http://10.0.0.5:8080",
    )
    health.add_argument("target", metavar="TARGET", help="pid, engine id, :PORT, HOST:PORT, URL, or engine")
    health.add_argument("url", nargs="?", metavar="URL", help="base URL when TARGET is an engine")
    health.add_argument("--wait", action="store_true", help="wait until ready")
    health.add_argument(
        "--wait-timeout", type=duration, default=600.0, help="with --wait: give up after this (10m, 90s)"
    )
    health.add_argument(
        "--timeout",
        type=duration,
        default=2.0,
        help="deadline of the check (each request may take 3/4 of it; with --wait, each request's)",
    )
    health.add_argument("--verify-identity", action="store_true", help="check /v1/models serves the model")
    health.add_argument("--deep", action="store_true", help="also ask for a one-token completion")
    health.add_argument("--json", action="store_true", help="print the Health as JSON")
    health.set_defaults(handler=_cmd_health)

    gpus = command(
        "gpus",
        "which engine holds which GPU, and how much of it",
        "Lists the host's GPUs (from the drivers' own files; bytes for NVIDIA from NVML when its "
        "library loads), the engines holding each, the other processes on it and what is "
        "unattributed. Lists every process's open files to find those others (more than ps reads).",
        "enginespec gpus",
        "enginespec gpus --json",
    )
    gpus.add_argument("--json", action="store_true", help="print a JSON list of GpuDevice objects")
    gpus.set_defaults(handler=_cmd_gpus)

    load = command(
        "load",
        "what an engine server is doing now: requests, KV cache, tokens per second",
        "Reads the engine's own metrics twice, --interval apart, and prints the normalized load "
        "(see docs/load.md); exits 1 when the engine reports none. TARGET is a pid (the server's "
        "or a worker's), an engine id, :PORT, HOST:PORT or a URL.",
        "enginespec load 1234",
        "enginespec load --json vllm-8002-1b690e57",
    )
    load.add_argument("target", metavar="TARGET", help="pid, engine id, :PORT, HOST:PORT or URL")
    load.add_argument("--interval", type=duration, default=1.0, help="time between the two readings")
    load.add_argument("--timeout", type=duration, default=2.0, help="request timeout")
    load.add_argument(
        "--stall-after",
        type=duration,
        default=None,
        help="seconds with requests pending and no token before 'stalled' (default: "
        "$ENGINESPEC_STALL_AFTER, else the engine's own, 60s)",
    )
    load.add_argument("--json", action="store_true", help="print the EngineLoad as JSON")
    load.set_defaults(handler=_cmd_load)

    command_ = command(
        "command",
        "print the serve command (and environment) a recipe file builds",
        "Prints the environment delta as `export` lines and the shell-quoted argv, ready to run "
        "(`$PATH` stays a reference); secrets are redacted unless --show-secrets. A bad recipe "
        "exits 2 with a one-line error naming the field.",
        "enginespec command recipe.toml",
        "enginespec command --show-secrets recipe.toml > run.sh",
    )
    command_.add_argument("recipe", metavar="RECIPE", help="recipe file (.toml, .yaml, .yml or .json)")
    command_.add_argument("--json", action="store_true", help="print a JSON document instead")
    command_.add_argument("--strict", action="store_true", help="fail on fields the engine has no flag for")
    command_.add_argument("--show-secrets", action="store_true", help="print API keys and tokens as they are")
    command_.set_defaults(handler=_cmd_command)

    install = command(
        "install",
        "install an engine into its managed runtime (idempotent)",
        f"ENGINE is one of {ids}. Python engines go into a managed venv (or --python); binary "
        "engines are built from --source. Shows the phase and the installer's last line. Exits 0 "
        "when installed, 1 when the installer failed, 2 when refused before anything ran.",
        "enginespec install vllm",
        "enginespec install mlx --version '>=0.28'",
        "enginespec install llamacpp --source https://github.com/ggml-org/llama.cpp --ref b6000",
    )
    install.add_argument("engine", metavar="ENGINE", help="the engine to install")
    install.add_argument("--version", help="PEP 440 version or specifier (e.g. 0.10.2, '>=0.10,<0.12')")
    install.add_argument("--python", help="install into this interpreter instead of the managed venv")
    install.add_argument("--source", help="binary engines: a source tree, archive or git URL to build from")
    install.add_argument("--ref", help="with a git --source: the branch or tag to build")
    install.add_argument("--index-url", help="the package index to install from (e.g. a CPU wheel index)")
    install.add_argument(
        "--find-links", action="append", default=[], help="a directory or page of wheels (repeatable)"
    )
    install.add_argument(
        "--accelerator",
        choices=("auto", "cuda", "rocm", "cpu"),
        default="auto",
        help="the build to install (auto: this host's GPU, or the CPU build without one)",
    )
    install.set_defaults(handler=_cmd_install)

    info = command(
        "info",
        "what is installed, where, and which version",
        f"One line per engine ({ids}), or for ENGINE only.",
        "enginespec info",
        "enginespec info vllm --json",
    )
    info.add_argument("engine", nargs="?", metavar="ENGINE", help="one engine only")
    info.add_argument("--json", action="store_true", help="print a JSON list of RuntimeInfo")
    info.set_defaults(handler=_cmd_info)

    help_ = command(
        "help",
        "help on a command, or an installed engine's own full --help",
        f"TOPIC is a command (ps, watch, ...) or an engine ({ids}).",
        "enginespec help ps",
        "enginespec help vllm",
    )
    help_.add_argument("topic", nargs="?", metavar="TOPIC", help="a command or an engine")
    help_.set_defaults(handler=_cmd_help)
    for sub in (install, info, help_):
        sub.add_argument(
            "--data-dir", help="data directory (default: $ENGINESPEC_DATA_DIR or the user data dir)"
        )

    exporter_ = command(
        "exporter",
        "serve Prometheus metrics about the engines on this host",
        "Scans (and health-checks) every --interval and serves the results at /metrics; with "
        "--textfile, also writes them for node_exporter's textfile collector (atomically). An "
        "engine that stops stays as enginespec_engine_up 0 for --keep-stopped, so "
        "`enginespec_engine_up == 0` alerts fire; enginespec_last_refresh_timestamp_seconds says "
        "when the exporter last refreshed.",
        "enginespec exporter",
        "enginespec exporter --host 0.0.0.0 --port 9464 --interval 5s",
        "enginespec exporter --port 0 --textfile /var/lib/node_exporter/enginespec.prom",
    )
    exporter_.add_argument("--host", default="127.0.0.1", help="address to listen on")
    exporter_.add_argument("--port", type=port, default=9464, help="port to listen on; 0: no HTTP server")
    exporter_.add_argument("--interval", type=duration, default=2.0, help="refresh period (2s, 500ms, 1m)")
    exporter_.add_argument("--textfile", help="also write the series to this file after every refresh")
    exporter_.add_argument("--no-health", action="store_true", help="skip the health checks")
    exporter_.add_argument(
        "--keep-stopped", type=duration, default=300.0, help="how long a stopped engine stays, as up 0 (5m)"
    )
    exporter_.add_argument(
        "--load",
        action="store_true",
        help="also read each engine's load (one more request per engine and refresh): the "
        "enginespec_engine_requests_* series, and busy/stalled states",
    )
    exporter_.add_argument(
        "--stall-after", type=duration, default=None, help="with --load: seconds before 'stalled'"
    )
    exporter_.add_argument(
        "--token-file",
        help="a scraper that sends this token (Authorization: Bearer) sees every engine's facts; "
        "without it, what it could read on the host itself",
    )
    exporter_.set_defaults(handler=_cmd_exporter)

    export = command(
        "export",
        "write the serving engines as a discovery file other systems read",
        "Scans, checks every engine's health with its identity verified (the answering server is "
        "its own and serves the model its argv names), and writes the ready servers as a "
        "Prometheus file_sd target list (each engine's own metrics endpoint, where its argv "
        "turns one on), an llm-d endpoints file or vLLM production-stack's static backends. The "
        "file is replaced atomically, so a reader never sees part of one. With --watch it is "
        "kept up to date from the event watch: an engine is listed when it turns ready and "
        "removed when it stops. A wildcard listen address is given as --advertise. Only the engines "
        "of root and of the user running it are listed (--allow-owner adds others): any user can "
        "start a process that claims a model's name; two owners claiming one name are said.",
        "enginespec export --format file-sd --out /etc/prometheus/engines.json",
        "enginespec export --format file-sd --out engines.json --watch",
        "enginespec export --format production-stack --out - | jq",
    )
    export.add_argument("--format", choices=_feed_formats(), required=True, help="the feed to write")
    export.add_argument("--out", required=True, help="the file to write (replaced atomically); -: stdout")
    export.add_argument("--watch", action="store_true", help="keep the file up to date until stopped")
    export.add_argument(
        "--advertise", help="the address given for engines listening on 0.0.0.0 or :: (default: hostname)"
    )
    export.add_argument(
        "--allow-owner",
        action="append",
        default=[],
        metavar="USER[,USER...]",
        help="also list the engines of these users (a name or uid; repeatable); by default only "
        "root's and yours are listed, and each engine left out is said on stderr",
    )
    export.add_argument("--timeout", type=duration, default=2.0, help="health check timeout")
    export.add_argument("--interval", type=duration, default=1.0, help="with --watch: engine re-check period")
    export.add_argument(
        "--health-interval", type=duration, default=1.0, help="with --watch: time between health checks"
    )
    export.set_defaults(handler=_cmd_export)

    serve = command(
        "serve",
        "serve what enginespec knows of this host to other hosts, read-only",
        "GET /v1/engines (the ps --json objects, with health), /v1/gpus, /metrics (the "
        "exporter's series) and /v1/events (the watch's events, as server-sent events). Listens "
        "on loopback or a unix socket by default; any other address requires --token-file "
        "(clients send Authorization: Bearer TOKEN). Nothing it serves changes anything, unless "
        "--allow-control (with a token) adds stop and restart.",
        "enginespec serve",
        "enginespec serve --listen unix:/run/enginespec.sock",
        "enginespec serve --listen 0.0.0.0:9465 --token-file /etc/enginespec/token",
        "enginespec ps --remote http://gpu1:9465,http://gpu2:9465 --token-file token",
    )
    serve.add_argument("--listen", default="127.0.0.1:9465", help="ADDRESS:PORT or unix:PATH to listen on")
    serve.add_argument("--token-file", help="a file holding the token clients must send")
    serve.add_argument("--certfile", help="TLS certificate (PEM), with --keyfile")
    serve.add_argument("--keyfile", help="TLS private key (PEM), with --certfile")
    serve.add_argument("--interval", type=duration, default=2.0, help="refresh period of engines and metrics")
    serve.add_argument(
        "--allow-control",
        action="store_true",
        help="also POST /v1/engines/TARGET/stop and /restart (needs --token-file, even on loopback)",
    )
    serve.set_defaults(handler=_cmd_serve)

    from enginespec.cli.lifecycle import add_lifecycle_commands
    from enginespec.cli.models import add_parser as add_model_commands

    add_lifecycle_commands(command)
    add_model_commands(command)

    parse = command(
        "parse",
        "recognise an engine server from its argv and print it as JSON",
        "Prints the recognised invocation as JSON; exits 1 when argv is not an engine server.",
        "enginespec parse -- vllm serve Qwen/Qwen3-8B --port 8001",
    )
    parse.add_argument("--json", action="store_true", help="JSON output (the only output)")
    parse.add_argument("argv", nargs=argparse.REMAINDER, help="the command line, after --")
    parse.set_defaults(handler=_cmd_parse)
    subs.update(commands.choices)  # their own usage for their own bad flags
    return parser, subs


def _feed_formats() -> tuple[str, ...]:
    # the feed module's list, without importing the scanner for every command's parser
    return ("file-sd", "llm-d", "production-stack")


def _backend() -> str:
    from enginespec._host.backend import BACKEND

    return BACKEND


def _run(argv: list[str]) -> int:
    if argv == ["--version"]:  # answered before the parser (and argparse) is built
        _out([f"enginespec {__version__} ({_backend()})"])
        return 0
    parser, subs = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # the usage of the command that got it, not the top-level one
        subs[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "parse":
        if args.argv[:1] == ["--"]:
            args.argv = args.argv[1:]
        if not args.argv:
            print("enginespec parse: give the command line after --", file=sys.stderr)
            return 2
    args.parser, args.parser_commands = parser, subs
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # The reader went away (`enginespec ps | head`): stop quietly, as Unix tools do, and keep
        # Python from complaining about the unflushed stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C: the shell's convention (128 + SIGINT), no traceback.
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
