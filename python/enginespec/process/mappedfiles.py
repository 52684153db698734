"""The files a process has mapped into its memory, from the kernel's ``/proc/PID/maps`` (read
through the one reading door): each file's device, inode and path as the process sees it (inside
its root). What a process maps says what it runs with: the extension modules a Python loaded
(:mod:`enginespec.process.packages`), the model file a llama.cpp-based server has open
(llama.cpp maps a GGUF whole unless ``use_mmap`` is off).

The lines are the kernel's, but a path in them is whatever name the file was opened by: it is
kept as bytes decoded with ``surrogateescape`` and never trusted beyond comparison.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from enginespec._host.root import HostRoot

#: Most of ``/proc/PID/maps`` read (a large Python server maps a few thousand ranges, ~300 KB).
MAX_MAPS_BYTES = 1 << 24
#: Most distinct files kept.
MAX_FILES = 65_536


@dataclass(frozen=True)
class MappedFile:
    """One file a process maps: ``device`` as ``(major, minor)``, its inode, and its path as the
    process names it (`` (deleted)`` kept when the kernel says so)."""

    device: tuple[int, int]
    inode: int
    path: str


def mapped_files(pid: int, root: HostRoot) -> list[MappedFile] | None:
    """The distinct files process ``pid`` (of the host under ``root``) maps, in the order of their
    first range; ``None`` when its maps cannot be read (gone, or another user's without root)."""
    try:
        data = root.read(pid, "maps", MAX_MAPS_BYTES)
    except OSError:
        return None
    found: dict[tuple[tuple[int, int], int, str], None] = {}
    for line in data.split(b"\n"):
        mapped = _parsed(line)
        if mapped is not None:
            found.setdefault((mapped.device, mapped.inode, mapped.path), None)
            if len(found) >= MAX_FILES:
                break
    return [MappedFile(device, inode, path) for device, inode, path in found]


def _parsed(line: bytes) -> MappedFile | None:
    # `address perms offset dev inode pathname` (proc(5)); the path starts at the first `/`
    # after the five fields, and may hold spaces.
    fields = line.split(None, 5)
    if len(fields) < 6 or not fields[5].startswith(b"/"):
        return None
    major, sep, minor = fields[3].partition(b":")
    try:
        device = (int(major, 16), int(minor, 16)) if sep else None
        inode = int(fields[4])
    except ValueError:
        return None
    if device is None or inode <= 0:
        return None
    return MappedFile(device, inode, os.fsdecode(fields[5].rstrip(b"\n")))
