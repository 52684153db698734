"""How ``enginespec --help`` and every command's help read: prose paragraphs wrapped to the
terminal, examples as written, every option's default shown as one types it, and the list of
engines filled in only when help is printed. Imported with argparse, when a command line is parsed
(``--version`` is answered without it)."""

from __future__ import annotations

import argparse

from enginespec.cli import args as cliargs
from enginespec.cli.args import duration, grace
from enginespec.cli.common import ENGINE_LIST, engine_ids


class Formatter(argparse.HelpFormatter):
    """Prose paragraphs wrapped to the terminal, examples as written, and every option's default
    shown (when it has one)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        text = text.replace(ENGINE_LIST, ", ".join(engine_ids()))
        paragraphs = []
        for paragraph in text.split("\n\n"):
            if paragraph.startswith("examples:"):
                paragraphs.append(textwrap.indent(paragraph, indent))
            else:
                paragraphs.append(
                    textwrap.fill(
                        " ".join(paragraph.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,  # engine ids (llamacpp-python) stay whole
                    )
                )
        return "\n\n".join(paragraphs)

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and action.option_strings
            and default not in (None, False, [], argparse.SUPPRESS)
            and not isinstance(action, argparse._VersionAction)
        ):
            shown_default = cliargs.shown(default) if action.type in (duration, grace) else "%(default)s"
            text += f" (default: {shown_default})"
        return text


def examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)
