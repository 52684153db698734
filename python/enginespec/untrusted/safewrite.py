"""The one way enginespec writes a file (a discovery feed, the exporter's textfile, a run's log, the
help cache), so that no other user can redirect what it writes.

enginespec often runs as root and writes where other users may have a hand: a name another user
planted as a symlink must never be written through, a directory another user can change must not
be trusted to keep what is put there. So every file is made by ``O_CREAT|O_EXCL|O_NOFOLLOW`` (a
name that exists, a symlink above all, fails instead of being followed), relative to one open
descriptor of its directory (a directory swapped after the check is not written into), with a
random temporary name for a file replaced whole (never a name another user can guess and plant
first). A directory other users can write (see :func:`others_can_write`) is refused, unless it is
sticky (as ``/tmp``: only a file's owner may rename or remove it) and the file there is ours or
new. A new file's mode comes from the umask (created ``0666``, as ``open`` does) unless the caller
states one. A replaced file is synced before it is renamed over the old one, and the directory
after, so a reader sees the old file or the new one, never part of one, even after a crash.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from enginespec.errors import FileWriteError

#: Tries at a fresh temporary name before giving up (each one random: a clash is someone's plant).
_TRIES = 8


def others_can_write(info: os.stat_result) -> bool:
    """Whether users other than this process's (and root) can change a directory with this
    ``stat``: one owned by another user (its owner may ``chmod`` it), writable by all, or
    writable by a group that is not only ours (a group other than our effective gid, or one that
    lists another member)."""
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        return True
    if info.st_mode & stat.S_IWOTH:
        return True
    return bool(info.st_mode & stat.S_IWGRP) and _group_is_shared(info.st_gid)


def _group_is_shared(gid: int) -> bool:
    import grp
    import pwd

    if gid != os.getegid():
        return True
    try:
        members = grp.getgrgid(gid).gr_mem
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a group or user the system does not name: nobody can be ruled out
        return True
    return any(member != me for member in members)


def _problem(field: str, path: str, reason: str) -> FileWriteError:
    return FileWriteError(f"{field} {path}: {reason}")


def _open_directory(path: str, field: str, parents: bool) -> tuple[int, str]:
    """An fd of the directory ``path`` goes in, checked, and the file's name in it."""
    directory, name = os.path.split(os.path.abspath(path))
    if not name:
        raise _problem(field, path, "names a directory, not a file")
    try:
        if parents:
            os.makedirs(directory, exist_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise _problem(field, path, f"cannot write in {directory}: {err.strerror or err}") from None
    try:
        info = os.fstat(dir_fd)
        if others_can_write(info):
            if not info.st_mode & stat.S_ISVTX:
                raise _problem(
                    field,
                    path,
                    f"refused: other users can write in {directory} and it is not sticky "
                    "(they could replace the file); write it in a directory only you can change",
                )
            _check_ours(dir_fd, name, field, path)
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd, name


def _check_ours(dir_fd: int, name: str, field: str, path: str) -> None:
    """In a sticky directory others can write: a file already at ``name`` must be our own
    regular file (another user's, or a symlink, may not be replaced by it)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as err:
        raise _problem(field, path, f"cannot write: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        raise _problem(
            field,
            path,
            f"refused: it is another user's {'file' if stat.S_ISREG(info.st_mode) else 'link or file'} "
            "in a directory other users can write",
        )


def _create(dir_fd: int, name: str, mode: int | None, flags: int) -> int:
    """A new file ``name`` (never an existing one, never through a symlink), mode from the umask
    or ``mode``."""
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | flags,
        0o666 if mode is None else 0o600,
        dir_fd=dir_fd,
    )
    if mode is not None:
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _temporary(dir_fd: int, mode: int | None, field: str, path: str) -> tuple[int, str]:
    """A new temporary file of a random name in the directory: its fd and name."""
    for _ in range(_TRIES):
        name = f".enginespec-{secrets.token_hex(8)}.tmp"
        try:
            return _create(dir_fd, name, mode, 0), name
        except FileExistsError:
            continue
        except OSError as err:
            raise _problem(field, path, f"cannot write: {err.strerror or err}") from None
    raise _problem(field, path, "cannot write: every temporary name tried was taken")


def replace_file(
    path: str, data: bytes, *, field: str, mode: int | None = None, parents: bool = False
) -> None:
    """Replaces ``path`` by a file holding ``data`` (see the module): a temporary file of a random
    name beside it, synced, renamed over it (over a symlink there too: the link is replaced, what
    it points at is untouched), the directory synced. ``field`` names what asked for the file in
    errors (``--out``); ``parents``: the directories above are made first. Raises
    :class:`FileWriteError` naming ``field`` and ``path``."""
    dir_fd, name = _open_directory(path, field, parents)
    try:
        fd, temporary = _temporary(dir_fd, mode, field, path)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=dir_fd)
            raise _problem(field, path, f"cannot write: {err.strerror or err}") from None
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def create_file(path: str, *, field: str, mode: int | None = None, parents: bool = False) -> int:
    """A new file at ``path`` to append to (a run's log), as a file descriptor: never an existing
    name, never through a symlink, in a directory checked as for :func:`replace_file`. Raises
    :class:`FileWriteError` naming ``field`` and ``path`` (a file already there included)."""
    dir_fd, name = _open_directory(path, field, parents)
    try:
        return _create(dir_fd, name, mode, os.O_APPEND)
    except FileExistsError:
        raise _problem(field, path, "cannot write: something is already there") from None
    except OSError as err:
        raise _problem(field, path, f"cannot write: {err.strerror or err}") from None
    finally:
        os.close(dir_fd)
