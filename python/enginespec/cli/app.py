"""The ``enginespec`` command: its entry point and top-level parser; each command family (one
module of this folder) adds its own subcommands.

Each command imports what it needs when it runs (the scanner, httpx, rich, prometheus-client), so
``enginespec --version`` and ``ps --no-health`` start in a fraction of the time that importing
everything takes: ``--version`` is answered before argparse or any family is imported, and a
family imports only argparse and the CLI's own small modules to declare its flags. Exit codes: 0
done, 1 the answer is "no" (not ready, install failed), 2 bad input or a refusal before anything
ran, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from enginespec.packageversion import __version__

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence


#: An old command name -> the command's name now: the old one works for one more release.
RENAMED: dict[str, str] = {}


def _backend() -> str:
    from enginespec._host.backend import BACKEND

    return BACKEND


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    import argparse

    from enginespec.cli import engines, fleet, inspecting, lifecycle, models, ps, runs, served, watch
    from enginespec.cli.common import ENGINE_LIST
    from enginespec.cli.helptext import Formatter, examples

    parser = argparse.ArgumentParser(
        prog="enginespec",
        description=f"Know, find and probe local LLM inference engines.\n\nengines: {ENGINE_LIST}",
        epilog=examples(
            "enginespec ps                      # the engine servers on this host",
            "enginespec watch                   # the same, live",
            "enginespec describe 1234           # everything about one (pid or engine id)",
            "enginespec health --wait 1234      # wait until it serves",
            "enginespec command recipe.toml     # the serve command a recipe builds",
            "enginespec help ps                 # help on a command",
        ),
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"enginespec {__version__} ({_backend()})")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subs: dict[str, argparse.ArgumentParser] = {}

    def command(
        name: str, summary: str, description: str, *example: str, renamed_from: str | None = None
    ) -> argparse.ArgumentParser:
        """A subcommand, read as every other: its summary, description and examples; a command
        ``renamed_from`` an old name still answers to it, saying so (see :data:`RENAMED`)."""
        sub = commands.add_parser(
            name,
            aliases=[renamed_from] if renamed_from else [],
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}",
            epilog=examples(*example) if example else None,
            formatter_class=Formatter,
        )
        subs[name] = sub
        if renamed_from:
            subs[renamed_from] = sub
            RENAMED[renamed_from] = name
        return sub

    # in the order `enginespec --help` lists the commands
    adders: tuple[Callable[[Callable[..., argparse.ArgumentParser]], None], ...] = (
        ps.add_commands,
        watch.add_commands,
        inspecting.add_commands,
        engines.add_commands,
        fleet.add_commands,
        lifecycle.add_commands,
        runs.add_commands,
        models.add_commands,
        served.add_commands,
        engines.add_parse,
    )
    for add in adders:
        add(command)
    return parser, subs


def _run(argv: list[str]) -> int:
    if argv == ["--version"]:  # answered before the parser (and argparse) is built
        print(f"enginespec {__version__} ({_backend()})", flush=True)
        return 0
    parser, subs = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # the usage of the command that got it, not the top-level one
        subs[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    args.parser, args.parser_commands = parser, subs
    if args.command in RENAMED:
        now = f"'enginespec {RENAMED[args.command]}'"
        print(
            f"enginespec: '{args.command}' is now {now} (the old name works until the next release)",
            file=sys.stderr,
            flush=True,
        )
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # The reader went away (`enginespec ps | head`): stop quietly, as Unix tools do, and keep
        # Python from complaining about the unflushed stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C: the shell's convention (128 + SIGINT), no traceback.
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
