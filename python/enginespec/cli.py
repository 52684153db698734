"""The ``enginespec`` command."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from enginespec._backend import BACKEND
from enginespec.argv import parse_argv, redact_argv
from enginespec.config import Config
from enginespec.engines import all_engine_specs, engine_ids, get_engine_spec
from enginespec.errors import CommandError, HelpError, InstallError, InvalidInputError, RecipeFileError
from enginespec.health import check_all, check_health
from enginespec.installing import InstallOptions, ProgressEvent
from enginespec.recipe import Recipe
from enginespec.scanning import EngineProcess, Scanner
from enginespec.spec import EngineSpec
from enginespec.version import __version__


def _cmd_parse(args: argparse.Namespace) -> int:
    invocation = parse_argv(args.argv)
    if invocation is None:
        shown = shlex.join(redact_argv(args.argv))
        print(f"enginespec parse: not a server of a known engine: {shown}", file=sys.stderr)
        return 1
    print(invocation.model_dump_json(indent=2))
    return 0


def _cmd_command(args: argparse.Namespace) -> int:
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
    processes = Scanner(listen_ports=True).scan()
    healths = None
    if not args.no_health:
        healths = check_all(processes, timeout=args.timeout)
    if args.json:
        documents = [p.model_dump(mode="json") for p in processes]
        for document, health in zip(documents, healths or [], strict=False):
            document["health"] = health.model_dump(mode="json")
        print(json.dumps(documents, indent=2))
        return 0

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


def _config(args: argparse.Namespace) -> Config:
    return Config(data_dir=args.data_dir) if args.data_dir else Config()


def _engine(name: str) -> EngineSpec | None:
    if name not in engine_ids():
        print(
            f"enginespec: unknown engine {name!r}; known engines: {', '.join(engine_ids())}", file=sys.stderr
        )
        return None
    return get_engine_spec(name)


def _cmd_install(args: argparse.Namespace) -> int:
    spec = _engine(args.engine)
    if spec is None:
        return 2
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True
    ) as bar:
        task = bar.add_task(f"installing {spec.id}", total=None)

        def progress(event: ProgressEvent) -> None:
            text = f"{event.phase.replace('_', ' ')}: {event.message}"[:100]
            bar.update(task, description=text, completed=event.fraction, total=1 if event.fraction else None)

        options = InstallOptions(version=args.version, python_path=args.python, progress=progress)
        try:
            result = spec.install(options, _config(args))
        except InvalidInputError as err:
            print(f"enginespec install: {err}", file=sys.stderr)
            return 2
        except InstallError as err:
            print(f"enginespec install: {err}", file=sys.stderr)
            if err.command:
                print(f"command: {shlex.join(err.command)}", file=sys.stderr)
            for line in err.output_tail[-15:]:
                print(f"  {line}", file=sys.stderr)
            return 1
    state = "already installed" if result.already_installed else "installed"
    print(
        f"{spec.id} {result.version} {state} ({result.location}: {result.python_path or result.binary_path})"
    )
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    specs = all_engine_specs()
    if args.engine:
        spec = _engine(args.engine)
        if spec is None:
            return 2
        specs = (spec,)
    infos = [spec.get_runtime_info(_config(args)) for spec in specs]
    if args.json:
        print(json.dumps([info.model_dump(mode="json") for info in infos], indent=2))
        return 0
    for info in infos:
        where = info.python_path or info.binary_path or "-"
        print(f"{info.engine:<10} {info.version or 'not installed':<18} {info.location:<8} {where}")
    return 0


def _cmd_help(args: argparse.Namespace) -> int:
    spec = _engine(args.engine)
    if spec is None:
        return 2
    try:
        print(spec.get_config_help(_config(args)).text)
    except InvalidInputError as err:
        print(f"enginespec help: {err}", file=sys.stderr)
        return 2
    except HelpError as err:
        print(f"enginespec help: {err}", file=sys.stderr)
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
    install = commands.add_parser("install", help="install an engine into its managed runtime (idempotent)")
    install.add_argument("engine")
    install.add_argument("--version", help="PEP 440 version or specifier (e.g. 0.10.2, '>=0.10,<0.12')")
    install.add_argument("--python", help="install into this interpreter instead of the managed venv")
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
