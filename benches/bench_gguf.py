"""GGUF header reading: the header of a 20 GB sparse file vs the same header in a 1 MB file, on
the Rust reader and the pure-Python twin, against the `gguf` package's GGUFReader on the 1 MB file
(it maps the whole file and walks every tensor).

Run from the repository root with the package installed (and `gguf`): `python benches/bench_gguf.py`.
Prints the median time of each and the ratios, measured in the same run on the same header.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from enginespec import _native
from enginespec._host.fallback import gguf as _pygguf

LIMITS = (64 << 20, 64 << 10, 4096)


def _median(fn: Callable[[], object], rounds: int = 200) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _write(path: Path) -> None:
    """A Llama-like header: 32 layers of 9 tensors, a 32000-token vocabulary."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(32)
    writer.add_context_length(4096)
    writer.add_token_list([f"tok{i}" for i in range(32000)])
    writer.add_token_scores([0.0] * 32000)
    for layer in range(32):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            writer.add_tensor_info(f"blk.{layer}.{name}.weight", (4, 32), np.dtype(np.float16), 256)
        for name in ("attn_norm", "ffn_norm"):
            writer.add_tensor_info(f"blk.{layer}.{name}.weight", (32,), np.dtype(np.float32), 128)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.gguf", Path(tmp) / "big.gguf"
        _write(small)
        header = small.stat().st_size
        os.truncate(small, 1 << 20)
        big.write_bytes(small.read_bytes()[:header])
        os.truncate(big, 20 << 30)
        results = {}
        for label, path in (("1 MB", small), ("20 GB sparse", big)):
            fd = os.open(path, os.O_RDONLY)
            try:
                results[f"rust, {label}"] = _median(lambda fd=fd: _native.read_gguf(fd, *LIMITS))
                results[f"python, {label}"] = _median(lambda fd=fd: _pygguf.read_gguf(fd, *LIMITS), 20)
            finally:
                os.close(fd)
        results["gguf.GGUFReader, 1 MB"] = _median(lambda: gguf.GGUFReader(str(small)), 5)
        print(f"header: {header} bytes (32000 tokens, 288 tensor infos)")
        for name, seconds in results.items():
            print(f"  {name:24} median {seconds * 1e3:8.3f} ms")
        rust_small, rust_big = results["rust, 1 MB"], results["rust, 20 GB sparse"]
        print(f"  20 GB / 1 MB (rust): {rust_big / rust_small:.2f}x")
        print(f"  gguf.GGUFReader / rust: {results['gguf.GGUFReader, 1 MB'] / rust_small:.1f}x")
        print(f"  python twin / rust: {results['python, 1 MB'] / rust_small:.1f}x")


if __name__ == "__main__":
    main()
