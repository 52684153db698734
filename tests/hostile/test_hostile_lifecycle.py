"""`run`, `logs`, restart and recipe files against a hostile local user: a process of `nobody`
whose output "goes" to a file it cannot read, a working directory swapped between a restart's stop
and its start, recipe paths that are not files, an engine printing huge lines, and `run` ended by
SIGTERM or SIGHUP. Real processes of `nobody`, the real `enginespec` command, both backends."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from enginespec import Scanner
from enginespec.errors import RestartRefused
from enginespec.lifecycle.logbook import MAX_LINE_BYTES, LogBook
from enginespec.lifecycle.running import adopt
from helpers.cli import enginespec
from helpers.fakeserver import free_port
from helpers.lifecycle_fakes import HOST, install_fake, kill_quietly, recipe_file, until_ready
from helpers.procs import start_ticks, wait_for

NOBODY = 65534
ENGINESPEC = (sys.executable, "-m", "enginespec.cli")
#: What a cut line ends with (the length is docs/lifecycle.md's).
CUT_TEXT = " [enginespec: line cut at 65536 bytes]"
#: An interpreter `nobody` may run (the test's own may live under root's 0700 home).
SYSTEM_PYTHON = "/usr/bin/python3"

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes of another user (needs root)")


#: The address space `enginespec` may take in these tests: a regression that keeps what it
#: reads fails here (MemoryError) instead of taking a shared host's memory.
RUN_ADDRESS_SPACE = 2 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (RUN_ADDRESS_SPACE, RUN_ADDRESS_SPACE))


def _fake_argv(directory: Path) -> list[str]:
    """argv of the fake llama-server installed in ``directory`` for ``nobody`` (run by
    SYSTEM_PYTHON, which nobody can run), on a free port."""
    binary = install_fake(directory, SYSTEM_PYTHON)
    return [str(binary), "-m", str(directory / "model.gguf"), "--host", HOST, "--port", str(free_port())]


def _as_nobody(argv: list[str], cwd: Path | str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "FAKE_LIFETIME": "60", **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _gone(pid: int, ticks: int | None) -> bool:
    """Whether the process that had this identity (pid, start ticks) is gone (a zombie is)."""
    if ticks is None or start_ticks(pid) != ticks:
        return True
    state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    return state in (b"Z", b"X")


def _stop_run(run: subprocess.Popen[bytes], left: list[tuple[int, int | None]]) -> None:
    """Kills `run` if it still runs, and each process it left behind (pid, start ticks) that
    is still that process."""
    if run.poll() is None:
        run.kill()
    run.wait()
    for pid, ticks in left:
        if not _gone(pid, ticks):
            kill_quietly(pid)


# -- logs PID: the output file is opened as the process's owner could ---------------------------


@as_root
@pytest.mark.parametrize(
    ("held", "shown"),
    [
        # a root-only file, held as O_PATH (no read access for its holder)
        ("path", None),
        # its owner's write-only file, held for writing
        ("write", None),
        # its owner's readable log, held for writing: shown, as before
        ("log", True),
    ],
)
def test_logs_opens_the_output_file_as_its_owner(nobody_dir: Path, held: str, shown: bool | None) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    target = nobody_dir / "held.txt"
    target.write_text(f"{secret}\n")
    if held == "path":
        target.chmod(0o600)  # root's
    else:
        os.chown(target, NOBODY, NOBODY)
        target.chmod(0o200 if held == "write" else 0o644)
    argv = _fake_argv(nobody_dir)
    mode = "path" if held == "path" else "write"
    proc = _as_nobody(argv, nobody_dir, FAKE_MODE="held", FAKE_HELD=str(target), FAKE_HELD_MODE=mode)
    try:
        wait_for(lambda: os.readlink(f"/proc/{proc.pid}/fd/1") == str(target), timeout=30)
        done = enginespec("logs", str(proc.pid), "-n", "5", "--log-dir", str(nobody_dir / "none"), timeout=60)
        said = done.stdout.decode() + done.stderr.decode()
        if shown:
            assert done.returncode == 0, said
            assert secret in done.stdout.decode()
            return
        assert secret not in said
        assert done.returncode == 1, said
        reason = "O_PATH" if held == "path" else "not readable by the process's owner"
        assert reason in done.stderr.decode(), said
    finally:
        _stop(proc)


# -- restart: the working directory is entered as the engine's owner ---------------------------


@as_root
def test_restart_enters_the_working_directory_as_the_owner(nobody_dir: Path) -> None:
    nest = nobody_dir / "nest"
    nest.mkdir()
    os.chown(nest, NOBODY, NOBODY)  # nobody may rename its own working directory away
    work = nest / "work"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    vault = nobody_dir / "vault"
    vault.mkdir(mode=0o700)  # root's: nobody may not pass through it
    inner = vault / "inner"
    inner.mkdir(mode=0o755)
    (inner / "secret.txt").write_text("root's\n")
    argv = _fake_argv(nobody_dir)
    proc = _as_nobody(argv, work, FAKE_MODE="swap", FAKE_SWAP_TO=str(inner))
    engine = None
    try:

        def handles_sigterm() -> bool:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
            return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))

        wait_for(handles_sigterm, timeout=30)
        process = next(p for p in Scanner().scan() if p.pid == proc.pid)
        engine = adopt(process, log_dir=nobody_dir / "logs")
        assert engine.cwd == str(work)
        with pytest.raises(RestartRefused, match="cannot enter its working directory"):
            engine.restart(grace=5.0)
        assert (nest / "work.away").is_dir()  # the swap happened: the stop ran it
        assert [pid for pid in _pids() if _cwd(pid).startswith(f"{vault}/")] == []
    finally:
        if engine is not None:
            engine.close()
        _stop(proc)


@as_root
def test_a_restart_as_the_owner_runs_in_its_working_directory(nobody_dir: Path) -> None:
    work = nobody_dir / "work"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    argv = _fake_argv(nobody_dir)
    proc = _as_nobody(argv, work, FAKE_MODE="serve")
    engine = None
    try:
        wait_for(lambda: any(p.pid == proc.pid for p in Scanner().scan()), timeout=30)
        process = next(p for p in Scanner().scan() if p.pid == proc.pid)
        engine = adopt(process, log_dir=nobody_dir / "logs")
        engine.restart(grace=5.0)
        assert engine.pid != proc.pid
        assert os.readlink(f"/proc/{engine.pid}/cwd") == str(work)
        assert os.stat(f"/proc/{engine.pid}").st_uid == NOBODY
        # the fd the directory was reached through is not the engine's
        fds = os.listdir(f"/proc/{engine.pid}/fd")
        assert not any(os.readlink(f"/proc/{engine.pid}/fd/{fd}") == str(work) for fd in fds)
    finally:
        if engine is not None:
            engine.close()
        _stop(proc)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


# -- recipe files: regular and size-capped ------------------------------------------------------


@pytest.mark.parametrize("kind", ["zero", "fifo", "directory", "large"])
@pytest.mark.parametrize("command", ["command", "run"])
def test_recipe_paths_that_are_not_small_files_are_refused(tmp_path: Path, kind: str, command: str) -> None:
    path = tmp_path / "recipe.toml"
    if kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"#" * (2 << 20))
    # a regression reads or waits for ever: the timeout and the address-space limit fail it
    done = subprocess.run(
        [*ENGINESPEC, command, str(path)] + (["--log-dir", str(tmp_path)] if command == "run" else []),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
        preexec_fn=_limited,
    )
    said = done.stderr.decode()
    assert done.returncode == 2, said
    expected = {
        "zero": "not a regular file (a character device)",
        "fifo": "not a regular file (a FIFO)",
        "directory": "not a regular file (a directory)",
        "large": "larger than 1048576 bytes",
    }[kind]
    assert f"{path}: {expected}" in said


# -- run: huge lines cut, memory bounded ---------------------------------------------------------


def _vm_peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _start_run(tmp_path: Path, recipe_path: Path, out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as stdout:
        return subprocess.Popen(
            [*ENGINESPEC, "run", str(recipe_path), "--log-dir", str(tmp_path / "logs")],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            preexec_fn=_limited,
        )


def test_run_cuts_huge_lines_and_stays_small(tmp_path: Path) -> None:
    path, _recipe = recipe_file(tmp_path, "huge", FAKE_HUGE="3", FAKE_HUGE_MB="100")
    out = tmp_path / "run.out"
    run = _start_run(tmp_path, path, out)
    try:
        # the engine serves once its 300 MB were written: `run` has read them all by then
        until_ready(run)
        peak = _vm_peak_kib(run.pid)
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
    # 300 MB went through it: what it kept and printed is three cut lines
    assert peak < 200 * 1024, f"enginespec run peaked at {peak} KiB"
    printed = out.read_bytes()
    cut = b"x" * MAX_LINE_BYTES + CUT_TEXT.encode() + b"\n"
    assert printed.count(cut) == 3
    assert len(printed) < 1 << 20
    (kept,) = (tmp_path / "logs").rglob("*.log")
    assert kept.read_bytes().count(cut) == 3
    assert kept.stat().st_size < 1 << 20


# -- run ended by SIGTERM or SIGHUP stops the tree it started -----------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_run_ended_by_a_signal_stops_its_tree(tmp_path: Path, signum: int) -> None:
    pidfile = tmp_path / "gc.pid"
    path, _recipe = recipe_file(tmp_path, "grandchild", FAKE_PIDFILE=str(pidfile))
    run = _start_run(tmp_path, path, tmp_path / "run.out")
    identities: list[tuple[int, int | None]] = []
    try:
        _seen, engine = until_ready(run)
        identities = [(pid, start_ticks(pid)) for pid in (engine, int(pidfile.read_text()))]
        run.send_signal(signum)
        status = run.wait(timeout=60)
        for pid, ticks in identities:
            assert _gone(pid, ticks), f"pid {pid} was left running"
        assert status == 128 + signum
        assert run.stderr is not None
        assert f"stopped on {signal.Signals(signum).name}".encode() in run.stderr.read()
    finally:
        _stop_run(run, identities)


# -- the log book: lines cut across reads, the ring and the file bounded -------------------------


def _fed(book: LogBook, *writes: bytes) -> None:
    """Writes to a real pipe that ``book`` drains, then waits until it has stored everything."""
    read_end, write_end = os.pipe()
    book.attach("stdout", os.fdopen(read_end, "rb"))
    try:
        for data in writes:
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
    finally:
        os.close(write_end)
    wait_for(lambda: not book.draining, timeout=60)


def test_a_line_cut_across_reads_keeps_its_head_and_the_next_line(tmp_path: Path) -> None:
    book = LogBook(tmp_path / "a.log")
    head = b"h" * MAX_LINE_BYTES
    # the long line comes in pieces smaller and larger than one read; its end shares a write
    # with the next line
    _fed(book, b"first\n" + head[:1000], head[1000:] + b"t" * 300_000, b"t" * 5 + b"\nnext\nlast")
    texts = [line.text for line in book.lines()]
    assert texts == ["first", head.decode() + CUT_TEXT, "next", "last"]
    book.close()
    assert (tmp_path / "a.log").read_text().count(CUT_TEXT) == 1


def test_the_ring_and_the_file_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "b.log"
    book = LogBook(path, ring_characters=1 << 20, file_bytes=1 << 20)
    line = b"y" * 1000 + b"\n"
    _fed(book, line * 3000, b"end\n")
    kept = book.lines()
    assert kept[-1].text == "end"
    assert sum(len(k.text) for k in kept) <= 1 << 20
    assert len(kept) > 900
    book.close()
    # the file was renamed before lines took it past its cap, and a new one begun
    older = path.with_name(path.name + ".1")
    note = len(older.read_text().splitlines()[-1]) + 1
    assert path.stat().st_size <= 1 << 20
    assert (1 << 20) - 70_000 < older.stat().st_size - note <= 1 << 20
    assert "continued in a new file" in older.read_text().splitlines()[-1]
    assert path.read_text().splitlines()[-1].endswith(" stdout end")


def test_run_whose_reader_went_away_stops_its_tree(tmp_path: Path) -> None:
    path, _recipe = recipe_file(tmp_path, "serve", FAKE_TICK="0.1")
    run = subprocess.Popen(
        [*ENGINESPEC, "run", str(path), "--log-dir", str(tmp_path / "logs")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limited,
    )
    identity: list[tuple[int, int | None]] = []
    try:
        _seen, engine = until_ready(run)
        identity = [(engine, start_ticks(engine))]
        assert run.stdout is not None
        assert run.stdout.readline()
        run.stdout.close()  # `enginespec run | head -n 1`: the next tick meets a closed pipe
        assert run.wait(timeout=60) == 0
        assert _gone(*identity[0]), f"pid {engine} was left running"
        assert run.stderr is not None
        assert b"stopped on its output closed" in run.stderr.read()
    finally:
        _stop_run(run, identity)
