"""What both backends and the facade share, so that only the backend selector (``_host.backend``)
imports a pure-Python twin: the shapes of the records the scanners give, the argv limits both
scanners keep to, the argv words the matchers and the facade both read (as their namesakes in
``rust/matcher.rs``), and GGUF's type sizes."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Literal, NamedTuple

from enginespec.definition.signature import Role


class RawInvocation(NamedTuple):
    """What a matcher read from an argv (both backends build this very type)."""

    #: the index of the engine's signature, in the order the matcher was given them
    engine_index: int
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
    #: what the scanner's read set asked of the process (``None``: not asked, or not readable)
    environ: Environ | None
    cgroup: bytes | None
    netns: int | None
    #: whether it runs inside its engine's checkout (``None``: its program needs none)
    in_checkout: bool | None
    #: the character devices its tree holds, (fd, major, minor) by pid, for each pid whose fds
    #: could be listed at the last tree refresh (``None``: not asked, or not listed by this source)
    devices: dict[int, list[tuple[int, int, int]]] | None


class RawStats(NamedTuple):
    """What a scanner's last scan did (both backends build this very type; ``ScanStats`` in
    ``enginespec.scanning.scanner`` says what each count means)."""

    scanned: int
    new: int
    vanished: int
    unreadable: int
    restricted: int
    reread: int
    full_recheck: bool
    known: int


class Environ(NamedTuple):
    """The variables of a process's environment a read set names."""

    #: (name, value) in the environment's order, a repeated name as often as it is there
    vars: list[tuple[str, str]]
    #: the environment goes on beyond ``MAX_ENVIRON_BYTES``: only that much was read
    cut: bool


class ReadSet(NamedTuple):
    """What a scan reads of each engine process beyond its identity, argv, ``exe``, tree and
    sockets, declared as sysinfo's ``ProcessRefreshKind`` declares a refresh: read by the backend
    once per record, for engine processes only (``ReadSet`` in scan.rs)."""

    #: per engine (by its signature's index), the environment variables whose values are kept;
    #: ``environ`` is read only for an engine that names some
    environ: list[list[str]]
    #: read the process's ``cgroup`` (which container it runs in)
    cgroup: bool
    #: read which network namespace the process is in
    netns: bool
    #: per engine, the programs that are that engine only inside its checkout (TabbyAPI's
    #: ``main.py``), by name, with the files that must lie next to them
    #: (``LaunchForm.checkout_files``): whether they do is looked at as the process's owner,
    #: inside its root
    checkouts: Sequence[dict[str, tuple[str, ...]]] = ()
    #: list the character devices the process tree holds open (a GPU driver's nodes), from the
    #: listing of ``fd/`` its sockets come from, at each tree refresh (a process opens its
    #: devices after it starts: this one is not read once per record)
    devices: bool = False

    def checkout_paths(
        self, engine_index: int, argv: Sequence[str]
    ) -> tuple[str, ...] | Literal[False] | None:
        """The files of the checkout ``argv``'s program must be in, as the process names them,
        when its engine's read set names that program (``False``: it names none); ``None`` for
        a directory never looked into (``ReadSet::checkout_paths`` in scan.rs)."""
        programs = self.checkouts[engine_index] if engine_index < len(self.checkouts) else {}
        if not programs:  # most engines name no such program: their argv is not looked at
            return False
        program = program_path(argv)
        files = programs.get(basename(program))
        return False if files is None else checkout_paths(program, files)


#: Longest program directory a checkout is looked for in, in bytes (a path, as argv gives it).
MAX_CHECKOUT_DIRECTORY = 4096


def checkout_paths(program: str, files: Sequence[str]) -> tuple[str, ...] | None:
    """``files``, which must lie next to ``program`` (as argv names it), as the process would
    name them (relative ones from its working directory); ``None`` for a directory that is never
    looked into: one with a ``..`` component, or longer than a path."""
    directory = program[: max(program.rfind("/"), program.rfind("\\")) + 1]
    parts = directory.replace("\\", "/").split("/")
    if len(os.fsencode(directory)) > MAX_CHECKOUT_DIRECTORY or ".." in parts:
        return None
    return tuple(directory + name for name in files)


#: At most this much of a process's environment is read (Linux caps argv and environment together
#: at 6 MiB); ``MAX_ENVIRON_BYTES`` of scan.rs.
MAX_ENVIRON_BYTES = 1 << 20
#: At most this much of a process's ``cgroup`` is read (a path per hierarchy, a few hundred bytes).
MAX_CGROUP_BYTES = 1 << 16


class Listening(NamedTuple):
    """A LISTEN socket of a network namespace's TCP tables (both backends' ``ProcReader`` build
    this very type)."""

    inode: int
    #: the local address in network byte order: 4 bytes, or 16 (``tcp6``)
    address: bytes
    port: int


#: What a cgroup path says runs a container (``Container.runtime``).
ContainerRuntime = Literal["docker", "podman", "containerd", "cri-o", "kubernetes"]
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


def program_path(argv: Sequence[str]) -> str:
    """The program argv runs: its first word, or the script an interpreter runs (a console
    script: ``[python3, /venv/bin/vllm, ...]``); ``""`` for none (``program_path`` of
    matcher.rs)."""
    program = argv[0] if argv else ""
    if is_python(basename(program)):
        target = python_target(argv)
        program = target[1] if target is not None and target[0] == "script" else ""
    return program


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


#: ASCII whitespace as Rust's ``u8::is_ascii_whitespace`` has it: no vertical tab, on which
#: ``bytes.split()`` also splits.
_KERNEL_SPACE = re.compile(rb"[ \t\n\x0c\r]")
_DIGITS = {10: re.compile(rb"[+-]?[0-9]+"), 16: re.compile(rb"[+-]?[0-9A-Fa-f]+")}
U64_MAX = 2**64 - 1


def kernel_fields(data: bytes) -> list[bytes]:
    """``data`` split at runs of whitespace, as procfs.rs splits the lines of a kernel file."""
    return [field for field in _KERNEL_SPACE.split(data) if field]


def kernel_int(token: bytes, high: int, low: int = 0, base: int = 10) -> int | None:
    """``token`` as Rust's ``parse`` (or ``from_str_radix``) reads an integer of the type spanning
    [low, high]: a sign (``-`` only for a signed type) and ASCII digits, nothing else (``int()``
    would also take ``1_000``, ``0x``, spaces and other scripts' digits); ``None`` if not one."""
    if _DIGITS[base].fullmatch(token) is None or (low == 0 and token.startswith(b"-")):
        return None
    value = int(token, base)
    return value if low <= value <= high else None


def tcp_address(hex_address: bytes) -> bytes | None:
    """Network-order bytes of an address the kernel printed as host-order 32-bit words."""
    if len(hex_address) not in (8, 32):
        return None
    words = [kernel_int(hex_address[i : i + 8], 0xFFFFFFFF, base=16) for i in range(0, len(hex_address), 8)]
    if any(word is None for word in words):
        return None
    return b"".join(word.to_bytes(4, sys.byteorder) for word in words if word is not None)


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
