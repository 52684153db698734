"""The kernel's files, below a root (``/``, or a fixture host's): a process's files in
``ROOT/proc/PID`` (bounded reads, links, its environment), ``/proc/PID/stat``, ``status`` and
``cgroup`` parsed once into named records (:class:`PidStat`, :class:`PidStatus`,
:class:`CgroupLine`, whose fields callers use by name), and the system's files in ``ROOT/proc``
and ``ROOT/sys``. Only ``_host/`` names ``/proc``: the facade reads a record's host through
:class:`enginespec._host.root.HostRoot`, the scan through its backend's ``ProcRoot``; files a
process names are read by :mod:`enginespec._host.namedfiles`.

Each read that fails says so (``None``, or ``OSError`` where documented); nothing here raises
for a process's file otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import struct
import sys
from dataclasses import dataclass

#: Where the kernel's process files are (a scanner given a fixture host's root reads ROOT/proc:
#: every reader here takes that as ``proc``).
PROC = "/proc"
#: Where the kernel's system files are.
SYS = "/sys"
#: This process's own fds: always the real ones.
_SELF_FD = "/proc/self/fd"

# (openat2, setgroups taking 32-bit gids, statx) by machine; openat2 is 437 wherever the
# syscall table is shared (arch/*/kernel/syscalls/syscall.tbl, Linux 5.6; statx since 4.11).
_SYSCALLS = {
    "x86_64": (437, 116, 332),
    "aarch64": (437, 159, 291),
    "arm64": (437, 159, 291),
    "riscv64": (437, 159, 291),
    "loongarch64": (437, 159, 291),
    "ppc64le": (437, 81, 383),
    "ppc64": (437, 81, 383),
    "s390x": (437, 206, 379),
    "i686": (437, 206, 383),
    "i386": (437, 206, 383),
    "armv7l": (437, 206, 397),
}
#: The C library, for the syscalls Python does not wrap.
libc = ctypes.CDLL(None, use_errno=True)
#: Linux's syscall numbers (openat2, setgroups, statx) on this machine; elsewhere (macOS:
#: "arm64" too) none of them, and nothing is read as another user.
NUMBERS = _SYSCALLS.get(platform.machine()) if sys.platform.startswith("linux") else None
if NUMBERS is not None:
    libc.syscall.restype = ctypes.c_long


@dataclass(frozen=True)
class Owner:
    """The credentials the kernel checks a process's file accesses with (``/proc/PID/status``:
    the filesystem uid and gid, and the supplementary groups)."""

    uid: int
    gid: int
    groups: tuple[int, ...]


def proc_path(pid: int | str, name: str, proc: str = PROC) -> str:
    """``PROC/PID/NAME``: where a file of a process is (``pid`` may be ``self``)."""
    return f"{proc}/{pid}/{name}"


def read_proc(pid: int | str, name: str, limit: int, proc: str = PROC) -> bytes:
    """At most ``limit`` bytes of ``PROC/PID/NAME`` (``-1``: all of a file the kernel writes, such
    as ``net/unix``); ``OSError`` as :func:`open` raises it."""
    with open(proc_path(pid, name, proc), "rb") as file:
        return file.read(limit)


def proc_link(pid: int | str, name: str, proc: str = PROC) -> str:
    """Where the link ``PROC/PID/NAME`` points (``exe``, ``cwd``, ``fd/1``); ``OSError`` as
    :func:`os.readlink` raises it."""
    return os.readlink(proc_path(pid, name, proc))


def read_kernel_file(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a file the kernel writes (``ROOT/proc/devices``,
    ``ROOT/sys/class/drm/card0/dev``, a cgroup's ``memory.events``), ``None`` when it cannot be
    read. Only a regular file is read (what the kernel's files are): a FIFO or device a fixture
    root or a container's bind mount puts there is refused, never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def list_kernel_directory(path: str) -> list[str]:
    """The names in a directory the kernel lists (``ROOT/sys/class/drm``, ``ROOT/proc``), sorted;
    none when it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def kernel_link(path: str) -> str | None:
    """Where a link of the kernel's points (a device's ``driver``), ``None`` when unreadable."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def device_link(target: str, root: str) -> bool:
    """Whether an fd's link names a device node worth a stat: a path in ``/dev`` (the process's
    own, in a container) but not a terminal, ``/dev/null`` or a ``/dev/shm`` or ``/dev/mqueue``
    file. Only those are followed: reading a link never reaches the file's filesystem, a stat
    does (``is_device_link`` in procfs.rs)."""
    base = root.rstrip("/")
    if base and target.startswith(base + "/"):
        target = target[len(base) :]  # a fixture host's links name its own /dev
    if not target.startswith("/dev/"):
        return False  # socket:[...], pipe:[...], anon_inode:..., files elsewhere
    return not target.startswith(("/dev/shm/", "/dev/pts/", "/dev/mqueue/")) and target != "/dev/null"


_AT_FDCWD = -100
_AT_STATX_DONT_SYNC = 0x4000
_STATX_TYPE = 0x1
#: Where ``struct statx`` (256 bytes) keeps ``stx_mode`` and ``stx_rdev_major``/``_minor``
#: (include/uapi/linux/stat.h).
_STATX_SIZE, _STATX_MODE_AT, _STATX_RDEV_AT = 256, 28, 128


def char_device(path: str) -> tuple[int, int] | None:
    """The (major, minor) of the character device at ``path`` (an fd's link, followed), ``None``
    for anything else. Asked with ``AT_STATX_DONT_SYNC``: the attributes as the kernel holds
    them, so a FUSE or network filesystem a process mounted over part of its ``/dev`` is never
    asked and cannot keep a scan waiting (``char_device`` in procread.rs)."""
    if NUMBERS is not None:
        found = ctypes.create_string_buffer(_STATX_SIZE)
        done = libc.syscall(
            ctypes.c_long(NUMBERS[2]),
            ctypes.c_int(_AT_FDCWD),
            os.fsencode(path),
            ctypes.c_int(_AT_STATX_DONT_SYNC),
            ctypes.c_uint(_STATX_TYPE),
            found,
        )
        if done == 0:
            (mode,) = struct.unpack_from("=H", found, _STATX_MODE_AT)
            major, minor = struct.unpack_from("=II", found, _STATX_RDEV_AT)
            return (major, minor) if stat.S_ISCHR(mode) else None
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):
            return None
        # A kernel before 4.11, or a seccomp profile that refuses statx: a plain stat, of a link
        # already known to name a path in /dev.
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (os.major(info.st_rdev), os.minor(info.st_rdev)) if stat.S_ISCHR(info.st_mode) else None


def held_path(handle: int) -> str:
    """The path of an fd of this process (``/proc/self/fd/N``): the file or directory itself,
    not whatever its name now points at."""
    return f"{_SELF_FD}/{handle}"


def reopen(handle: int, flags: int) -> int:
    """A new fd on the file an ``O_PATH`` fd of this process holds, opened with ``flags``."""
    return os.open(held_path(handle), flags)


@dataclass(frozen=True)
class PidStat:
    """``/proc/PID/stat``, parsed once, the fields callers use by name (as procfs-core's
    ``Stat``). They are counted from the last ``)``: the command name before it is the
    process's to choose (spaces, parentheses)."""

    #: field 3: ``R``, ``S``, ``D``, ``Z`` (a zombie), ``X`` ...
    state: str
    #: field 4
    ppid: int
    #: fields 14 and 15: CPU time in user and in system mode, in clock ticks
    utime: int
    stime: int
    #: field 22: the start in clock ticks since boot. The exact start: epoch seconds computed
    #: from it move with the kernel's boot time, which is stepped with the clock.
    start_ticks: int
    #: field 52: a zombie's wait status, as ``waitpid`` gives it (``None`` before Linux 3.5)
    exit_code: int | None


def parse_stat(data: bytes) -> PidStat | None:
    """The text of ``/proc/PID/stat`` as a :class:`PidStat`, ``None`` when it is not one."""
    try:
        fields = data.rsplit(b")", 1)[1].split()
        exit_code = fields[49] if len(fields) > 49 else b""
        return PidStat(
            state=fields[0].decode("ascii", "replace"),
            ppid=int(fields[1]),
            utime=int(fields[11]),
            stime=int(fields[12]),
            start_ticks=int(fields[19]),
            exit_code=int(exit_code) if exit_code.isdigit() else None,
        )
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class PidStatus:
    """``/proc/PID/status``, parsed once, the fields callers use by name (as procfs-core's
    ``Status``); a field the file lacks, or does not hold as numbers, is ``None``."""

    #: ``PPid:``
    ppid: int | None
    #: ``Uid:``'s first and last: the real uid (who runs it: the owner of ``/proc/PID`` is root
    #: for any non-dumpable process) and the filesystem uid (what file accesses are checked with)
    ruid: int | None
    fuid: int | None
    #: ``Gid:``'s first and last, as ``Uid:``'s
    rgid: int | None
    fgid: int | None
    #: ``Groups:``: the supplementary groups
    groups: tuple[int, ...] | None
    #: ``NSpid:``: its pid in each pid namespace it is in, the outermost (this root's) first
    nspid: tuple[int, ...] | None

    @property
    def owner(self) -> Owner | None:
        """The credentials its file accesses are checked with; ``None`` when not all are known."""
        if self.fuid is None or self.fgid is None or self.groups is None:
            return None
        return Owner(self.fuid, self.fgid, self.groups)


def parse_status(data: bytes) -> PidStatus:
    """The text of ``/proc/PID/status`` as a :class:`PidStatus`. Lines end at ``\\n`` alone
    (the kernel escapes it in the one field a process names, ``Name:``, but no other line
    separator, which ``str.splitlines`` would also split at); a field's first line counts."""
    words: dict[bytes, list[bytes]] = {}
    for line in data.split(b"\n"):
        key, colon, value = line.partition(b":")
        if colon and key not in words:
            words[key] = value.split()

    def numbers(key: bytes) -> tuple[int, ...] | None:
        found = words.get(key)
        if found is None or not all(word.isdigit() for word in found):
            return None
        return tuple(int(word) for word in found)

    ppid, uid, gid = numbers(b"PPid"), numbers(b"Uid"), numbers(b"Gid")
    return PidStatus(
        ppid=ppid[0] if ppid else None,
        ruid=uid[0] if uid else None,
        fuid=uid[3] if uid and len(uid) == 4 else None,
        rgid=gid[0] if gid else None,
        fgid=gid[3] if gid and len(gid) == 4 else None,
        groups=numbers(b"Groups"),
        nspid=numbers(b"NSpid") or None,
    )


def read_stat(pid: int, proc: str) -> PidStat | None:
    """``PROC/PID/stat``, parsed; ``None`` when gone or unreadable."""
    try:
        return parse_stat(read_proc(pid, "stat", 4096, proc))
    except OSError:
        return None


def read_status(pid: int | str, proc: str) -> PidStatus | None:
    """``PROC/PID/status``, parsed; ``None`` when gone or unreadable."""
    try:
        return parse_status(read_proc(pid, "status", 1 << 16, proc))
    except OSError:
        return None


@dataclass(frozen=True)
class CgroupLine:
    """One line of ``/proc/PID/cgroup``: ``hierarchy`` 0 with no ``controllers`` is the v2
    unified one; a v1 line names its controllers (``cpu,cpuacct``); ``path`` is the cgroup's
    below the hierarchy's mount (it may name a systemd unit: ``.../ollama.service``)."""

    hierarchy: int
    controllers: tuple[str, ...]
    path: str


#: At most this much of ``/proc/PID/cgroup`` is read (a line per v1 hierarchy: a few hundred bytes).
CGROUP_BYTES = 1 << 16


def parse_cgroup_lines(data: bytes) -> tuple[CgroupLine, ...]:
    """The lines of ``/proc/PID/cgroup`` (``ID:CONTROLLERS:PATH``), those of another form left
    out; a path is decoded as the filesystem names it (``os.fsdecode``)."""
    found = []
    for line in data.split(b"\n"):
        hierarchy, colon, rest = line.partition(b":")
        controllers, colon2, path = rest.partition(b":")
        if colon and colon2 and hierarchy.isdigit():
            names = tuple(os.fsdecode(name) for name in controllers.split(b",") if name)
            found.append(CgroupLine(int(hierarchy), names, os.fsdecode(path)))
    return tuple(found)


def read_cgroup_lines(pid: int, proc: str) -> tuple[CgroupLine, ...] | None:
    """``PROC/PID/cgroup``, parsed; ``None`` when gone or unreadable."""
    try:
        return parse_cgroup_lines(read_proc(pid, "cgroup", CGROUP_BYTES, proc))
    except OSError:
        return None


def owner(pid: int, proc: str = PROC) -> Owner | None:
    """The owner of ``pid``, ``None`` when gone or unreadable."""
    status = read_status(pid, proc)
    return None if status is None else status.owner


def process_state(pid: int, proc: str = PROC) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) from ``/proc/PID/stat``."""
    found = read_stat(pid, proc)
    return None if found is None else (found.state, found.start_ticks)


def start_ticks(pid: int, proc: str = PROC) -> int | None:
    """The start of ``pid`` in clock ticks since boot (see :class:`PidStat`)."""
    found = read_stat(pid, proc)
    return None if found is None else found.start_ticks


def boot_time(proc: str) -> float | None:
    """When the host booted, in epoch seconds (``btime`` of ``PROC/stat``), ``None`` when unread."""
    for line in (read_kernel_file(f"{proc}/stat", 1 << 20) or b"").split(b"\n"):
        words = line.split()
        if len(words) == 2 and words[0] == b"btime" and words[1].isdigit():
            return float(int(words[1]))
    return None


def cpu_busy_ticks(proc: str) -> int | None:
    """The clock ticks all CPUs spent busy since boot: the ``cpu`` line of ``PROC/stat`` (proc(5):
    user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice), less idle and
    iowait (guest time is in user already); ``None`` when unread."""
    for line in (read_kernel_file(f"{proc}/stat", 1 << 20) or b"").split(b"\n")[:1]:
        words = line.split()
        if len(words) >= 9 and words[0] == b"cpu" and all(w.isdigit() for w in words[1:9]):
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(w) for w in words[1:9])
            return user + nice + system + irq + softirq + steal
    return None


def read_environ(pid: int, limit: int, proc: str = PROC) -> tuple[list[bytes], bool] | None:
    """The ``NAME=value`` entries of ``pid``'s environment, at most ``limit`` bytes of them, and
    whether there was more (the entry cut there is left out); ``None`` when unreadable."""
    try:
        data = read_proc(pid, "environ", limit + 1, proc)
    except OSError:  # another user's process, for a scan that is not root; gone
        return None
    if len(data) <= limit:
        return data.split(b"\0"), False
    return data[:limit].split(b"\0")[:-1], True
