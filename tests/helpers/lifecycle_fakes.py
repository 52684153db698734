"""Fake engines for the lifecycle tests: tests/helpers/fake_engine.py installed as an executable named
``llama-server`` (so argv is a llama-server's and a scan finds it), and recipes that run it."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from pathlib import Path

from enginespec import Recipe
from helpers.fakeserver import free_port

FAKE_SOURCE = Path(__file__).parent / "fake_engine.py"
HOST = "127.0.0.1"


def install_fake(directory: Path, interpreter: str = sys.executable) -> Path:
    """``directory/bin/llama-server``: the fake engine, run by this interpreter (or another
    one: a fake run as `nobody` needs one that user may run)."""
    binary = directory / "bin" / "llama-server"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!{interpreter}\n" + FAKE_SOURCE.read_text())
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def fake_recipe(binary: Path, port: int, mode: str, **env: str) -> Recipe:
    return Recipe(
        engine="llamacpp",
        model_path=str(binary.parent / "model.gguf"),
        host=HOST,
        port=port,
        binary_path=str(binary),
        env_vars={"FAKE_MODE": mode, "FAKE_LIFETIME": "60", **env},
    )


def recipe_file(directory: Path, mode: str, **env: str) -> tuple[Path, Recipe]:
    """A recipe that runs the fake engine (installed in ``directory``) in ``mode`` on a free port,
    written to ``directory/recipe.json`` for `enginespec run`."""
    recipe = fake_recipe(install_fake(directory), free_port(), mode, **env)
    path = directory / "recipe.json"
    path.write_text(recipe.model_dump_json())
    return path, recipe


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            state = file.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, 9)


def until_ready(run: subprocess.Popen[bytes]) -> tuple[bytes, int]:
    """What `enginespec run` (stderr piped) said up to its "ready at" line, and the engine's pid
    (from its "started ... pid N;" line)."""
    assert run.stderr is not None
    seen = b""
    while b"ready at" not in seen:
        line = run.stderr.readline()
        assert line, seen.decode()
        seen += line
    return seen, int(seen.split(b" pid ")[1].split(b";")[0])
