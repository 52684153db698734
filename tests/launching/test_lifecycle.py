"""Launch, logs, wait, stop and restart with fake engines that are real processes (see
lifecycle_fakes and fake_engine.py): a server, a replayed start-up failure, a setsid grandchild, a
SIGTERM-ignoring engine, a 50,000-line flood."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

import enginespec
from enginespec import LaunchFailed, RunningEngine, launch
from enginespec.lifecycle.logbook import LogBook, follow_file
from enginespec.lifecycle.logsources import find_log_source
from enginespec.lifecycle.ports import extra_ports
from enginespec.process.liveness import process_alive
from helpers.fakeserver import free_port
from helpers.lifecycle_fakes import HOST, fake_recipe, install_fake, kill_quietly, pid_alive
from helpers.procs import Procs

CORPUS = Path(__file__).parents[1] / "data" / "failures-public.jsonl"
LLAMACPP_RECORDS = [
    record for record in map(json.loads, CORPUS.read_text().splitlines()) if record["engine"] == "llamacpp"
]


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    return install_fake(tmp_path)


@pytest.fixture
def started() -> Iterator[list[RunningEngine]]:
    """Engines a test launched: stopped (and their processes killed) afterwards, whatever happened."""
    engines: list[RunningEngine] = []
    try:
        yield engines
    finally:
        for engine in engines:
            pids = [engine.pid, *engine._known]
            try:
                engine.close()
            finally:
                for pid in pids:
                    if pid_alive(pid):
                        kill_quietly(pid)


def _launch(
    started: list[RunningEngine], binary: Path, mode: str, tmp_path: Path, **env: str
) -> RunningEngine:
    engine = launch(fake_recipe(binary, free_port(), mode, **env), log_dir=tmp_path / "logs")
    started.append(engine)
    return engine


def test_launch_wait_stop(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    recipe = fake_recipe(binary, free_port(), "serve").model_copy(
        update={
            "api_key": SecretStr("sk-very-secret"),
            "env_vars": {"FAKE_MODE": "serve", "HF_TOKEN": "hf_abcdef"},
        }
    )
    engine = launch(recipe, log_dir=tmp_path / "logs")
    started.append(engine)
    # own session and process group, argv and environment shown masked
    assert os.getpgid(engine.pid) == engine.pid
    assert os.getsid(engine.pid) == engine.pid
    assert "sk-very-secret" not in " ".join(engine.argv)
    assert "***" in engine.argv
    assert engine.env["HF_TOKEN"] == "***"
    assert engine.env["FAKE_MODE"] == "serve"
    health = engine.wait_ready(timeout=30)
    assert health.state == "ready"
    # the fake prints its argv: the key is masked in what is kept
    first = [line for line in engine.logs(50) if "argv" in line.text]
    assert first
    assert "sk-very-secret" not in first[0].text
    assert "***" in first[0].text
    assert engine.log_path is not None
    assert engine.log_path.parent == tmp_path / "logs" / engine.instance_id
    assert "sk-very-secret" not in engine.log_path.read_text()
    result = engine.stop(grace=10)
    assert result.leftover == ()
    assert result.port_holders == ()
    assert result.signal == signal.SIGTERM
    assert result.signals[0].target == "group"
    assert result.signals[0].signal == "SIGTERM"
    assert not pid_alive(engine.pid)
    # the file survives the stop and says so
    assert "enginespec: stopped" in engine.log_path.read_text()


def test_spec_start_is_launch(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    spec = enginespec.get_engine_spec("llamacpp")
    engine = spec.start(fake_recipe(binary, free_port(), "serve"), log_dir=tmp_path)
    started.append(engine)
    assert engine.wait_ready(timeout=30).state == "ready"
    with pytest.raises(enginespec.CommandError, match="not 'vllm'"):
        enginespec.get_engine_spec("vllm").start(fake_recipe(binary, free_port(), "serve"))


@pytest.mark.parametrize("record", LLAMACPP_RECORDS, ids=lambda r: f"{r['class']}:{r['source']}")
def test_replayed_failure_is_raised_classified(
    record: dict[str, object], binary: Path, tmp_path: Path, started: list[RunningEngine]
) -> None:
    log = tmp_path / "replay.log"
    log.write_text(str(record["log"]) + "\n")
    engine = _launch(started, binary, "replay", tmp_path, FAKE_LOG=str(log), FAKE_EXIT="1")
    with pytest.raises(LaunchFailed) as raised:
        engine.wait_ready(timeout=30)
    failure = raised.value.failure
    assert failure.kind == record["class"]
    assert failure.exit_code == 1
    assert set(failure.cause_lines) & set(record["cause_lines"])  # type: ignore[arg-type]
    assert failure.kind in str(raised.value)


def test_a_port_in_use_names_the_process_holding_it(
    binary: Path, tmp_path: Path, started: list[RunningEngine], procs: Procs
) -> None:
    """The port a bind failure names (here a port the engine took besides its own) is held by
    another engine: the hint says which, as a scan sees it."""
    holder = procs.start(["vllm", "serve", "/models/q", "--port", "0"], HELPER_LISTEN="1")
    assert holder.stdout is not None
    port = int(holder.stdout.readline().strip().rsplit(b":", 1)[-1])
    log = tmp_path / "replay.log"
    log.write_text(f"main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {port}\n")
    engine = _launch(started, binary, "replay", tmp_path, FAKE_LOG=str(log), FAKE_EXIT="1")
    with pytest.raises(LaunchFailed) as raised:
        engine.wait_ready(timeout=30)
    failure = raised.value.failure
    assert (failure.kind, failure.figures.port) == ("port_in_use", port)
    assert failure.hint is not None
    assert failure.hint.endswith(f": port {port} is held by pid {holder.pid}: vllm /models/q")


def test_failure_of_a_server_that_stays_up(
    binary: Path, tmp_path: Path, started: list[RunningEngine]
) -> None:
    log = tmp_path / "replay.log"
    cause = "llama_model_load: error loading model: unknown model architecture: 'qwen9'"
    log.write_text(f"llama_model_loader: loaded meta data\n{cause}\n")
    engine = _launch(started, binary, "unavailable", tmp_path, FAKE_LOG=str(log))
    with pytest.raises(LaunchFailed) as raised:
        engine.wait_ready(timeout=30)
    assert raised.value.failure.kind == "unsupported_architecture"
    assert raised.value.failure.cause_lines == (cause,)
    # it was stopped
    assert raised.value.failure.signal == signal.SIGTERM
    assert not pid_alive(engine.pid)


def test_exit_by_signal_is_killed(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    log = tmp_path / "replay.log"
    log.write_text("load_tensors: loading model tensors\n")
    engine = _launch(started, binary, "replay", tmp_path, FAKE_LOG=str(log), FAKE_SIGNAL="9")
    with pytest.raises(LaunchFailed) as raised:
        engine.wait_ready(timeout=30)
    assert raised.value.failure.kind in ("killed", "cpu_oom")
    assert raised.value.failure.signal == 9


def test_port_held_by_an_engine_is_refused_naming_it(
    binary: Path, tmp_path: Path, started: list[RunningEngine]
) -> None:
    first = _launch(started, binary, "serve", tmp_path)
    first.wait_ready(timeout=30)
    assert first.port is not None
    with pytest.raises(LaunchFailed) as raised:
        launch(fake_recipe(binary, first.port, "serve"), log_dir=tmp_path)
    failure = raised.value.failure
    assert failure.kind == "port_in_use"
    assert failure.numbers["port"] == first.port
    assert failure.cause_lines == (
        f"port {first.port} is held by pid {first.pid}: llamacpp {binary.parent / 'model.gguf'}",
    )


def test_port_bound_but_not_listening_fails_in_the_engine(
    binary: Path, tmp_path: Path, started: list[RunningEngine]
) -> None:
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        port = holder.getsockname()[1]
        engine = launch(fake_recipe(binary, port, "serve"), log_dir=tmp_path)
        started.append(engine)
        with pytest.raises(LaunchFailed) as raised:
            engine.wait_ready(timeout=30)
    assert raised.value.failure.kind == "port_in_use"
    assert raised.value.failure.numbers["port"] == port


def test_setsid_grandchild_is_stopped(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    pidfile = tmp_path / "grandchild.pid"
    engine = _launch(started, binary, "grandchild", tmp_path, FAKE_PIDFILE=str(pidfile))
    engine.wait_ready(timeout=30)
    grandchild = int(pidfile.read_text())
    assert os.getsid(grandchild) != engine.pid
    assert pid_alive(grandchild)
    try:
        result = engine.stop(grace=5)
        assert not pid_alive(grandchild)
        assert result.leftover == ()
        assert any(s.pid == grandchild and s.target == "process" for s in result.signals)
    finally:
        kill_quietly(grandchild)


def test_sigterm_ignored_is_killed_after_grace(
    binary: Path, tmp_path: Path, started: list[RunningEngine]
) -> None:
    engine = _launch(started, binary, "stubborn", tmp_path)
    engine.wait_ready(timeout=30)
    result = engine.stop(grace=0.5)
    assert result.signal == signal.SIGKILL
    assert engine.pid in result.killed
    assert [s.signal for s in result.signals if s.target == "group"] == ["SIGTERM", "SIGKILL"]
    assert result.leftover == ()
    assert result.port_holders == ()


def test_an_ended_writers_last_lines_are_given_however_slow_the_reader() -> None:
    """A process writes its lines and exits while a descendant (here: this test) keeps the pipe
    open, and the reader is slow (masking thousands of secrets takes it about a second a read):
    follow and settle wait for the bytes the pipe and the reader still hold, not for a quiet
    moment, which a busy host's reader can leave at any time (CI lost the last 800 of 50,000)."""
    count = 12_000
    read_end, write_end = os.pipe()
    book = LogBook(None, secrets=[f"secret-{n:05d}" for n in range(4000)], ring_lines=count)
    book.attach("stdout", os.fdopen(read_end, "rb", buffering=0))
    script = f"import sys; sys.stdout.write(''.join(f'line {{n}}\\n' for n in range({count})))"
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=write_end, stdin=subprocess.DEVNULL)
    try:
        given = [line.text for line in book.follow(ended=lambda: writer.poll() is not None)]
        assert given == [f"line {n}" for n in range(count)]
        assert book.settle(0)  # the pipe is still open, and all it held is stored
    finally:
        os.close(write_end)
        kill_quietly(writer.pid)
        writer.wait(timeout=10)


def test_a_followed_log_file_is_read_to_its_end_once_the_engine_is_gone(tmp_path: Path) -> None:
    """An adopted engine's log file: what it wrote just before it ended (several reads' worth,
    and a last line without its newline) is all given after ``until`` is set, then it ends."""
    log = tmp_path / "engine.log"
    log.write_text("written before the following began\n")
    gone = threading.Event()
    given: list[str] = []
    follower = threading.Thread(
        target=lambda: given.extend(follow_file(log, until=gone, poll=0.2)), daemon=True
    )
    follower.start()
    try:
        with open(log, "a") as file:
            while not given:  # the follower is at the end of the file once it gives a line
                file.write("ping\n")
                file.flush()
                time.sleep(0.05)
            last = [f"line {n}" for n in range(20_000)]
            file.write("\n".join(last) + "\n" + "no newline")
            file.flush()
        gone.set()
        follower.join(timeout=30)
        assert not follower.is_alive()
    finally:
        gone.set()
    assert "written before the following began" not in given
    assert given[-20_001:] == [*last, "no newline"]
    assert set(given[:-20_001]) == {"ping"}


def test_flood_loses_no_line(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    count = 50_000
    engine = launch(
        fake_recipe(binary, free_port(), "flood", FAKE_LINES=str(count)),
        log_dir=tmp_path,
        ring_lines=count + 100,
    )
    started.append(engine)
    seen = [line.text for line in engine.follow(n=10)]
    numbers = sorted(int(text.split()[1]) for text in seen if text.startswith("line "))
    assert numbers == list(range(count))
    kept = [line for line in engine.logs(count + 100) if line.text.startswith("line ")]
    assert len(kept) == count
    assert {line.stream for line in kept} == {"stdout", "stderr"}
    assert engine.log_path is not None
    in_file = [text for text in engine.log_path.read_text().splitlines() if " line " in text]
    assert len(in_file) == count
    assert engine.wait(timeout=30) == (0, None)
    failure = engine.failure()
    assert failure is not None
    assert failure.kind == "exited"
    assert failure.exit_code == 0


def test_ring_is_bounded_and_logs_n(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    engine = launch(
        fake_recipe(binary, free_port(), "flood", FAKE_LINES="5000"), log_dir=tmp_path, ring_lines=2000
    )
    started.append(engine)
    list(engine.follow())
    assert len(engine.logs(10_000)) == 2000
    assert [line.text for line in engine.logs(2)] == ["line 4998", "line 4999"] or len(engine.logs(2)) == 2
    assert engine.logs(0) == []


def test_restart_same_command_new_log(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    engine = _launch(started, binary, "serve", tmp_path)
    engine.wait_ready(timeout=30)
    first_pid, first_log, argv, cwd = engine.pid, engine.log_path, engine.argv, engine.cwd
    assert cwd == os.getcwd()
    engine.restart(grace=5)
    assert engine.restart_count == 1
    assert engine.pid != first_pid
    assert not pid_alive(first_pid)
    assert engine.argv == argv
    assert engine.cwd == cwd
    assert engine.wait_ready(timeout=30).state == "ready"
    assert first_log is not None
    assert first_log.exists()
    assert engine.log_path is not None
    assert engine.log_path != first_log
    assert engine.log_path.parent == first_log.parent


def test_supervision_restarts_on_exit(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    log = tmp_path / "replay.log"
    log.write_text("error: invalid argument: --nope\n")
    recipe = fake_recipe(binary, free_port(), "replay", FAKE_LOG=str(log), FAKE_EXIT="1")
    policy = enginespec.Supervision(check_interval=0.05, backoff=0.01, max_restarts=2)
    engine = launch(recipe, log_dir=tmp_path, supervise=policy)
    started.append(engine)
    done = threading.Event()

    def watch() -> None:
        while engine.restart_count < 2 and not done.is_set():
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    watcher.join(timeout=60)
    done.set()
    assert engine.restart_count == 2
    assert len(list((tmp_path / engine.instance_id).iterdir())) == 3


def test_no_supervision_by_default(binary: Path, tmp_path: Path, started: list[RunningEngine]) -> None:
    log = tmp_path / "replay.log"
    log.write_text("bye\n")
    engine = _launch(started, binary, "replay", tmp_path, FAKE_LOG=str(log), FAKE_EXIT="0")
    list(engine.follow())
    assert engine.wait(timeout=30) == (0, None)
    assert engine.failure() is not None
    assert engine.restart_count == 0


LOOPS = int(os.environ.get("ENGINESPEC_LIFECYCLE_LOOPS", "5"))


@pytest.mark.parametrize("mode", ["serve", "grandchild", "stubborn", "replay", "flood"])
def test_many_launches_leave_nothing(
    mode: str, binary: Path, tmp_path: Path, started: list[RunningEngine]
) -> None:
    """LOOPS launches of a variant (ENGINESPEC_LIFECYCLE_LOOPS, 200 in the opt-in run): each one
    ends with no pid of its tree alive and its port free."""
    log = tmp_path / "replay.log"
    log.write_text("gguf_init_from_file: failed to open GGUF file '/nope.gguf'\n")
    for index in range(LOOPS):
        pidfile = tmp_path / f"gc{index}.pid"
        engine = _launch(
            started, binary, mode, tmp_path, FAKE_LOG=str(log), FAKE_PIDFILE=str(pidfile), FAKE_LINES="2000"
        )
        if mode in ("serve", "grandchild", "stubborn"):
            engine.wait_ready(timeout=30)
        tree = [engine.pid, *([int(pidfile.read_text())] if pidfile.exists() else [])]
        result = engine.stop(grace=0.5)
        assert result.leftover == ()
        assert result.port_holders == ()
        assert [pid for pid in tree if pid_alive(pid)] == []
        started.remove(engine)
        engine.close()


def test_adopt_a_server_it_did_not_start(binary: Path, tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "server.out"
    recipe = fake_recipe(binary, port, "serve")
    argv = enginespec.get_engine_spec("llamacpp").build_command(recipe)
    with open(out, "wb") as file:
        popen = subprocess.Popen(
            argv,
            stdout=file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "FAKE_MODE": "serve", "FAKE_LIFETIME": "60"},
            start_new_session=True,
        )
    adopted = None
    try:
        process = _scanned(popen.pid)
        adopted = enginespec.adopt(process, log_dir=tmp_path / "logs")
        assert adopted.adopted
        assert adopted.log_source.kind == "file"
        assert adopted.wait_ready(timeout=30).state == "ready"
        assert any("fake llama-server" in line.text for line in adopted.logs(10))
        # closing an adopted engine leaves it running
        enginespec.adopt(process).close()
        assert popen.poll() is None
        # restart reads cmdline, environ and cwd from /proc and starts it as our child
        adopted.restart(grace=5)
        assert popen.wait(timeout=10) == -signal.SIGTERM
        assert adopted.restart_count == 1
        assert not adopted.adopted
        assert adopted.pid != popen.pid
        assert adopted.wait_ready(timeout=30).state == "ready"
        # from the restart on, its output is kept as a launched engine's
        assert adopted.log_path is not None
        assert adopted.log_path.parent == tmp_path / "logs" / process.instance_id
        assert "fake llama-server" in adopted.log_path.read_text()
        result = adopted.stop(grace=5)
        assert result.leftover == ()
        assert result.port_holders == ()
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait()
        if adopted is not None:
            pid = adopted.pid
            adopted.close()
            kill_quietly(pid) if pid_alive(pid) else None


def test_adopt_refuses_a_gone_process(binary: Path, tmp_path: Path) -> None:
    port = free_port()
    argv = enginespec.get_engine_spec("llamacpp").build_command(fake_recipe(binary, port, "serve"))
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "FAKE_LIFETIME": "60"},
    )
    try:
        process = _scanned(popen.pid)
    finally:
        popen.kill()
        popen.wait()
    with pytest.raises(enginespec.InvalidInputError, match="gone"):
        enginespec.adopt(process)


def test_a_restart_that_cannot_read_the_command_back_is_refused_and_stops_nothing(
    procs: Procs, tmp_path: Path
) -> None:
    """The working directory an adopted engine ran in is gone: restart is refused, naming it,
    before anything is signalled."""
    where = tmp_path / "gone"
    where.mkdir()
    proc = procs.start(["llama-server", "-m", "/models/refused.gguf", "--port", "18792"], cwd=where)
    where.rmdir()
    engine = enginespec.adopt(_scanned(proc.pid))
    try:
        with pytest.raises(enginespec.RestartRefused, match=f"pid {proc.pid}: its cwd .*gone.* was deleted"):
            engine.restart(grace=1)
        assert proc.poll() is None  # still running: nothing was stopped
    finally:
        engine.close()


def test_identity_is_the_start_ticks_the_scan_read(procs: Procs) -> None:
    """A scanner's record is told from a process that took its pid by the start ticks it read,
    not by epoch seconds computed from the kernel's boot time, which moves when the clock is
    stepped: a record whose ``start_time`` is 7 s off (the boot time the scanner read then) is
    still its process; the same record made from JSON (no ticks) is not, and never is another's."""
    pid = procs.start(["llama-server", "-m", "/models/ticks.gguf", "--port", "18790"]).pid
    process = _scanned(pid)
    stepped = process.model_copy(update={"start_time": process.start_time + 7})
    assert process_alive(stepped)
    adopted = enginespec.adopt(stepped)
    try:
        assert adopted.pid == pid
    finally:
        adopted.close()
    from_json = enginespec.EngineProcess.model_validate_json(process.model_dump_json())
    assert process_alive(from_json)
    assert not process_alive(from_json.model_copy(update={"start_time": process.start_time + 7}))
    # Start ticks tell processes apart at the kernel's tick (10 ms at 100 Hz): the other process
    # starts at least two ticks later, as a process that took the pid would.
    threading.Event().wait(2 / os.sysconf("SC_CLK_TCK"))
    other = procs.start(["llama-server", "-m", "/models/other.gguf", "--port", "18791"]).pid
    impostor = process.model_copy(update={"pid": other})
    assert not process_alive(impostor)
    with pytest.raises(enginespec.InvalidInputError, match="gone"):
        enginespec.adopt(impostor)


def _scanned(pid: int) -> enginespec.EngineProcess:
    scanner = enginespec.Scanner()
    done = threading.Event()
    for _attempt in range(200):
        found = [p for p in scanner.scan() if p.pid == pid]
        if found:
            return found[0]
        done.wait(0.05)
    raise AssertionError(f"the scan does not report pid {pid}")


def test_terminal_and_discarded_output_are_said_so() -> None:
    popen = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        source = find_log_source(popen.pid)
        assert source.kind == "none"
        assert source.reason is not None
        assert "/dev/null" in source.reason
    finally:
        popen.kill()
        popen.wait()


def test_the_ports_an_engine_binds_besides_its_api_port_come_from_its_data() -> None:
    tgi = enginespec.get_engine_spec("tgi")
    argv = ["text-generation-launcher", "--model-id", "m", "--port", "3000"]
    assert extra_ports(tgi, argv, {}) == [("--prometheus-port", 9000)]
    assert extra_ports(tgi, argv, {"PROMETHEUS_PORT": "9100"}) == [("--prometheus-port", 9100)]
    # the flag wins over the environment, as clap reads them
    assert extra_ports(tgi, [*argv, "--prometheus-port=9200"], {"PROMETHEUS_PORT": "9100"}) == [
        ("--prometheus-port", 9200)
    ]
    assert extra_ports(enginespec.get_engine_spec("llamacpp"), ["llama-server", "--port", "1"], {}) == []


@pytest.mark.parametrize("given_by", ["flag", "environment"])
def test_a_held_prometheus_port_refuses_the_launch_naming_its_flag(
    given_by: str, procs: Procs, tmp_path: Path
) -> None:
    """TGI also binds --prometheus-port: a launch is refused while another process holds it,
    before anything is started, as for the API port."""
    taken = free_port()
    holder = procs.start(["holder", "--port", str(taken)], HELPER_LISTEN=f"{HOST}:{taken}")
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == str(taken).encode()  # listening
    launcher = tmp_path / "bin" / "text-generation-launcher"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\nexit 3\n")
    launcher.chmod(0o755)
    recipe = enginespec.Recipe(
        engine="tgi",
        model_path="bigscience/bloom-560m",
        host=HOST,
        port=free_port(),
        binary_path=str(launcher),
        **(
            {"extra_args": {"--prometheus-port": str(taken)}}
            if given_by == "flag"
            else {"env_vars": {"PROMETHEUS_PORT": str(taken)}}
        ),
    )
    with pytest.raises(LaunchFailed) as raised:
        launch(recipe, log_dir=tmp_path / "logs")
    failure = raised.value.failure
    assert (failure.kind, failure.numbers) == ("port_in_use", {"port": taken, "pid": holder.pid})
    # the process's name (comm): no engine holds it
    assert failure.cause_lines == (f"port {taken} is held by pid {holder.pid}: idle",)
    assert failure.hint == (
        f"port {taken} (--prometheus-port) is taken: give --prometheus-port another port or stop the"
        " process holding it"
    )
    assert not (tmp_path / "logs").exists()  # nothing was started
