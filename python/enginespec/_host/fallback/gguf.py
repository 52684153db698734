"""Pure-Python twin of ``rust/gguf.rs``: the header of a GGUF model file (versions 2 and 3 of ggml's
``docs/gguf.md``, either byte order), the metadata and the tensor infos, never the tensor data.

The file is untrusted: every count and length is checked against what is left of the file before
anything is read, the header is read up to a cap, long strings and arrays are skipped (their type
and length kept). Both backends give the same header, or a ``ValueError`` with the same message, for
any input.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import TypeAlias

from enginespec._host.shapes import TYPE_SIZES, pread_all

#: A metadata value: int, float, bool, str; a string too long to keep as ``("long", length)``;
#: an array as ``(element type, length, items or None when not kept)``.
Value: TypeAlias = "int | float | bool | str | tuple[str, int] | tuple[int, int, list[Value] | None]"
#: (name, ggml type, dims, offset in the data section, bytes or None for an unknown type).
RawTensor: TypeAlias = tuple[str, int, list[int], int, int | None]
#: (version, big endian, metadata as (key, value type, value), tensors, data offset).
RawHeader: TypeAlias = tuple[int, bool, list[tuple[str, int, Value]], list[RawTensor], int]

TYPE_STRING = 8
TYPE_ARRAY = 9
_CHUNK = 64 << 10
_MAX_DEPTH = 8
_MAX_DIMS = 4

_MIN_SIZE = {0: 1, 1: 1, 7: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, TYPE_ARRAY: 12}
_U64 = (1 << 64) - 1


def _min_size(t: int) -> int:
    return _MIN_SIZE.get(t, 8)


def escape(data: bytes) -> str:
    """Bytes shown in a message: printable ASCII as is, the rest as ``\\xNN``; at most 64."""
    out = "".join(chr(b) if 0x20 <= b < 0x7F and b not in b"'\\" else f"\\x{b:02x}" for b in data[:64])
    return f"'{out}{'...' if len(data) > 64 else ''}'"


class _Reader:
    def __init__(self, fd: int, size: int, cap: int) -> None:
        self.fd = fd
        self.size = size
        self.cap = cap
        self.end = min(size, cap)
        self.pos = 0
        self.buf = b""
        self.buf_start = 0
        self.order = "<"

    def check(self, n: int, what: str) -> None:
        left = self.end - self.pos
        if n <= left:
            return
        if self.end == self.size:
            raise ValueError(f"{what} at offset {self.pos}: needs {n} bytes, the file has {left} left")
        raise ValueError(
            f"{what} at offset {self.pos}: the header is longer than the cap of {self.cap} bytes"
        )

    def count_fits(self, count: int, each: int, what: str, at: int) -> None:
        left = self.end - self.pos
        if count * each <= min(left, _U64):
            return
        raise ValueError(f"{what} {count} at offset {at}: more than the {left} bytes left can hold")

    def skip(self, n: int, what: str) -> None:
        self.check(n, what)
        self.pos += n

    def take(self, n: int, what: str) -> bytes:
        self.check(n, what)
        if self.pos < self.buf_start or self.pos + n > self.buf_start + len(self.buf):
            want = min(max(n, _CHUNK), self.end - self.pos)
            try:
                self.buf = pread_all(self.fd, want, self.pos)
            except OSError as e:
                raise ValueError(f"{what} at offset {self.pos}: {e}") from None
            self.buf_start = self.pos
            if len(self.buf) < n:
                raise ValueError(f"{what} at offset {self.pos}: the file ended while being read")
        at = self.pos - self.buf_start
        self.pos += n
        return self.buf[at : at + n]

    def number(self, fmt: str, what: str) -> int | float:
        size = struct.calcsize(fmt)
        value: int | float = struct.unpack(self.order + fmt, self.take(size, what))[0]
        return value

    def u32(self, what: str) -> int:
        return int(self.number("I", what))

    def u64(self, what: str) -> int:
        return int(self.number("Q", what))

    def string(self, keep: int, what: str) -> str | int:
        """The string, or its length (an int) when longer than ``keep``."""
        length = self.u64(what)
        if length > keep:
            self.skip(length, what)
            return length
        return self.take(length, what).decode("utf-8", "replace")

    def value(self, t: int, depth: int, keep: bool, max_string: int, max_items: int, what: str) -> Value:
        if not keep and t not in (TYPE_STRING, TYPE_ARRAY) and t <= 12:
            self.skip(_min_size(t), what)
            return False
        if t in _FORMATS:
            value = self.number(_FORMATS[t], what)
            return float(value) if t in (6, 12) else int(value)
        if t == 7:
            flag = self.take(1, what)[0]
            if flag > 1:
                raise ValueError(f"{what}: bool of value {flag}")
            return flag == 1
        if t == TYPE_STRING:
            if not keep:
                length = self.u64(what)
                self.skip(length, what)
                return ("long", length)
            text = self.string(max_string, what)
            return ("long", text) if isinstance(text, int) else text
        if t == TYPE_ARRAY:
            if depth >= _MAX_DEPTH:
                raise ValueError(f"{what}: arrays nested deeper than {_MAX_DEPTH}")
            elem = self.u32(what)
            at = self.pos
            count = self.u64(what)
            if elem > 12:
                raise ValueError(f"{what}: array of unknown type {elem}")
            self.count_fits(count, _min_size(elem), f"{what}: array length", at)
            kept = keep and count <= max_items and elem != TYPE_ARRAY
            if not kept and elem not in (TYPE_STRING, TYPE_ARRAY):
                self.skip(count * _min_size(elem), what)
                return (elem, count, None)
            items = []
            for _ in range(count):
                item = self.value(elem, depth + 1, kept, max_string, max_items, what)
                if kept:
                    items.append(item)
            return (elem, count, items if kept else None)
        raise ValueError(f"{what}: unknown value type {t}")


_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 10: "Q", 11: "q", 12: "d"}


def _tensor_bytes(dims: list[int], ggml_type: int) -> int | None:
    if ggml_type not in TYPE_SIZES:
        return None
    block, size = TYPE_SIZES[ggml_type]
    first = dims[0] if dims else 1
    if first % block:
        raise ValueError(f"first dimension {first} is not a multiple of the block size {block}")
    total = first // block * size
    for d in [1, *dims[1:]]:
        total *= d
        if total > _U64:
            raise ValueError("size overflows 64 bits")
    return total


def read_header(
    fd: int, size: int, max_header_bytes: int, max_string_bytes: int, max_array_items: int
) -> RawHeader:
    """The header of the GGUF file of ``size`` bytes open at ``fd`` (read with ``pread``)."""
    r = _Reader(fd, size, max_header_bytes)
    magic = r.take(4, "magic")
    if magic != b"GGUF":
        raise ValueError(f"not a GGUF file (magic {escape(magic)})")
    version = r.u32("version")
    big_endian = False
    if version & 0xFFFF == 0:
        big_endian = True
        r.order = ">"
        version = int.from_bytes(version.to_bytes(4, "little"), "big")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}: only 2 and 3 are read")
    tensor_count = r.u64("tensor count")
    kv_count = r.u64("metadata count")
    r.count_fits(kv_count, 13, "metadata count", 16)
    metadata: list[tuple[str, int, Value]] = []
    alignment = 32
    for index in range(kv_count):
        key = r.string(max_string_bytes, "metadata key")
        if isinstance(key, int):
            raise ValueError(f"metadata key {index}: {key} bytes long")
        what = f"metadata {escape(key.encode())}"
        t = r.u32(what)
        value = r.value(t, 0, True, max_string_bytes, max_array_items, what)
        if key == "general.alignment":
            if not (t == 4 and isinstance(value, int) and value > 0 and value & (value - 1) == 0):
                raise ValueError(f"{what}: not a power of two as uint32")
            alignment = value
        metadata.append((key, t, value))
    r.count_fits(tensor_count, 24, "tensor count", 8)
    tensors: list[RawTensor] = []
    for index in range(tensor_count):
        name = r.string(max_string_bytes, "tensor name")
        if isinstance(name, int):
            raise ValueError(f"tensor {index}: name {name} bytes long")
        what = f"tensor {escape(name.encode())}"
        n_dims = r.u32(what)
        if n_dims > _MAX_DIMS:
            raise ValueError(f"{what}: {n_dims} dimensions (at most {_MAX_DIMS})")
        dims = [r.u64(what) for _ in range(n_dims)]
        ggml_type = r.u32(what)
        offset = r.u64(what)
        if offset % alignment:
            raise ValueError(f"{what}: offset {offset} not aligned to {alignment}")
        try:
            nbytes = _tensor_bytes(dims, ggml_type)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        tensors.append((name, ggml_type, dims, offset, nbytes))
    data_offset = -(-r.pos // alignment) * alignment
    return (version, big_endian, metadata, tensors, data_offset)


def read_gguf(fd: int, max_header_bytes: int, max_string_bytes: int, max_array_items: int) -> RawHeader:
    """The header of the GGUF file open at ``fd`` (a regular file; the fd is not closed)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    return read_header(fd, info.st_size, max_header_bytes, max_string_bytes, max_array_items)
