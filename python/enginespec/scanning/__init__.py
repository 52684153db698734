"""Finding engines: the scanner and its stages, and the watch that turns scans into events."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """The names the module ``enginespec.scanning`` had, from where they live now (deprecated)."""
    from enginespec._moved import forwarded

    return forwarded("scanning", name)
