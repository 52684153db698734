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
        "no engine said. `models load TARGET MODEL` and `models unload TARGET MODEL` load and "
        "unload a model, `models sleep TARGET` and `models wake TARGET` free a server's memory and "
        "bring it back, through the engine's own API (llama.cpp's router, Ollama; vLLM's sleep "
        "mode, SGLang's memory release), for root or the engine's owner; each waits until the "
        "server says it is done (--wait-timeout) and prints what it serves then. Exits 1 when the "
        "engine cannot, may not or did not.",
        "enginespec models",
        "enginespec models :11434 -o json",
        "enginespec models -q",
        "enginespec models load :8080 qwen3-8b",
        "enginespec models sleep vllm-8000-1b690e57",
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
    models.add_argument(
        "--wait-timeout",
        type=duration,
        default=300.0,
        help="load, unload, sleep, wake: give up waiting for the server to say it is done after this",
    )
    models.set_defaults(handler=_cmd_models)


#: the words that make `models` act rather than list, and how many words follow each
ACTIONS = {"load": 2, "unload": 2, "sleep": 1, "wake": 1}


def _cmd_models(args: argparse.Namespace) -> int:
    if args.targets and args.targets[0] in ACTIONS:
        return _act(args)
    return _list(args)


def _act(args: argparse.Namespace) -> int:
    from enginespec.cli.common import find
    from enginespec.errors import ControlError, InvalidInputError
    from enginespec.lifecycle.modelcontrol import control

    action, *words = args.targets
    if len(words) != ACTIONS[action]:
        usage = "TARGET MODEL" if ACTIONS[action] == 2 else "TARGET"
        fail("models", f"usage: enginespec models {action} {usage}")
        return 2
    process = find("models", words[0])
    if process is None:
        return 2
    name = words[1] if len(words) == 2 else None
    try:
        reading = control(process, action, name, timeout=args.wait_timeout)
    except InvalidInputError as err:
        fail("models", err)
        return 2
    except ControlError as err:
        fail("models", err)
        return 1
    done = {"load": "loaded", "unload": "unloaded", "sleep": "asleep", "wake": "awake"}[action]
    fail("models", f"{process.engine} pid {process.pid}: {literal(name) + ' ' if name else ''}{done}")
    if args.format == "json":
        from enginespec.untrusted.documents import dumps

        print(dumps([reading.model_dump(mode="json")], indent=2))
    else:
        _table([(process, reading, m) for m in reading.models or (None,)], args.format == "wide")
    return 0


def _list(args: argparse.Namespace) -> int:
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
    readings = served_models_all(chosen, timeout=args.timeout, scanned=processes) if chosen else []
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
