"""The ``enginespec`` command: its parser and commands, one module per command family, the table
layout and the arguments people type."""

from enginespec.cli.main import main

__all__ = ["main"]
