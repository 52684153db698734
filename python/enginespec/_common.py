"""What both backends and the facade share, so that only the backend selector (``_backend``)
imports a pure-Python twin: the shapes of the records the scanners give, the argv limits both
scanners keep to, the argv words the matchers and the facade both read (as their namesakes in
``rust/matcher.rs``), the kernel's TCP table rows, and GGUF's type sizes."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

from enginespec.signature import Role


class RawInvocation(NamedTuple):
    """What a matcher read from an argv (both backends build this very type)."""

    #: the index of the engine's signature, in the order the matcher was given them
    engine: int
    model: str | None
    served_names: list[str]
    host: str | None
    port: int | None
    role: Role


class RawProcess(NamedTuple):
    """An engine process a scanner found (both backends build this very type); treat its lists
    as read-only: an unchanged engine comes back as the same object."""

    pid: int
    #: epoch seconds: start ticks / CLK_TCK + the boot time the scanner read
    start_time: float
    ppid: int
    argv: list[str]
    facts: RawInvocation
    exe: str | None
    descendants: list[int]
    parent_argv: list[str]
    listen_ports: list[int]


#: What a cgroup path says runs a container (``enginespec.containers.Runtime``).
Runtime = Literal["docker", "podman", "containerd", "cri-o", "kubernetes"]
#: what woke a scanner that waited (``Scanner.wait`` of either backend)
Woke = Literal["polled", "events", "tick", "rescan", "fallback"]

#: At most this many arguments of a process's argv are examined and kept by a scan (as
#: MAX_ARGV_ARGS in procfs.rs): what one process costs must not grow with a 100,000-argument argv.
MAX_ARGV_ARGS = 1024
#: At most this many bytes of argv (each argument with its NUL) are examined and kept.
MAX_ARGV_BYTES = 256 * 1024
#: The last element of a kept argv that the process's goes on beyond (a NUL, which no argument
#: read from ``cmdline`` can hold).
ARGV_CUT = "\0"

# `python`, `python3`, `python3.11`, `python3.13t`, macOS framework `Python`, Windows `pythonw`.
_PYTHON = re.compile(r"(?:python)[0-9.]*[a-z]?", re.IGNORECASE | re.ASCII)
# argparse's own test for "this dash token is a negative number, not a flag".
_NEGATIVE_NUMBER = re.compile(r"-[0-9]+|-[0-9]*\.[0-9]+", re.ASCII)
# CPython options that take no value / a value (`python -u -X dev -m module`).
_PY_SWITCHES = frozenset("bBdEhiIOPqsSuvVx")
_PY_VALUED = frozenset("WX")


def is_python(name: str) -> bool:
    """Whether a basename is a Python interpreter's (as ``is_python`` in Rust)."""
    return bool(_PYTHON.fullmatch(name))


def basename(path: str) -> str:
    """Last path component, `/` or `\\` separated, without a trailing `.exe` (as `basename` in Rust)."""
    name = path[max(path.rfind("/"), path.rfind("\\")) + 1 :]
    if len(name) > 4 and name[-4:].lower() == ".exe" and name[-4:].isascii():
        name = name[:-4]
    return name


def looks_like_flag(token: str) -> bool:
    """A flag, not a value: a leading dash, but not argparse's negative numbers (``-1``, ``-.5``)."""
    return len(token) > 1 and token[0] == "-" and not _NEGATIVE_NUMBER.fullmatch(token)


def parse_port(value: str) -> int | None:
    """A port of ASCII digits, 0-65535 (``"²".isdigit()`` is true, and so it is for fullwidth
    digits)."""
    if not (1 <= len(value) <= 5) or not all("0" <= c <= "9" for c in value):
        return None
    port = int(value)
    return port if port <= 65535 else None


def python_target(argv: Sequence[str]) -> tuple[str, str, int] | None:
    """For an interpreter argv: ("module", name, next index) or ("script", path, next index)."""
    i = 1
    while i < len(argv):
        token = argv[i]
        if token.startswith("--"):
            if token == "--check-hash-based-pycs":
                i += 2
                continue
            return None  # --help, --version, ... : not running anything
        if token.startswith("-") and len(token) > 1:
            for pos in range(1, len(token)):
                switch = token[pos]
                if switch in _PY_SWITCHES:
                    continue
                if switch == "m" or switch in _PY_VALUED:
                    rest = token[pos + 1 :]
                    if rest:
                        value, i = rest, i + 1
                    elif i + 1 < len(argv):
                        value, i = argv[i + 1], i + 2
                    else:
                        return None
                    if switch == "m":
                        return ("module", value, i)
                    break
                return None  # -c code, unknown switch
            else:
                i += 1
            continue
        if token == "-":
            return None  # program from stdin
        return ("script", token, i + 1)
    return None


def tcp_listen(table: bytes) -> Iterator[tuple[int, bytes, int]]:
    """(socket inode, local address as hex, local port) of each LISTEN row of
    ``/proc/PID/net/tcp{,6}``."""
    for line in table.split(b"\n")[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != b"0A":
            continue
        local = fields[1]
        colon = local.rfind(b":")
        try:
            port, inode = int(local[colon + 1 :], 16), int(fields[9])
        except ValueError:
            continue
        if colon >= 0 and port <= 0xFFFF:
            yield inode, local[:colon], port


#: The states of the rows the kernel prints first in a ``/proc/PID/net/tcp{,6}`` table, its
#: listening sockets (``LISTENING_PART`` in procfs.rs): LISTEN, a listener's pending requests
#: (SYN_RECV, kernels before 4.4) or one being closed (CLOSE), left in for safety.
_LISTENING_PART = (b"0A", b"03", b"07")


def tcp_row_after_listening(row: bytes) -> bool:
    """Whether a row of a ``/proc/PID/net/tcp{,6}`` table is in a state its listening part never
    shows: no socket listed from that row on listens. A malformed row says nothing (False)."""
    fields = row.split()
    return len(fields) > 3 and fields[3] not in _LISTENING_PART


def read_tcp_listening(path: str) -> bytes:
    """A ``/proc/PID/net/tcp{,6}`` table as far as it lists listening sockets (``read_listening``
    in procread.rs): the kernel prints those first, then walks every bucket of its
    established-connection hash (a millisecond or more even with few connections), which is read
    only up to its first row, in growing chunks. Raises OSError as ``open`` does."""
    data = b""
    chunk = 1024
    unchecked = None  # where the first row not yet looked at begins; the header is no row
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while True:
            part = os.read(fd, chunk)
            if not part:
                return data
            data += part
            if unchecked is None:
                header_end = data.find(b"\n")
                if header_end < 0:
                    continue
                unchecked = header_end + 1
            while (row_end := data.find(b"\n", unchecked)) >= 0:
                if tcp_row_after_listening(data[unchecked:row_end]):
                    return data[:unchecked]
                unchecked = row_end + 1
            chunk = min(chunk * 2, 16 * 1024)
    finally:
        os.close(fd)


#: (block size, bytes per block) by ggml type id (``ggml_type_traits`` in ggml/src/ggml.c and
#: ggml-common.h of ggml-org/llama.cpp 004eaba; NVFP4 and Q1_0 from gguf-py 0.19 constants.py).
TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8),
    28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
    40: (64, 36), 41: (128, 18),
}  # fmt: skip


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes from ``offset`` on, as far as the file goes (``pread`` may return
    less than asked before the end)."""
    parts = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return b"".join(parts)
