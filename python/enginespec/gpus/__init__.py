"""Which GPUs a host has and which processes hold them: the reader, one module per vendor behind
one protocol (vendor.py), NVIDIA's library, and the ids that name a device."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """The names the module ``enginespec.gpus`` had, from where they live now (deprecated)."""
    from enginespec._moved import forwarded

    return forwarded("gpus", name)
