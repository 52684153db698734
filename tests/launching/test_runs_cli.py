"""`run --detach` and `--name`, the run records, `runs`, and a run's name taken by `stop`, `logs`
and `restart`: a detached run outlives the terminal it was started from (a real tmux session,
killed), its log still kept; records read back as untrusted (tampered, linked, huge, another
user's run). The fake llama-server of the lifecycle tests; every run is stopped in a `finally`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from enginespec.lifecycle import runrecords
from helpers.cli import enginespec
from helpers.fakeserver import free_port
from helpers.lifecycle_fakes import pid_alive, recipe_file
from helpers.procs import Procs, start_ticks, wait_for


@pytest.fixture
def data(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the commands (their own data dir); every run recorded there is ended
    afterwards, its `run` and its engine."""
    env = {"ENGINESPEC_DATA_DIR": str(tmp_path / "data")}
    yield env
    found, _ = runrecords.records(tmp_path / "data")
    for record in found:
        for pid, ticks in (
            (record.supervisor_pid, record.supervisor_start_ticks),
            (record.pid, record.start_ticks),
        ):
            if start_ticks(pid) == ticks:
                os.kill(pid, signal.SIGKILL)


def _record(env: dict[str, str], name: str) -> runrecords.RunRecord:
    found = runrecords.find(Path(env["ENGINESPEC_DATA_DIR"]), name)
    assert found is not None, name
    return found


def _detached(tmp_path: Path, env: dict[str, str], name: str, **fake: str) -> runrecords.RunRecord:
    path, _recipe = recipe_file(tmp_path, "serve", **fake)
    started = enginespec("run", str(path), "--detach", "--name", name, env=env, timeout=120)
    assert started.returncode == 0, started.stderr
    assert started.stdout == f"{name}\n".encode()
    wait_for(lambda: _record(env, name).state == "ready", timeout=60)
    return _record(env, name)


def test_a_detached_run_outlives_its_terminal_and_keeps_the_log(tmp_path: Path, data: dict[str, str]) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is installed by .ci/run")
    path, _recipe = recipe_file(tmp_path, "serve", FAKE_TICK="0.1")
    tmux = ["tmux", "-L", f"enginespec-runs-{os.getpid()}", "-f", "/dev/null"]
    command = [sys.executable, "-m", "enginespec.cli", "run", str(path), "--detach", "--name", "web"]
    done = tmp_path / "done"
    shell = f"{shlex.join(command)} > {tmp_path / 'out'} 2>&1; touch {done}; sleep 600"
    try:
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", "runs", shell],
            env={**os.environ, **data},
            check=True,
            timeout=120,
        )
        wait_for(done.exists, timeout=120)
        assert (tmp_path / "out").read_text().splitlines()[0] == "web"
    finally:
        # the terminal goes: its session's processes get SIGHUP
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False, timeout=120)
    record = _record(data, "web")
    assert record.detached
    wait_for(lambda: _record(data, "web").state == "ready", timeout=60)
    log = enginespec("logs", "web", "-n", "1", env=data)
    first = log.stdout
    time.sleep(1.0)
    assert pid_alive(record.pid)
    assert pid_alive(record.supervisor_pid)
    later = enginespec("logs", "web", "-n", "1", env=data).stdout
    assert b"tick" in later
    assert later != first  # the log is still kept after the terminal went
    listed = enginespec("runs", env=data).stdout.decode().splitlines()
    assert listed[0].split()[:2] == ["NAME", "ENGINE"]
    assert listed[1].split()[:4] == ["web", record.instance_id, str(record.pid), "ready"]
    stopped = enginespec("stop", "web", env=data)
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: not pid_alive(record.supervisor_pid), timeout=30)
    ended = _record(data, "web")
    assert ended.state == "ended"
    assert "after it was ready: signal 15 (SIGTERM)" in (ended.outcome or "")
    assert ended.exit_status == 128 + signal.SIGTERM
    assert enginespec("runs", env=data).stdout == b""  # only running ones without -a
    everything = json.loads(enginespec("runs", "-a", "--json", env=data).stdout)
    assert [run["name"] for run in everything] == ["web"]
    # its log by the run's name after it ended, and a clear word from stop
    assert b"tick" in enginespec("logs", "web", "-n", "5", env=data).stdout
    again = enginespec("stop", "web", env=data)
    assert again.returncode == 2
    assert b"the run 'web' is not running: ended" in again.stderr


def test_restart_by_the_runs_name_starts_the_engine_again(tmp_path: Path, data: dict[str, str]) -> None:
    record = _detached(tmp_path, data, "qwen")
    restarted = enginespec("restart", "qwen", env=data, timeout=120)
    assert restarted.returncode == 0, restarted.stderr
    now = _record(data, "qwen")
    assert now.restarts == 1
    assert now.pid != record.pid
    assert restarted.stdout.decode() == f"restarted qwen: pid {record.pid} -> {now.pid} ({now.instance_id})\n"
    assert not pid_alive(record.pid)
    assert now.supervisor_pid == record.supervisor_pid  # the same run keeps it
    wait_for(lambda: _record(data, "qwen").state == "ready", timeout=60)
    assert b"enginespec: restart 1" in enginespec("logs", "qwen", "-n", "50", env=data).stdout
    assert enginespec("stop", "qwen", env=data).returncode == 0


def test_a_foreground_run_is_recorded_with_how_it_failed(tmp_path: Path, data: dict[str, str]) -> None:
    log = tmp_path / "replay.log"
    log.write_text("error: invalid argument: --bogus\n")
    path, _recipe = recipe_file(tmp_path, "replay", FAKE_LOG=str(log), FAKE_EXIT="1")
    done = enginespec("run", str(path), "-q", env=data, timeout=60)
    assert done.returncode == 1
    (record,) = json.loads(enginespec("runs", "-a", "--json", env=data).stdout)
    assert record["name"] == record["instance_id"] == done.stdout.decode().strip()
    assert (record["state"], record["exit_status"], record["detached"]) == ("failed", 1, False)
    assert record["outcome"].startswith("failed to start: bad_flag")
    restart = enginespec("restart", record["name"], env=data)
    assert restart.returncode == 1
    assert b"is not running: failed to start" in restart.stderr


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("../up", "--name: '../up' is not a run name"),
        ("-x", "--name: '-x' is not a run name"),
        ("a" * 129, "is not a run name"),
        ("caf\u00e9", "is not a run name"),
    ],
)
def test_a_name_that_is_no_file_name_is_refused(
    tmp_path: Path, data: dict[str, str], name: str, said: str
) -> None:
    path, _recipe = recipe_file(tmp_path, "serve")
    refused = enginespec("run", str(path), "--detach", f"--name={name}", env=data)
    assert refused.returncode == 2
    assert said in refused.stderr.decode()
    assert not (tmp_path / "data" / "runs").exists()


def test_a_name_in_use_is_refused_until_its_run_ends(tmp_path: Path, data: dict[str, str]) -> None:
    record = _detached(tmp_path, data, "once")
    other = tmp_path / "other"
    other.mkdir()
    path, _recipe = recipe_file(other, "serve")
    refused = enginespec("run", str(path), "--detach", "--name", "once", env=data)
    assert refused.returncode == 2
    assert (
        f"--name: the run 'once' is running (engine pid {record.pid}); stop it first"
        in refused.stderr.decode()
    )
    assert _record(data, "once") == record
    assert enginespec("stop", "once", env=data).returncode == 0


def _write_raw(env: dict[str, str], name: str, document: dict[str, object]) -> Path:
    folder = Path(env["ENGINESPEC_DATA_DIR"]) / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(document))
    return path


def _forged(pid: int, ticks: int | None, supervisor: int, supervisor_ticks: int | None) -> dict[str, object]:
    return {
        "name": "forged",
        "recipe": "/r.json",
        "engine": "llamacpp",
        "instance_id": "llamacpp-8080-00000000",
        "pid": pid,
        "start_ticks": ticks or 0,
        "supervisor_pid": supervisor,
        "supervisor_start_ticks": supervisor_ticks or 0,
        "log_dir": "/nowhere",
        "started_at": 1.0,
        "state": "ready",
    }


def test_a_record_naming_a_process_that_is_no_engine_of_the_run_signals_nothing(
    procs: Procs, data: dict[str, str], nobody_idle: Path
) -> None:
    """A record is never taken at its word: a pid whose start differs (reused), a process that is
    no engine server, and a `run` of another user are neither stopped nor signalled."""
    bystander = procs.start(["sleep-like", "600"])
    server = procs.start(["llama-server", "-m", "m.gguf", "--port", str(free_port())])
    others = procs.start(
        ["python3", "-m", "enginespec.cli", "run", "x.json"], executable=nobody_idle, user="nobody"
    )
    mine = start_ticks(bystander.pid)
    cases = [
        # the bystander's pid with another start: a pid that was reused
        _forged(bystander.pid, (mine or 0) + 7, bystander.pid, (mine or 0) + 7),
        # the very bystander: alive, but no engine server
        _forged(bystander.pid, mine, bystander.pid, mine),
        # a real engine server with another start
        _forged(server.pid, (start_ticks(server.pid) or 0) + 1, bystander.pid, mine),
    ]
    for document in cases:
        _write_raw(data, "forged", document)
        refused = enginespec("stop", "forged", env=data)
        assert refused.returncode == 2, refused.stderr
        assert b"the run 'forged' is not running" in refused.stderr
    # restart signals only an `enginespec run` (never the bystander a record names)...
    _write_raw(data, "forged", _forged(server.pid, start_ticks(server.pid), bystander.pid, mine))
    said = enginespec("restart", "forged", env=data)
    assert said.returncode == 1
    assert f"pid {bystander.pid} is not an `enginespec run`".encode() in said.stderr
    # ...and one of the user's own (root may signal any)
    if os.geteuid() != 0:
        _write_raw(
            data, "forged", _forged(server.pid, start_ticks(server.pid), others.pid, start_ticks(others.pid))
        )
        said = enginespec("restart", "forged", env=data)
        assert said.returncode == 1
        assert b"another user's" in said.stderr
    assert bystander.poll() is None
    assert server.poll() is None
    assert others.poll() is None


def test_records_that_are_not_records_are_said_and_skipped(tmp_path: Path, data: dict[str, str]) -> None:
    record = _detached(tmp_path, data, "good")
    folder = Path(data["ENGINESPEC_DATA_DIR"]) / "runs"
    (folder / "linked.json").symlink_to(folder / "good.json")
    (folder / "huge.json").write_bytes(b" " * (runrecords.MAX_RECORD_BYTES + 1))
    (folder / "renamed.json").write_text((folder / "good.json").read_text())
    (folder / "deep.json").write_text("[" * 10_000 + "]" * 10_000)
    (folder / "fifo.json").unlink(missing_ok=True)
    os.mkfifo(folder / "fifo.json")
    listed = enginespec("runs", "-a", env=data, timeout=30)
    assert listed.returncode == 0
    err = listed.stderr.decode()
    assert "linked.json: not read: a symlink" in err
    assert "huge.json: not read: not a regular file of at most 65536 bytes" in err
    assert "fifo.json: not read: not a regular file" in err
    assert "renamed.json: not a run record: it names the run 'good'" in err
    assert "deep.json: not a run record" in err
    rows = listed.stdout.decode().splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["good"]
    # a linked record is no run's name for stop either
    assert enginespec("stop", "linked", env=data).returncode == 2
    assert pid_alive(record.pid)
    assert enginespec("stop", "good", env=data).returncode == 0


def test_restart_of_an_engine_no_run_keeps_makes_it_a_run(tmp_path: Path, data: dict[str, str]) -> None:
    """`restart :PORT` of an engine started elsewhere (here by the test, its output to a file):
    a detached run stops it and starts its command again as its owner, with its environment and
    working directory, and keeps it from then on (runs, logs, stop and restart by the name)."""
    from enginespec import get_engine_spec
    from helpers.lifecycle_fakes import fake_recipe, install_fake, kill_quietly

    port = free_port()
    recipe = fake_recipe(install_fake(tmp_path), port, "serve")
    argv = get_engine_spec("llamacpp").build_command(recipe)
    with open(tmp_path / "elsewhere.out", "wb") as file:
        popen = subprocess.Popen(
            argv,
            stdout=file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            env={**os.environ, "FAKE_MODE": "serve", "FAKE_LIFETIME": "60", "FAKE_TICK": "0.1"},
            start_new_session=True,
        )
    try:
        wait_for(lambda: enginespec("health", f":{port}", env=data).returncode == 0, timeout=60)
        command = Path(f"/proc/{popen.pid}/cmdline").read_bytes()  # the interpreter's, for a script
        restarted = enginespec(
            "restart", f":{port}", "--name", "elsewhere", "--grace", "5s", env=data, timeout=180
        )
        assert restarted.returncode == 0, restarted.stderr
        assert popen.wait(timeout=20) == -signal.SIGTERM  # the old process, stopped
        record = _record(data, "elsewhere")
        assert record.pid != popen.pid
        assert record.detached
        assert record.recipe == ""
        said = restarted.stdout.decode()
        old, new = popen.pid, record.pid
        assert said == f"restarted {record.instance_id}: pid {old} -> pid {new}, kept by the run elsewhere\n"
        assert b"enginespec logs elsewhere -f" in restarted.stderr
        # the same command, environment and working directory, as its owner
        assert Path(f"/proc/{record.pid}/cmdline").read_bytes() == command
        assert b"FAKE_TICK=0.1" in Path(f"/proc/{record.pid}/environ").read_bytes().split(b"\0")
        assert os.readlink(f"/proc/{record.pid}/cwd") == str(tmp_path)
        wait_for(lambda: _record(data, "elsewhere").state == "ready", timeout=60)
        assert [run["name"] for run in json.loads(enginespec("runs", "--json", env=data).stdout)] == [
            "elsewhere"
        ]
        assert b"tick" in enginespec("logs", "elsewhere", "-n", "5", env=data).stdout
        # from now on a run: its name restarts it through that run, by pid too
        again = enginespec("restart", str(record.pid), env=data, timeout=120)
        assert again.returncode == 0, again.stderr
        assert _record(data, "elsewhere").restarts == 1
        assert enginespec("stop", "elsewhere", env=data).returncode == 0
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait()
        for found in runrecords.records(Path(data["ENGINESPEC_DATA_DIR"]))[0]:
            kill_quietly(found.pid) if pid_alive(found.pid) else None


def test_restart_of_what_is_no_engine_says_so(tmp_path: Path, data: dict[str, str]) -> None:
    nothing = enginespec("restart", f":{free_port()}", env=data, timeout=60)
    assert nothing.returncode == 2
    assert b"enginespec restart: " in nothing.stderr
    assert runrecords.records(Path(data["ENGINESPEC_DATA_DIR"]))[0] == []
    bad = enginespec("restart", "nothing-here", "--name", "../x", env=data, timeout=60)
    assert bad.returncode == 2


def test_root_restarts_another_users_engine_as_that_user(
    procs: Procs, data: dict[str, str], nobody_idle: Path, nobody_dir: Path
) -> None:
    """What another user's process named is run again as that user, never as root."""
    import pwd

    port = free_port()
    engine = procs.start(
        ["llama-server", "-m", "/models/m.gguf", "--port", str(port)],
        executable=nobody_idle,
        user="nobody",
        cwd=nobody_dir,
    )
    restarted = enginespec(
        "restart",
        str(engine.pid),
        "--name",
        "theirs",
        "--grace",
        "2s",
        "--ready-timeout",
        "30s",
        env=data,
        timeout=120,
    )
    assert restarted.returncode == 0, restarted.stderr
    record = _record(data, "theirs")
    assert record.pid != engine.pid
    status = Path(f"/proc/{record.pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {str(pwd.getpwnam("nobody").pw_uid)}
    assert os.readlink(f"/proc/{record.pid}/cwd") == str(nobody_dir)
