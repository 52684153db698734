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
from rich.text import Text

from enginespec._backend import BACKEND
from enginespec.argv import parse_argv, redact_argv
from enginespec.config import Config
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
from enginespec.health import check_all, check_health
from enginespec.installing import InstallOptions, ProgressEvent
from enginespec.recipe import Recipe
from enginespec.scanning import EngineProcess, Scanner
from enginespec.spec import EngineSpec
from enginespec.version import __version__


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


def _cmd_parse(args: argparse.Namespace) -> int:
    invocation = parse_argv(args.argv)
    if invocation is None:
        _fail("parse", f"not a server of a known engine: {shlex.join(redact_argv(args.argv))}")
        return 1
    print(invocation.model_dump_json(indent=2))
    return 0


def _cmd_command(args: argparse.Namespace) -> int:
    try:
        recipe = Recipe.from_file(args.recipe)
        command = get_engine_spec(recipe.engine).plan(recipe, strict=args.strict)
    except (RecipeFileError, CommandError) as err:
        _fail("command", err)
        return 2
    if args.json:  # the dump masks secrets (argv values, env_vars whose names say secret)
        print(command.model_dump_json(indent=2))
        return 0
    for name, value in command.redacted_env().items():
        print(literal(f"export {name}={shlex.quote(value)}"))
    print(literal(command.shell()))
    for warning in command.warnings:
        print(f"warning: {literal(warning)}", file=sys.stderr)
    if command.injected_flags:
        print(f"note: injected by defaults: {literal(' '.join(command.injected_flags))}", file=sys.stderr)
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

    # Every cell is plain Text shown literally: argv can carry rich markup and terminal escapes.
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
            p.base_url or "-",
            str(len(p.worker_pids)),
            p.supervisor or "-",
            ", ".join(map(str, p.listen_ports)) or "-",
        ]
        if healths is not None:
            row.append(healths[index].state)
        table.add_row(*(Text(literal(cell)) for cell in row))
    # Piped output is not cut to 80 columns: scripts grep it, people page it.
    width = None if sys.stdout.isatty() else 1000
    console = Console(width=width, markup=False, highlight=False, emoji=False)
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
            target, args.url, timeout=args.timeout, verify_identity=args.verify_identity, deep=args.deep
        )
    except InvalidInputError as err:
        _fail("health", err)
        return 2
    if args.json:
        print(health.model_dump_json(indent=2))
    else:
        latency = f" in {health.latency * 1000:.0f} ms" if health.latency is not None else ""
        reason = f": {health.reason}" if health.reason else ""
        print(literal(f"{health.engine} {health.base_url or '-'} {health.state}{reason}{latency}"))
    return 0 if health.ready else 1


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
    ps.add_argument("--timeout", type=_positive_seconds, default=2.0, help="health request timeout (seconds)")
    ps.set_defaults(handler=_cmd_ps)
    health = commands.add_parser(
        "health",
        help="check an engine server's health; exit 0 only when ready",
        description="TARGET is a pid (a server or one of its workers) or an engine id followed by the "
        "server's URL. Prints the state; exits 0 when ready, 1 otherwise, 2 on bad input.",
    )
    health.add_argument("target", help="pid, or engine id (vllm, sglang, llamacpp, mlx, ...)")
    health.add_argument("url", nargs="?", help="base URL when TARGET is an engine id")
    health.add_argument("--timeout", type=_positive_seconds, default=2.0, help="request timeout (seconds)")
    health.add_argument("--verify-identity", action="store_true", help="check /v1/models serves the model")
    health.add_argument("--deep", action="store_true", help="also ask for a one-token completion")
    health.add_argument("--json", action="store_true", help="print the Health as JSON")
    health.set_defaults(handler=_cmd_health)
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
