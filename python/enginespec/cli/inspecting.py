"""``describe``, ``health``, ``gpus`` and ``load``: one engine server looked at closely (all that
is known of it, whether it serves, what it is doing now) and the host's GPUs with who holds them."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from enginespec.cli.args import duration
from enginespec.cli.common import (
    ENGINE_LIST,
    MODEL_UNKNOWN,
    engine_ids,
    engine_names,
    fail,
    find,
    json_text,
    out,
)
from enginespec.cli.targets import FORMS, is_target, run_named
from enginespec.display import age, literal

if TYPE_CHECKING:
    from enginespec.gpus.reader import GpuDevice
    from enginespec.health.load import EngineLoad
    from enginespec.health.servedmodels import ServedModels
    from enginespec.healthrecord import Health
    from enginespec.process.record import EngineProcess


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``describe``, ``health``, ``gpus`` and ``load`` through the ``enginespec`` parser's
    maker of subcommands."""
    ids = ENGINE_LIST
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
    describe.add_argument(
        "target", metavar="TARGET", help="pid, engine id, run name, :PORT, HOST:PORT or URL"
    )
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
    health.add_argument(
        "target", metavar="TARGET", help="pid, engine id, run name, :PORT, HOST:PORT, URL, or engine"
    )
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

    identify = command(
        "identify",
        "which engine answers at a URL no scan of this host explains",
        "Sends each engine's identity probe (a request only that engine answers so) to URL at once "
        "and prints the engine whose probe matched; exits 0 when exactly one did, 1 when none or "
        "several did (or nothing answered), 2 on bad input. A port alone says nothing: engines "
        "share defaults (1234, 8000, 8080).",
        "enginespec identify http://10.0.0.5:8080",
        "enginespec identify --json http://127.0.0.1:1234",
    )
    identify.add_argument("url", metavar="URL", help="the server's base URL")
    identify.add_argument("--timeout", type=duration, default=2.0, help="deadline of each probe")
    identify.add_argument("--json", action="store_true", help="print the Identification as JSON")
    identify.set_defaults(handler=_cmd_identify)

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
    load.add_argument("target", metavar="TARGET", help="pid, engine id, run name, :PORT, HOST:PORT or URL")
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


def _worker_lines(p: EngineProcess) -> list[str]:
    """Each worker as ``  4300  VLLM::EngineCore``: its pid and the title it runs under."""
    found = []
    for pid in p.worker_pids:
        try:
            argv = p._root.read(pid, "cmdline", 4096).split(b"\0")
        except OSError:
            argv = []
        title = os.fsdecode(argv[0]) if argv and argv[0] else "(gone)"
        found.append(f"  {pid}  {title}")
    return found


def _log_text(p: EngineProcess) -> str:
    """Where the engine's output goes, in words."""
    from enginespec.lifecycle.logsources import find_log_source

    source = find_log_source(p.pid, p._root)
    where = source.path or source.unit or source.container
    if source.kind == "file" and source.path:
        # read through /proc/PID/fd/N; the file it names is what a person looks for
        with contextlib.suppress(OSError):
            where = p._root.link(p.pid, "fd/" + source.path.rsplit("/", 1)[-1])
    said = f"{source.kind} {where}" if where else source.kind
    return said + (f" ({source.reason})" if source.reason else "")


def _describe_lines(p: EngineProcess, health: Health | None, load: EngineLoad | None) -> list[str]:
    from enginespec.cli.pstable import gpu_name, published, size

    now = time.time()
    started = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(p.start_time))
    sources = dict(p.sources)
    fields: list[tuple[str, str]] = [
        ("Engine", p.engine),
        ("Engine id", p.instance_id),
        ("PID", str(p.pid)),
        ("Role", p.role + (f" (of server {p.server_pid})" if p.server_pid else "")),
        # the name every table and label gives it, then the exact argument where it differs
        ("Model", p.model_name or MODEL_UNKNOWN),
    ]
    if p.model and p.model != p.model_name:
        fields.append(("Model path", p.model))
    fields += [
        ("Served as", ", ".join(p.served_model_names) or "-"),
        ("URL", p.base_url or "- (no usable address)"),
        ("Host", f"{p.effective_host}" + (f" (from {sources['host']})" if "host" in sources else "")),
        ("Port", f"{p.effective_port or '-'}" + (f" (from {sources['port']})" if "port" in sources else "")),
        ("Started", f"{started} ({age(now - p.start_time)} ago)"),
        ("Workers", "-" if not p.worker_pids else f"{len(p.worker_pids)}"),
        ("Supervisor", p.supervisor or "-"),
        ("Listening", ", ".join(map(str, p.listen_ports)) or "-"),
        ("Port shared with", ", ".join(map(str, p.port_conflicts)) or "-"),
        ("Container", p.container.label if p.container else "-"),
        ("Published", ", ".join(published(q) for q in p.published) or "-"),
        ("Executable", p.exe or "-"),
        ("Command", " ".join(_shell_quote(a) for a in p.argv)),
    ]
    facts = p.model_facts
    if facts is not None:
        context = (
            facts.estimate.context if facts.estimate and facts.estimate.context else facts.context_length
        )
        parts = [facts.architecture, facts.quantization, f"context {context}" if context else None]
        if facts.estimate is not None and facts.estimate.weight_bytes:
            weights, cache = facts.estimate.weight_bytes, facts.estimate.kv_cache_bytes
            parts.append(f"weights {size(weights)}" + (f" + KV cache {size(cache)}" if cache else ""))
        fields.append(("Model facts", ", ".join(part for part in parts if part) or "-"))
    gpus = [f"{gpu_name(u.index, u.mig_index, u.device)} {size(u.memory_bytes)}" for u in p.gpus]
    fields.append(("GPUs", ", ".join(gpus) or (f"- ({p.gpus_unknown})" if p.gpus_unknown else "-")))
    fields.append(("Logs", _log_text(p)))
    fields += [("Problem", problem) for problem in p.problems]
    if health is not None:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        status = f", HTTP {health.http_status}" if health.http_status is not None else ""
        fields.append(("Health", f"{health.state}{status}{latency}"))
        fields.append(("Reason", health.reason or "-"))
    if load is not None:
        fields.append(("Load", _load_figures(load) if load.available else f"- ({load.reason})"))
    width = max(len(key) for key, _ in fields) + 2
    lines = [literal(f"{key + ':':<{width}}{value}") for key, value in fields]
    # the workers under their count, with their titles (kubectl describe's nested lists)
    at = next(i for i, (key, _) in enumerate(fields) if key == "Workers")
    return lines[: at + 1] + [literal(line) for line in _worker_lines(p)] + lines[at + 1 :]


def _models_lines(served: ServedModels | None) -> list[str]:
    """What a server whose models come and go serves: ``Models:`` and a line per model (its
    state, runner, port, GPU bytes, expiry), as kubectl describe nests lists."""
    from enginespec.cli.pstable import size

    if served is None:
        return []
    if not served.available:
        return [literal(f"Models:     - ({served.reason})")]
    lines = [literal(f"Models:     {len(served.models)} from {served.source}")]
    now = time.time()
    for model in served.models:
        parts: list[str] = [model.state]
        if model.runner_pid is not None:
            parts.append(f"runner {model.runner_pid}")
        if model.port is not None:
            parts.append(f"port {model.port}")
        if model.memory_bytes is not None:
            parts.append(
                f"GPU {size(model.memory_bytes)}"
                + (" (its own figure)" if model.memory_source == "engine" else "")
            )
        if model.expires_at is not None:
            parts.append(f"expires in {age(max(model.expires_at - now, 0))}")
        if model.reason:
            parts.append(model.reason)
        lines.append(literal(f"  {model.name}  " + ", ".join(parts)))
    if served.reason:
        lines.append(literal(f"  ({served.reason})"))
    return lines


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _cmd_describe(args: argparse.Namespace) -> int:
    process = find("describe", args.target)
    if process is None:
        return 2
    from enginespec.scanning.scanner import with_gpus

    [process] = with_gpus([process])
    health = load = served = None
    if not args.no_health:
        from enginespec.definition.registry import find_engine
        from enginespec.health.checks import check_health, request_timeout
        from enginespec.health.load import check_load
        from enginespec.health.servedmodels import by_argv, served_models

        health = check_health(process, timeout=request_timeout(args.timeout), deadline=args.timeout)
        load = check_load(process, timeout=request_timeout(args.timeout))
        if not by_argv(find_engine(process.engine).models, process):
            served = served_models(process, timeout=request_timeout(args.timeout))
    if args.json:
        from enginespec.cli.ps import row_document
        from enginespec.cli.pstable import Shown
        from enginespec.scanning.scanner import engine_document
        from enginespec.untrusted.documents import dumps

        row = Shown(process, health)
        row.models = served
        out([dumps(row_document(row, engine_document), indent=2)])
    else:
        from enginespec.untrusted.boundary import contained

        def unshown(reason: str) -> list[str]:
            return [
                literal(f"PID: {process.pid}"),
                literal(f"Engine: {process.engine}"),
                literal(f"Problem: {reason}"),
            ]

        out(
            contained(
                "describe", lambda: _describe_lines(process, health, load) + _models_lines(served), unshown
            )
        )
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from enginespec.errors import EngineExited, InvalidInputError, NotReady
    from enginespec.health.checks import check_health, request_timeout, wait_ready
    from enginespec.suggest import did_you_mean

    target: EngineProcess | str
    ids, engine = engine_ids(), engine_names().get(args.target.lower())
    if engine is not None:
        if not args.url:
            fail("health", f"give the URL of the {engine} server")
            return 2
        target = engine
    elif is_target(args.target) or run_named(args.target) is not None:
        if args.url:
            fail("health", f"a URL is given with an engine name ({', '.join(ids)}), not with {args.target!r}")
            return 2
        found = find("health", args.target, listen_ports=False)
        if found is None:
            return 2
        target = found
    else:
        fail(
            "health",
            f"{args.target!r} is neither {FORMS} nor an engine "
            f"({', '.join(ids)}){did_you_mean(args.target, engine_names())}",
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
        fail("health", err)
        return 2
    except (NotReady, EngineExited) as err:
        fail("health", err)
        if err.last is None:
            return 1
        health = err.last
    if args.json:
        out([json_text(health)])
    else:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        reason = f": {health.reason}" if health.reason else ""
        out([literal(f"{health.engine} {health.base_url or '-'} {health.state}{reason}{latency}")])
    return 0 if health.ready else 1


def _cmd_identify(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError
    from enginespec.health.identity import identify

    try:
        found = identify(args.url, timeout=args.timeout)
    except InvalidInputError as err:
        fail("identify", err)
        return 2
    if args.json:
        out([json_text(found)])
    else:
        out([literal(f"{found.url} {found.engine or '-'}{f': {found.reason}' if found.reason else ''}")])
    return 0 if found.engine is not None else 1


# ------------------------------------------------------------------------------ gpus and load


def gpu_lines(devices: Sequence[GpuDevice], processes: Sequence[EngineProcess]) -> list[str]:
    """The ledger as text lines: per GPU its figures, then who holds how much of it."""
    from enginespec.cli.pstable import gpu_name, size
    from enginespec.scanning.scanner import unique_instance_ids

    models = {
        instance_id: p for instance_id, p in zip(unique_instance_ids(processes), processes, strict=True)
    }
    lines = []
    for device in devices:
        used = f"{size(device.memory_used_bytes)} / {size(device.memory_total_bytes)} used"
        where = " ".join(part for part in (device.device, device.pci_bus_id) if part)
        name = gpu_name(device.index, device.mig_index, device.device)
        lines.append(literal(f"GPU {name}  {device.name or '?'}  {where}  {used}"))
        for instance_id, held in device.engines.items():
            process = models.get(instance_id)
            what = f" pid {process.pid} {process.model or MODEL_UNKNOWN}" if process else ""
            orphan = "  orphan: reclaimable" if instance_id in device.reclaimable else ""
            lines.append(literal(f"  {size(held):>7}  {instance_id}{what}{orphan}"))
        for other in device.other_processes:
            lines.append(
                literal(f"  {size(other.memory_bytes):>7}  pid {other.pid} {other.name or '?'} (no engine)")
            )
        if device.unattributed_bytes:
            lines.append(f"  {size(device.unattributed_bytes):>7}  unattributed")
        if device.problem:
            lines.append(literal(f"  note: {device.problem}"))
    for instance_id, process in models.items():
        if process.gpus_unknown:
            lines.append(literal(f"{instance_id} pid {process.pid}: GPUs unknown: {process.gpus_unknown}"))
    return lines


def _cmd_gpus(args: argparse.Namespace) -> int:
    from enginespec.scanning.scanner import Scanner, gpu_ledger
    from enginespec.untrusted.documents import dumps

    processes = Scanner(listen_ports=False).scan()
    devices = gpu_ledger(processes)
    if args.json:
        out([dumps([device.model_dump(mode="json") for device in devices], indent=2)])
        return 0
    if not devices:
        print("no GPUs found on this host", file=sys.stderr)
    out(gpu_lines(devices, processes))
    return 0


def _cmd_load(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError
    from enginespec.health.load import check_load_all

    process = find("load", args.target, listen_ports=False)
    if process is None:
        return 2
    try:
        first = check_load_all([process], timeout=args.timeout, stall_after=args.stall_after)
        time.sleep(args.interval)
        [load] = check_load_all([process], previous=first, timeout=args.timeout, stall_after=args.stall_after)
    except InvalidInputError as err:
        fail("load", err)
        return 2
    if args.json:
        out([json_text(load)])
    elif not load.available:
        out([literal(f"{process.instance_id} pid {process.pid}: no load reading: {load.reason}")])
    else:
        out([literal(f"{process.instance_id} pid {process.pid} {load.source}: {_load_figures(load)}")])
    return 0 if load.available else 1


def _load_figures(load: EngineLoad) -> str:
    """``running 2, waiting 0, KV cache 31%, 12.5 tok/s``."""
    from enginespec.cli.pstable import LOAD_COLUMNS

    cells = {column.header: column.cell(load) for column in LOAD_COLUMNS}
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
    return ", ".join(figures)
