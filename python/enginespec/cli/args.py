"""The grammar of the values the ``enginespec`` command line takes: durations and ports, as
argparse types shared by every command (:mod:`enginespec.cli.app`, :mod:`enginespec.cli.lifecycle`,
:mod:`enginespec.cli.models`). A module of its own because those two are imported by ``cli`` and
cannot import it back; one parser, so ``--timeout 2s`` means what ``--interval 2s`` does."""

from __future__ import annotations

import argparse
import math

#: The units a duration takes, longest suffix first (``ms`` before ``m`` and ``s``).
_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
GRAMMAR = "500ms, 2s, 10m, 1h, or a number of seconds"


def _seconds(text: str, *, zero: bool) -> float:
    """Seconds from ``2``, ``2.5``, ``2s``, ``500ms``, ``10m`` or ``1h``; argparse names the flag
    before the message, which names the value."""
    number, scale = text, 1.0
    for suffix, unit in _UNITS:
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], unit
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration ({GRAMMAR})") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "zero or more" if zero else "more than zero"
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration of {least} ({GRAMMAR})")
    return value


def duration(text: str) -> float:
    """A positive duration (an interval, a timeout)."""
    return _seconds(text, zero=False)


def grace(text: str) -> float:
    """A duration that may be zero (``--grace 0``: SIGKILL at once)."""
    return _seconds(text, zero=True)


def shown(seconds: float) -> str:
    """A duration as the grammar writes it (``500ms``, ``2s``, ``10m``, ``1h``, ``2.5s``): how
    ``--help`` shows a default, so the default reads as what one types."""
    for suffix, unit in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        count = seconds / unit
        if count >= 1 and count == int(count):
            return f"{int(count)}{suffix}"
    return f"{seconds * 1000:g}ms" if 0 < seconds < 1 else f"{seconds:g}s"


def port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return int(text)
