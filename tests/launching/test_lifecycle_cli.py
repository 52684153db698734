"""`enginespec run`, `stop` and `logs`, run as the real command with fake engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import enginespec as es
from enginespec.process.record import make_instance_id
from helpers.cli import enginespec
from helpers.fakeserver import free_port
from helpers.lifecycle_fakes import (
    fake_recipe,
    install_fake,
    kill_quietly,
    pid_alive,
    recipe_file,
    until_ready,
)


def _started_run(recipe: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    """`enginespec run RECIPE` in the background, stderr piped (``until_ready`` reads it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "enginespec.cli", "run", str(recipe), "--log-dir", str(log_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _end_run(run: subprocess.Popen[bytes], left: int | None) -> None:
    """Kills `run` if it still runs, and ``left`` (a pid it may have left behind) if alive."""
    if run.poll() is None:
        run.kill()
    run.wait()
    if left is not None and pid_alive(left):
        kill_quietly(left)


def test_run_failed_start_prints_class_cause_and_hint(tmp_path: Path) -> None:
    log = tmp_path / "replay.log"
    cause = "gguf_init_from_file: failed to open GGUF file '/models/nope.gguf'"
    log.write_text(f"llama_model_load: loading\n{cause}\nmain: exiting due to model loading error\n")
    path, _recipe = recipe_file(tmp_path, "replay", FAKE_LOG=str(log), FAKE_EXIT="1")
    done = enginespec("run", str(path), "--log-dir", str(tmp_path / "logs"), timeout=60)
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "model_not_found (exit status 1)" in err
    assert f"  {cause}" in err
    assert "hint: " in err
    # the engine's output was shown, and kept
    assert cause in done.stdout.decode()
    kept = list((tmp_path / "logs").rglob("*.log"))
    assert len(kept) == 1
    assert cause in kept[0].read_text()
    as_json = enginespec(
        "run", str(path), "--json", "--quiet", "--log-dir", str(tmp_path / "logs"), timeout=60
    )
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["kind"] == "model_not_found"


def test_run_ctrl_c_stops_the_group_and_exits_130(tmp_path: Path) -> None:
    pidfile = tmp_path / "gc.pid"
    path, _recipe = recipe_file(tmp_path, "grandchild", FAKE_PIDFILE=str(pidfile))
    run = _started_run(path, tmp_path / "logs")
    grandchild = None
    try:
        _seen, engine_pid = until_ready(run)
        grandchild = int(pidfile.read_text())
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
        assert not pid_alive(engine_pid)
        assert not pid_alive(grandchild)
    finally:
        _end_run(run, grandchild)


def test_stop_and_logs_of_an_engine_it_did_not_start(tmp_path: Path) -> None:
    binary = install_fake(tmp_path)
    recipe = fake_recipe(binary, free_port(), "serve")
    out = tmp_path / "server.out"
    with open(out, "wb") as file:
        popen = subprocess.Popen(
            es.get_engine_spec("llamacpp").build_command(recipe),
            stdout=file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "FAKE_MODE": "serve", "FAKE_LIFETIME": "60"},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while b"listening" not in out.read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        logs = enginespec("logs", str(popen.pid), "-n", "5", "--log-dir", str(tmp_path / "none"))
        assert logs.returncode == 0, logs.stderr
        assert b"server is listening" in logs.stdout
        stopped = enginespec("stop", str(popen.pid), "--grace", "5", "--json")
        assert stopped.returncode == 0, stopped.stderr
        result = json.loads(stopped.stdout)
        assert result["leftover"] == []
        assert result["signals"][0]["signal"] == "SIGTERM"
        assert popen.wait(timeout=10) == -signal.SIGTERM
        gone = enginespec("stop", str(popen.pid))
        assert gone.returncode == 2
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait()


def test_logs_of_a_run_by_engine_id_survive_it(tmp_path: Path) -> None:
    log = tmp_path / "replay.log"
    log.write_text("error: invalid argument: --bogus\n")
    path, recipe = recipe_file(tmp_path, "replay", FAKE_LOG=str(log), FAKE_EXIT="1")
    enginespec("run", str(path), "--quiet", "--log-dir", str(tmp_path / "logs"), timeout=60)
    engine_id = make_instance_id("llamacpp", recipe.model_path, recipe.port)
    logs = enginespec("logs", engine_id, "--log-dir", str(tmp_path / "logs"))
    assert logs.returncode == 0
    assert b"error: invalid argument: --bogus" in logs.stdout
    unknown = enginespec("logs", "llamacpp-1-deadbeef", "--log-dir", str(tmp_path / "logs"))
    assert unknown.returncode == 2


def test_run_of_an_engine_stopped_after_it_was_ready_is_no_failed_start(tmp_path: Path) -> None:
    path, _recipe = recipe_file(tmp_path, "serve")
    run = _started_run(path, tmp_path / "logs")
    engine_pid = None
    try:
        _seen, engine_pid = until_ready(run)
        stopped = enginespec("stop", str(engine_pid), "--grace", "5")
        assert stopped.returncode == 0, stopped.stderr
        assert run.wait(timeout=60) == 128 + signal.SIGTERM
        assert run.stderr is not None
        said = run.stderr.read().decode()
        assert "failed to start" not in said
        assert "after it was ready: signal 15 (SIGTERM)" in said
    finally:
        _end_run(run, engine_pid)


def test_run_quiet_prints_only_the_engine_id_as_ps_quiet_prints_only_pids(tmp_path: Path) -> None:
    log = tmp_path / "replay.log"
    log.write_text("a line of the engine's output\n")
    path, recipe = recipe_file(tmp_path, "replay", FAKE_LOG=str(log), FAKE_EXIT="1")
    done = enginespec("run", str(path), "-q", "--log-dir", str(tmp_path / "logs"), timeout=60)
    assert done.returncode == 1
    assert done.stdout.decode() == make_instance_id("llamacpp", recipe.model_path, recipe.port) + "\n"
    assert b"enginespec run: failed to start" in done.stderr
