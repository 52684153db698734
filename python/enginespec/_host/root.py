"""The door for reading a host: :class:`HostRoot`, the one reader of the files of the host under
a root (``/``, or a fixture host's directory laid out like it): its kernel's files of processes
(``ROOT/proc``), the files its processes name (read as their owners, inside their roots) and the
backend's reader of sockets and process trees there.

A scan's record carries the root it was scanned under (``EngineProcess._root``, as a ``procfs``
crate ``Process`` keeps its root), and everything read of it later (health, load, vitals,
liveness, its model's files, its container's addresses) goes through that root: a record of a
fixture host is never looked up in this host's ``/proc``, where its pid is another process or
none. A record built elsewhere (from JSON, a launch) has this host's, :data:`HOST_ROOT`.
"""

from __future__ import annotations

import functools
import os

from enginespec._host import backend, namedfiles, procfiles


class HostRoot:
    """The files of the host under ``root`` (see the module's docstring); made once per root by
    :func:`host_root`. Reads that fail say so as their functions in :mod:`enginespec._host.procfiles`
    and :mod:`enginespec._host.namedfiles` do: ``None``, a
    :class:`~enginespec._host.namedfiles.NamedFile`'s problem, or ``OSError`` and ``Refused``
    where documented."""

    __slots__ = ("is_host", "proc", "root")

    def __init__(self, root: str) -> None:
        #: the host's root directory: ``/``, or a fixture host's
        self.root = root
        #: where its kernel's process files are: ``ROOT/proc``
        self.proc = procfiles.PROC if root == "/" else os.path.join(root, "proc")
        #: whether it is this host's own ``/`` (its pids are this kernel's: a pidfd may be opened)
        self.is_host = root == "/"

    def __repr__(self) -> str:
        return f"HostRoot({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostRoot) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    # One reader per root: a record's copies share it.
    def __copy__(self) -> HostRoot:
        return self

    def __deepcopy__(self, memo: object) -> HostRoot:
        return self

    @property
    def procfs(self) -> backend.ProcRoot:
        """The backend's reader of sockets, namespaces and process trees below ``ROOT/proc``."""
        return backend.proc_root(self.proc)

    def inside(self, path: str) -> str:
        """An absolute path of the host (``/run/x.sock``) as seen from this process."""
        return path if self.is_host else self.root.rstrip("/") + path

    # -- the kernel's files of a process --------------------------------------------------------

    def path(self, pid: int | str, name: str) -> str:
        """``ROOT/proc/PID/NAME`` (``pid`` may be ``self``: this process, on this host alone)."""
        return procfiles.proc_path(pid, name, self.proc)

    def read(self, pid: int | str, name: str, limit: int) -> bytes:
        """At most ``limit`` bytes of ``ROOT/proc/PID/NAME`` (``-1``: all); ``OSError``."""
        return procfiles.read_proc(pid, name, limit, self.proc)

    def link(self, pid: int | str, name: str) -> str:
        """Where the link ``ROOT/proc/PID/NAME`` points (``exe``, ``cwd``); ``OSError``."""
        return procfiles.proc_link(pid, name, self.proc)

    def stat(self, pid: int) -> procfiles.PidStat | None:
        """``/proc/PID/stat``, parsed; ``None`` when gone or unreadable."""
        return procfiles.read_stat(pid, self.proc)

    def status(self, pid: int | str) -> procfiles.PidStatus | None:
        """``/proc/PID/status``, parsed; ``None`` when gone or unreadable."""
        return procfiles.read_status(pid, self.proc)

    def cgroup_lines(self, pid: int) -> tuple[procfiles.CgroupLine, ...] | None:
        """``/proc/PID/cgroup``, parsed; ``None`` when gone or unreadable."""
        return procfiles.read_cgroup_lines(pid, self.proc)

    def start_ticks(self, pid: int) -> int | None:
        """The start of ``pid`` in clock ticks since boot (:attr:`PidStat.start_ticks`)."""
        return procfiles.start_ticks(pid, self.proc)

    def owner(self, pid: int) -> procfiles.Owner | None:
        """The credentials ``pid``'s file accesses are checked with, ``None`` when unread."""
        return procfiles.owner(pid, self.proc)

    def environ(self, pid: int, limit: int) -> tuple[list[bytes], bool] | None:
        """``pid``'s environment, size-capped (:func:`enginespec._host.procfiles.read_environ`)."""
        return procfiles.read_environ(pid, limit, self.proc)

    def cpu_busy_ticks(self) -> int | None:
        """The clock ticks all CPUs spent busy since boot (``/proc/stat``)."""
        return procfiles.cpu_busy_ticks(self.proc)

    def boot_time(self) -> float | None:
        """When the host booted, in epoch seconds."""
        return procfiles.boot_time(self.proc)

    # -- the kernel's other files (ROOT/proc, ROOT/sys) -------------------------------------------

    def under(self, *parts: str) -> str:
        """``ROOT/PARTS``: ``("sys", "class", "drm")`` is ``ROOT/sys/class/drm``."""
        return os.path.join(self.root, *parts)

    def kernel_file(self, *parts: str, limit: int) -> bytes | None:
        """At most ``limit`` bytes of the file the kernel writes at ``ROOT/PARTS``
        (``proc/devices``, ``sys/class/drm/card0/dev``, a cgroup's ``memory.events``), ``None``
        when it cannot be read."""
        return procfiles.read_kernel_file(self.under(*parts), limit)

    def kernel_directory(self, *parts: str) -> list[str]:
        """The names in the directory the kernel lists at ``ROOT/PARTS``, sorted; none when it
        cannot be listed."""
        return procfiles.list_kernel_directory(self.under(*parts))

    def kernel_link(self, *parts: str) -> str | None:
        """Where the kernel's link at ``ROOT/PARTS`` (a device's ``driver``) points, ``None`` when
        unreadable."""
        return procfiles.kernel_link(self.under(*parts))

    # -- files a process names, read as its owner inside its root ---------------------------------

    def in_root(self, pid: int, path: str) -> str:
        """``path`` as an absolute path inside the process's root; raises ``Refused``."""
        return namedfiles.in_root(pid, path, self.proc)

    def working_directory(self, pid: int) -> str:
        """The process's working directory, inside its root; raises ``Refused``."""
        return namedfiles.working_directory(pid, self.proc)

    def read_named(self, pid: int, path: str, limit: int, *, whole: bool = True) -> namedfiles.NamedFile:
        """The contents of ``path`` as process ``pid`` names it, size-capped."""
        return namedfiles.read_named(pid, path, limit, whole=whole, proc=self.proc)

    def named_identity(self, pid: int, path: str) -> namedfiles.Identity | None:
        """The identity of ``path`` as process ``pid`` names it, without reading it."""
        return namedfiles.named_identity(pid, path, self.proc)

    def list_named(self, pid: int, path: str, limit: int) -> list[str] | None:
        """At most ``limit`` names in directory ``path`` as process ``pid`` names it."""
        return namedfiles.list_named(pid, path, limit, self.proc)

    def open_named(self, pid: int, path: str) -> int:
        """An fd for reading the regular file ``path`` as process ``pid`` names it; ``Refused``."""
        return namedfiles.open_named(pid, path, self.proc)

    def named_kind(self, pid: int, path: str) -> namedfiles.FileKind | None:
        """What ``path`` is as process ``pid`` names it, ``None`` when its owner sees nothing."""
        return namedfiles.named_kind(pid, path, self.proc)

    def open_held(self, pid: int, fd: int) -> int:
        """An fd for reading the regular file process ``pid`` holds as ``fd``; ``Refused``."""
        return namedfiles.open_held(pid, fd, self.proc)

    def open_as(self, who: procfiles.Owner, path: str, flags: int) -> int:
        """``os.open`` of the host's absolute ``path`` with the filesystem credentials of ``who``
        (:func:`enginespec._host.namedfiles.open_as`); ``Refused``."""
        return namedfiles.open_as(who, self.inside(path), flags)

    # -- this process's own fds: the same under every root ----------------------------------------

    @staticmethod
    def held_path(handle: int) -> str:
        """The path of an fd of this process (``/proc/self/fd/N``): the file itself, not whatever
        its name now points at."""
        return procfiles.held_path(handle)

    @staticmethod
    def reopen(handle: int, flags: int) -> int:
        """A new fd on the file an ``O_PATH`` fd of this process holds, opened with ``flags``."""
        return procfiles.reopen(handle, flags)


#: This host's own root.
HOST_ROOT = HostRoot("/")


@functools.cache
def _made(root: str) -> HostRoot:
    return HOST_ROOT if root == "/" else HostRoot(root)


def host_root(root: str | os.PathLike[str]) -> HostRoot:
    """The reader of the host under ``root`` (this host's for any path of ``/``)."""
    path = os.fspath(root)
    return _made("/" if os.path.realpath(path) == "/" else path)


def proc_host(proc: str) -> HostRoot:
    """The reader of the host whose kernel's process files are at ``proc`` (``ROOT/proc``), for
    the readers keyed by that directory as the backend's ``ProcRoot`` is."""
    return HOST_ROOT if proc == procfiles.PROC else host_root(os.path.dirname(os.path.normpath(proc)))
