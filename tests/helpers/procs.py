"""Real processes for scanner tests: the compiled `helpers/idle.c`, started with an exact argv."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

HELPER_SOURCE = Path(__file__).parent / "idle.c"


def stop_child(proc: subprocess.Popen[bytes], signum: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    """Ends a child the way its users end it (``signum``), killing it if it has not gone within
    ``timeout`` seconds, and reaps it."""
    if proc.poll() is None:
        proc.send_signal(signum)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def build_helper(directory: Path) -> Path:
    binary = directory / "idle"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(HELPER_SOURCE)], check=True, timeout=120)
    return binary


class Procs:
    """Starts helpers whose /proc/PID/cmdline is exactly the given argv; kills them all at exit."""

    def __init__(self, helper: Path) -> None:
        self.helper = helper
        self.started: list[subprocess.Popen[bytes]] = []
        #: each started process's start time (clock ticks after boot): its pid is its group's id
        self._start_ticks: dict[int, int | None] = {}

    def start(
        self,
        argv: Sequence[str],
        pass_fds: Sequence[int] = (),
        cwd: Path | None = None,
        executable: Path | None = None,
        cgroup: Path | None = None,
        user: str | None = None,
        output: Path | None = None,
        **env: str,
    ) -> subprocess.Popen[bytes]:
        """Runs the helper (or ``executable``, e.g. a link to it named as a real program) as
        ``argv``. ``pass_fds``: descriptors the process holds too (a server socket, see
        fakeserver); ``cwd``: its working directory; with ``cgroup`` (a cgroup directory), in that
        cgroup from before its exec on, as a container runtime starts a container's process;
        ``user``: the user it runs as (with that user's group only), e.g. ``nobody``; ``output``:
        a file its stdout and stderr are appended to (where its log goes)."""

        def enter() -> None:
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))

        logged = open(output, "ab") if output is not None else None  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [os.fsencode(a) for a in argv],
            executable=executable or self.helper,
            pass_fds=tuple(pass_fds),
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if "HELPER_LISTEN" in env else logged or subprocess.DEVNULL,
            stderr=logged,
            start_new_session=True,
            preexec_fn=enter if cgroup is not None else None,
            user=user,
            group=None if user is None else _group_of(user),
            extra_groups=None if user is None else [],
        )
        if logged is not None:
            logged.close()  # the child holds its own copy
        self.started.append(proc)
        self._start_ticks[proc.pid] = start_ticks(proc.pid)
        # execve has returned to Popen before the kernel publishes the new argv: wait for it, as
        # a real host shows it a moment later (the scanner watches such processes meanwhile).
        wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes() != b"")
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Kills the process and what is left of its group (a worker that outlived it). A
        process the test already waited for has given up its pid: while a member of its group
        lives, the kernel hands that number to no one, but once the group is gone it may be a
        stranger's, leading a group of its own, which is left alone."""
        if proc.returncode is None or start_ticks(proc.pid) in (None, self._start_ticks.get(proc.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.started:
            self.stop(proc)
        self.started.clear()


def _group_of(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_gid


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def rewrites(*argvs: Sequence[str]) -> str:
    """The value of the helper's HELPER_REWRITE: one argv per SIGUSR1 (see helpers/idle.c)."""
    return "\x1e".join("\x1f".join(argv) for argv in argvs)


def send_when_handled(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Sends ``signum`` once the process handles it (``SigCgt`` in /proc/PID/status): sent
    earlier, its default action (for SIGUSR1: exit) would run instead."""
    bit = 1 << (signum - 1)

    def handled() -> bool:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(caught.split()[1], 16) & bit)

    wait_for(handled)
    os.kill(proc.pid, signum)


@functools.cache
def kernel_keeps_exit_statuses() -> bool:
    """Whether this kernel gives a reaped process's exit status to a pidfd holder (6.15+)."""
    from enginespec.process.exits import reaped_status

    if not hasattr(os, "pidfd_open"):
        return False
    child = subprocess.Popen(["sleep", "60"])
    try:
        pidfd = os.pidfd_open(child.pid)
        try:
            child.kill()
            child.wait(timeout=10)
            return reaped_status(pidfd) == (None, signal.SIGKILL)
        finally:
            os.close(pidfd)
    finally:
        child.kill()
        child.wait()


def _stat_field(pid: int, number: int) -> int | None:
    """Field ``number`` (as proc(5) counts them) of ``/proc/PID/stat``; ``None`` when there is no
    such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat.rsplit(b")", 1)[1].split()[number - 3])  # the fields after (comm) start at 3


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks after boot; ``None`` when there is no such
    process."""
    return _stat_field(pid, 22)


def started_by(ancestor: int, pid: int) -> bool:
    """Whether ``pid`` is ``ancestor`` or one of its descendants (by the parents ``/proc`` gives)."""
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _stat_field(pid, 4) or 0
    return False


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(p) for p in (task / "children").read_text().split())
    return found


def cmdline_of(pid: int) -> list[str]:
    """The argv of ``pid`` as ``/proc`` shows it; empty when there is no such process."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def descendants_of(pid: int) -> set[int]:
    """Every process below ``pid`` (its children, theirs, and so on)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.add(child)
            todo.append(child)
    return found


@contextmanager
def running(helper: Path) -> Iterator[Procs]:
    procs = Procs(helper)
    try:
        yield procs
    finally:
        procs.stop_all()
