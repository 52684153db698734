"""The table ``ps`` and ``watch`` show (and the load figures ``load`` prints): each column declared
once, its header, how its cell is made and its width rule together, so the headers and every row's
cells are read from the same list and cannot get out of step; the rows; the table fitted to a
width. Imported when one of those commands runs (it loads rich's cell widths)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from enginespec.cli.common import MODEL_UNKNOWN
from enginespec.cli.table import EMPTY, Column
from enginespec.display import age, compact_url, literal

if TYPE_CHECKING:
    from enginespec.gpus.reader import GpuUse
    from enginespec.health.load import EngineLoad
    from enginespec.health.servedmodels import ServedModels
    from enginespec.healthrecord import Health
    from enginespec.process.containers import PublishedPort
    from enginespec.process.record import EngineProcess


class Shown:
    """A row of the table: the process, its last health check, the state shown, and its load
    (``ps --load``)."""

    __slots__ = ("agent", "health", "load", "models", "process", "state")

    def __init__(
        self,
        process: EngineProcess,
        health: Health | None = None,
        state: str | None = None,
        agent: str | None = None,
    ) -> None:
        self.process, self.health, self.state = process, health, state
        self.load: EngineLoad | None = None
        #: what it serves now (``ps --models``, a watch's readings)
        self.models: ServedModels | None = None
        #: the agent that reported it (``--remote``); ``None``: this host
        self.agent = agent


class _Line(NamedTuple):
    """What a row's cells under the ps columns are made from: its process and health, the state
    shown, whether every value is shown whole (``-o wide``), and the time its age is counted to."""

    process: EngineProcess
    health: Health | None
    state: str | None
    wide: bool
    now: float
    models: ServedModels | None = None


def size(size: int | None) -> str:
    """``38.2G``, ``512M`` (binary units, as nvidia-smi counts), ``?`` when unknown."""
    if size is None:
        return "?"
    return f"{size / 2**30:.1f}G" if size >= 2**30 else f"{size / 2**20:.0f}M"


def gpu_name(index: int | None, mig_index: int | None, device: str) -> str:
    if index is None:
        return device
    return f"{index}:{mig_index}" if mig_index is not None else str(index)


def published(port: PublishedPort) -> str:
    """``0.0.0.0:8001->8000``, ``[::]:8001->8000``: as ``docker ps`` shows a published port."""
    address = f"[{port.host_address}]" if ":" in port.host_address else port.host_address
    return f"{address}:{port.host_port}->{port.container_port}"


def _gpu_cell(uses: Sequence[GpuUse]) -> str:
    """``0,1 38.2G``: the GPUs a tree holds and the bytes summed (``?`` if a GPU's are unknown)."""
    if not uses:
        return EMPTY
    names = ",".join(gpu_name(u.index, u.mig_index, u.device) for u in uses)
    known = [u.memory_bytes for u in uses]
    return f"{names} {size(None if None in known else sum(b or 0 for b in known))}"


def _facts_cell(line: _Line) -> str:
    """``llama Q4_K_M 4096``: the model's architecture and quantization, and the context the
    engine was started with (else the trained one)."""
    facts = line.process.model_facts
    if facts is None:
        return EMPTY
    context = facts.estimate.context if facts.estimate and facts.estimate.context else facts.context_length
    parts = [facts.architecture, facts.quantization, str(context) if context else None]
    return " ".join(part for part in parts if part) or EMPTY


def served_summary(served: ServedModels) -> str:
    """What a server whose models come and go serves, in a cell: ``2 loaded: qwen, phi
    (sleeping)``, or ``none loaded (3 known)``."""
    on = [m for m in served.models if m.state in ("loaded", "loading", "sleeping")]
    if not on:
        return f"none loaded ({len(served.models)} known)" if served.models else "none loaded"
    names = ", ".join(m.name + ("" if m.state == "loaded" else f" ({m.state})") for m in on)
    return f"{len(on)} loaded: {names}"


def _model_cell(line: _Line) -> str:
    p = line.process
    served = line.models
    if served is not None and served.available and served.source != "argv":
        return served_summary(served)
    if p.model is None:
        return MODEL_UNKNOWN
    # the name every label and feed gives it; --wide shows the exact argument
    return p.model if line.wide else p.model_name or p.model


def _served_cell(line: _Line) -> str:
    p = line.process
    names = p.served_model_names
    # The model's own name, served as itself, is said once (in MODEL) unless MODEL shows a
    # shorter name than what clients must send.
    if not line.wide and names == (p.model,) and _model_cell(line) == p.model:
        return EMPTY
    return ", ".join(names) or EMPTY


def _url_cell(line: _Line) -> str:
    url = line.process.base_url
    return (url if line.wide or url is None else compact_url(url)) or EMPTY


def _note(line: _Line) -> str:
    """Why: the health check's reason, an orphan's gone server, what argv got wrong."""
    p, health = line.process, line.health
    notes = []
    if health is not None and health.state != "ready" and health.reason:
        notes.append(health.reason)
    if p.role == "orphan":
        # first, so that a narrow NOTE still marks it (ROLE goes before NOTE); the health reason
        # already says the server is gone, its pid is news
        said = any("orphan" in note for note in notes)
        gone = f"its server was pid {p.server_pid}" if p.server_pid else "" if said else "its server is gone"
        if said and gone:
            notes.append(gone)
        elif not said:
            notes.insert(0, f"orphan: {gone}")
    notes.extend(p.problems)
    return "; ".join(notes) or EMPTY


def _engine_cell(process: EngineProcess) -> str:
    return f"{process.engine} ({process.fork})" if process.fork else process.engine


def _joined(values: Sequence[object]) -> str:
    return ", ".join(map(str, values)) or EMPTY


#: The ps columns, in the order shown. ``drop``: left out, lowest first, when the table does not
#: fit; NOTE (why a row is not ready), URL (its host first) and AGE go last.
COLUMNS: tuple[Column[_Line], ...] = (
    Column("PID", lambda line: str(line.process.pid)),
    # a fork as the engine's, named after it: `llamacpp (ik_llama.cpp)`
    Column("ENGINE", lambda line: _engine_cell(line.process)),
    # Empty for a server, so left out when every row is one.
    Column("ROLE", lambda line: line.process.role if line.process.role != "server" else EMPTY, drop=5),
    # whole while there are cheaper columns to leave out (NOTE and those before it)
    Column("MODEL", _model_cell, shorten="middle", minimum=12, comfortable=20, whole_over=8),
    Column("SERVED AS", _served_cell, shorten="end", minimum=10, comfortable=14, drop=9),
    # architecture, quantization, context as started (from the model's files, see docs/models.md)
    Column("MODEL FACTS", _facts_cell, shorten="end", minimum=10, drop=2),
    # at its port alone (`:8000`) before any reason is cut
    Column("URL", _url_cell, shorten="host", minimum=6, drop=11, last_resort=True),
    Column(
        "CONTAINER",
        lambda line: line.process.container.label if line.process.container else EMPTY,
        shorten="end",
        minimum=12,
        drop=7,
    ),
    Column(
        "PUBLISHED",
        lambda line: _joined([published(q) for q in line.process.published]),
        shorten="end",
        minimum=12,
        drop=6,
    ),
    Column(
        "WORKERS",
        lambda line: str(len(line.process.worker_pids)) if line.process.worker_pids else EMPTY,
        drop=4,
    ),
    Column("SUPERVISOR", lambda line: line.process.supervisor or EMPTY, drop=3),
    Column("LISTENING", lambda line: _joined(line.process.listen_ports), shorten="end", minimum=9, drop=1),
    # other processes on the server's own address and port (SO_REUSEPORT)
    Column(
        "PORT SHARED WITH",
        lambda line: _joined(line.process.port_conflicts),
        shorten="end",
        minimum=9,
        drop=2,
    ),
    # the GPUs the tree holds and the bytes (`0,1 38.2G`): left out when no engine holds one
    Column("GPU", lambda line: _gpu_cell(line.process.gpus), shorten="end", minimum=5, drop=8),
    Column("AGE", lambda line: age(line.now - line.process.start_time)),
)
#: The columns of a health-checked table, after :data:`COLUMNS`. HEALTH of a row not checked (an
#: agent that has not checked it yet) is ``-``.
HEALTH_COLUMNS: tuple[Column[_Line], ...] = (
    Column("HEALTH", lambda line: line.state or EMPTY),
    # why: the health check's reason, or what argv got wrong (an orphan's mark first): a common
    # reason ("process is up, not accepting connections yet") whole before ROLE and WORKERS are
    # shown; kept, at 16 cells at least, longer than any optional column but URL (whose host goes
    # first): at 80 columns a row that is not ready still says why
    Column("NOTE", _note, shorten="end", minimum=16, comfortable=24, drop=10, whole_over=4, last_resort=True),
)
#: ``--remote``: the agent that reported the row, first.
HOST: Column[Shown] = Column("HOST", lambda row: row.agent or "-", shorten="middle", minimum=10)


def _figure(
    value: Callable[[EngineLoad], float | None], text: Callable[[Any], str]
) -> Callable[[EngineLoad | None], str]:
    """A load cell: ``-`` for a figure the engine does not report (or no reading at all)."""

    def cell(load: EngineLoad | None) -> str:
        figure = None if load is None or not load.available else value(load)
        return "-" if figure is None else text(figure)

    return cell


#: ``ps --load``: requests running and waiting, KV-cache use, generated tokens per second.
LOAD_COLUMNS: tuple[Column[EngineLoad | None], ...] = (
    Column("RUN", _figure(lambda load: load.requests_running, str)),
    Column("WAIT", _figure(lambda load: load.requests_waiting, str)),
    Column("KV%", _figure(lambda load: load.kv_cache_usage, lambda usage: f"{usage * 100:.0f}")),
    Column("TOK/S", _figure(lambda load: load.tokens_per_second, lambda rate: f"{rate:.1f}")),
)


def sort_key(row: Shown) -> tuple[str, str, int, int]:
    """Rows by host, engine, then port, then pid: stable while health changes, so nothing jumps."""
    p = row.process
    return (row.agent or "", p.engine, p.effective_port or 0, p.pid)


def _row_cells(
    row: Shown, columns: Sequence[Column[_Line]], health: bool, wide: bool, now: float
) -> list[str]:
    """A row's cells under ``columns``, or when one fails, its pid and engine with why in NOTE
    (the error boundary: the other rows are unaffected)."""
    from enginespec.untrusted.boundary import contained

    line = _Line(row.process, row.health, row.state if health else None, wide, now, row.models)

    def unshown(reason: str) -> list[str]:
        p = line.process
        kept = {"PID": str(p.pid), "ENGINE": p.engine, "HEALTH": line.state or EMPTY, "NOTE": reason}
        return [kept.get(column.header, EMPTY) for column in columns]

    return contained("table row", lambda: [column.cell(line) for column in columns], unshown)


def table_lines(
    rows: Sequence[Shown],
    health: bool,
    width: int | None,
    *,
    wide: bool = False,
    load: bool = False,
    load_droppable: bool = False,
) -> list[str]:
    """The ps table as literal text lines fitted to ``width`` (no cell split; a line still too
    wide is cut with an ellipsis rather than wrapped); with ``health`` the HEALTH and NOTE
    columns, with ``load`` the load columns (``load_droppable``: the first left out when narrow,
    as ``watch`` shows them unasked)."""
    from rich.cells import cell_len, set_cell_size

    from enginespec.cli.table import ELLIPSIS, fit, lines

    columns = COLUMNS + HEALTH_COLUMNS if health else COLUMNS
    loads = LOAD_COLUMNS if load else ()
    if load_droppable:
        loads = tuple(replace(column, drop=1) for column in loads)
    hosts = (HOST,) if any(r.agent is not None for r in rows) else ()
    now = time.time()
    cells = [
        [
            literal(cell)
            for cell in [column.cell(r) for column in hosts]
            + _row_cells(r, columns, health, wide, now)
            + [column.cell(r.load) for column in loads]
        ]
        for r in rows
    ]
    headers, shown = fit((*hosts, *columns, *loads), cells, width)
    text = lines(headers, shown)
    if width is None:
        return text
    return [line if cell_len(line) <= width else set_cell_size(line, width - 1) + ELLIPSIS for line in text]
