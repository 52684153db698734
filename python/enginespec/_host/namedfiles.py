"""Files a process names (its config file, its checkout, its model), read as that process's owner
would read them and resolved inside that process's root (the kernel's own files are read by
:mod:`enginespec._host.procfiles`).

Any user on the host can name any path (``--config /root/.ssh/id_rsa``, a FIFO, ``/dev/tty``, a
symlink into the host from a container, ``/proc/self/...`` which would be this scanner), so:

- the path is resolved inside the process's root: ``openat2(RESOLVE_IN_ROOT |
  RESOLVE_NO_MAGICLINKS)`` from an fd of ``/proc/PID/root`` (a relative path from its working
  directory, as seen inside that root); where the kernel has no ``openat2`` (before 5.6, or a
  seccomp filter), a walk of the path one component at a time with ``O_NOFOLLOW`` that resolves
  symlinks itself, inside the root, and follows none that lives on ``/proc``;
- with the owner's permissions: the resolving thread takes the process's filesystem uid, gid and
  supplementary groups (``setfsuid``/``setfsgid`` and the raw ``setgroups`` syscall change only
  the calling thread's credentials; taking a non-root fsuid drops the thread's DAC
  capabilities), so the kernel itself checks search permission on every directory on the way
  and read permission on the file, ACLs included, as it would for the owner. That thread is a
  worker that gives its own credentials back after each step (signal handlers, which run in the
  main thread, never run with the owner's);
- the path is opened ``O_PATH`` first: nothing is opened that is not a regular file on a disk
  filesystem (a FIFO would block, ``/dev/ptmx`` allocates a terminal, ``/dev/watchdog`` arms a
  timer); only then is it opened for reading (``O_NONBLOCK | O_NOCTTY``), through that very fd,
  and read with a size cap;
- every step runs under a deadline (a file on a FUSE filesystem whose daemon never answers);
  a step that misses it is abandoned, and after :data:`MAX_STUCK` abandoned steps none is begun
  until one of them ends.

Each failure is a reason (a phrase) for the caller to report; nothing here raises for a file.
"""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import stat
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from enginespec._host.procfiles import (
    NUMBERS,
    PROC,
    Owner,
    held_path,
    libc,
    owner,
    proc_path,
    read_kernel_file,
    reopen,
)

#: How long one step (resolve, open, read, for one process) may take.
STEP_SECONDS = 2.0
#: Steps abandoned after missing their deadline (still blocked in the kernel) before no more begin.
MAX_STUCK = 4
#: Symlinks followed in one path, as the kernel's own limit (MAXSYMLINKS).
MAX_SYMLINKS = 40

_T = TypeVar("_T")

# <linux/openat2.h>; <linux/magic.h>
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_PSEUDO_FILESYSTEMS = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x62656570: "configfs",
    0xDE5E81E4: "efivarfs",
    0xCAFE4A11: "bpf",
}
if NUMBERS is not None:
    for _name in ("setfsuid", "setfsgid"):
        getattr(libc, _name).argtypes = (ctypes.c_uint,)
        getattr(libc, _name).restype = ctypes.c_uint
#: Whether openat2 is used (``None``: not found out yet; tests set ``False`` to exercise the walk).
use_openat2: bool | None = None if NUMBERS is not None else False


class Refused(Exception):
    """Why a file a process names is not read: a phrase such as ``is not a regular file (a
    FIFO)``, to follow the file's name."""


#: What identifies the contents of a file read: (device, inode, size, mtime ns, ctime ns).
Identity = tuple[int, int, int, int, int]


def _fail(err: OSError) -> Refused:
    if err.errno in (errno.EACCES, errno.EPERM):
        return Refused("is not readable by the process's owner; not read")
    if err.errno == errno.ELOOP:
        return Refused(
            "leads through a link that is not followed (a /proc magic link, or too many symbolic links);"
            " not read"
        )
    return Refused(f"cannot be read: {err.strerror}")


def _openat2(root: int, path: str, flags: int) -> int:
    assert NUMBERS is not None
    how = struct.pack("=QQQ", flags, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    for _attempt in range(8):
        fd = int(libc.syscall(ctypes.c_long(NUMBERS[0]), root, os.fsencode(path), how, len(how)))
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:  # EAGAIN: a rename raced a `..`: the kernel asks to retry
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def _filesystem(fd: int) -> int:
    """The ``f_type`` of the filesystem ``fd`` is on (``fstatfs``; its first field)."""
    buffer = ctypes.create_string_buffer(256)
    if libc.fstatfs(fd, buffer) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return ctypes.c_ulong.from_buffer(buffer).value & 0xFFFFFFFF


def _walk(root: int, path: str, follow_last: bool) -> int:
    """An ``O_PATH`` fd of ``path`` resolved inside ``root`` (an fd), one component at a time,
    as ``openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`` would: ``..`` stops at the root, an
    absolute symlink starts again from it, a symlink on ``/proc`` is not followed."""
    root_stat = os.fstat(root)
    names = path.split("/")
    names.reverse()
    current = os.dup(root)
    links = 0
    try:
        while names:
            name = names.pop()
            if name in ("", "."):
                continue
            if name == "..":
                here = os.fstat(current)
                if (here.st_dev, here.st_ino) == (root_stat.st_dev, root_stat.st_ino):
                    continue
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
            found = os.open(name, flags, dir_fd=current)
            status = os.fstat(found)
            if stat.S_ISLNK(status.st_mode) and (names or follow_last):
                os.close(found)
                links += 1
                if links > MAX_SYMLINKS or _filesystem(current) in _PSEUDO_FILESYSTEMS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                target = os.readlink(name, dir_fd=current)
                parts = target.split("/")
                parts.reverse()
                names.extend(parts)
                if target.startswith("/"):
                    os.close(current)
                    current = os.dup(root)
                continue
            if names and not stat.S_ISDIR(status.st_mode):
                os.close(found)
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            os.close(current)
            current = found
        return current
    except BaseException:
        os.close(current)
        raise


def _resolve(root: int, path: str, follow_last: bool = True) -> int:
    """An ``O_PATH`` fd of ``path`` (absolute, inside the process's root) in ``root``."""
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow_last else os.O_NOFOLLOW)
    return _openat2(root, path, flags) if _openat2_works() else _walk(root, path, follow_last)


def _openat2_works() -> bool:
    """Whether ``openat2`` works here (ENOSYS before Linux 5.6; EPERM or ENOSYS from a seccomp
    filter): found out once."""
    global use_openat2
    if use_openat2 is None:
        try:
            here = os.open("/", os.O_PATH | os.O_CLOEXEC)
            try:
                os.close(_openat2(here, ".", os.O_PATH | os.O_CLOEXEC))
            finally:
                os.close(here)
            use_openat2 = True
        except OSError:
            use_openat2 = False
    return use_openat2


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, by its ``st_mode``: ``a FIFO``, ``a directory`` ..."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _regular(fd: int) -> os.stat_result:
    """The status of ``fd`` if it is a regular file on a disk filesystem, else :class:`Refused`."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        raise Refused(f"is not a regular file ({file_kind(status.st_mode)}); not read")
    pseudo = _PSEUDO_FILESYSTEMS.get(_filesystem(fd))
    if pseudo is not None:
        raise Refused(f"is on a kernel filesystem ({pseudo}), not a file; not read")
    return status


def _identity(status: os.stat_result) -> Identity:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


# --- credentials of one thread --------------------------------------------------------------


def _set_groups(groups: Sequence[int]) -> None:
    assert NUMBERS is not None
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    if libc.syscall(ctypes.c_long(NUMBERS[1]), len(groups), array) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _set_fs_ids(uid: int, gid: int) -> bool:
    """Sets this thread's fsgid and fsuid; whether the kernel took them (it says nothing)."""
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    return bool(libc.setfsuid(0xFFFFFFFF) == uid and libc.setfsgid(0xFFFFFFFF) == gid)


def _credentials() -> Owner:
    """This thread's filesystem credentials (``setfsuid(-1)`` changes nothing, and says them)."""
    return Owner(libc.setfsuid(0xFFFFFFFF), libc.setfsgid(0xFFFFFFFF), tuple(os.getgroups()))


def _as_owner(who: Owner) -> None:
    """Gives this thread the filesystem credentials of ``who`` (the worker gives its own back)."""
    mine = _credentials()
    if who.uid == mine.uid and who.gid == mine.gid and set(who.groups) == set(mine.groups):
        return
    if NUMBERS is None:
        raise Refused(f"cannot be read as the process's owner (uid {who.uid}) on this machine; not read")
    try:
        _set_groups(who.groups)
    except OSError as err:
        raise Refused(f"cannot be read as the process's owner (uid {who.uid}): {err.strerror}") from None
    if not _set_fs_ids(who.uid, who.gid):
        raise Refused(f"cannot be read as the process's owner (uid {who.uid}) by this scanner; not read")


def _restore(mine: Owner) -> bool:
    """Gives this thread back the credentials ``mine``; whether it has them."""
    if _credentials() == mine:
        return True
    try:
        _set_groups(mine.groups)
    except OSError:
        return False
    return _set_fs_ids(mine.uid, mine.gid) and _credentials() == mine


# --- one step at a time, in a worker thread, under a deadline --------------------------------


class _Job:
    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self.done = threading.Event()
        self.outcome: object = None
        #: given up on by its caller: the worker that runs it is retired
        self.late = False


class _Worker:
    """A thread that runs steps one at a time and gives its credentials back after each; one
    still blocked in the kernel when its caller gives up is retired (it ends when the step
    does), and so is one whose credentials could not be given back."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.retired = False
        threading.Thread(target=self._run, name="enginespec-procfiles", daemon=True).start()

    def _run(self) -> None:
        global _stuck, _worker
        mine = _credentials()
        while True:
            job = self.jobs.get()
            try:
                job.outcome = job.action()
            except BaseException as err:  # handed to the caller, as raised
                job.outcome = err
            restored = _restore(mine)
            with _lock:
                job.done.set()
                if job.late:
                    _stuck -= 1
                if not restored:
                    self.retired = True
                    if _worker is self:
                        _worker = None
                if self.retired:
                    return


_lock = threading.Lock()  # guards the two below
_worker: _Worker | None = None
_stuck = 0
_busy = threading.Lock()  # one step at a time


def _forget_workers() -> None:
    """In a forked child, which has none of its parent's threads (nor their locks' owners)."""
    global _lock, _worker, _stuck, _busy
    _lock, _worker, _stuck, _busy = threading.Lock(), None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)


def _in_thread(action: Callable[[], _T]) -> _T:
    """``action()`` in the worker thread, waited for at most :data:`STEP_SECONDS`."""
    global _stuck, _worker
    if not _busy.acquire(timeout=STEP_SECONDS):
        raise Refused(f"not read: another read of a file named by a process took over {STEP_SECONDS:g} s")
    try:
        with _lock:
            if _stuck >= MAX_STUCK:
                raise Refused(f"not read: {_stuck} earlier reads of files named by processes still hang")
            worker = _worker = _worker or _Worker()
        job = _Job(action)
        worker.jobs.put(job)
        if not job.done.wait(STEP_SECONDS):
            with _lock:
                if not job.done.is_set():
                    job.late = worker.retired = True
                    _worker = None
                    _stuck += 1
                    raise Refused(f"took longer than {STEP_SECONDS:g} s to read; not read")
    finally:
        _busy.release()
    if isinstance(job.outcome, BaseException):
        raise job.outcome
    return job.outcome  # type: ignore[return-value]


def in_root(pid: int, path: str, proc: str = PROC) -> str:
    """``path`` as an absolute path inside the process's root: a relative one from its working
    directory (``/proc/PID/cwd`` as seen from ``/proc/PID/root``)."""
    if path.startswith("/"):
        return path
    try:
        root = os.readlink(f"{proc}/{pid}/root")
        cwd = os.readlink(f"{proc}/{pid}/cwd")
    except OSError as err:
        raise _fail(err) from None
    if root == "/":
        return f"{cwd}/{path}"
    if cwd == root or cwd.startswith(root + "/"):
        return f"{cwd[len(root) :]}/{path}"
    raise Refused("is relative to a working directory outside the process's root; not read")


def working_directory(pid: int, proc: str = PROC) -> str:
    """The process's working directory as an absolute path inside its root (``/proc/PID/cwd`` as
    seen from ``/proc/PID/root``), for a path it names relative to it that is to be reached, not
    read (a unix socket); raises ``Refused`` when the link cannot be read (another user's
    process, to a reader that is not root), or names no directory this reader can reach: outside
    the process's root, not absolute (``(unreachable)...``), or deleted (the kernel's link then
    ends in `` (deleted)``, as would a directory so named: refused both ways)."""
    try:
        root = os.readlink(f"{proc}/{pid}/root")
        cwd = os.readlink(f"{proc}/{pid}/cwd")
    except OSError as err:
        raise Refused(f"is relative to a working directory that cannot be read ({err.strerror})") from None
    if not cwd.startswith("/") or cwd.endswith(" (deleted)"):
        raise Refused("is relative to a working directory that was deleted or cannot be reached")
    if root == "/":
        return cwd
    if cwd == root:
        return "/"
    if cwd.startswith(root + "/"):
        return cwd[len(root) :]
    raise Refused("is relative to a working directory outside the process's root")


def _with_root(pid: int, paths: Sequence[str], action: Callable[[int, list[str]], _T], proc: str) -> _T:
    """``action(root fd, paths inside the root)`` as ``pid``'s owner, in the worker thread."""
    who = owner(pid, proc)
    if who is None:
        raise Refused("cannot be read: the process's owner is unknown")
    inside = [in_root(pid, path, proc) for path in paths]
    try:
        root = os.open(f"{proc}/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise _fail(err) from None

    def run() -> _T:
        try:
            _as_owner(who)
            return action(root, inside)
        finally:
            os.close(root)

    return _in_thread(run)


# --- what callers use -----------------------------------------------------------------------


@dataclass(frozen=True)
class NamedFile:
    """A file a process names, as read: ``data`` is ``None`` when it was not (``problem`` says
    why) or does not exist (``missing``)."""

    data: bytes | None
    identity: Identity | None = None
    problem: str | None = None
    missing: bool = False


def read_named(pid: int, path: str, limit: int, *, whole: bool = True, proc: str = PROC) -> NamedFile:
    """The contents of ``path`` as process ``pid`` names it: at most ``limit`` bytes, a larger
    file refused (or, not ``whole``, its first ``limit`` bytes)."""

    def read(root: int, inside: list[str]) -> NamedFile:
        try:
            handle = _resolve(root, inside[0])
        except OSError as err:
            if err.errno == errno.ENOENT:
                return NamedFile(None, missing=True)
            raise _fail(err) from None
        try:
            identity = _identity(_regular(handle))
            if whole and identity[2] > limit:
                return NamedFile(None, identity, f"is larger than {limit} bytes; not read")
            # Opened again through the very fd that was checked: the file, not what its name
            # may have become meanwhile; with the owner's read permission checked now.
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            reader = reopen(handle, flags)
        except OSError as err:  # from here on, the identity is known: an edit is noticed
            return NamedFile(None, identity, str(_fail(err)))
        finally:
            os.close(handle)
        try:
            chunks = []
            size = 0
            while size <= limit and (chunk := os.read(reader, limit + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
            identity = _identity(os.fstat(reader))
        except OSError as err:
            return NamedFile(None, identity, str(_fail(err)))
        finally:
            os.close(reader)
        if size > limit and whole:
            return NamedFile(None, identity, f"is larger than {limit} bytes; not read")
        return NamedFile(b"".join(chunks)[:limit], identity)

    try:
        return _with_root(pid, [path], read, proc)
    except Refused as why:
        return NamedFile(None, problem=str(why))


def list_named(pid: int, path: str, limit: int, proc: str = PROC) -> list[str] | None:
    """The names in directory ``path`` as process ``pid`` names it (at most ``limit`` of them),
    ``None`` when it cannot be listed by the process's owner."""

    def listing(root: int, inside: list[str]) -> list[str] | None:
        try:
            handle = _resolve(root, inside[0])
        except OSError:
            return None
        try:
            if not stat.S_ISDIR(os.fstat(handle).st_mode):
                return None
            directory = reopen(handle, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        finally:
            os.close(handle)
        try:
            with os.scandir(directory) as entries:
                return [entry.name for _, entry in zip(range(limit), entries, strict=False)]
        except OSError:
            return None
        finally:
            os.close(directory)

    try:
        return _with_root(pid, [path], listing, proc)
    except Refused:
        return None


def named_identity(pid: int, path: str, proc: str = PROC) -> Identity | None:
    """The identity of ``path`` as process ``pid`` names it, without reading it (to notice an
    edit); ``None`` when it is not there or not a file that would be read."""

    def identify(root: int, inside: list[str]) -> Identity | None:
        try:
            handle = _resolve(root, inside[0])
        except OSError:
            return None
        try:
            return _identity(_regular(handle))
        except (OSError, Refused):
            return None
        finally:
            os.close(handle)

    try:
        return _with_root(pid, [path], identify, proc)
    except Refused:
        return None


def first_missing(pid: int, paths: Sequence[str], proc: str = PROC) -> str | None:
    """The first of ``paths`` (as process ``pid`` names them) that is not a regular file to its
    owner, its last component not followed; ``None`` when all are."""

    def check(root: int, inside: list[str]) -> str | None:
        for given, path in zip(paths, inside, strict=True):
            try:
                handle = _resolve(root, path, follow_last=False)
            except OSError:
                return given
            try:
                if not stat.S_ISREG(os.fstat(handle).st_mode):
                    return given
            finally:
                os.close(handle)
        return None

    try:
        return _with_root(pid, paths, check, proc)
    except Refused:
        return paths[0] if paths else None


def open_named(pid: int, path: str, proc: str = PROC) -> int:
    """An fd for reading the regular file ``path`` as process ``pid`` names it (for a reader of
    many files, such as a model's folder); raises :class:`Refused`."""

    def opened(root: int, inside: list[str]) -> int:
        try:
            handle = _resolve(root, inside[0])
        except OSError as err:
            raise _fail(err) from None
        try:
            _regular(handle)
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            return os.open(held_path(handle), flags)
        except OSError as err:
            raise _fail(err) from None
        finally:
            os.close(handle)

    return _with_root(pid, [path], opened, proc)


#: ``O_PATH`` in ``flags:`` (octal) of ``/proc/PID/fdinfo/N``, this machine's value (x86's by default).
_O_PATH = getattr(os, "O_PATH", 0o10000000)


def open_held(pid: int, fd: int, proc: str = PROC) -> int:
    """An fd for reading the regular file process ``pid`` holds as ``fd`` (where its output goes),
    opened through ``PROC/PID/fd/N`` with its owner's credentials, so a file the owner may not read
    is refused; so is an ``O_PATH`` fd (no read access for its holder; re-opening its link would
    give one). Raises :class:`Refused`."""
    info = read_kernel_file(proc_path(pid, f"fdinfo/{fd}", proc), 4096)
    flags = next((line.split()[1:2] for line in (info or b"").splitlines() if line.startswith(b"flags:")), [])
    if not flags or not flags[0].isdigit():
        raise Refused("cannot be read: the process's fd is gone or its flags unreadable")
    if int(flags[0], 8) & _O_PATH:
        raise Refused("is held as an O_PATH fd, which cannot read it; not read")
    who = owner(pid, proc)
    if who is None:
        raise Refused("cannot be read: the process's owner is unknown")
    handle = open_as(who, proc_path(pid, f"fd/{fd}", proc), os.O_PATH | os.O_CLOEXEC)
    try:
        _regular(handle)
        return open_as(who, held_path(handle), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        raise _fail(err) from None
    finally:
        os.close(handle)


def open_as(who: Owner, path: str, flags: int) -> int:
    """``os.open(path, flags)`` with the filesystem credentials of ``who``, in the worker thread:
    the kernel checks every directory on the way and the file as it would for them. Raises
    :class:`Refused`."""

    def opened() -> int:
        _as_owner(who)
        try:
            return os.open(path, flags)
        except OSError as err:
            raise _fail(err) from None

    return _in_thread(opened)


FileKind = Literal["file", "directory", "other"]


def named_kind(pid: int, path: str, proc: str = PROC) -> FileKind | None:
    """What ``path`` is as process ``pid`` names it (its symlinks followed inside its root);
    ``None`` when its owner can see nothing there."""

    def look(root: int, inside: list[str]) -> FileKind | None:
        try:
            handle = _resolve(root, inside[0])
        except OSError:
            return None
        try:
            mode = os.fstat(handle).st_mode
        finally:
            os.close(handle)
        return "directory" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    try:
        return _with_root(pid, [path], look, proc)
    except Refused:
        return None
