"""``exporter``, ``feed`` and ``agent``: what enginespec knows of this host, for other systems:
Prometheus metrics, discovery files (file_sd, llm-d, production-stack) and the read-only agent
that ``ps --remote`` and ``watch --remote`` read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from enginespec.cli.args import duration, port
from enginespec.cli.common import fail
from enginespec.display import literal


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``exporter``, ``feed`` (was ``export``) and ``agent`` (was ``serve``) through the
    ``enginespec`` parser's maker of subcommands."""
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
        "--models",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read what each server whose models come and go serves (llama.cpp's router, Ollama, vLLM, "
        "SGLang): the enginespec_model_* series",
    )
    exporter_.add_argument(
        "--token-file",
        help="a scraper that sends this token (Authorization: Bearer) sees every engine's facts; "
        "without it, what it could read on the host itself",
    )
    exporter_.set_defaults(handler=_cmd_exporter)

    export = command(
        "feed",
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
        "enginespec feed --format file-sd --out /etc/prometheus/engines.json",
        "enginespec feed --format file-sd --out engines.json --watch",
        "enginespec feed --format production-stack --out - | jq",
        renamed_from="export",
    )
    export.add_argument("--format", choices=_feed_formats(), required=True, help="the feed to write")
    export.add_argument("--out", required=True, help="the file to write (replaced atomically); -: stdout")
    export.add_argument("--watch", action="store_true", help="keep the file up to date until stopped")
    export.add_argument(
        "--advertise",
        help="the address given for engines listening on 0.0.0.0 or :: (default: this host's address on its"
        " default route, else its name)",
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
        "agent",
        "serve what enginespec knows of this host to other hosts, read-only",
        "GET /v1/engines (the ps --json objects, with health), /v1/gpus, /metrics (the "
        "exporter's series) and /v1/events (the watch's events, as server-sent events). Listens "
        "on loopback or a unix socket by default; any other address requires --token-file "
        "(clients send Authorization: Bearer TOKEN). GET /v1/engines/TARGET/models is what an "
        "engine serves, as llama.cpp's router lists models. Nothing it serves changes anything, "
        "unless --allow-control (with a token) adds stop and restart, and loading, unloading, "
        "sleep and wake in the shapes of llama.cpp's router management API.",
        "enginespec agent",
        "enginespec agent --listen unix:/run/enginespec.sock",
        "enginespec agent --listen 0.0.0.0:9465 --token-file /etc/enginespec/token",
        "enginespec ps --remote http://gpu1:9465,http://gpu2:9465 --token-file token",
        renamed_from="serve",
    )
    serve.add_argument("--listen", default="127.0.0.1:9465", help="ADDRESS:PORT or unix:PATH to listen on")
    serve.add_argument("--token-file", help="a file holding the token clients must send")
    serve.add_argument("--certfile", help="TLS certificate (PEM), with --keyfile")
    serve.add_argument("--keyfile", help="TLS private key (PEM), with --certfile")
    serve.add_argument("--interval", type=duration, default=2.0, help="refresh period of engines and metrics")
    serve.add_argument(
        "--allow-control",
        action="store_true",
        help="also POST /v1/engines/TARGET/stop, /restart, /models/load, /models/unload, /sleep and "
        "/wake (needs --token-file, even on loopback)",
    )
    serve.set_defaults(handler=_cmd_serve)


def _feed_formats() -> tuple[str, ...]:
    # the feed module's list, without importing the scanner for every command's parser
    return ("file-sd", "llm-d", "production-stack")


def _cmd_exporter(args: argparse.Namespace) -> int:
    import signal
    import threading

    import enginespec.fleet.exporter as exporter
    from enginespec.errors import ExporterError

    if args.port == 0 and not args.textfile:
        fail("exporter", "--port 0 serves no HTTP: give --textfile FILE, or a port")
        return 2
    from enginespec.errors import InvalidInputError
    from enginespec.fleet.agent import read_token

    try:
        token = read_token(args.token_file) if args.token_file else None
    except InvalidInputError as err:
        fail("exporter", err)
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
            models=args.models and not args.no_health,
            stall_after=args.stall_after,
            stop=stop,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            token=token,
        )
    except ExporterError as err:  # the address is taken, the textfile cannot be written
        fail("exporter", err)
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
            log=lambda line: print(literal(f"enginespec feed: {line}"), file=sys.stderr, flush=True),
            allow_owners=args.allow_owner,
        )
        if not args.watch:
            listed = feeds.export_once(writer, timeout=request_timeout(args.timeout), deadline=args.timeout)
            if args.out != "-":
                print(f"enginespec feed: {listed} engine(s) written to {args.out}", file=sys.stderr)
            return 0
        print(
            f"enginespec feed: keeping {args.out} up to date ({args.format}); Ctrl-C stops",
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
        fail("feed", err)
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
        fail("agent", err)
        return 1
    return 0
