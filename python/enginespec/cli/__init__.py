"""The ``enginespec`` command: its parser and commands, one module per command family, the table
layout and the arguments people type."""

from enginespec.cli.app import main

__all__ = ["main"]
