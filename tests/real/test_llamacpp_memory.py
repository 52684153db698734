"""The llama.cpp memory rule against the real llama-server (built by install() from the llama.cpp
that llama-cpp-python's sdist vendors): for each configuration the KV estimate is within 1% of the
`KV buffer size` it prints, the weights within 1 MiB of its `model buffer size`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from models import gguf_model

from enginespec import Config, InstallOptions, get_engine_spec
from enginespec.engines import llamacpp
from enginespec.modelfacts import gguf_facts

MiB = 1 << 20

#: (-c, -np, -ctk, -ctv, extra): the issue's eight, and three the padding rule changes.
CONFIGURATIONS = [
    (ctx, np_, ctk, ctk, ()) for ctx in (512, 4096) for np_ in (1, 4) for ctk in ("f16", "q8_0")
] + [
    (1000, 1, "f16", "f16", ()),  # padded to 1024 cells
    (4096, 3, "q8_0", "f16", ()),  # pad(4096 / 3, 256) = 1536 cells a slot, 3 streams
    (4096, 3, "f16", "f16", ("-kvu",)),  # one unified stream of 4096
]


def _logged(binary: str, model: Path, argv: list[str], log: Path, timeout: float = 120) -> str:
    """llama-server's start-up log until it has printed its KV and compute buffers; then killed."""
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            # -lv 4: the library's info lines (the buffer sizes) are below the server's default
            [binary, "-m", str(model), "--host", "127.0.0.1", "--port", "0", "-t", "1", "-lv", "4", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if "compute buffer size" in text or popen.poll() is not None:
                return text
            time.sleep(0.1)
        raise AssertionError(f"llama-server printed no buffers in {timeout} s: {text[-2000:]}")
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def test_kv_and_weight_estimates_match_what_llama_server_allocates(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("llamacpp")
    spec.install(InstallOptions(source=str(sdist), timeout=5400), config)
    binary = spec.get_runtime_info(config).binary_path
    assert binary is not None
    # 4 layers, 2 of 4 heads for K and V (GQA): KV rows of 128 values
    model = gguf_model(models_dir / "memory.gguf", hidden=256, layers=4, heads=4, kv_heads=2)
    facts = gguf_facts(str(model))
    checked = 0
    for ctx, slots, ctk, ctv, extra in CONFIGURATIONS:
        argv = ["-c", str(ctx), "-np", str(slots), "-ctk", ctk, "-ctv", ctv, *extra]
        if ctv != "f16":
            argv += ["-fa", "on"]  # a quantized V cache needs flash attention
        estimate = llamacpp.estimate_memory(facts, ["llama-server", *argv])
        log = _logged(binary, model, argv, tmp_path / f"llama-{checked}.log")
        logged = llamacpp.logged_memory(log)
        assert logged.kv_cache, log[-3000:]
        printed_kv = sum(logged.kv_cache.values())
        assert abs(estimate.kv_cache_bytes - printed_kv) <= 0.01 * printed_kv, (argv, estimate, logged)
        assert abs(estimate.weight_bytes - sum(logged.weights.values())) <= MiB, (argv, estimate, logged)
        print(
            f"{' '.join(argv)}: KV estimated {estimate.kv_cache_bytes} B, printed {printed_kv} B; "
            f"weights estimated {estimate.weight_bytes} B, printed {sum(logged.weights.values())} B"
        )
        checked += 1
    assert checked >= 8
