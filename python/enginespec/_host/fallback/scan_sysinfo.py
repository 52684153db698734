"""Pure-Python twin of ``rust/scan_sysinfo.rs``: off Linux, psutil stands in for procfs (as the
``sysinfo`` crate does for the native scanner), with no pid cursor, inode or argv place, so every
listing re-checks every known process. It answers as ``procread.ProcRoot`` does."""

from __future__ import annotations

import os
import time

import psutil

from enginespec._host.fallback.procread import Denied, Gone, Stat, TreeFiles, live_descendants
from enginespec._host.shapes import Listening


class PsutilSource:
    """Elsewhere: psutil stands in for procfs, with no pid cursor, inode or argv place."""

    pid_max = 0
    boot_time: float | None = None

    def list_pids(self) -> list[tuple[int, int]]:
        return [(pid, 0) for pid in psutil.pids()]

    def cursor(self) -> tuple[int, int] | None:
        return None

    def stat(self, pid: int) -> Stat | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                status, ppid, start_time, name = proc.status(), proc.ppid(), proc.create_time(), proc.name()
        except psutil.Error:
            return None
        state = {psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_DEAD: "X"}.get(status, "S")
        return Stat(state, ppid, start_time, os.fsencode(name), None, start_time - psutil.boot_time())

    def uptime(self) -> float:
        return time.time() - psutil.boot_time()

    def cmdline(self, pid: int) -> bytes:
        try:
            argv = psutil.Process(pid).cmdline()
        except psutil.ZombieProcess:
            return b""
        except psutil.AccessDenied:
            raise Denied from None
        except psutil.Error:
            raise Gone from None
        return b"".join(os.fsencode(arg) + b"\0" for arg in argv)

    def ends_match(self, pid: int, known: bytes) -> bool:
        # No bounded read here: the whole argv is compared.
        try:
            return self.cmdline(pid) == known
        except (Gone, Denied):
            return False

    def exe(self, pid: int) -> tuple[str | None, bool]:
        try:
            return psutil.Process(pid).exe() or None, False
        except psutil.AccessDenied:
            return None, True
        except psutil.Error:
            return None, False

    def children(self, pid: int) -> list[int]:
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []

    def descendants(self, pid: int) -> list[int]:
        return live_descendants(self, pid)

    def exists(self, pid: int) -> bool:
        return psutil.pid_exists(pid)

    def tree_files(
        self, pids: list[int], ports: bool, devices: bool, tables: dict[int, list[Listening]] | None = None
    ) -> TreeFiles:
        """The listening ports of ``pids`` from psutil; no fds are listed here, so no devices."""
        if not ports:
            return TreeFiles([], None, False)
        denied = False
        found: set[int] = set()
        for pid in pids:
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except psutil.AccessDenied:
                denied = True
                continue
            except psutil.Error:
                continue
            found.update(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN and c.laddr)
        return TreeFiles(sorted(found), None, denied)
