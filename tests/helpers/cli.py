"""Runs the real `enginespec` command in a subprocess (the backend comes from the environment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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


def enginespec_in_background(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``enginespec ARGS...`` left running (``env``: variables set for it), its output discarded
    (nothing reads it: a pipe would fill and stall it); the caller stops it
    (``helpers.procs.stop_child``) in a ``finally``."""
    return subprocess.Popen(
        [sys.executable, "-m", "enginespec.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``enginespec ARGS...`` as a user runs it: the console script beside this Python (``-m
    enginespec.cli.app`` where there is none), output as text."""
    script = Path(sys.executable).with_name("enginespec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "enginespec.cli"]
    return subprocess.run(
        [*command, *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
