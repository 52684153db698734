"""Reading a model's files, every one of them untrusted: from this process's own view (:data:`HOST`)
or a running process's (``models.processes.ProcessFiles``), opened only if it is a regular file,
read with size caps, parsed with limits; a problem is a :class:`ModelError` naming the file and the
field, never a crash."""

from __future__ import annotations

import os
import stat
from typing import Any, Literal

from enginespec._host.root import HostRoot
from enginespec.definition.modelrecords import Files
from enginespec.untrusted.documents import DocumentError, parse_json

#: The most bytes of a model's JSON file read (``config.json``; an index may be given more).
MAX_JSON_BYTES = 4 << 20
#: The most values a safetensors header or index may hold (about one per 10 bytes of its cap).
MAX_HEADER_VALUES = 1 << 20
#: The largest count of elements, bytes or parameters taken from a model's files: a model file
#: states them in 64 bits; a sum or product beyond that is a file that lies.
MAX_COUNT = (1 << 63) - 1


class ModelError(ValueError):
    """A model's files could not be read or make no sense; the message names the file and why."""


class HostFiles:
    """Files as this process itself may read them."""

    def open(self, path: str) -> int:
        """Checked on an ``O_PATH`` fd before anything is opened for reading; where there is no
        ``O_PATH`` (macOS), by ``stat`` first, opened non-blocking, then checked on the fd."""
        readonly = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        o_path = getattr(os, "O_PATH", 0)
        try:
            if not o_path:
                if not stat.S_ISREG(os.stat(path).st_mode):
                    raise ModelError(f"{path}: not a regular file")
                fd = os.open(path, readonly)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise ModelError(f"{path}: not a regular file")
                return fd
            probe = os.open(path, o_path | os.O_CLOEXEC)
        except OSError as e:
            raise ModelError(f"{path}: {e.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(probe).st_mode):
                raise ModelError(f"{path}: not a regular file")
            try:
                return HostRoot.reopen(probe, readonly)
            except OSError as e:
                raise ModelError(f"{path}: {e.strerror}") from None
        finally:
            os.close(probe)

    def kind(self, path: str) -> Literal["file", "directory", "other"] | None:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            return None
        return "directory" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    def names(self, path: str, limit: int) -> list[str] | None:
        try:
            with os.scandir(path) as entries:
                return [entry.name for _, entry in zip(range(limit), entries, strict=False)]
        except (OSError, ValueError):
            return None


#: This process's own view of the filesystem.
HOST: Files = HostFiles()


def read_capped(path: str, limit: int, fs: Files = HOST) -> bytes:
    fd = fs.open(path)
    try:
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ModelError(f"{path}: larger than {limit} bytes")
    return data


def read_json(
    path: str, fs: Files, limit: int = MAX_JSON_BYTES, values: int = MAX_HEADER_VALUES
) -> dict[str, Any]:
    """A JSON object a model's file holds, read through the one bounded reader (depth, size,
    numbers finite and of 64 bits): anything else is a ModelError naming the file and why."""
    try:
        value = parse_json(read_capped(path, limit, fs), max_values=values)
    except DocumentError as e:
        raise ModelError(f"{path}: {e}") from None
    if not isinstance(value, dict):
        raise ModelError(f"{path}: not a JSON object")
    return value


def as_count(value: Any) -> int | None:
    """A count a model's file states (of elements, bytes, layers...): an integer from 0 to
    :data:`MAX_COUNT`, else ``None``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    return value if ok else None
