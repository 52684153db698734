"""Running engines: recipes, the commands built from them, installing and probing, launch, stop,
adopt and supervise, and the log book of each run."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """The names the module ``enginespec.lifecycle`` had, from where they live now (deprecated)."""
    from enginespec._moved import forwarded

    return forwarded("lifecycle", name)
