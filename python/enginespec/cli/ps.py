"""``enginespec ps``: the engine servers running on this host (or those agents report), as a table
fitted to the terminal, wide, JSON, their ids or their pids."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from enginespec.cli.args import duration
from enginespec.cli.common import ENGINE_LIST, fail, out
from enginespec.cli.filters import Filters, add_filters, add_remote, parse_filters
from enginespec.display import literal

if TYPE_CHECKING:
    from enginespec.cli.pstable import Shown
    from enginespec.health.load import EngineLoad
    from enginespec.process.record import EngineProcess

FORMATS = ("table", "wide", "json", "name")


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``ps`` through the ``enginespec`` parser's maker of subcommands."""
    ps = command(
        "ps",
        "list the engine servers running on this host",
        f"Every engine server process ({ENGINE_LIST}), workers folded into their server, secrets "
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
    add_filters(ps)
    ps.add_argument("-o", "--format", choices=FORMATS, help="output format (default: table)")
    ps.add_argument("-q", "--quiet", action="store_true", help="print the pids only")
    ps.add_argument("--no-headers", action="store_true", help="no header line")
    ps.add_argument("--json", action="store_true", help="same as -o json: a JSON list of EngineProcess")
    ps.add_argument("--wide", action="store_true", help="same as -o wide: every column, every cell whole")
    ps.add_argument("--no-health", action="store_true", help="skip the health checks")
    add_remote(ps)
    ps.add_argument("--timeout", type=duration, default=2.0, help="deadline of all health checks")
    ps.add_argument(
        "--load", action="store_true", help="also read each engine's load (RUN, WAIT, KV%%, TOK/S columns)"
    )
    ps.add_argument(
        "--load-interval", type=duration, default=1.0, help="time between the two load readings (1s)"
    )
    ps.add_argument(
        "--models",
        action="store_true",
        help="also ask each engine what it serves now: MODEL shows the models a server whose models "
        "come and go has loaded (JSON: models)",
    )
    ps.set_defaults(handler=_cmd_ps)


def _two_readings(processes: Sequence[EngineProcess], interval: float, timeout: float) -> list[EngineLoad]:
    """Each engine's load from two readings ``interval`` apart (a rate needs two)."""
    from enginespec.health.load import check_load_all

    first = check_load_all(processes, timeout=timeout)
    time.sleep(interval)
    return check_load_all(processes, previous=first, timeout=timeout)


def _cmd_ps(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError

    fmt = args.format or ("json" if args.json else "wide" if args.wide else "table")
    try:
        filters = parse_filters(args)
    except InvalidInputError as err:
        fail("ps", err)
        return 2
    listing = args.quiet or fmt == "name"
    if "health" in filters.keys and args.no_health:
        fail("ps", "--filter health=... needs the health checks: drop --no-health")
        return 2
    checked = not args.no_health and (not listing or "health" in filters.keys)
    failed = False
    if args.remote:
        try:
            rows, failed = _remote_rows(args)
        except InvalidInputError as err:  # a --remote that is no agent's address, a bad --token-file
            fail("ps", err)
            return 2
        processes = [row.process for row in rows]
        checked = not args.no_health and any(row.health is not None for row in rows)
    else:
        processes, rows = _local_rows(args, filters, listing, checked)
    from enginespec.cli.pstable import sort_key

    rows = sorted((row for row in rows if filters.keeps(row)), key=sort_key)
    _show(args, fmt, rows, processes, checked)
    return 1 if failed else 0


def _local_rows(
    args: argparse.Namespace, filters: Filters, listing: bool, checked: bool
) -> tuple[list[EngineProcess], list[Shown]]:
    """The engines a scan of this host finds, and the rows of those the filters keep, health
    checked (``checked``) and load read (``--load``)."""
    from enginespec.cli.pstable import Shown
    from enginespec.scanning.scanner import Scanner

    processes = Scanner(listen_ports=not listing).scan()
    # only the engines asked for are checked: an unrelated hung one costs nothing
    rows = [row for row in (Shown(p) for p in processes) if filters.keeps(row, checked=False)]
    if checked:
        from enginespec.health.checks import check_all, request_timeout

        # --timeout is the deadline of all the checks together, not of each (1,024 hung servers
        # are not 16 rounds of it): those not done by then are `unknown`, saying so. Each request
        # times out before it, so a server that never answers is `unhealthy`, as in describe.
        healths = check_all(
            [row.process for row in rows], timeout=request_timeout(args.timeout), deadline=args.timeout
        )
        for row, health in zip(rows, healths, strict=True):
            row.health, row.state = health, health.state
    if args.models and not listing:
        from enginespec.health.servedmodels import served_models_all

        # what each serves now, only when asked: a request or two per engine whose models come and go
        for row, served in zip(
            rows,
            served_models_all([row.process for row in rows], timeout=args.timeout, scanned=processes),
            strict=True,
        ):
            row.models = served
    if args.load and not listing:
        # Load is read only when asked: it costs two more requests per engine.
        readings = _two_readings([row.process for row in rows], args.load_interval, args.timeout)
        for row, load in zip(rows, readings, strict=True):
            row.load = load
    return processes, rows


def _show(
    args: argparse.Namespace, fmt: str, rows: list[Shown], processes: list[EngineProcess], checked: bool
) -> None:
    """The rows as ``fmt`` (with ``-q``, their pids) on stdout; none: said on stderr."""
    if args.quiet:
        out([str(row.process.pid) for row in rows])
        return
    if fmt == "name":
        from enginespec.scanning.scanner import unique_instance_ids

        # the ids as the exporter's label gives them: two engines sharing one are told apart
        names = (
            {}
            if args.remote
            else {p.pid: n for p, n in zip(processes, unique_instance_ids(processes), strict=True)}
        )
        out([names.get(row.process.pid, row.process.instance_id) for row in rows])
        return
    if fmt == "json":
        from enginespec.scanning.scanner import engine_document
        from enginespec.untrusted.documents import dumps

        documents = []
        for row in rows:
            document = row_document(row, engine_document)
            if row.agent is not None:  # the engine's own "host" stays its listen address
                document["agent"] = row.agent
            documents.append(document)
        out([dumps(documents, indent=2)])
        return
    if not rows:
        # on stderr: `enginespec ps | wc -l` counts engines
        where = "on these hosts" if args.remote else "on this host"
        print(
            f"no engine servers found {where}" if not processes else "no engine server matches",
            file=sys.stderr,
        )
        return
    # Every cell is shown literally: argv can carry rich markup and terminal escapes. On a terminal
    # the table fits its width (no cell split); piped or wide, nothing is shortened.
    import shutil

    from enginespec.cli.pstable import table_lines

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() and fmt == "table" else None
    text = table_lines(rows, checked, width, wide=fmt == "wide", load=args.load and not args.remote)
    out(text[1:] if args.no_headers else text)


def row_document(row: Shown, make: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The JSON object of a row (``make``: :func:`enginespec.scanning.scanner.engine_document`), or when
    that fails, its pid, engine and why (the error boundary: the other rows are unaffected)."""
    from enginespec.untrusted.boundary import contained

    p = row.process
    return contained(
        "document",
        lambda: make(p, row.health, row.load, row.models),
        lambda reason: {"pid": p.pid, "engine": p.engine, "problems": [*p.problems, reason]},
    )


def _remote_rows(args: argparse.Namespace) -> tuple[list[Shown], bool]:
    """The rows the agents of ``--remote`` report, and whether any host failed (each failure is
    said on its own line, on stderr)."""
    from enginespec.cli.filters import agents
    from enginespec.cli.pstable import Shown
    from enginespec.fleet.remote import fetch_remote

    urls, token = agents(args)
    rows, failed = [], False
    for report in fetch_remote(urls, timeout=args.timeout, token=token):
        if report.error is not None:
            failed = True
            print(f"enginespec ps: {literal(report.agent)}: {literal(report.error)}", file=sys.stderr)
        for engine in report.engines:
            state = engine.health.state if engine.health is not None else None
            row = Shown(engine.process, engine.health, state, agent=engine.agent)
            row.load = engine.load
            row.models = engine.models
            rows.append(row)
    return rows, failed
