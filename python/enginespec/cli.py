"""The ``enginespec`` command."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence

from pydantic import BaseModel
from rich.console import Console, ConsoleOptions
from rich.live import Live
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

import enginespec.exporter as exporter
import enginespec.modelcli as modelcli
from enginespec._backend import BACKEND
from enginespec.argv import parse_argv, redact_argv
from enginespec.cli_lifecycle import add_lifecycle_commands
from enginespec.config import Config
from enginespec.containers import PublishedPort
from enginespec.display import literal, literal_lines
from enginespec.engines import all_engine_specs, engine_ids, get_engine_spec
from enginespec.errors import (
    CommandError,
    HelpError,
    InstallError,
    InvalidInputError,
    RecipeFileError,
    UnknownEngineError,
)
from enginespec.gpus import GpuDevice, GpuUse
from enginespec.health import check_all, check_health
from enginespec.installing import InstallOptions, ProgressEvent
from enginespec.layout import EMPTY, Column, fit, lines
from enginespec.load import EngineLoad, check_load_all
from enginespec.recipe import Recipe
from enginespec.scanning import EngineProcess, gpu_ledger, unique_engine_ids
from enginespec.spec import EngineSpec
from enginespec.version import __version__
from enginespec.watching import (
    Changed,
    HealthChanged,
    Scanner,
    Stopped,
    Watch,
    WatchEvent,
    WorkerLost,
    event_json,
)


def _fail(command: str, message: object) -> None:
    """One line on stderr, shown literally (messages may quote argv, paths or a server's words)."""
    print(f"enginespec {command}: {literal(str(message))}", file=sys.stderr)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _duration(text: str) -> float:
    """Seconds from ``2``, ``2s``, ``500ms`` or ``1m``."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0}
    number, unit = text, "s"
    for suffix in ("ms", "s", "m"):
        if text.endswith(suffix):
            number, unit = text[: -len(suffix)], suffix
            break
    return _positive_seconds(number) * units[unit]


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return int(text)


def _cmd_exporter(args: argparse.Namespace) -> int:
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
            load=args.load,
            stall_after=args.stall_after,
            stop=stop,
        )
    except OSError as err:  # the address is taken, or the textfile's directory is not writable
        _fail("exporter", err)
        return 1
    return 0


def _cmd_parse(args: argparse.Namespace) -> int:
    invocation = parse_argv(args.argv)
    if invocation is None:
        _fail("parse", f"not a server of a known engine: {shlex.join(redact_argv(args.argv))}")
        return 1
    print(_json(invocation))
    return 0


def _cmd_command(args: argparse.Namespace) -> int:
    try:
        recipe = Recipe.from_file(args.recipe)
        command = get_engine_spec(recipe.engine).plan(recipe, strict=args.strict)
    except (RecipeFileError, CommandError) as err:
        _fail("command", err)
        return 2
    if args.json:  # the dump masks secrets (argv values, env_vars whose names say secret)
        print(_json(command))
        return 0
    for name, value in command.redacted_env().items():
        print(literal(f"export {name}={shlex.quote(value)}"))
    print(literal(command.shell()))
    for warning in command.warnings:
        print(f"warning: {literal(warning)}", file=sys.stderr)
    if command.injected_flags:
        print(f"note: injected by defaults: {literal(' '.join(command.injected_flags))}", file=sys.stderr)
    return 0


def _json(model: BaseModel) -> str:
    """A model as indented ASCII JSON: argv bytes that are not UTF-8 (surrogate escapes from
    /proc) become ``\\udcXX`` escapes, where pydantic's own JSON would fail."""
    return json.dumps(model.model_dump(mode="json"), indent=2)


PS_COLUMNS = (
    Column("PID"),
    Column("ENGINE"),
    # Empty for a server, so left out when every row is one.
    Column("ROLE"),
    Column("MODEL", shorten="middle", minimum=16, comfortable=40),
    Column("SERVED AS", shorten="end", minimum=10, drop=5),
    # architecture, quantization, context as started (from the model's files, see docs/models.md)
    Column("MODEL FACTS", shorten="end", minimum=10, drop=2),
    Column("URL"),
    Column("CONTAINER", shorten="end", minimum=12, drop=6),
    Column("PUBLISHED", shorten="end", minimum=12, drop=4),
    Column("WORKERS", drop=3),
    Column("SUPERVISOR", drop=2),
    Column("LISTENING", shorten="end", minimum=9, drop=1),
    # other processes on the server's own address and port (SO_REUSEPORT)
    Column("PORT SHARED WITH", shorten="end", minimum=9, drop=1),
    # the GPUs the tree holds and the bytes (`0,1 38.2G`): left out when no engine holds one
    Column("GPU", shorten="end", minimum=5, drop=7),
    Column("HEALTH"),
)


#: ``ps --load``: requests running and waiting, KV-cache use, generated tokens per second.
LOAD_COLUMNS = (Column("RUN"), Column("WAIT"), Column("KV%"), Column("TOK/S"))


def _load_cells(load: EngineLoad | None) -> list[str]:
    """A reading under LOAD_COLUMNS: ``-`` for a figure the engine does not report."""
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
    first = check_load_all(processes, timeout=timeout)
    time.sleep(interval)
    return check_load_all(processes, previous=first, timeout=timeout)


def _published(port: PublishedPort) -> str:
    """``0.0.0.0:8001->8000``, ``[::]:8001->8000``: as ``docker ps`` shows a published port."""
    address = f"[{port.host_address}]" if ":" in port.host_address else port.host_address
    return f"{address}:{port.host_port}->{port.container_port}"


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
    if not uses:
        return EMPTY
    names = ",".join(_gpu_name(u.index, u.mig_index, u.device) for u in uses)
    known = [u.memory_bytes for u in uses]
    return f"{names} {_size(None if None in known else sum(b or 0 for b in known))}"
def _facts_cell(p: EngineProcess) -> str:
    """``llama Q4_K_M 4096``: the model's architecture and quantization, and the context the
    engine was started with (else the trained one)."""
    facts = p.model_facts
    if facts is None:
        return EMPTY
    context = facts.estimate.context if facts.estimate and facts.estimate.context else facts.context_length
    parts = [facts.architecture, facts.quantization, str(context) if context else None]
    return " ".join(part for part in parts if part) or EMPTY


def _ps_row(p: EngineProcess, state: str | None) -> list[str]:
    """A process's cells under PS_COLUMNS (the HEALTH cell only with a ``state``)."""
    return [
        str(p.pid),
        p.engine,
        p.role if p.role != "server" else EMPTY,
        p.model or "?",
        ", ".join(p.served_model_names) or EMPTY,
        _facts_cell(p),
        p.base_url or EMPTY,
        p.container.label if p.container else EMPTY,
        ", ".join(_published(q) for q in p.published) or EMPTY,
        str(len(p.worker_pids)) if p.worker_pids else EMPTY,
        p.supervisor or EMPTY,
        ", ".join(map(str, p.listen_ports)) or EMPTY,
        ", ".join(map(str, p.port_conflicts)) or EMPTY,
        _gpu_cell(p.gpus),
        *([state] if state is not None else []),
    ]


def _table_lines(
    processes: Sequence[tuple[EngineProcess, str | None]],
    health: bool,
    width: int | None,
    loads: Sequence[EngineLoad] | None = None,
) -> list[str]:
    """The ps table as literal text lines fitted to ``width`` (no cell split); with ``loads``
    (one per process) also the LOAD_COLUMNS."""
    columns = (PS_COLUMNS if health else PS_COLUMNS[:-1]) + (LOAD_COLUMNS if loads is not None else ())
    rows = [
        [
            literal(cell)
            for cell in (
                _ps_row(p, (state or "?") if health else None)
                + (_load_cells(loads[index]) if loads is not None else [])
            )
        ]
        for index, (p, state) in enumerate(processes)
    ]
    headers, shown = fit(columns, rows, width)
    return lines(headers, shown)


def _cmd_ps(args: argparse.Namespace) -> int:
    processes = Scanner(listen_ports=True).scan()
    healths = None
    if not args.no_health:
        # --timeout is the deadline of all the checks together, not of each (1,024 hung servers
        # are not 16 rounds of it): those not done by then are `unknown`, saying so.
        healths = check_all(processes, timeout=args.timeout, deadline=args.timeout)
    # Load is read only when asked: it costs two more requests per engine.
    loads = _two_readings(processes, args.load_interval, args.timeout) if args.load else None
    if args.json:
        documents = [p.model_dump(mode="json") for p in processes]
        for document, health in zip(documents, healths or [], strict=False):
            document["health"] = health.model_dump(mode="json")
        for document, load in zip(documents, loads or [], strict=False):
            document["load"] = load.model_dump(mode="json")
        print(json.dumps(documents, indent=2))
        return 0

    if not processes:
        print("no engine servers found on this host")
        return 0
    # Every cell is shown literally: argv can carry rich markup and terminal escapes. On a terminal
    # the table fits its width (no cell split); piped or with --wide, nothing is shortened.
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() and not args.wide else None
    shown = [(p, None if healths is None else healths[index].state) for index, p in enumerate(processes)]
    console = Console(markup=False, highlight=False, emoji=False, soft_wrap=True)
    header, *body = _table_lines(shown, healths is not None, width, loads)
    console.print(Text(header, style="bold"))
    for line in body:
        console.print(Text(line))
    return 0


class _LiveTable:
    """What ``enginespec watch`` shows: the engines now running, fitted to the terminal's width
    each time it is drawn (so a resize is followed)."""

    def __init__(self, watch: Watch, health: bool) -> None:
        self.watch = watch
        self.health = health
        self.engines: dict[tuple[int, float], tuple[EngineProcess, str | None]] = {}

    def apply(self, event: WatchEvent) -> None:
        if isinstance(event, Stopped):
            self.engines.pop((event.identity.pid, event.identity.start_time), None)
            return
        key = (event.process.pid, event.process.start_time)
        state = event.type if isinstance(event, HealthChanged) else self.engines.get(key, (None, None))[1]
        self.engines[key] = (event.process, state)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        width = options.max_width
        shown = sorted(self.engines.values(), key=lambda item: item[0].pid)
        how = "process events" if self.watch.mode == "events" else "polling"
        title = f"{len(shown)} engine server(s), {how}; Ctrl-C to stop"
        yield Text(title if len(title) <= width else title[: max(width - 1, 0)] + "…", style="dim")
        if not shown:
            return
        header, *body = _table_lines(shown, self.health, width)
        yield Text(header, style="bold", no_wrap=True, overflow="ellipsis")
        for line in body:
            yield Text(line, no_wrap=True, overflow="ellipsis")


def _event_line(event: WatchEvent) -> str:
    """One event as a literal text line (``watch`` when stdout is not a terminal)."""
    if isinstance(event, Stopped):
        who = event.identity
        return literal(f"stopped {who.pid} {who.engine} {who.engine_id}")
    p = event.process
    detail = " ".join(event.fields) if isinstance(event, Changed) else p.base_url or "-"
    if isinstance(event, WorkerLost):
        detail = event.worker.describe()
    return literal(f"{event.type} {p.pid} {p.engine} {p.engine_id} {p.model or '?'} {detail}")


def _cmd_watch(args: argparse.Namespace) -> int:
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
        if args.json:
            for event in watch:
                sys.stdout.write(event_json(event) + "\n")
                sys.stdout.flush()
        elif not sys.stdout.isatty():
            for event in watch:
                print(_event_line(event), flush=True)
        else:
            console = Console(markup=False, highlight=False, emoji=False)
            table = _LiveTable(watch, args.health)
            with Live(table, console=console, refresh_per_second=4, transient=False):
                for event in watch:
                    table.apply(event)
    except KeyboardInterrupt:
        pass
    finally:
        watch.close()
    return 0


def gpu_lines(devices: Sequence[GpuDevice], processes: Sequence[EngineProcess]) -> list[str]:
    """The ledger as text lines: per GPU its figures, then who holds how much of it."""
    models = {engine_id: p for engine_id, p in zip(unique_engine_ids(processes), processes, strict=True)}
    out = []
    for device in devices:
        used = f"{_size(device.memory_used_bytes)} / {_size(device.memory_total_bytes)} used"
        where = " ".join(part for part in (device.device, device.pci_bus_id) if part)
        name = _gpu_name(device.index, device.mig_index, device.device)
        out.append(literal(f"GPU {name}  {device.name or '?'}  {where}  {used}"))
        for engine_id, size in device.engines.items():
            process = models.get(engine_id)
            what = f" pid {process.pid} {process.model or '?'}" if process else ""
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
    processes = Scanner(listen_ports=False).scan()
    devices = gpu_ledger(processes)
    if args.json:
        print(json.dumps([device.model_dump(mode="json") for device in devices], indent=2))
        return 0
    if not devices:
        print("no GPUs found on this host")
    for line in gpu_lines(devices, processes):
        print(line)
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    target: EngineProcess | str
    if args.target.isdigit():
        pid = int(args.target)
        found = [p for p in Scanner(listen_ports=False).scan() if p.pid == pid or pid in p.worker_pids]
        if not found:
            _fail("health", f"pid {pid} is not an engine server on this host")
            return 2
        target = found[0]
    elif args.target in engine_ids():
        if not args.url:
            _fail("health", f"give the URL of the {args.target} server")
            return 2
        target = args.target
    else:
        _fail("health", f"{args.target!r} is neither a pid nor an engine ({', '.join(engine_ids())})")
        return 2
    try:
        health = check_health(
            target,
            args.url,
            timeout=args.timeout,
            verify_identity=args.verify_identity,
            deep=args.deep,
            deadline=args.timeout,
        )
    except InvalidInputError as err:
        _fail("health", err)
        return 2
    if args.json:
        print(_json(health))
    else:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        reason = f": {health.reason}" if health.reason else ""
        print(literal(f"{health.engine} {health.base_url or '-'} {health.state}{reason}{latency}"))
    return 0 if health.ready else 1


def _cmd_load(args: argparse.Namespace) -> int:
    target = args.target
    processes = Scanner(listen_ports=False).scan()
    if target.isdigit():
        found = [p for p in processes if p.pid == int(target) or int(target) in p.worker_pids]
    else:
        found = [p for p in processes if p.engine_id == target]
    if not found:
        _fail("load", f"{target!r} is neither the pid nor the engine id of an engine server on this host")
        return 2
    process = found[0]
    try:
        first = check_load_all([process], timeout=args.timeout, stall_after=args.stall_after)
        time.sleep(args.interval)
        [load] = check_load_all([process], previous=first, timeout=args.timeout, stall_after=args.stall_after)
    except InvalidInputError as err:
        _fail("load", err)
        return 2
    if args.json:
        print(_json(load))
    elif not load.available:
        print(literal(f"{process.engine_id} pid {process.pid}: no load reading: {load.reason}"))
    else:
        cells = dict(zip((c.header for c in LOAD_COLUMNS), _load_cells(load), strict=True))
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
        print(literal(f"{process.engine_id} pid {process.pid} {load.source}: {', '.join(figures)}"))
    return 0 if load.available else 1


def _config(args: argparse.Namespace) -> Config:
    return Config(data_dir=args.data_dir) if args.data_dir else Config()


def _engine(command: str, name: str) -> EngineSpec | None:
    try:
        return get_engine_spec(name)
    except UnknownEngineError as err:
        _fail(command, err)
        return None


def _cmd_install(args: argparse.Namespace) -> int:
    spec = _engine(args.command, args.engine)
    if spec is None:
        return 2
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(f"installing {spec.id}", total=None)

        def progress(event: ProgressEvent) -> None:
            text = literal(f"{event.phase.replace('_', ' ')}: {event.message}")[:100]
            bar.update(task, description=text, completed=event.fraction, total=1 if event.fraction else None)

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
            if err.command:
                print(f"command: {literal(shlex.join(err.command))}", file=sys.stderr)
            for line in err.output_tail[-15:]:
                print(f"  {literal(line)}", file=sys.stderr)
            return 1
    state = "already installed" if result.already_installed else "installed"
    where = result.python_path or result.binary_path
    print(literal(f"{spec.id} {result.version} {state} ({result.location}: {where})"))
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    specs = all_engine_specs()
    if args.engine:
        spec = _engine(args.command, args.engine)
        if spec is None:
            return 2
        specs = (spec,)
    infos = [spec.get_runtime_info(_config(args)) for spec in specs]
    if args.json:
        print(json.dumps([info.model_dump(mode="json") for info in infos], indent=2))
        return 0
    for info in infos:
        where = info.python_path or info.binary_path or "-"
        print(literal(f"{info.engine:<10} {info.version or 'not installed':<18} {info.location:<8} {where}"))
    return 0


def _cmd_help(args: argparse.Namespace) -> int:
    spec = _engine(args.command, args.engine)
    if spec is None:
        return 2
    try:
        print(literal_lines(spec.get_config_help(_config(args)).text))
    except InvalidInputError as err:
        _fail("help", err)
        return 2
    except HelpError as err:
        _fail("help", err)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enginespec", description="Know, find and probe local LLM inference engines."
    )
    parser.add_argument("--version", action="version", version=f"enginespec {__version__} ({BACKEND})")
    commands = parser.add_subparsers(dest="command", required=True)
    parse = commands.add_parser(
        "parse",
        help="recognise an engine server from its argv and print it as JSON",
        description="Prints the recognised invocation as JSON; exits 1 when argv is not an engine server.",
    )
    parse.add_argument("argv", nargs=argparse.REMAINDER, help="the command line, after --")
    parse.set_defaults(handler=_cmd_parse)
    ps = commands.add_parser(
        "ps",
        help="list the engine servers running on this host",
        description="Lists every vLLM, SGLang, llama-server and mlx_lm.server process on this host "
        "(workers folded into their server, secrets redacted).",
    )
    ps.add_argument("--json", action="store_true", help="print a JSON list of EngineProcess objects")
    ps.add_argument("--no-health", action="store_true", help="skip the health checks")
    ps.add_argument("--wide", action="store_true", help="show every cell whole, whatever the width")
    ps.add_argument(
        "--timeout", type=_positive_seconds, default=2.0, help="deadline of all health checks (seconds)"
    )
    ps.add_argument(
        "--load", action="store_true", help="also read each engine's load (RUN, WAIT, KV%%, TOK/S columns)"
    )
    ps.add_argument(
        "--load-interval", type=_duration, default=1.0, help="time between the two load readings (1s)"
    )
    ps.set_defaults(handler=_cmd_ps)
    gpus = commands.add_parser(
        "gpus",
        help="which engine holds which GPU, and how much of it",
        description="Lists the host's GPUs (from the drivers' own files; bytes for NVIDIA from NVML "
        "when its library loads), the engines holding each, the other processes on it and what is "
        "unattributed. Lists every process's open files to find those others (more than ps reads).",
    )
    gpus.add_argument("--json", action="store_true", help="print a JSON list of GpuDevice objects")
    gpus.set_defaults(handler=_cmd_gpus)
    health = commands.add_parser(
        "health",
        help="check an engine server's health; exit 0 only when ready",
        description="TARGET is a pid (a server or one of its workers) or an engine id followed by the "
        "server's URL. Prints the state; exits 0 when ready, 1 otherwise, 2 on bad input.",
    )
    health.add_argument("target", help="pid, or engine id (vllm, sglang, llamacpp, mlx, ...)")
    health.add_argument("url", nargs="?", help="base URL when TARGET is an engine id")
    health.add_argument(
        "--timeout", type=_positive_seconds, default=2.0, help="deadline of the whole check (seconds)"
    )
    health.add_argument("--verify-identity", action="store_true", help="check /v1/models serves the model")
    health.add_argument("--deep", action="store_true", help="also ask for a one-token completion")
    health.add_argument("--json", action="store_true", help="print the Health as JSON")
    health.set_defaults(handler=_cmd_health)
    load = commands.add_parser(
        "load",
        help="what an engine server is doing now: requests, KV cache, tokens per second",
        description="Reads the engine's own metrics twice, --interval apart, and prints the "
        "normalized load (see docs/load.md); exits 1 when the engine reports none.",
    )
    load.add_argument("target", help="pid (of the server or a worker), or engine id (from ps --json)")
    load.add_argument("--interval", type=_duration, default=1.0, help="time between the two readings (1s)")
    load.add_argument("--timeout", type=_positive_seconds, default=2.0, help="request timeout (seconds)")
    load.add_argument(
        "--stall-after",
        type=_duration,
        default=None,
        help="seconds with requests pending and no token before 'stalled' (default: "
        "$ENGINESPEC_STALL_AFTER, else the engine's own, 60s)",
    )
    load.add_argument("--json", action="store_true", help="print the EngineLoad as JSON")
    load.set_defaults(handler=_cmd_load)
    install = commands.add_parser("install", help="install an engine into its managed runtime (idempotent)")
    install.add_argument("engine")
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
    info = commands.add_parser("info", help="what is installed, where, and which version")
    info.add_argument("engine", nargs="?")
    info.add_argument("--json", action="store_true")
    info.set_defaults(handler=_cmd_info)
    help_ = commands.add_parser("help", help="print the installed engine's own full --help")
    help_.add_argument("engine")
    help_.set_defaults(handler=_cmd_help)
    for sub in (install, info, help_):
        sub.add_argument(
            "--data-dir", help="data directory (default: $ENGINESPEC_DATA_DIR or the user data dir)"
        )
    watch = commands.add_parser(
        "watch",
        help="a live view of the engine servers on this host",
        description="Shows the engines as they start, become ready, change and stop, in a table "
        "updated in place; with --json, one JSON object per event (JSON Lines). Uses the kernel's "
        "process events when it may (root), else polls every --interval.",
    )
    watch.add_argument("--json", action="store_true", help="stream events as JSON Lines")
    watch.add_argument(
        "--interval", type=_duration, default=1.0, help="re-check period, and polling period (1s, 500ms)"
    )
    watch.add_argument(
        "--health", action=argparse.BooleanOptionalAction, default=True, help="check health (default: on)"
    )
    watch.add_argument("--health-interval", type=_duration, default=2.0, help="health check period (2s)")
    watch.add_argument("--poll", action="store_true", help="poll even where process events are available")
    watch.add_argument(
        "--load",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read each engine's load with its health: tells busy and stalled engines (default: on)",
    )
    watch.add_argument(
        "--stall-after",
        type=_duration,
        default=None,
        help="seconds with requests pending and no token before 'stalled' (default: "
        "$ENGINESPEC_STALL_AFTER, else the engine's own, 60s)",
    )
    watch.set_defaults(handler=_cmd_watch)
    exporter_ = commands.add_parser(
        "exporter",
        help="serve Prometheus metrics about the engines on this host",
        description="Scans (and health-checks) every --interval and serves the results at /metrics; "
        "with --textfile, also writes them for node_exporter's textfile collector (atomically).",
    )
    exporter_.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    exporter_.add_argument("--port", type=_port, default=9464, help="port to listen on; 0: no HTTP server")
    exporter_.add_argument("--interval", type=_duration, default=2.0, help="refresh period (2s, 500ms, 1m)")
    exporter_.add_argument("--textfile", help="also write the series to this file after every refresh")
    exporter_.add_argument("--no-health", action="store_true", help="skip the health checks")
    exporter_.add_argument(
        "--load",
        action="store_true",
        help="also read each engine's load (one more request per engine and refresh): the "
        "enginespec_engine_requests_* series, and busy/stalled states",
    )
    exporter_.add_argument(
        "--stall-after", type=_duration, default=None, help="with --load: seconds before 'stalled'"
    )
    exporter_.set_defaults(handler=_cmd_exporter)
    command = commands.add_parser(
        "command",
        help="print the serve command (and environment) a recipe file builds",
        description="Prints the environment delta as `export` lines and the shell-quoted argv "
        "(secrets redacted); bad recipes exit 2 with a one-line error.",
    )
    command.add_argument("recipe", help="recipe file (.toml, .yaml, .yml or .json)")
    command.add_argument("--json", action="store_true", help="print a JSON document instead")
    command.add_argument("--strict", action="store_true", help="fail on fields the engine has no flag for")
    command.set_defaults(handler=_cmd_command)
    add_lifecycle_commands(commands)
    modelcli.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "parse":
        if args.argv[:1] == ["--"]:
            args.argv = args.argv[1:]
        if not args.argv:
            print("enginespec parse: give the command line after --", file=sys.stderr)
            return 2
    handler = args.handler
    try:
        result: int = handler(args)
    except BrokenPipeError:
        # The reader went away (`enginespec ps | head`): stop quietly, as Unix tools do, and keep
        # Python from complaining about the unflushed stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return result


if __name__ == "__main__":
    sys.exit(main())
