"""What an engine is, as data: the signature its processes are recognised by, the definition's
records and hooks, the registry of built-in and plugin engines, version specifiers and which
interpreter or binary launches it. Nothing here reads the host."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """The names the module ``enginespec.definition`` had, from where they live now (deprecated)."""
    from enginespec._moved import forwarded

    return forwarded("definition", name)
