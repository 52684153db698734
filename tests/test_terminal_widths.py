"""`enginespec ps` in a real terminal (tmux) at 80, 120 and 200 columns: no line longer than the
width, no cell split, endpoints, engine ids and states whole."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from procs import Procs

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by .ci/run")


@pytest.fixture
def tmux() -> Iterator[list[str]]:
    base = ["tmux", "-L", f"enginespec-test-{os.getpid()}", "-f", "/dev/null"]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True, check=False, timeout=120)


def _screen(tmux: list[str], width: int, command: list[str]) -> list[str]:
    """The lines a terminal of ``width`` columns shows for ``command`` (wrapped lines joined)."""
    done = f"/tmp/enginespec-tmux-{os.getpid()}-{width}"
    shell = f"{shlex.join(command)}; touch {done}; sleep 600"
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(width), "-y", "50", "-s", f"w{width}", shell],
        check=True,
        env={**os.environ, "COLUMNS": str(width), "TERM": "xterm-256color"},
        timeout=120,
    )
    deadline = time.monotonic() + 60
    while not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.unlink(done)
    # -S -: from the start of the history, in case other engines on the host scrolled the header off
    out = subprocess.run(
        [*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", f"w{width}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    subprocess.run([*tmux, "kill-session", "-t", f"w{width}"], check=False, timeout=120)
    return [line.rstrip() for line in out.stdout.splitlines() if line.strip()]


def _shortened_in_the_middle(line: str, whole: str) -> bool:
    """Whether ``line`` shows ``whole`` as its start, an ellipsis and its end (how much of each
    depends on the other engines on the host: their cells share the width)."""
    cell = next(word for word in line.split() if "…" in word)
    head, tail = cell.split("…")
    return bool(head) and bool(tail) and whole.startswith(head) and whole.endswith(tail)


@pytest.mark.parametrize("width", [80, 120, 200])
def test_ps_fits_the_terminal(procs: Procs, tmux: list[str], width: int) -> None:
    long_model = "/data/models/" + "/".join(["very-long-directory-name"] * 6) + "/Qwen3-30B-A3B-Instruct.gguf"
    started = {
        procs.start(
            ["llama-server", "-m", long_model, "--port", "18181", "--alias", "a-long-served-name,b"]
        ).pid,
        procs.start(["vllm", "serve", "Qwen/Qwen3-8B", "--port", "18182", "--host", "::1"]).pid,
        procs.start(["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000"]).pid,
    }
    lines = _screen(tmux, width, [sys.executable, "-m", "enginespec.cli", "ps"])
    assert lines[0].split()[:2] == ["PID", "ENGINE"]
    ours = [line for line in lines if line.split()[0].isdigit() and int(line.split()[0]) in started]
    assert len(ours) == len(started)  # one line each
    for line in lines:
        assert len(line) <= width, line
    text = "\n".join(ours)
    for whole in ("llamacpp", "vllm", "sglang", ":18181", "[::1]:18182", "127.0.0.1:30000"):
        assert whole in text
    assert sum(state in line for line in ours for state in ("starting", "unknown", "down")) == len(ours)
    # a long path is shortened in the middle (how much depends on the other engines on the host)
    (llama_line,) = (line for line in ours if "llamacpp" in line)
    assert _shortened_in_the_middle(llama_line, long_model)
    if width == 80:
        wide = _screen(tmux, width, [sys.executable, "-m", "enginespec.cli", "ps", "--no-health", "--wide"])
        assert long_model in "\n".join(wide)  # --wide shows everything


@pytest.mark.parametrize("width", [80, 120, 200])
def test_watch_fits_the_terminal_and_ctrl_c_exits_0(procs: Procs, tmux: list[str], width: int) -> None:
    long_model = "/data/models/" + "/".join(["very-long-directory-name"] * 6) + "/Qwen3-30B-A3B-Instruct.gguf"
    started = {
        procs.start(
            ["llama-server", "-m", long_model, "--port", "18191", "--alias", "a-long-served-name"]
        ).pid,
        procs.start(["vllm", "serve", "Qwen/Qwen3-8B", "--port", "18192", "--host", "::1"]).pid,
    }
    done = f"/tmp/enginespec-tmux-watch-{os.getpid()}-{width}"
    command = [sys.executable, "-m", "enginespec.cli", "watch", "--interval", "200ms"]
    shell = f"{shlex.join(command)}; echo $? > {done}; sleep 600"
    session = f"watch{width}"
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(width), "-y", "50", "-s", session, shell],
        check=True,
        env={**os.environ, "COLUMNS": str(width), "TERM": "xterm-256color"},
        timeout=120,
    )

    def screen() -> list[str]:
        out = subprocess.run(
            [*tmux, "capture-pane", "-p", "-J", "-t", session],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return [line.rstrip() for line in out.stdout.splitlines() if line.strip()]

    def ours(lines: list[str]) -> list[str]:
        return [line for line in lines if line.split()[0].isdigit() and int(line.split()[0]) in started]

    # the table is drawn, then the health checks fill in its last column
    deadline = time.monotonic() + 60
    while not (len(ours(lines := screen())) == 2 and all(line.split()[-1] != "?" for line in ours(lines))):
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    for line in lines:
        assert len(line) <= width, line
    text = "\n".join(ours(lines))
    for whole in ("llamacpp", "vllm", "127.0.0.1:18191", "[::1]:18192"):
        assert whole in text
    # a long path is shortened in the middle (how much depends on the other engines on the host)
    (llama_line,) = (line for line in ours(lines) if "llamacpp" in line)
    assert _shortened_in_the_middle(llama_line, long_model)
    assert any("engine server(s)" in line for line in lines)
    subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=True, timeout=120)
    while not os.path.exists(done):
        assert time.monotonic() < deadline + 30
        time.sleep(0.05)
    with open(done) as file:
        assert file.read().strip() == "0"
    os.unlink(done)
    assert not any("Traceback" in line for line in screen())
    subprocess.run([*tmux, "kill-session", "-t", session], check=False, timeout=120)
