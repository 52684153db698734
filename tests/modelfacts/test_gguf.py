"""The GGUF header reader (rust/gguf.rs, its twin _host/fallback/gguf.py) against the `gguf`
package's own reader on random files its GGUFWriter writes, and on hostile files: bounded, an error
naming the offset."""

from __future__ import annotations

import os
import random
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from enginespec._host import backend as _backend
from enginespec._host.fallback import gguf as _pygguf
from enginespec._host.shapes import TYPE_SIZES

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

LIMITS = (64 << 20, 64 << 10, 4096)
VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType


@contextmanager
def opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def read(path: Path, limits: tuple[int, int, int] = LIMITS) -> _pygguf.RawHeader:
    with opened(path) as fd:
        return _backend.read_gguf(fd, *limits)


_SCALARS = {
    VT.UINT8: (0, 255),
    VT.INT8: (-128, 127),
    VT.UINT16: (0, 65535),
    VT.INT16: (-32768, 32767),
    VT.UINT32: (0, 2**32 - 1),
    VT.INT32: (-(2**31), 2**31 - 1),
    VT.UINT64: (0, 2**64 - 1),
    VT.INT64: (-(2**63), 2**63 - 1),
}


def _scalar(rng: random.Random, vtype: Any) -> Any:
    if vtype in _SCALARS:
        return rng.randint(*_SCALARS[vtype])
    if vtype == VT.FLOAT32:
        return float(np.float32(rng.uniform(-1e6, 1e6)))
    if vtype == VT.FLOAT64:
        return rng.uniform(-1e300, 1e300)
    if vtype == VT.BOOL:
        return rng.random() < 0.5
    alphabet = "abcé€ \n\x00😀"
    return "".join(rng.choice(alphabet) for _ in range(rng.choice((0, 1, 5, 40, 300))))


#: Tensor types the writer is given raw bytes for; Q8_1 is left out: gguf-py says 40 bytes a block,
#: ggml's block_q8_1 (ggml-common.h) is 36, which the reader follows.
_TENSOR_TYPES = [t for t in QT if t != QT.Q8_1 and t in gguf.GGML_QUANT_SIZES]


def random_file(path: Path, rng: random.Random) -> None:
    endian = gguf.GGUFEndian.BIG if rng.random() < 0.2 else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(str(path), rng.choice(["llama", "qwen3", "gemma3", "x"]), endianess=endian)
    if rng.random() < 0.3:
        writer.add_custom_alignment(rng.choice([8, 32, 64, 256]))
    for index in range(rng.randint(0, 25)):
        key = f"k{index}." + rng.choice(["a", "context_length", "é", "x" * 70])
        vtype = rng.choice([v for v in VT if v != VT.ARRAY] + [VT.ARRAY] * 3)
        if vtype == VT.ARRAY:
            sub = rng.choice([v for v in VT if v != VT.ARRAY])
            length = rng.choice([1, 3, 100, LIMITS[2] + 1])  # the writer refuses empty arrays
            writer.add_key_value(key, [_scalar(rng, sub) for _ in range(length)], VT.ARRAY, sub)
        else:
            writer.add_key_value(key, _scalar(rng, vtype), vtype)
    for index in range(rng.randint(0, 12)):
        qtype = rng.choice(_TENSOR_TYPES)
        _block, size = gguf.GGML_QUANT_SIZES[qtype]
        # rows of whole blocks, as bytes (the writer turns the byte shape into the element shape)
        shape = [rng.randint(1, 3) for _ in range(rng.randint(0, 3))] + [size * rng.randint(1, 3)]
        writer.add_tensor(
            f"blk.{index}.w", np.zeros(shape, np.uint8), raw_dtype=qtype, tensor_endianess=endian
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _theirs(path: Path) -> tuple[list[tuple[str, int, Any]], list[tuple[str, int, list[int], int, int]]]:
    reader = gguf.GGUFReader(str(path))
    fields = []
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):  # the reader's own entries for the header
            continue
        main = int(field.types[0])
        if main == VT.ARRAY:
            value: Any = (int(field.types[-1]), len(field.data), field.contents())
        else:
            value = field.contents()
        fields.append((field.name, main, value))
    tensors = [
        (t.name, int(t.tensor_type), [int(d) for d in t.field.parts[3]], t.data_offset, int(t.n_bytes))
        for t in reader.tensors
    ]
    return fields, tensors


def _ours_as_theirs(header: _pygguf.RawHeader, path: Path) -> tuple[list[Any], list[Any]]:
    _version, _big, metadata, tensors, data_offset = header
    fields = []
    for key, vtype, value in metadata:
        if vtype == VT.ARRAY:
            elem, count, items = value  # type: ignore[misc]
            fields.append((key, vtype, (elem, count, items if items is not None else "skipped")))
        else:
            fields.append((key, vtype, value))
    ours = [(name, t, dims, data_offset + offset, nbytes) for name, t, dims, offset, nbytes in tensors]
    return fields, ours


def test_reads_what_the_gguf_package_reads_on_random_files(tmp_path: Path) -> None:
    rng = random.Random(24)
    skipped_arrays = 0
    for number in range(220):
        path = tmp_path / f"{number}.gguf"
        random_file(path, rng)
        header = read(path)
        fields, tensors = _ours_as_theirs(header, path)
        their_fields, their_tensors = _theirs(path)
        for ours, theirs in zip(fields, their_fields, strict=True):
            key, vtype, value = ours
            assert (key, vtype) == theirs[:2], number
            if vtype == VT.ARRAY and value[2] == "skipped":
                # longer than the items kept: its type and length are
                assert value[:2] == theirs[2][:2], (number, key)
                assert value[1] > LIMITS[2], (number, key)
                skipped_arrays += 1
            elif vtype == VT.ARRAY and value[0] in (VT.FLOAT32, VT.FLOAT64):
                assert value[:2] == theirs[2][:2]
                assert np.array_equal(np.array(value[2]), np.array(theirs[2][2]), equal_nan=True)
            else:
                assert value == theirs[2], (number, key)
        assert tensors == their_tensors, number
        assert header[0] == 3
        reader = gguf.GGUFReader(str(path))
        assert header[1] == (reader.endianess == gguf.GGUFEndian.BIG)
        if reader.tensors:
            assert header[4] == min(t.data_offset for t in reader.tensors)
        path.unlink()
    assert skipped_arrays > 0


def test_type_sizes_are_ggmls() -> None:
    theirs = {int(t): size for t, size in gguf.GGML_QUANT_SIZES.items()}
    assert theirs.pop(int(QT.Q8_1)) == (32, 40)  # gguf-py's stale figure; ggml-common.h: 36
    ours = dict(TYPE_SIZES)
    assert ours.pop(int(QT.Q8_1)) == (32, 36)
    assert ours == theirs


def _string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def _header(tensors: int, kvs: int, body: bytes, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kvs) + body


def _kv_u32(key: bytes, value: int) -> bytes:
    return _string(key) + struct.pack("<II", 4, value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + b"\0" * 60, "not a GGUF file (magic 'GGML')"),
        (b"GG", "magic at offset 0: needs 4 bytes, the file has 2 left"),
        (_header(0, 0, b"", version=1), "GGUF version 1: only 2 and 3 are read"),
        (
            _header(0, 2**63, b""),
            "metadata count 9223372036854775808 at offset 16: more than the 0 bytes left",
        ),
        (_header(2**63, 0, b""), "tensor count 9223372036854775808 at offset 8: more than the 0 bytes left"),
        (
            _header(0, 1, struct.pack("<Q", 2**62) + b"key" + b"\0" * 2),
            "metadata key at offset 32: needs 4611686018427387904 bytes, the file has 5 left",
        ),
        (
            _header(0, 1, _string(b"k") + struct.pack("<IQ", 8, 1000) + b"short"),
            "metadata 'k' at offset 45: needs 1000 bytes, the file has 5 left",
        ),
        (
            _header(0, 1, _string(b"k") + struct.pack("<IIQ", 9, 4, 2**61) + b"1234"),
            "metadata 'k': array length 2305843009213693952 at offset 41: more than the 4 bytes left",
        ),
        (
            _header(0, 1, _string(b"k") + struct.pack("<IIQ", 9, 8, 2**60) + b"1234"),
            "metadata 'k': array length 1152921504606846976 at offset 41: more than the 4 bytes left",
        ),
        (
            _header(0, 1, _string(b"k") + struct.pack("<I", 13) + b"\0" * 8),
            "metadata 'k': unknown value type 13",
        ),
        (_header(0, 1, _string(b"k") + struct.pack("<IB", 7, 2)), "metadata 'k': bool of value 2"),
        (
            _header(0, 1, _string(b"general.alignment") + struct.pack("<II", 4, 24)),
            "metadata 'general.alignment': not a power of two as uint32",
        ),
        (
            _header(1, 0, _string(b"t") + struct.pack("<I", 5) + b"\0" * 60),
            "tensor 't': 5 dimensions (at most 4)",
        ),
        (
            _header(1, 0, _string(b"t") + struct.pack("<IQIQ", 1, 33, 2, 0)),
            "tensor 't': first dimension 33 is not a multiple of the block size 32",
        ),
        (
            _header(1, 0, _string(b"t") + struct.pack("<IQQIQ", 2, 2**40, 2**40, 0, 0)),
            "tensor 't': size overflows 64 bits",
        ),
        (
            _header(1, 0, _string(b"t") + struct.pack("<IQIQ", 1, 4, 0, 7)),
            "tensor 't': offset 7 not aligned to 32",
        ),
        (
            _header(0, 1, _string(b"\x1b[2J") + b"\0"),
            "metadata '\\x1b[2J' at offset 36: needs 4 bytes, the file has 1 left",
        ),
    ],
)
def test_hostile_headers_are_refused_naming_where(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        read(path)


def test_nested_arrays_stop_at_a_depth(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", 9, 1) * 20 + struct.pack("<IQ", 4, 0)
    path = tmp_path / "m.gguf"
    path.write_bytes(_header(0, 1, _string(b"k") + struct.pack("<I", 9) + nested))
    with pytest.raises(ValueError, match=r"^metadata 'k': arrays nested deeper than 8$"):
        read(path)


def test_header_longer_than_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(_header(0, 1, _string(b"a") + struct.pack("<I", 8) + _string(b"x" * 100)))
    assert read(path)[2] == [("a", 8, "x" * 100)]
    with pytest.raises(
        ValueError, match=r"^metadata 'a' at offset 37: the header is longer than the cap of 40 bytes$"
    ):
        read(path, (40, 64, 64))


def test_long_strings_and_arrays_keep_their_length(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    body = _string(b"s") + struct.pack("<I", 8) + _string(b"x" * 100)
    body += _string(b"a") + struct.pack("<IIQ", 9, 4, 100) + b"\1\0\0\0" * 100
    path.write_bytes(_header(0, 2, body))
    assert read(path, (1 << 20, 99, 99))[2] == [("s", 8, ("long", 100)), ("a", 9, (4, 100, None))]
    assert read(path, (1 << 20, 100, 100))[2][1] == ("a", 9, (4, 100, [1] * 100))


def test_not_a_regular_file(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match=r"^not a regular file$"):
            _backend.read_gguf(fd, *LIMITS)
    finally:
        os.close(fd)


def test_a_20_gb_sparse_file_reads_its_header_only(tmp_path: Path) -> None:
    small = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(small), "llama")
    writer.add_block_count(2)
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    big = tmp_path / "big.gguf"
    big.write_bytes(small.read_bytes())
    os.truncate(big, 20 << 30)
    assert read(big) == read(small)


def _valid_file(tmp_path: Path) -> bytes:
    path = tmp_path / "valid.gguf"
    random_file(path, random.Random(7))
    return path.read_bytes()


@pytest.mark.parametrize("seed", range(3))
def test_backends_agree_on_mutated_headers(tmp_path: Path, seed: int) -> None:
    """Every truncation and random overwrite of a valid header: the Rust reader and the Python twin
    give the same header or the same error."""
    native = pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")
    rng = random.Random(seed)
    data = bytearray(_valid_file(tmp_path))
    path = tmp_path / "m.gguf"
    errors = 0
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(min(len(mutated), 4096))
            mutated[at : at + 8] = rng.choice([rng.randbytes(rng.randint(1, 8)), struct.pack("<Q", 2**63)])
        mutated = mutated[: rng.choice([len(mutated), rng.randrange(len(mutated) + 1)])]
        path.write_bytes(bytes(mutated))
        outcomes = []
        with opened(path) as fd:
            for reader in (native.read_gguf, _pygguf.read_gguf):
                try:
                    outcomes.append(("ok", reader(fd, *LIMITS)))
                except ValueError as e:
                    outcomes.append(("error", str(e)))
        assert outcomes[0] == outcomes[1], bytes(mutated[:64])
        errors += outcomes[0][0] == "error"
    assert 50 < errors < 300  # both refusals and headers that still parse were compared
