"""The ``enginespec`` command."""

from __future__ import annotations

import argparse
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
