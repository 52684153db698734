"""``enginespec models``: what every engine serves now, one row per model (see
:mod:`enginespec.health.servedmodels`), as ``ps`` lists engines."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from enginespec.cli.args import duration
from enginespec.cli.common import fail
from enginespec.display import literal

if TYPE_CHECKING:
    from enginespec.cli.table import Column
    from enginespec.health.servedmodels import ServedModel, ServedModels
    from enginespec.process.record import EngineProcess

_Row = tuple["EngineProcess", "ServedModels", "ServedModel | None"]


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``models`` through the ``enginespec`` parser's maker of subcommands."""
    models = command(
        "models",
        "what each engine serves now: its models and their state",
        "One row per model of every engine server (or of each TARGET: a pid, an engine id, a run's "
        "name, :PORT, HOST:PORT or a URL), asked through the engine's own API where it has one "
        "(llama.cpp's router, Ollama, vLLM, SGLang); an engine that serves one model fixed at "
        "start shows it loaded, from its argv. STATE is loaded, loading, sleeping, unloaded or "
        "failed; RUNNER and PORT the per-model child where the engine runs one, GPU MEM what that "
        "child's tree holds (or the engine's own figure), EXPIRES when the engine unloads it "
        "unless it is used. An engine that does not say is a row with its reason. Exits 1 when "
        "no engine said.",
        "enginespec models",
        "enginespec models :11434 -o json",
        "enginespec models -q",
    )
    models.add_argument(
        "targets", nargs="*", metavar="TARGET", help="pid, engine id, run name, :PORT, HOST:PORT or URL"
    )
    models.add_argument(
        "-o", "--format", choices=("table", "wide", "json"), default="table", help="output format"
    )
    models.add_argument(
        "-q", "--quiet", action="store_true", help="print the models' names only, one per line"
    )
    models.add_argument("--timeout", type=duration, default=2.0, help="timeout of each request")
    models.set_defaults(handler=_cmd_models)


def _cmd_models(args: argparse.Namespace) -> int:
    from enginespec.cli.targets import resolve
    from enginespec.errors import InvalidInputError
    from enginespec.health.servedmodels import served_models_all
    from enginespec.scanning.scanner import Scanner
    from enginespec.untrusted.documents import dumps

    processes = Scanner().scan()
    chosen: list[EngineProcess] = []
    for target in args.targets:
        try:
            found = resolve(processes, target)
        except InvalidInputError as err:
            fail("models", err)
            return 2
        if all(found is not p for p in chosen):
            chosen.append(found)
    if not args.targets:
        chosen = [p for p in processes if p.role == "server"]
    readings = served_models_all(chosen, timeout=args.timeout) if chosen else []
    # the runners' records come from the same scan: the whole host's, matched to their servers
    if args.format == "json":
        print(dumps([r.model_dump(mode="json") for r in readings], indent=2))
    elif args.quiet:
        for reading in readings:
            for model in reading.models:
                print(literal(model.name))
    else:
        rows: list[_Row] = [
            (p, r, m) for p, r in zip(chosen, readings, strict=True) for m in (r.models or (None,))
        ]
        _table(rows, args.format == "wide")
    return 0 if any(r.available for r in readings) or not chosen else 1


def _table(rows: Sequence[_Row], wide: bool) -> None:
    from enginespec.cli.pstable import size
    from enginespec.cli.table import Column, fit, lines

    now = time.time()
    columns: tuple[Column[_Row], ...] = (
        Column("ENGINE", lambda r: r[0].engine),
        Column("PID", lambda r: str(r[0].pid)),
        Column("MODEL", lambda r: r[2].name if r[2] else "-", shorten="middle", minimum=16, comfortable=24),
        Column("STATE", lambda r: r[2].state if r[2] else "unknown"),
        Column("RUNNER", lambda r: str(r[2].runner_pid) if r[2] and r[2].runner_pid else "-", drop=3),
        Column("PORT", lambda r: str(r[2].port) if r[2] and r[2].port else "-", drop=2),
        Column(
            "GPU MEM",
            lambda r: size(r[2].memory_bytes) if r[2] and r[2].memory_bytes is not None else "-",
            drop=4,
        ),
        Column("EXPIRES", lambda r: _expires(r[2], now), drop=1),
        Column("NOTE", _note, shorten="end", minimum=12, last_resort=True),
    )
    cells = [[literal(column.cell(row)) for column in columns] for row in rows]
    headers, shown = fit(columns, cells, None if wide else _width())
    for line in lines(headers, shown):
        print(line)


def _expires(model: ServedModel | None, now: float) -> str:
    from enginespec.display import age

    if model is None or model.expires_at is None:
        return "-"
    left = model.expires_at - now
    # Ollama's "forever" (a negative keep_alive) is a time centuries away
    return "never" if left > 10 * 365 * 86400 else ("now" if left <= 0 else f"in {age(left)}")


def _note(row: _Row) -> str:
    _process, reading, model = row
    if model is None:
        return reading.reason or "-"
    return model.reason or "-"


def _width() -> int | None:
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None
