"""Supervisors, one rule as engine data (issue 40): a stock engine a supervisor started is its
runner for one model, whether the supervisor is its parent, an ancestor above a shell or wrapper
(`Serving.supervisors`), or says so in the environment it gives it (`Serving.supervisor_markers`:
llama.cpp's router sets LLAMA_SERVER_ROUTER_PORT); a look-alike is none. Real processes with exact
argv and environment; both backends."""

from __future__ import annotations

from pathlib import Path

from enginespec import EngineProcess, Scanner
from helpers.procs import Procs, descendants_of, wait_for

SEP, ARG = "\x1e", "\x1f"


def _llama(pid: int) -> bool:
    try:
        return b"\0-m\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _scanned_under(root_pid: int, count: int) -> list[EngineProcess]:
    """The engine records of the llama-servers under ``root_pid``, once ``count`` of them exec'd."""
    wait_for(lambda: sum(map(_llama, descendants_of(root_pid))) == count, timeout=20)
    found = [p for p in Scanner().scan() if p.pid in descendants_of(root_pid) and p.engine == "llamacpp"]
    assert len(found) == count, found
    return found


def test_a_supervisor_above_a_shell_is_found(procs: Procs) -> None:
    """Ollama starting its runner through a shell: the runner's parent is `sh`, Ollama above it."""
    runner = ARG.join(["llama-server", "-m", "/blobs/sha256-2", "--port", "41011"])
    ollama = procs.start(
        ["/usr/local/bin/ollama", "serve"],
        HELPER_SPAWN="sh",
        HELPER_SPAWN_ENV=f"HELPER_SPAWN={runner}",
    )
    (found,) = _scanned_under(ollama.pid, 1)
    assert found.ppid != ollama.pid  # its parent is the shell
    assert (found.supervisor, found.role) == ("ollama", "runner")


def test_a_routers_mark_in_the_environment_makes_a_runner(procs: Procs) -> None:
    """A llama-server whose parent is no engine (a launcher script) but whose environment has the
    router's mark is the router's runner; the same argv without it is a server of its own."""
    marked = ARG.join(["llama-server", "-m", "/m/a.gguf", "--port", "41012"])
    launcher = procs.start(
        ["python3", "launch.py"], HELPER_SPAWN=marked, HELPER_SPAWN_ENV="LLAMA_SERVER_ROUTER_PORT=8080"
    )
    (child,) = _scanned_under(launcher.pid, 1)
    assert (child.supervisor, child.role) == ("llama-server", "runner")
    plain = procs.start(
        ["python3", "launch.py"],
        HELPER_SPAWN=ARG.join(["llama-server", "-m", "/m/b.gguf", "--port", "41013"]),
    )
    (alone,) = _scanned_under(plain.pid, 1)
    assert (alone.supervisor, alone.role) == (None, "server")


def test_a_look_alike_ancestor_is_no_supervisor(procs: Procs) -> None:
    """A program whose name merely contains a supervisor's (`ollama-backup`) is none."""
    runner = ARG.join(["llama-server", "-m", "/m/c.gguf", "--port", "41014"])
    other = procs.start(
        ["/usr/bin/ollama-backup", "run"], HELPER_SPAWN="sh", HELPER_SPAWN_ENV=f"HELPER_SPAWN={runner}"
    )
    (found,) = _scanned_under(other.pid, 1)
    assert (found.supervisor, found.role) == (None, "server")
