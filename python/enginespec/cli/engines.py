"""``command``, ``install``, ``info``, ``help`` and ``parse``: what enginespec knows of an engine
with none running: the serve command a recipe builds, the engine's managed install and what is
installed, its own full ``--help``, and which engine an argv starts."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from enginespec.cli.common import ENGINE_LIST, engine_ids, engine_names, fail, json_text, out
from enginespec.display import literal, literal_lines

if TYPE_CHECKING:
    from enginespec.config import Config
    from enginespec.spec import EngineSpec


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``command``, ``install``, ``info`` and ``help`` through the ``enginespec`` parser's
    maker of subcommands."""
    ids = ENGINE_LIST
    command_ = command(
        "command",
        "print the serve command (and environment) a recipe file builds",
        "Prints the environment delta as `export` lines and the shell-quoted argv, ready to run "
        "(`$PATH` stays a reference); secrets are redacted unless --show-secrets. A bad recipe "
        "exits 2 with a one-line error naming the field.",
        "enginespec command recipe.toml",
        "enginespec command --show-secrets recipe.toml > run.sh",
    )
    command_.add_argument("recipe", metavar="RECIPE", help="recipe file (.toml, .yaml, .yml or .json)")
    command_.add_argument("--json", action="store_true", help="print a JSON document instead")
    command_.add_argument("--strict", action="store_true", help="fail on fields the engine has no flag for")
    command_.add_argument("--show-secrets", action="store_true", help="print API keys and tokens as they are")
    command_.set_defaults(handler=_cmd_command)

    install = command(
        "install",
        "install an engine into its managed runtime (idempotent)",
        f"ENGINE is one of {ids}. Python engines go into a managed venv (or --python); binary "
        "engines are built from --source. Shows the phase and the installer's last line. Exits 0 "
        "when installed, 1 when the installer failed, 2 when refused before anything ran.",
        "enginespec install vllm",
        "enginespec install mlx --version '>=0.28'",
        "enginespec install llamacpp --source https://github.com/ggml-org/llama.cpp --ref b6000",
    )
    install.add_argument("engine", metavar="ENGINE", help="the engine to install")
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

    info = command(
        "info",
        "what is installed, where, and which version",
        f"One line per engine ({ids}), or for ENGINE only.",
        "enginespec info",
        "enginespec info vllm --json",
    )
    info.add_argument("engine", nargs="?", metavar="ENGINE", help="one engine only")
    info.add_argument("--json", action="store_true", help="print a JSON list of RuntimeInfo")
    info.set_defaults(handler=_cmd_info)

    help_ = command(
        "help",
        "help on a command, or an installed engine's own full --help",
        f"TOPIC is a command (ps, watch, ...) or an engine ({ids}).",
        "enginespec help ps",
        "enginespec help vllm",
    )
    help_.add_argument("topic", nargs="?", metavar="TOPIC", help="a command or an engine")
    help_.set_defaults(handler=_cmd_help)
    for sub in (install, info, help_):
        sub.add_argument(
            "--data-dir", help="data directory (default: $ENGINESPEC_DATA_DIR or the user data dir)"
        )


def add_parse(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``parse`` (the last command ``enginespec --help`` lists)."""
    parse = command(
        "parse",
        "recognise an engine server from its argv and print it as JSON",
        "Prints the recognised invocation as JSON; exits 1 when argv is not an engine server.",
        "enginespec parse -- vllm serve Qwen/Qwen3-8B --port 8001",
    )
    parse.add_argument("--json", action="store_true", help="JSON output (the only output)")
    parse.add_argument("argv", nargs=argparse.REMAINDER, help="the command line, after --")
    parse.set_defaults(handler=_cmd_parse)


def _config(args: argparse.Namespace) -> Config:
    from enginespec.config import Config

    return Config(data_dir=args.data_dir) if args.data_dir else Config()


def _engine(command: str, name: str) -> EngineSpec | None:
    from enginespec.engines import get_engine_spec
    from enginespec.errors import UnknownEngineError
    from enginespec.suggest import did_you_mean

    try:
        return get_engine_spec(engine_names().get(name.lower(), name))
    except UnknownEngineError as err:
        fail(command, f"{err}{did_you_mean(name, engine_names())}")
        return None


class _InstallProgress:
    """Install progress: on a terminal, a spinner, the phase, the installer's last line and the
    time taken; otherwise one line on stderr per phase."""

    def __init__(self, engine: str) -> None:
        self.phase = ""
        self.bar: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                SpinnerColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}", markup=False),
                console=Console(stderr=True, markup=False, highlight=False),
                transient=True,
            )
            self.task = self.bar.add_task(f"installing {engine}", total=None)

    def __enter__(self) -> _InstallProgress:
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def __call__(self, event: Any) -> None:
        phase = event.phase.replace("_", " ")
        last = next((line.strip() for line in reversed(event.new_output) if line.strip()), event.message)
        if self.bar is None:
            if phase != self.phase:
                print(literal(f"{phase}: {event.message}"), file=sys.stderr, flush=True)
            self.phase = phase
            return
        self.phase = phase
        import shutil

        room = max(shutil.get_terminal_size().columns - 16, 20)
        self.bar.update(self.task, description=literal(f"{phase}: {last}")[:room])


def _cmd_install(args: argparse.Namespace) -> int:
    import shlex

    from enginespec.errors import InstallError, InvalidInputError
    from enginespec.lifecycle.installing import InstallOptions

    spec = _engine(args.command, args.engine)
    if spec is None:
        return 2
    with _InstallProgress(spec.id) as progress:
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
            fail("install", err)
            return 2
        except InstallError as err:
            fail("install", err)
            if not err.command:  # refused before anything ran (no GPU for it, no installer)
                return 2
            print(f"command: {literal(shlex.join(err.command))}", file=sys.stderr)
            for line in err.output_tail[-15:]:
                print(f"  {literal(line)}", file=sys.stderr)
            return 1
    state = "already installed" if result.already_installed else "installed"
    where = result.python_path or result.binary_path
    out([literal(f"{spec.id} {result.version} {state} ({result.location}: {where})")])
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    from enginespec.engines import all_engine_specs

    specs = all_engine_specs()
    if args.engine:
        spec = _engine(args.command, args.engine)
        if spec is None:
            return 2
        specs = (spec,)
    config = _config(args)
    infos = [spec.get_runtime_info(config) for spec in specs]
    if args.json:
        from enginespec.untrusted.documents import dumps

        out([dumps([info.model_dump(mode="json") for info in infos], indent=2)])
        return 0
    rows = [
        [
            info.engine,
            info.version or "not installed",
            info.location,
            info.python_path or info.binary_path or "-",
        ]
        for info in infos
    ]
    from enginespec.cli.table import lines

    out(lines(["ENGINE", "VERSION", "LOCATION", "PATH"], [[literal(cell) for cell in row] for row in rows]))
    return 0


def _cmd_help(args: argparse.Namespace) -> int:
    from enginespec.errors import HelpError, InvalidInputError
    from enginespec.suggest import did_you_mean

    commands = args.parser_commands
    if args.topic is None:
        args.parser.print_help()
        return 0
    if args.topic in commands:
        commands[args.topic].print_help()
        return 0
    if args.topic.lower() not in engine_names():
        topics = {**{name: name for name in commands}, **engine_names()}
        fail(
            "help",
            f"{args.topic!r} is neither a command ({', '.join(commands)}) nor an engine "
            f"({', '.join(engine_ids())}){did_you_mean(args.topic, topics)}",
        )
        return 2
    spec = _engine(args.command, args.topic)
    if spec is None:
        return 2
    config = _config(args)
    try:
        out([literal_lines(spec.get_config_help(config).text)])
    except InvalidInputError as err:
        fail("help", err)
        return 2
    except HelpError as err:
        if spec.get_runtime_info(config).version is None:
            fail("help", f"{spec.id} is not installed; run: enginespec install {spec.id}")
        else:
            fail("help", err)
        return 1
    return 0


def _export_line(name: str, value: str) -> str:
    """``export NAME=value``; a PATH that is a directory put before the current PATH is written
    with ``$PATH``, so the line is right wherever it runs."""
    import shlex

    current = os.environ.get("PATH", os.defpath)
    if name == "PATH" and value.endswith(os.pathsep + current) and value != current:
        head = value[: -len(os.pathsep + current)]
        return f'export PATH={shlex.quote(head)}{os.pathsep}"$PATH"'
    return f"export {name}={shlex.quote(value)}"


def _cmd_command(args: argparse.Namespace) -> int:
    from enginespec.engines import get_engine_spec
    from enginespec.errors import CommandError, RecipeFileError
    from enginespec.lifecycle.recipe import Recipe

    try:
        recipe = Recipe.from_file(args.recipe)
        command = get_engine_spec(recipe.engine).plan(recipe, strict=args.strict)
    except (RecipeFileError, CommandError) as err:
        fail("command", err)
        return 2
    if args.json:  # the dump masks secrets (argv values, env_vars whose names say secret)
        from enginespec.untrusted.documents import dumps

        document = command.model_dump(mode="json")
        if args.show_secrets:
            document.update(argv=list(command.argv), env=dict(command.env))
        out([dumps(document, indent=2)])
        return 0
    env = dict(command.env) if args.show_secrets else command.redacted_env()
    lines = [literal(_export_line(name, value)) for name, value in env.items()]
    out([*lines, literal(command.shell(redact=not args.show_secrets))])
    for warning in command.warnings:
        print(f"warning: {literal(warning)}", file=sys.stderr)
    if command.injected_flags:
        print(f"note: injected by defaults: {literal(' '.join(command.injected_flags))}", file=sys.stderr)
    return 0


def _cmd_parse(args: argparse.Namespace) -> int:
    import shlex

    from enginespec.process.argv import parse_argv, redact_argv

    if args.argv[:1] == ["--"]:
        args.argv = args.argv[1:]
    if not args.argv:
        print("enginespec parse: give the command line after --", file=sys.stderr)
        return 2
    invocation = parse_argv(args.argv)
    if invocation is None:
        fail("parse", f"not a server of a known engine: {shlex.join(redact_argv(args.argv))}")
        return 1
    out([json_text(invocation)])
    return 0
