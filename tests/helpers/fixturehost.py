"""A fixture host: a directory laid out as ``ROOT/proc`` in the kernel's own formats (as
``rust/scan/fixture.rs`` lays out its fake procfs), read by both backends' scanners through their
``root`` (``Scanner(..., root=ROOT)``). The kernel's counters (``processes`` in ``stat``,
``sys/kernel/ns_last_pid``) move as forks would move them, or are set by hand (``set_cursor``);
``pid_max`` and ``uptime`` are files too. The one thing no file says, the time, is given to the
scanners' ``scan_at``."""

from __future__ import annotations

import ctypes
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

#: Two made-up engines, fixture.rs's: ``demo`` folds its workers, ``solo`` does not (with the
#: facade's fields the Python model requires and Rust ignores).
SIGNATURES = """[
  {"engine": "demo", "default_host": "127.0.0.1", "default_port": 8000,
   "launch_forms": [{"executables": ["demo"], "subcommand": ["serve"], "positional_model": true}],
   "model_flags": ["--model"], "port_flags": ["--port"], "fold_workers": true},
  {"engine": "solo", "default_host": "127.0.0.1", "default_port": 8080,
   "launch_forms": [{"executables": ["solo-server"]}],
   "model_flags": ["-m"]}
]"""
BOOT_TIME = 1_700_000_000
#: A command name that trips a parser splitting ``stat`` at the first ``)``.
COMM = "x) R 9 (y"


@dataclass(frozen=True)
class Stat:
    """A process's ``stat`` as written: a sleeping child of pid 1 started at boot by default."""

    state: str = "S"
    ppid: int = 1
    start_ticks: int = 0
    comm: str = COMM
    args: tuple[int, int] = (0x7FFC00001000, 0x7FFC00001040)


class FixtureHost:
    """``ROOT/proc`` of made-up processes; ``root`` is what a scanner is given."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        (self.proc / "sys" / "kernel").mkdir(parents=True)
        (self.proc / "sys" / "kernel" / "pid_max").write_text("32768\n")
        self.forks, self.last_pid, self.clock = 1000, 1, 5000
        self._write_cursor()

    def _write_cursor(self) -> None:
        (self.proc / "stat").write_text(stat_text(self.forks))
        (self.proc / "sys" / "kernel" / "ns_last_pid").write_text(f"{self.last_pid}\n")

    def set_cursor(self, last_pid: int, forks: int) -> None:
        """The kernel's counters set by hand (as a checkpoint/restore tool may set the cursor)."""
        self.last_pid, self.forks = last_pid, forks
        self._write_cursor()

    def set_uptime(self, seconds: float) -> None:
        """``uptime``: how long the host has run (absent until set)."""
        (self.proc / "uptime").write_text(f"{seconds:.2f} 0.00\n")

    def spawn(self, pid: int, argv: Sequence[str], ppid: int = 1) -> Stat:
        """A process forked (the counters move) that runs ``argv``."""
        self.forks += 1
        self.last_pid = pid
        self._write_cursor()
        self.clock += 1
        stat = Stat(ppid=ppid, start_ticks=self.clock)
        self.create(pid, argv, stat)
        return stat

    def create(self, pid: int, argv: Sequence[str], stat: Stat) -> None:
        """A process directory, the counters left alone (``fd/`` and ``status`` another fixture
        wrote first, a GPU host's, are kept)."""
        base = self.proc / str(pid)
        (base / "task" / str(pid)).mkdir(parents=True)
        (base / "fd").mkdir(exist_ok=True)
        (base / "net").mkdir()
        if not (base / "status").exists():
            self.set_status(pid, stat.ppid)
        (base / "task" / str(pid) / "children").write_text("")
        self.exec(pid, argv)
        self.set_stat(pid, stat)
        os.symlink(f"/usr/bin/{argv[0] if argv else 'true'}", base / "exe")

    def exec(self, pid: int, argv: Sequence[str]) -> None:
        """The argv replaced in place (``execve``, or a process rewriting its own argv)."""
        (self.proc / str(pid) / "cmdline").write_bytes(b"".join(os.fsencode(a) + b"\0" for a in argv))

    def set_stat(self, pid: int, stat: Stat) -> None:
        start, end = stat.args
        # all 52 fields of Linux 6
        fields = (
            f"{pid} ({stat.comm}) {stat.state} {stat.ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 "
            f"1 0 {stat.start_ticks} 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 "
            f"0 0 0 {start} {end} {end} {end} 0\n"
        )
        (self.proc / str(pid) / "stat").write_text(fields)

    def set_status(self, pid: int, ppid: int, uid: int | None = None, nspid: Sequence[int] = ()) -> None:
        """``status`` with the fields read from it: the owner (this test's user by default, so
        that reads as the owner work without root), the parent, the pids in nested namespaces."""
        uid = os.getuid() if uid is None else uid
        gid = os.getgid()
        (self.proc / str(pid) / "status").write_text(
            f"Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{gid}\t{gid}\t{gid}\t{gid}\nGroups:\t\n"
            f"NSpid:\t{' '.join(map(str, (pid, *nspid)))}\n"
        )

    def set_environ(self, pid: int, environment: dict[str, str]) -> None:
        (self.proc / str(pid) / "environ").write_bytes(
            b"".join(os.fsencode(f"{name}={value}") + b"\0" for name, value in environment.items())
        )

    def link(self, pid: int, name: str, target: str | Path) -> None:
        """A link of ``/proc/PID`` (``root``, ``cwd``, ``exe``, ``ns/net``), as a symlink."""
        path = self.proc / str(pid) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        os.symlink(target, path)

    def set_cgroup(self, pid: int, text: str) -> None:
        (self.proc / str(pid) / "cgroup").write_text(text)

    def kill(self, pid: int) -> None:
        """The process exited and was reaped."""
        shutil.rmtree(self.proc / str(pid))

    def replace(self, pid: int, argv: Sequence[str], stat: Stat) -> None:
        """The pid now belongs to another process: a new ``/proc/PID`` directory (a new inode)."""
        old = self.proc / f"{pid}.old"
        (self.proc / str(pid)).rename(old)
        self.create(pid, argv, stat)
        shutil.rmtree(old)

    def set_children(self, pid: int, tid: int, children: Sequence[int]) -> None:
        task = self.proc / str(pid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "children").write_text("".join(f"{child} " for child in children))

    def add_socket(self, pid: int, fd: int, inode: int) -> None:
        os.symlink(f"socket:[{inode}]", self.proc / str(pid) / "fd" / str(fd))

    def set_tcp(self, pid: int, table: str, rows: Sequence[tuple[int, int, str]]) -> None:
        """``/proc/PID/net/tcp`` (or ``tcp6``): one row per (inode, port, state hex)."""
        text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
        text += "  timeout inode\n"
        for sl, (inode, port, state) in enumerate(rows):
            text += (
                f"{sl:4}: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000"
                f"     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
            )
        (self.proc / str(pid) / "net" / table).write_text(text)


def stat_text(forks: int) -> str:
    """``/proc/stat`` with ``forks`` processes forked since boot."""
    return (
        f"cpu  10 0 10 1000 0 0 0 0 0 0\nintr 1 1\nctxt 99\nbtime {BOOT_TIME}\n"
        f"processes {forks}\nprocs_running 1\nprocs_blocked 0\n"
    )


def make_unreadable(path: Path) -> None:
    """Mode 000: unreadable, as another user's process files are (see ``without_read_override``)."""
    path.chmod(0)


T = TypeVar("T")


def without_read_override(run: Callable[[], T]) -> T:
    """``run()`` on a thread without the capabilities that let root read any file
    (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``), so that a mode-000 file is unreadable, as
    another user's files are under ``hidepid``. Capabilities belong to a thread on Linux: the rest
    of the test process keeps its own (``without_read_override`` in rust/scan/tests.rs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    outcome: list[T] = []
    failure: list[BaseException] = []

    def drop_then_run() -> None:
        # capget/capset version 3: a (version, pid) header, two (effective, permitted,
        # inheritable) words; pid 0 is the calling thread. Lowering the effective set needs no
        # privilege.
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        try:
            if libc.capget(header, data) != 0:
                raise OSError(ctypes.get_errno(), "capget")
            data[0] = data[3] = 0
            if libc.capset(header, data) != 0:
                raise OSError(ctypes.get_errno(), "capset")
            outcome.append(run())
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    thread = threading.Thread(target=drop_then_run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def later(stat: Stat, ticks: int) -> Stat:
    """The same stat, started ``ticks`` later (another process, if the pid is the same)."""
    return replace(stat, start_ticks=stat.start_ticks + ticks)
