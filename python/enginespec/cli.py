"""The ``enginespec`` command."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence

from enginespec import BACKEND, __version__
from enginespec.argv import parse_argv


def _cmd_parse(args: argparse.Namespace) -> int:
    invocation = parse_argv(args.argv)
    if invocation is None:
        print(f"enginespec: not a server of a known engine: {args.argv!r}", file=sys.stderr)
        return 1
    print(invocation.model_dump_json(indent=2))
    return 0


def _cmd_command(args: argparse.Namespace) -> int:
    from enginespec.engines import get_engine_spec
    from enginespec.recipe import Recipe, RecipeFileError
    from enginespec.spec import CommandError

    try:
        recipe = Recipe.from_file(args.recipe)
        command = get_engine_spec(recipe.engine).plan(recipe, strict=args.strict)
    except (RecipeFileError, CommandError) as err:
        print(f"enginespec command: {err}", file=sys.stderr)
        return 2
    if args.json:
        document = command.model_dump(mode="json")
        document["argv"] = command.redacted_argv()
        print(json.dumps(document, indent=2))
        return 0
    for name, value in command.env.items():
        print(f"export {name}={shlex.quote(value)}")
    print(command.shell())
    for warning in command.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if command.injected_flags:
        print(f"note: injected by defaults: {' '.join(command.injected_flags)}", file=sys.stderr)
    return 0


def _cmd_ps(args: argparse.Namespace) -> int:
    from enginespec.scanning import Scanner

    processes = Scanner(listen_ports=True).scan()
    healths = None
    if not args.no_health:
        from enginespec.health import check_all

        healths = check_all(processes, timeout=args.timeout)
    if args.json:
        documents = [p.model_dump(mode="json") for p in processes]
        for document, health in zip(documents, healths or [], strict=False):
            document["health"] = health.model_dump(mode="json")
        print(json.dumps(documents, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    columns = ["PID", "ENGINE", "MODEL", "SERVED AS", "URL", "WORKERS", "SUPERVISOR", "LISTENING"]
    for column in columns + (["HEALTH"] if healths is not None else []):
        table.add_column(column, overflow="fold")
    for index, p in enumerate(processes):
        row = [
            str(p.pid),
            p.engine,
            p.model or "?",
            ", ".join(p.served_model_names) or "-",
            p.base_url,
            str(len(p.worker_pids)),
            p.supervisor or "-",
            ", ".join(map(str, p.listen_ports)) or "-",
        ]
        if healths is not None:
            row.append(healths[index].state)
        table.add_row(*row)
    # Piped output is not cut to 80 columns: scripts grep it, people page it.
    console = Console() if sys.stdout.isatty() else Console(width=1000)
    if processes:
        console.print(table)
    else:
        console.print("no engine servers found on this host")
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from enginespec.engines import engine_ids
    from enginespec.health import check_health
    from enginespec.scanning import EngineProcess, Scanner

    target: EngineProcess | str
    if args.target.isdigit():
        pid = int(args.target)
        found = [p for p in Scanner(listen_ports=False).scan() if p.pid == pid or pid in p.worker_pids]
        if not found:
            print(f"enginespec health: pid {pid} is not an engine server on this host", file=sys.stderr)
            return 2
        target = found[0]
    elif args.target in engine_ids():
        if not args.url:
            print(f"enginespec health: give the URL of the {args.target} server", file=sys.stderr)
            return 2
        target = args.target
    else:
        known = ", ".join(engine_ids())
        print(f"enginespec health: {args.target!r} is neither a pid nor an engine ({known})", file=sys.stderr)
        return 2
    try:
        health = check_health(
            target, args.url, timeout=args.timeout, verify_identity=args.verify_identity, deep=args.deep
        )
    except ValueError as err:
        print(f"enginespec health: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(health.model_dump_json(indent=2))
    else:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        reason = f": {health.reason}" if health.reason else ""
        print(f"{health.engine} {health.base_url} {health.state}{reason}{latency}")
    return 0 if health.ready else 1


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
    ps.add_argument("--timeout", type=float, default=2.0, help="health request timeout (seconds)")
    ps.set_defaults(handler=_cmd_ps)
    health = commands.add_parser(
        "health",
        help="check an engine server's health; exit 0 only when ready",
        description="TARGET is a pid (a server or one of its workers) or an engine id followed by the "
        "server's URL. Prints the state; exits 0 when ready, 1 otherwise, 2 on bad input.",
    )
    health.add_argument("target", help="pid, or engine id (vllm, sglang, llamacpp, mlx, ...)")
    health.add_argument("url", nargs="?", help="base URL when TARGET is an engine id")
    health.add_argument("--timeout", type=float, default=2.0, help="request timeout (seconds)")
    health.add_argument("--verify-identity", action="store_true", help="check /v1/models serves the model")
    health.add_argument("--deep", action="store_true", help="also ask for a one-token completion")
    health.add_argument("--json", action="store_true", help="print the Health as JSON")
    health.set_defaults(handler=_cmd_health)
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
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
