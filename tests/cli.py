"""Runs the real `enginespec` command in a subprocess (the backend comes from the environment)."""

from __future__ import annotations

import os
import subprocess
import sys


def enginespec(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    """``enginespec ARGS...``; output kept as bytes, so the test sees exactly what a terminal would."""
    return subprocess.run(
        [sys.executable, "-m", "enginespec.cli", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
